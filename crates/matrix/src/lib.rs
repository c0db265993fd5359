//! The crash matrix: resume equivalence checked for every step × every
//! crash point × box mode.
//!
//! Owns the acceptance rule shipped as a command: run the plan once
//! uninterrupted for the reference fingerprints; then, in scratch space, for
//! each row crash the run at that point of that step (SIGKILL, through
//! `GIT_STEPS_CRASH`), keep the disk (`survive`) or keep only the remote
//! (`vanish`: resume on a fresh clone), rerun the same command, and compare.
//! Invariant: a row is SAME only when the resumed artifact and history
//! fingerprints equal the reference and the local branch equals the durable
//! one; REFUSED only when the resume exited 3; anything else is DIVERGED.
//! Every run is a real process of this binary against a real bare remote.
//! Every box starts from the same base: the tree of the repository's HEAD
//! when `crashtest` runs inside one ([`Base`]), else an empty repository.
//! Its own crate, above the engine, which cannot import it.

#![forbid(unsafe_code)]

use git_steps_core::{
    crash, error, git, history, keys, lock, plan, run, settings, sync, tree, workdir,
};

pub mod classic;
pub mod in_place;
pub mod power;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use git2::Repository;
use serde::Serialize;

use crate::crash::Scope;
use crate::error::{Error, Result};
use crate::plan::reader::Plan;

mod boxes;
mod effects;
mod late;
use boxes::{error_line, new_box, run_once, scratch};
pub use boxes::{scratch_root, Base, Env};
pub use late::{asked_late, ENV_LATE, ENV_REMOTE};
use late::{late_file, recorded_twice};

/// Which implementation the matrix runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runner {
    GitSteps,
    /// `git-steps run --decider`, the decider replaying the plan.
    GitStepsRun,
    /// `git-steps record`: each step made in the worktree first, by an
    /// agent's own tools, then recorded (see [`in_place`]).
    GitStepsRecord,
    /// `git-steps undo`: the plan applied, its second half undone by one
    /// step, then made again (see [`in_place::replay_undo`]).
    GitStepsUndo,
    /// The classic design with the artifact pushed every step.
    ClassicDurableLog,
    /// The classic design with the artifact pushed only at the end.
    ClassicVolatileLog,
}

