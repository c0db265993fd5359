//! Replacing a file as git does, under a lock git-steps can tell is its
//! own (a hard link of a pending file): the remote's ref and the settings.
//!
//! Invariant: a lock is removed only when it is the same inode as this
//! writer's pending file; any other lock belongs to another writer.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::sync_dir;

/// What [`ReplaceError::Io`] names when the last write failed: the sync
/// after the rename, when the file holds its new content already.
pub const SYNC_AFTER_RENAME: &str = "sync, after the rename,";

/// Why a file could not be replaced under its lock.
#[derive(Debug)]
pub enum ReplaceError<E> {
    /// `<file>.lock` exists and is not ours: another writer holds it (or
    /// died holding it, which only the user can tell).
    Held(PathBuf),
    /// Writing failed: what, where, and the OS error.
    Io(String, PathBuf, std::io::Error),
    /// The caller's check, made under the lock, said no.
    Check(E),
}

/// Replace a file the way git does — `<file>.lock` created exclusively,
/// checked under, renamed over the file — with a lock git-steps can tell is
/// its own: the lock is a hard link of a pending file (`pending`, inside the
/// same repository) written and fsynced first. A process killed between the
/// link and the rename leaves both names on one inode, and only such a
/// lock is ever removed; a lock with any other inode belongs to another
/// writer (a live `git`, or one that died, which git reports and leaves to
/// the user) and is never touched. Callers serialise git-steps writers of
/// one `pending` among themselves (a flock), so the pending file is theirs.
pub struct OwnLock {
    pending: PathBuf,
    lock: PathBuf,
    target: PathBuf,
}

impl OwnLock {
    pub fn new(target: &Path, pending: &Path) -> OwnLock {
        let mut lock = target.as_os_str().to_owned();
        lock.push(".lock");
        OwnLock {
            pending: pending.to_path_buf(),
            lock: PathBuf::from(lock),
            target: target.to_path_buf(),
        }
    }

    pub fn lock_path(&self) -> &Path {
        &self.lock
    }

    /// Remove what a killed git-steps writer left: its pending file, and
    /// the lock only when it is that same file. Returns the lock's path if
    /// it was removed.
    pub fn clear_own_leftover(&self) -> Option<PathBuf> {
        use std::os::unix::fs::MetadataExt;
        let p = std::fs::symlink_metadata(&self.pending).ok()?;
        let mut removed = None;
        if let Ok(l) = std::fs::symlink_metadata(&self.lock) {
            if (l.dev(), l.ino()) == (p.dev(), p.ino()) && std::fs::remove_file(&self.lock).is_ok()
            {
                removed = Some(self.lock.clone());
            }
        }
        let _ = std::fs::remove_file(&self.pending);
        removed
    }

    /// Whether someone else holds the lock.
    pub fn held(&self) -> bool {
        std::fs::symlink_metadata(&self.lock).is_ok()
    }

    /// Replace the file with `content` if `check`, run under the lock,
    /// agrees. The new file gets the permission bits of the one it replaces
    /// (a private config stays private), 0644 for a new one.
    pub fn replace<E>(
        &self,
        content: &[u8],
        check: impl FnOnce() -> std::result::Result<(), E>,
    ) -> std::result::Result<(), ReplaceError<E>> {
        self.replace_then(content, check, None)
    }

    /// [`OwnLock::replace`], where the new content is not fsynced on its
    /// own: `flush` runs after the check, before the rename, and must make
    /// it durable with everything written before it (one syncfs of the
    /// file system).
    pub fn replace_flushed<E>(
        &self,
        content: &[u8],
        check: impl FnOnce() -> std::result::Result<(), E>,
        flush: &dyn Fn() -> std::io::Result<()>,
    ) -> std::result::Result<(), ReplaceError<E>> {
        self.replace_then(content, check, Some(flush))
    }

