//! `git steps crashtest`: the resume-equivalence matrix.
//!
//! This file parses and renders; what it shows comes from
//! [`crate::matrix::run`] (and `matrix::power::run` for `--power-loss`).

use std::io::Write;

use std::time::Instant;

use super::{emit_json, Ctx, Failure};
use crate::crash;
use crate::error::{Error, Refusal, RefusalKind};
use crate::matrix::{self, BoxMode, Env, Matrix, Runner, Verdict};

/// Crash a plan at every step × crash point × box mode, resume, compare.
///
/// Runs PLAN once uninterrupted for the reference fingerprints, then, in
/// scratch space with a local bare remote, for every row: crash at that
/// point of that step (SIGKILL), keep the disk (survive) or only the remote
/// (vanish: resume on a fresh clone), rerun the same command, and compare
/// artifact and history fingerprints. Verdicts: SAME, REFUSED (the resume
/// refused loudly, exit 3), DIVERGED. Exits 3 when any row DIVERGED.
///
/// Every box starts from the HEAD tree of the repository crashtest runs in
/// (or -C names), so a plan that edits your files can be crashed; outside
/// a repository, or with --empty-base, from an empty repository.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The plan to crash (JSON Lines).
    #[arg(value_name = "PLAN", required_unless_present = "list_points")]
    plan: Option<String>,
    /// Print the crash points, one per line, and exit.
    #[arg(long)]
    list_points: bool,
    /// The implementation under test: git-steps `apply`; git-steps `run`
    /// (the agent loop, with a decider that replays the plan and marks a
    /// row DIVERGED if it is asked for a step already durable); git-steps
    /// `record` (each step written into the worktree as an agent's own tools
    /// would, then recorded; a rerun records the last step again); git-steps
    /// `undo` (the plan applied, its second half undone by one `undo` step,
    /// then applied again under new ids); or the built-in classic runner
    /// (cursor checkpointed every 3 steps, receipts on the box).
    #[arg(long, value_enum, default_value = "git-steps")]
    runner: RunnerArg,
    /// The classic runner's durability switch: its artifact pushed every
    /// step (durable) or only at the end (volatile).
    #[arg(long, value_enum, default_value = "durable")]
    classic_log: ClassicLog,
    /// Start every box from an empty repository, even inside one [default:
    /// inside a repository (or with -C), every box starts from its HEAD
    /// tree].
    #[arg(long)]
    empty_base: bool,
    /// Rows run at once [default: the number of cores].
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// Crash `apply --batch N` (group commit): every step at its staging
    /// points, the last step of each batch at every point.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    batch: Option<u32>,
    /// Crash by power cut instead of SIGKILL: record one uninterrupted run
    /// with strace(1) (box and remote, every process), build the states a
    /// power cut may leave at each cut point under each file-system model,
    /// resume each and compare. See docs/guide.md, "Power cuts".
    #[arg(long)]
    power_loss: bool,
    /// With --power-loss: the file-system models (ext4 data=ordered; the
    /// POSIX worst case, which also reorders; fuse: a FUSE file system that
    /// drops every unsynced byte and whose syncfs flushes nothing, explored
    /// on a run recorded with GIT_STEPS_FLUSH=files).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "ext4,posix",
        requires = "power_loss"
    )]
    model: Vec<ModelArg>,
    /// With --power-loss: random states per cut point and model, besides
    /// the least one a cut may leave (a step flushes four times, so much
    /// is unflushed at each cut: several samples of it).
    #[arg(long, value_name = "N", default_value_t = 8, requires = "power_loss")]
    states: usize,
    /// With --power-loss: take N cut points, chosen with the seed [default:
    /// every one: before each fsync, and the end].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), requires = "power_loss")]
    cuts: Option<u32>,
    /// With --power-loss: the seed of the sampled states and cuts.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "power_loss")]
    seed: u64,
    /// With --power-loss: leave the state of every row not SAME in scratch
    /// space as the cut left it (before the resume), and name it in the row
    /// (`kept`), to replay by hand.
    #[arg(long, requires = "power_loss")]
    keep_failed: bool,
}

