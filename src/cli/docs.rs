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

use super::{Cli, Failure};
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
/// bash: `git steps completions bash > ~/.local/share/bash-completion/completions/git-steps`;
/// zsh: `git steps completions zsh > "${fpath[1]}/_git-steps"`;
/// fish: `git steps completions fish > ~/.config/fish/completions/git-steps.fish`.
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

pub fn man(a: ManArgs, out: &mut dyn Write) -> Result<(), Failure> {
    let cmd = command();
    let Some(dir) = a.dir else {
        clap_mangen::Man::new(cmd).render(out)?;
        return Ok(());
    };
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::input(format!("cannot create {}: {e}", dir.display())))?;
    let mut write = |name: &str, page: clap::Command| -> Result<(), Failure> {
        let path = dir.join(format!("{name}.1"));
        let mut buf = Vec::new();
        clap_mangen::Man::new(page).render(&mut buf)?;
        std::fs::write(&path, buf)
            .map_err(|e| Error::input(format!("cannot write {}: {e}", path.display())))?;
        writeln!(out, "{}", path.display())?;
        Ok(())
    };
    write("git-steps", cmd.clone())?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("git-steps-{}", sub.get_name());
        write(&name, sub.clone().name(name.clone()))?;
    }
    Ok(())
}

pub fn completions(a: CompletionsArgs, out: &mut dyn Write) -> Result<(), Failure> {
    let mut cmd = command();
    clap_complete::generate(a.shell, &mut cmd, "git-steps", out);
    Ok(())
}