impl Runner {
    pub fn name(self) -> &'static str {
        match self {
            Runner::GitSteps => "git-steps",
            Runner::GitStepsRun => "git-steps run --decider",
            Runner::GitStepsRecord => "git-steps record",
            Runner::GitStepsUndo => "git-steps undo",
            Runner::ClassicDurableLog => "classic (durable log)",
            Runner::ClassicVolatileLog => "classic (volatile log)",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BoxMode {
    /// The process dies, the disk is kept.
    Survive,
    /// Only the remote survives: resume starts from a fresh clone.
    Vanish,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    Same,
    Refused,
    Diverged,
}

#[derive(Debug, Clone, Serialize)]
pub struct Fingerprints {
    pub artifact: String,
    pub history: String,
}

/// One row of the matrix.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub step: String,
    pub point: String,
    #[serde(rename = "box")]
    pub box_mode: BoxMode,
    pub verdict: Verdict,
    pub artifact: Option<String>,
    pub history: Option<String>,
    /// Why (refusal message, divergence details), or empty.
    pub reason: String,
    /// Step ids on the durable branch after the resume, oldest first.
    pub receipts: Vec<String>,
    /// `--power-loss`: the cut came after this many recorded operations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub op: Option<usize>,
    /// `--power-loss`: the file-system model the state was built under.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<power::Model>,
    /// `--power-loss`, a row not SAME: the operations the cut dropped
    /// (the first few, then how many more).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
    /// `--power-loss --keep-failed`: where this row's state is kept, as it
    /// was before the resume.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept: Option<String>,
    /// Deliveries of each effect the row's boxes made (tries answered 2xx),
    /// by idempotency key (SPEC "Effects": at least one each; only a crash
    /// between a delivery and its record makes two).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub deliveries: std::collections::BTreeMap<String, usize>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub same: usize,
    pub refused: usize,
    pub diverged: usize,
}

impl Summary {
    pub fn of(rows: &[Row]) -> Summary {
        let mut summary = Summary::default();
        for r in rows {
            match r.verdict {
                Verdict::Same => summary.same += 1,
                Verdict::Refused => summary.refused += 1,
                Verdict::Diverged => summary.diverged += 1,
            }
        }
        summary
    }
}

/// The whole matrix.
#[derive(Debug, Clone, Serialize)]
pub struct Matrix {
    pub runner: Runner,
    pub reference: Fingerprints,
    pub rows: Vec<Row>,
    pub summary: Summary,
    /// `--power-loss`: what was recorded and explored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power: Option<power::Explored>,
}

/// One crash of a row's scenario: arm this point at this step, with these
/// extra arguments (a local-only phase runs with `--remote ""`).
#[derive(Debug, Clone)]
struct Phase {
    crash: Option<String>,
    local_only: bool,
    /// Run as after a reboot (another boot id): a power-loss state.
    after_reboot: bool,
}

/// What to run: a scenario of crashes, then the final resume.
#[derive(Debug, Clone)]
pub struct Cell {
    pub step: String,
    pub point: String,
    pub box_mode: BoxMode,
    phases: Vec<Phase>,
}

/// The final, uninterrupted resume.
const UNARMED: Phase = Phase {
    crash: None,
    local_only: false,
    after_reboot: false,
};

fn crash_at(point: &str, step: &str) -> Phase {
    Phase {
        crash: Some(format!("{point}@{step}")),
        ..UNARMED
    }
}

/// The points a step passes while it is staged (see `run::commit`): with
/// `--batch N` every step passes them; the rest (push, local branch,
/// worktree, and the resume points that need their work) only the last
/// step of each batch, whose id the batch's flush carries.
pub const STAGING_POINTS: &[&str] = &["before-write", "objects-written"];

/// How often the `apply` runner's boxes publish the shared hunk cache
/// (`steps.cacheEvery`): often enough that every fixture kills at its
/// points and resumes fresh boxes from it, seldom enough that the matrix
/// does not pay a second push at every step.
pub const CACHE_EVERY: usize = 3;

/// The cells of the matrix for `runner` over a plan with these step ids;
/// `batch` is `apply --batch N` (1: a push per step).
pub fn cells(runner: Runner, ids: &[String], batch: usize) -> Vec<Cell> {
    let mut out = Vec::new();
    let boxes = [BoxMode::Survive, BoxMode::Vanish];
    let batch = batch.max(1);
    match runner {
        Runner::GitSteps | Runner::GitStepsRun | Runner::GitStepsRecord | Runner::GitStepsUndo => {
            for (i, step) in ids.iter().enumerate() {
                let batch_end = (i + 1) % batch == 0 || i + 1 == ids.len();
                for p in crash::POINTS {
                    if !batch_end && !STAGING_POINTS.contains(&p.name) {
                        continue;
                    }
                    let phases = match (p.scope, p.name) {
                        (Scope::Step | Scope::RemoteStep, _) => vec![crash_at(p.name, step)],
                        // An answer is asked ahead (and kept) during the
                        // previous step's push once the branch exists on
                        // the remote: from the third step on, whatever
                        // the base (an empty remote's first push creates
                        // the branch and is not overlapped).
                        (Scope::Decide, "ahead-kept") if runner == Runner::GitStepsRun && i < 2 => {
                            continue
                        }
                        (Scope::Decide, _) if runner == Runner::GitStepsRun => {
                            vec![crash_at(p.name, step)]
                        }
                        // A finished `run` keeps itself, once, named by
                        // its head's step.
                        (Scope::Archive, _)
                            if runner == Runner::GitStepsRun && i + 1 == ids.len() =>
                        {
                            vec![crash_at(p.name, step)]
                        }
                        // Only the `apply` runner's boxes publish the
                        // shared cache, every [`CACHE_EVERY`] steps
                        // ([`new_box`]): at the flushes that pass a multiple.
                        (Scope::Cache, _)
                            if runner == Runner::GitSteps
                                && crate::sync::share::due(
                                    CACHE_EVERY,
                                    i / batch * batch,
                                    i + 1,
                                ) =>
                        {
                            vec![crash_at(p.name, step)]
                        }
                        // Resume points need something to resume: a first
                        // crash that leaves the work they guard.
                        // `record` writes no worktree file: nothing to repair.
                        (Scope::Resume, "repair-saved") if runner == Runner::GitStepsRecord => {
                            continue
                        }
                        (Scope::Resume, "repair-saved") => {
                            vec![crash_at("worktree-partial", step), crash_at(p.name, step)]
                        }
                        (Scope::Resume, "reconcile-ref") => {
                            vec![crash_at("pushed", step), crash_at(p.name, step)]
                        }
                        (Scope::Resume, "reconcile-pushed") => {
                            // Steps up to this one applied with no remote,
                            // then the run resumes with the remote.
                            let mut first = match ids.get(i + 1) {
                                Some(next) => crash_at("before-write", next),
                                None => Phase {
                                    local_only: true,
                                    ..UNARMED
                                },
                            };
                            first.local_only = true;
                            vec![first, crash_at(p.name, step)]
                        }
                        _ => continue,
                    };
                    let modes: &[BoxMode] = if p.scope == Scope::Resume {
                        // A fresh clone has no local work for these points.
                        &boxes[..1]
                    } else {
                        &boxes
                    };
                    for &b in modes {
                        out.push(Cell {
                            step: step.clone(),
                            point: p.name.to_string(),
                            box_mode: b,
                            phases: phases.clone(),
                        });
                    }
                }
            }
        }
        Runner::ClassicDurableLog | Runner::ClassicVolatileLog => {
            for (i, step) in ids.iter().enumerate() {
                for p in classic::POINTS {
                    if p.name == "pushed" && runner == Runner::ClassicVolatileLog {
                        continue;
                    }
                    if p.name == "checkpointed" && (i + 1) % classic::CHECKPOINT_EVERY != 0 {
                        continue;
                    }
                    for b in boxes {
                        out.push(Cell {
                            step: step.clone(),
                            point: p.name.to_string(),
                            box_mode: b,
                            phases: vec![crash_at(p.name, step)],
                        });
                    }
                }
            }
        }
    }
    out
}

/// Fingerprints of the durable branch (and every receipt on it, duplicates
/// included, oldest first).
fn durable_fingerprints(bare: &Path) -> Result<(Fingerprints, Vec<String>)> {
    crate::git::setup()?;
    let repo = Repository::open_bare(bare)?;
    let head = repo.refname_to_id("refs/heads/main").ok();
    let tree = head.map(|h| repo.find_commit(h)?.tree()).transpose()?;
    let artifact = crate::tree::fingerprint::artifact(&repo, tree.as_ref())?;
    let mut pairs: Vec<(String, String)> = Vec::new();
    if let Some(h) = head {
        let mut walk = repo.revwalk()?;
        walk.push(h)?;
        walk.simplify_first_parent()?;
        for oid in walk {
            let c = repo.find_commit(oid?)?;
            if let Ok(r) = c
                .message()
                .map_err(|_| ())
                .and_then(|m| crate::history::receipt::parse(m).map_err(|_| ()))
            {
                pairs.push((r.id, r.decision));
            }
        }
    }
    pairs.reverse();
    let history =
        crate::tree::fingerprint::history(pairs.iter().map(|(a, b)| (a.as_str(), b.as_str())));
    Ok((
        Fingerprints { artifact, history },
        pairs.into_iter().map(|(a, _)| a).collect(),
    ))
}

/// Run the plan uninterrupted in scratch space: the reference.
pub fn reference(env: &Env) -> Result<Fingerprints> {
    let s = scratch(env)?;
    let dir = new_box(&s, env, 0, env.base.is_some())?;
    let o = run_once(env, &dir, &s.bare, &UNARMED)?;
    if o.code != Some(0) {
        return Err(Error::other(format!(
            "the uninterrupted reference run failed: {}",
            error_line(&o.stderr)
        )));
    }
    Ok(durable_fingerprints(&s.bare)?.0)
}

/// Run one cell: crash, (fresh box), resume, compare.
pub fn run_cell(env: &Env, cell: &Cell, reference: &Fingerprints) -> Result<Row> {
    let s = scratch(env)?;
    let mut dir = new_box(&s, env, 0, env.base.is_some())?;
    let mut fired = 0;
    for (n, phase) in cell.phases.iter().enumerate() {
        let o = run_once(env, &dir, &s.bare, phase)?;
        if o.killed {
            fired += 1;
        }
        if cell.box_mode == BoxMode::Vanish {
            dir = new_box(&s, env, n + 1, true)?;
        }
    }
    let o = run_once(env, &dir, &s.bare, &UNARMED)?;
    let mut row = Row::new(&cell.step, &cell.point, cell.box_mode);
    judge(env, &dir, &s.bare, &o, reference, &mut row)?;
    let armed = cell.phases.iter().filter(|p| p.crash.is_some()).count();
    if fired < armed && row.verdict == Verdict::Same {
        row.reason = format!("{fired} of {armed} crash(es) fired");
    }
    Ok(row)
}

impl Row {
    fn new(step: &str, point: &str, box_mode: BoxMode) -> Row {
        Row {
            step: step.to_string(),
            point: point.to_string(),
            box_mode,
            verdict: Verdict::Same,
            artifact: None,
            history: None,
            reason: String::new(),
            receipts: Vec::new(),
            op: None,
            model: None,
            dropped: Vec::new(),
            kept: None,
            deliveries: Default::default(),
        }
    }
}

/// The verdict of a resume that ran in `dir` against `bare` and ended as
/// `o`: SAME when both fingerprints are the reference's and the local
/// branch is the durable one (and, for `run`, the decider was never asked
/// late), REFUSED on exit 3, else DIVERGED.
fn judge(
    env: &Env,
    dir: &Path,
    bare: &Path,
    o: &boxes::Outcome,
    reference: &Fingerprints,
    row: &mut Row,
) -> Result<()> {
    let (fp, receipts) = durable_fingerprints(bare)?;
    row.artifact = Some(fp.artifact.clone());
    row.history = Some(fp.history.clone());
    row.receipts = receipts;
    match o.code {
        Some(0) => {
            let local_agrees = match env.runner {
                Runner::GitSteps
                | Runner::GitStepsRun
                | Runner::GitStepsRecord
                | Runner::GitStepsUndo => {
                    let repo = Repository::open(dir)?;
                    let local = repo.refname_to_id("refs/heads/main").ok();
                    let durable = Repository::open_bare(bare)?
                        .refname_to_id("refs/heads/main")
                        .ok();
                    local == durable
                }
                _ => true,
            };
            let asked_twice = if env.runner == Runner::GitStepsRun {
                match std::fs::read_to_string(late_file(bare)) {
                    Ok(late) if !late.trim().is_empty() => {
                        Some(late.lines().next().unwrap_or_default().to_string())
                    }
                    _ => recorded_twice(bare)?,
                }
            } else {
                None
            };
            if let Some(why) = asked_twice.or(unkept(env, bare)?) {
                row.verdict = Verdict::Diverged;
                row.reason = why;
            } else if fp.artifact != reference.artifact
                || fp.history != reference.history
                || !local_agrees
            {
                row.verdict = Verdict::Diverged;
                row.reason = format!(
                    "artifact {} vs reference {}; history {} vs reference {}{}",
                    fp.artifact,
                    reference.artifact,
                    fp.history,
                    reference.history,
                    if local_agrees {
                        ""
                    } else {
                        "; local branch differs from durable"
                    }
                );
            }
        }
        Some(3) => {
            row.verdict = Verdict::Refused;
            row.reason = error_line(&o.stderr);
        }
        other => {
            row.verdict = Verdict::Diverged;
            row.reason = format!("the resume exited {other:?}: {}", error_line(&o.stderr));
        }
    }
    effects::judge(bare, row)
}

/// For `run`: why the finished run is not kept on the remote under
/// refs/steps/runs/ at its head (None: it is, or another runner).
fn unkept(env: &Env, bare: &Path) -> Result<Option<String>> {
    if env.runner != Runner::GitStepsRun {
        return Ok(None);
    }
    let b = Repository::open_bare(bare)?;
    let head = b.refname_to_id("refs/heads/main").ok();
    let kept: Vec<git2::Oid> = b
        .references_glob("refs/steps/runs/*")?
        .filter_map(|r| r.ok()?.target())
        .collect();
    Ok((kept.len() != 1 || head != Some(kept[0])).then(|| {
        format!(
            "the finished run is not kept at its head under refs/steps/runs/ on the remote ({} kept ref(s))",
            kept.len()
        )
    }))
}

/// The step ids of `env`'s plan, refused when it holds none.
fn plan_ids(env: &Env) -> Result<Vec<String>> {
    let plan = Plan::open(env.plan.to_str().unwrap_or_default(), &std::env::temp_dir())?;
    let mut ids = Vec::new();
    for s in plan.steps()? {
        ids.push(s?.id);
    }
    if ids.is_empty() {
        return Err(Error::input("the plan holds no steps"));
    }
    Ok(ids)
}

/// `row(i)` for every i below `total` on `jobs` threads, in order;
/// `progress(done, total)` after each.
fn rows_on_threads(
    total: usize,
    jobs: usize,
    progress: &(dyn Fn(usize, usize) + Sync),
    row: &(dyn Fn(usize) -> Result<Row> + Sync),
) -> Result<Vec<Row>> {
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Row>>>> = Mutex::new((0..total).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= total {
                    break;
                }
                let r = row(i);
                results.lock().expect("no worker panics while holding it")[i] = Some(r);
                progress(done.fetch_add(1, Ordering::SeqCst) + 1, total);
            });
        }
    });
    let mut rows = Vec::with_capacity(total);
    for r in results.into_inner().expect("workers are done") {
        rows.push(r.expect("every row ran")?);
    }
    Ok(rows)
}

