//! Opening the repository a command runs in: discovered as git finds
//! it, with git's config environment libgit2 ignores, and a repository in
//! a format libgit2 cannot open named as such.
//!
//! Owns that opening. Invariant: nothing is written in a repository that
//! cannot be opened; the error names the format and its setting.

use std::path::Path;

use git2::Repository;

use super::{cmdline, fsync, setup};
use crate::error::{Context, Result};

/// Open the repository at or above `path`, libgit2 set up, reading
/// config as git would ([`follow_git_config_env`]).
pub fn open(path: &Path) -> Result<Repository> {
    setup()?;
    let repo = match fsync::discover(path) {
        Ok(r) => r,
        Err(e) => {
            if let Some(refused) = unsupported_format(path) {
                return Err(refused);
            }
            return Err::<Repository, _>(e)
                .context(|| format!("{} is not in a git repository", path.display()))
                .map_err(|e| {
                    e.with_hint(
                        "run git-steps inside a git repository, or pass -C <path>; `git init` makes one",
                    )
                });
        }
    };
    follow_git_config_env(&repo)?;
    Ok(repo)
}

/// A repository git opens at `path` and libgit2 cannot, named by what
/// makes it so: SHA-256 objects (`extensions.objectFormat`) or reftable
/// refs (`extensions.refStorage`).
fn unsupported_format(path: &Path) -> Option<crate::error::Error> {
    let ask = |key: &str| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(path)
            .args(["config", "--get", key])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .trim()
                    .to_ascii_lowercase()
            })
    };
    let (what, how) = if ask("extensions.objectformat").as_deref() == Some("sha256") {
        (
            "its objects are SHA-256 (`extensions.objectFormat=sha256`)",
            "git-steps works in SHA-1 repositories (libgit2, under it, reads no other); there is no conversion of a SHA-256 repository to SHA-1 in place, so git-steps cannot run in this one",
        )
    } else if ask("extensions.refstorage").as_deref() == Some("reftable") {
        (
            "its refs are in reftable (`extensions.refStorage=reftable`)",
            "`git refs migrate --ref-format=files` (git 2.46 or later) converts them to files, which git-steps (libgit2, under it) reads",
        )
    } else {
        return None;
    };
    Some(
        crate::error::Error::config(format!(
            "{} is a git repository in a format git-steps cannot open: {what}; nothing was changed",
            path.display()
        ))
        .with_hint(how),
    )
}

/// git's config environment, which libgit2 ignores: `git -c` (see
/// [`cmdline`]), `GIT_CONFIG_GLOBAL`
/// names the one global file (instead of `~/.gitconfig` and the XDG one),
/// and `GIT_CONFIG_NOSYSTEM` drops the system file. Applied to the
/// repository's config object, which libgit2 itself consults (line endings,
/// status), so git-steps and git read the same `core.autocrlf`, signing and
/// hook settings.
pub fn follow_git_config_env(repo: &Repository) -> Result<()> {
    // `git -c key=value steps …`: above every file, as git applies it.
    cmdline::apply(repo)?;
    let global = std::env::var_os("GIT_CONFIG_GLOBAL");
    let nosystem = std::env::var("GIT_CONFIG_NOSYSTEM")
        .map(|v| {
            !matches!(
                v.to_ascii_lowercase().as_str(),
                "" | "0" | "false" | "no" | "off"
            )
        })
        .unwrap_or(false);
    if global.is_none() && !nosystem {
        return Ok(());
    }
    let mut cfg = repo.config()?;
    let empty = Path::new("/dev/null");
    if let Some(g) = &global {
        let g = Path::new(g);
        let file = if g.as_os_str().is_empty() { empty } else { g };
        cfg.add_file(file, git2::ConfigLevel::Global, true)
            .context(|| format!("cannot read GIT_CONFIG_GLOBAL {}", file.display()))?;
        cfg.add_file(empty, git2::ConfigLevel::XDG, true)?;
    }
    if nosystem {
        cfg.add_file(empty, git2::ConfigLevel::System, true)?;
    }
    Ok(())
}
