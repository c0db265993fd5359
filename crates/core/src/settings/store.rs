//! The run's settings written to git config: one atomic replacement of a
//! config file.
//!
//! Owns the write of `steps.*` (and the upstream keys `init` sets). Invariant:
//! a kill at any instant leaves the old settings or the new ones, never some
//! of each, and never a `config.lock` that blocks the user's `git config`.

use git2::Repository;

use super::{resolve, Overrides, Settings};
use crate::error::{Context, Error, Result};
use crate::lock::{OwnLock, ReplaceError};

/// Store settings in git config (`steps.branch`, `steps.run`,
/// `steps.remote`, `steps.transport`), all in one replacement of the config
/// file: a copy is edited with libgit2, then renamed over the file under
/// its `.lock` (git's protocol, through [`crate::lock::OwnLock`]),
/// so a kill leaves the old settings or the new ones, never some of each.
///
/// A run belongs to its worktree. In a repository with linked worktrees
/// (`git worktree add`: one clone, an agent per worktree) the settings go
/// to this worktree's own `config.worktree`, with git's
/// `extensions.worktreeConfig` turned on in the shared config first, as
/// `git config --worktree` would; without linked worktrees, to
/// `.git/config`.
pub fn store(repo: &Repository, s: &Settings) -> Result<()> {
    let per_worktree = repo.is_worktree() || !repo.worktrees()?.is_empty();
    let target = if per_worktree {
        let common = repo.commondir();
        let enabled = git2::Config::open(&common.join("config"))
            .and_then(|c| c.get_bool("extensions.worktreeConfig"))
            .unwrap_or(false);
        if !enabled {
            // As git's `init_worktree_config`: `core.bare` (when true) and
            // `core.worktree` belong to the main worktree once the
            // extension is on, so they move to its `config.worktree` first
            // (harmless while the extension is off), then the shared config
            // loses them and gains the extension in one replacement.
            let shared = git2::Config::open(&common.join("config"))?;
            let bare = shared.get_bool("core.bare").unwrap_or(false);
            let worktree = shared.get_string("core.worktree").ok();
            if bare || worktree.is_some() {
                replace_config(repo, common, "config.worktree", &mut |cfg| {
                    if bare {
                        set(cfg, "core.bare", "true")?;
                    }
                    if let Some(w) = &worktree {
                        set(cfg, "core.worktree", w)?;
                    }
                    Ok(())
                })?;
            }
            replace_config(repo, common, "config", &mut |cfg| {
                if bare {
                    let _ = cfg.remove("core.bare");
                }
                if worktree.is_some() {
                    let _ = cfg.remove("core.worktree");
                }
                set(cfg, "extensions.worktreeConfig", "true")
            })?;
        }
        repo.path().join("config.worktree")
    } else {
        repo.commondir().join("config")
    };
    let dir = target.parent().expect("a config file has a directory");
    let name = target
        .file_name()
        .and_then(|n| n.to_str())
        .expect("config file names are ours");
    let (before, edited) = replace_config(repo, dir, name, &mut |cfg| {
        set(cfg, crate::keys::BRANCH.name, &s.branch)?;
        set(cfg, crate::keys::RUN.name, &s.run)?;
        match &s.remote {
            Some(r) => {
                set(cfg, crate::keys::REMOTE.name, &r.spec)?;
                set(cfg, crate::keys::TRANSPORT.name, r.transport.as_str())?;
                // The run branch tracks its branch on a named remote, as
                // `git push -u` sets it: `git status` and `git branch -vv`
                // show ahead/behind. An upstream the user set is kept.
                let upstream = format!("branch.{}.remote", s.branch);
                if repo.find_remote(&r.spec).is_ok() && cfg.get_string(&upstream).is_err() {
                    set(cfg, &upstream, &r.spec)?;
                    set(cfg, &format!("branch.{}.merge", s.branch), &s.refname())?;
                }
            }
            None => {
                // The upstream this key set goes with it (one the user set
                // to another remote stays).
                let upstream = format!("branch.{}.remote", s.branch);
                if let (Ok(prev), Ok(up)) = (
                    cfg.get_string(crate::keys::REMOTE.name),
                    cfg.get_string(&upstream),
                ) {
                    if prev == up {
                        let _ = cfg.remove(&upstream);
                        let _ = cfg.remove(&format!("branch.{}.merge", s.branch));
                    }
                }
                // Local by name (`--remote ''`): stored as such, so that a
                // later command knows the choice was made.
                set(cfg, crate::keys::REMOTE.name, "")?;
                let _ = cfg.remove(crate::keys::TRANSPORT.name);
            }
        }
        Ok(())
    })?;
    // Another config file (an include, the worktree's own config) may set
    // the same keys and win: then what was written is not what runs. Put
    // the old file back and say so.
    let reopened = Repository::open(repo.path())?;
    crate::git::follow_git_config_env(&reopened)?;
    let now = resolve(&reopened, &Overrides::default())?;
    if now != *s {
        if edited != before {
            let lock = OwnLock::new(&target, &dir.join(pending_name(name)));
            let restored = || match std::fs::read(&target) {
                Ok(cur) if cur == edited => Ok(()),
                _ => Err(()),
            };
            let _ = lock.replace(&before, restored);
        }
        return Err(Error::config(format!(
            "git config reads back run {} on branch {}{}, not what init was asked for: another config file sets these keys and takes precedence; nothing was changed",
            now.run,
            now.branch,
            now.remote.as_ref().map(|r| format!(" with remote {}", r.spec)).unwrap_or_default()
        ))
        .with_hint("see where with `git config --show-origin --get-regexp '^steps\\.'`, remove them there (or pass the flags on every command), then rerun init"));
    }
    Ok(())
}

