//! The crash matrix's view of effects (SPEC "Effects"): crashes at the
//! effect boundaries of every step that carries effects, and per row the
//! deliveries counted per key and the outcomes on the durable remote.
//!
//! Owns the effect cells and the effect half of a row's verdict.
//! Invariant: a row is SAME only if every effect of every step on the
//! durable branch has a `delivered` outcome on the remote's
//! `refs/steps/effects/<run>` and no outcome there names anything else;
//! the deliveries per key (each try a box made that was answered 2xx, from
//! `GIT_STEPS_EFFECT_TRACE`) are reported with the row: at least one per
//! key, and two only where the crash fell between a delivery and its
//! record (`effect-delivered`); any other double is DIVERGED, and so are
//! first deliveries out of the run's order.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use git2::Repository;

use super::{crash_at, Cell, Env, Row, Runner, Verdict};
use crate::crash::{Scope, POINTS};
use crate::error::Result;
use crate::plan::reader::Plan;

/// The ids of the steps that carry effects: the plan's; for the `undo`
/// runner's scenario also the undo step (when a step it undoes has a
/// `compensate`) and the undone steps made again.
pub(super) fn steps_with_effects(env: &Env) -> Result<Vec<String>> {
    let plan = Plan::open(env.plan.to_str().unwrap_or_default(), &std::env::temp_dir())?;
    let mut steps = Vec::new();
    for s in plan.steps()? {
        let s = s?;
        if !steps.iter().any(|(id, _, _)| *id == s.id) {
            let compensates = s.effects.iter().any(|e| e.compensate.is_some());
            steps.push((s.id, !s.effects.is_empty(), compensates));
        }
    }
    let mut ids: Vec<String> = steps
        .iter()
        .filter(|(_, with, _)| *with)
        .map(|(id, _, _)| id.clone())
        .collect();
    if env.runner == Runner::GitStepsUndo {
        let undone = &steps[steps.len() - steps.len().div_ceil(2)..];
        if undone.iter().any(|(_, _, c)| *c) {
            ids.push(super::in_place::UNDO_ID.to_string());
        }
        ids.extend(
            undone
                .iter()
                .filter(|(_, with, _)| *with)
                .map(|(id, _, _)| super::in_place::again_id(id)),
        );
    }
    Ok(ids)
}

/// Crashes at every effect point of every step with effects, both boxes
/// (the runners that apply the plan's own steps: `apply`, `run`, and
/// `undo`, whose undo step delivers the compensations).
pub(super) fn cells(runner: Runner, with_effects: &[String]) -> Vec<Cell> {
    if !matches!(
        runner,
        Runner::GitSteps | Runner::GitStepsRun | Runner::GitStepsUndo
    ) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for step in with_effects {
        for p in POINTS.iter().filter(|p| p.scope == Scope::Effect) {
            for b in [super::BoxMode::Survive, super::BoxMode::Vanish] {
                out.push(Cell {
                    step: step.clone(),
                    point: p.name.to_string(),
                    box_mode: b,
                    phases: vec![crash_at(p.name, step)],
                });
            }
        }
    }
    out
}

/// Where a row's boxes count their tries (beside its remote).
pub(super) fn trace_file(bare: &Path) -> PathBuf {
    bare.with_file_name("effects.trace")
}

/// The effect half of the verdict of a row that is otherwise SAME.
pub(super) fn judge(bare: &Path, row: &mut Row) -> Result<()> {
    if let Ok(text) = std::fs::read_to_string(trace_file(bare)) {
        let mut counts = BTreeMap::new();
        for k in text.lines().filter(|l| !l.is_empty()) {
            *counts.entry(k.to_string()).or_insert(0usize) += 1;
        }
        row.deliveries = counts;
    }
    if row.verdict != Verdict::Same {
        return Ok(());
    }
    // Only a crash between a delivery and its record delivers twice
    // (a power-loss row may lose the record itself).
    if row.point != "effect-delivered" && row.op.is_none() {
        let twice: Vec<String> = row
            .deliveries
            .iter()
            .filter(|(_, &n)| n > 1)
            .map(|(k, n)| format!("{k} ({n} times)"))
            .collect();
        if !twice.is_empty() {
            row.verdict = Verdict::Diverged;
            row.reason = format!(
                "effect(s) delivered more than once though no crash fell between a delivery and its record: {}",
                twice.join(", ")
            );
            return Ok(());
        }
    }
    let repo = Repository::open_bare(bare)?;
    let Ok(head) = repo.refname_to_id("refs/heads/main") else {
        return Ok(());
    };
    let ledger = crate::history::ledger::scan(&repo, Some(head), &run_of(&repo, head)?)?;
    if ledger.effects.is_empty() {
        return Ok(());
    }
    let run = run_of(&repo, head)?;
    let name = crate::run::outcomes::refname(&run);
    let outcomes = crate::run::outcomes::read(&repo, repo.refname_to_id(&name).ok())?;
    let mut missing = Vec::new();
    for &(at, count) in &ledger.effects {
        let e = &ledger.entries[at];
        for n in 1..=count {
            let k = crate::plan::effect::key(&run, &e.id, n);
            if !outcomes
                .of(&k, e.commit)
                .is_some_and(|o| o.status == crate::run::outcomes::EffectStatus::Delivered)
            {
                missing.push(k);
            }
        }
    }
    // Effects go in order: the first delivery of each key follows the
    // run's order of steps, and of effects in a step (an undo's
    // compensation never before the effect it undoes).
    let mut place = BTreeMap::new();
    for &(at, count) in &ledger.effects {
        for n in 1..=count {
            place.insert(
                crate::plan::effect::key(&run, &ledger.entries[at].id, n),
                (at, n),
            );
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut last: Option<(&str, (usize, usize))> = None;
    if let Ok(text) = std::fs::read_to_string(trace_file(bare)) {
        for k in text.lines().filter(|l| !l.is_empty()) {
            let (Some(&at), true) = (place.get(k), seen.insert(k.to_string())) else {
                continue;
            };
            if let Some((before, was)) = last {
                if at < was {
                    row.verdict = Verdict::Diverged;
                    row.reason = format!(
                        "effect {before} was delivered before {k}, which comes before it in the run"
                    );
                    return Ok(());
                }
            }
            last = Some((place.get_key_value(k).map_or(k, |(s, _)| s.as_str()), at));
        }
    }
    let stray: Vec<String> = outcomes
        .list
        .iter()
        .filter(|o| ledger.get(&o.step).is_none_or(|e| e.commit != o.receipt))
        .map(|o| o.key.clone())
        .collect();
    if !missing.is_empty() {
        row.verdict = Verdict::Diverged;
        row.reason = format!(
            "effect(s) of durable steps without a delivered outcome: {}",
            missing.join(", ")
        );
    } else if !stray.is_empty() {
        row.verdict = Verdict::Diverged;
        row.reason = format!(
            "outcome(s) recorded for no durable step: {}",
            stray.join(", ")
        );
    }
    Ok(())
}

/// The run id of the receipt at `head`.
fn run_of(repo: &Repository, head: git2::Oid) -> Result<String> {
    let c = repo.find_commit(head)?;
    Ok(c.message()
        .ok()
        .and_then(|m| crate::history::receipt::parse(m).ok())
        .map(|r| r.run)
        .unwrap_or_default())
}
