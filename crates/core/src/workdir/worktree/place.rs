//! One file of the worktree written or removed, as a compare-and-swap on
//! its name.
//!
//! Owns the writes themselves: staged beside the target, swapped in with
//! `renameat2` (`RENAME_EXCHANGE`, `RENAME_NOREPLACE`), swapped back when
//! the user's edit came in between. Invariant: nothing is written through a
//! symlink or a non-directory, a user's write that races a swap is the one
//! left in place, and a file a process holds open for writing is never
//! replaced or removed under it (where the file system grants leases).

use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use git2::Repository;
use rustix::fs::RenameFlags;
use rustix::io::Errno;

use super::on_disk;
use crate::error::{Context, Error, Result};
use crate::git::{MODE_EXEC, MODE_LINK};

/// Make sure every parent of `path` is a real directory inside the worktree,
/// creating missing ones; never follow a symlink.
pub(super) fn parent_dir(workdir: &Path, path: &str) -> Result<PathBuf> {
    let mut dir = PathBuf::from(workdir);
    let parts: Vec<&str> = path.split('/').collect();
    for part in &parts[..parts.len() - 1] {
        dir.push(part);
        match fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(Error::local(format!(
                    "{} is not a directory in the worktree; refusing to write {path} through it",
                    dir.display()
                )))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                fs::create_dir(&dir).context(|| format!("cannot create {}", dir.display()))?;
                // Its name durable before anything is named in it (the
                // update flushes the directories it wrote in, not their
                // parents).
                crate::lock::sync_dir(dir.parent().unwrap_or(workdir))
                    .context(|| format!("cannot create {}", dir.display()))?
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(dir)
}

/// What a path held, as [`on_disk`] reads it, judged by a caller: whether
/// it is what the write or removal may replace.
pub(super) type Replaces<'a> = &'a dyn Fn(&Option<(Vec<u8>, u32)>) -> bool;

/// What a worktree write puts in a file.
pub(super) enum Content<'a> {
    /// These bytes (a link's target, or a file as a rule converted it).
    Bytes(std::borrow::Cow<'a, [u8]>),
    /// The blob as it is, streamed from the object database (a large file
    /// is never held).
    Blob(&'a Repository, git2::Oid),
}

impl Content<'_> {
    /// The object id of the bytes, as `git hash-object` names them.
    fn id(&self) -> std::result::Result<git2::Oid, git2::Error> {
        match self {
            Content::Bytes(b) => git2::Oid::hash_object(git2::ObjectType::Blob, b),
            Content::Blob(_, oid) => Ok(*oid),
        }
    }
}

thread_local! {
    /// Files staged ahead of their swap by [`prestage`]: (path, content
    /// id, mode, staged file, in this staging directory).
    static PRESTAGED: std::cell::RefCell<Vec<(String, git2::Oid, u32, PathBuf)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Stage the file `path` will get in `staging` now, not flushed: the
/// caller's flush of the file system (the one that makes the branch's move
/// durable) makes its bytes durable before [`write`] swaps it in, so the
/// swap needs no fsync of its own (where syncfs is not known to flush, the
/// same flush fsyncs it by name, [`crate::git::fsync`]). Links are not
/// staged ahead.
pub(super) fn prestage(staging: &Path, path: &str, content: &Content<'_>, mode: u32) -> Result<()> {
    if mode == MODE_LINK {
        return Ok(());
    }
    let make = || {
        tempfile::Builder::new()
            .prefix(".git-steps-")
            .tempfile_in(staging)
    };
    let tmp = match make() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            make_staging(staging);
            make()
        }
        r => r,
    }
    .context(|| format!("cannot write {path}"))?;
    write_content(tmp.as_file(), content, mode).context(|| format!("cannot write {path}"))?;
    let staged = tmp
        .into_temp_path()
        .keep()
        .map_err(|e| e.error)
        .context(|| format!("cannot write {path}"))?;
    crate::git::fsync::wrote(&staged);
    let id = content.id()?;
    PRESTAGED.with(|p| p.borrow_mut().push((path.to_string(), id, mode, staged)));
    Ok(())
}

/// Remove what [`prestage`] staged and no write took.
pub(super) fn drop_prestaged() {
    for (_, _, _, f) in PRESTAGED.with(|p| std::mem::take(&mut *p.borrow_mut())) {
        let _ = fs::remove_file(f);
    }
}

