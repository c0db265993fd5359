//! git-steps' engine: resume-equivalent agent steps on git.
//!
//! An agent run is a sequence of recorded decisions (steps). Each applied
//! step is exactly one commit whose trailer block — `Step-Id`, `Step-Run`,
//! `Step-Decision`, `Step-Index` — is its receipt: the hunk and the receipt
//! are one object, so they become durable together when the branch update
//! is.
//!
//! **The invariant.** A resumed run produces the same artifact, with the same
//! fingerprint, as an uninterrupted run of the same steps — or it refuses
//! loudly and changes nothing. Rerunning the same `apply` after a crash *is*
//! the resume: steps with receipts are skipped, a redelivered step lands once,
//! a different decision under a used id or a duplicated hunk is refused.
//!
//! Above this crate: `git-steps-matrix` (the crash matrix, which drives
//! the binary) and `git-steps`, the command line and the MCP server,
//! which re-exports this crate whole.
//!
//! ## Crates and layers
//!
//! Below the engine sit three crates the compiler keeps apart from it;
//! none of them can import it (cargo would not build a cycle):
//!
//! - [`error`] (`git-steps-error`): typed errors, refusals and the SPEC's
//!   exit codes;
//! - [`plan`] (`git-steps-plan`): what an agent decided — the step object
//!   and its digest, the path rules, the edit formats, canonical JSON, the
//!   schema — with no libgit2, OpenSSL or tokio;
//! - `git-steps-io`: git and disk I/O, re-exported here as [`keys`],
//!   [`backoff`], [`os`], [`git`], [`sign`], [`crash`], [`progress`],
//!   [`lock`] and [`flush`]; the one crate with `unsafe` code. This crate
//!   forbids it.
//!
//! `ls src` shows the engine's domains: `tree/` (steps applied to trees in
//! the object database), `history/` (receipts and the scan of them),
//! `sync/` (the durable remote), `workdir/` (this box's worktree and
//! index), `run/` (sessions, the plan loop and the agent loop), and at the
//! top level [`settings`].
//!
//! Every module uses only the crates below, the modules listed before it
//! here, and its own submodules; the test `layers_point_down` (below)
//! reads this list and every source file (and `git-steps-io`'s list and
//! files), and fails on an import that points up. Bottom to top:
//!
//! 1. [`tree::guard`]: the path rules applied to whole trees;
//! 2. [`tree::hunks`]: hunk identity and the duplicated-hunk count;
//! 3. [`tree::fingerprint`]: artifact and history fingerprints;
//! 4. [`tree::convert`]: end-of-line conversion and filter drivers, as git applies them;
//! 5. [`tree::build`]: a step applied to a tree in the object database;
//! 6. [`history::trailers`]: git's own trailer reader, ported;
//! 7. [`history::receipt`]: the receipt trailer block, written and read;
//! 8. [`history::packscan`]: a long run's commits read in bulk from the packs;
//! 9. [`history::ledger`]: the history scan into the applied set;
//! 10. [`history::replay`]: the steps' hunks replayed into the hunks still in effect;
//! 11. [`history::shared`]: the shared hunk cache's format, checked against the ledger;
//! 12. [`history::cache`]: the receipt cache, a verified copy of the ledger;
//! 13. [`settings`]: `steps.*` config and the run's durable domain, as plain data;
//! 14. [`workdir::worktree`]: bringing worktree and index up to a step;
//! 15. [`workdir::torn`]: the index and the run's branch, mended after a power cut tore them;
//! 16. [`workdir::repair`]: finishing a worktree a crashed step left behind;
//! 17. [`sync::remote`]: fetch and compare-and-swap push of the durable branch;
//! 18. [`sync::share`]: publishing and fetching the shared hunk cache;
//! 19. [`sync::reconcile`]: bringing local and durable branches together;
//! 20. [`run::decider`]: asking the external decider for the next step;
//! 20. [`run::ahead`]: the decider's answer asked ahead, kept on this box until it is used;
//! 21. [`run::chain`]: the run's side refs (journal, outcomes, kept run), moved by compare-and-swap;
//! 22. [`run::journal`]: recorded decisions, durable before they are applied;
//! 23. [`run::outcomes`]: the recorded outcomes of a run's effects;
//! 24. [`run::supervisor`]: commands that die with their runner (effects; hooks off Linux);
//! 24. [`run::deliver`]: one effect delivered, tried with its idempotency key;
//! 24. [`run::authority`]: who may make an effect happen from this box, and where a secret may go;
//! 25. [`run::agreement`]: the plan against the history;
//! 26. [`run::hooks`]: `pre-commit` and `commit-msg` as checks (`steps.hooks`);
//! 27. [`run::staging`]: the steps staged and not durable yet;
//! 28. [`run::bringup`]: a box brought up before the first step: lock, repair, reconcile;
//! 28. [`run::session`]: one run from lock to fingerprints, and its `Reporter`;
//! 29. [`run::effects`]: a session's effects, delivered once their steps are durable;
//! 30. [`run::branch`]: the run's branch moved, on the remote (the commit point) and here;
//! 31. [`run::commit`]: one step's order of writes;
//! 32. [`run::overlap`]: the agent loop's step with its push behind the decider;
//! 33. [`run::provenance`]: the run kept under refs/steps/runs/, its squash message, a merge checked;
//! 34. [`run::engine`]: the plan loop (`apply`);
//! 35. [`run::record`]: the worktree's own changes recorded as a step (`record`);
//! 36. [`run::adopt`]: commits without a receipt joining the run (`adopt`);
//! 37. [`run::undo`]: rewinding as a step (`undo`);
//! 38. [`run::agent`]: the agent loop (`run --decider`);
//! 39. [`run::inspect`]: status, log, verify, fingerprint.

