//! The tree being built: the base tree plus a step's writes so far, in
//! memory, with blobs written to the object database as they come.
//!
//! Owns how an edit format sees files while a step is applied (what is at
//! a path, its content in the form the format applies to) and how its
//! writes are stored (as `git add` would store them). Invariant: the base
//! tree is never changed, and a failure of the machine (the object
//! database) is kept apart from an edit that does not apply.

use std::collections::BTreeMap;
use std::path::Path;

use git2::{ObjectType, Oid, Repository, Tree};

use super::{check_link_target, max_file_bytes, Applied, Measured};
use crate::error::{Error, Result};
use crate::git::{BlobEntry, Change, MODE_LINK};

/// What is at a path in the tree being built.
pub(super) enum Kind {
    Missing,
    File(BlobEntry),
    Dir,
    Other,
}

/// A blob's bytes: kept from this process's own write, or libgit2's.
pub(super) enum Stored<'r> {
    Recent(std::sync::Arc<Vec<u8>>),
    Read(git2::Blob<'r>),
}

impl Stored<'_> {
    pub(super) fn content(&self) -> &[u8] {
        match self {
            Stored::Recent(d) => d,
            Stored::Read(b) => b.content(),
        }
    }
}

/// The base tree plus the step's writes so far.
pub(super) struct Overlay<'r> {
    pub(super) repo: &'r Repository,
    pub(super) base: Option<Tree<'r>>,
    pub(super) writes: BTreeMap<String, Option<BlobEntry>>,
    /// The worktree's form against the repository's.
    pub(super) convert: crate::tree::convert::Convert<'r>,
    /// Whether the edit formats see files in the worktree's form (all but
    /// unified diffs, which apply to the repository's form, as `git
    /// apply` applies them).
    pub(super) worktree_form: bool,
    /// Diff each write against the base as it is stored (`files` steps:
    /// each path is written once).
    pub(super) measure: bool,
    pub(super) measured: BTreeMap<String, Measured>,
    /// The first failure to read or write the object database (a full
    /// disk, a failed fsync): the step is then not "does not apply" but
    /// this error, the machine's, reported as such.
    pub(super) io: &'r std::cell::RefCell<Option<Error>>,
}

impl<'r> Overlay<'r> {
    /// Keep `e` as the overlay's I/O failure; its message for the caller.
    pub(super) fn io(&self, e: impl Into<Error>) -> String {
        let e = e.into();
        let message = e.to_string();
        self.io.borrow_mut().get_or_insert(e);
        message
    }

    pub(super) fn base_kind(&self, path: &str) -> Result<Kind> {
        let Some(base) = &self.base else {
            return Ok(Kind::Missing);
        };
        match base.get_path(Path::new(path)) {
            Ok(e) => Ok(match e.kind() {
                Some(ObjectType::Blob) => Kind::File(BlobEntry {
                    oid: e.id(),
                    mode: e.filemode() as u32,
                }),
                Some(ObjectType::Tree) => Kind::Dir,
                _ => Kind::Other,
            }),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(Kind::Missing),
            Err(e) => Err(e.into()),
        }
    }

    pub(super) fn kind(&self, path: &str) -> Result<Kind> {
        if let Some(w) = self.writes.get(path) {
            return Ok(match w {
                Some(e) => Kind::File(*e),
                None => Kind::Missing,
            });
        }
        match self.base_kind(path)? {
            Kind::Dir if !self.dir_has_live_entries(path)? => Ok(Kind::Missing),
            k => Ok(k),
        }
    }

    /// Whether a base directory still has an entry the step did not delete,
    /// or the step wrote something under it.
    pub(super) fn dir_has_live_entries(&self, dir: &str) -> Result<bool> {
        let prefix = format!("{dir}/");
        if self
            .writes
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .any(|(_, v)| v.is_some())
        {
            return Ok(true);
        }
        let Some(base) = &self.base else {
            return Ok(false);
        };
        let tree = base
            .get_path(Path::new(dir))?
            .to_object(self.repo)?
            .peel_to_tree()?;
        let mut live = false;
        tree.walk(git2::TreeWalkMode::PreOrder, |root, e| {
            if e.kind() == Some(ObjectType::Tree) {
                return git2::TreeWalkResult::Ok;
            }
            let full = format!("{prefix}{root}{}", String::from_utf8_lossy(e.name_bytes()));
            if !matches!(self.writes.get(&full), Some(None)) {
                live = true;
                return git2::TreeWalkResult::Abort;
            }
            git2::TreeWalkResult::Ok
        })
        .or_else(|e| if live { Ok(()) } else { Err(e) })?;
        Ok(live)
    }

