//! Rules of the whole workspace, checked against its source: the engine's
//! and the I/O crate's layers point down, only the command line's `Ui`
//! writes to the terminal, every `unsafe` block is argued and counted,
//! and no key is spelled outside its table. Here, in the top package,
//! because they read every crate: `cargo test -p git-steps --lib` (or the
//! whole `cargo test`) runs them, whichever crate a change touched.

use std::collections::BTreeSet;
use std::path::Path;

/// The workspace's root, where its crates are: not in a published
/// package of this crate alone, where these checks have nothing to read.
fn workspace() -> Option<&'static Path> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    root.join("crates/core/src/lib.rs")
        .is_file()
        .then_some(root)
}

/// The layers a crate's `lib.rs` lists (`core`, `io`), bottom to top.
fn layers_of(root: &Path, krate: &str) -> Vec<String> {
    let lib = root.join("crates").join(krate).join("src/lib.rs");
    layers_in(&std::fs::read_to_string(lib).unwrap())
}

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

/// The module a source file is (`src/sync/reconcile.rs` →
/// `sync::reconcile`).
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
    // Test code, and the test helpers shared across crates (`testing`).
    let code = without_testing(code.split("#[cfg(test)]").next().unwrap());
    let code: String = code
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

/// `code` without its items for tests only: each item under
/// `#[cfg(any(test, feature = "testing"))]` (a `mod testing;` line, or an
/// inline module to its closing brace), the rest kept.
fn without_testing(code: &str) -> String {
    let mut out = Vec::new();
    let mut lines = code.lines();
    while let Some(l) = lines.next() {
        if l.trim() != "#[cfg(any(test, feature = \"testing\"))]" {
            out.push(l);
            continue;
        }
        let mut depth = 0i32;
        for item in lines.by_ref() {
            depth += item.matches('{').count() as i32 - item.matches('}').count() as i32;
            if depth <= 0 && (item.trim_end().ends_with(';') || item.trim_end().ends_with('}')) {
                break;
            }
        }
    }
    out.join("\n")
}

#[test]
fn test_helpers_are_left_out_and_nothing_else() {
    let code = "use a;\n#[cfg(any(test, feature = \"testing\"))]\npub mod testing;\nuse b;\n#[cfg(any(test, feature = \"testing\"))]\npub mod testing {\n    fn f() {\n        use c;\n    }\n}\nuse d;\n";
    assert_eq!(without_testing(code), "use a;\nuse b;\nuse d;");
}

