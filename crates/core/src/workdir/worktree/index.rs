//! The index a worktree update writes: git's own file rewritten for the
//! paths the update changes ([`crate::git::index_file`]) where it is
//! plainly git's, libgit2's index otherwise (none yet, or a format only
//! libgit2's reader takes on).
//!
//! Owns the index writes of a worktree update. Invariant: the index is
//! replaced in one rename of a complete file under git's lock
//! (`index.lock`, created exclusively, named in the intent file first), its
//! bytes flushed before the rename where syncfs is not trusted; a lock held
//! by anyone else is a refusal, never waited out or broken.

use std::io::Write;
use std::path::Path;
use std::rc::Rc;

use git2::{IndexEntry, Repository};

use crate::error::{Context, Error, Result};
use crate::git::index_file::{self, skip_hash, IndexFile, Stat};

/// The index as git wrote it, when it is plainly git's and whole (read at
/// most once while the file stays the same).
pub(crate) fn own(repo: &Repository) -> Option<Rc<IndexFile>> {
    IndexFile::cached(&repo.path().join("index"), skip_hash(repo))
}

pub(super) enum Updating {
    Own {
        file: Rc<IndexFile>,
        updates: Vec<(Vec<u8>, Option<Stat>)>,
    },
    Lib(git2::Index),
}

impl Updating {
    pub(super) fn open(repo: &Repository) -> Result<Updating> {
        if let Some(file) = own(repo) {
            return Ok(Updating::Own {
                file,
                updates: Vec::new(),
            });
        }
        let index = crate::git::index(repo)?;
        Ok(Updating::Lib(index))
    }

    pub(super) fn add(&mut self, e: &IndexEntry) -> Result<()> {
        match self {
            Updating::Own { updates, .. } => {
                updates.push((
                    e.path.clone(),
                    Some(Stat {
                        ctime: (e.ctime.seconds() as u32, e.ctime.nanoseconds()),
                        mtime: (e.mtime.seconds() as u32, e.mtime.nanoseconds()),
                        dev: e.dev,
                        ino: e.ino,
                        mode: e.mode,
                        uid: e.uid,
                        gid: e.gid,
                        size: e.file_size,
                        oid: e.id,
                        extended: 0,
                        assume_valid: false,
                    }),
                ));
                Ok(())
            }
            Updating::Lib(index) => Ok(index.add(e)?),
        }
    }

    pub(super) fn remove(&mut self, path: &str) -> Result<()> {
        match self {
            Updating::Own { updates, .. } => {
                updates.push((path.as_bytes().to_vec(), None));
                Ok(())
            }
            Updating::Lib(index) => Ok(index.remove_path(Path::new(path))?),
        }
    }

    /// Write it in place of the index, under git's lock.
    pub(super) fn write(self, repo: &Repository) -> Result<()> {
        let path = repo.path().join("index");
        let lock = repo.path().join("index.lock");
        let locked = || {
            Error::local(format!("cannot write the index: {} exists", lock.display()))
                .with_hint(crate::error::hints::locked())
        };
        match self {
            Updating::Lib(mut index) => {
                index_file::forget();
                match crate::lock::intending(repo, crate::lock::index_locks(repo), || index.write())
                {
                    Err(e) if e.code() == git2::ErrorCode::Locked => return Err(locked()),
                    r => r.context(|| "cannot write the index".into())?,
                }
                if crate::git::fsync::per_file() {
                    // libgit2 renames the index without flushing it: where
                    // syncfs does not flush, its bytes follow at once (a cut
                    // in between leaves a torn index, which the next run
                    // mends: docs/guide.md, Power cuts).
                    std::fs::File::open(&path)
                        .and_then(|f| f.sync_all())
                        .context(|| "cannot flush the index".into())?;
                }
                Ok(())
            }
            Updating::Own { file, updates } => {
                let skip = skip_hash(repo);
                // Not the disk's failure: the updates against the index
                // as it is (said without the disk's hint).
                let conflicting = std::cell::Cell::new(false);
                let both = |p: String| {
                    conflicting.set(true);
                    std::io::Error::other(format!("{p} would be both a file and a directory in it"))
                };
                let mut bytes = Vec::new();
                let mut written_as = None;
                let mut replaced = false;
                let written = crate::lock::intending(repo, crate::lock::index_locks(repo), || {
                    let mut f = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&lock)?;
                    // Under git's lock now: an index another writer put in
                    // place since it was read (the user's `git add` during
                    // the step) is the one the update goes on top of, so
                    // what they staged stays.
                    let rewritten = match file.current(&path) {
                        true => file.rewrite(&updates, !skip).map_err(both),
                        false => match IndexFile::read(&path, skip) {
                            Some(now) => now.rewrite(&updates, !skip).map_err(both),
                            None => {
                                replaced = true;
                                Err(std::io::Error::other(
                                    "it was replaced meanwhile by one git-steps does not rewrite itself",
                                ))
                            }
                        },
                    };
                    let done = rewritten
                        .and_then(|b| {
                            bytes = b;
                            f.write_all(&bytes)
                        })
                        .and_then(|()| match crate::git::fsync::per_file() {
                            true => f.sync_all(),
                            false => Ok(()),
                        })
                        .and_then(|()| std::fs::rename(&lock, &path))
                        .and_then(|()| {
                            // What this process wrote, seen through its own
                            // descriptor: another writer's index put in
                            // place after this one is never taken for it.
                            written_as = Some(f.metadata()?);
                            Ok(())
                        });
                    if done.is_err() {
                        let _ = std::fs::remove_file(&lock);
                    }
                    done
                });
                match written {
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(locked()),
                    // Another writer's index, in a form only git writes:
                    // nothing of ours was written, and the rerun reads it.
                    Err(e) if conflicting.get() => {
                        Err(Error::local(format!("cannot write the index: {e}")))
                    }
                    Err(e) if replaced => Err(Error::local(format!("cannot write the index: {e}"))
                        .with_hint(crate::error::Hint::rerun().because(
                            "it reads the index as it is now, and writes it as git does",
                        ))),
                    Err(e) => Err(Error::io("cannot write the index", e)),
                    Ok(()) => Ok(()),
                }?;
                match written_as {
                    Some(meta) => IndexFile::wrote(&path, bytes, skip, &meta),
                    None => index_file::forget(),
                }
                Ok(())
            }
        }
    }
}
