//! How this process makes a write durable: by one `syncfs` of the file
//! system at a commit point, where that is known to flush, or file by file
//! (write, fsync the file, rename or link, fsync the directory), as git's
//! `core.fsync` does, everywhere else.
//!
//! `syncfs(2)` flushes everything only where the file system implements
//! it. ext4, xfs, btrfs, f2fs, zfs and tmpfs do; a FUSE file system never
//! sees it (the kernel forwards it only to servers that ask, such as
//! virtiofs), nor may a network or unknown one, and there a rename after a
//! `syncfs` makes an empty file durable. Owns that judgement (per file
//! system, by `statfs(2)`'s magic number; an overlay by its upper layer),
//! the process's switch to flushing file by file once any repository it
//! writes is on such a file system ([`per_file`], libgit2's own fsync
//! turned on with it), and the files and directories written since the
//! last commit point ([`wrote`], [`named`]) that [`flush_pending`] then
//! flushes. Invariant: with the switch on, every file a commit point makes
//! reachable had its bytes fsynced before the rename that names it, and
//! the directory holding its name was fsynced before that commit point
//! returned; with it off, nothing here costs a system call.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// `statfs(2)` magic numbers of the file systems whose `syncfs` flushes
/// everything written on them (ext2/3/4, xfs, btrfs, f2fs, tmpfs, zfs),
/// which are also the ones only this machine writes.
pub const SYNCFS_FLUSHES: &[(i64, &str)] = &[
    (0xEF53, "ext4"),
    (0x5846_5342, "xfs"),
    (0x9123_683E, "btrfs"),
    (0xF2F5_2010, "f2fs"),
    (0x0102_1994, "tmpfs"),
    (0x2FC1_2FC1, "zfs"),
];

/// overlayfs: its `syncfs` flushes its upper layer, so it counts as that.
pub const OVERLAY: i64 = 0x794C_7630;

/// How a file system was judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flushing {
    /// One `syncfs` at a commit point flushes everything written before it.
    Syncfs,
    /// Each file and directory is flushed on its own.
    PerFile,
}

/// What `GIT_STEPS_FLUSH` says: `syncfs` or `files` forces one way for
/// every file system (the power-loss harness models a FUSE file system on
/// ext4 this way; a user whose file system is judged wrongly can too).
fn forced() -> Option<Flushing> {
    match std::env::var(crate::keys::FLUSH.name).ok()?.as_str() {
        // The portable set has no syncfs: there it cannot be forced.
        "syncfs" if !crate::os::portable() => Some(Flushing::Syncfs),
        "files" => Some(Flushing::PerFile),
        _ => None,
    }
}

/// The `statfs(2)` type of the file system holding `path`.
fn fs_type(path: &Path) -> Option<i64> {
    crate::os::fs_type(path)
}

/// Whether `path` is on a file system only this machine writes (the
/// allow-list, overlays included).
/// (`GIT_STEPS_FLUSH=files` judges every file system as an unknown one:
/// none is taken as this machine's alone.)
pub fn on_local_fs(path: &Path) -> bool {
    forced() != Some(Flushing::PerFile)
        && fs_type(path)
            .is_some_and(|t| t == OVERLAY || SYNCFS_FLUSHES.iter().any(|(m, _)| *m == t))
}

/// How the file system holding `path` is flushed (an overlay by its upper
/// layer, read from `/proc/self/mountinfo`, when that can be seen).
pub fn flushing_of(path: &Path) -> Flushing {
    if let Some(f) = forced() {
        return f;
    }
    let allowed = |t: i64| SYNCFS_FLUSHES.iter().any(|(m, _)| *m == t);
    match fs_type(path) {
        Some(t) if allowed(t) => Flushing::Syncfs,
        // An overlay flushes its upper layer. In a container the upper
        // directory is the host's and cannot be seen: trusted, as nearly
        // every container's is ext4 or xfs (`GIT_STEPS_FLUSH=files` for one
        // that is not); one seen on another file system is not.
        Some(OVERLAY) => match overlay_upper(path).map(|u| fs_type(&u)) {
            Some(Some(t)) if !allowed(t) => Flushing::PerFile,
            _ => Flushing::Syncfs,
        },
        _ => Flushing::PerFile,
    }
}

