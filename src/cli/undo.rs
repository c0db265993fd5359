//! `git steps undo`: rewind as a step.
//!
//! This file parses and renders; what it shows comes from
//! [`crate::run::undo::undo`].

use std::io::Write;

use super::terminal::Terminal;
use super::{emit_json, Ctx, Failure, RunArgs};
use crate::run::undo::{self, Target};

/// Undo the run's last steps with one new step, never a reset.
///
/// The step holds, for every file an undone step touched, the version it
/// had after --to STEP (or before the last N steps); files no undone step
/// touched, and everything in the worktree outside the run, stay as they
/// are. It is a step like any other: one commit whose receipt names what it
/// undoes (`Step-Undo`), pushed, audited with `git log`. Idempotent by its
/// id (default `undo:<the step rewound to>`, `undo:start` for all of it):
/// the same command after a crash finishes it; run right after, `--last N`
/// is taken as that rerun (give `--id` to undo an undo). The undone changes
/// can be made again later: they are not duplicated hunks once undone.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Rewind to just after this step.
    #[arg(
        long,
        value_name = "STEP",
        conflicts_with = "last",
        required_unless_present = "last"
    )]
    to: Option<String>,
    /// Undo the last N steps.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    last: Option<u32>,
    /// The undo step's id [default: undo:<the step rewound to>].
    #[arg(long, value_name = "ID")]
    id: Option<String>,
    #[command(flatten)]
    run: RunArgs,
    /// Allow the restored files to repeat a change still in effect [config: steps.allowDuplicateHunks].
    #[arg(long)]
    allow_duplicate_hunks: bool,
}

pub fn run(ctx: &Ctx, a: Args, out: &mut dyn Write) -> Result<(), Failure> {
    let (repo, s) = ctx.open_deepened(&a.run)?;
    let target = match (a.to, a.last) {
        (Some(step), _) => Target::To(step),
        (None, Some(n)) => Target::Last(n as usize),
        (None, None) => unreachable!("clap requires --to or --last"),
    };
    let allow = a.allow_duplicate_hunks || s.config.allow_duplicate_hunks;
    let mut ui = Terminal::new(ctx.ui, false);
    let report = undo::undo(&repo, &s, &target, a.id.as_deref(), allow, &mut ui)?;
    if ctx.ui.json {
        emit_json(out, "undo", &report)?;
    } else {
        if report.status == "already-undone" {
            writeln!(
                out,
                "already undone {} {}",
                report.step,
                &report.commit[..12]
            )?;
        }
        ctx.ui.status(&format!(
            "undid {} (back to {}); artifact {}",
            report.undone.join(", "),
            report.to.as_deref().unwrap_or("the run's start"),
            report.artifact
        ));
    }
    Ok(())
}
