//! The portable set: what any Unix answers through POSIX calls, and
//! "unknown" for what only Linux's `/proc` and its own calls tell. Used
//! off Linux, and on Linux under `GIT_STEPS_OS=portable`, so that every
//! test runs through it here too.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// No file system is known to flush everything with one `syncfs`: each
/// write is flushed file by file.
pub(super) fn fs_type(_: &Path) -> Option<i64> {
    None
}

pub(super) fn syncfs(_: &File) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "syncfs(2) is Linux's; here each write is flushed file by file",
    ))
}

pub(super) fn mountinfo() -> Option<String> {
    None
}

/// As `sysctl(8)` says it: `kern.bootsessionuuid` (macOS), else
/// `kernel.random.boot_id` (Linux's sysctl). Unknown where neither
/// answers: then a repository is never judged written in another boot,
/// and nothing in it is checked for what a cut tore.
pub(super) fn boot_id() -> Option<String> {
    static ID: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        ["kern.bootsessionuuid", "kernel.random.boot_id"]
            .iter()
            .find_map(|name| sysctl(name))
    })
    .clone()
}

/// `sysctl -n name`, from where the systems keep it, if it answers.
fn sysctl(name: &str) -> Option<String> {
    ["/usr/sbin/sysctl", "/sbin/sysctl", "sysctl"]
        .iter()
        .find_map(|exe| {
            let out = std::process::Command::new(exe)
                .args(["-n", name])
                .stdin(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .output()
                .ok()?;
            let value = String::from_utf8_lossy(&out.stdout).trim().to_string();
            (out.status.success() && !value.is_empty()).then_some(value)
        })
}

pub(super) fn boot_time() -> Option<SystemTime> {
    None
}

/// Asked of the lock itself: a shared `flock` that cannot be had means an
/// exclusive one is held, and the holder wrote its pid in the file. The
/// shared lock is given back at once; a writer that asks in that instant
/// waits for it (`lock::acquire` waits up to a second), it does not fail.
pub(super) fn flock_holder(path: &Path) -> Option<u32> {
    let file = File::open(path).ok()?;
    match file.try_lock_shared() {
        Ok(()) => None,
        Err(std::fs::TryLockError::WouldBlock) => {
            std::fs::read_to_string(path).ok()?.trim().parse().ok()
        }
        Err(std::fs::TryLockError::Error(_)) => None,
    }
}

/// Cannot be seen: counts as open.
pub(super) fn open_here(_: &Path) -> bool {
    true
}

pub(super) fn open_for_writing(_: &Path) -> Option<bool> {
    None
}

pub(super) fn umask() -> Option<u32> {
    None
}

pub(super) fn peak_memory_kib() -> Option<u64> {
    None
}

/// An unlinked temporary file, reached through `/dev/fd` (on Linux a
/// link to `/proc/self/fd`; on macOS a descriptor that shares this one's
/// offset, hence [`super::rewind`]).
pub(super) fn anonymous_file(_: &str, bytes: &[u8]) -> std::io::Result<(File, PathBuf)> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let mut f = tempfile::tempfile()?;
    f.write_all(bytes)?;
    let path = PathBuf::from(format!("/dev/fd/{}", f.as_raw_fd()));
    Ok((f, path))
}

pub(super) fn lookup_dir_flags() -> rustix::fs::OFlags {
    rustix::fs::OFlags::RDONLY
}

/// As `ps(1)` prints it (POSIX `-o ppid= -o comm=`; macOS prints the
/// command's path, so only its last part is kept).
pub(super) fn parent_of(pid: u32) -> Option<(u32, String)> {
    let out = std::process::Command::new("ps")
        .args(["-o", "ppid=", "-o", "comm=", "-p", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (ppid, comm) = text.trim().split_once(char::is_whitespace)?;
    let comm = comm.trim();
    let comm = comm.rsplit('/').next().unwrap_or(comm);
    Some((ppid.trim().parse().ok()?, comm.to_string()))
}
