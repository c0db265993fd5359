//! `git steps man` and `git steps completions SHELL`: the manual pages and
//! shell completions, generated from the clap definitions this binary parses
//! with, so they can never describe another version of it.
//!
//! `git steps --help` is git's: git looks for the `git-steps(1)` man page.
//! `git steps man --dir DIR` writes it (and one page per subcommand,
//! `git-steps-<command>(1)`) where `man` finds it; without `--dir` the main
//! page goes to stdout.

use std::io::Write;
use std::path::PathBuf;

use clap::CommandFactory;

use super::{Cli, Ctx, Failure};
use crate::error::Error;

/// Print the git-steps(1) man page (roff), or write every page into a directory.
///
/// Install for `git steps --help` and `man git-steps`:
/// `git steps man --dir ~/.local/share/man/man1` (a directory on your
/// MANPATH's `man1`).
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write git-steps.1 and git-steps-<command>.1 into DIR instead of printing git-steps.1.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Print a completion script for SHELL on stdout.
///
/// bash: `mkdir -p ~/.local/share/bash-completion/completions && git steps completions bash > ~/.local/share/bash-completion/completions/git-steps`;
/// zsh: `git steps completions zsh > "${fpath[1]}/_git-steps"`;
/// fish: `mkdir -p ~/.config/fish/completions && git steps completions fish > ~/.config/fish/completions/git-steps.fish`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    #[arg(value_enum, value_name = "SHELL")]
    shell: clap_complete::Shell,
}

/// The command as the pages show it: named as installed, hidden commands left out.
fn command() -> clap::Command {
    Cli::command()
        .name("git-steps")
        .bin_name("git-steps")
        .disable_help_subcommand(true)
}

/// The SPEC's exit codes, for EXIT STATUS.
const EXIT_STATUS: &[(&str, &str)] = &[
    ("0", "Done, including \"nothing to do\"."),
    ("1", "Error: bad input, a patch that does not apply, an I/O or git failure; no receipt was written for the failing step."),
    ("2", "Usage error (and a run not set up where it would land on the default branch)."),
    ("3", "Refused: going on would break the invariant (same id with another decision, duplicated hunk, diverged history, a worktree change the step would overwrite, ...); nothing changed."),
    ("4", "Another writer: the remote moved, or a lock another process holds; nothing lost; rerun to reconcile."),
];

const EXAMPLES: &[(&str, &str)] = &[
    (
        "git steps init",
        "Set up a run on its own branch steps/<run>, durable on the clone's only remote.",
    ),
    (
        "git steps apply plan.jsonl",
        "Apply each step of the plan once; after a crash, rerun the same command to resume.",
    ),
    (
        "git steps run --decider 'python3 agent.py'",
        "The agent loop: ask the decider for each next step.",
    ),
    (
        "git log --format='%h %(trailers:key=Step-Id,valueonly)' steps/main",
        "Audit a run with plain git.",
    ),
    (
        "git steps verify plan.jsonl",
        "Check every invariant of the run against its plan.",
    ),
];

/// roff-escape a line of text.
fn roff(text: &str) -> String {
    let t = text.replace('\\', "\\e").replace('-', "\\-");
    match t.chars().next() {
        Some('.') | Some('\'') => format!("\\&{t}"),
        _ => t,
    }
}

/// The man page's own sections, after clap_mangen's.
fn extra_sections(out: &mut dyn Write) -> std::io::Result<()> {
    let table = |out: &mut dyn Write, title: &str, rows: &[(&str, &str)], code: bool| {
        writeln!(out, ".SH \"{title}\"")?;
        for (k, v) in rows {
            let k = roff(k);
            writeln!(out, ".TP")?;
            if code {
                writeln!(out, "\\fB{k}\\fR")?;
            } else {
                writeln!(out, "{k}")?;
            }
            writeln!(out, "{}", roff(v))?;
        }
        std::io::Result::Ok(())
    };
    table(out, "EXIT STATUS", EXIT_STATUS, true)?;
    let rows = |keys: &[crate::keys::Key]| -> Vec<(&'static str, &'static str)> {
        keys.iter().map(|k| (k.name, k.doc)).collect()
    };
    table(out, "ENVIRONMENT", &rows(crate::keys::ENVIRONMENT), true)?;
    table(out, "CONFIGURATION", &rows(crate::keys::CONFIG), true)?;
    table(out, "EXAMPLES", EXAMPLES, true)?;
    writeln!(out, ".SH \"SEE ALSO\"")?;
    writeln!(
        out,
        "{}",
        roff("git-steps-<command>(1) for each command; docs/guide.md and docs/commands.md in the source.")
    )
}

