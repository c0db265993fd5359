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
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use git2::{IndexEntry, IndexTime, Repository};

use crate::crash;
use crate::error::{Context, Error, Result};
use crate::git::{BlobEntry, Change, MODE_LINK};

mod check;
mod dirty;
mod index;
mod noted;
mod place;
mod rescue;
mod settled;
use place::{remove_if, write, Content};

pub use check::{
    attributes_differ, attributes_refusal, dirty_among, dirty_paths, dirty_refusal, disk_is,
    ensure_clean, ensure_unblocked, left_behind, on_disk, same, words,
};
pub use noted::{any_noted, note_update, noted_update, settle_update};
pub use place::through_non_dir;
use rescue::changed_under_update;
pub use rescue::save_rescue;

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
    // The file this process wrote for the old version, untouched since by
    // its stat data (`settled`); else the old version first: it is what a
    // step almost always finds, and a mismatch costs a clean conversion of
    // the file (`same`).
    Ok(
        if settled::holds(repo, &c.path, &c.old) || disk_is(repo, workdir, &c.path, &c.old)? {
            Found::Old
        } else if disk_is(repo, workdir, &c.path, &c.new)? {
            Found::New
        } else {
            Found::Other
        },
    )
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
    let staging = crate::lock::tmp_dir(repo.path());
    let _rules = crate::tree::convert::Rewriting::paths(changes.iter().map(|c| c.path.as_str()));
    let _prestaged = Prestaged;
    let convert = crate::tree::convert::Convert::new(repo);
    let mut index = index::Updating::open(repo)?;
    // Deletions first: a step may replace a file or symlink by a directory.
    let mut written = 0usize;
    // Each path is compared with what the update expects to replace
    // immediately before it is replaced: a file changed since the caller
    // checked the worktree is never overwritten.
    // A file changed under the update is kept, and the update goes on with
    // every other file; it ends with a refusal naming the kept ones.
    let mut changed: Vec<&Change> = Vec::new();
    // What this update wrote and removed, with the stat data seen right
    // after: the next step's checks of these paths (`settled`).
    let mut wrote: Vec<(String, fs::Metadata, BlobEntry)> = Vec::new();
    let mut removed: Vec<&str> = Vec::new();
    // The directories whose names the update changed: fsynced before the
    // index that names the new versions is written (see below).
    let mut touched: std::collections::BTreeSet<PathBuf> = Default::default();
    let mut touch = |path: &str| {
        if let Some(d) = workdir.join(path).parent() {
            touched.insert(d.to_path_buf());
        }
    };
    for c in changes.iter().filter(|c| c.new.is_none() && !kept(c)) {
        match found(repo, &workdir, c)? {
            Found::New => {
                // Removed by a run the cut stopped: its directory still
                // flushed before the index says so.
                touch(&c.path);
                continue;
            }
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
        touch(&c.path);
        removed.push(&c.path);
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
                Ok(meta) if holds_new(repo, c)? => {
                    // The agent wrote it, and may not have flushed it: its
                    // bytes and name durable before the index says it is
                    // clean (a cut would otherwise leave a torn file that
                    // reads as an edit).
                    if meta.is_file() {
                        fs::File::open(&target)
                            .and_then(|f| f.sync_all())
                            .context(|| format!("cannot flush {}", target.display()))?;
                    }
                    touch(&c.path);
                    if c.old.is_none() {
                        // A new file, perhaps in directories the agent
                        // made: their names too.
                        let mut p = c.path.as_str();
                        while let Some((up, _)) = p.rsplit_once('/') {
                            touch(up);
                            p = up;
                        }
                    }
                    entry(&c.path, new.oid, new.mode, &meta)
                }
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
                let target = workdir.join(&c.path);
                let meta = fs::symlink_metadata(&target)?;
                // Written by a run the cut stopped, perhaps never flushed.
                if meta.is_file() {
                    fs::File::open(&target)
                        .and_then(|f| f.sync_all())
                        .context(|| format!("cannot flush {}", target.display()))?;
                }
                touch(&c.path);
                index.add(&entry(&c.path, new.oid, new.mode, &meta))?;
                continue;
            }
            Found::Old => {}
            Found::Other => {
                changed.push(c);
                continue;
            }
        }
        let content = content_for(repo, &convert, &c.path, new)?;
        let replaces = |v: &Option<(Vec<u8>, u32)>| same(repo, &c.path, v, &c.old).unwrap_or(false);
        let Some(target) = write(&workdir, &staging, &c.path, &content, new.mode, &replaces)?
        else {
            changed.push(c);
            continue;
        };
        let meta = fs::symlink_metadata(&target)?;
        index.add(&entry(&c.path, new.oid, new.mode, &meta))?;
        wrote.push((c.path.clone(), meta, new));
        touch(&c.path);
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
        index.remove(&c.path)?;
    }
    // A power cut may keep the index (fsynced) and lose a rename or an
    // unlink in the worktree that no fsync of its directory covered (POSIX
    // promises no order between them): the box would then hold old content
    // under an index naming the new, which no resume can tell from a user's
    // edit. The names first, then the index.
    // A directory the update emptied and removed: its parent holds the
    // change.
    let touched: std::collections::BTreeSet<&Path> = touched
        .iter()
        .filter_map(|d| d.ancestors().find(|a| a.is_dir()))
        .collect();
    for d in touched {
        crate::lock::sync_dir(d).context(|| format!("cannot flush {}", d.display()))?;
    }
    settled::begin(repo, changes);
    index.write(repo)?;
    if changed.is_empty() {
        settled::end(repo, dest.commit, &wrote, &removed);
    } else {
        settled::forget();
    }
    if !changed.is_empty() {
        return Err(changed_under_update(repo, dest, step, &changed));
    }
    crash::point("worktree-done", step);
    Ok(())
}

