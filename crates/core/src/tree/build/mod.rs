//! Applying a step to a tree, in the object database only.
//!
//! Owns turning (previous step's tree, step content) into a new tree: blobs
//! and trees are written, nothing is visible yet — no ref, no index, no
//! worktree. Invariant: the result is a pure function of the base tree and the
//! decision (deterministic), every path obeys the path rules, and no path is
//! reached through a symlink of the base tree or of an earlier file of the same
//! step. A step that does not apply fails here, before anything else moves.

use std::collections::BTreeMap;

use git2::{Oid, Repository, Tree};

use crate::error::{Error, Result};
use crate::git::{BlobEntry, Change, MODE_EXEC, MODE_FILE};
use crate::plan::formats;
use crate::plan::formats::patch;
use crate::plan::formats::{EditError, FileError};
use crate::plan::step::{Content, Step};

mod overlay;
pub(crate) use overlay::build_tree;
use overlay::Overlay;

/// The default largest file a step may write: 100 MiB, the size git
/// hosts refuse a file over.
pub const DEFAULT_MAX_FILE_BYTES: usize = 100 << 20;

static MAX_FILE_BYTES: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(DEFAULT_MAX_FILE_BYTES);

/// The largest file a step may write (`steps.maxFileSize`): a step over it
/// is refused with a clear error before anything is written.
pub fn max_file_bytes() -> usize {
    MAX_FILE_BYTES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Set by the run's settings from `steps.maxFileSize`.
pub fn set_max_file_bytes(n: usize) {
    MAX_FILE_BYTES.store(n, std::sync::atomic::Ordering::Relaxed);
}

/// What applying a step produced.
#[derive(Debug)]
pub struct Applied {
    pub tree: Oid,
    /// Net changes against the base tree, sorted by path.
    pub changes: Vec<Change>,
    /// The diffs of a `files` step's writes, measured while their content
    /// was in memory (so a large file is never read back to be diffed).
    pub measured: BTreeMap<String, Measured>,
}

/// One file's change from `old` to `new`, diffed when it was written: its
/// hunks for the duplicated-hunk rule, and its lines added and removed.
#[derive(Debug)]
pub struct Measured {
    pub old: Option<BlobEntry>,
    pub new: BlobEntry,
    pub diff: crate::tree::hunks::FileDiff,
    pub added: usize,
    pub removed: usize,
}

impl Applied {
    /// A short summary for the subject line when the step has no message.
    pub fn summary(&self) -> String {
        let names: Vec<&str> = self.changes.iter().map(|c| c.path.as_str()).collect();
        match names.len() {
            0 => "no change".into(),
            1..=3 => format!("edit {}", names.join(", ")),
            n => format!("edit {}, {} and {} more", names[0], names[1], n - 2),
        }
    }
}

/// A symlink may only point inside the repository: a relative target that,
/// read from the link's directory, never climbs above the top and never
/// names `.git`. (git itself allows any target; a step from a model should
/// not be able to plant a door to the rest of the machine.)
pub fn check_link_target(path: &str, target: &[u8]) -> Result<(), String> {
    let t = std::str::from_utf8(target)
        .map_err(|_| format!("the symlink {path} has a target that is not UTF-8"))?;
    if t.is_empty() || t.contains('\0') {
        return Err(format!(
            "the symlink {path} has an empty or NUL-containing target"
        ));
    }
    if t.starts_with('/') {
        return Err(format!(
            "the symlink {path} points to the absolute path {t:?}, outside the repository"
        ));
    }
    let mut depth: i64 = path.matches('/').count() as i64;
    for c in t.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return Err(format!(
                        "the symlink {path} points to {t:?}, outside the repository"
                    ));
                }
            }
            c if crate::plan::path::is_dotgit_alias(c) => {
                return Err(format!("the symlink {path} points into .git ({t:?})"))
            }
            _ => depth += 1,
        }
    }
    Ok(())
}

