//! `verify --merged <commit>`: a commit on the target branch held against
//! the run it merged — a squash (its `Steps-*` trailers), a rebase merge
//! (the steps' own receipts, copied), or a true merge (the run's head as a
//! parent).
//!
//! Invariant: read-only but for fetching `refs/steps/runs/<run>`; the
//! verdict is ok only if the run is kept there with a sound history that
//! holds the merged head, the trailers (squash) or the copied receipts
//! (rebase) agree with that history, and every path the run changed holds
//! the run's content in the merged commit while the merge changed no other
//! path. Every difference is named, path by path.

use std::collections::BTreeSet;

use git2::{Commit, Oid, Repository, Tree};
use serde::Serialize;

use super::{refname, KEY_ARTIFACT, KEY_COUNT, KEY_HEAD, KEY_HISTORY, KEY_RUN};
use crate::error::{Error, Result};
use crate::git::short;
use crate::history::ledger;
use crate::settings::Remote;

mod claim;
use claim::{claim, copied, step_ids_in};

/// What `verify --merged` found.
#[derive(Debug, Serialize)]
pub struct MergedCheck {
    pub ok: bool,
    pub commit: String,
    /// `squash`, `rebase` or `merge`.
    pub kind: &'static str,
    pub run: String,
    /// The run's head the commit merged.
    pub head: Option<String>,
    /// What refs/steps/runs/<run> holds.
    pub kept: Option<String>,
    pub steps: usize,
    pub history: Option<String>,
    pub artifact: String,
    pub problems: Vec<String>,
    pub notes: Vec<String>,
}

/// A shallow clone (a CI checkout) cuts the commits a check needs: make it
/// whole from the first of `remotes` that can (`git fetch --unshallow`),
/// as `apply` deepens a clone that cuts its run. Returns the remote that
/// did it (None: the clone was not shallow). A clone no remote makes whole
/// (the commit is on none of their branches) is left for [`check`] to
/// refuse. Opens its own handles: the caller opens a new one after this.
pub fn unshallow(path: &std::path::Path, remotes: &[Remote]) -> Result<Option<String>> {
    if !crate::git::open(path)?.is_shallow() {
        return Ok(None);
    }
    for r in remotes {
        let repo = crate::git::open(path)?;
        if r.unshallow(&repo).is_ok() && !crate::git::open(path)?.is_shallow() {
            return Ok(Some(r.spec.clone()));
        }
    }
    Ok(None)
}

