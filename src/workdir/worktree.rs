//! Bringing the worktree and index up to a step commit, and checking that
//! nothing else is there.
//!
//! Owns the only writes git-steps makes outside `.git`. Invariant: only the
//! paths a step changed are touched; files are replaced by rename (a reader
//! sees the old or the new file, never half of one); nothing is written
//! through a symlink or outside the worktree; and the user's uncommitted work
//! is never overwritten — a dirty tracked file or an untracked file in the
//! way is a refusal, decided before anything is written.

use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use git2::{IndexEntry, IndexTime, Repository, Status, StatusOptions};
use rustix::fs::RenameFlags;

use crate::crash;
use crate::error::{Context, Error, Refusal, RefusalKind, Result};
use crate::git::{Change, Entry, MODE_EXEC, MODE_FILE, MODE_LINK};

/// Tracked paths whose index or worktree differ from HEAD.
///
/// libgit2 compares a file whose stat data changed by hashing it with its
/// own filters, which know line endings but not the repository's filter
/// drivers; a file it reports modified only in the worktree is compared
/// again as git does, through the clean conversion.
pub fn dirty_paths(repo: &Repository) -> Result<Vec<String>> {
    dirty_paths_in(repo, None)
}

/// The paths among `changes` that are dirty as [`dirty_paths`] says: the
/// user's uncommitted work a step or update would overwrite. The rest of
/// the worktree's changes are carried along, as `git switch` carries them.
pub fn dirty_among(repo: &Repository, changes: &[Change]) -> Result<Vec<String>> {
    if changes.is_empty() {
        return Ok(Vec::new());
    }
    let paths: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
    dirty_paths_in(repo, Some(&paths))
}

fn dirty_paths_in(repo: &Repository, only: Option<&[&str]>) -> Result<Vec<String>> {
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
                None => index.insert(repo.index()?),
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
fn same_as_index(
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
        let target = fs::read_link(&full)?;
        return Ok(Some((target.as_os_str().as_bytes().to_vec(), MODE_LINK)));
    }
    Ok(Some((fs::read(&full)?, mode)))
}

