//! What a worktree update could not bring up, kept: the user's versions
//! saved under `refs/steps/rescue/<run>/<n>` on top of the step's commit,
//! and the refusal that names them with the commands that finish the
//! update.
//!
//! Owns the rescue refs. Invariant: a rescue is durable before any file it
//! saves could be written over, and it saves what the worktree held, never
//! what the update would have written.

use std::fs;
use std::path::Path;

use git2::Repository;

use super::{on_disk, place, through_non_dir, workdir, Dest};
use crate::crash;
use crate::error::{Error, Refusal, RefusalKind, Result};
use crate::git::{BlobEntry, Change};

/// Files changed under a worktree update: each is kept as it is (a
/// directory put in its place included), all are saved under
/// `refs/steps/rescue/` in one commit on top of the update's, and the
/// update ends with a refusal that says, per file, how to finish.
pub(super) fn changed_under_update(
    repo: &Repository,
    dest: Dest<'_>,
    step: &str,
    kept: &[&Change],
) -> Error {
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
    let (open, edited): (Vec<&str>, Vec<&str>) = paths
        .iter()
        .partition(|p| place::was_held_open(&workdir.join(p)));
    let mut saw = Vec::new();
    if !edited.is_empty() {
        saw.push(format!(
            "{} changed while the worktree was being brought up to commit {short}: {} neither the version the update replaces nor the new one",
            edited.join(", "),
            if edited.len() == 1 { "it holds" } else { "they hold" }
        ));
    }
    if !open.is_empty() {
        saw.push(format!(
            "{} {} open for writing in another process while the worktree was being brought up to commit {short}: what it writes next would go into a replaced file and be lost",
            open.join(", "),
            if open.len() == 1 { "is" } else { "are" }
        ));
    }
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
        saw: format!("{} (every other file was brought up)", saw.join("; ")),
        would: format!("overwrite your change to {names}"),
        hint: crate::error::Hint::rerun_after(format!(
            "{}your version is kept as it is and {saved_as}; to finish: {}",
            if open.is_empty() {
                String::new()
            } else {
                format!(
                    "let the writer of {} finish or stop it (`fuser -v FILE` names it); ",
                    open.join(", ")
                )
            },
            finish.join("; ")
        ))
        .because("it brings the worktree up to the step; then make your change again"),
    })
}

/// Every file under the worktree directory `dir`, as blobs (bounded: at
/// most 10,000 files are saved).
fn files_under(
    repo: &Repository,
    workdir: &Path,
    dir: &str,
    out: &mut Vec<(String, Option<BlobEntry>)>,
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
                Some(BlobEntry {
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
    let mut found: Vec<(String, Option<BlobEntry>)> = Vec::new();
    for path in paths {
        match on_disk(&workdir, path)? {
            Some((bytes, mode)) => found.push((
                path.to_string(),
                Some(BlobEntry {
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
    let mut updates: Vec<(&str, Option<BlobEntry>)> =
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
    crate::lock::intending(repo, crate::lock::ref_locks(repo, &name), || {
        repo.reference(&name, oid, false, "git-steps: rescue")
    })?;
    // Durable before any file it saves is written over.
    crate::flush::repository(repo)?;
    Ok(name)
}
