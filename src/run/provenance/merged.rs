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
use crate::history::{ledger, receipt};
use crate::settings::Remote;

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

/// How the commit names its run.
struct Claim {
    kind: &'static str,
    run: String,
    /// The run head it merged, when the commit says (squash) or holds it
    /// (merge).
    head: Option<Oid>,
    /// Squash: (count, history, artifact) as its trailers say.
    trailers: Option<(String, String, String)>,
}

fn trailer(trailers: &[(String, String)], key: &str) -> Option<String> {
    trailers
        .iter()
        .rev()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| v.trim().to_string())
}

fn claim(c: &Commit<'_>, run: Option<&str>) -> Result<Claim> {
    let msg = c.message().unwrap_or_default();
    let t = crate::history::trailers::trailers(msg);
    if let Some(r) = trailer(&t, KEY_RUN) {
        let head = trailer(&t, KEY_HEAD).and_then(|h| Oid::from_str(&h).ok());
        return Ok(Claim {
            kind: "squash",
            run: run.map(str::to_string).unwrap_or(r),
            head,
            trailers: Some((
                trailer(&t, KEY_COUNT).unwrap_or_default(),
                trailer(&t, KEY_HISTORY).unwrap_or_default(),
                trailer(&t, KEY_ARTIFACT).unwrap_or_default(),
            )),
        });
    }
    if c.parent_count() > 1 {
        for p in c.parents().skip(1) {
            if let Ok(r) = receipt::parse(p.message().unwrap_or_default()) {
                if run.is_none_or(|want| want == r.run) {
                    return Ok(Claim {
                        kind: "merge",
                        run: r.run,
                        head: Some(p.id()),
                        trailers: None,
                    });
                }
            }
        }
    }
    if let Ok(r) = receipt::parse(msg) {
        return Ok(Claim {
            kind: "rebase",
            run: run.map(str::to_string).unwrap_or(r.run),
            head: None,
            trailers: None,
        });
    }
    Err(Error::input(format!(
        "commit {} names no run: no {KEY_RUN} trailer (a squash with `git steps merge-message`), no step receipt (a rebase merge), and no parent that is a run's step (a merge)",
        short(c.id())
    ))
    .with_hint("give the run: `git steps verify --merged <commit> --run <id>`"))
}