/// Apply `step` on top of `base` (None: the empty tree of an unborn branch).
///
/// `files` contents are the worktree's form of a file. The other formats
/// are tried in one form and, where they do not apply, in the other: edits
/// (`edits`, `apply_patch`, `search_replace`) first on the worktree's form
/// (what an agent that read the file saw), unified diffs first on the
/// repository's (as `git apply` applies `git diff`). Where neither applies,
/// the error reported is the one of the form whose line endings the step's
/// text has. Without line-ending conversion or filter drivers both forms
/// are the same bytes.
pub fn apply(repo: &Repository, base: Option<Tree<'_>>, step: &Step) -> Result<Applied> {
    let io = std::cell::RefCell::new(None);
    let overlay = |worktree_form: bool| Overlay {
        io: &io,
        repo,
        base: base.clone(),
        writes: BTreeMap::new(),
        convert: crate::tree::convert::Convert::new(repo),
        worktree_form,
        // Every write's diff measured from the content in hand: the
        // step's hunks and line counts need no read of the blobs back.
        measure: true,
        measured: BTreeMap::new(),
    };
    // A failure of the machine (the object database could not be read or
    // written) is reported as such, not as a step that does not apply. The
    // step's own failure stays an EditError until here, its one conversion.
    let fail = |e: EditError| match io.borrow_mut().take() {
        Some(machine) => machine.at_step(&step.id),
        None => Error::apply(&step.id, e.to_string()),
    };
    let refused = |m: String| fail(EditError::DoesNotApply(m));
    enum Parsed {
        Patch(Vec<patch::FilePatch>),
        Edits(Vec<formats::edits::Op>),
        ApplyPatch(Vec<formats::apply_patch::FileOp>),
        SearchReplace(Vec<formats::search_replace::Block>),
    }
    let parsed = match &step.content {
        Content::Files(files) => {
            let mut o = overlay(true);
            // Deletions first, so a step can replace a directory by a file.
            let (deletes, writes): (Vec<_>, Vec<_>) = files.iter().partition(|(_, c)| c.is_none());
            for (path, content) in deletes.into_iter().chain(writes) {
                let existing = o.file(path).map_err(refused)?;
                match content {
                    Some(w) => {
                        let mode = match (w.mode, existing) {
                            (Some(m), _) => m,
                            (None, Some(e)) if e.mode == MODE_EXEC => MODE_EXEC,
                            (None, _) => MODE_FILE,
                        };
                        // The content is the worktree's form: stored as
                        // `git add` would store it (a link's target as is).
                        o.store(path, &w.bytes, mode).map_err(refused)?;
                    }
                    None if existing.is_none() => {
                        return Err(refused(format!(
                            "files: cannot delete {path}: it does not exist"
                        )))
                    }
                    None => o.delete(path),
                }
            }
            return finish(repo, base.as_ref(), o, &refused);
        }
        Content::Patch(text) => {
            Parsed::Patch(patch::parse(text).map_err(|e| fail(e.in_format("patch")))?)
        }
        Content::Edits(ops) => Parsed::Edits(formats::edits::parse(ops).map_err(fail)?),
        Content::ApplyPatch(text) => Parsed::ApplyPatch(
            formats::apply_patch::parse(text).map_err(|e| fail(e.in_format("apply_patch")))?,
        ),
        Content::SearchReplace(text) => Parsed::SearchReplace(
            formats::search_replace::parse(text)
                .map_err(|e| fail(e.in_format("search_replace")))?,
        ),
    };
    let run = |o: &mut Overlay<'_>| -> Result<(), EditError> {
        match &parsed {
            Parsed::Patch(files) => apply_patch_files(o, files).map_err(EditError::DoesNotApply),
            Parsed::Edits(ops) => formats::edits::apply(o, ops),
            Parsed::ApplyPatch(ops) => formats::apply_patch::apply(o, ops),
            Parsed::SearchReplace(blocks) => formats::search_replace::apply(o, blocks),
        }
    };
    let first_form = !matches!(parsed, Parsed::Patch(_));
    let mut o = overlay(first_form);
    if let Err(first) = run(&mut o) {
        if io.borrow().is_some() {
            // The machine failed, not the step's text: no other form.
            return Err(fail(first));
        }
        o = overlay(!first_form);
        if let Err(second) = run(&mut o) {
            // Both failed: report the form whose line endings the step's
            // text has (they differ only under a conversion).
            let text_has_cr = match &step.content {
                Content::Patch(t) | Content::ApplyPatch(t) | Content::SearchReplace(t) => {
                    t.contains('\r')
                }
                Content::Edits(ops) => ops.iter().any(|v| v.to_string().contains("\\r")),
                Content::Files(_) => false,
            };
            let worktree_error = if first_form { &first } else { &second };
            let repo_error = if first_form { &second } else { &first };
            return Err(fail(if text_has_cr {
                worktree_error.clone()
            } else {
                repo_error.clone()
            }));
        }
    }
    finish(repo, base.as_ref(), o, &refused)
}

