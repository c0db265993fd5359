//! `git steps resume`: reconcile, and optionally apply a plan.
//!
//! This file parses and renders; what it shows comes from
//! [`crate::run::session::Session::open`] (bring-up: lock, repair,
//! reconcile), then the plan as `apply`.

use std::io::Write;

use super::terminal::Terminal;
use super::{emit_json, Ctx, Failure, RunArgs};
use crate::run::session::{ApplyOptions, Reporter, Session};

/// Reconcile the local and durable branches (and apply PLAN, if given).
///
/// Fetch the durable branch; fast-forward a local branch that is behind;
/// push local receipted commits the remote lacks; repair a worktree a crash
/// left mid-update (saving what it found under refs/steps/rescue/<run>/<n>);
/// refuse on divergence. With PLAN, then apply it as `apply` does.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A plan to apply after reconciling; `-` reads stdin.
    #[arg(value_name = "PLAN")]
    plan: Option<String>,
    #[command(flatten)]
    run: RunArgs,
    /// Print what reconcile (and the plan) would do; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Apply steps whose hunks repeat an earlier change [config: steps.allowDuplicateHunks].
    #[arg(long)]
    allow_duplicate_hunks: bool,
    /// With PLAN: make up to N steps durable in one push [config: steps.batch; default 1].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    batch: Option<u32>,
}

pub fn run(ctx: &Ctx, a: Args, out: &mut dyn Write) -> Result<(), Failure> {
    if let Some(plan) = a.plan {
        return super::apply::run(
            ctx,
            super::apply::Args {
                plan,
                run: a.run,
                dry_run: a.dry_run,
                allow_duplicate_hunks: a.allow_duplicate_hunks,
                batch: a.batch,
            },
            out,
        );
    }
    let (repo, s) = ctx.open_deepened(&a.run)?;
    crate::workdir::worktree::workdir(&repo)?;
    let opts = ApplyOptions {
        dry_run: a.dry_run,
        allow_duplicate_hunks: false,
        batch: 1,
    };
    let mut ui = Terminal::new(ctx.ui, a.dry_run);
    let opened = Session::open(&repo, &s, None, opts, &mut ui)?;
    let (repair, reconciled) = (opened.repair().clone(), opened.reconciled().clone());
    // The effects of durable steps that were never delivered (a crash
    // between a step's push and its effects) go now. A history `apply`
    // would refuse is left for `apply` and `verify` to say so.
    let (effects, effects_pending) = match opened.load(false) {
        Ok(mut session) => {
            let delivered = session.deliver_effects(&mut ui);
            let fin = session.finish()?;
            delivered?;
            (fin.effects, fin.effects_pending)
        }
        Err(e) => {
            ui.note(&format!("effects not checked: {e}"));
            (Vec::new(), Vec::new())
        }
    };
    if ctx.ui.json {
        emit_json(
            out,
            "resume",
            &serde_json::json!({
                "run": s.run,
                "branch": s.branch,
                "durable": s.durable_kind(),
                "dry_run": a.dry_run,
                "repair": repair,
                "reconcile": reconciled,
                "effects": effects,
                "effects_pending": effects_pending,
            }),
        )?;
    } else {
        let head = reconciled.local.as_deref().unwrap_or("(no commits)");
        writeln!(
            out,
            "{} {} at {head}",
            if a.dry_run { "would resume" } else { "resumed" },
            s.branch
        )?;
    }
    Ok(())
}
