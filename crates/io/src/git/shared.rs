//! `core.sharedRepository`: the group or world access git gives every file
//! and directory it creates in a shared repository (`git init
//! --shared=group`), given to those git-steps and libgit2 create there
//! too. libgit2 ignores the setting (libgit2#3733), so each write of ours
//! into a repository's git dir is followed by git's own
//! `adjust_shared_perm` (path.c) on what it created.
//!
//! Invariant: in a repository with the setting, every file and directory
//! git-steps creates in its git dir has the mode git would have given it
//! (group-writable and setgid directories, group-readable files, locks
//! other members can remove); without the setting nothing is changed.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// What `core.sharedRepository` asks for (git's `git_config_perm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shared {
    /// Unset, `umask` or `false`: the process's umask decides.
    Umask,
    /// `group`/`true`/`1` (0660) or `all`/`world`/`everybody`/`2`
    /// (0664): these bits are added.
    Add(u32),
    /// An octal mode (`0640`): the permission bits are replaced.
    Exact(u32),
}

/// Parse a `core.sharedRepository` value as git does; None for one git
/// refuses ("bad core.sharedRepository").
pub fn parse(value: &str) -> Option<Shared> {
    let v = value.trim();
    match v.to_ascii_lowercase().as_str() {
        "umask" | "false" | "no" | "off" | "0" | "" => return Some(Shared::Umask),
        "group" | "true" | "yes" | "on" | "1" => return Some(Shared::Add(0o660)),
        "all" | "world" | "everybody" | "2" => return Some(Shared::Add(0o664)),
        _ => {}
    }
    let mode = u32::from_str_radix(v, 8).ok()?;
    // git: "Problem with core.sharedRepository filemode value … The owner
    // of files must always have read and write permissions."
    if mode & 0o600 != 0o600 || mode > 0o777 {
        return None;
    }
    Some(Shared::Exact(mode & 0o666))
}

impl Shared {
    /// git's `calc_shared_perm` (and, for a directory, the execute bits
    /// copied from the read bits and setgid where the group gains access).
    pub fn mode_for(self, mode: u32, dir: bool) -> u32 {
        let (tweak, exact) = match self {
            Shared::Umask => return mode,
            Shared::Add(t) => (t, false),
            Shared::Exact(t) => (t, true),
        };
        let mut tweak = tweak;
        if mode & 0o200 == 0 {
            tweak &= !0o222;
        }
        if mode & 0o100 != 0 {
            tweak |= (tweak & 0o444) >> 2;
        }
        let mut new = if exact {
            (mode & !0o777) | tweak
        } else {
            mode | tweak
        };
        if dir {
            new |= (new & 0o444) >> 2;
            if new & 0o060 != 0 {
                new |= 0o2000;
            }
        }
        new
    }
}

static KNOWN: Mutex<Vec<(PathBuf, Shared)>> = Mutex::new(Vec::new());

/// The repository's common directory: `git_dir` itself, or the one a
/// linked worktree's `commondir` file names.
fn common_dir(git_dir: &Path) -> PathBuf {
    match std::fs::read_to_string(git_dir.join("commondir")) {
        Ok(s) if !s.trim().is_empty() => git_dir.join(s.trim()),
        _ => git_dir.to_path_buf(),
    }
}

/// The setting of the repository whose git dir is `git_dir` (read once
/// per process: its local config, then the user's and the system's). A
/// value git refuses is taken as unset: git itself fails in such a
/// repository before git-steps is asked to write there.
pub fn of(git_dir: &Path) -> Shared {
    let key = git_dir.to_path_buf();
    if let Some((_, s)) = KNOWN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(p, _)| *p == key)
    {
        return *s;
    }
    let read = || -> Option<Shared> {
        let mut cfg = git2::Config::open_default()
            .or_else(|_| git2::Config::new())
            .ok()?;
        let local = common_dir(git_dir).join("config");
        if local.is_file() {
            cfg.add_file(&local, git2::ConfigLevel::Local, false).ok()?;
        }
        let cfg = cfg.snapshot().ok()?;
        let v = cfg.get_string("core.sharedRepository").ok()?;
        parse(&v)
    };
    let s = read().unwrap_or(Shared::Umask);
    KNOWN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((key, s));
    s
}

/// Give `path`, just created in the repository at `git_dir`, the mode git
/// would have (nothing where the repository is not shared).
/// A file another member created is theirs, and left as it is.
pub fn created(git_dir: &Path, path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let shared = of(git_dir);
    if shared == Shared::Umask {
        return Ok(());
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.uid() == rustix::process::geteuid().as_raw() => adjust(shared, path),
        _ => Ok(()),
    }
}

/// git's `adjust_shared_perm` under `shared`.
pub fn adjust(shared: Shared, path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if shared == Shared::Umask {
        return Ok(());
    }
    let meta = std::fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let old = meta.permissions().mode() & 0o7777;
    let new = shared.mode_for(old, meta.is_dir());
    if new != old {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(new))?;
    }
    Ok(())
}

/// After a write of libgit2's or ours that may have created `path` and
/// directories above it: adjust `path` and each directory from `root`
/// (exclusive) down to it. Each is adjusted only if this process owns
/// it (another member's file is theirs to keep).
pub fn created_under(git_dir: &Path, root: &Path, path: &Path) -> std::io::Result<()> {
    let shared = of(git_dir);
    if shared == Shared::Umask {
        return Ok(());
    }
    let Ok(rel) = path.strip_prefix(root) else {
        return Ok(());
    };
    let me = rustix::process::geteuid().as_raw();
    let mut at = root.to_path_buf();
    for part in rel.components() {
        at.push(part);
        use std::os::unix::fs::MetadataExt;
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.uid() == me => adjust(shared, &at)?,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_as_gits_git_config_perm() {
        assert_eq!(parse("group"), Some(Shared::Add(0o660)));
        assert_eq!(parse("true"), Some(Shared::Add(0o660)));
        assert_eq!(parse("1"), Some(Shared::Add(0o660)));
        assert_eq!(parse("everybody"), Some(Shared::Add(0o664)));
        assert_eq!(parse("2"), Some(Shared::Add(0o664)));
        assert_eq!(parse("umask"), Some(Shared::Umask));
        assert_eq!(parse("false"), Some(Shared::Umask));
        assert_eq!(parse("0640"), Some(Shared::Exact(0o640)));
        assert_eq!(parse("0400"), None);
        assert_eq!(parse("banana"), None);
    }

    #[test]
    fn modes_are_those_git_gives() {
        let g = Shared::Add(0o660);
        // A loose object (0444), a ref or lock (0644), a directory (0755).
        assert_eq!(g.mode_for(0o444, false), 0o444);
        assert_eq!(g.mode_for(0o400, false), 0o440);
        assert_eq!(g.mode_for(0o644, false), 0o664);
        assert_eq!(g.mode_for(0o755, true), 0o2775);
        let all = Shared::Add(0o664);
        assert_eq!(all.mode_for(0o600, false), 0o664);
        assert_eq!(all.mode_for(0o700, true), 0o2775);
        let exact = Shared::Exact(0o640);
        assert_eq!(exact.mode_for(0o644, false), 0o640);
        assert_eq!(exact.mode_for(0o755, true), 0o2750);
        assert_eq!(exact.mode_for(0o444, false), 0o440);
        assert_eq!(Shared::Umask.mode_for(0o600, false), 0o600);
    }
}