/// The tree of a step's writes, with its links checked.
fn finish(
    repo: &Repository,
    base: Option<&Tree<'_>>,
    o: Overlay<'_>,
    fail: &dyn Fn(String) -> Error,
) -> Result<Applied> {
    let applied = o.finish()?;
    // A link is checked against the whole tree it lands in: through the
    // links it holds, a target that reads as inside can lead outside.
    let new_tree = repo.find_tree(applied.tree)?;
    crate::tree::guard::check_links(repo, base, &new_tree, &applied.changes)?
        .map_err(|v| fail(v.why))?;
    Ok(applied)
}

/// The tree being built, as the edit formats see it: a symlink is reported
/// with its mode (the formats refuse to edit it), and paths through
/// symlinks or files are refused by `file` and `write`.
impl formats::Files for Overlay<'_> {
    fn get(&mut self, path: &str) -> Result<Option<(Vec<u8>, u32)>, FileError> {
        match self.file(path).map_err(FileError)? {
            None => Ok(None),
            Some(e) => Ok(Some((self.view(path, &e).map_err(FileError)?, e.mode))),
        }
    }
    fn put(&mut self, path: &str, content: Vec<u8>, mode: u32) -> Result<(), FileError> {
        self.store(path, &content, mode).map_err(FileError)
    }
    fn remove(&mut self, path: &str) -> Result<(), FileError> {
        self.file(path).map_err(FileError)?;
        self.delete(path);
        Ok(())
    }
}

fn apply_patch_files(o: &mut Overlay<'_>, files: &[patch::FilePatch]) -> Result<(), String> {
    let mut touched: BTreeMap<&str, usize> = BTreeMap::new();
    // git prints a type change (a file replaced by a symlink and back) as a
    // deletion and a creation of the same path, in that order: one change.
    let mut deleted: BTreeMap<&str, usize> = BTreeMap::new();
    for fp in files {
        if let (Some(old), None) = (&fp.old_path, &fp.new_path) {
            deleted.insert(old.as_str(), fp.line);
        }
        for p in [&fp.old_path, &fp.new_path].into_iter().flatten() {
            if fp.is_copy && Some(p) == fp.old_path.as_ref() {
                continue;
            }
            let recreated = fp.old_path.is_none() && deleted.remove(p.as_str()).is_some();
            if let Some(prev) = touched.insert(p.as_str(), fp.line) {
                if prev != fp.line && !recreated {
                    return Err(format!(
                        "patch line {}: {p} is changed twice in one patch (first at line {prev})",
                        fp.line
                    ));
                }
            }
        }
    }
    // Deletions first: git sorts `d` before `d/x`, so a directory replaced
    // by a file comes as the file's creation, then the directory's files'
    // deletions.
    let (deletions, others): (Vec<_>, Vec<_>) = files.iter().partition(|fp| fp.new_path.is_none());
    for fp in deletions.into_iter().chain(others) {
        let at = |m: String| format!("patch line {}: {m}", fp.line);
        let old = match &fp.old_path {
            None => None,
            Some(p) => match o.file(p).map_err(at)? {
                Some(e) => Some(e),
                None => return Err(at(format!("{p} does not exist"))),
            },
        };
        let old_content = match &old {
            Some(e) => o
                .view(fp.old_path.as_deref().unwrap_or_default(), e)
                .map_err(at)?,
            None => Vec::new(),
        };
        let new_content = patch::apply_hunks(&old_content, &fp.hunks)
            .map_err(|m| at(format!("{}: {m}", fp.display_path())))?;
        match &fp.new_path {
            None => {
                if !new_content.is_empty() {
                    return Err(at(format!(
                        "deleting {}: the file has content the patch does not remove",
                        fp.display_path()
                    )));
                }
                o.delete(fp.old_path.as_deref().unwrap_or_default());
            }
            Some(np) => {
                let renamed = fp.old_path.as_deref().is_some_and(|op| op != np);
                if (fp.old_path.is_none() || renamed) && o.file(np).map_err(at)?.is_some() {
                    return Err(at(format!("{np} already exists")));
                }
                let mode = fp.new_mode.or(old.map(|e| e.mode)).unwrap_or(MODE_FILE);
                if renamed && !fp.is_copy {
                    o.delete(fp.old_path.as_deref().unwrap_or_default());
                }
                o.store(np, &new_content, mode).map_err(at)?;
            }
        }
    }
    Ok(())
}
