//! `git steps run --decider CMD`: the agent loop.
//!
//! This file parses and renders; what it shows comes from
//! [`crate::run::agent::run`].

use std::io::Write;
use std::time::Duration;

use super::terminal::Terminal;
use super::{emit_json, Ctx, Failure, RunArgs};
use crate::run::agent::{self, RunOptions, Stop};

/// Run the agent loop: ask CMD for each next step and apply it.
///
/// For each next step index: if the journal (`refs/steps/journal/<run>`)
/// keeps a decision without a receipt, it is applied without asking;
/// otherwise CMD (run by `sh -c`, in the worktree) gets a JSON context on
/// stdin — `run`, `step_index`, `head`, `fingerprint`, `last_step_id` (and
/// `refused`, when its previous answer for this index was refused) — and
/// prints one step object, or `{"done": true}`. The answer becomes durable
/// with its step, in one push: its receipt is the record. A refused answer
/// is journaled and sent back to CMD, with the reason, up to --retries
/// times. Rerunning the same command after a crash resumes without asking
/// again for any step that has a receipt.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The decider: a shell command that reads the context on stdin and prints one step.
    #[arg(long, value_name = "CMD")]
    pub(super) decider: String,
    /// Stop after applying this many steps in this invocation.
    #[arg(long, value_name = "N")]
    pub(super) max_steps: Option<usize>,
    /// Seconds the decider may take per answer before it is killed.
    #[arg(long, value_name = "SECONDS", default_value_t = 600.0)]
    pub(super) decider_timeout: f64,
    #[command(flatten)]
    pub(super) run: RunArgs,
    /// Apply steps whose hunks repeat an earlier change [config: steps.allowDuplicateHunks].
    #[arg(long)]
    pub(super) allow_duplicate_hunks: bool,
    /// Refused answers sent back to the decider per step, in this run, before it stops [config: steps.retries; default 2].
    #[arg(long, value_name = "N")]
    pub(super) retries: Option<u32>,
}

pub fn run(ctx: &Ctx, a: Args, out: &mut dyn Write) -> Result<(), Failure> {
    if !(a.decider_timeout.is_finite() && a.decider_timeout > 0.0) {
        return Err(
            crate::Error::input("--decider-timeout must be a positive number of seconds").into(),
        );
    }
    let (repo, s) = ctx.open_deepened(&a.run)?;
    let mut opts = RunOptions::new(
        a.decider.clone(),
        Duration::from_secs_f64(a.decider_timeout),
    );
    // With -v the decider's stderr is shown even when it answers.
    opts.decider.keep_stderr = ctx.ui.verbose;
    opts.max_steps = a.max_steps;
    let config = &s.config;
    opts.retries = a.retries.map_or(config.retries, |n| n as usize);
    opts.allow_duplicate_hunks = a.allow_duplicate_hunks || config.allow_duplicate_hunks;
    let mut ui = Terminal::new(ctx.ui, false);
    match agent::run(&repo, &s, &opts, &mut ui) {
        Ok(report) => {
            if ctx.ui.json {
                emit_json(out, "run", &report)?;
            } else {
                let replayed = report
                    .steps
                    .iter()
                    .filter(|r| r.source == agent::Source::Journal)
                    .count();
                ctx.ui.status(&format!(
                    "{}: applied {} step(s) ({replayed} of them recorded decisions replayed without asking), {} decider call(s); artifact {}",
                    match report.command.stopped {
                        Stop::Done => "done",
                        Stop::MaxSteps => "stopped at --max-steps",
                    },
                    report.steps.len(),
                    report.command.decider_calls,
                    report.artifact
                ));
            }
            Ok(())
        }
        Err((error, done)) => Err(Failure {
            error,
            partial: Some(serde_json::json!({ "steps": done })),
            json_written: false,
        }),
    }
}

/// A deterministic decider that replays a JSON Lines plan: answers line
/// `step_index` of PLAN (blank lines skipped), then `{"done": true}`. The
/// crash matrix runs `run` with it.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The plan to replay.
    #[arg(value_name = "PLAN")]
    pub(super) plan: String,
}

