//! What is in the worktree and index, and whether a step may write there.
//!
//! Owns the checks made before any worktree write: dirty and untracked
//! paths, what is on disk, `.gitattributes` only this box has. Invariant:
//! a refusal is decided here, before anything is written.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use git2::{Repository, Status, StatusOptions};

use super::{through_non_dir, workdir};
use crate::error::{Error, Refusal, RefusalKind, Result};
use crate::git::{BlobEntry, Change, MODE_EXEC, MODE_FILE, MODE_LINK};

/// Tracked paths whose index or worktree differ from HEAD.
///
/// libgit2 compares a file whose stat data changed by hashing it with its
/// own filters, which know line endings but not the repository's filter
/// drivers; a file it reports modified only in the worktree is compared
/// again as git does, through the clean conversion.
pub fn dirty_paths(repo: &Repository) -> Result<Vec<String>> {
    match super::index::own(repo) {
        Some(index) => super::dirty::dirty_whole(repo, &index),
        None => dirty_paths_in(repo, None),
    }
}

/// The paths among `changes` that are dirty as [`dirty_paths`] says: the
/// user's uncommitted work a step or update would overwrite. The rest of
/// the worktree's changes are carried along, as `git switch` carries them.
pub fn dirty_among(repo: &Repository, changes: &[Change]) -> Result<Vec<String>> {
    // The files this process wrote, untouched since, under the index and
    // HEAD it left: clean without libgit2's status (`settled`).
    if changes.is_empty() || super::settled::clean(repo, changes) {
        return Ok(Vec::new());
    }
    let paths: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
    match super::index::own(repo) {
        Some(index) => super::dirty::dirty_by_index(repo, &index, &paths),
        None => dirty_paths_in(repo, Some(&paths)),
    }
}

pub(super) fn dirty_paths_in(repo: &Repository, only: Option<&[&str]>) -> Result<Vec<String>> {
    let mut opts = StatusOptions::new();
    if let Some(paths) = only {
        for p in paths {
            opts.pathspec(*p);
        }
        // Literal paths: a `*` or `[` in a file name is no pattern.
        opts.disable_pathspec_match(true);
    }
    opts.include_untracked(false)
        .include_ignored(false)
        .exclude_submodules(true)
        .renames_head_to_index(false);
    let statuses = repo.statuses(Some(&mut opts))?;
    let mut out = Vec::new();
    let mut convert = None;
    let mut index = None;
    for s in statuses.iter() {
        let st = s.status();
        if st == Status::CURRENT || st.contains(Status::IGNORED) {
            continue;
        }
        let path = String::from_utf8_lossy(s.path_bytes()).into_owned();
        if st == Status::WT_MODIFIED {
            let convert = convert.get_or_insert_with(|| crate::tree::convert::Convert::new(repo));
            let index = match &mut index {
                Some(i) => i,
                None => index.insert(crate::git::index(repo)?),
            };
            if same_as_index(repo, index, convert, &path)? {
                continue;
            }
        }
        out.push(path);
    }
    Ok(out)
}

/// Whether the worktree file at `path`, cleaned as `git add` would clean it,
/// is the blob the index holds (with the same mode).
pub(super) fn same_as_index(
    repo: &Repository,
    index: &git2::Index,
    convert: &crate::tree::convert::Convert<'_>,
    path: &str,
) -> Result<bool> {
    let Some(entry) = index.get_path(Path::new(path), 0) else {
        return Ok(false);
    };
    let Some(workdir) = repo.workdir() else {
        return Ok(false);
    };
    let full = workdir.join(path);
    let Ok(meta) = fs::symlink_metadata(&full) else {
        return Ok(false);
    };
    if !meta.is_file() {
        return Ok(false);
    }
    let exec = meta.permissions().mode() & 0o111 != 0;
    if exec != (entry.mode == MODE_EXEC) {
        return Ok(false);
    }
    let Ok(bytes) = fs::read(&full) else {
        return Ok(false);
    };
    let stored = repo.find_blob(entry.id).ok();
    let Ok(cleaned) = convert.to_repo_over(path, &bytes, stored.as_ref().map(|b| b.content()))
    else {
        return Ok(false);
    };
    Ok(git2::Oid::hash_object(git2::ObjectType::Blob, &cleaned)? == entry.id)
}

