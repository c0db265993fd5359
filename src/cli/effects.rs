//! `git steps effects`: every effect of the run's steps, with its state.
//!
//! This file parses and renders; what it shows comes from
//! [`crate::run::inspect::effects`] (the list) and
//! [`crate::run::effects::abandon`].

use std::io::Write;

use super::{emit_json, Ctx, RunArgs};
use crate::error::Result;
use crate::run::inspect::effects;

/// List the run's effects: pending, delivered, failed.
///
/// Per effect: its idempotency key (<run>/<step id>/<n>), what it does, its
/// state, and the latest outcome recorded on refs/steps/effects/<run> (the
/// answer, the tries). The outcomes are fetched from the durable remote
/// first (`--no-fetch`: this box's copy). A pending or failed effect is
/// delivered by the next `apply`, `run` or `resume`, with the same key;
/// `--abandon KEY` gives up on one.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: RunArgs,
    /// Read this box's copy of the outcomes; do not ask the remote.
    #[arg(long)]
    no_fetch: bool,
    /// Give up on the pending or failed effect with this key: an outcome
    /// `abandoned` is recorded on the durable domain, and no run delivers
    /// it again or stops on it.
    #[arg(long, value_name = "KEY")]
    abandon: Option<String>,
    /// With --abandon: why, kept in the outcome.
    #[arg(long, value_name = "TEXT", requires = "abandon")]
    reason: Option<String>,
}

pub fn run(ctx: &Ctx, a: Args, out: &mut dyn Write) -> Result<()> {
    // Listing follows the run as any audit does; giving up an effect
    // writes the run's outcomes, so it acts on the run set up here.
    let (repo, s) = if a.abandon.is_some() {
        ctx.open(&a.run)?
    } else {
        ctx.open_audit(&a.run)?
    };
    if let Some(k) = &a.abandon {
        let why = a
            .reason
            .as_deref()
            .unwrap_or("abandoned with `git steps effects --abandon`");
        let o = crate::run::effects::abandon(&repo, &s, k, why)?;
        if ctx.ui.json {
            return emit_json(out, "effects", &serde_json::json!({"abandoned": o}));
        }
        writeln!(
            out,
            "abandoned {} (outcome {})",
            o.key,
            &o.commit.to_string()[..12]
        )?;
        return Ok(());
    }
    let report = effects::list(&repo, &s, !a.no_fetch)?;
    if ctx.ui.json {
        return emit_json(out, "effects", &report);
    }
    let at = report
        .head
        .as_deref()
        .map_or("(no commits)".to_string(), |h| h[..12].to_string());
    if report.effects.is_empty() {
        writeln!(
            out,
            "run {}: no step carries effects (at {at}: {})",
            report.run, report.head_from
        )?;
    } else {
        writeln!(out, "run {} at {at}: {}", report.run, report.head_from)?;
    }
    for e in &report.effects {
        let detail = match (&e.result, e.tries) {
            (Some(r), Some(t)) => format!("  {r}, {t} tr{}", if t == 1 { "y" } else { "ies" }),
            _ => String::new(),
        };
        writeln!(out, "{:<9}  {}  {}{detail}", e.state, e.key, e.target)?;
        if let Some(reason) = &e.reason {
            writeln!(out, "           {reason}")?;
        }
        if let Some(why) = &e.held {
            writeln!(out, "           held on this box: {why}")?;
        }
    }
    writeln!(
        out,
        "{} delivered, {} pending, {} failed{} (outcomes: {})",
        report.delivered,
        report.pending,
        report.failed,
        if report.abandoned > 0 {
            format!(", {} abandoned", report.abandoned)
        } else {
            String::new()
        },
        report.outcomes_from
    )?;
    for p in &report.problems {
        writeln!(out, "PROBLEM: {p}")?;
    }
    Ok(())
}