/// What `git checkout` writes for `new` at `path`: line endings and
/// filter drivers applied; a file no rule converts is streamed from its
/// blob.
fn content_for<'r>(
    repo: &'r Repository,
    convert: &crate::tree::convert::Convert<'_>,
    path: &str,
    new: BlobEntry,
) -> Result<Content<'r>> {
    if new.mode != MODE_LINK && !convert.converts_to_worktree(path).map_err(Error::program)? {
        return Ok(Content::Blob(repo, new.oid));
    }
    let blob = repo.find_blob(new.oid)?;
    Ok(Content::Bytes(if new.mode == MODE_LINK {
        std::borrow::Cow::Owned(blob.content().to_vec())
    } else {
        std::borrow::Cow::Owned(
            convert
                .to_worktree(path, blob.content())
                .map_err(Error::program)?
                .into_owned(),
        )
    }))
}

/// Stage the new files of `changes` in `.git` now, unflushed, for the
/// [`update`] that follows: the flush that makes the branch's move durable
/// makes their bytes durable too, so the update swaps them in without an
/// fsync per file (`crate::flush` names the order). What the update does
/// not take is removed when it ends, and what is left when the returned
/// guard drops (the update never came: a failure before it).
pub fn prestage(repo: &Repository, changes: &[Change]) -> Result<Prestaged> {
    let guard = Prestaged;
    let staging = crate::lock::tmp_dir(repo.path());
    let convert = crate::tree::convert::Convert::new(repo);
    for c in changes {
        if let Some(new) = c.new {
            if crate::tree::guard::check_path(&c.path).is_ok() {
                let content = content_for(repo, &convert, &c.path, new)?;
                place::prestage(&staging, &c.path, &content, new.mode)?;
            }
        }
    }
    Ok(guard)
}

/// Removes what [`prestage`] staged and no update took.
pub struct Prestaged;

impl Drop for Prestaged {
    fn drop(&mut self) {
        place::drop_prestaged();
    }
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
    let staging = crate::lock::tmp_dir(repo.path());
    let _rules = crate::tree::convert::Rewriting::paths(changes.iter().map(|c| c.path.as_str()));
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