/// The version of a path on disk, as a file: None when there is no file
/// there (nothing, a directory, or a parent that is a file or symlink —
/// the states a step that changes a path's type passes through).
pub fn on_disk(workdir: &Path, path: &str) -> Result<Option<(Vec<u8>, u32)>> {
    let Some(mode) = disk_mode(workdir, path)? else {
        return Ok(None);
    };
    let full = workdir.join(path);
    if mode == MODE_LINK {
        let target = fs::read_link(&full)
            .map_err(|e| Error::io(format!("cannot read the link {path}"), e))?;
        return Ok(Some((target.as_os_str().as_bytes().to_vec(), MODE_LINK)));
    }
    let bytes = fs::read(&full).map_err(|e| Error::io(format!("cannot read {path}"), e))?;
    Ok(Some((bytes, mode)))
}

/// The mode of the file [`on_disk`] would read at `path`, without reading
/// it: None when there is no file there.
pub(super) fn disk_mode(workdir: &Path, path: &str) -> Result<Option<u32>> {
    if through_non_dir(workdir, path) {
        return Ok(None);
    }
    let meta = match fs::symlink_metadata(workdir.join(path)) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if rustix::io::Errno::from_io_error(&e) == Some(rustix::io::Errno::NOTDIR) => {
            return Ok(None)
        }
        Err(e) => return Err(e.into()),
    };
    Ok(if meta.file_type().is_symlink() {
        Some(MODE_LINK)
    } else if meta.is_dir() {
        None
    } else if meta.permissions().mode() & 0o111 != 0 {
        Some(MODE_EXEC)
    } else {
        Some(MODE_FILE)
    })
}

/// `same(repo, path, &on_disk(workdir, path)?, e)`, without holding the
/// file where no rule converts it: the file is hashed as it is read (a
/// 100 MB file costs a read buffer, not 100 MB).
pub fn disk_is(
    repo: &Repository,
    workdir: &Path,
    path: &str,
    e: &Option<BlobEntry>,
) -> Result<bool> {
    let mode = disk_mode(workdir, path)?;
    let (mode, e) = match (mode, e) {
        (None, None) => return Ok(true),
        (Some(m), Some(e)) if m == e.mode => (m, e),
        _ => return Ok(false),
    };
    if mode != MODE_LINK {
        // The file as it is first (the file may change between two looks;
        // one that changed is not the entry either way), then, only where
        // a rule could make other bytes the same blob, as `git add` cleans
        // it.
        match git2::Oid::hash_file(git2::ObjectType::Blob, workdir.join(path)) {
            Ok(oid) if oid == e.oid => return Ok(true),
            Ok(_) => {}
            Err(err) if err.class() == git2::ErrorClass::Os => return Ok(false),
            Err(err) => return Err(err.into()),
        }
        if !crate::tree::convert::Convert::new(repo)
            .converts_to_repo(path)
            .unwrap_or(true)
        {
            return Ok(false);
        }
    }
    same(repo, path, &on_disk(workdir, path)?, &Some(*e))
}

/// Whether a version on disk ([`on_disk`]) is the entry `e`, as git compares
/// a worktree file with a blob.
pub fn same(
    repo: &Repository,
    path: &str,
    disk: &Option<(Vec<u8>, u32)>,
    e: &Option<BlobEntry>,
) -> Result<bool> {
    Ok(match (disk, e) {
        (None, None) => true,
        (Some((bytes, mode)), Some(e)) => {
            if *mode != e.mode {
                return Ok(false);
            }
            // The common case without reading the blob: the bytes are it.
            if git2::Oid::hash_object(git2::ObjectType::Blob, bytes)? == e.oid {
                return Ok(true);
            }
            if e.mode == MODE_LINK
                || !crate::tree::convert::Convert::new(repo)
                    .converts_to_repo(path)
                    .unwrap_or(true)
            {
                return Ok(false);
            }
            let blob = repo.find_blob(e.oid)?;
            // As git compares a worktree file with a blob: cleaned first
            // (a CRLF checkout and the user's own LF file are both the LF
            // blob under core.autocrlf).
            blob.content() == bytes.as_slice()
                || (e.mode != MODE_LINK
                    && crate::tree::convert::Convert::new(repo)
                        .to_repo_over(path, bytes, Some(blob.content()))
                        .is_ok_and(|c| c == blob.content()))
        }
        _ => false,
    })
}

/// Refuse when tracked files are modified, or when a step would create a file
/// where an untracked one (or a directory, or a symlink the index does not
/// know) stands.
///
/// Only the paths in `changes` count: uncommitted changes elsewhere are
/// carried along, untouched, as `git switch` carries them.
pub fn ensure_clean(repo: &Repository, step: Option<&str>, changes: &[Change]) -> Result<()> {
    let dirty = dirty_among(repo, changes)?;
    if !dirty.is_empty() {
        return Err(dirty_refusal(step, &dirty));
    }
    ensure_unblocked(repo, step, changes)
}