fn take_prestaged(staging: &Path, path: &str, id: git2::Oid, mode: u32) -> Option<PathBuf> {
    PRESTAGED.with(|p| {
        let mut p = p.borrow_mut();
        let i = p.iter().position(|(q, i, m, f)| {
            q == path && *i == id && *m == mode && f.parent() == Some(staging)
        })?;
        let (_, _, _, f) = p.remove(i);
        // Still ours, whole (a kill between stage and swap leaves it for
        // the stale-file sweep, not for this process).
        fs::symlink_metadata(&f).is_ok().then_some(f)
    })
}

fn write_content(mut f: &fs::File, content: &Content<'_>, mode: u32) -> std::io::Result<()> {
    match content {
        Content::Bytes(b) => f.write_all(b)?,
        Content::Blob(repo, oid) => {
            let mut failed = None;
            crate::git::blob_chunks(repo, *oid, &mut |chunk| {
                if failed.is_none() {
                    failed = f.write_all(chunk).err();
                }
            })
            .map_err(std::io::Error::other)?;
            if let Some(e) = failed {
                return Err(e);
            }
        }
    }
    let perm = if mode == MODE_EXEC { 0o755 } else { 0o644 };
    f.set_permissions(fs::Permissions::from_mode(perm))
}

/// Write one file: staged in `staging` (inside `.git`, so an interrupted
/// write leaves nothing in the worktree) and swapped into place; staged next
/// to the target instead when `.git` is on another filesystem. None (and
/// the worktree as it was) when the target did not hold what `replaces`
/// accepts at the instant of the swap ([`place`]).
pub(super) fn write(
    workdir: &Path,
    staging: &Path,
    path: &str,
    content: &Content<'_>,
    mode: u32,
    replaces: Replaces<'_>,
) -> Result<Option<PathBuf>> {
    let ours = content.id()?;
    let dir = parent_dir(workdir, path)?;
    let target = workdir.join(path);
    if let Ok(m) = fs::symlink_metadata(&target) {
        // A directory that the step emptied (its tracked files are gone,
        // and `ensure_clean` saw no untracked file in it) may still hold
        // empty directories; git removes them too.
        if m.is_dir() && remove_empty_dirs(&target).is_err() {
            return Err(Error::local(format!(
                "{} is a directory in the worktree; cannot write the file {path}",
                target.display()
            )));
        }
    }
    let mut ahead = take_prestaged(staging, path, ours, mode);
    if ahead.is_none() {
        make_staging(staging);
    }
    for (attempt, place_in) in [staging, dir.as_path()].into_iter().enumerate() {
        let staged = if let Some(f) = ahead.take().filter(|_| attempt == 0) {
            f
        } else if let (MODE_LINK, Content::Bytes(target)) = (mode, content) {
            let link_target = std::ffi::OsStr::from_bytes(target);
            let tmp = place_in.join(format!(".git-steps-link-{}", std::process::id()));
            let _ = fs::remove_file(&tmp);
            std::os::unix::fs::symlink(link_target, &tmp)
                .context(|| format!("cannot create the symlink {path}"))?;
            tmp
        } else {
            let tmp = tempfile::Builder::new()
                .prefix(".git-steps-")
                .tempfile_in(place_in)
                .context(|| format!("cannot write {path}"))?;
            let f = tmp.as_file();
            write_content(f, content, mode).context(|| format!("cannot write {path}"))?;
            // Its bytes durable before its name: a power cut after the
            // swap must not leave the new name over lost data while the
            // index (written after) names the new version. (A file staged
            // ahead was flushed with the branch's move.)
            f.sync_all().context(|| format!("cannot write {path}"))?;
            tmp.into_temp_path()
                .keep()
                .map_err(|e| e.error)
                .context(|| format!("cannot write {path}"))?
        };
        match place(&staged, &target, replaces, (ours, mode)) {
            Ok(true) => return Ok(Some(target)),
            Ok(false) => return Ok(None),
            Err(e) if attempt == 0 && Errno::from_io_error(&e) == Some(Errno::XDEV) => {
                let _ = fs::remove_file(&staged);
            }
            Err(e) => {
                let _ = fs::remove_file(&staged);
                return Err(Error::io(format!("cannot write {path}"), e));
            }
        }
    }
    Err(Error::local(format!("cannot write {path}")))
}

/// `path`, changed by someone while an update removed it, could not be
/// put back from `aside`: where the user's version is, and to move it
/// back (the next git-steps here keeps it in `.git/steps/kept/`, and
/// never deletes it).
fn left_aside(path: &str, aside: &Path, e: std::io::Error) -> Error {
    Error::local(format!(
        "{path} changed while it was being removed and cannot be put back ({e}); it is at {}",
        aside.display()
    ))
    .with_hint(crate::error::Hint::say(format!(
        "your version of {path} is at {}: move it back to {path} (the next git-steps here moves it into .git/steps/kept/ if it is still there)",
        aside.display()
    )))
}