/// Check `commit` against its run (named by the commit, or `run`), whose
/// history is fetched from `remote` (when given) into refs/steps/runs/.
pub fn check(
    repo: &Repository,
    remotes: &[Remote],
    commit: Oid,
    run: Option<&str>,
) -> Result<MergedCheck> {
    if repo.is_shallow() {
        return Err(Error::other(
            "this clone is shallow, and no remote made it whole: checking a merge needs the commits below it (its parents, the steps a rebase copied), which a shallow clone may cut",
        )
        .with_hint(crate::error::Hint::rerun_after("fetch the branch the commit is on with `git fetch --unshallow <remote> <branch>` (in CI: a checkout with fetch-depth 0)")));
    }
    let c = repo.find_commit(commit)?;
    let claim = claim(&c, run)?;
    let name = refname(&claim.run);
    // The kept run, from the first remote that has it.
    let mut kept = None;
    let mut remote = None;
    for r in remotes {
        if let Some(k) = r.fetch(repo, &name, &name)? {
            kept = Some(k);
            remote = Some(r);
            break;
        }
    }
    if remotes.is_empty() {
        kept = repo.refname_to_id(&name).ok();
    }
    let artifact = crate::tree::fingerprint::artifact(repo, Some(&c.tree()?))?;
    let mut out = MergedCheck {
        ok: false,
        commit: commit.to_string(),
        kind: claim.kind,
        run: claim.run.clone(),
        head: None,
        kept: kept.map(|k| k.to_string()),
        steps: 0,
        history: None,
        artifact,
        problems: Vec::new(),
        notes: Vec::new(),
    };
    let Some(kept) = kept else {
        out.problems.push(format!(
            "the run's history is not kept: {name} does not exist{} (`git steps archive` on a box of the run keeps it; `git steps merge-message` does too)",
            match remotes {
                [] => String::new(),
                [one] => format!(" on {}", one.spec),
                more => format!(
                    " on any of {}",
                    more.iter().map(|r| r.spec.as_str()).collect::<Vec<_>>().join(", ")
                ),
            }
        ));
        return Ok(out);
    };
    if let (Some(r), true) = (remote, remotes.len() > 1) {
        out.notes.push(format!("the run is kept on {}", r.spec));
    }
    let whole = ledger::scan(repo, Some(kept), &claim.run)?;
    for p in &whole.problems {
        out.problems.push(format!(
            "the kept history ({name}) is not sound: commit {}: {}",
            short(p.commit),
            p.what
        ));
    }
    // The run's head the commit merged, and the steps up to it.
    if claim.copies > 1 {
        out.notes.push(format!(
            "its message copies the receipts of {} steps (a forge's default squash message): it is held against the run up to the last of them",
            claim.copies
        ));
    }
    let part = match claim.copies {
        0 => None,
        _ => match rebased(&c, &claim.run, claim.copies, &whole, &mut out.problems) {
            Some(p) => Some(p),
            None => return Ok(finish(out)),
        },
    };
    let (head, upto) = match &part {
        Some(p) => (p.head, p.upto),
        None => {
            let h = match (claim.head, &claim.head_text, &claim.trailers) {
                (Some(h), _, _) => h,
                (None, Some(text), _) => {
                    out.problems.push(format!(
                        "its {KEY_HEAD} trailer {text:?} is not a full commit id"
                    ));
                    return Ok(finish(out));
                }
                // Named with --run, no trailers: the kept head.
                _ => {
                    out.notes.push(format!(
                        "the commit has no {KEY_RUN} trailers: it is held against the run's kept head (`git steps merge-message` writes them)"
                    ));
                    kept
                }
            };
            match whole.entries.iter().position(|e| e.commit == h) {
                Some(i) => (h, i + 1),
                None => {
                    out.problems.push(format!(
                        "the run's head {} it merged is not a step of the run kept at {name} ({})",
                        short(h),
                        short(kept)
                    ));
                    return Ok(finish(out));
                }
            }
        }
    };
    let steps = &whole.entries[..upto];
    let history = crate::tree::fingerprint::history(
        steps.iter().map(|e| (e.id.as_str(), e.decision.as_str())),
    );
    let head_tree = repo.find_commit(head)?.tree()?;
    let head_artifact = crate::tree::fingerprint::artifact(repo, Some(&head_tree))?;
    out.head = Some(head.to_string());
    out.steps = upto;
    out.history = Some(history.clone());
    if head != kept {
        out.notes.push(format!(
            "the run went on after this merge: {name} is at {} ({} step(s)); the merge holds the first {upto}",
            short(kept),
            whole.entries.len()
        ));
    }
    if let Some((count, hist, art)) = &claim.trailers {
        for (key, said, is) in [
            (KEY_COUNT, count.clone(), upto.to_string()),
            (KEY_HISTORY, hist.clone(), history.clone()),
            (KEY_ARTIFACT, art.clone(), head_artifact.clone()),
        ] {
            if *said != is {
                out.problems.push(format!(
                    "its {key} trailer says {said:?}, but the run's history at {} gives {is}",
                    short(head)
                ));
            }
        }
    }
    // The content: the run's changes (from the commit it started from to
    // the head) against the merge's (from its first parent, or the commit
    // the rebased steps went onto).
    // A part that copies receipts brings the steps from its first on: its
    // changes start at the step before it (an earlier part holds the rest).
    let from = match &part {
        Some(p) if p.first > 0 => Some(whole.entries[p.first - 1].commit),
        _ => whole.base.filter(|_| upto > 0),
    };
    let base = from.map(|b| repo.find_commit(b)?.tree()).transpose()?;
    let onto = match &part {
        Some(p) => p.onto,
        None => c.parent(0).ok().map(|p| p.id()),
    };
    let onto_tree = onto.map(|o| repo.find_commit(o)?.tree()).transpose()?;
    let merged_tree = c.tree()?;
    compare(
        repo,
        base.as_ref(),
        &head_tree,
        onto_tree.as_ref(),
        &merged_tree,
        &mut out,
    )?;
    if merged_tree.id() == head_tree.id() {
        out.notes.push(format!(
            "its tree is exactly the run's artifact ({head_artifact})"
        ));
    }
    Ok(finish(out))
}