    fn replace_then<E>(
        &self,
        content: &[u8],
        check: impl FnOnce() -> std::result::Result<(), E>,
        flush: Option<&dyn Fn() -> std::io::Result<()>>,
    ) -> std::result::Result<(), ReplaceError<E>> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let io = |what: &str, path: &Path, e| ReplaceError::Io(what.into(), path.to_path_buf(), e);
        let mode = std::fs::metadata(&self.target)
            .map(|m| m.permissions().mode() & 0o7777)
            .unwrap_or(0o644);
        // Created with its final bits where the umask leaves them (else
        // private, then given them); a pending file left by a killed writer
        // is replaced.
        let exact = umask().is_some_and(|u| mode & u == 0);
        let create = || {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(if exact { mode } else { mode & 0o600 })
                .open(&self.pending)
        };
        let mut f = match create() {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let _ = std::fs::remove_file(&self.pending);
                create()
            }
            r => r,
        }
        .map_err(|e| io("create", &self.pending, e))?;
        // In a shared repository, the mode git gives its files there.
        let git_dir = self.pending.parent().unwrap_or(Path::new("."));
        let perms = || {
            match exact {
                true => Ok(()),
                false => f.set_permissions(std::fs::Permissions::from_mode(mode)),
            }
            .and_then(|()| crate::git::shared::created(git_dir, &self.pending))
        };
        perms()
            .and_then(|()| f.write_all(content))
            .and_then(|()| match flush {
                Some(_) => crate::git::fsync::before_naming(&f),
                None => f.sync_all(),
            })
            .map_err(|e| io("write", &self.pending, e))?;
        drop(f);
        let done = |r| {
            let _ = std::fs::remove_file(&self.pending);
            r
        };
        let dir = self.target.parent().unwrap_or(Path::new("."));
        // Where syncfs does not flush, no lock is judged stale by its date:
        // the pending file is the evidence a lock is ours, so its name is
        // durable before the lock's.
        if crate::git::fsync::per_file() {
            let parent = self.pending.parent().unwrap_or(Path::new("."));
            if let Err(e) = sync_dir(parent) {
                return done(Err(io("sync", parent, e)));
            }
        }
        let link = || match std::fs::hard_link(&self.pending, &self.lock) {
            // A file system without hard links (git's lock is a plain
            // exclusive create there): the lock is written in full and
            // renamed as git's is, and a killed run's lock cannot be told
            // from another writer's (held, never removed).
            Err(e)
                if !matches!(
                    e.kind(),
                    std::io::ErrorKind::AlreadyExists | std::io::ErrorKind::NotFound
                ) =>
            {
                copy_exclusive(&self.pending, &self.lock)
            }
            r => r,
        };
        let linked = match link() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Err(e) = create_dirs(dir, git_dir) {
                    return done(Err(io("create", dir, e)));
                }
                link()
            }
            r => r,
        };
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return done(Err(ReplaceError::Held(self.lock.clone())))
            }
            Err(e) => return done(Err(io("create the lock", &self.lock, e))),
        }
        if let Err(e) = check() {
            let _ = std::fs::remove_file(&self.lock);
            return done(Err(ReplaceError::Check(e)));
        }
        if let Some(flush) = flush {
            if let Err(e) = flush() {
                let _ = std::fs::remove_file(&self.lock);
                return done(Err(io(
                    "flush (syncfs) what was written before the rename of",
                    &self.target,
                    e,
                )));
            }
        }
        if let Err(e) = std::fs::rename(&self.lock, &self.target) {
            let _ = std::fs::remove_file(&self.lock);
            return done(Err(io("replace", &self.target, e)));
        }
        // The commit point: the rename, made durable.
        done(sync_dir(dir).map_err(|e| io(SYNC_AFTER_RENAME, dir, e)))
    }
}

/// This process's umask, where it can be read without being set.
fn umask() -> Option<u32> {
    crate::os::umask()
}

/// `from`'s bytes and mode in `to`, created exclusively and flushed.
fn copy_exclusive(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let bytes = std::fs::read(from)?;
    let mode = std::fs::metadata(from)?.permissions().mode() & 0o7777;
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)?;
    let written = f
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .and_then(|()| f.write_all(&bytes))
        .and_then(|()| f.sync_all());
    if written.is_err() {
        let _ = std::fs::remove_file(to);
    }
    written
}

/// Create `dir` and its missing parents, each made durable in its parent
/// and given the mode git gives directories in the shared repository
/// `git_dir`.
fn create_dirs(dir: &Path, git_dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dirs(parent, git_dir)?;
        match std::fs::create_dir(dir) {
            Ok(()) => {
                crate::git::shared::created(git_dir, dir)?;
                sync_dir(parent)?
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