/// Refuse when a step would create a file where an untracked one (or a
/// directory, or a symlink the index does not know) stands; the tracked
/// files are not looked at (the caller checked them).
pub fn ensure_unblocked(repo: &Repository, step: Option<&str>, changes: &[Change]) -> Result<()> {
    let workdir = workdir(repo)?;
    let own = super::index::own(repo);
    let lib = match own {
        Some(_) => None,
        None => Some(crate::git::index(repo)?),
    };
    let tracked = |p: &str| match (&own, &lib) {
        (Some(i), _) => i.get(p.as_bytes(), 0).is_some(),
        (_, Some(i)) => i.get_path(Path::new(p), 0).is_some(),
        _ => false,
    };
    let deleted = |p: &str| changes.iter().any(|c| c.path == p && c.old.is_some());
    for c in changes.iter().filter(|c| c.old.is_none()) {
        if let Some(blocker) = first_blocker(&workdir, &c.path, &tracked, &deleted)? {
            return Err(Error::from(Refusal {
                kind: RefusalKind::DirtyWorktree,
                step: step.map(str::to_string),
                saw: format!(
                    "{} is in the worktree but not in the last step's tree (untracked)",
                    blocker
                ),
                would: format!("create {} and overwrite what is there", c.path),
                hint: crate::error::Hint::rerun_after(format!(
                    "move {blocker} out of the way (or commit it in a step)"
                )),
            }));
        }
    }
    Ok(())
}

/// The `.gitattributes` files that decide how `changes` are stored (one in
/// each directory above a changed path) and that the worktree holds
/// otherwise than `tree` does: uncommitted, untracked or removed. git, and
/// so a step's build, reads attributes from the worktree; a box without
/// the same files (a fresh clone) would store the same step otherwise.
/// A `.gitattributes` the changes write themselves is not counted here.
pub fn attributes_differ(
    repo: &Repository,
    tree: Option<&git2::Tree<'_>>,
    changes: &[Change],
) -> Result<Vec<String>> {
    let workdir = workdir(repo)?;
    let mut files = std::collections::BTreeSet::new();
    for c in changes {
        let mut dir = c.path.as_str();
        files.insert(".gitattributes".to_string());
        while let Some(i) = dir.rfind('/') {
            dir = &dir[..i];
            files.insert(format!("{dir}/.gitattributes"));
        }
    }
    let mut out = Vec::new();
    for path in files {
        if changes.iter().any(|c| c.path == path) {
            continue;
        }
        let entry = tree
            .and_then(|t| t.get_path(Path::new(&path)).ok())
            .filter(|e| e.kind() == Some(git2::ObjectType::Blob))
            .map(|e| BlobEntry {
                oid: e.id(),
                mode: e.filemode() as u32,
            });
        if !disk_is(repo, &workdir, &path, &entry)? {
            out.push(path);
        }
    }
    Ok(out)
}

/// The refusal for a `.gitattributes` the worktree holds otherwise than
/// the run ([`attributes_differ`]).
pub fn attributes_refusal(step: &str, files: &[String], changes: &[Change]) -> Error {
    // A path the first such file decides for.
    let dir = files[0].trim_end_matches(".gitattributes");
    let decided = changes
        .iter()
        .find(|c| c.path.starts_with(dir))
        .map_or("its files", |c| c.path.as_str());
    Error::from(Refusal {
        kind: RefusalKind::DirtyWorktree,
        step: Some(step.to_string()),
        saw: format!(
            "{} in the worktree differs from the run's (uncommitted, untracked or removed), and git reads attributes from the worktree: it would decide how step {step} stores {decided}",
            files.join(", "),
        ),
        would: format!(
            "store step {step} by attributes only this box has (a fresh clone would store the same step otherwise)"
        ),
        hint: crate::error::Hint::rerun_after(format!(
            "make it part of the run (`git steps record --id <id>` records it as a step), or move it aside (`git stash push -u -- {}`)",
            words(files.iter())
        ))
        .because(format!("step {step} wrote nothing")),
    })
}