fn finish(mut out: MergedCheck) -> MergedCheck {
    out.ok = out.problems.is_empty();
    out
}

/// A part of the run that copies receipts (a rebase merge, or a forge's
/// squash that copies several): the run's head it holds, how many steps
/// that is, the first step it brings (0-based), and the commit it went
/// onto.
struct Part {
    head: Oid,
    upto: usize,
    first: usize,
    onto: Option<Oid>,
}

/// The [`Part`] ending at `tip`: the copies below it, as long as their
/// `Step-Index` counts down one by one and none is a squash of several
/// (an earlier part of the same run), each checked against the kept run.
fn rebased(
    tip: &Commit<'_>,
    run: &str,
    tip_copies: usize,
    whole: &ledger::Ledger,
    problems: &mut Vec<String>,
) -> Option<Part> {
    let mut copies = Vec::new();
    let mut lowest = tip.clone();
    let first_copy = copied(tip, Some(run), true)?;
    let mut want = first_copy.index.map(|i| i.saturating_sub(1));
    copies.push((
        first_copy.id,
        first_copy.decision,
        first_copy.index,
        tip.id(),
    ));
    // A squash of several steps stands for all of them: what lies below
    // it was merged before.
    let mut below = if tip_copies > 1 {
        None
    } else {
        tip.parent(0).ok()
    };
    while let Some(c) = below {
        let Some(r) = copied(&c, Some(run), false) else {
            break;
        };
        let several = step_ids_in(c.message().unwrap_or_default()) > 1;
        if several || matches!((want, r.index), (Some(w), Some(i)) if i != w) {
            break;
        }
        want = r.index.map(|i| i.saturating_sub(1));
        copies.push((r.id, r.decision, r.index, c.id()));
        lowest = c.clone();
        below = c.parent(0).ok();
    }
    copies.reverse();
    let copied = copies;
    let first = copied.first().and_then(|c| c.2).map_or(0, |n| {
        usize::try_from(n).unwrap_or(usize::MAX).saturating_sub(1)
    });
    for (i, (id, decision, _, commit)) in copied.iter().enumerate() {
        let at = first.saturating_add(i);
        let Some(e) = whole.entries.get(at) else {
            problems.push(format!(
                "commit {} copies step {id} at position {}, but the kept run has only {} step(s)",
                short(*commit),
                at.saturating_add(1),
                whole.entries.len()
            ));
            return None;
        };
        if e.id != *id || e.decision != *decision {
            problems.push(format!(
                "commit {} copies step {id} ({decision}) at position {}, where the run has step {} ({})",
                short(*commit),
                at + 1,
                e.id,
                e.decision
            ));
        }
    }
    if !problems.is_empty() {
        return None;
    }
    let last = first + copied.len() - 1;
    Some(Part {
        head: whole.entries[last].commit,
        upto: last + 1,
        // A squash of several: the first of the steps it copies.
        first: if tip_copies > 1 {
            (last + 1).saturating_sub(tip_copies)
        } else {
            first
        },
        onto: lowest.parent(0).ok().map(|p| p.id()),
    })
}

