//! The plan loop: `apply` (and `resume PLAN`) — validate the plan, check it
//! against the history, then for each step skip it (its receipt exists) or
//! apply it through the session.
//!
//! Invariant: the whole plan is validated, and every recorded decision
//! checked against the log, before the first step is applied; a step whose
//! receipt exists is never applied again. The order of one step's writes is
//! [`super::commit`]'s; with `--batch N` up to N staged steps become durable
//! in one push, and a step that fails is reported only after the steps
//! staged before it are durable (as if each had been pushed on its own).
//! Outcomes are reported in plan order, each only once it is durable.

use git2::Repository;
use serde::Serialize;

use crate::crash;
use crate::error::{Error, Result};
use crate::plan::reader::Plan;
use crate::settings::Settings;
use crate::workdir::worktree;

use super::agreement::validate;
use super::report::Report;
use super::session::{ApplyOptions, Redelivery, Reporter, Session, Source, StepOutcome};

/// What is `apply`'s own in its report.
#[derive(Debug, Serialize)]
pub struct Applied {
    pub dry_run: bool,
}

/// The result of `apply`.
pub type ApplyReport = Report<StepOutcome, Applied>;

/// Apply `plan` in the repository; `ui` sees each outcome as it happens.
/// On failure the error is returned with the outcomes so far.
pub fn apply_plan(
    repo: &Repository,
    s: &Settings,
    plan: &Plan,
    opts: &ApplyOptions,
    ui: &mut dyn Reporter,
) -> std::result::Result<ApplyReport, (Error, Vec<StepOutcome>)> {
    apply_plan_from(repo, s, plan, opts, ui, None)
}

/// As [`apply_plan`], for steps `source` decided (an MCP client's): its
/// receipts say so (`Step-Source`).
pub fn apply_plan_from(
    repo: &Repository,
    s: &Settings,
    plan: &Plan,
    opts: &ApplyOptions,
    ui: &mut dyn Reporter,
    source: Option<Source>,
) -> std::result::Result<ApplyReport, (Error, Vec<StepOutcome>)> {
    let mut outcomes = Vec::new();
    match apply_inner(repo, s, plan, opts, ui, &mut outcomes, source) {
        Ok(report) => Ok(report),
        Err(e) => Err((e, outcomes)),
    }
}