#![forbid(unsafe_code)]

pub mod history;
pub mod run;
pub mod settings;
pub mod sync;
pub mod tree;
pub mod workdir;

/// Typed errors, refusals and the SPEC's exit codes: the
/// `git-steps-error` crate, below everything.
pub use git_steps_error as error;
/// git and disk I/O: the `git-steps-io` crate (libgit2, git's files
/// written as git writes them, locks, flushing, signing, crash points,
/// the system calls beyond std), the one crate with `unsafe` code.
pub use git_steps_io::{backoff, crash, flush, git, keys, lock, os, progress, sign};
/// What an agent decided: the `git-steps-plan` crate (the step format, the
/// edit formats, canonical JSON, the schema), which cannot import the
/// engine and builds without libgit2.
pub use git_steps_plan as plan;

pub use error::{Error, Refusal, RefusalKind, Result};

#[cfg(test)]
mod tests {
    //! The layering above, checked against the source.

    use std::collections::BTreeSet;
    use std::path::Path;

    /// The layers, bottom to top, as this file's doc comment lists them.
    fn layers() -> Vec<String> {
        layers_in(include_str!("lib.rs"))
    }

    /// The layers of `git-steps-io`, as its `lib.rs` lists them.
    const IO_LIB: &str = include_str!("../../io/src/lib.rs");

    fn layers_in(lib: &str) -> Vec<String> {
        lib.lines()
            .filter_map(|l| {
                let rest = l.strip_prefix("//! ")?;
                let (n, rest) = rest.split_once(". [`")?;
                n.parse::<usize>().ok()?;
                Some(rest.split_once('`')?.0.to_string())
            })
            .collect()
    }

    /// The module a source file is (`src/sync/remote/local.rs` →
    /// `sync::remote::local`).
    fn module_of(src: &Path, file: &Path) -> String {
        let rel = file.strip_prefix(src).unwrap().with_extension("");
        let mut parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts.last().map(String::as_str) == Some("mod") {
            parts.pop();
        }
        parts.join("::")
    }

    /// The layer a module belongs to: the longest listed prefix.
    fn layer_of(layers: &[String], module: &str) -> Option<usize> {
        layers
            .iter()
            .enumerate()
            .filter(|(_, l)| module == l.as_str() || module.starts_with(&format!("{l}::")))
            .max_by_key(|(_, l)| l.len())
            .map(|(i, _)| i)
    }

    /// Every module path a file's code (not its comments, not its tests)
    /// names: `crate::a::b`, `super::x`, and grouped `crate::a::{b, c}`.
    fn references(module: &str, is_mod_rs: bool, code: &str) -> BTreeSet<String> {
        // Test code, and test helpers shared across crates (`testing`).
        let code = code.split("#[cfg(test)]").next().unwrap();
        let code: String = code
            .split("#[cfg(any(test, feature = \"testing\"))]")
            .next()
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let mut out = BTreeSet::new();
        // `super` of `a::b` (a file) is `a`; of `a::b` (a mod.rs) too, the
        // module itself being `a::b`.
        let mut parent: Vec<&str> = module.split("::").collect();
        parent.pop();
        let _ = is_mod_rs;
        let bytes = code.as_bytes();
        let mut i = 0;
        while i < code.len() {
            let rest = &code[i..];
            let (base, skip) = if rest.starts_with("crate::") {
                (Vec::new(), "crate::".len())
            } else if rest.starts_with("super::")
                && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'))
            {
                let mut base = parent.clone();
                let mut skip = "super::".len();
                while code[i + skip..].starts_with("super::") {
                    base.pop();
                    skip += "super::".len();
                }
                (base, skip)
            } else {
                i += rest.chars().next().unwrap().len_utf8();
                continue;
            };
            let tail = &code[i + skip..];
            let path: String = tail
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let mut segs: Vec<String> = base.iter().map(|s| s.to_string()).collect();
            segs.extend(
                path.split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            );
            let after = &tail[path.len()..];
            if (path.is_empty() || path.ends_with("::")) && after.starts_with('{') {
                let group = &after[1..after.find('}').unwrap_or(after.len() - 1)];
                for item in group.split(',') {
                    let first = item.trim().split("::").next().unwrap_or("").trim();
                    match first {
                        "" => {}
                        "self" => {
                            out.insert(segs.join("::"));
                        }
                        // `crate::{lock, workdir::worktree}`: each item is
                        // a path from the crate's root.
                        _ if segs.is_empty() => {
                            let path = item.trim().split(" as ").next().unwrap_or("");
                            out.insert(path.trim().to_string());
                        }
                        _ => {
                            out.insert(format!("{}::{first}", segs.join("::")));
                        }
                    }
                }
            } else {
                out.insert(segs.join("::"));
            }
            i += skip + path.len();
        }
        out
    }

