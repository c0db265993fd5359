//! Hunk replay: the run's steps' hunks, replayed over its history into the
//! hunks still in effect.
//!
//! Owns the reading of each step's change as hunks (from the trees, or from
//! what a `files` step measured while it was built) and the replay that
//! yields the live hunks at the head and the duplicates the history already
//! holds. Invariant: the live set after a replay of the whole run equals the
//! one kept step by step, so a resumed run and an uninterrupted one refuse
//! the same duplicated hunk.

use git2::{Oid, Repository};

use crate::error::Result;
use crate::git::{short, MODE_GITLINK};
use crate::history::ledger::{AppliedStep, Ledger};
use crate::tree::hunks::{self, Duplicate, FileDiff, LiveHunks};

/// The hunks of the change from `old` to `new` (trees), per changed path.
pub fn tree_hunks(
    repo: &Repository,
    old: Option<&git2::Tree<'_>>,
    new: Option<&git2::Tree<'_>>,
) -> Result<Vec<FileDiff>> {
    tree_hunks_measured(repo, old, new, &Default::default())
}

/// [`tree_hunks`], taking a path's diff from `measured` where it was
/// measured for exactly that change (a `files` step's writes), and reading
/// the blobs for the rest.
pub fn tree_hunks_measured(
    repo: &Repository,
    old: Option<&git2::Tree<'_>>,
    new: Option<&git2::Tree<'_>>,
    measured: &std::collections::BTreeMap<String, crate::tree::build::Measured>,
) -> Result<Vec<FileDiff>> {
    // The blobs are read in place (libgit2's buffer), never copied.
    let blob = |e: &Option<crate::git::BlobEntry>| -> Result<Option<git2::Blob<'_>>> {
        match e {
            // Submodules have no content to diff.
            Some(e) if e.mode != MODE_GITLINK => Ok(Some(repo.find_blob(e.oid)?)),
            _ => Ok(None),
        }
    };
    fn content<'b>(b: &'b Option<git2::Blob<'_>>) -> &'b [u8] {
        b.as_ref().map_or(&[][..], |b| b.content())
    }
    let mut out = Vec::new();
    for c in crate::git::tree_changes(repo, old, new)? {
        if let Some(m) = measured
            .get(&c.path)
            .filter(|m| m.old == c.old && Some(m.new) == c.new)
        {
            out.push(m.diff.clone());
            continue;
        }
        let (a, b) = (blob(&c.old)?, blob(&c.new)?);
        out.push(hunks::identities(&c.path, content(&a), content(&b)));
    }
    Ok(out)
}

/// A duplicated hunk the history holds: the later step, the pair, and
/// whether that step says it repeats the change on purpose
/// (`Step-Allow-Duplicate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryDuplicate {
    pub step: String,
    pub duplicate: Duplicate,
    pub allowed: bool,
}

/// Replay the live changes of every applied step; returns them and every
/// duplicated hunk the history holds.
pub fn live_hunks(
    repo: &Repository,
    ledger: &Ledger,
) -> Result<(LiveHunks, Vec<HistoryDuplicate>)> {
    // Adopted commits take their place among the steps, under a name that
    // says what they are.
    let merged;
    let sources: &[AppliedStep] = if ledger.adopted.is_empty() {
        &ledger.entries
    } else {
        let mut all = Vec::with_capacity(ledger.entries.len() + ledger.adopted.len());
        let mut adopted = ledger.adopted.iter().peekable();
        for (i, e) in ledger.entries.iter().enumerate() {
            while let Some((_, oid)) = adopted.next_if(|(at, _)| *at <= i) {
                all.push(adopted_entry(*oid));
            }
            all.push(e.clone());
        }
        all.extend(adopted.map(|(_, oid)| adopted_entry(*oid)));
        merged = all;
        &merged
    };
    replay(repo, sources, LiveHunks::default())
}

