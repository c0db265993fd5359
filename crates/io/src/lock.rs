//! One runner per repository: an advisory lock held while applying.
//!
//! Owns `<git dir>/steps.lock`. Invariant: two git-steps processes never
//! apply to the same repository at once. The lock is a `flock(2)` on that
//! file, which the kernel releases when its holder exits in any way —
//! SIGKILL and a crash included — so a lock left by a dead process never
//! blocks; the file's content (the holder's pid) is only for messages.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

mod own;
pub mod refwrite;

pub use own::{OwnLock, ReplaceError, SYNC_AFTER_RENAME};

/// Held until dropped (or the process dies).
pub struct Lock {
    _file: File,
    /// Set when the previous holder died while holding it.
    pub stale: Option<String>,
}

fn pid_alive(pid: i32) -> bool {
    // kill(pid, 0): sent to nobody, it only asks whether the process exists
    // (EPERM: it does, as another user's).
    let Some(pid) = rustix::process::Pid::from_raw(pid) else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(e) => e == rustix::io::Errno::PERM,
    }
}

/// Opened (created if missing) in the git dir it is in, with the mode git
/// gives files there (`core.sharedRepository`: other members take it too).
fn open_lock_file(path: &Path) -> Result<File> {
    let failed = |e| Error::io(format!("cannot open the lock {}", path.display()), e);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(failed)?;
    crate::git::shared::created(path.parent().unwrap_or(Path::new(".")), path).map_err(failed)?;
    Ok(file)
}

/// Take the lock in `git_dir`, or fail at once naming the holder.
pub fn acquire(git_dir: &Path) -> Result<Lock> {
    let path: PathBuf = git_dir.join("steps.lock");
    let mut file = open_lock_file(&path)?;
    let mut previous = String::new();
    let _ = file.read_to_string(&mut previous);
    // std's lock is flock(2) on Linux: released when its holder dies, and
    // listed in /proc/locks as FLOCK (`holder` reads it there). A lock
    // that is let go within a second is waited for: a process that forks
    // holds its parent's descriptors until it execs (the lock of a run
    // that just ended, in a test harness or a host that spawns children
    // from many threads), which must not read as another writer.
    let clock = crate::backoff::RealClock;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    let mut poll = crate::backoff::Backoff::poll(std::time::Duration::from_millis(20));
    let mut taken = file.try_lock();
    while matches!(taken, Err(std::fs::TryLockError::WouldBlock))
        && std::time::Instant::now() < deadline
    {
        poll.wait(&clock, Some(deadline));
        taken = file.try_lock();
    }
    if let Err(e) = taken {
        if let std::fs::TryLockError::Error(e) = e {
            return Err(Error::io(format!("cannot lock {}", path.display()), e));
        }
        let holder = previous.trim();
        return Err(Error::Busy {
            message: format!(
                "another git-steps is applying in this repository (pid {}, lock {})",
                if holder.is_empty() { "unknown" } else { holder },
                path.display()
            ),
            hint: crate::error::Hint::rerun_when("wait for it to finish")
                .because("the lock is released the moment that process exits, however it exits"),
        });
    }
    let stale = previous.trim().parse::<i32>().ok().filter(|p| *p != std::process::id() as i32).map(|pid| {
        if pid_alive(pid) {
            format!("the lock names pid {pid}, which is running but no longer holds it")
        } else {
            format!(
                "the lock was left by pid {pid}, which is no longer running (the kernel released its flock when it died)"
            )
        }
    });
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    writeln!(file, "{}", std::process::id())?;
    Ok(Lock { _file: file, stale })
}

/// The pid of the process holding this repository's `steps.lock` now (a
/// run in progress), read without taking it (`/proc/locks` on Linux; a
/// shared lock that cannot be had, given back at once, elsewhere: a
/// writer asking in that instant waits, as [`acquire`] waits a second).
/// None when nobody holds it, or where that cannot be told.
pub fn holder(git_dir: &Path) -> Option<u32> {
    crate::os::flock_holder(&git_dir.join("steps.lock")).filter(|pid| *pid != std::process::id())
}