fn set(cfg: &mut git2::Config, key: &str, value: &str) -> Result<()> {
    cfg.set_str(key, value).map_err(|e| {
        Error::config(format!("cannot set {key}: {}", e.message())).with_hint(format!(
            "git config holds {key} more than once, or through an include; see `git config --show-origin --get-all {key}`, keep one in .git/config, then rerun init; nothing was changed"
        ))
    })
}

/// The pending file whose hard link is git-steps' own lock on config file
/// `name` (the main worktree keeps `config` and `config.worktree` in one
/// directory).
fn pending_name(name: &str) -> String {
    match name {
        "config" => "steps-config.pending".into(),
        other => format!("steps-{other}.pending"),
    }
}

/// Replace the config file `dir/name` (absent: empty) with `edit` applied
/// to a private copy, atomically under `name.lock`; returns the contents
/// before and after.
fn replace_config(
    repo: &Repository,
    dir: &std::path::Path,
    name: &str,
    edit: &mut dyn FnMut(&mut git2::Config) -> Result<()>,
) -> Result<(Vec<u8>, Vec<u8>)> {
    let target = dir.join(name);
    clear_config_leftover(repo);
    // git-steps writers of any config of this repository (from any
    // worktree) one at a time.
    let _writers = crate::lock::wait(repo.commondir(), "steps-config.flock")?;
    let lock = OwnLock::new(&target, &dir.join(pending_name(name)));
    let before = match std::fs::read(&target) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && name != "config" => Vec::new(),
        Err(e) => return Err(e).context(|| format!("cannot read {}", target.display())),
    };
    // A private copy (and the lock libgit2 takes on it, if a kill left one:
    // nobody but git-steps, under the flock above, uses these names).
    let scratch = dir.join("steps-config.edit");
    let _ = std::fs::remove_file(&scratch);
    let _ = std::fs::remove_file(dir.join("steps-config.edit.lock"));
    {
        // As private as the config itself (it may hold credentials).
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&scratch)
            .and_then(|mut f| f.write_all(&before))
            .context(|| format!("cannot write {}", scratch.display()))?;
    }
    let edited = (|| -> Result<Vec<u8>> {
        let mut cfg = git2::Config::open(&scratch)?;
        edit(&mut cfg)?;
        drop(cfg);
        std::fs::read(&scratch).context(|| format!("cannot read {}", scratch.display()))
    })();
    let _ = std::fs::remove_file(&scratch);
    let edited = edited?;
    if edited == before {
        return Ok((before, edited));
    }
    // Under the lock: nobody changed the file since it was read.
    let unchanged = || match std::fs::read(&target) {
        Ok(now) if now == before => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && before.is_empty() => Ok(()),
        _ => Err(()),
    };
    lock.replace(&edited, unchanged).map_err(|e| match e {
        ReplaceError::Held(p) => Error::Busy {
            message: format!(
                "cannot write the run's settings: {} exists",
                p.display()
            ),
            hint: crate::error::Hint::rerun_after(format!(
                "another git process is writing the config, or one was killed while writing it; if no git process is running in this repository, remove it (`rm {}`)",
                p.display()
            )),
        },
        ReplaceError::Io(what, path, e) => Error::io(
            format!(
                "cannot write the run's settings: cannot {what} {}",
                path.display()
            ),
            e,
        ),
        ReplaceError::Check(()) => Error::config(
            "cannot write the run's settings: the config changed while they were being written",
        )
        .with_hint(crate::error::Hint::rerun()),
    })?;
    Ok((before, edited))
}

/// Clear what a killed `init` left: its own `config.lock` (which would
/// block every `git config` of the user) and its scratch files. Another
/// writer's `config.lock` is left alone.
pub fn clear_config_leftover(repo: &Repository) -> Option<String> {
    let common = repo.commondir();
    let _writers = crate::lock::wait(common, "steps-config.flock").ok()?;
    let mut cleared = None;
    // The shared config, the main worktree's own (init in a linked worktree
    // moves core.bare there) and this worktree's own.
    for (dir, name) in [
        (common, "config"),
        (common, "config.worktree"),
        (repo.path(), "config.worktree"),
    ] {
        let _ = std::fs::remove_file(dir.join("steps-config.edit"));
        let _ = std::fs::remove_file(dir.join("steps-config.edit.lock"));
        if let Some(p) =
            OwnLock::new(&dir.join(name), &dir.join(pending_name(name))).clear_own_leftover()
        {
            cleared.get_or_insert(p.display().to_string());
        }
    }
    cleared
}