    /// Every source file of the workspace: the command line's `src/` and each
    /// crate's under `crates/`.
    fn workspace_files() -> Vec<std::path::PathBuf> {
        // This crate is crates/core.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut all = Vec::new();
        files(&root.join("src"), &mut all);
        for e in std::fs::read_dir(root.join("crates")).unwrap() {
            files(&e.unwrap().path().join("src"), &mut all);
        }
        assert!(all.iter().any(|f| f.ends_with("crates/plan/src/step.rs")));
        all
    }

    fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    /// No source file holds more than 600 lines before its tests: a file
    /// that grows past that has two concerns, and gets a submodule.
    #[test]
    fn no_file_holds_more_than_600_lines_of_code() {
        let mut long = Vec::new();
        for p in workspace_files() {
            let text = std::fs::read_to_string(&p).unwrap();
            let code = text.split("\n#[cfg(test)]").next().unwrap();
            let n = code.lines().count();
            if n > 600 {
                long.push(format!("{}: {n}", p.display()));
            }
        }
        assert!(long.is_empty(), "over 600 lines of code: {long:?}");
    }

    /// Only `cli::ui` writes to the process's stdout and stderr: the
    /// library reports through its return values and the engine's `Ui`
    /// trait, and every command speaks through `cli::Ui` (whose lines are
    /// redacted and drawn out of a progress bar's way). The exceptions are
    /// protocols that own stdout: the MCP framing and the `git://` relay
    /// (and the effect supervisor's stderr, which is a file).
    #[test]
    fn only_the_ui_writes_to_the_terminal() {
        let all = workspace_files();
        let allowed = |f: &Path, what: &str| {
            f.ends_with("cli/ui.rs")
                || (f.ends_with("cli/mcp/frame.rs") && what == "io::stdout()")
                || (f.ends_with("sync/remote/relay.rs") && what == "io::stdout()")
                || (f.ends_with("cli/progress.rs") && what == "io::stderr()")
                // A command effect's supervisor: its stderr is the
                // effect's output file, not the terminal.
                || (f.ends_with("run/supervisor.rs") && what == "io::stderr()")
        };
        let mut found = Vec::new();
        for file in &all {
            let text = std::fs::read_to_string(file).unwrap();
            let code = text.split("\n#[cfg(test)]").next().unwrap();
            for what in [
                "eprintln!",
                "eprint!",
                "println!",
                "print!(",
                "dbg!",
                "io::stderr()",
                "io::stdout()",
            ] {
                let hits = code
                    .lines()
                    .filter(|l| !l.trim_start().starts_with("//") && l.contains(what))
                    .count();
                if hits > 0 && !allowed(file, what) {
                    found.push(format!("{}: {what} ×{hits}", file.display()));
                }
            }
        }
        assert!(found.is_empty(), "written around the Ui: {found:?}");
    }

