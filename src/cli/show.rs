//! `git steps show`: one step's recorded decision, intent and diff.
//!
//! This file parses and renders; what it shows comes from
//! [`crate::run::inspect::audit::show`].

use std::io::Write;

use super::{emit_json, Ctx, RunArgs};
use crate::error::Result;
use crate::run::inspect::audit;

/// Show one step: its recorded decision (the canonical JSON its commit
/// stores, with its digest checked against the receipt), its intent and
/// its diff.
///
/// Reads the run's branch here, or the remote's when the run is not
/// checked out here (without touching the worktree).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The step's id.
    #[arg(value_name = "STEP")]
    step: String,
    #[command(flatten)]
    run: RunArgs,
}

pub fn run(ctx: &Ctx, a: Args, out: &mut dyn Write) -> Result<()> {
    let (repo, s) = ctx.open_audit(&a.run)?;
    let shown = audit::show(&repo, &s, &a.step)?;
    if let Some(from) = &shown.read_from {
        ctx.ui.note(from);
    }
    if ctx.ui.json {
        return emit_json(out, "show", &shown);
    }
    writeln!(
        out,
        "step {} (#{} of run {}) commit {}",
        shown.step, shown.index, shown.run, shown.commit
    )?;
    writeln!(
        out,
        "decision {}{}",
        shown.digest,
        match shown.digest_matches {
            Some(true) => "  (the stored decision's digest matches)",
            Some(false) => "  (MISMATCH: the stored decision is not the receipt's)",
            None => "",
        }
    )?;
    writeln!(
        out,
        "source {}",
        shown
            .source
            .as_deref()
            .unwrap_or("apply (a plan: its receipt has no Step-Source)")
    )?;
    match shown.tree_matches {
        Some(true) => writeln!(out, "commit the decision applied to its parent")?,
        Some(false) => writeln!(
            out,
            "PROBLEM: the commit is not its decision applied to its parent{} (a tree changed under a kept receipt; `git steps verify` fails)",
            if shown.differs.is_empty() {
                " (the decision does not apply there)".to_string()
            } else {
                format!("; these paths differ: {}", shown.differs.join(", "))
            }
        )?,
        None => {}
    }
    match &shown.decision {
        Some(d) => writeln!(
            out,
            "\n{}",
            serde_json::to_string_pretty(d).unwrap_or_default()
        )?,
        None => writeln!(
            out,
            "\n({})",
            shown.stored_note.as_deref().unwrap_or("no decision")
        )?,
    }
    if let Some(i) = &shown.intent {
        writeln!(
            out,
            "\nintent: {}",
            serde_json::to_string(i).unwrap_or_default()
        )?;
    }
    writeln!(out, "\n{}", shown.diff.trim_end())?;
    Ok(())
}
