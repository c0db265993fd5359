//! The plan against the history: whether applying a plan now gives what an
//! uninterrupted run of it gives.
//!
//! Owns plan validation (every step parses, ids unique, before anything is
//! written) and the agreement rule: a plan is a window on the run. Invariant:
//! a step is applied only when every receipt the plan holds matches its
//! recorded decision and sits where the plan puts it.

use crate::error::{Error, Refusal, RefusalKind, Result};
use crate::git::short;
use crate::history::ledger::{self, Ledger};
use crate::plan::reader::Plan;
use crate::plan::step::Step;

/// Parse every step of the plan (syntax, ids, paths, unique ids); returns
/// how many there are.
pub fn validate(plan: &Plan) -> Result<usize> {
    let mut n = 0;
    for step in plan.steps()? {
        step?;
        n += 1;
    }
    if n == 0 {
        return Err(Error::input(format!(
            "the plan {} holds no steps",
            plan.name
        )));
    }
    Ok(n)
}

/// Check the whole plan against the log before anything is written: every
/// step parses, recorded decisions match, and plan and history agree both
/// ways. Returns the number of steps without a receipt.
pub fn preflight(repo: &git2::Repository, plan: &Plan, ledger: &Ledger) -> Result<usize> {
    let (pending, problems) = plan_agreement(repo, plan, ledger, true)?;
    // The first found: a step's own digest mismatch comes before where it sits.
    match problems.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(pending),
    }
}

/// Where `plan` and the run's history disagree, as refusals (only the first
/// with `first_only`), and how many plan steps have no receipt.
///
/// A plan is a window on the run: the steps it holds that have receipts
/// must be consecutive receipts of the history, in the plan's order, from
/// the plan's first step on; the steps without receipts come after them,
/// and only when those receipts reach the head. So the whole plan, the plan
/// from some step on, and one step at a time (a runner handing git-steps the
/// next step) all work; a plan edited mid-run (`[s1, s3]` after `s1, s2`),
/// or one whose steps are not the history's (another runner's plan on the
/// same run) is refused: applying it would not give what an uninterrupted
/// run of it gives.
///
/// Steps no plan holds — `adopt`, `undo` and `record` steps, taken into the
/// run on purpose — are passed over where the plan's next step is expected.
pub fn plan_agreement(
    repo: &git2::Repository,
    plan: &Plan,
    ledger: &Ledger,
    first_only: bool,
) -> Result<(usize, Vec<Error>)> {
    // The position of the next step a plan can hold, from `at` on.
    let past_own = |mut at: usize| -> usize {
        while let Some(e) = ledger.entries.get(at) {
            let own = repo
                .find_commit(e.commit)
                .ok()
                .and_then(|c| c.message().ok().map(crate::history::receipt::parse))
                .and_then(|r| r.ok())
                .and_then(|r| r.source)
                .is_some_and(|src| matches!(src.as_str(), "adopt" | "undo" | "record"));
            if !own {
                break;
            }
            at += 1;
        }
        at
    };
    let mut pending = 0;
    let mut problems = Vec::new();
    let mut first_pending: Option<String> = None;
    // The history position the next receipted plan step must have, and the
    // plan step before it.
    let mut expect: Option<(usize, String)> = None;
    let new_run_hint = "run the plan this run was started with (`git steps log` lists its steps), or give the edited plan a run of its own: `git steps init --branch <new branch> --run <new id>`";
    for step in plan.steps()? {
        if first_only && !problems.is_empty() {
            break;
        }
        let step = step?;
        match ledger.get(&step.id) {
            Some(entry) => {
                if entry.decision != step.digest {
                    problems.push(digest_refusal(&step, entry));
                }
                if let Some(pending) = &first_pending {
                    problems.push(Error::from(Refusal {
                        kind: RefusalKind::PlanMismatch,
                        step: Some(step.id.clone()),
                        saw: format!(
                            "step {} has a receipt ({}) but the earlier step {pending} of this plan has none",
                            step.id,
                            short(entry.commit)
                        ),
                        would: format!(
                            "apply {pending} after {}, which an uninterrupted run would not do",
                            step.id
                        ),
                        hint: new_run_hint.into(),
                    }));
                } else if let Some((at, prev)) = &expect {
                    if entry.index != *at && entry.index != past_own(*at) {
                        problems.push(Error::from(Refusal {
                            kind: RefusalKind::PlanMismatch,
                            step: Some(step.id.clone()),
                            saw: format!(
                                "the plan puts {} right after {prev}, but the history holds {} there, and {}'s receipt ({}) is at position {}",
                                step.id,
                                position(ledger, *at),
                                step.id,
                                short(entry.commit),
                                entry.index + 1
                            ),
                            would: "continue a run whose history is not this plan's: the artifact would differ from an uninterrupted run of the plan".into(),
                            hint: new_run_hint.into(),
                        }));
                    }
                }
                expect = Some((entry.index + 1, step.id.clone()));
            }
            None => {
                if first_pending.is_none() {
                    if let Some((at, prev)) = &expect {
                        if past_own(*at) != ledger.entries.len() {
                            problems.push(Error::from(Refusal {
                                kind: RefusalKind::PlanMismatch,
                                step: Some(step.id.clone()),
                                saw: format!(
                                    "the plan puts {} right after {prev}, but the history holds {} there, a receipt the plan does not hold at that position",
                                    step.id,
                                    position(ledger, *at)
                                ),
                                would: format!(
                                    "apply {} on top of steps this plan does not have: the artifact would differ from an uninterrupted run of the plan",
                                    step.id
                                ),
                                hint: new_run_hint.into(),
                            }));
                        }
                    }
                    first_pending = Some(step.id.clone());
                }
                pending += 1;
            }
        }
    }
    Ok((pending, problems))
}

/// "step X (commit C, position N)" for a history position.
fn position(ledger: &Ledger, at: usize) -> String {
    match ledger.entries.get(at) {
        Some(e) => format!(
            "step {} (receipt {}, position {})",
            e.id,
            short(e.commit),
            at + 1
        ),
        None => format!("nothing (the history ends at position {at})"),
    }
}

fn digest_refusal(step: &Step, entry: &ledger::AppliedStep) -> Error {
    if step.plain_digest.as_deref() == Some(entry.decision.as_str()) {
        return Error::from(Refusal {
            kind: RefusalKind::DigestMismatch,
            step: Some(step.id.clone()),
            saw: format!(
                "step {} is already applied without effects (receipt {}, decision {}); the step given is that decision with {} effect(s) added",
                step.id,
                short(entry.commit),
                entry.decision,
                step.effects.len()
            ),
            would: "start effects for a step whose decision was made without them: effects are part of a decision and start only with their own step's commit".into(),
            hint: format!(
                "put the effects on a new step (a new id, with the change it goes with), or give the decision that was recorded (`git steps show {}` prints it)",
                step.id
            ).into(),
        });
    }
    Error::from(Refusal {
        kind: RefusalKind::DigestMismatch,
        step: Some(step.id.clone()),
        saw: format!(
            "step {} already has a receipt in {} with decision {}, but the step given has decision {}",
            step.id,
            short(entry.commit),
            entry.decision,
            step.digest
        ),
        would: "apply a second, different decision under the same step id".into(),
        hint: format!(
            "a step id is its idempotency key: give the new decision a new id, or give the decision that was recorded (`git steps show {}` prints it)",
            step.id
        ).into(),
    })
}
