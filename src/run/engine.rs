//! The plan loop: `apply` (and `resume PLAN`) — validate the plan, check it
//! against the history, then for each step skip it (its receipt exists) or
//! apply it through the session.
//!
//! Invariant: the whole plan is validated, and every recorded decision
//! checked against the log, before the first step is applied; a step whose
//! receipt exists is never applied again. The order of one step's writes is
//! [`super::commit`]'s.

use git2::Repository;
use serde::Serialize;

use crate::crash;
use crate::error::{Error, Result};
use crate::plan::reader::Plan;
use crate::settings::Settings;
use crate::sync::reconcile::Reconciled;
use crate::workdir::repair::Repair;
use crate::workdir::worktree;

use super::agreement::{preflight, validate};
use super::session::{ApplyOptions, Redelivery, Session, StepOutcome, Ui};

/// The result of `apply`.
#[derive(Debug, Serialize)]
pub struct ApplyReport {
    pub run: String,
    pub branch: String,
    pub durable: &'static str,
    pub dry_run: bool,
    pub repair: Repair,
    pub reconcile: Reconciled,
    pub steps: Vec<StepOutcome>,
    pub head: Option<String>,
    pub artifact: String,
    pub history: String,
}

/// Apply `plan` in the repository; `ui` sees each outcome as it happens.
/// On failure the error is returned with the outcomes so far.
pub fn apply_plan(
    repo: &Repository,
    s: &Settings,
    plan: &Plan,
    opts: &ApplyOptions,
    ui: &mut dyn Ui,
) -> std::result::Result<ApplyReport, (Error, Vec<StepOutcome>)> {
    let mut outcomes = Vec::new();
    match apply_inner(repo, s, plan, opts, ui, &mut outcomes) {
        Ok(report) => Ok(report),
        Err(e) => Err((e, outcomes)),
    }
}

fn apply_inner(
    repo: &Repository,
    s: &Settings,
    plan: &Plan,
    opts: &ApplyOptions,
    ui: &mut dyn Ui,
    outcomes: &mut Vec<StepOutcome>,
) -> Result<ApplyReport> {
    crash::validate_env().map_err(Error::input)?;
    worktree::workdir(repo)?;
    // Every step parses before anything is written or fetched.
    validate(plan)?;
    let mut session = Session::open(repo, s, Some(plan), opts.clone(), ui)?;
    preflight(plan, session.load(false)?)?;
    if opts.dry_run {
        // Objects a dry run builds go to memory and are dropped with it.
        repo.odb()?.add_new_mempack_backend(1000)?;
    }
    let mut steps = plan.steps()?;
    loop {
        let next = steps.next();
        // Redeliveries inside the plan, read past before this step: their
        // first occurrence was handled already.
        for r in steps.take_repeats() {
            let outcome = StepOutcome::Skip {
                commit: session
                    .receipt(&r.id)
                    .map(|e| e.commit.to_string())
                    .unwrap_or_default(),
                step: r.id,
                redelivery: Some(Redelivery {
                    line: r.line,
                    first_line: r.first_line,
                }),
            };
            ui.step(&outcome, None);
            outcomes.push(outcome);
        }
        let Some(step) = next else { break };
        let step = step?;
        let outcome = match session.receipt(&step.id) {
            Some(entry) => StepOutcome::Skip {
                step: step.id.clone(),
                commit: entry.commit.to_string(),
                redelivery: None,
            },
            None => {
                session.ensure_clean(Some(&step.id))?;
                if let Some(note) = session.identity_note() {
                    ui.note(&note);
                }
                session.apply(&step, None)?
            }
        };
        ui.step(&outcome, None);
        outcomes.push(outcome);
    }
    let done = session.finish()?;
    Ok(ApplyReport {
        run: s.run.clone(),
        branch: s.branch.clone(),
        durable: s.durable_kind(),
        dry_run: opts.dry_run,
        repair: done.repair,
        reconcile: done.reconcile,
        steps: std::mem::take(outcomes),
        head: if opts.dry_run {
            None
        } else {
            done.head.map(|h| h.to_string())
        },
        artifact: done.artifact,
        history: done.history,
    })
}