/// `--model`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ModelArg {
    Ext4,
    Posix,
    Fuse,
}

/// `--runner`: a bad value is clap's usage error (exit 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum RunnerArg {
    #[value(name = "git-steps")]
    GitSteps,
    Run,
    Record,
    Undo,
    Classic,
}

/// `--classic-log`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ClassicLog {
    Durable,
    Volatile,
}

fn runner(a: &Args) -> Runner {
    match (a.runner, a.classic_log) {
        (RunnerArg::GitSteps, _) => Runner::GitSteps,
        (RunnerArg::Run, _) => Runner::GitStepsRun,
        (RunnerArg::Record, _) => Runner::GitStepsRecord,
        (RunnerArg::Undo, _) => Runner::GitStepsUndo,
        (RunnerArg::Classic, ClassicLog::Durable) => Runner::ClassicDurableLog,
        (RunnerArg::Classic, ClassicLog::Volatile) => Runner::ClassicVolatileLog,
    }
}

fn verdict(v: Verdict) -> &'static str {
    match v {
        Verdict::Same => "SAME",
        Verdict::Refused => "REFUSED",
        Verdict::Diverged => "DIVERGED",
    }
}

fn box_name(b: BoxMode) -> &'static str {
    match b {
        BoxMode::Survive => "survive",
        BoxMode::Vanish => "vanish",
    }
}

/// The human table.
pub(super) fn table(m: &Matrix, out: &mut dyn Write) -> std::io::Result<()> {
    let sw = m
        .rows
        .iter()
        .map(|r| r.step.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let pw = m
        .rows
        .iter()
        .map(|r| r.point.len())
        .max()
        .unwrap_or(5)
        .max(5);
    writeln!(
        out,
        "{:<sw$}  {:<pw$}  {:<7}  {:<8}  REASON",
        "STEP", "POINT", "BOX", "VERDICT"
    )?;
    for r in &m.rows {
        let mut reason = r.reason.clone();
        if reason.chars().count() > 100 {
            reason = reason.chars().take(99).collect::<String>() + "…";
        }
        writeln!(
            out,
            "{:<sw$}  {:<pw$}  {:<7}  {:<8}  {reason}",
            r.step,
            r.point,
            box_name(r.box_mode),
            verdict(r.verdict)
        )?;
    }
    Ok(())
}

pub(super) fn summary_line(m: &Matrix) -> String {
    format!(
        "{}: {} rows: {} SAME, {} REFUSED, {} DIVERGED (reference artifact {})",
        m.runner.name(),
        m.rows.len(),
        m.summary.same,
        m.summary.refused,
        m.summary.diverged,
        m.reference.artifact
    )
}

pub(super) fn jobs(n: Option<usize>) -> usize {
    n.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
    })
}