/// Paths as shell words, for a command in a hint.
pub fn words<S: AsRef<str>>(paths: impl Iterator<Item = S>) -> String {
    paths
        .map(|p| crate::git::shell_word(p.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The refusal for uncommitted changes to paths a step (or an update)
/// writes: `dirty` are those paths, and only those.
pub fn dirty_refusal(step: Option<&str>, dirty: &[String]) -> Error {
    let shown: Vec<&str> = dirty.iter().take(5).map(String::as_str).collect();
    let names = format!(
        "{}{}",
        shown.join(", "),
        if dirty.len() > shown.len() {
            format!(" and {} more", dirty.len() - shown.len())
        } else {
            String::new()
        }
    );
    let writer = match step {
        Some(s) => format!("step {s}"),
        None => "the update".to_string(),
    };
    Error::from(Refusal {
        kind: RefusalKind::DirtyWorktree,
        step: step.map(str::to_string),
        saw: format!(
            "{names} {} uncommitted changes (in the worktree or the index), and {writer} writes {}",
            if dirty.len() == 1 { "has" } else { "have" },
            if dirty.len() == 1 { "it" } else { "them" }
        ),
        would: format!("overwrite {names}"),
        hint: crate::error::Hint::rerun_after(format!(
            "stash your changes to {} (`git stash push -- {}`)",
            if dirty.len() == 1 { "it" } else { "them" },
            words(shown.iter()),
        ))
        .because(format!(
            "afterwards, `git stash pop` (a commit of your own on the run's branch would carry no receipt: commit on another branch to keep it there); uncommitted changes to other files are carried along; {}",
            match step {
                Some(s) => format!("step {s} wrote nothing"),
                None => "nothing was changed".to_string(),
            }
        )),
    })
}

/// The first thing in the worktree that is in the way of creating `path` and
/// is not the step's to remove: an untracked file or symlink at the path or
/// at a parent, or a directory at the path holding untracked files.
pub(super) fn first_blocker(
    workdir: &Path,
    path: &str,
    tracked: &dyn Fn(&str) -> bool,
    deleted: &dyn Fn(&str) -> bool,
) -> Result<Option<String>> {
    let mut so_far = PathBuf::from(workdir);
    let parts: Vec<&str> = path.split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        so_far.push(part);
        let rel = parts[..=i].join("/");
        let last = i + 1 == parts.len();
        match fs::symlink_metadata(&so_far) {
            Ok(m) if m.is_dir() && !last => continue,
            Ok(m) if m.is_dir() => return untracked_inside(&so_far, &rel, tracked),
            Ok(_) if tracked(&rel) && deleted(&rel) => return Ok(None),
            Ok(_) => return Ok(Some(rel)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(None)
}

/// The first untracked file under a directory the step turns into a file.
pub(super) fn untracked_inside(
    dir: &Path,
    rel: &str,
    tracked: &dyn Fn(&str) -> bool,
) -> Result<Option<String>> {
    for e in fs::read_dir(dir)? {
        let e = e?;
        let child = format!("{rel}/{}", e.file_name().to_string_lossy());
        if e.file_type()?.is_dir() {
            if let Some(b) = untracked_inside(&e.path(), &child, tracked)? {
                return Ok(Some(b));
            }
        } else if !tracked(&child) {
            return Ok(Some(child));
        }
    }
    // Left empty (or holding only empty directories): git removes it.
    Ok(None)
}

/// How far back [`left_behind`] looks for an update the cut interrupted.
const LEFT_BEHIND_DEPTH: usize = 32;

/// Files an update the cut interrupted left on disk: a path that a commit
/// the run moved from tracked (the parent of the head, and on up while the
/// commit above is a step of a run, at most [`LEFT_BEHIND_DEPTH`]) and the
/// head does not, whose file still holds that commit's version (a file
/// that became a directory, or a deleted one, whose removal the cut
/// undid). A file with any other content, or one a commit that is not a
/// step stopped tracking (`git rm --cached`), is never listed: it is the
/// user's. Each is a removal, saved in the rescue first by the caller.
pub fn left_behind(
    repo: &Repository,
    head: &git2::Commit<'_>,
    workdir: &Path,
) -> Result<Vec<Change>> {
    let tree = head.tree()?;
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    let mut child = head.clone();
    for _ in 0..LEFT_BEHIND_DEPTH {
        let is_step = child
            .message()
            .is_ok_and(|m| crate::history::receipt::parse(m).is_ok());
        let Some(c) = is_step.then(|| child.parent(0).ok()).flatten() else {
            break;
        };
        for ch in crate::git::tree_changes(repo, Some(&c.tree()?), Some(&tree))? {
            if ch.new.is_some() || ch.old.is_none() || !seen.insert(ch.path.clone()) {
                continue;
            }
            // Cheap first: nothing there, or a directory.
            if disk_mode(workdir, &ch.path)?.is_none() {
                continue;
            }
            let disk = on_disk(workdir, &ch.path)?;
            if same(repo, &ch.path, &disk, &ch.old)? {
                out.push(Change {
                    path: ch.path,
                    old: ch.old,
                    new: None,
                });
            }
        }
        child = c;
    }
    Ok(out)
}