    /// The file at `path`, or an error saying what is there instead.
    pub(super) fn file(&self, path: &str) -> Result<Option<BlobEntry>, String> {
        self.check_parents(path)?;
        match self.kind(path).map_err(|e| self.io(e))? {
            Kind::File(e) => Ok(Some(e)),
            Kind::Missing => Ok(None),
            Kind::Dir => Err(format!("{path} is a directory")),
            Kind::Other => Err(format!("{path} is a submodule")),
        }
    }

    /// Refuse paths that go through a symlink or a file.
    pub(super) fn check_parents(&self, path: &str) -> Result<(), String> {
        let mut end = 0;
        while let Some(i) = path[end..].find('/') {
            let parent = &path[..end + i];
            match self.kind(parent).map_err(|e| self.io(e))? {
                Kind::File(e) if e.mode == MODE_LINK => {
                    return Err(format!(
                    "{path} goes through the symlink {parent}; steps never write through a symlink"
                ))
                }
                Kind::File(_) => return Err(format!("{path} goes through the file {parent}")),
                Kind::Other => return Err(format!("{path} goes through the submodule {parent}")),
                Kind::Missing | Kind::Dir => {}
            }
            end += i + 1;
        }
        Ok(())
    }

    pub(super) fn read(&self, e: &BlobEntry) -> Result<Vec<u8>> {
        Ok(self.blob(e)?.content().to_vec())
    }

    /// The blob at `e`: the bytes this process wrote for it lately (an
    /// earlier step's, not read back), else read in place.
    fn blob(&self, e: &BlobEntry) -> Result<Stored<'r>> {
        Ok(match crate::git::loose::recent(e.oid) {
            Some(d) => Stored::Recent(d),
            None => Stored::Read(self.repo.find_blob(e.oid)?),
        })
    }

    pub(super) fn write(&mut self, path: &str, content: &[u8], mode: u32) -> Result<Oid, String> {
        let max = max_file_bytes();
        if content.len() > max {
            return Err(format!(
                "{path} would be {} bytes, over the {} bytes a file may have (steps.maxFileSize; git hosts refuse files over 100 MiB)",
                content.len(),
                max
            ));
        }
        self.check_parents(path)?;
        if mode == MODE_LINK {
            check_link_target(path, content)?;
        }
        if let Kind::Dir = self.kind(path).map_err(|e| self.io(e))? {
            return Err(format!("{path} is a directory"));
        }
        let oid = crate::git::loose::write(self.repo, ObjectType::Blob, content)
            .map_err(|e| self.io(e))?;
        self.writes
            .insert(path.to_string(), Some(BlobEntry { oid, mode }));
        Ok(oid)
    }

    /// The content at `e` as the current form shows it: the worktree's
    /// (smudged) or the repository's.
    pub(super) fn view(&self, path: &str, e: &BlobEntry) -> Result<Vec<u8>, String> {
        let stored = self.read(e).map_err(|e| self.io(e))?;
        if self.worktree_form && e.mode != MODE_LINK {
            self.convert
                .to_worktree(path, &stored)
                .map(std::borrow::Cow::into_owned)
        } else {
            Ok(stored)
        }
    }

    /// Write `content`, given in the current form, as the repository
    /// stores it.
    pub(super) fn store(&mut self, path: &str, content: &[u8], mode: u32) -> Result<(), String> {
        // The base's version, read in place once: the diff's old side and
        // what "safer autocrlf" looks at.
        let base = match self.base_kind(path).map_err(|e| self.io(e))? {
            Kind::File(e) if self.measure => Some((e, self.blob(&e).map_err(|e| self.io(e))?)),
            _ => None,
        };
        let cleaned =
            if self.worktree_form && mode != MODE_LINK && self.convert.reads_previous(path)? {
                let current = self.file(path).ok().flatten();
                let read;
                let previous = match (current, &base) {
                    (Some(e), _) if e.mode == MODE_LINK => None,
                    (Some(e), Some((b, blob))) if e == *b => Some(blob.content()),
                    (Some(e), _) => {
                        read = self.read(&e).map_err(|e| self.io(e))?;
                        Some(&read[..])
                    }
                    (None, _) => None,
                };
                self.convert.to_repo_over(path, content, previous)?
            } else if self.worktree_form && mode != MODE_LINK {
                self.convert.to_repo_over(path, content, None)?
            } else {
                std::borrow::Cow::Borrowed(content)
            };
        let oid = self.write(path, &cleaned, mode)?;
        if self.measure {
            let old: &[u8] = base.as_ref().map_or(&[], |(_, b)| b.content());
            let (added, removed) = crate::tree::hunks::line_counts(old, &cleaned);
            self.measured.insert(
                path.to_string(),
                Measured {
                    old: base.as_ref().map(|(e, _)| *e),
                    new: BlobEntry { oid, mode },
                    diff: crate::tree::hunks::identities(path, old, &cleaned),
                    added,
                    removed,
                },
            );
        }
        Ok(())
    }

    pub(super) fn delete(&mut self, path: &str) {
        self.writes.insert(path.to_string(), None);
        self.measured.remove(path);
    }

    /// Write the new tree and compute the net changes.
    pub(super) fn finish(self) -> Result<Applied> {
        let empty;
        let base = match &self.base {
            Some(t) => t,
            None => {
                empty = self.repo.find_tree(self.repo.treebuilder(None)?.write()?)?;
                &empty
            }
        };
        let mut changes = Vec::new();
        let mut updates: Vec<(&str, Option<BlobEntry>)> = Vec::new();
        for (path, new) in &self.writes {
            let old = match self.base_kind(path)? {
                Kind::File(e) => Some(e),
                _ => None,
            };
            if old == *new {
                continue;
            }
            updates.push((path.as_str(), *new));
            changes.push(Change {
                path: path.clone(),
                old,
                new: *new,
            });
        }
        let tree = match build_tree(self.repo, Some(base.clone()), &updates)? {
            Some(t) => t,
            None => self.repo.treebuilder(None)?.write()?,
        };
        // Only what became a change is kept (a write of what was there is
        // none).
        let mut measured = self.measured;
        measured.retain(|p, _| {
            changes
                .binary_search_by(|c| c.path.as_str().cmp(p.as_str()))
                .is_ok()
        });
        Ok(Applied {
            tree,
            changes,
            measured,
        })
    }
}

