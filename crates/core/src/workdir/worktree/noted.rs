//! The evidence that a worktree update of this box was cut short: before a
//! branch moves ahead of the worktree and index, the update about to
//! follow is noted (`<git dir>/steps/updating/<commit>`: the commit it
//! starts from and the one it brings them to). A note goes only once the
//! index that names its new versions is durable: the next step's commit
//! point flushes it (the next note clears the ones before the last), and
//! [`settle_update`] flushes the index when the command ends (one flush
//! for a whole run, not one per step).
//!
//! Owns those notes. Invariant: a path is taken for one an update left
//! behind only when a note names the commit the branch is at and the path
//! is one that update changes; without such a note a changed path is the
//! user's (a staged older version, a deletion, `git add -p`), never
//! "repaired". A note is written before the flush that makes the branch's
//! move durable (the push's commit point, or `move_ref`'s without a
//! remote; where files are flushed one by one it is flushed at once), so a
//! cut never keeps the move and loses the note.

use std::io::Write;
use std::path::PathBuf;

use git2::{Oid, Repository};

fn dir(repo: &Repository) -> PathBuf {
    repo.path().join("steps").join("updating")
}

/// The notes there are, by the commit each goes to (None: a name that is
/// not a commit id, which a cut cannot make: ignored).
fn notes(repo: &Repository) -> Vec<(PathBuf, Option<Oid>)> {
    let Ok(entries) = std::fs::read_dir(dir(repo)) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| {
            let to = e.file_name().to_str().and_then(|n| Oid::from_str(n).ok());
            (e.path(), to)
        })
        .collect()
}

/// Note that the branch is about to move from `from` to `to` ahead of the
/// worktree and index. Notes older than the last one go: the commit point
/// since it made their updates' indexes durable.
pub fn note_update(repo: &Repository, from: Option<Oid>, to: Oid) -> std::io::Result<()> {
    let dir = dir(repo);
    let made = !dir.is_dir();
    if made {
        std::fs::create_dir_all(&dir)?;
    }
    let path = dir.join(to.to_string());
    let mut f = std::fs::File::create(&path)?;
    crate::git::shared::created_under(repo.path(), repo.path(), &path)?;
    let from_hex = from.map_or("none".to_string(), |o| o.to_string());
    f.write_all(format!("{from_hex} {to}\n").as_bytes())?;
    if crate::git::fsync::per_file() {
        f.sync_all()?;
        crate::lock::sync_dir(&dir)?;
        if made {
            // The directories' own names (`steps/`, `steps/updating/`).
            for up in dir.ancestors().skip(1).take(2) {
                crate::lock::sync_dir(up)?;
            }
        }
    }
    for (old, at) in notes(repo) {
        if at.is_some_and(|at| at != to && Some(at) != from) {
            let _ = std::fs::remove_file(old);
        }
    }
    Ok(())
}

/// The updates are done: the index (and the rename that put it in place)
/// is flushed, then every note goes. Removed before the index is durable,
/// a cut could keep the removal and lose the index, and the evidence with
/// it. Nothing to do without a note.
pub fn settle_update(repo: &Repository) {
    let all = notes(repo);
    if all.is_empty() {
        return;
    }
    let index = repo.path().join("index");
    let flushed = std::fs::File::open(&index)
        .and_then(|f| f.sync_all())
        .or_else(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Ok(()),
            _ => Err(e),
        })
        .and_then(|()| crate::lock::sync_dir(repo.path()));
    if flushed.is_ok() {
        for (path, _) in all {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The note of an update to `head`, if there is one: the commit it
/// started from (None where a cut left the note unreadable: an update to
/// `head` was cut short, from where is not known).
pub fn noted_update(repo: &Repository, head: Oid) -> Option<Option<Oid>> {
    let path = dir(repo).join(head.to_string());
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(_) => return Some(None),
    };
    let text = String::from_utf8_lossy(&text);
    let mut words = text.split_whitespace();
    let (from, to) = (words.next(), words.next());
    let from = from.and_then(|f| Oid::from_str(f).ok());
    Some(from.filter(|_| to == Some(head.to_string().as_str())))
}

/// Whether any note is left (a stale one, of an update to another commit).
pub fn any_noted(repo: &Repository) -> bool {
    !notes(repo).is_empty()
}