/// The upper directory of the overlay mount holding `path`.
fn overlay_upper(path: &Path) -> Option<PathBuf> {
    let path = std::fs::canonicalize(path).ok()?;
    let info = crate::os::mountinfo()?;
    upper_of(&info, &path)
}

/// In a mountinfo text, the `upperdir=` of the overlay mounted deepest
/// above `path`.
fn upper_of(mountinfo: &str, path: &Path) -> Option<PathBuf> {
    let mut best: Option<(usize, Option<PathBuf>)> = None;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(point), Some(fstype), Some(opts)) =
            (fields.get(4), fields.get(dash + 1), fields.get(dash + 3))
        else {
            continue;
        };
        let point = unescape(point);
        if !path.starts_with(&point) {
            continue;
        }
        let depth = point.components().count();
        if best.as_ref().is_some_and(|(d, _)| *d > depth) {
            continue;
        }
        let upper = (*fstype == "overlay").then(|| {
            opts.split(',')
                .find_map(|o| o.strip_prefix("upperdir="))
                .map(unescape)
        });
        best = Some((depth, upper.flatten()));
    }
    best.and_then(|(_, u)| u)
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

static PER_FILE: AtomicBool = AtomicBool::new(false);

/// The devices judged so far (a repository opened per step costs one
/// `stat`, not a `statfs` and a mountinfo read).
fn judged() -> &'static Mutex<HashMap<u64, Flushing>> {
    static J: std::sync::OnceLock<Mutex<HashMap<u64, Flushing>>> = std::sync::OnceLock::new();
    J.get_or_init(Default::default)
}

/// Note that this process writes the repository (or any directory) at
/// `path`: if its file system is not one whose `syncfs` flushes, every
/// later write of this process is flushed file by file. Call before the
/// first write there (libgit2 decides its own fsync when it opens a
/// repository).
pub fn note_file_system(path: &Path) -> Flushing {
    // Nothing there to write to (yet): nothing judged.
    match std::fs::metadata(path) {
        Ok(m) => judge_device(m.dev(), path),
        Err(_) => Flushing::Syncfs,
    }
}

/// [`note_file_system`] for `path` on the device `dev` (its `st_dev`,
/// known to the caller).
pub fn judge_device(dev: u64, path: &Path) -> Flushing {
    let known = judged()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&dev)
        .copied();
    let how = known.unwrap_or_else(|| {
        let how = flushing_of(path);
        judged()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(dev, how);
        how
    });
    if how == Flushing::PerFile && !PER_FILE.swap(true, Ordering::SeqCst) {
        // libgit2's objects, refs, reflogs and packs: fsynced, and their
        // directories, as it writes them.
        // SAFETY: a global option libgit2 reads on each write (and when
        // it opens a repository's ref database); set from Rust before the
        // writes it is meant for.
        unsafe {
            libgit2_sys::git_libgit2_opts(
                libgit2_sys::GIT_OPT_ENABLE_FSYNC_GITDIR as libc::c_int,
                1 as libc::c_int,
            );
        }
    }
    how
}

/// `Repository::discover`, with the file systems of `path` and of the git
/// dir it finds judged first: libgit2 decides its own fsync of refs when
/// it opens a repository.
pub fn discover(path: &Path) -> Result<git2::Repository, git2::Error> {
    note_file_system(path);
    let was = per_file();
    let repo = git2::Repository::discover(path)?;
    note_file_system(repo.commondir());
    if per_file() && !was {
        // Its git dir is elsewhere, on a file system flushed file by file.
        return git2::Repository::open(repo.path());
    }
    Ok(repo)
}

/// Whether this process flushes file by file.
pub fn per_file() -> bool {
    PER_FILE.load(Ordering::SeqCst)
}