/// Wait for an exclusive flock on `dir/name` (short critical sections only,
/// such as one push into a local bare repository). Released when the file
/// is dropped or the process dies.
pub fn wait(dir: &Path, name: &str) -> Result<File> {
    let path = dir.join(name);
    let file = open_lock_file(&path)?;
    if let Err(e) = file.lock() {
        return Err(Error::io(format!("cannot lock {}", path.display()), e));
    }
    Ok(file)
}

/// The lock files libgit2 may take to update `refname` in `repo`: the ref's
/// own, its reflog's and HEAD's reflog's, and `packed-refs.lock` (a deletion
/// of a packed ref).
pub fn ref_locks(repo: &git2::Repository, refname: &str) -> Vec<PathBuf> {
    let common = repo.commondir();
    let dir = if refname == "HEAD" {
        repo.path()
    } else {
        common
    };
    vec![
        dir.join(format!("{refname}.lock")),
        dir.join("logs").join(format!("{refname}.lock")),
        repo.path().join("logs/HEAD.lock"),
        common.join("packed-refs.lock"),
    ]
}

/// The index's lock file.
pub fn index_locks(repo: &git2::Repository) -> Vec<PathBuf> {
    vec![repo.path().join("index.lock")]
}

fn intent_path(git_dir: &Path) -> PathBuf {
    git_dir.join("steps-intent")
}

thread_local! {
    /// `<git dir>/steps-intent`, kept open for the process, and whether it
    /// may hold anything (it is emptied after every write).
    static INTENT: std::cell::RefCell<Option<(PathBuf, File, bool)>> = const { std::cell::RefCell::new(None) };
}

/// Name `locks` in `<git dir>/steps-intent` (none: empty it) — for a
/// write of ours that takes exactly these locks and knows whether it left
/// one ([`refwrite`]); libgit2's writes go through [`intending`].
pub fn note_intent_of(git_dir: &Path, locks: &[PathBuf]) {
    note_intent(git_dir, locks)
}

fn note_intent(git_dir: &Path, locks: &[PathBuf]) {
    use std::os::unix::fs::FileExt;
    let path = intent_path(git_dir);
    INTENT.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.as_ref().is_none_or(|(p, _, _)| *p != path) {
            *cell = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .ok()
                .map(|f| (path.clone(), f, true));
            let _ = crate::git::shared::created(git_dir, &path);
        }
        if let Some((_, f, full)) = cell.as_mut() {
            // In place: no new file, no fsync (it only has to outlive a
            // killed process, not the machine: after a power cut a lock
            // from before the boot is stale on a file system only this
            // machine writes). Elsewhere ([`crate::git::fsync`]: FUSE, a
            // network or unknown file system) no lock is judged by its
            // date, so the intent is the evidence and must survive a cut:
            // flushed, emptied and written alike.
            let flush = |f: &File| {
                if crate::git::fsync::per_file() {
                    let _ = f.sync_data();
                }
            };
            if *full {
                let _ = f.set_len(0);
                *full = false;
                flush(f);
            }
            if !locks.is_empty() {
                let mut text = String::new();
                for l in locks {
                    text.push_str(&l.to_string_lossy());
                    text.push('\n');
                }
                let _ = f.write_all_at(text.as_bytes(), 0);
                *full = true;
                flush(f);
            }
        }
    });
}

/// Run `write`, a libgit2 call that takes the lock files `locks`, with
/// those files named in `<git dir>/steps-intent` meanwhile. If the process
/// is killed inside `write`, the next run (under the repository lock) finds
/// them named there and knows a lock among them made since is its own
/// leftover; any other lock file belongs to another writer and is left
/// alone. The caller holds the repository lock.
pub fn intending<T, E>(
    repo: &git2::Repository,
    locks: Vec<PathBuf>,
    write: impl FnOnce() -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    let before: Vec<bool> = locks
        .iter()
        .map(|p| std::fs::symlink_metadata(p).is_ok())
        .collect();
    note_intent(repo.path(), &locks);
    let out = write();
    if out.is_ok() && crate::git::shared::of(repo.path()) != crate::git::shared::Shared::Umask {
        // libgit2 ignores core.sharedRepository: what it wrote (the file
        // each lock became, the directories made for it) gets git's modes.
        for l in &locks {
            let target = l.with_extension("");
            let root = match target.starts_with(repo.commondir()) {
                true => repo.commondir(),
                false => repo.path(),
            };
            let _ = crate::git::shared::created_under(repo.path(), root, &target);
        }
    }
    if out.is_ok() && crate::git::fsync::per_file() {
        // Where syncfs does not flush, the intent is the only evidence a
        // lock is ours: the rename that replaced each lock is durable
        // before the intent forgets it.
        let mut dirs: Vec<&Path> = locks.iter().filter_map(|l| l.parent()).collect();
        dirs.dedup();
        for d in dirs {
            let _ = sync_dir(d);
        }
    }
    // A write that failed may leave its lock file behind (a full disk or an
    // I/O error that also failed its removal): the intent stays, and the
    // next run clears the lock as a killed run's. (One that succeeded
    // renamed or removed its locks.)
    if out.is_err() {
        let left = locks
            .iter()
            .zip(&before)
            .any(|(p, was)| !was && std::fs::symlink_metadata(p).is_ok());
        if left {
            note_leftover(repo.path(), &locks);
        }
    }
    note_intent(repo.path(), &[]);
    out
}