pub fn run(ctx: &Ctx, a: Args, out: &mut dyn Write) -> Result<(), Failure> {
    if a.list_points {
        if ctx.ui.json {
            let points: Vec<_> = crash::POINTS
                .iter()
                .map(|p| serde_json::json!({"name": p.name, "state": p.state, "scope": format!("{:?}", p.scope).to_lowercase()}))
                .collect();
            emit_json(out, "crash-points", &points)?;
        } else {
            for p in crash::POINTS {
                writeln!(out, "{}", p.name)?;
            }
        }
        return Ok(());
    }
    let runner = runner(&a);
    if a.batch.is_some_and(|n| n > 1) && runner != Runner::GitSteps {
        return Err(Error::input(format!(
            "--batch is `apply --batch`: it applies to --runner git-steps, not {}",
            clap::ValueEnum::to_possible_value(&a.runner)
                .map(|v| v.get_name().to_string())
                .unwrap_or_default()
        ))
        .into());
    }
    let plan = std::path::PathBuf::from(a.plan.as_deref().unwrap_or_default());
    let plan = plan
        .canonicalize()
        .map_err(|e| Error::input(format!("cannot open the plan {}: {e}", plan.display())))?;
    let exe = std::env::current_exe().map_err(|e| Error::io("cannot find this binary", e))?;
    // Inside a repository (or with -C), every box starts from its HEAD
    // tree, so a plan that edits the repository's files can be crashed.
    let base = if a.empty_base {
        None
    } else {
        match git2::Repository::discover(&ctx.repo) {
            Ok(repo) => {
                crate::git::follow_git_config_env(&repo)?;
                matrix::Base::of_head(&repo)?
            }
            Err(_) => None,
        }
    };
    match &base {
        Some(b) => ctx.ui.status(&format!(
            "crashtest: every box starts from the tree of {} ({} file(s)); --empty-base for an empty repository",
            crate::git::short(b.from),
            b.files
        )),
        None => ctx.ui.status("crashtest: every box starts from an empty repository"),
    }
    let env = Env {
        exe,
        plan,
        runner,
        base,
        batch: a.batch.unwrap_or(1) as usize,
        flush_files: false,
    };
    let progress = ctx.ui.matrix_progress("crashtest");
    let started = Instant::now();
    let m = if a.power_loss {
        let opts = matrix::power::Options {
            models: a
                .model
                .iter()
                .map(|m| match m {
                    ModelArg::Ext4 => matrix::power::Model::Ext4,
                    ModelArg::Posix => matrix::power::Model::Posix,
                    ModelArg::Fuse => matrix::power::Model::Fuse,
                })
                .collect(),
            samples: a.states,
            cuts: a.cuts.map(|n| n as usize),
            seed: a.seed,
            keep_failed: a.keep_failed,
        };
        ctx.ui
            .status("crashtest --power-loss: recording an uninterrupted run with strace");
        matrix::power::run(&env, &opts, jobs(a.jobs), &|d, t| progress.tick(d, t))?
    } else {
        matrix::run(&env, jobs(a.jobs), &|d, t| progress.tick(d, t))?
    };
    if let Some(p) = &m.power {
        let per: Vec<String> = p
            .states
            .iter()
            .map(|(m, n)| format!("{} {n}", m.name()))
            .collect();
        ctx.ui.status(&format!(
            "power loss: {} operations recorded on box and remote ({} fsyncs); {} of {} cut points taken; {} states resumed ({}); seed {}",
            p.operations,
            p.syncs,
            p.cuts,
            p.cut_points,
            m.rows.len(),
            per.join(", "),
            p.seed
        ));
    }
    if ctx.ui.json {
        emit_json(out, "crashtest", &m)?;
    } else {
        table(&m, out)?;
        writeln!(out, "{}", summary_line(&m))?;
    }
    ctx.ui.status(&format!(
        "crashtest took {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    if m.summary.diverged == 0 {
        return Ok(());
    }
    let first = m
        .rows
        .iter()
        .find(|r| r.verdict == Verdict::Diverged)
        .expect("counted");
    Err(Failure {
        json_written: ctx.ui.json,
        partial: None,
        error: Error::from(Refusal {
            kind: RefusalKind::Diverged,
            step: Some(first.step.clone()),
            saw: format!(
                "{} of {} rows DIVERGED for {}; first: crash at {}@{} ({}): {}",
                m.summary.diverged,
                m.rows.len(),
                m.runner.name(),
                first.point,
                first.step,
                box_name(first.box_mode),
                first.reason
            ),
            would: "call this plan resume-equivalent".into(),
            hint: format!(
                "replay one row by hand: GIT_STEPS_CRASH={}@{} git steps apply PLAN, then the same command again",
                first.point, first.step
            ).into(),
        }),
    })
}