/// Every source file of the workspace: the command line's `src/` and each
/// crate's under `crates/`.
fn workspace_files(root: &Path) -> Vec<std::path::PathBuf> {
    let mut all = Vec::new();
    files(&root.join("src"), &mut all);
    for e in std::fs::read_dir(root.join("crates")).unwrap() {
        files(&e.unwrap().path().join("src"), &mut all);
    }
    assert!(all.iter().any(|f| f.ends_with("crates/plan/src/step.rs")));
    // This file is tests, and spells what it looks for.
    all.retain(|f| !f.ends_with("src/source_checks.rs"));
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

/// Only `cli::ui` writes to the process's stdout and stderr: the
/// library reports through its return values and the engine's `Ui`
/// trait, and every command speaks through `cli::Ui` (whose lines are
/// redacted and drawn out of a progress bar's way). The exceptions are
/// protocols that own stdout: the MCP framing and the `git://` relay
/// (and the effect supervisor's stderr, which is a file).
#[test]
fn only_the_ui_writes_to_the_terminal() {
    let Some(root) = workspace() else { return };
    let all = workspace_files(root);
    let allowed = |f: &Path, what: &str| {
        f.ends_with("cli/ui.rs")
            || (f.ends_with("cli/mcp/frame.rs") && what == "io::stdout()")
            || (f.ends_with("crates/remote/src/relay.rs") && what == "io::stdout()")
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
    let Some(root) = workspace() else { return };
    let all = workspace_files(root);
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
    let Some(root) = workspace() else { return };
    for layers in [layers_of(root, "core"), layers_of(root, "io")] {
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
    let Some(root) = workspace() else { return };
    let below = ["Error", "Result", "Refusal", "RefusalKind", "error", "plan"];
    let io = layers_of(root, "io");
    assert_eq!(
        io.len(),
        9,
        "the I/O crate's layer list did not parse: {io:?}"
    );
    let mut engine_below = below.to_vec();
    engine_below.extend(io.iter().map(String::as_str));
    let mut problems = upward_imports(
        &layers_of(root, "core"),
        &root.join("crates/core/src"),
        &engine_below,
    );
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
    let Some(root) = workspace() else { return };
    let layers = layers_of(root, "core");
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

/// Outside `crates/io/src/keys.rs`, no crate's code (tests aside) spells no
/// `steps.*` key and no `GIT_STEPS_*` variable: it names a constant.
#[test]
fn no_key_is_spelled_outside_the_table() {
    let Some(root) = workspace() else { return };
    let mut found = Vec::new();
    for p in workspace_files(root) {
        if p.ends_with("crates/io/src/keys.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        for (n, line) in code.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for prefix in ["\"GIT_STEPS_", "\"steps."] {
                for (i, _) in line.match_indices(prefix) {
                    let name: String = line[i + 1..].chars().take_while(|c| *c != '"').collect();
                    // The lock file's name, not a key.
                    if name != "steps.lock" {
                        found.push(format!("{}:{}: {name}", p.display(), n + 1));
                    }
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "spelled outside crates/io/src/keys.rs: {found:#?}"
    );
}

/// Every variable and `steps.*` key a user may set has its row in the
/// guide's tables (the man page is generated from `keys.rs`; the guide is
/// written by hand). The internal ones, which git-steps sets for itself,
/// need none.
#[test]
fn the_guide_lists_every_key_a_user_sets() {
    let Some(root) = workspace() else { return };
    let guide = std::fs::read_to_string(root.join("docs/guide.md")).unwrap();
    let missing: Vec<&str> = crate::keys::CONFIG
        .iter()
        .chain(crate::keys::ENVIRONMENT)
        .filter(|k| !k.doc.starts_with("Internal:"))
        .map(|k| k.name)
        .filter(|name| !guide.contains(&format!("| `{name}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "keys without a row in docs/guide.md: {missing:?}"
    );
}

/// The default the guide's tables give a key is the one its own doc in
/// `keys.rs` gives (`default N`), and for the tuning variables the one
/// `Environment::DEFAULT` holds: a default changed in one place only fails
/// here.
/// The default a key's doc in keys.rs gives ("default N"), if any.
fn doc_default(doc: &str) -> Option<String> {
    let rest = &doc[doc.find("default ")? + "default ".len()..];
    let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
    (!n.is_empty()).then_some(n)
}

#[test]
fn the_guide_gives_each_key_the_default_its_code_has() {
    let Some(root) = workspace() else { return };
    let guide = std::fs::read_to_string(root.join("docs/guide.md")).unwrap();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (keys, column) in [(crate::keys::CONFIG, 2), (crate::keys::ENVIRONMENT, 1)] {
        for k in keys.iter().filter(|k| !k.doc.starts_with("Internal:")) {
            let Some(row) = guide
                .lines()
                .find(|l| l.starts_with(&format!("| `{}` |", k.name)))
            else {
                continue;
            };
            let cells: Vec<&str> = row.trim_matches('|').split(" | ").map(str::trim).collect();
            let cell = cells.get(column).copied().unwrap_or("");
            if let Some(n) = doc_default(k.doc) {
                checked += 1;
                if cell != n {
                    wrong.push(format!(
                        "{}: the guide says {cell:?}, keys.rs says {n}",
                        k.name
                    ));
                }
            }
        }
    }
    let env = crate::keys::Environment::DEFAULT;
    for (key, value) in [
        (crate::keys::LOCK_WAIT, env.lock_wait.as_secs().to_string()),
        (crate::keys::NET_RETRIES, env.net_retries.to_string()),
        (
            crate::keys::NET_RETRY_SECS,
            env.net_retry_total.as_secs().to_string(),
        ),
        (
            crate::keys::NET_TIMEOUT_SECS,
            env.net_timeout.as_secs().to_string(),
        ),
    ] {
        if doc_default(key.doc).as_deref() != Some(value.as_str()) {
            wrong.push(format!(
                "{}: keys.rs's doc says {:?}, Environment::DEFAULT holds {value}",
                key.name,
                doc_default(key.doc)
            ));
        }
    }
    assert!(checked >= 10, "only {checked} defaults were compared");
    assert!(
        wrong.is_empty(),
        "defaults that disagree:\n{}",
        wrong.join("\n")
    );
}

/// Each package and version a `Cargo.lock` pins.
fn locked(lockfile: &str) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    let mut name = None;
    for line in lockfile.lines() {
        let field = |key: &str| {
            line.strip_prefix(key)
                .and_then(|v| v.strip_prefix(" = \""))
                .and_then(|v| v.strip_suffix('"'))
                .map(str::to_string)
        };
        if line == "[[package]]" {
            name = None;
        } else if let Some(n) = field("name") {
            name = Some(n);
        } else if let (Some(v), Some(n)) = (field("version"), name.take()) {
            out.insert((n, v));
        }
    }
    out
}

/// CI checks the fuzz targets in the main workspace's target directory,
/// right after the lints: that reuses the lints' builds only if the fuzz
/// workspace pins the same versions (its own lockfile; a newer `cc` or
/// `libc` there built libgit2's C a second time, 20-30 s of every CI run).
#[test]
fn the_fuzz_targets_lock_the_workspaces_versions() {
    let Some(root) = workspace() else { return };
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    let main = locked(&read("Cargo.lock"));
    let fuzz = locked(&read("fuzz/Cargo.lock"));
    let names = |s: &BTreeSet<(String, String)>| -> BTreeSet<String> {
        s.iter().map(|(n, _)| n.clone()).collect()
    };
    let shared: BTreeSet<String> = names(&main).intersection(&names(&fuzz)).cloned().collect();
    assert!(
        shared.len() > 100,
        "only {} packages in both lockfiles",
        shared.len()
    );
    assert!(shared.contains("libgit2-sys") && shared.contains("git-steps-plan"));
    let differ: Vec<String> = shared
        .iter()
        .filter(|n| {
            let of = |s: &BTreeSet<(String, String)>| -> Vec<String> {
                s.iter()
                    .filter(|(m, _)| m == *n)
                    .map(|(_, v)| v.clone())
                    .collect()
            };
            of(&main) != of(&fuzz)
        })
        .cloned()
        .collect();
    assert!(
        differ.is_empty(),
        "fuzz/Cargo.lock pins other versions than Cargo.lock of {differ:?}: \
         cp Cargo.lock fuzz/Cargo.lock && cargo tree --manifest-path fuzz/Cargo.toml"
    );
}

/// The code names in the first column of the markdown table under
/// `header` (a row "| `name` | ..."), or a failure naming the header.
fn first_column<'d>(doc: &'d str, header: &str) -> BTreeSet<&'d str> {
    let start = doc
        .find(header)
        .unwrap_or_else(|| panic!("no table headed {header:?}"));
    doc[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with("| `"))
        .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
        .collect()
}

/// The guide's table of crash points ("point | state of the disk when it
/// fires") lists every point `crash::POINTS` declares, and no other: a
/// point added without its row (or a row left for a point removed) fails.
#[test]
fn the_guide_lists_every_crash_point() {
    let Some(root) = workspace() else { return };
    let guide = std::fs::read_to_string(root.join("docs/guide.md")).unwrap();
    let rows = first_column(&guide, "| point | state of the disk when it fires |");
    let declared: BTreeSet<&str> = crate::crash::POINTS.iter().map(|p| p.name).collect();
    assert!(
        declared.len() >= 20,
        "only {} points declared",
        declared.len()
    );
    let missing: Vec<_> = declared.difference(&rows).collect();
    let stale: Vec<_> = rows.difference(&declared).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/guide.md's crash point table lacks {missing:?} and lists undeclared {stale:?}"
    );
}

/// Wherever the docs give a key's default in passing ("`NAME` ...
/// (default N)", up to the next code span), it is the default keys.rs
/// gives: the guide's tables are checked above, the prose here.
#[test]
fn the_docs_give_each_key_the_default_its_code_has() {
    let Some(root) = workspace() else { return };
    let mut docs: Vec<std::path::PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.push(root.join("README.md"));
    let (mut checked, mut wrong) = (0, Vec::new());
    for path in &docs {
        let text = std::fs::read_to_string(path).unwrap();
        for k in crate::keys::CONFIG.iter().chain(crate::keys::ENVIRONMENT) {
            let Some(n) = doc_default(k.doc) else {
                continue;
            };
            let name = format!("`{}`", k.name);
            for (at, _) in text.match_indices(&name) {
                let after = &text[at + name.len()..];
                let span = &after[..after.find('`').unwrap_or(after.len())];
                let Some(i) = span.find("(default ") else {
                    continue;
                };
                let said: String = span[i + "(default ".len()..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                if said.is_empty() {
                    continue;
                }
                checked += 1;
                if said != n {
                    wrong.push(format!(
                        "{}: says {} is {said} by default, keys.rs says {n}",
                        path.display(),
                        k.name
                    ));
                }
            }
        }
    }
    assert!(
        checked >= 3,
        "only {checked} defaults found in the docs' prose"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// docs/formats.md's table of step fields lists exactly the fields a step
/// may carry (`plan::step::FIELDS`; the schema is checked against it in
/// the plan crate).
#[test]
fn the_formats_doc_lists_every_step_field() {
    let Some(root) = workspace() else { return };
    let doc = std::fs::read_to_string(root.join("docs/formats.md")).unwrap();
    let rows = first_column(&doc, "| field | meaning |");
    let fields: BTreeSet<&str> = crate::plan::step::FIELDS.iter().copied().collect();
    assert!(fields.len() >= 10, "only {} fields", fields.len());
    assert_eq!(rows, fields, "docs/formats.md's step fields against FIELDS");
}
