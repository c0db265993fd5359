//! The edges of a scan: merges whose other side holds receipts, and the
//! boundary of a shallow clone.
//!
//! Owns telling a merge that hides a step's receipt (its step would be
//! applied again) from one a shallow boundary cuts (it cannot be checked
//! here), and finding a receipt below a boundary. Invariant: neither is
//! ever silently taken as "no receipt".

use git2::{Oid, Repository};

use super::{read_scanned, Ledger};
use crate::error::{Error, Result};

/// How a problem of a merge hiding a receipt begins.
pub(super) const MERGE_HIDES: &str = "a merge whose other parent holds";

/// A receipt of the run that a merge inside the run brings in through one
/// of its other parents, and that the run's first-parent history (the
/// ledger) does not hold: `git pull` over a diverged run makes one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hidden {
    pub merge: Oid,
    pub commit: Oid,
    pub id: String,
}

/// The receipts of `run` reachable from the merges among `commits` only
/// through their other parents, that `ledger` does not hold; oldest first
/// per merge. The walk below each merge is bounded (a merge of a whole
/// project's history reads at most 100,000 commits per merge).
pub fn hidden_receipts(
    repo: &Repository,
    ledger: &Ledger,
    run: &str,
    commits: impl IntoIterator<Item = Oid>,
) -> Result<Vec<Hidden>> {
    Ok(hidden_or_cut(repo, ledger, run, commits)?.0)
}

/// As [`hidden_receipts`], and the merges whose other side this shallow
/// clone's boundary cuts (what lies below it cannot be checked here).
pub(super) fn hidden_or_cut(
    repo: &Repository,
    ledger: &Ledger,
    run: &str,
    commits: impl IntoIterator<Item = Oid>,
) -> Result<(Vec<Hidden>, Vec<Oid>)> {
    let held: std::collections::HashSet<Oid> = ledger.entries.iter().map(|e| e.commit).collect();
    let boundary = shallow_boundary(repo)?;
    let mut cut = Vec::new();
    let mut out = Vec::new();
    for merge in commits {
        let c = repo.find_commit(merge)?;
        if c.parent_count() < 2 {
            continue;
        }
        let mut walk = repo.revwalk()?;
        for p in c.parent_ids().skip(1) {
            walk.push(p)?;
        }
        walk.hide(c.parent_id(0)?)?;
        let mut found = Vec::new();
        let mut was_cut = false;
        for oid in walk.take(100_000) {
            let oid = oid?;
            was_cut |= boundary.contains(&oid);
            if held.contains(&oid) {
                continue;
            }
            let Ok(commit) = repo.find_commit(oid) else {
                continue;
            };
            if let Some(Ok(r)) = commit.message().ok().map(crate::history::receipt::parse) {
                if r.run == run {
                    found.push(Hidden {
                        merge,
                        commit: oid,
                        id: r.id,
                    });
                }
            }
        }
        found.reverse();
        out.extend(found);
        if was_cut {
            cut.push(merge);
        }
    }
    Ok((out, cut))
}

/// How far below a run's first step the scan looks for another receipt of
/// the same run before it trusts the stop: about 3 ms of reading, and a
/// forgery would need that many hand commits, all in plain `git log`.
pub(super) const LOOK_BELOW: usize = 1000;

/// Whether a receipt of `run` is among the `LOOK_BELOW` first-parent
/// commits from `from` down (stopping at a shallow boundary or the root).
pub(super) fn receipt_below(
    odb: &git2::Odb<'_>,
    shallow: &std::collections::HashSet<Oid>,
    from: Oid,
    run: &str,
) -> Result<bool> {
    let mut next = Some(from);
    for _ in 0..LOOK_BELOW {
        let Some(oid) = next else { break };
        let raw = read_scanned(odb, oid)?;
        if matches!(&raw.receipt, Ok(rc) if rc.run == run) {
            return Ok(true);
        }
        next = if shallow.contains(&oid) {
            None
        } else {
            raw.first_parent
        };
    }
    Ok(false)
}

/// The commits whose parents a shallow clone does not hold (`shallow` in
/// the common git directory, one id per line).
pub(super) fn shallow_boundary(repo: &Repository) -> Result<std::collections::HashSet<Oid>> {
    let path = repo.commondir().join("shallow");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
        Err(e) => return Err(Error::io(format!("cannot read {}", path.display()), e)),
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            Oid::from_str(l.trim()).map_err(|_| {
                Error::corrupt(format!("{} has a malformed line: {l:?}", path.display()))
            })
        })
        .collect()
}