/// Files and directories written since the last commit point, in order.
#[derive(Default)]
struct Pending {
    files: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
}

fn pending() -> &'static Mutex<Pending> {
    static P: std::sync::OnceLock<Mutex<Pending>> = std::sync::OnceLock::new();
    P.get_or_init(Default::default)
}

/// `path` was written (or linked): its bytes are flushed at the next
/// commit point. A no-op unless the process flushes file by file.
pub fn wrote(path: &Path) {
    if per_file() {
        let mut p = pending().lock().unwrap_or_else(|e| e.into_inner());
        if !p.files.iter().any(|f| f == path) {
            p.files.push(path.to_path_buf());
        }
    }
}

/// A name in `dir` was made, renamed or removed: the directory is flushed
/// at the next commit point. A no-op unless the process flushes file by
/// file.
pub fn named(dir: &Path) {
    if per_file() {
        let mut p = pending().lock().unwrap_or_else(|e| e.into_inner());
        if !p.dirs.iter().any(|d| d == dir) {
            p.dirs.push(dir.to_path_buf());
        }
    }
}

/// Flush what [`wrote`] and [`named`] recorded: each file's bytes, then
/// each directory's names. A file gone since (a temporary unlinked) is
/// passed over. How many were flushed.
pub fn flush_pending() -> std::io::Result<usize> {
    // One flush at a time: a second caller (the box's flush running beside
    // a push) must not find the list taken and reach its commit point
    // while the first is still flushing what it took.
    static FLUSHING: Mutex<()> = Mutex::new(());
    let _one = FLUSHING.lock().unwrap_or_else(|e| e.into_inner());
    let Pending { files, dirs } =
        std::mem::take(&mut *pending().lock().unwrap_or_else(|e| e.into_inner()));
    let mut n = 0;
    let result = (|| {
        for f in &files {
            match std::fs::File::open(f) {
                Ok(file) => file.sync_all()?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
            n += 1;
        }
        for d in &dirs {
            match std::fs::File::open(d) {
                Ok(dir) => dir.sync_all()?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
            n += 1;
        }
        Ok(n)
    })();
    if result.is_err() {
        // Not flushed: kept for the next try.
        let mut p = pending().lock().unwrap_or_else(|e| e.into_inner());
        for f in files {
            if !p.files.contains(&f) {
                p.files.push(f);
            }
        }
        for d in dirs {
            if !p.dirs.contains(&d) {
                p.dirs.push(d);
            }
        }
    }
    result
}

/// Flush a file just written, before a rename or link names it, when the
/// process flushes file by file.
pub fn before_naming(file: &std::fs::File) -> std::io::Result<()> {
    if per_file() {
        file.sync_data()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overlay_counts_as_its_upper_layer() {
        let info = "\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
40 27 0:50 / /work rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/up\\040per,workdir=/w
41 40 0:51 / /work/fuse rw,relatime - fuse.lazyfs lazyfs rw
";
        assert_eq!(
            upper_of(info, Path::new("/work/repo")),
            Some(PathBuf::from("/up per"))
        );
        // A mount below the overlay is not the overlay.
        assert_eq!(upper_of(info, Path::new("/work/fuse/repo")), None);
        assert_eq!(upper_of(info, Path::new("/home")), None);
    }

    #[test]
    fn this_machines_scratch_file_systems_are_judged() {
        let t = tempfile::tempdir().unwrap();
        // tmpfs and ext4 flush with syncfs; /proc (procfs) is not on the
        // list. (Without GIT_STEPS_FLUSH in the test's environment.)
        if std::env::var_os(crate::keys::FLUSH.name).is_none() {
            if fs_type(t.path()).is_some_and(|t| SYNCFS_FLUSHES.iter().any(|(m, _)| *m == t)) {
                assert_eq!(flushing_of(t.path()), Flushing::Syncfs);
            }
            assert_eq!(flushing_of(Path::new("/proc")), Flushing::PerFile);
        }
    }
}
