//! `git steps log`: the step history, read from the receipts.
//!
//! This file parses and renders; what it shows comes from
//! [`crate::run::inspect::log`].

use std::io::Write;

use super::{emit_json, Ctx, RunArgs};
use crate::error::Result;
use crate::run::inspect;

/// List the run's steps, read from their receipts.
///
/// Per step: index, step id, decision digest, commit, lines added and
/// removed, files changed; and any step that repeats a change an earlier
/// step made (a duplicated hunk).
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: RunArgs,
}

/// The `--json` document's data (MCP's `log` answers it too).
pub(super) fn document(
    s: &crate::settings::Settings,
    entries: &[inspect::LogEntry],
) -> serde_json::Value {
    serde_json::json!({"run": s.run, "branch": s.branch, "steps": entries})
}

pub fn run(ctx: &Ctx, a: Args, out: &mut dyn Write) -> Result<()> {
    let (repo, s) = ctx.open_audit(&a.run)?;
    let (entries, from) = inspect::log(&repo, &s)?;
    if let Some(from) = &from {
        ctx.ui.note(from);
    }
    if ctx.ui.json {
        return emit_json(out, "log", &document(&s, &entries));
    }
    for e in &entries {
        writeln!(
            out,
            "{:>4}  {}  {}  {}  +{} -{}  {}{}",
            e.index,
            &e.commit[..12],
            e.step,
            &e.decision[..e.decision.len().min(19)],
            e.added,
            e.removed,
            e.files.join(", "),
            match e.source.as_deref() {
                Some("journal") => "  [from the journal, on resume]".to_string(),
                Some(src) => format!("  [{src}]"),
                None => String::new(),
            }
        )?;
        for d in &e.duplicates {
            writeln!(
                out,
                "      DUPLICATE of step {}: {}{}",
                d.earlier_step,
                d.hunk,
                if d.allowed {
                    "  (allowed by the step)"
                } else {
                    ""
                }
            )?;
        }
    }
    if entries.is_empty() {
        ctx.ui
            .status(&format!("no steps of run {} on {}", s.run, s.branch));
    }
    Ok(())
}