fn leftover_path(git_dir: &Path) -> PathBuf {
    git_dir.join("steps-leftover")
}

/// Lock files a failed write of ours left behind, appended to
/// `<git dir>/steps-leftover` (the intent file names only the write in
/// progress): cleared by the next run as a killed run's are.
pub fn note_leftover(git_dir: &Path, locks: &[PathBuf]) {
    use std::io::Write as _;
    if let Ok(mut f) = OpenOptions::new()
        .append(true)
        .create(true)
        .open(leftover_path(git_dir))
    {
        let _ = crate::git::shared::created(git_dir, &leftover_path(git_dir));
        for l in locks
            .iter()
            .filter(|p| std::fs::symlink_metadata(p).is_ok())
        {
            let _ = writeln!(f, "{}", l.display());
        }
    }
}

/// Delete the ref `name` if it exists, with its lock named in the intent
/// file like every other write of ours.
pub fn delete_ref(repo: &git2::Repository, name: &str) -> crate::error::Result<()> {
    if let Ok(mut r) = repo.find_reference(name) {
        intending(repo, ref_locks(repo, name), || r.delete())?;
    }
    Ok(())
}

/// What [`clear_stale`] did with one file a killed git-steps left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cleared {
    /// Removed: git-steps' own (a lock it made, a staged copy it wrote).
    Removed(String),
    /// Kept, moved from `from` to `to`: a worktree file a step was
    /// removing, moved aside, when it was killed. Its content was the
    /// user's worktree's (their edit, if they made one meanwhile), which
    /// git-steps cannot prove it wrote, so it is never deleted.
    Kept { from: String, to: String },
}

/// The prefix of a worktree file moved aside while a step removes it.
pub const GONE_PREFIX: &str = ".git-steps-gone-";

/// Lock files that a killed git-steps left behind (named in its intent,
/// and made after it wrote the intent), and the files its staging area
/// holds. Called with the repository lock held, so no other git-steps is
/// writing; a lock file any other process holds or left is never removed
/// (git reports those, and so does the write that meets one). Returns what
/// was removed or kept, for a message: a worktree file a removal moved
/// aside is kept in `.git/steps/kept/`, not removed ([`Cleared::Kept`]).
pub fn clear_stale(git_dir: &Path) -> Vec<Cleared> {
    let mut removed = Vec::new();
    let intent = intent_path(git_dir);
    if let (Ok(text), Ok(meta)) = (std::fs::read_to_string(&intent), std::fs::metadata(&intent)) {
        let since = meta.modified().ok();
        for l in text.lines().filter(|l| !l.is_empty()) {
            let p = PathBuf::from(l);
            let made = std::fs::symlink_metadata(&p)
                .and_then(|m| m.modified())
                .ok();
            if let (Some(made), Some(since)) = (made, since) {
                if made >= since && std::fs::remove_file(&p).is_ok() {
                    removed.push(p.display().to_string());
                }
            }
        }
        note_intent(git_dir, &[]);
    }
    // Left by a write of ours that failed: made before they were noted
    // (a lock file made after that is another writer's).
    let leftover = leftover_path(git_dir);
    if let (Ok(text), Ok(meta)) = (
        std::fs::read_to_string(&leftover),
        std::fs::metadata(&leftover),
    ) {
        let noted = meta.modified().ok();
        for p in text
            .lines()
            .filter(|l| l.ends_with(".lock"))
            .map(PathBuf::from)
        {
            let made = std::fs::symlink_metadata(&p)
                .and_then(|m| m.modified())
                .ok();
            if let (Some(made), Some(noted)) = (made, noted) {
                if made <= noted && std::fs::remove_file(&p).is_ok() {
                    removed.push(p.display().to_string());
                }
            }
        }
        let _ = std::fs::remove_file(&leftover);
    }
    let mut cleared: Vec<Cleared> = removed.into_iter().map(Cleared::Removed).collect();
    let tmp = tmp_dir(git_dir);
    if let Ok(rd) = std::fs::read_dir(&tmp) {
        for e in rd.flatten() {
            let path = e.path();
            let name = e.file_name();
            if name.to_string_lossy().starts_with(GONE_PREFIX) {
                // (Where it cannot be moved, it stays where it is.)
                if let Ok(to) = keep_aside(git_dir, &path, &name) {
                    cleared.push(Cleared::Kept {
                        from: path.display().to_string(),
                        to: to.display().to_string(),
                    });
                }
            } else if std::fs::remove_file(&path).is_ok() {
                cleared.push(Cleared::Removed(path.display().to_string()));
            }
        }
    }
    cleared
}