/// Write the tree `base` with `updates` (path → new entry, None: delete)
/// applied; None when the result is empty. Handles a file or symlink
/// replaced by a directory and back, which libgit2's tree updater refuses as
/// a D/F conflict.
pub(crate) fn build_tree(
    repo: &Repository,
    base: Option<Tree<'_>>,
    updates: &[(&str, Option<BlobEntry>)],
) -> Result<Option<Oid>> {
    type Group<'a> = (Option<Option<BlobEntry>>, Vec<(&'a str, Option<BlobEntry>)>);
    let mut groups: BTreeMap<&str, Group<'_>> = BTreeMap::new();
    for (p, e) in updates {
        match p.split_once('/') {
            None => groups.entry(p).or_default().0 = Some(*e),
            Some((name, rest)) => groups.entry(name).or_default().1.push((rest, *e)),
        }
    }
    // The base's entries as stored (raw modes kept), then the updates; the
    // tree serialised and written as git writes it ([`crate::git::loose`]).
    let mut entries: BTreeMap<Vec<u8>, (u32, Oid)> = BTreeMap::new();
    if let Some(t) = &base {
        for e in t.iter() {
            entries.insert(e.name_bytes().to_vec(), (e.filemode_raw() as u32, e.id()));
        }
    }
    for (name, (leaf, children)) in groups {
        // What libgit2's treebuilder refused (the path rules refuse them
        // first; this is the last line, for a rescue of what is on disk).
        if name.is_empty()
            || name == "."
            || name == ".."
            || name.eq_ignore_ascii_case(".git")
            || name.contains('\0')
        {
            return Err(Error::other(format!(
                "refusing to write a tree entry named {name:?}"
            )));
        }
        let key = name.as_bytes();
        match leaf {
            Some(Some(e)) => {
                // A file here; anything under the old directory is gone.
                entries.insert(key.to_vec(), (e.mode, e.oid));
                continue;
            }
            Some(None) => {
                entries.remove(key);
            }
            _ => {}
        }
        if children.is_empty() {
            continue;
        }
        let sub_base = match entries.get(key) {
            Some((mode, id)) if mode & 0o170000 == 0o040000 => Some(repo.find_tree(*id)?),
            _ => None,
        };
        match build_tree(repo, sub_base, &children)? {
            Some(oid) => {
                entries.insert(key.to_vec(), (0o040000, oid));
            }
            None => {
                entries.remove(key);
            }
        }
    }
    if entries.is_empty() {
        return Ok(None);
    }
    let mut list: Vec<(Vec<u8>, u32, Oid)> =
        entries.into_iter().map(|(n, (m, id))| (n, m, id)).collect();
    let bytes = crate::git::loose::tree_bytes(&mut list);
    Ok(Some(crate::git::loose::write(
        repo,
        ObjectType::Tree,
        &bytes,
    )?))
}