/// renameat2(2) (renameatx_np(2) on macOS), relative to the working
/// directory as rename(2) is.
pub(super) fn renameat2(from: &Path, to: &Path, flags: RenameFlags) -> std::io::Result<()> {
    crate::os::rename_with(from, to, flags)
}

/// Whether renameat2 said it cannot do what was asked here (an old kernel,
/// a file system without exchange, a system without the call): the plain
/// rename takes over.
pub(super) fn unsupported(e: &std::io::Error) -> bool {
    crate::os::rename_unsupported(e)
}

/// The version at `p` (a name in a staging directory), as [`on_disk`].
pub(super) fn version_at(p: &Path) -> Option<(Vec<u8>, u32)> {
    let parent = p.parent()?;
    let name = p.file_name()?.to_str()?;
    on_disk(parent, name).ok().flatten()
}

/// Put `staged` at `target` only if `target` holds what `replaces` accepts
/// at that instant: a compare-and-swap on a name. With `RENAME_EXCHANGE`
/// the two names swap atomically and what was displaced is looked at
/// afterwards, whole and still there; anything else (an edit written since
/// the caller's check, by any means) is swapped back. A new file goes in
/// with `RENAME_NOREPLACE`: one created meanwhile stays. A descriptor
/// opened for writing before the swap would write into the displaced file
/// after any look: a displaced file some process holds open for writing is
/// swapped back too ([`open_for_writing`]; where the file system grants no
/// lease, such a write can still land in the removed file, as with any
/// checkout).
/// Ok(false): the target was left as found and `staged` is removed.
pub(super) fn place(
    staged: &Path,
    target: &Path,
    replaces: Replaces<'_>,
    ours: (git2::Oid, u32),
) -> std::io::Result<bool> {
    let exists = fs::symlink_metadata(target).is_ok();
    let flags = if exists {
        RenameFlags::EXCHANGE
    } else {
        RenameFlags::NOREPLACE
    };
    match renameat2(staged, target, flags) {
        Ok(()) if !exists => Ok(true),
        Ok(()) => {
            // Nobody can open the displaced file by its worktree name any
            // more; one that holds it open for writing from before the swap
            // would write into a file about to be removed. Asked first, so
            // that what is looked at next can no longer change.
            let held = open_for_writing(staged) == Some(true);
            let displaced = version_at(staged);
            if !held && replaces(&displaced) {
                remove_any(staged)?;
                return Ok(true);
            }
            if held {
                note_held_open(target);
            }
            // Changed since the check: the displaced file goes back.
            renameat2(staged, target, RenameFlags::EXCHANGE)?;
            // What the swap back took out is ours, unless the user wrote
            // again in between (over ours, or by a rename): that write is
            // their newest, and it goes in place instead (the one before
            // it is what their own write replaced).
            let is_ours = |v: &Option<(Vec<u8>, u32)>| {
                v.as_ref().is_some_and(|(b, m)| {
                    *m == ours.1
                        && git2::Oid::hash_object(git2::ObjectType::Blob, b).ok() == Some(ours.0)
                })
            };
            if !is_ours(&version_at(staged)) {
                renameat2(staged, target, RenameFlags::EXCHANGE)?;
            }
            remove_any(staged)?;
            Ok(false)
        }
        // Created (EEXIST) or removed (ENOENT) since the check.
        Err(e) if matches!(Errno::from_io_error(&e), Some(Errno::EXIST | Errno::NOENT)) => {
            remove_any(staged)?;
            Ok(false)
        }
        Err(e) if unsupported(&e) => {
            // A last look, then the plain rename.
            if exists && open_for_writing(target) == Some(true) {
                note_held_open(target);
                remove_any(staged)?;
                return Ok(false);
            }
            let now = if exists { version_at(target) } else { None };
            if fs::symlink_metadata(target).is_ok() != exists || !replaces(&now) {
                remove_any(staged)?;
                return Ok(false);
            }
            fs::rename(staged, target)?;
            Ok(true)
        }
        Err(e) => Err(e),
    }
}