/// The run's changes (base → head) merged into the target branch as git
/// merges them (three ways, from the run's base, onto the commit the merge
/// went on): every path the run or the merge changed must hold in the
/// merged tree what that merge gives. A path both changed in conflicting
/// ways must hold the run's content, or is named as resolved by hand.
fn compare(
    repo: &Repository,
    base: Option<&Tree<'_>>,
    head: &Tree<'_>,
    onto: Option<&Tree<'_>>,
    merged: &Tree<'_>,
    out: &mut MergedCheck,
) -> Result<()> {
    let empty = repo.find_tree(repo.treebuilder(None)?.write()?)?;
    let (b, o) = (base.unwrap_or(&empty), onto.unwrap_or(&empty));
    let index = repo.merge_trees(b, o, head, None)?;
    let conflicts: BTreeSet<String> = index
        .conflicts()?
        .filter_map(|c| c.ok())
        .filter_map(|c| c.our.or(c.their).or(c.ancestor))
        .map(|e| String::from_utf8_lossy(&e.path).into_owned())
        .collect();
    let run_changes = crate::git::tree_changes(repo, base, Some(head))?;
    let run_paths: BTreeSet<String> = run_changes.into_iter().map(|c| c.path).collect();
    let mut paths = run_paths.clone();
    paths.extend(
        crate::git::tree_changes(repo, onto, Some(merged))?
            .into_iter()
            .map(|c| c.path),
    );
    let entry = |t: &Tree<'_>, p: &str| {
        t.get_path(std::path::Path::new(p))
            .ok()
            .map(|e| (e.id(), u32::try_from(e.filemode()).unwrap_or(0)))
    };
    for p in &paths {
        let got = entry(merged, p);
        let at_head = entry(head, p);
        if conflicts.contains(p) {
            if got == at_head {
                out.notes.push(format!(
                    "{p}: the run and the target branch both changed it; the merge holds the run's content"
                ));
            } else {
                out.problems.push(format!(
                    "{p}: the run and the target branch both changed it, and the merge holds neither's content (resolved by hand{})",
                    match (at_head, got) {
                        (Some((w, _)), Some((g, _))) => lines(repo, w, g)
                            .map(|l| format!(": {l}"))
                            .unwrap_or_default(),
                        _ => String::new(),
                    }
                ));
            }
            continue;
        }
        let want = index
            .get_path(std::path::Path::new(p), 0)
            .map(|e| (e.id, e.mode));
        if want == got {
            continue;
        }
        let against = if want == at_head {
            "the run's head"
        } else {
            "the run's changes merged onto the target branch"
        };
        out.problems.push(if !run_paths.contains(p) {
            format!("{p}: changed by the merge, and by no step of the run")
        } else {
            match (want, got) {
                (Some(_), None) => format!("{p}: {against} has it; the merge does not"),
                (None, Some(_)) => format!("{p}: the run deleted it; the merge has it"),
                (Some((w, wm)), Some((g, gm))) if w == g => format!(
                    "{p}: the same content with mode {gm:o} in the merge, {wm:o} in {against}"
                ),
                (Some((w, _)), Some((g, _))) => format!(
                    "{p}: the merge holds other content than {against} ({})",
                    lines(repo, w, g)
                        .map(|l| format!("{l} against {against}"))
                        .unwrap_or_else(|| format!("blob {} vs {}", short(g), short(w)))
                ),
                (None, None) => unreachable!("equal"),
            }
        });
    }
    Ok(())
}

/// `+a -r lines` between two text blobs.
fn lines(repo: &Repository, run: Oid, merged: Oid) -> Option<String> {
    let (a, b) = (repo.find_blob(run).ok()?, repo.find_blob(merged).ok()?);
    if a.is_binary() || b.is_binary() {
        return None;
    }
    let diff = similar::TextDiff::from_lines(a.content(), b.content());
    let (mut add, mut del) = (0, 0);
    for op in diff.iter_all_changes() {
        match op.tag() {
            similar::ChangeTag::Insert => add += 1,
            similar::ChangeTag::Delete => del += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    Some(format!("+{add} -{del} lines"))
}