/// The synopsis with each option's value (`[-C PATH]`): clap_mangen's
/// leaves values out.
fn synopsis(cmd: &clap::Command, name: &str) -> String {
    let mut parts = vec![name.to_string()];
    for a in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        let value = a
            .get_value_names()
            .map(|v| v.join(" "))
            .unwrap_or_else(|| a.get_id().as_str().to_uppercase());
        let shown = if a.is_positional() {
            value
        } else {
            let flag = match (a.get_short(), a.get_long()) {
                (Some(s), Some(l)) => format!("-{s}|--{l}"),
                (Some(s), None) => format!("-{s}"),
                (None, Some(l)) => format!("--{l}"),
                (None, None) => continue,
            };
            if a.get_action().takes_values() {
                format!("{flag} {value}")
            } else {
                flag
            }
        };
        parts.push(if a.is_required_set() {
            shown
        } else {
            format!("[{shown}]")
        });
    }
    if cmd.has_subcommands() {
        parts.push("<command>".into());
    }
    parts.join(" ")
}

/// One man page: clap_mangen's sections with the full synopsis, then
/// (for git-steps(1)) exit status, environment, configuration, examples.
fn page(cmd: clap::Command, name: &str, main: bool, out: &mut dyn Write) -> std::io::Result<()> {
    // A command's page reads as git's own do (git-commit(1): `git commit
    // [...]`): `git steps apply [PLAN]`, the words a user types.
    let spoken = name
        .strip_prefix("git-steps-")
        .map(|sub| format!("git steps {sub}"));
    let usage = synopsis(&cmd, spoken.as_deref().unwrap_or(name));
    let man = clap_mangen::Man::new(cmd.override_usage(usage));
    man.render(out)?;
    if main {
        extra_sections(out)?;
    }
    Ok(())
}

pub fn man(ctx: &Ctx, a: ManArgs, out: &mut dyn Write) -> Result<(), Failure> {
    let cmd = command();
    let Some(dir) = a.dir else {
        page(cmd, "git-steps", true, out)?;
        return Ok(());
    };
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::input(format!("cannot create {}: {e}", dir.display())))?;
    let mut write = |name: &str, page_cmd: clap::Command, main: bool| -> Result<(), Failure> {
        let path = dir.join(format!("{name}.1"));
        let mut buf = Vec::new();
        page(page_cmd, name, main, &mut buf)?;
        std::fs::write(&path, buf)
            .map_err(|e| Error::input(format!("cannot write {}: {e}", path.display())))?;
        writeln!(out, "{}", path.display())?;
        Ok(())
    };
    write("git-steps", cmd.clone(), true)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("git-steps-{}", sub.get_name());
        write(&name, sub.clone().name(name.clone()), false)?;
    }
    // `man` (and so `git steps --help`) looks where MANPATH, or the PATH
    // of the binaries, says; a folder it does not know is silently skipped.
    let root = dir.parent().unwrap_or(&dir);
    let known = std::process::Command::new("manpath")
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let found = known
        .as_deref()
        .is_some_and(|m| m.trim().split(':').any(|p| std::path::Path::new(p) == root));
    if !found {
        ctx.ui.note(&format!(
            "`man` may not look in {}: add it to MANPATH (`export MANPATH=\"{}:$MANPATH\"`) for `git steps --help` and `man git-steps`",
            root.display(),
            root.display()
        ));
    }
    Ok(())
}

/// What git's own bash completion calls for `git steps <TAB>`: the words
/// after `steps`, completed as `git-steps` completes them.
const GIT_BASH_HOOK: &str = r#"
# `git steps <TAB>`: git's completion calls _git_steps; complete the words
# after `steps` as `git-steps` would.
_git_steps() {
    local i=0 n=${#COMP_WORDS[@]}
    while [ "$i" -lt "$n" ] && [ "${COMP_WORDS[$i]}" != steps ]; do i=$((i + 1)); done
    [ "$i" -lt "$n" ] || return 0
    local -a COMP_WORDS=("git-steps" "${COMP_WORDS[@]:$((i + 1))}")
    local COMP_CWORD=$((COMP_CWORD - i))
    _git__steps git-steps "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
}
"#;

pub fn completions(a: CompletionsArgs, out: &mut dyn Write) -> Result<(), Failure> {
    let mut cmd = command();
    if a.shell != clap_complete::Shell::Bash {
        clap_complete::generate(a.shell, &mut cmd, "git-steps", out);
        return Ok(());
    }
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "git-steps", &mut script);
    // clap_complete 4 names a hyphenated binary's subcommand states two
    // ways (`git__steps__subcmd__apply` where it dispatches,
    // `git__subcmd__steps__subcmd__apply` where it completes), so no
    // subcommand's options were ever completed; one name for both.
    let script = String::from_utf8_lossy(&script).replace("git__subcmd__steps", "git__steps");
    // `--remote <TAB>`: the repository's remotes (then paths, for a bare
    // repository on this disk), not file names alone.
    let script = script.replace(
        "--remote)\n                    COMPREPLY=($(compgen -f \"${cur}\"))",
        "--remote)\n                    COMPREPLY=($(compgen -W \"$(git remote 2>/dev/null)\" -- \"${cur}\") $(compgen -d -- \"${cur}\"))",
    );
    out.write_all(script.as_bytes())?;
    out.write_all(GIT_BASH_HOOK.as_bytes())?;
    Ok(())
}