/// The mode of the file [`on_disk`] would read at `path`, without reading
/// it: None when there is no file there.
fn disk_mode(workdir: &Path, path: &str) -> Result<Option<u32>> {
    if through_non_dir(workdir, path) {
        return Ok(None);
    }
    let meta = match fs::symlink_metadata(workdir.join(path)) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return Ok(None),
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
pub fn disk_is(repo: &Repository, workdir: &Path, path: &str, e: &Option<Entry>) -> Result<bool> {
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
    e: &Option<Entry>,
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
    let index = repo.index()?;
    let tracked = |p: &str| index.get_path(Path::new(p), 0).is_some();
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
                hint: format!("move {blocker} out of the way (or commit it in a step), then rerun"),
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
            .map(|e| Entry {
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
        hint: format!(
            "make it part of the run (`git steps record --id <id>` records it as a step), or move it aside (`git stash push -u -- {}`), then rerun; step {step} wrote nothing",
            words(files.iter())
        ),
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
        hint: format!(
            "stash your changes to {} (`git stash push -- {}`), rerun, then `git stash pop` (a commit of your own on the run's branch would carry no receipt: commit on another branch to keep it there); uncommitted changes to other files are carried along; {}",
            if dirty.len() == 1 { "it" } else { "them" },
            words(shown.iter()),
            match step {
                Some(s) => format!("step {s} wrote nothing"),
                None => "nothing was changed".to_string(),
            }
        ),
    })
}

/// The first thing in the worktree that is in the way of creating `path` and
/// is not the step's to remove: an untracked file or symlink at the path or
/// at a parent, or a directory at the path holding untracked files.
fn first_blocker(
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
fn untracked_inside(
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

pub fn workdir(repo: &Repository) -> Result<PathBuf> {
    repo.workdir().map(Path::to_path_buf).ok_or_else(|| {
        Error::config("this repository is bare; git-steps needs a worktree")
            .with_hint("clone it (`git clone <bare> work`) and run git-steps in the clone")
    })
}

/// Where a worktree update goes: the run it is for (the rescue ref's name)
/// and the commit whose tree it brings the changed paths to.
#[derive(Debug, Clone, Copy)]
pub struct Dest<'a> {
    pub run: &'a str,
    pub commit: git2::Oid,
}

/// Bring worktree and index from the previous step to this step's commit,
/// touching only `changes`. Crash points mark each boundary.
pub fn update(repo: &Repository, dest: Dest<'_>, changes: &[Change], step: &str) -> Result<()> {
    update_keeping(repo, dest, changes, step, &|_| false)
}

/// What a path holds on disk just before an update replaces it.
enum Found {
    /// The version the update expects to replace (`old`): write it.
    Old,
    /// The update's own version already (a crashed update got that far):
    /// nothing to write, only the index catches up.
    New,
    /// Anything else: an edit made since the update's caller checked the
    /// worktree (the user's editor, the agent's own tool, a hook).
    Other,
}

fn found(repo: &Repository, workdir: &Path, c: &Change) -> Result<Found> {
    // The old version first: it is what a step almost always finds, and a
    // mismatch costs a clean conversion of the file (`same`).
    Ok(if disk_is(repo, workdir, &c.path, &c.old)? {
        Found::Old
    } else if disk_is(repo, workdir, &c.path, &c.new)? {
        Found::New
    } else {
        Found::Other
    })
}

/// The first of `changes` whose path holds neither the version the change
/// replaces nor the one it writes: an edit the update would overwrite.
pub fn first_changed(repo: &Repository, changes: &[Change]) -> Result<Option<String>> {
    let workdir = workdir(repo)?;
    for c in changes {
        if matches!(found(repo, &workdir, c)?, Found::Other) {
            return Ok(Some(c.path.clone()));
        }
    }
    Ok(None)
}

/// Files changed under a worktree update: each is kept as it is (a
/// directory put in its place included), all are saved under
/// `refs/steps/rescue/` in one commit on top of the update's, and the
/// update ends with a refusal that says, per file, how to finish.
fn changed_under_update(repo: &Repository, dest: Dest<'_>, step: &str, kept: &[&Change]) -> Error {
    let paths: Vec<&str> = kept.iter().map(|c| c.path.as_str()).collect();
    let names = paths.join(", ");
    let msg = format!(
        "git-steps rescue: {names} changed during an update to step {step}\n\n\
         The worktree of run {} held versions of these paths that were neither\n\
         the ones the update expected to replace nor the step's when the update\n\
         reached them (edits made while the step was being made durable). They\n\
         are kept in the worktree and saved here, on top of the step's commit.\n",
        dest.run
    );
    let saved = save_rescue(repo, dest.run, dest.commit, &paths, &msg);
    crash::point("rescue-saved", step);
    let saved_as = match &saved {
        Ok(name) => format!("saved as {name} (`git show {name} -- {}`)", paths.join(" ")),
        Err(e) => format!("not saved under refs/steps/rescue/ ({e})"),
    };
    let short = crate::git::short(dest.commit);
    let workdir = repo.workdir().map(Path::to_path_buf).unwrap_or_default();
    // Per file, what puts the update's version in place.
    let finish: Vec<String> = kept
        .iter()
        .map(|c| {
            let dir = fs::symlink_metadata(workdir.join(&c.path)).is_ok_and(|m| m.is_dir());
            let p = &c.path;
            match (dir, c.new.is_some()) {
                (true, true) => format!("move the directory {p} aside, then `git checkout {short} -- {p}`"),
                (true, false) => format!("move the directory {p} aside, then `git rm -q --cached --ignore-unmatch -- {p}`"),
                (false, true) => format!("`git checkout {short} -- {p}`"),
                (false, false) => format!("`git rm -q -f -- {p}` (the update removes it)"),
            }
        })
        .collect();
    Error::from(Refusal {
        kind: RefusalKind::DirtyWorktree,
        step: (step != "-").then(|| step.to_string()),
        saw: format!(
            "{names} changed while the worktree was being brought up to commit {short}: {} neither the version the update replaces nor the new one (every other file was brought up)",
            if kept.len() == 1 { "it holds" } else { "they hold" }
        ),
        would: format!("overwrite your change to {names}"),
        hint: format!(
            "your version is kept as it is and {saved_as}; to finish: {}; then rerun the same command and make your change again",
            finish.join("; ")
        ),
    })
}

/// Every file under the worktree directory `dir`, as blobs (bounded: at
/// most 10,000 files are saved).
fn files_under(
    repo: &Repository,
    workdir: &Path,
    dir: &str,
    out: &mut Vec<(String, Option<Entry>)>,
) -> Result<()> {
    for e in fs::read_dir(workdir.join(dir))? {
        if out.len() >= 10_000 {
            break;
        }
        let e = e?;
        let Some(name) = e.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let rel = format!("{dir}/{name}");
        if e.file_type()?.is_dir() {
            files_under(repo, workdir, &rel, out)?;
        } else if let Some((bytes, mode)) = on_disk(workdir, &rel)? {
            out.push((
                rel,
                Some(Entry {
                    oid: repo.blob(&bytes)?,
                    mode,
                }),
            ));
        }
    }
    Ok(())
}

/// Save what the worktree holds at `paths` as a commit on top of `on`
/// under the next free `refs/steps/rescue/<run>/<n>`, and return its name.
pub fn save_rescue(
    repo: &Repository,
    run: &str,
    on: git2::Oid,
    paths: &[&str],
    message: &str,
) -> Result<String> {
    let workdir = workdir(repo)?;
    let on_commit = repo.find_commit(on)?;
    let on_tree = on_commit.tree()?;
    // Built like a step's tree, so a path found as a file where `on` has a
    // directory (or the reverse) is saved as found.
    let mut found: Vec<(String, Option<Entry>)> = Vec::new();
    for path in paths {
        match on_disk(&workdir, path)? {
            Some((bytes, mode)) => found.push((
                path.to_string(),
                Some(Entry {
                    oid: repo.blob(&bytes)?,
                    mode,
                }),
            )),
            None => {
                if on_tree.get_path(Path::new(path)).is_ok() {
                    found.push((path.to_string(), None));
                }
                // A directory put where a file was: every file in it.
                let full = workdir.join(path);
                if !through_non_dir(&workdir, path)
                    && fs::symlink_metadata(&full).is_ok_and(|m| m.is_dir())
                {
                    files_under(repo, &workdir, path, &mut found)?;
                }
            }
        }
    }
    let mut updates: Vec<(&str, Option<Entry>)> =
        found.iter().map(|(p, e)| (p.as_str(), *e)).collect();
    // A file found where `on` has a directory replaces it: its deletions
    // must not reach into the file.
    updates.sort_by_key(|(p, e)| (e.is_some(), *p));
    let tree = match crate::tree::build::build_tree(repo, Some(on_tree), &updates)? {
        Some(t) => repo.find_tree(t)?,
        None => repo.find_tree(repo.treebuilder(None)?.write()?)?,
    };
    let sig = repo
        .signature()
        .map(|s| s.to_owned())
        .or_else(|_| git2::Signature::now("git-steps", "git-steps@localhost"))?;
    let oid = repo.commit(None, &sig, &sig, message, &tree, &[&on_commit])?;
    let prefix = format!("refs/steps/rescue/{run}/");
    let mut n = 1;
    while repo.find_reference(&format!("{prefix}{n}")).is_ok() {
        n += 1;
    }
    let name = format!("{prefix}{n}");
    crate::workdir::lock::intending(repo, crate::workdir::lock::ref_locks(repo, &name), || {
        repo.reference(&name, oid, false, "git-steps: rescue")
    })?;
    Ok(name)
}

/// For an update that keeps what the worktree holds (an in-place agent's
/// edits, see [`update_keeping`]): per change, whether the worktree holds
/// its new version already (then only the index catches up) or its old one
/// (then it is written); `Err(path)` for the first path where it holds
/// neither — an edit of its own the update would overwrite. Untracked
/// files in the way of a written path are refused as by [`ensure_unblocked`].
pub fn keep_in_place(
    repo: &Repository,
    changes: &[Change],
    step: Option<&str>,
) -> Result<std::result::Result<Vec<bool>, String>> {
    let workdir = workdir(repo)?;
    let mut kept = Vec::with_capacity(changes.len());
    for c in changes {
        if disk_is(repo, &workdir, &c.path, &c.new)? {
            kept.push(true);
        } else if disk_is(repo, &workdir, &c.path, &c.old)? {
            kept.push(false);
        } else {
            return Ok(Err(c.path.clone()));
        }
    }
    let written: Vec<Change> = changes
        .iter()
        .zip(&kept)
        .filter(|(_, k)| !**k)
        .map(|(c, _)| c.clone())
        .collect();
    ensure_unblocked(repo, step, &written)?;
    Ok(Ok(kept))
}

/// Whether the worktree holds `change`'s new version at its path already.
pub fn holds_new(repo: &Repository, change: &Change) -> Result<bool> {
    let workdir = workdir(repo)?;
    disk_is(repo, &workdir, &change.path, &change.new)
}

/// As [`update`], but a change for which `kept` says so is not written:
/// the worktree holds its new version already (an agent's in-place edit,
/// recorded as a step), and only the index catches up. A kept file whose
/// content moved on meanwhile gets an index entry that git hashes again
/// (no stat data), so the newer edit shows as modified, never as clean.
pub fn update_keeping(
    repo: &Repository,
    dest: Dest<'_>,
    changes: &[Change],
    step: &str,
    kept: &dyn Fn(&Change) -> bool,
) -> Result<()> {
    // Every caller checked its tree (`guard`); this is the last line, for
    // any path that reaches here by another way.
    for c in changes {
        crate::tree::guard::check_path(&c.path)
            .map_err(|v| Error::other(format!("refusing to write {v} into the worktree")))?;
    }
    let workdir = workdir(repo)?;
    let staging = crate::workdir::lock::tmp_dir(repo.path());
    let convert = crate::tree::convert::Convert::new(repo);
    let mut index = repo.index()?;
    // Deletions first: a step may replace a file or symlink by a directory.
    let mut written = 0usize;
    // Each path is compared with what the update expects to replace
    // immediately before it is replaced: a file changed since the caller
    // checked the worktree is never overwritten.
    // A file changed under the update is kept, and the update goes on with
    // every other file; it ends with a refusal naming the kept ones.
    let mut changed: Vec<&Change> = Vec::new();
    for c in changes.iter().filter(|c| c.new.is_none() && !kept(c)) {
        match found(repo, &workdir, c)? {
            Found::New => continue,
            Found::Old => {}
            Found::Other => {
                changed.push(c);
                continue;
            }
        }
        let replaces = |v: &Option<(Vec<u8>, u32)>| same(repo, &c.path, v, &c.old).unwrap_or(false);
        if !remove_if(&workdir, &staging, &c.path, &replaces)? {
            changed.push(c);
            continue;
        }
        written += 1;
        if written == 1 {
            crash::point("worktree-partial", step);
        }
    }
    for c in changes.iter() {
        let Some(new) = c.new else { continue };
        if kept(c) {
            let target = workdir.join(&c.path);
            let mut e = match fs::symlink_metadata(&target) {
                Ok(meta) if holds_new(repo, c)? => entry(&c.path, new.oid, new.mode, &meta),
                // Edited again since it was recorded (or gone): no stat
                // data, so git compares the content.
                _ => IndexEntry {
                    ctime: IndexTime::new(0, 0),
                    mtime: IndexTime::new(0, 0),
                    dev: 0,
                    ino: 0,
                    mode: new.mode,
                    uid: 0,
                    gid: 0,
                    file_size: 0,
                    id: new.oid,
                    flags: 0,
                    flags_extended: 0,
                    path: c.path.as_bytes().to_vec(),
                },
            };
            e.flags = 0;
            index.add(&e)?;
            continue;
        }
        match found(repo, &workdir, c)? {
            Found::New => {
                // Written before (a crashed update got this far): the index
                // catches up.
                let meta = fs::symlink_metadata(workdir.join(&c.path))?;
                index.add(&entry(&c.path, new.oid, new.mode, &meta))?;
                continue;
            }
            Found::Old => {}
            Found::Other => {
                changed.push(c);
                continue;
            }
        }
        // As `git checkout` writes it: line endings and filter drivers; a
        // file no rule converts is streamed from its blob.
        let blob;
        let content = if new.mode != MODE_LINK
            && !convert
                .converts_to_worktree(&c.path)
                .map_err(Error::program)?
        {
            Content::Blob(repo, new.oid)
        } else {
            blob = repo.find_blob(new.oid)?;
            Content::Bytes(if new.mode == MODE_LINK {
                std::borrow::Cow::Borrowed(blob.content())
            } else {
                convert
                    .to_worktree(&c.path, blob.content())
                    .map_err(Error::program)?
            })
        };
        let replaces = |v: &Option<(Vec<u8>, u32)>| same(repo, &c.path, v, &c.old).unwrap_or(false);
        let Some(target) = write(&workdir, &staging, &c.path, &content, new.mode, &replaces)?
        else {
            changed.push(c);
            continue;
        };
        let meta = fs::symlink_metadata(&target)?;
        index.add(&entry(&c.path, new.oid, new.mode, &meta))?;
        written += 1;
        if written == 1 {
            crash::point("worktree-partial", step);
        }
    }
    if written == 0 {
        // A batch whose steps cancel out writes nothing: its partial state
        // is its whole one.
        crash::point("worktree-partial", step);
    }
    crash::point("worktree-files", step);
    let kept_as_found = |c: &Change| changed.iter().any(|k| k.path == c.path);
    for c in changes
        .iter()
        .filter(|c| c.new.is_none() && !kept_as_found(c))
    {
        index.remove_path(Path::new(&c.path))?;
    }
    crate::workdir::lock::intending(repo, crate::workdir::lock::index_locks(repo), || {
        index.write()
    })
    .context(|| "cannot write the index".into())?;
    if !changed.is_empty() {
        return Err(changed_under_update(repo, dest, step, &changed));
    }
    crash::point("worktree-done", step);
    Ok(())
}

/// Write `changes` into the worktree as an agent's own tools would, leaving
/// the index alone (the crash matrix's in-place agent, replaying a plan
/// through `record`). Paths are checked as for [`update`].
pub fn write_in_place(repo: &Repository, changes: &[Change]) -> Result<()> {
    for c in changes {
        crate::tree::guard::check_path(&c.path)
            .map_err(|v| Error::other(format!("refusing to write {v} into the worktree")))?;
    }
    let workdir = workdir(repo)?;
    let staging = crate::workdir::lock::tmp_dir(repo.path());
    let convert = crate::tree::convert::Convert::new(repo);
    for c in changes.iter().filter(|c| c.new.is_none()) {
        remove_if(&workdir, &staging, &c.path, &|_| true)?;
    }
    for c in changes {
        let Some(new) = c.new else { continue };
        let blob = repo.find_blob(new.oid)?;
        let content = Content::Bytes(if new.mode == MODE_LINK {
            std::borrow::Cow::Borrowed(blob.content())
        } else {
            convert
                .to_worktree(&c.path, blob.content())
                .map_err(Error::program)?
        });
        write(&workdir, &staging, &c.path, &content, new.mode, &|_| true)?;
    }
    Ok(())
}

fn entry(path: &str, oid: git2::Oid, mode: u32, meta: &fs::Metadata) -> IndexEntry {
    IndexEntry {
        ctime: IndexTime::new(meta.ctime() as i32, meta.ctime_nsec() as u32),
        mtime: IndexTime::new(meta.mtime() as i32, meta.mtime_nsec() as u32),
        dev: meta.dev() as u32,
        ino: meta.ino() as u32,
        mode,
        uid: meta.uid(),
        gid: meta.gid(),
        file_size: meta.len() as u32,
        id: oid,
        flags: 0,
        flags_extended: 0,
        path: path.as_bytes().to_vec(),
    }
}

/// Make sure every parent of `path` is a real directory inside the worktree,
/// creating missing ones; never follow a symlink.
fn parent_dir(workdir: &Path, path: &str) -> Result<PathBuf> {
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
                fs::create_dir(&dir).context(|| format!("cannot create {}", dir.display()))?
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(dir)
}

/// What a path held, as [`on_disk`] reads it, judged by a caller: whether
/// it is what the write or removal may replace.
type Replaces<'a> = &'a dyn Fn(&Option<(Vec<u8>, u32)>) -> bool;

/// What a worktree write puts in a file.
enum Content<'a> {
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

/// Write one file: staged in `staging` (inside `.git`, so an interrupted
/// write leaves nothing in the worktree) and swapped into place; staged next
/// to the target instead when `.git` is on another filesystem. None (and
/// the worktree as it was) when the target did not hold what `replaces`
/// accepts at the instant of the swap ([`place`]).
fn write(
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
    let _ = fs::create_dir(staging);
    for (attempt, place_in) in [staging, dir.as_path()].into_iter().enumerate() {
        let staged = if let (MODE_LINK, Content::Bytes(target)) = (mode, content) {
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
            let mut f = tmp.as_file();
            match content {
                Content::Bytes(b) => f.write_all(b),
                Content::Blob(repo, oid) => {
                    let mut failed = None;
                    crate::git::blob_chunks(repo, *oid, &mut |chunk| {
                        if failed.is_none() {
                            failed = f.write_all(chunk).err();
                        }
                    })?;
                    failed.map_or(Ok(()), Err)
                }
            }
            .context(|| format!("cannot write {path}"))?;
            let perm = if mode == MODE_EXEC { 0o755 } else { 0o644 };
            f.set_permissions(fs::Permissions::from_mode(perm))?;
            tmp.into_temp_path()
                .keep()
                .map_err(|e| e.error)
                .context(|| format!("cannot write {path}"))?
        };
        match place(&staged, &target, replaces, (ours, mode)) {
            Ok(true) => return Ok(Some(target)),
            Ok(false) => return Ok(None),
            Err(e) if attempt == 0 && e.raw_os_error() == Some(libc::EXDEV) => {
                let _ = fs::remove_file(&staged);
            }
            Err(e) => {
                let _ = fs::remove_file(&staged);
                return Err(Error::local(format!("cannot write {path}: {e}")));
            }
        }
    }
    Err(Error::local(format!("cannot write {path}")))
}

/// renameat2(2), relative to the working directory as rename(2) is.
fn renameat2(from: &Path, to: &Path, flags: RenameFlags) -> std::io::Result<()> {
    rustix::fs::renameat_with(rustix::fs::CWD, from, rustix::fs::CWD, to, flags)
        .map_err(std::io::Error::from)
}

/// Whether renameat2 said it cannot do what was asked here (an old kernel,
/// a file system without exchange): the plain rename takes over.
fn unsupported(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
    )
}

/// The version at `p` (a name in a staging directory), as [`on_disk`].
fn version_at(p: &Path) -> Option<(Vec<u8>, u32)> {
    let parent = p.parent()?;
    let name = p.file_name()?.to_str()?;
    on_disk(parent, name).ok().flatten()
}

/// Put `staged` at `target` only if `target` holds what `replaces` accepts
/// at that instant: a compare-and-swap on a name. With `RENAME_EXCHANGE`
/// the two names swap atomically and what was displaced is looked at
/// afterwards, whole and still there; anything else (an edit written since
/// the caller's check, by any means) is swapped back. A new file goes in
/// with `RENAME_NOREPLACE`: one created meanwhile stays. Only a write
/// through a descriptor opened before the swap and written after this
/// look can still land in the displaced file, as with any checkout.
/// Ok(false): the target was left as found and `staged` is removed.
fn place(
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
            let displaced = version_at(staged);
            if replaces(&displaced) {
                remove_any(staged)?;
                return Ok(true);
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
        Err(e) if matches!(e.raw_os_error(), Some(libc::EEXIST | libc::ENOENT)) => {
            remove_any(staged)?;
            Ok(false)
        }
        Err(e) if unsupported(&e) => {
            // A last look, then the plain rename.
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

fn remove_any(p: &Path) -> std::io::Result<()> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(p),
        Ok(_) => fs::remove_file(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Remove `dir` if it holds nothing but empty directories; fails, leaving
/// everything, at the first thing that is not one.
fn remove_empty_dirs(dir: &Path) -> std::io::Result<()> {
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
fn remove_if(workdir: &Path, staging: &Path, path: &str, replaces: Replaces<'_>) -> Result<bool> {
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
            let _ = fs::create_dir(staging);
            let mut aside = staging.join(format!(".git-steps-gone-{}", std::process::id()));
            let mut moved = fs::rename(&target, &aside);
            if matches!(&moved, Err(e) if e.raw_os_error() == Some(libc::EXDEV)) {
                aside = target.with_file_name(format!(".git-steps-gone-{}", std::process::id()));
                moved = fs::rename(&target, &aside);
            }
            match moved {
                Ok(()) => {}
                // Gone already, as the update wants it.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
                Err(e) => return Err(e).context(|| format!("cannot remove {path}")),
            }
            if !replaces(&version_at(&aside)) {
                return match renameat2(&aside, &target, RenameFlags::NOREPLACE) {
                    Ok(()) => Ok(false),
                    Err(e) if unsupported(&e) => {
                        fs::rename(&aside, &target).context(|| format!("cannot put {path} back"))?;
                        Ok(false)
                    }
                    Err(e) => Err(Error::local(format!(
                        "{path} changed while it was being removed and cannot be put back ({e}); it is at {}",
                        aside.display()
                    ))),
                };
            }
            remove_any(&aside).context(|| format!("cannot remove {path}"))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return Ok(true),
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
