//! `git steps adopt`: commits without a receipt join the run.
//!
//! This file parses and renders; what it shows comes from
//! [`crate::run::adopt::adopt`].

use std::io::Write;

use super::terminal::Terminal;
use super::{emit_json, Ctx, Failure, RunArgs};
use crate::run::adopt::{self, AdoptOptions};

/// List the commits inside the run that carry no receipt (a human's fixes
/// made with plain git) and, confirmed, adopt them.
///
/// Adopting writes one receipted commit on top of them that names each
/// (`Step-Adopt: <commit>`), pushed like a step: from then on `apply`,
/// `run`, `status` and `verify` take them as part of the run, and their
/// changes count for duplicated hunks. Nothing is rewritten or
/// force-pushed; a commit that carries another run's receipt is refused
/// (exit 3). Without --yes it only lists them (`--json` confirms, for
/// programs; add --dry-run to list with --json).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Adopt them (without it: list them and say how).
    #[arg(long, short = 'y')]
    yes: bool,
    /// List only, even with --json.
    #[arg(long, conflicts_with = "yes")]
    dry_run: bool,
    /// The adopting step's id [default: adopt:<newest adopted commit>].
    #[arg(long, value_name = "ID")]
    id: Option<String>,
    #[command(flatten)]
    run: RunArgs,
}

pub fn run(ctx: &Ctx, a: Args, out: &mut dyn Write) -> Result<(), Failure> {
    let (repo, s) = ctx.open_deepened(&a.run)?;
    let confirmed = a.yes || (ctx.ui.json && !a.dry_run);
    let opts = AdoptOptions {
        id: a.id,
        dry_run: !confirmed,
    };
    let mut ui = Terminal::new(ctx.ui, !confirmed);
    let report = adopt::adopt(&repo, &s, &opts, &mut ui)?;
    if ctx.ui.json {
        emit_json(out, "adopt", &report)?;
        return Ok(());
    }
    for c in &report.commits {
        writeln!(out, "{} {}  ({})", &c.commit[..12], c.subject, c.author)?;
    }
    match report.status {
        "nothing" => ctx
            .ui
            .status("nothing to adopt: every commit of the run carries a receipt"),
        "would-adopt" => ctx.ui.status(&format!(
            "{} commit(s) without a receipt; `git steps adopt --yes` adopts them as step {}",
            report.commits.len(),
            report.step.as_deref().unwrap_or("?")
        )),
        _ => ctx.ui.status(&format!(
            "adopted {} commit(s) as step {} ({})",
            report.commits.len(),
            report.step.as_deref().unwrap_or("?"),
            report.receipt.as_deref().map_or("", |r| &r[..12])
        )),
    }
    Ok(())
}