/// docs/commands.md: every public command's `--help`, as this binary
/// prints it, built with the default features (a test keeps the file
/// current).
#[cfg(all(test, feature = "mcp", feature = "harness"))]
fn reference() -> String {
    let mut cmd = command();
    cmd.build();
    let mut md = String::from(
        "# Command reference\n\nGenerated from the command-line definitions (`src/cli/`) by the test `cli::docs::tests::the_command_reference_is_current`; do not edit by hand (`UPDATE_DOCS=1 cargo test -p git-steps --lib the_command_reference` rewrites it). `git steps <command> --help` prints the same text.\n\n",
    );
    let help = |c: &mut clap::Command| {
        let text = c.render_long_help().to_string();
        text.lines()
            .map(str::trim_end)
            .collect::<Vec<_>>()
            .join("\n")
    };
    md.push_str(&format!(
        "## git steps\n\n```text\n{}\n```\n",
        help(&mut cmd)
    ));
    let names: Vec<String> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| s.get_name().to_string())
        .collect();
    for name in names {
        let sub = cmd.find_subcommand_mut(&name).expect("listed");
        md.push_str(&format!(
            "\n## git steps {name}\n\n```text\n{}\n```\n",
            help(sub)
        ));
    }
    md
}

#[cfg(test)]
mod tests {
    #[cfg(all(feature = "mcp", feature = "harness"))]
    use super::*;

    /// The reference documents the default build (with `mcp` and the
    /// harness).
    #[test]
    #[cfg(all(feature = "mcp", feature = "harness"))]
    fn the_command_reference_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/commands.md");
        let want = reference();
        if std::env::var_os("UPDATE_DOCS").is_some() {
            std::fs::write(path, &want).unwrap();
        }
        let have = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            have == want,
            "docs/commands.md is not what the CLI definitions say: run `UPDATE_DOCS=1 cargo test -p git-steps --lib the_command_reference` and commit it"
        );
    }

    /// README.md is a quickstart: at most 300 lines, exactly the two set-up
    /// commands for a fresh machine, the install lines, and links into
    /// docs/ that lead somewhere (every relative link of README and docs/,
    /// to a file that exists and, with `#`, a heading it has).
    #[test]
    fn the_readme_is_a_quickstart_and_the_docs_links_hold() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
        assert!(
            readme.lines().count() <= 300,
            "README.md has {} lines",
            readme.lines().count()
        );
        let fresh = readme
            .split("## On a fresh machine")
            .nth(1)
            .expect("the set-up section");
        let block = fresh
            .split("```sh\n")
            .nth(1)
            .and_then(|b| b.split("```").next())
            .unwrap();
        let commands: Vec<&str> = block.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(commands.len(), 2, "{block}");
        assert!(
            commands[0].starts_with("cargo run --release -- demo"),
            "{block}"
        );
        assert!(commands[1].starts_with("bash scripts/test.sh"), "{block}");
        for needle in [
            "cargo install --locked",
            "pip install git-steps",
            "uvx git-steps mcp",
        ] {
            assert!(readme.contains(needle), "README lacks {needle}");
        }
        // GitHub's anchors: lower case, spaces to '-', punctuation dropped.
        let anchor = |h: &str| -> String {
            h.trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        };
        let mut files = vec![root.join("README.md"), root.join("CHANGELOG.md")];
        for e in std::fs::read_dir(root.join("docs")).unwrap() {
            files.push(e.unwrap().path());
        }
        let mut checked = 0;
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap();
            for (i, _) in text.match_indices("](") {
                let rest = &text[i + 2..];
                let target = &rest[..rest.find(')').unwrap_or(0)];
                if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, frag) = target.split_once('#').unwrap_or((target, ""));
                let file = if path.is_empty() {
                    f.clone()
                } else {
                    f.parent().unwrap().join(path)
                };
                assert!(
                    file.exists(),
                    "{}: link to {target}: no such file",
                    f.display()
                );
                if !frag.is_empty() && file.extension().is_some_and(|e| e == "md") {
                    let linked = std::fs::read_to_string(&file).unwrap();
                    let heads: Vec<String> = linked
                        .lines()
                        .filter(|l| l.starts_with('#'))
                        .map(|l| anchor(l.trim_start_matches('#')))
                        .collect();
                    assert!(
                        heads.iter().any(|h| h == frag),
                        "{}: link to {target}: no such heading",
                        f.display()
                    );
                }
                checked += 1;
            }
        }
        assert!(checked >= 10, "only {checked} links checked");
    }
}
