//! Whether a scanned run may be built on, and the refusal that says why
//! not.
//!
//! Owns the choice among a ledger's problems of the one to report and the
//! hint that works for it (adopt, a side branch, a new run). Invariant:
//! a ledger with any problem is refused; a hint never proposes rewriting
//! the durable branch.

use super::{Ledger, ProblemKind};
use crate::error::{Error, Refusal, RefusalKind, Result};
use crate::git::short;

impl Ledger {
    /// Refuse if the history breaks an invariant; `hint` says what to run.
    pub fn ensure_sound(&self, branch: &str) -> Result<()> {
        let Some(first) = self.problems.first() else {
            return Ok(());
        };
        // A merge that hides receipts says the most (it is why the merge
        // itself has none, and adopting it is refused).
        if let Some(m) = self
            .problems
            .iter()
            .find(|p| p.kind == ProblemKind::MergeHidesReceipt)
        {
            let parent = short(m.commit);
            return Err(Error::from(Refusal {
                kind: RefusalKind::Diverged,
                step: None,
                saw: format!("commit {parent} on {branch}: {}", m.what),
                would: "apply steps again that the merge's other side already holds".into(),
                hint: format!(
                    "a run is one line of steps: keep one side (`git reset --keep {parent}^1` keeps the run's own line; your merge stays reachable in the reflog), then let `git steps apply` bring the other side's steps in as steps; `git steps verify` lists every problem"
                ).into(),
            }));
        }
        let p = first;
        let kind = p.kind.refusal();
        Err(Error::from(Refusal {
            kind,
            step: None,
            saw: format!(
                "commit {} on {branch}: {}{}",
                short(p.commit),
                p.what,
                if self.problems.len() > 1 {
                    format!(" (and {} more problem(s))", self.problems.len() - 1)
                } else {
                    String::new()
                }
            ),
            would: "apply further steps on top of a history whose receipts no longer tell which steps ran".into(),
            hint: match kind {
                // Only hints that work: a step cannot revert a commit the
                // run refuses to build on, and git-steps never force-pushes.
                RefusalKind::ForeignCommit if p.kind == ProblemKind::NoReceipt => format!(
                    "inspect it with `git log --format='%h %s%n%(trailers)' {branch}`. If {c} belongs in the run (a fix made with plain git), `git steps adopt --yes` takes it into the run with a receipted commit on top of it, rewriting nothing; then rerun. If it does not and is only on this box, keep it on a side branch and take it off the run's branch: `git branch keep-{c} {c} && git reset --keep {c}^` (steps after it, if any, are applied again by the rerun). If it does not and the durable branch has it, start a new run from here, `git steps init --branch <new branch> --run <new id>`, and apply the remaining steps there. `git steps verify` lists every problem",
                    c = short(p.commit)
                ).into(),
                RefusalKind::ForeignCommit => format!(
                    "inspect it with `git log --format='%h %s%n%(trailers)' {branch}`. If {c} is only on this box, keep it on a side branch and take it off the run's branch: `git branch keep-{c} {c} && git reset --keep {c}^` (steps after it, if any, are applied again by the rerun). If the durable branch has it, this run cannot go on over it without rewriting the branch, which git-steps never does: start a new run from here, `git steps init --branch <new branch> --run <new id>`, and apply the remaining steps there. `git steps verify` lists every problem",
                    c = short(p.commit)
                ).into(),
                _ => format!(
                    "inspect it with `git log --format='%h %s%n%(trailers)' {branch}`; `git steps verify` lists every problem; a run whose history is broken cannot go on: start a new one from a sound commit, `git steps init --branch <new branch> --run <new id>`"
                ).into(),
            },
        }))
    }
}
