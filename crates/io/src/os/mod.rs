//! What git-steps asks of the operating system beyond std and rustix's
//! portable calls, in one place: Linux's own calls ([`linux`]) and a
//! portable set that any Unix serves ([`portable`]).
//!
//! Owns the choice between them, made once per process: Linux uses its
//! own calls unless `GIT_STEPS_OS=portable` forces the portable set (so
//! the whole test suite runs through it on Linux too); every other Unix
//! (macOS) builds and uses the portable set only. Invariant: the portable
//! set never claims evidence it cannot read. Where a fact is unknown (who
//! holds a lock, when the machine booted, whether a file system's
//! `syncfs` flushes, whether a process has a file open) it answers
//! "unknown", and its callers take the careful path on that answer: no
//! lock is judged stale, nothing is moved aside by its date, every write
//! is flushed file by file. One answer is not careful, and is said where
//! it is used: a file some process holds open for writing is replaced
//! under it, as any checkout does (only Linux's read lease tells).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, SystemTime};

#[cfg(target_os = "linux")]
mod linux;
mod portable;

/// Whether this process uses the portable set: always off Linux, and on
/// Linux when `GIT_STEPS_OS=portable` (read once).
pub fn portable() -> bool {
    #[cfg(target_os = "linux")]
    {
        static FORCED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *FORCED
            .get_or_init(|| std::env::var_os(crate::keys::OS.name).is_some_and(|v| v == "portable"))
    }
    #[cfg(not(target_os = "linux"))]
    {
        true
    }
}