/// The live hunks after `entries` (steps of the run, in order, that follow
/// the state `live` describes; no adopted commits among them).
pub fn live_hunks_after(
    repo: &Repository,
    entries: &[AppliedStep],
    live: LiveHunks,
) -> Result<LiveHunks> {
    Ok(replay(repo, entries, live)?.0)
}

/// Replay the changes of `sources` onto `live`, in order.
fn replay(
    repo: &Repository,
    sources: &[AppliedStep],
    mut live: LiveHunks,
) -> Result<(LiveHunks, Vec<HistoryDuplicate>)> {
    // Replaying the diffs is independent per step: split each window of the
    // history over the cores (each worker with its own handle on the
    // repository), then admit in order. Windows bound the memory: the diffs
    // of a window are dropped once admitted.
    const WINDOW: usize = 8192;
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8);
    let path = repo.path().to_path_buf();
    let mut dups = Vec::new();
    let progress = crate::progress::phase("replaying the run's hunks", Some(sources.len() as u64));
    let mut done = 0u64;
    for window in sources.chunks(WINDOW) {
        let chunk = window.len().div_ceil(workers).max(256);
        let parts: Vec<&[AppliedStep]> = window.chunks(chunk).collect();
        let hunks: Vec<Vec<StepHunks>> = if parts.len() <= 1 {
            vec![entry_hunks(repo, window)?]
        } else {
            std::thread::scope(|scope| {
                let handles: Vec<_> = parts
                    .iter()
                    .map(|part| {
                        let path = &path;
                        scope.spawn(move || -> Result<Vec<StepHunks>> {
                            entry_hunks(&Repository::open(path)?, part)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("hunk worker panicked"))
                    .collect::<Result<Vec<_>>>()
            })?
        };
        done += window.len() as u64;
        progress.set(done);
        for (e, h) in window.iter().zip(hunks.into_iter().flatten()) {
            let found = live
                .admit(&e.id, &h.files, true)
                .expect("admit with allow never fails");
            live.forget(&h.undoes);
            dups.extend(found.into_iter().map(|d| HistoryDuplicate {
                step: e.id.clone(),
                duplicate: d,
                allowed: h.allowed,
            }));
        }
    }
    Ok((live, dups))
}

/// An adopted commit as a source of hunks: named by its commit.
fn adopted_entry(oid: Oid) -> AppliedStep {
    AppliedStep {
        index: usize::MAX,
        id: format!("{} (adopted)", short(oid)),
        decision: String::new(),
        commit: oid,
    }
}

/// What one step changed, and whether its receipt allows a duplicate.
pub struct StepHunks {
    pub files: Vec<FileDiff>,
    pub allowed: bool,
    /// An `undo` step: the steps it undid.
    pub undoes: Vec<String>,
}

/// The hunks each of `entries` introduced, in order. Consecutive steps
/// share a tree (the parent's is the previous step's), which is read once:
/// libgit2 does not cache trees over 4 KiB.
fn entry_hunks(repo: &Repository, entries: &[AppliedStep]) -> Result<Vec<StepHunks>> {
    let mut out = Vec::with_capacity(entries.len());
    let mut prev: Option<(Oid, git2::Tree<'_>)> = None;
    for e in entries {
        let commit = repo.find_commit(e.commit)?;
        let tree = commit.tree()?;
        let parent = match commit.parent_ids().next() {
            Some(p) => match prev.take() {
                Some((c, t)) if c == p => Some(t),
                _ => Some(repo.find_commit(p)?.tree()?),
            },
            None => None,
        };
        let undoes = commit
            .message()
            .ok()
            .and_then(|m| crate::history::receipt::parse(m).ok())
            .map(|r| r.undoes)
            .unwrap_or_default();
        out.push(StepHunks {
            files: tree_hunks(repo, parent.as_ref(), Some(&tree))?,
            // An undo is the inverse of what it undoes, never a repetition.
            allowed: !undoes.is_empty()
                || commit
                    .message()
                    .ok()
                    .is_some_and(crate::history::receipt::allows_duplicate),
            undoes,
        });
        prev = Some((e.commit, tree));
    }
    Ok(out)
}
