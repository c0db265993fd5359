//! `git steps verify`: check every invariant of the history.

use std::io::Write;

use super::{emit_json, Ctx, Failure, RunArgs};
use crate::error::{Error, Refusal, RefusalKind};
use crate::plan::reader::Plan;
use crate::run::inspect;

/// Check every invariant of the run's history (exit 0, or 3).
///
/// Unique step ids, a receipt on every commit of the run, no duplicated
/// hunk, local equal to durable, and (with PLAN) every receipt's digest
/// equal to its plan step's.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A plan whose decisions the receipts must match; `-` reads stdin.
    #[arg(value_name = "PLAN")]
    plan: Option<String>,
    #[command(flatten)]
    run: RunArgs,
}

pub fn run(ctx: &Ctx, a: Args, out: &mut dyn Write) -> Result<(), Failure> {
    let (repo, s) = ctx.open(&a.run)?;
    let plan = a
        .plan
        .as_deref()
        .map(|p| Plan::open(p, repo.path()))
        .transpose()?;
    let v = inspect::verify(&repo, &s, plan.as_ref())?;
    if ctx.ui.json {
        emit_json(out, "verify", &v)?;
    } else {
        for n in &v.notes {
            ctx.ui.note(n);
        }
        for p in &v.problems {
            writeln!(out, "problem: {p}")?;
        }
        writeln!(
            out,
            "{}: {} step(s), history {}",
            if v.ok { "ok" } else { "FAILED" },
            v.steps,
            v.history
        )?;
    }
    if v.ok {
        return Ok(());
    }
    Err(Failure {
        json_written: ctx.ui.json,
        partial: None,
        error: refusal(&v, &s),
    })
}

/// What a verification that found problems is: a refusal to call the run
/// verified (MCP's `verify` answers it too).
pub(super) fn refusal(v: &inspect::Verification, s: &crate::settings::Settings) -> Error {
    Error::from(Refusal {
        kind: RefusalKind::BrokenHistory,
        step: None,
        saw: format!(
            "{} problem(s) in the history of run {}: {}",
            v.problems.len(),
            s.run,
            v.problems[0]
        ),
        would: "report the run as verified".into(),
        hint: "each problem above says what it is and what to run; `git steps log` shows the steps"
            .into(),
    })
}
