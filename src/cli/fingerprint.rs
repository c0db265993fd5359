//! `git steps fingerprint`: the SPEC's artifact fingerprint of a tree.
//!
//! This file parses and renders; what it shows comes from
//! [`crate::run::inspect::fingerprint`].

use std::io::Write;

use super::{emit_json, Ctx, RunArgs};
use crate::error::Result;
use crate::run::inspect;

/// Print the artifact fingerprint of a commit's tree.
///
/// SHA-256 over every file's mode, path and content hash (SPEC
/// "Fingerprints"), for REV or the durable head. `--history` prints the
/// history fingerprint of the run's receipts instead; `--json` gives both.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A commit (default: the run's durable head).
    #[arg(value_name = "REV")]
    rev: Option<String>,
    /// Print the history fingerprint instead.
    #[arg(long)]
    history: bool,
    #[command(flatten)]
    run: RunArgs,
}

pub fn run(ctx: &Ctx, a: Args, out: &mut dyn Write) -> Result<()> {
    let (repo, s) = ctx.open_audit(&a.run)?;
    let f = inspect::fingerprint(&repo, &s, a.rev.as_deref())?;
    if ctx.ui.json {
        return emit_json(out, "fingerprint", &f);
    }
    writeln!(out, "{}", if a.history { &f.history } else { &f.artifact })?;
    Ok(())
}