thread_local! {
    /// Worktree files left in place because a process held them open for
    /// writing ([`open_for_writing`]).
    static HELD_OPEN: std::cell::RefCell<Vec<PathBuf>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn note_held_open(target: &Path) {
    HELD_OPEN.with(|h| h.borrow_mut().push(target.to_path_buf()));
}

/// Whether [`write`] or [`remove_if`] left `target` because a process held
/// it open for writing (forgotten once asked).
pub(super) fn was_held_open(target: &Path) -> bool {
    HELD_OPEN.with(|h| {
        let mut h = h.borrow_mut();
        let before = h.len();
        h.retain(|p| p != target);
        h.len() != before
    })
}

/// Whether some process holds the file at `p` open for writing (a read
/// lease refused, on Linux); None where that cannot be told.
fn open_for_writing(p: &Path) -> Option<bool> {
    crate::os::open_for_writing(p)
}

pub(super) fn remove_any(p: &Path) -> std::io::Result<()> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(p),
        Ok(_) => fs::remove_file(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Remove `dir` if it holds nothing but empty directories; fails, leaving
/// everything, at the first thing that is not one.
pub(super) fn remove_empty_dirs(dir: &Path) -> std::io::Result<()> {
    for e in fs::read_dir(dir)? {
        let e = e?;
        if !e.file_type()?.is_dir() {
            return Err(std::io::Error::other("not empty"));
        }
        remove_empty_dirs(&e.path())?;
    }
    fs::remove_dir(dir)
}

/// Whether a parent of `path` is not a real directory on disk (a symlink
/// or a file, the states a step that changes a path's type passes
/// through): then nothing is at `path` as far as the worktree goes, and
/// nothing may be read or removed through it.
pub fn through_non_dir(workdir: &Path, path: &str) -> bool {
    let mut dir = PathBuf::from(workdir);
    let parts: Vec<&str> = path.split('/').collect();
    for part in &parts[..parts.len() - 1] {
        dir.push(part);
        match fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            _ => return true,
        }
    }
    false
}

/// Remove the file at `path` if, when it is taken away, it holds what
/// `replaces` accepts; false (the file kept) otherwise.
pub(super) fn remove_if(
    workdir: &Path,
    staging: &Path,
    path: &str,
    replaces: Replaces<'_>,
) -> Result<bool> {
    if through_non_dir(workdir, path) {
        // Never through a link; the file is not there as a file of ours.
        return Ok(true);
    }
    let target = workdir.join(path);
    match fs::symlink_metadata(&target) {
        // The file is gone already: an interrupted update that turned it
        // into a directory got that far (repair finishes it).
        Ok(m) if m.is_dir() => return Ok(true),
        Ok(_) => {
            // Moved aside in one rename, looked at, then deleted: an edit
            // made since the caller's check goes back instead.
            make_staging(staging);
            let gone = format!("{}{}", crate::lock::GONE_PREFIX, std::process::id());
            let mut aside = staging.join(&gone);
            let mut moved = fs::rename(&target, &aside);
            if matches!(&moved, Err(e) if Errno::from_io_error(e) == Some(Errno::XDEV)) {
                aside = target.with_file_name(&gone);
                moved = fs::rename(&target, &aside);
            }
            match moved {
                Ok(()) => {}
                // Gone already, as the update wants it.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
                Err(e) => return Err(e).context(|| format!("cannot remove {path}")),
            }
            let held = open_for_writing(&aside) == Some(true);
            if held {
                note_held_open(&target);
            }
            if held || !replaces(&version_at(&aside)) {
                return match renameat2(&aside, &target, RenameFlags::NOREPLACE) {
                    Ok(()) => Ok(false),
                    Err(e) if unsupported(&e) => match fs::rename(&aside, &target) {
                        Ok(()) => Ok(false),
                        Err(e) => Err(left_aside(path, &aside, e)),
                    },
                    Err(e) => Err(left_aside(path, &aside, e)),
                };
            }
            remove_any(&aside).context(|| format!("cannot remove {path}"))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) if Errno::from_io_error(&e) == Some(Errno::NOTDIR) => return Ok(true),
        Err(e) => return Err(e.into()),
    }
    // Remove parents left empty, as git does.
    let mut dir = target.parent().map(Path::to_path_buf);
    while let Some(d) = dir {
        if d == workdir || fs::remove_dir(&d).is_err() {
            break;
        }
        dir = d.parent().map(Path::to_path_buf);
    }
    Ok(true)
}

/// The staging directory, made in the git dir that holds it with the mode
/// git gives directories there (`core.sharedRepository`). What is staged
/// in it becomes a worktree file and keeps the umask's mode.
fn make_staging(staging: &Path) {
    if fs::create_dir(staging).is_ok() {
        if let Some(git_dir) = staging.parent() {
            let _ = crate::git::shared::created(git_dir, staging);
        }
    }
}