/// The implementation serving this process: Linux's own, or the portable one.
macro_rules! either {
    ($name:ident ( $($arg:expr),* )) => {{
        #[cfg(target_os = "linux")]
        {
            if portable() {
                portable::$name($($arg),*)
            } else {
                linux::$name($($arg),*)
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            portable::$name($($arg),*)
        }
    }};
}

/// The `statfs(2)` type of the file system holding `path`; None where it
/// cannot be told (the portable set: no file system is known to flush
/// with one `syncfs`).
pub fn fs_type(path: &Path) -> Option<i64> {
    either!(fs_type(path))
}

/// Flush the file system holding `dir` (`syncfs(2)`). Only called where
/// [`fs_type`] judged that to flush; the portable set has no such call.
pub fn syncfs(dir: &File) -> std::io::Result<()> {
    either!(syncfs(dir))
}

/// Flush the drive's own write cache for the device holding `dir`, where
/// `fsync(2)` does not (macOS: `F_FULLFSYNC`, which std's `sync_all` is
/// there); elsewhere nothing, as `fsync` already does it. Called at a
/// commit point, after every file was flushed one by one, for what
/// libgit2 flushed with a plain `fsync`.
pub fn flush_drive_cache(dir: &File) -> std::io::Result<()> {
    #[cfg(target_vendor = "apple")]
    return dir.sync_all();
    #[cfg(not(target_vendor = "apple"))]
    {
        let _ = dir;
        Ok(())
    }
}

/// This process's mount table (`/proc/self/mountinfo`), if it can be read.
pub fn mountinfo() -> Option<String> {
    either!(mountinfo())
}

/// The kernel's identity of this boot, if it says one.
pub fn boot_id() -> Option<String> {
    either!(boot_id())
}

/// When this machine last booted, if known.
pub fn boot_time() -> Option<SystemTime> {
    either!(boot_time())
}

/// The pid of the process holding an exclusive `flock(2)` on `path` now,
/// read without taking the lock; None when nobody holds it or it cannot
/// be told.
pub fn flock_holder(path: &Path) -> Option<u32> {
    either!(flock_holder(path))
}

/// Whether a process on this machine has `path` open; true when that
/// cannot be seen (so nothing is judged abandoned on a guess).
pub fn open_here(path: &Path) -> bool {
    either!(open_here(path))
}

/// Whether some process holds the regular file at `path` open for
/// writing; None where that cannot be told.
pub fn open_for_writing(path: &Path) -> Option<bool> {
    either!(open_for_writing(path))
}

/// This process's umask, read without setting it (which would race with
/// other threads); None where it cannot be.
pub fn umask() -> Option<u32> {
    static MASK: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *MASK.get_or_init(|| either!(umask()))
}

/// This process's peak resident memory in KiB, if known.
pub fn peak_memory_kib() -> Option<u64> {
    either!(peak_memory_kib())
}

/// This machine's name, as the kernel has it (`uname(2)`).
pub fn hostname() -> Option<String> {
    let name = rustix::system::uname();
    let name = name.nodename().to_string_lossy().trim().to_string();
    (!name.is_empty()).then_some(name)
}

/// A file with `bytes` in it that exists only while this process holds it
/// open (nothing on disk outlives the process), and a path that opens it
/// from this process. Each call to [`rewind`] before a reader opens the
/// path makes it read from the start (where opening the path shares this
/// descriptor's offset, as macOS's `/dev/fd` does).
pub fn anonymous_file(name: &str, bytes: &[u8]) -> std::io::Result<(File, PathBuf)> {
    either!(anonymous_file(name, bytes))
}

/// Set `file`'s offset back to its start (see [`anonymous_file`]).
pub fn rewind(mut file: &File) -> std::io::Result<()> {
    use std::io::Seek;
    file.seek(std::io::SeekFrom::Start(0)).map(|_| ())
}

/// `renameat2(2)` (Linux) or `renameatx_np(2)` (macOS) with `flags`,
/// relative to the working directory as `rename(2)` is; where neither
/// exists, an error that [`rename_unsupported`] recognises.
/// (The same call in both sets: Linux's and Apple's have one meaning, and
/// rustix maps the flags.)
pub fn rename_with(from: &Path, to: &Path, flags: rustix::fs::RenameFlags) -> std::io::Result<()> {
    #[cfg(any(target_os = "linux", target_vendor = "apple"))]
    {
        rustix::fs::renameat_with(rustix::fs::CWD, from, rustix::fs::CWD, to, flags)
            .map_err(Into::into)
    }
    #[cfg(not(any(target_os = "linux", target_vendor = "apple")))]
    {
        let _ = (from, to, flags);
        Err(std::io::Error::from_raw_os_error(libc::ENOSYS))
    }
}

/// Whether a [`rename_with`] error says the call cannot do what was asked
/// here (an old kernel, a file system without the flag, no such call).
pub fn rename_unsupported(e: &std::io::Error) -> bool {
    // (EOPNOTSUPP and ENOTSUP are one number on Linux, two on macOS.)
    e.raw_os_error()
        .is_some_and(|c| [libc::EINVAL, libc::ENOSYS, libc::EOPNOTSUPP, libc::ENOTSUP].contains(&c))
}

/// The flags that open a directory only to look names up under it
/// (`O_PATH` on Linux, needing no read permission; read-only elsewhere).
pub fn lookup_dir_flags() -> rustix::fs::OFlags {
    either!(lookup_dir_flags())
}

/// Waits for a child process to exit: woken by the kernel (a pidfd) on
/// Linux, by looking again every `poll` elsewhere.
pub struct ExitWatch {
    #[cfg(target_os = "linux")]
    fd: Option<rustix::fd::OwnedFd>,
    poll: Duration,
}

impl ExitWatch {
    /// A watch on `child`; where the kernel cannot wake the wait, it
    /// sleeps at most `poll` at a time.
    pub fn new(child: &Child, poll: Duration) -> ExitWatch {
        let _ = child;
        ExitWatch {
            #[cfg(target_os = "linux")]
            fd: (!portable()).then(|| linux::pidfd(child)).flatten(),
            poll,
        }
    }

    /// Sleep until the child may have exited, or `left` has passed.
    pub fn wait(&self, left: Duration) {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.fd {
            linux::wait_readable(fd, left);
            return;
        }
        std::thread::sleep(left.min(self.poll));
    }
}

/// Waits for names to change in one directory: inotify on Linux, looking
/// again every `poll` elsewhere.
pub struct DirWatch {
    #[cfg(target_os = "linux")]
    fd: Option<rustix::fd::OwnedFd>,
    poll: Duration,
}

impl DirWatch {
    /// A watch on `dir`, set before the caller's first look, so a change
    /// in between still wakes the wait.
    pub fn new(dir: &Path, poll: Duration) -> DirWatch {
        let _ = dir;
        DirWatch {
            #[cfg(target_os = "linux")]
            fd: (!portable()).then(|| linux::watch_dir(dir)).flatten(),
            poll,
        }
    }

    /// Sleep until something is created, moved, written or changed in
    /// the directory, or `left` has passed.
    pub fn wait(&self, left: Duration) {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.fd {
            linux::wait_readable(fd, left);
            linux::drain(fd);
            return;
        }
        std::thread::sleep(left.min(self.poll));
    }
}

/// Have the child `cmd` starts killed when this process dies (Linux's
/// `PR_SET_PDEATHSIG`); elsewhere nothing, and the caller's own watch on
/// its parent is what ends it.
pub fn die_with_parent(cmd: &mut Command) {
    #[cfg(target_os = "linux")]
    if !portable() {
        linux::die_with_parent(cmd);
    }
    let _ = cmd;
}

/// Tune the allocator before any thread starts (glibc's `mallopt`).
pub fn tune_allocator() {
    #[cfg(target_os = "linux")]
    if !portable() {
        linux::tune_allocator();
    }
}

/// The parent pid and command name of process `pid`, if it can be seen.
pub fn parent_of(pid: u32) -> Option<(u32, String)> {
    either!(parent_of(pid))
}

#[cfg(all(test, target_os = "linux"))]
mod tests;