pub fn replay(a: ReplayArgs, out: &mut dyn Write) -> Result<(), Failure> {
    let mut input = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut input)
        .map_err(|e| crate::Error::input(format!("cannot read the context on stdin: {e}")))?;
    let ctx: serde_json::Value = serde_json::from_str(&input)
        .map_err(|e| crate::Error::input(format!("the context is not JSON: {e}")))?;
    let index = ctx["step_index"]
        .as_u64()
        .ok_or_else(|| crate::Error::input("the context has no step_index"))?
        as usize;
    let text = std::fs::read_to_string(&a.plan)
        .map_err(|e| crate::Error::input(format!("cannot read the plan {}: {e}", a.plan)))?;
    let line = text.lines().filter(|l| !l.trim().is_empty()).nth(index);
    // In the crash matrix: a call for an index whose answer is already
    // durable is written down, and fails the row.
    #[cfg(feature = "harness")]
    if let Some(line) = line {
        if !answer_in_the_matrix(&ctx, index, line)? {
            return Ok(());
        }
    }
    match line {
        Some(line) => writeln!(out, "{line}")?,
        None => writeln!(out, "{{\"done\": true}}")?,
    }
    Ok(())
}

/// In the crash matrix (its variables set): an ask for `index` whose
/// answer is already durable is written down in its file, and fails the
/// row. False when the ask came from a run that is gone: nothing is
/// answered.
#[cfg(feature = "harness")]
fn answer_in_the_matrix(
    ctx: &serde_json::Value,
    index: usize,
    line: &str,
) -> Result<bool, Failure> {
    if let (Some(bare), Some(late)) = (
        std::env::var_os(crate::matrix::ENV_REMOTE),
        std::env::var_os(crate::matrix::ENV_LATE),
    ) {
        let id = crate::plan::step::Step::parse(line)
            .map(|s| s.id)
            .unwrap_or_default();
        // A decider whose run was killed while it was being asked (an
        // answer asked ahead) may be scheduled only after the next run has
        // gone on: its answer is never read, and what the remote holds by
        // then says nothing of when it was asked.
        if !asked_by_a_live_run() {
            return Ok(false);
        }
        // Or one this box kept, asked ahead against the very head it is
        // asked on now (git-steps must have used it).
        let kept = git2::Repository::discover(".").ok().and_then(|r| {
            let k = crate::run::ahead::read(r.path(), ctx["run"].as_str()?)?;
            (k.index == index && Some(k.after.as_str()) == ctx["head"].as_str()).then(|| {
                format!("the decider was asked for step index {index} ({id}) although its answer, asked ahead on top of {}, was kept on this box", &k.after[..12])
            })
        });
        let late_why = match kept {
            Some(k) => Some(k),
            None => crate::matrix::asked_late(std::path::Path::new(&bare), index, &id)?,
        };
        // The run may have been killed while this decider read the remote
        // (it passed the check above alive): what the read saw may then be
        // the next run's doing. Only a run still alive after the read was
        // alive during it, and asked late.
        if late_why.is_some() && !asked_by_a_live_run() {
            return Ok(false);
        }
        if let Some(why) = late_why {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&late)?;
            writeln!(f, "{why}")?;
        }
    }
    Ok(true)
}

#[cfg(feature = "harness")]
/// Whether the process that asked this decider is gone: this process, or
/// the shell that runs it, was handed to init (a killed run's orphan).
fn asked_by_a_live_run() -> bool {
    let parent = std::os::unix::process::parent_id();
    if parent <= 1 {
        return false;
    }
    let Some((grandparent, comm)) = crate::os::parent_of(parent) else {
        // The parent cannot be seen: taken as alive, so that an ask it
        // made is never excused on a guess.
        return true;
    };
    let shell = matches!(comm.as_str(), "sh" | "dash" | "bash");
    !(shell && grandparent <= 1)
}
