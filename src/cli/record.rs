//! `git steps record`: the worktree's own changes become one step.
//!
//! This file parses and renders; what it shows comes from
//! [`crate::run::record::record`].

use std::io::Write;

use super::terminal::Terminal;
use super::{emit_json, Ctx, Failure, RunArgs};
use crate::run::record::{self, RecordOptions};

/// Record what was changed in the worktree (by an agent's own tools, in
/// place) as one step, idempotent by its id.
///
/// The changes against the run's head — modified, added (untracked and not
/// ignored) and deleted files, modes and symlinks included — become a
/// `files` step whose object is the recorded decision: one commit with its
/// receipt (`Step-Source: record`), made durable like every step; no file
/// in the worktree is written, only the branch and the index catch up.
/// Rerun the same command after a crash: the same changes under an id that
/// has a receipt are done (exit 0); other changes under it are refused
/// (exit 3). Nothing to record is an error (exit 1).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The step id, its idempotency key (e.g. the agent's tool-call id).
    #[arg(long, value_name = "ID")]
    id: String,
    /// The commit subject (default: a summary of the files).
    #[arg(short, long, value_name = "MESSAGE")]
    message: Option<String>,
    /// Why the step was taken, kept in the receipt as the step's `intent` (JSON if it parses, else a string).
    #[arg(long, value_name = "TEXT")]
    intent: Option<String>,
    #[command(flatten)]
    run: RunArgs,
    /// Record changes that repeat an earlier change still in effect [config: steps.allowDuplicateHunks].
    #[arg(long)]
    allow_duplicate_hunks: bool,
}

pub fn run(ctx: &Ctx, a: Args, out: &mut dyn Write) -> Result<(), Failure> {
    let (repo, s) = ctx.open_deepened(&a.run)?;
    let opts = RecordOptions {
        id: a.id,
        message: a.message,
        intent: a
            .intent
            .map(|t| serde_json::from_str(&t).unwrap_or(serde_json::Value::String(t))),
        allow_duplicate_hunks: a.allow_duplicate_hunks || s.config.allow_duplicate_hunks,
    };
    let mut ui = Terminal::new(ctx.ui, false);
    let report = record::record(&repo, &s, &opts, &mut ui)?;
    if ctx.ui.json {
        emit_json(out, "record", &report)?;
    } else if report.status == "already-recorded" {
        writeln!(
            out,
            "already recorded {} {}",
            report.step,
            &report.commit[..12]
        )?;
        ctx.ui.status(&format!("artifact {}", report.artifact));
    } else {
        ctx.ui.status(&format!("artifact {}", report.artifact));
    }
    Ok(())
}

/// Replay a plan through `record`: the crash matrix's in-place agent.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The plan whose steps are made in the worktree, then recorded.
    #[arg(value_name = "PLAN")]
    plan: String,
    #[command(flatten)]
    run: RunArgs,
}

#[cfg(feature = "harness")]
pub fn replay(ctx: &Ctx, a: ReplayArgs) -> Result<(), Failure> {
    let (repo, s) = ctx.open_deepened(&a.run)?;
    let plan = crate::plan::reader::Plan::open(&a.plan, repo.path())?;
    crate::matrix::in_place::replay(&repo, &s, &plan)?;
    Ok(())
}

/// The `undo` runner's scenario (see `matrix::in_place::replay_undo`).
#[cfg(feature = "harness")]
pub fn replay_undo(ctx: &Ctx, a: ReplayArgs) -> Result<(), Failure> {
    let (repo, s) = ctx.open_deepened(&a.run)?;
    crate::matrix::in_place::replay_undo(&repo, &s, std::path::Path::new(&a.plan))?;
    Ok(())
}
