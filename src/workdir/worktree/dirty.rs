//! Whether the paths a step writes hold uncommitted work, decided from
//! the index as git wrote it ([`crate::git::index_file`]), path by path.
//!
//! Owns that check. Invariant: a path is clean only when libgit2's status
//! would call it clean (its `maybe_modified` rules); where stat data cannot
//! vouch for a file, its content is compared as git compares it.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use git2::Repository;

use super::check::disk_is;
use super::{through_non_dir, workdir};
use crate::error::Result;
use crate::git::{Entry, MODE_EXEC, MODE_FILE, MODE_LINK};

/// [`dirty_paths_in`] for `paths` alone, as libgit2's status decides it
/// (`maybe_modified`), without its walk of the worktree and index: per
/// path, HEAD's entry against the index's (a conflict, an intent to add, a
/// staged change or deletion is dirty), then the index's entry against
/// the file (gone, or of another type, is dirty; skip-worktree, "assume
/// unchanged" and submodules are not looked at; stat data equal and not
/// racily clean vouches for it; else the content is compared as git
/// compares it, through the clean conversion).
pub(super) fn dirty_by_index(
    repo: &Repository,
    index: &crate::git::index_file::IndexFile,
    paths: &[&str],
) -> Result<Vec<String>> {
    use crate::git::index_file::{INTENT_TO_ADD, SKIP_WORKTREE};
    use std::os::unix::fs::MetadataExt;
    let workdir = workdir(repo)?;
    let head = repo.head().ok().and_then(|h| h.peel_to_tree().ok());
    let cfg = repo.config()?;
    let flag = |key: &str| cfg.get_bool(key).unwrap_or(true);
    let (trust_ctime, trust_mode) = (flag("core.trustctime"), flag("core.filemode"));
    let symlinks = flag("core.symlinks");
    let mut out = Vec::new();
    for p in paths {
        let at_head = head
            .as_ref()
            .and_then(|t| t.get_path(Path::new(p)).ok())
            .filter(|e| e.kind() != Some(git2::ObjectType::Tree))
            .map(|e| (e.id(), e.filemode() as u32));
        let e = index.get(p.as_bytes(), 0);
        let staged = index.conflicted(p.as_bytes())
            || match (&at_head, &e) {
                (None, None) => false,
                (Some(h), Some(e)) => *h != (e.oid, e.mode) || e.extended & INTENT_TO_ADD != 0,
                _ => true,
            };
        if staged {
            out.push(p.to_string());
            continue;
        }
        let Some(e) = e else { continue };
        if e.mode == 0o160000 {
            continue;
        }
        let meta = match through_non_dir(&workdir, p) {
            true => None,
            false => fs::symlink_metadata(workdir.join(p)).ok(),
        };
        let Some(meta) = meta.filter(|m| !m.is_dir()) else {
            out.push(p.to_string());
            continue;
        };
        if e.assume_valid || e.extended & SKIP_WORKTREE != 0 {
            continue;
        }
        let link = meta.file_type().is_symlink();
        if !link && !meta.is_file() {
            // A FIFO, socket or device where a file was: never opened.
            out.push(p.to_string());
            continue;
        }
        if !symlinks && e.mode == MODE_LINK && meta.is_file() {
            // core.symlinks off: git checks a link out as a file holding
            // its target, and keeps the link's mode.
            let target = fs::read(workdir.join(p)).unwrap_or_default();
            if git2::Oid::hash_object(git2::ObjectType::Blob, &target)? != e.oid {
                out.push(p.to_string());
            }
            continue;
        }
        if link != (e.mode == MODE_LINK) {
            out.push(p.to_string());
            continue;
        }
        let disk_mode = match (link, meta.permissions().mode() & 0o111 != 0) {
            (true, _) => MODE_LINK,
            (false, true) if trust_mode => MODE_EXEC,
            (false, false) if trust_mode => MODE_FILE,
            // core.fileMode off: the executable bit is not looked at.
            (false, _) => e.mode,
        };
        let stat_same = disk_mode == e.mode
            && meta.size() as u32 == e.size
            && (meta.mtime() as u32, meta.mtime_nsec() as u32) == e.mtime
            && (!trust_ctime || (meta.ctime() as u32, meta.ctime_nsec() as u32) == e.ctime)
            && meta.ino() as u32 == e.ino
            && (meta.uid(), meta.gid()) == (e.uid, e.gid);
        // git's rule: a size of 0 for a blob that is not empty is a
        // smudged entry, never vouched for by stat.
        let smudged = e.size == 0 && e.oid.as_bytes() != EMPTY_BLOB;
        if stat_same && !smudged && !index.racy(&e) {
            continue;
        }
        let entry = Entry {
            oid: e.oid,
            mode: match disk_mode {
                MODE_LINK => MODE_LINK,
                _ if !trust_mode => disk_mode_of(&meta),
                _ => e.mode,
            },
        };
        if disk_mode != e.mode || !disk_is(repo, &workdir, p, &Some(entry))? {
            out.push(p.to_string());
        }
    }
    Ok(out)
}

/// The empty blob's id.
const EMPTY_BLOB: [u8; 20] = [
    0xe6, 0x9d, 0xe2, 0x9b, 0xb2, 0xd1, 0xd6, 0x43, 0x4b, 0x8b, 0x29, 0xae, 0x77, 0x5a, 0xd8, 0xc2,
    0xe4, 0x8c, 0x53, 0x91,
];

/// The mode [`disk_mode`] gives a file with this metadata.
fn disk_mode_of(meta: &fs::Metadata) -> u32 {
    if meta.permissions().mode() & 0o111 != 0 {
        MODE_EXEC
    } else {
        MODE_FILE
    }
}