    /// At most fourteen `unsafe` blocks, each with its `SAFETY:` argument:
    /// the libgit2 options set once, the CA bundle, the TCP stream's
    /// callbacks, a hook's parent-death signal, the object lookup without a
    /// pack rescan (libgit2's `git_odb_exists_ext`, which git2 does not
    /// wrap), the allocator's trim threshold in `main`, libgit2's own
    /// fsync turned on where syncfs does not flush (`git::fsync`, issue 53:
    /// `GIT_OPT_ENABLE_FSYNC_GITDIR`, which git2 does not wrap), and the
    /// read lease that tells a file held open for writing before the
    /// worktree replaces it (`F_SETLEASE`, which rustix does not wrap). A
    /// new one needs a reason to be here, and a bump of this number in
    /// review.
    #[test]
    fn at_most_fourteen_unsafe_blocks() {
        let all = workspace_files();
        let mut blocks = Vec::new();
        for file in &all {
            let text = std::fs::read_to_string(file).unwrap();
            let code = text.split("\n#[cfg(test)]").next().unwrap();
            let lines: Vec<&str> = code.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                let code = line.split("//").next().unwrap();
                if code.contains("unsafe {") {
                    let argued = lines[i.saturating_sub(6)..i]
                        .iter()
                        .any(|l| l.contains("SAFETY:"));
                    blocks.push((format!("{}:{}", file.display(), i + 1), argued));
                }
            }
        }
        let unargued: Vec<_> = blocks.iter().filter(|(_, a)| !a).collect();
        assert!(
            unargued.is_empty(),
            "unsafe without a SAFETY: comment: {unargued:?}"
        );
        assert!(
            blocks.len() <= 14,
            "{} unsafe blocks: {blocks:?}",
            blocks.len()
        );
    }

    /// A folder of `src/` holds one run of consecutive layers, so `ls src`
    /// reads bottom to top: no folder has a layer of another between two
    /// of its own.
    #[test]
    fn folders_hold_consecutive_layers() {
        for layers in [layers(), layers_in(IO_LIB)] {
            let top: Vec<&str> = layers
                .iter()
                .map(|l| l.split("::").next().unwrap())
                .collect();
            for (i, name) in top.iter().enumerate() {
                let last = top.iter().rposition(|t| t == name).unwrap();
                assert!(
                    top[i..=last].iter().all(|t| t == name),
                    "the layers of {name}/ are not consecutive: {:?}",
                    &layers[i..=last]
                );
            }
        }
    }

    /// The engine's modules, then `git-steps-io`'s, each against its own
    /// crate's list; the crates below either (and the engine's
    /// re-exports of them) count as below every layer.
    #[test]
    fn layers_point_down() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let below = ["Error", "Result", "Refusal", "RefusalKind", "error", "plan"];
        let io = layers_in(IO_LIB);
        assert_eq!(
            io.len(),
            9,
            "the I/O crate's layer list did not parse: {io:?}"
        );
        let mut engine_below = below.to_vec();
        engine_below.extend(io.iter().map(String::as_str));
        let mut problems = upward_imports(&layers(), &root.join("crates/core/src"), &engine_below);
        problems.extend(upward_imports(&io, &root.join("crates/io/src"), &below));
        assert!(
            problems.is_empty(),
            "imports that point up:\n{}",
            problems.join("\n")
        );
    }

    /// Every import of a crate's files (under `src`) that points up its
    /// `layers`, or at no layer and nothing `below`.
    fn upward_imports(layers: &[String], src: &Path, below: &[&str]) -> Vec<String> {
        assert!(layers.len() > 8, "the layer list did not parse: {layers:?}");
        let mut all = Vec::new();
        files(src, &mut all);
        let mut problems = Vec::new();
        for file in &all {
            let module = module_of(src, file);
            if module == "lib" || module == "main" {
                continue;
            }
            let code = std::fs::read_to_string(file).unwrap();
            let is_mod_rs = file.ends_with("mod.rs");
            let refs = references(&module, is_mod_rs, &code);
            let Some(own) = layer_of(layers, &module) else {
                // A folder's mod.rs that only declares its submodules.
                if !refs.is_empty() {
                    problems.push(format!("{module} is in no layer but uses {refs:?}"));
                }
                continue;
            };
            for r in &refs {
                match layer_of(layers, r) {
                    Some(l) if l <= own => {}
                    Some(l) => problems.push(format!(
                        "{module} (layer {}, {}) uses {r} (layer {}, {})",
                        own + 1,
                        layers[own],
                        l + 1,
                        layers[l]
                    )),
                    None if below.contains(&r.split("::").next().unwrap_or("")) => {}
                    None => problems.push(format!("{module} uses {r}, which is in no layer")),
                }
            }
        }
        problems
    }

    /// The checker can fail: an upward import is found.
    #[test]
    fn an_upward_import_is_caught() {
        let layers = layers();
        let refs = references("tree::build", false, "use crate::run::session::Session;\nuse super::{guard, hunks};\n// crate::cli in a comment\n");
        assert!(refs.contains("run::session::Session"), "{refs:?}");
        assert!(
            refs.contains("tree::guard") && refs.contains("tree::hunks"),
            "{refs:?}"
        );
        assert!(!refs.iter().any(|r| r.starts_with("cli")), "{refs:?}");
        let own = layer_of(&layers, "tree::build").unwrap();
        assert!(layer_of(&layers, "run::session::Session").unwrap() > own);
        let grouped = references(
            "run::commit",
            false,
            "use crate::workdir::{repair, worktree};",
        );
        assert!(grouped.contains("workdir::worktree"), "{grouped:?}");
        let top = references(
            "run::commit",
            false,
            "use crate::{lock, workdir::worktree};",
        );
        assert!(
            top.contains("lock") && top.contains("workdir::worktree"),
            "{top:?}"
        );
    }
}
