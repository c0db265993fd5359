//! Linux's own calls: `statfs` and `syncfs`, `/proc` (mounts, locks,
//! descriptors, boot, memory), `memfd_create`, read leases, pidfds,
//! inotify, `prctl` and glibc's `mallopt`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, SystemTime};

pub(super) fn fs_type(path: &Path) -> Option<i64> {
    // `f_type` is an i64 on x86_64, narrower elsewhere.
    #[allow(clippy::unnecessary_cast)]
    rustix::fs::statfs(path).ok().map(|s| s.f_type as i64)
}

pub(super) fn syncfs(dir: &File) -> std::io::Result<()> {
    Ok(rustix::fs::syncfs(dir)?)
}

pub(super) fn mountinfo() -> Option<String> {
    std::fs::read_to_string("/proc/self/mountinfo").ok()
}

pub(super) fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// `btime` in `/proc/stat`.
pub(super) fn boot_time() -> Option<SystemTime> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let secs: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(std::time::UNIX_EPOCH + Duration::from_secs(secs))
}

/// Read from `/proc/locks`, where std's lock (flock(2) on Linux) is
/// listed as FLOCK.
pub(super) fn flock_holder(path: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    let dev = meta.dev();
    // As the kernel prints it: major:minor in hex (two digits at least),
    // then the inode.
    let id = format!(
        "{:02x}:{:02x}:{}",
        libc::major(dev),
        libc::minor(dev),
        meta.ino()
    );
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // `1: FLOCK  ADVISORY  WRITE <pid> <maj:min:ino> 0 EOF`; a waiter's
        // line has `->` after the number.
        match f.as_slice() {
            [_, "FLOCK", _, "WRITE", pid, file, ..] if *file == id => pid.parse().ok(),
            _ => None,
        }
    })
}

/// Read through `/proc/*/fd` (a process this user cannot see counts as
/// not having it open).
pub(super) fn open_here(path: &Path) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return true;
    };
    let target = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    procs.flatten().any(|p| {
        p.file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
            && std::fs::read_dir(p.path().join("fd")).is_ok_and(|fds| {
                fds.flatten()
                    .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l == target))
            })
    })
}

/// As the kernel answers a read lease (refused with EAGAIN exactly when
/// some process has the file open for writing: fcntl(2), F_SETLEASE).
/// None where no lease can be had: a file system without leases, a file
/// of another user, `fs.leases-enable` off. The lease is given back at
/// once; its break notice, were one to come, is SIGURG (ignored) rather
/// than SIGIO (which kills).
pub(super) fn open_for_writing(p: &Path) -> Option<bool> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(p)
        .ok()?;
    if !f.metadata().ok()?.is_file() {
        return Some(false);
    }
    let fd = f.as_raw_fd();
    // fcntl.h's F_SETSIG (Linux, asm-generic), which the libc crate does
    // not name; where the kernel refuses it, no lease is taken.
    const F_SETSIG: libc::c_int = 10;
    // SAFETY: fcntl on a descriptor this function owns and keeps open for
    // the calls; the arguments are plain integers.
    let (taken, errno) = unsafe {
        if libc::fcntl(fd, F_SETSIG, libc::SIGURG) != 0 {
            // A break notice would be SIGIO, which kills: no lease.
            return None;
        }
        let taken = libc::fcntl(fd, libc::F_SETLEASE, libc::F_RDLCK);
        let errno = *libc::__errno_location();
        if taken == 0 {
            libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK);
        }
        (taken, errno)
    };
    match (taken, errno) {
        (0, _) => Some(false),
        (_, libc::EAGAIN) => Some(true),
        _ => None,
    }
}

/// `Umask:` in `/proc/self/status`.
pub(super) fn umask() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Umask:"))?;
    u32::from_str_radix(line["Umask:".len()..].trim(), 8).ok()
}

/// `VmHWM:` in `/proc/self/status`.
pub(super) fn peak_memory_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A `memfd_create` file, reached through `/proc/self/fd`.
pub(super) fn anonymous_file(name: &str, bytes: &[u8]) -> std::io::Result<(File, PathBuf)> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)?;
    let mut f = File::from(fd);
    f.write_all(bytes)?;
    let path = PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()));
    Ok((f, path))
}

pub(super) fn lookup_dir_flags() -> rustix::fs::OFlags {
    rustix::fs::OFlags::PATH
}

/// A pidfd of `child`, readable once it exits.
pub(super) fn pidfd(child: &Child) -> Option<rustix::fd::OwnedFd> {
    let pid = rustix::process::Pid::from_raw(child.id() as i32)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}

/// An inotify descriptor watching `dir` for names created, moved in,
/// written or changed.
pub(super) fn watch_dir(dir: &Path) -> Option<rustix::fd::OwnedFd> {
    use rustix::fs::inotify;
    let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).ok()?;
    inotify::add_watch(
        &fd,
        dir,
        inotify::WatchFlags::CREATE
            | inotify::WatchFlags::MOVED_TO
            | inotify::WatchFlags::CLOSE_WRITE
            | inotify::WatchFlags::ATTRIB,
    )
    .ok()?;
    Some(fd)
}

/// Sleep until `fd` is readable or `left` has passed.
pub(super) fn wait_readable(fd: &rustix::fd::OwnedFd, left: Duration) {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let until = Timespec::try_from(left).unwrap_or(Timespec {
        tv_sec: 60,
        tv_nsec: 0,
    });
    let _ = poll(&mut [PollFd::new(fd, PollFlags::IN)], Some(&until));
}

/// Read away an inotify descriptor's events.
pub(super) fn drain(fd: &rustix::fd::OwnedFd) {
    let mut events = [0u8; 4096];
    while matches!(rustix::io::read(fd, &mut events), Ok(n) if n > 0) {}
}

pub(super) fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe; the closure allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

/// glibc gives freed memory back to the kernel (and asks for it again) at
/// every step's peak: a brk pair per allocation burst. Keep up to 64 MiB
/// of free heap instead.
pub(super) fn tune_allocator() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only tunes the allocator; called before any thread.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TOP_PAD, 16 << 20);
    }
}

/// `pid (comm) state ppid …` in `/proc/<pid>/stat`: the comm may hold
/// spaces, so the fields are read after its last `)`.
pub(super) fn parent_of(pid: u32) -> Option<(u32, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_string();
    let ppid = rest.split_whitespace().nth(1)?.parse().ok()?;
    Some((ppid, comm))
}