fn apply_inner(
    repo: &Repository,
    s: &Settings,
    plan: &Plan,
    opts: &ApplyOptions,
    ui: &mut dyn Reporter,
    outcomes: &mut Vec<StepOutcome>,
    source: Option<Source>,
) -> Result<ApplyReport> {
    crash::validate_env().map_err(Error::input)?;
    worktree::workdir(repo)?;
    // Every step parses before anything is written or fetched.
    let total = validate(plan)?;
    let mut session = Session::open(repo, s, Some(plan), opts.clone(), ui)?.load_for(plan)?;
    // Effects of durable steps a crash left undelivered go first.
    session.deliver_effects(ui)?;
    let progress = crate::progress::phase("applying the plan", Some(total as u64));
    let mut seen = 0u64;
    if opts.dry_run {
        // Objects a dry run builds go to memory and are dropped with it.
        repo.odb()?.add_new_mempack_backend(1000)?;
    }
    let mut steps = plan.steps()?;
    // Outcomes in plan order; None holds the place of a staged step, filled
    // when its flush makes it durable.
    let mut held: Vec<Option<StepOutcome>> = Vec::new();
    let batch = opts.batch.max(1);
    loop {
        let next = steps.next();
        // Redeliveries inside the plan, read past before this step: their
        // first occurrence was handled already.
        for r in steps.take_repeats() {
            held.push(Some(StepOutcome::Skip {
                commit: session
                    .receipt(&r.id)
                    .map(|e| e.commit.to_string())
                    .unwrap_or_default(),
                step: r.id,
                redelivery: Some(Redelivery {
                    line: r.line,
                    first_line: r.first_line,
                }),
            }));
        }
        let step = match next.transpose() {
            Ok(Some(step)) => step,
            Ok(None) => break,
            Err(e) => return Err(flushed_then(&mut session, &mut held, ui, outcomes, e)),
        };
        progress.set(seen);
        seen += 1;
        let receipt = session
            .receipt(&step.id)
            .map(|e| (e.commit, e.decision == step.digest));
        match receipt {
            Some((commit, same)) => {
                if same {
                    session.own_decision(&step);
                }
                held.push(Some(StepOutcome::Skip {
                    step: step.id.clone(),
                    commit: commit.to_string(),
                    redelivery: None,
                }))
            }
            None => {
                if let Some(note) = session.identity_note() {
                    ui.note(&note);
                }
                let staged = session.stage(&step, source);
                match staged {
                    Ok(would) => held.push(would),
                    Err(e) => return Err(flushed_then(&mut session, &mut held, ui, outcomes, e)),
                }
            }
        }
        // Its objects are written: the step's content is not held while
        // the worktree is written from them.
        drop(step);
        if session.staged() >= batch {
            flush(&mut session, &mut held, ui, outcomes)?;
        } else if session.staged() == 0 {
            report(&mut held, &mut Vec::new(), ui, outcomes);
        }
    }
    flush(&mut session, &mut held, ui, outcomes)?;
    progress.set(seen);
    drop(progress);
    let mut done = session.finish()?;
    if opts.dry_run {
        // A dry run's head exists only in memory: no head is reported.
        done.head = None;
    }
    Ok(Report::new(
        s,
        done,
        std::mem::take(outcomes),
        Applied {
            dry_run: opts.dry_run,
        },
    ))
}

/// Make the staged steps durable, then report every held outcome.
fn flush(
    session: &mut Session<'_>,
    held: &mut Vec<Option<StepOutcome>>,
    ui: &mut dyn Reporter,
    outcomes: &mut Vec<StepOutcome>,
) -> Result<()> {
    match session.flush() {
        Ok(mut applied) => {
            applied.reverse();
            report(held, &mut applied, ui, outcomes);
            // The flushed steps are durable: their effects go now, before
            // the next step is staged.
            session.deliver_effects(ui)
        }
        Err(e) => {
            // What was settled before the first staged step still counts.
            report(held, &mut Vec::new(), ui, outcomes);
            Err(e)
        }
    }
}

/// Report the held outcomes up to the first staged step not in `applied`
/// (popped from its end, oldest last).
fn report(
    held: &mut Vec<Option<StepOutcome>>,
    applied: &mut Vec<StepOutcome>,
    ui: &mut dyn Reporter,
    outcomes: &mut Vec<StepOutcome>,
) {
    let mut n = 0;
    for h in held.iter_mut() {
        let o = match h.take() {
            Some(o) => o,
            None => match applied.pop() {
                Some(o) => o,
                None => break,
            },
        };
        ui.step(&o, None);
        outcomes.push(o);
        n += 1;
    }
    held.drain(..n);
}

/// A step failed before it was staged: the steps staged before it become
/// durable first (each would have been on its own without `--batch`), then
/// the step's error is returned (or the flush's, if that failed).
fn flushed_then(
    session: &mut Session<'_>,
    held: &mut Vec<Option<StepOutcome>>,
    ui: &mut dyn Reporter,
    outcomes: &mut Vec<StepOutcome>,
    e: Error,
) -> Error {
    // The steps staged before it, made durable; their effects delivered.
    // A failure of those effects is said with the step's error, which
    // stays the one that decides the exit code.
    match session.flush() {
        Ok(mut applied) => {
            applied.reverse();
            report(held, &mut applied, ui, outcomes);
            match session.deliver_effects(ui) {
                Ok(()) => e,
                Err(effect) => e.with_note(format!("also: {effect}")),
            }
        }
        Err(flush_error) => {
            report(held, &mut Vec::new(), ui, outcomes);
            flush_error
        }
    }
}