/// Check `commit` against its run (named by the commit, or `run`), whose
/// history is fetched from `remote` (when given) into refs/steps/runs/.
pub fn check(
    repo: &Repository,
    remote: Option<&Remote>,
    commit: Oid,
    run: Option<&str>,
) -> Result<MergedCheck> {
    let c = repo.find_commit(commit)?;
    let claim = claim(&c, run)?;
    let name = refname(&claim.run);
    let kept = match remote {
        Some(r) => r.fetch(repo, &name, &name)?,
        None => repo.refname_to_id(&name).ok(),
    };
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
            remote.map(|r| format!(" on {}", r.spec)).unwrap_or_default()
        ));
        return Ok(out);
    };
    let whole = ledger::scan(repo, Some(kept), &claim.run)?;
    for p in &whole.problems {
        out.problems.push(format!(
            "the kept history ({name}) is not sound: commit {}: {}",
            short(p.commit),
            p.what
        ));
    }
    // The run's head the commit merged, and the steps up to it.
    let (head, upto) = match claim.kind {
        "rebase" => match rebased(&c, &claim.run, &whole, &mut out.problems) {
            Some(x) => x,
            None => return Ok(finish(out)),
        },
        _ => {
            let Some(h) = claim.head else {
                out.problems
                    .push(format!("the commit has no valid {KEY_HEAD} trailer"));
                return Ok(finish(out));
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
    let base = match whole.base.filter(|_| upto > 0) {
        Some(b) => Some(repo.find_commit(b)?.tree()?),
        None => None,
    };
    let onto = match claim.kind {
        "rebase" => rebase_onto(&c, &claim.run),
        _ => c.parent(0).ok().map(|p| p.id()),
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

/// A rebase merge: the commits from `tip` down that carry receipts of
/// `run`, oldest first, must be the run's steps from its first, in order,
/// with the same decisions. The run's head they copy, and how many.
fn rebased(
    tip: &Commit<'_>,
    run: &str,
    whole: &ledger::Ledger,
    problems: &mut Vec<String>,
) -> Option<(Oid, usize)> {
    let mut copied = Vec::new();
    let mut at = Some(tip.clone());
    while let Some(c) = at {
        match receipt::parse(c.message().unwrap_or_default()) {
            Ok(r) if r.run == run => copied.push((r.id, r.decision, c.id())),
            _ => break,
        }
        at = c.parent(0).ok();
    }
    copied.reverse();
    if copied.len() > whole.entries.len() {
        problems.push(format!(
            "the branch holds {} step(s) of run {run}, the kept run only {}",
            copied.len(),
            whole.entries.len()
        ));
        return None;
    }
    for (i, (id, decision, commit)) in copied.iter().enumerate() {
        let e = &whole.entries[i];
        if e.id != *id || e.decision != *decision {
            problems.push(format!(
                "commit {} copies step {id} ({decision}) at position {}, where the run has step {} ({})",
                short(*commit),
                i + 1,
                e.id,
                e.decision
            ));
        }
    }
    if !problems.is_empty() || copied.is_empty() {
        return None;
    }
    Some((whole.entries[copied.len() - 1].commit, copied.len()))
}

/// The commit the rebased steps of `run` below `tip` went onto.
fn rebase_onto(tip: &Commit<'_>, run: &str) -> Option<Oid> {
    let mut at = tip.clone();
    loop {
        let ours = receipt::parse(at.message().unwrap_or_default()).is_ok_and(|r| r.run == run);
        if !ours {
            return Some(at.id());
        }
        at = at.parent(0).ok()?;
    }
}

/// Every path the run changed (base → head) must hold the head's content
/// in the merged tree; every path the merge changed (onto → merged) must be
/// one the run changed.
fn compare(
    repo: &Repository,
    base: Option<&Tree<'_>>,
    head: &Tree<'_>,
    onto: Option<&Tree<'_>>,
    merged: &Tree<'_>,
    out: &mut MergedCheck,
) -> Result<()> {
    let run_changes = crate::git::tree_changes(repo, base, Some(head))?;
    let run_paths: BTreeSet<&str> = run_changes.iter().map(|c| c.path.as_str()).collect();
    let entry = |t: &Tree<'_>, p: &str| {
        t.get_path(std::path::Path::new(p))
            .ok()
            .map(|e| (e.id(), e.filemode()))
    };
    for ch in &run_changes {
        let (want, got) = (entry(head, &ch.path), entry(merged, &ch.path));
        if want == got {
            continue;
        }
        out.problems.push(match (want, got) {
            (Some(_), None) => format!("{}: the run's head has it; the merge does not", ch.path),
            (None, Some(_)) => format!("{}: the run deleted it; the merge has it", ch.path),
            (Some((w, wm)), Some((g, gm))) if w == g => format!(
                "{}: the same content with mode {gm:o} in the merge, {wm:o} in the run's head",
                ch.path
            ),
            (Some((w, _)), Some((g, _))) => {
                format!(
                    "{}: the merge holds other content than the run's head ({})",
                    ch.path,
                    lines(repo, w, g).unwrap_or_else(|| format!(
                        "blob {} vs {}",
                        short(g),
                        short(w)
                    ))
                )
            }
            (None, None) => unreachable!("equal"),
        });
    }
    let merge_changes = crate::git::tree_changes(repo, onto, Some(merged))?;
    for ch in merge_changes {
        if !run_paths.contains(ch.path.as_str()) {
            out.problems.push(format!(
                "{}: changed by the merge, and by no step of the run",
                ch.path
            ));
        }
    }
    Ok(())
}

/// `+a -r lines against the run's head` for two text blobs.
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
    Some(format!("+{add} -{del} lines against the run's head"))
}