/// `path` moved into `.git/steps/kept/` under a name no earlier one has,
/// the move made durable.
fn keep_aside(git_dir: &Path, path: &Path, name: &std::ffi::OsStr) -> std::io::Result<PathBuf> {
    let dir = git_dir.join("steps").join("kept");
    std::fs::create_dir_all(&dir)?;
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for n in 0..1000 {
        let mut file = name.to_os_string();
        file.push(format!(".{secs}.{n}"));
        let to = dir.join(file);
        if std::fs::symlink_metadata(&to).is_ok() {
            continue;
        }
        std::fs::rename(path, &to)?;
        sync_dir(&dir)?;
        if let Some(from) = path.parent() {
            sync_dir(from)?;
        }
        return Ok(to);
    }
    Err(std::io::Error::from(std::io::ErrorKind::AlreadyExists))
}

/// Where worktree writes are staged before they are renamed into place.
pub fn tmp_dir(git_dir: &Path) -> PathBuf {
    git_dir.join("steps-tmp")
}

impl Drop for Lock {
    fn drop(&mut self) {
        // Leave the file; clear the pid so the next holder does not report a
        // clean exit as a dead holder.
        let _ = self._file.set_len(0);
    }
}

/// fsync a directory, so the names in it are durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// When this machine last booted (`btime` in `/proc/stat`), if known.
pub fn boot_time() -> Option<std::time::SystemTime> {
    static BOOT: std::sync::OnceLock<Option<std::time::SystemTime>> = std::sync::OnceLock::new();
    *BOOT.get_or_init(read_boot_time)
}

fn read_boot_time() -> Option<std::time::SystemTime> {
    crate::os::boot_time()
}

/// Whether the lock file at `path` was last written before this machine
/// booted: no process alive now can hold it (a power cut or a reset left
/// it, with the write it guarded unfinished). A lock of the current boot
/// is never stale by this rule, however old. `btime` alone is no evidence
/// (a time namespace shifts it): callers ask first whether the repository
/// was last written in another boot ([`crate::flush::rebooted`]).
///
/// Only on a file system known to be local to this machine (ext2/3/4, xfs,
/// btrfs, f2fs, tmpfs, overlay, zfs): elsewhere a lock may be another
/// machine's (NFS, SMB, a VM's shared folder), taken before this one booted
/// and held now. And never while a process here has it open (a clock
/// stepped forward after boot, on a machine without a real-time clock, can
/// date a live lock before the boot).
pub fn from_before_boot(path: &Path) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    let Some(boot) = boot_time() else {
        return false;
    };
    meta.modified().is_ok_and(|m| m < boot) && on_local_fs(path) && !open_here(path)
}

/// Whether `path` is on a file system only this machine writes.
fn on_local_fs(path: &Path) -> bool {
    crate::git::fsync::on_local_fs(path)
}

/// Whether a process on this machine has `path` open (a process this
/// user cannot see counts as not; where none can be seen, as open).
fn open_here(path: &Path) -> bool {
    crate::os::open_here(path)
}