/// Run the whole matrix on `jobs` threads; `progress(done, total)` after each row.
pub fn run(env: &Env, jobs: usize, progress: &(dyn Fn(usize, usize) + Sync)) -> Result<Matrix> {
    crate::git::setup()?;
    let mut ids = plan_ids(env)?;
    let reference = reference(env)?;
    if env.runner == Runner::GitStepsUndo {
        ids = in_place::undo_ids(&ids);
    }
    let mut cells = cells(env.runner, &ids, env.batch);
    cells.extend(effects::cells(
        env.runner,
        &effects::steps_with_effects(env)?,
    ));
    if env.runner == Runner::GitStepsRun {
        // The agent loop moves the local branch before the push of every
        // step that has a parent (`run::commit`, the push hidden behind the
        // decider): no crash of a surviving box leaves the remote ahead of
        // it, so nothing is fast-forwarded on resume. Only a first step
        // on an unborn branch is flushed in `apply`'s order.
        let first = ids.first().cloned();
        cells.retain(|c| {
            c.point != "reconcile-ref" || (Some(&c.step) == first.as_ref() && env.base.is_none())
        });
    }
    let rows = rows_on_threads(cells.len(), jobs, progress, &|i| {
        run_cell(env, &cells[i], &reference)
    })?;
    Ok(Matrix {
        runner: env.runner,
        reference,
        summary: Summary::of(&rows),
        rows,
        power: None,
    })
}
