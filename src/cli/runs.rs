//! `git steps runs`: every run this clone and its remote hold.
//!
//! This file parses and renders; what it shows comes from
//! [`crate::run::inspect::audit::runs`].

use std::io::Write;

use super::{emit_json, Ctx, RunArgs};
use crate::error::Result;
use crate::run::inspect::audit;

/// List every run this clone and its remote hold.
///
/// Per run: its branch, its steps, the last step and when it landed, the
/// durable head (and this clone's, when they differ), pending effects, and
/// whether the default branch merged it (its head in the default branch's
/// history, or a squash merge naming the run). Runs are found as branches
/// `steps/<run>` (and the run set up here) and archived heads
/// `refs/steps/runs/<run>`, here and on the remote.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: RunArgs,
}

pub fn run(ctx: &Ctx, a: Args, out: &mut dyn Write) -> Result<()> {
    // Every run, not the one set up here: resolved without the notes a
    // command on one run says.
    let repo = crate::git::open(&ctx.repo)?;
    if let Some(r) = a.run.remote.as_deref().filter(|r| !r.is_empty()) {
        crate::sync::remote::check_spec(&repo, r)?;
    }
    let mut s = crate::settings::resolve(
        &repo,
        &crate::settings::Overrides {
            follow: true,
            ..a.run.overrides()
        },
    )?;
    // No durable domain set up here: the runs a remote holds are still
    // listed, from the clone's `origin` (or its only remote).
    if s.remote.is_none()
        && a.run.remote.is_none()
        && crate::settings::config_str(&repo, crate::keys::REMOTE.name)?.is_none()
    {
        let names = crate::git::remote_names(&repo);
        let pick = names
            .iter()
            .find(|n| n.as_str() == "origin")
            .or(if names.len() == 1 {
                names.first()
            } else {
                None
            });
        if let Some(spec) = pick {
            s.remote = Some(crate::settings::Remote {
                spec: spec.clone(),
                transport: crate::settings::remote::default_transport(&repo, spec),
            });
        }
    }
    let runs = audit::runs(&repo, &s)?;
    if let Some(e) = &runs.remote_error {
        ctx.ui.note(&format!(
            "the remote could not be asked ({e}): only this clone's runs are listed"
        ));
    }
    if ctx.ui.json {
        return emit_json(out, "runs", &runs);
    }
    if runs.runs.is_empty() {
        ctx.ui.status(&format!(
            "no runs here{}",
            runs.remote
                .as_deref()
                .map(|r| format!(" nor on {r}"))
                .unwrap_or_default()
        ));
    }
    for r in &runs.runs {
        let head = match (&r.durable_head, &r.local_head) {
            (Some(d), Some(l)) if d == l => format!("durable {}", sh(d)),
            (Some(d), Some(l)) => format!("durable {} (here {})", sh(d), sh(l)),
            (Some(d), None) => format!("durable {} (not here)", sh(d)),
            (None, Some(l)) => format!("here {} (not on the remote)", sh(l)),
            (None, None) => match &r.archived_head {
                Some(a) => format!("archived {}", sh(a)),
                None => "no head".into(),
            },
        };
        // A kept head that is not the branch's (steps after `archive`).
        let head = match &r.archived_head {
            Some(a)
                if r.durable_head
                    .as_ref()
                    .or(r.local_head.as_ref())
                    .is_some_and(|h| h != a) =>
            {
                format!("{head}, archived {}", sh(a))
            }
            _ => head,
        };
        writeln!(
            out,
            "{}{}  {}  {} step(s){}  {}{}{}",
            if r.current { "* " } else { "  " },
            r.run,
            r.branch,
            r.steps,
            r.last_step
                .as_deref()
                .map(|l| format!(
                    ", last {l} at {}",
                    r.last_step_date.as_deref().unwrap_or("?")
                ))
                .unwrap_or_default(),
            head,
            if r.pending_effects > 0 {
                format!("  {} pending effect(s)", r.pending_effects)
            } else {
                String::new()
            },
            r.merged
                .as_deref()
                .map(|m| format!("  merged: {m}"))
                .unwrap_or_else(|| "  not merged".into())
        )?;
    }
    Ok(())
}

/// The first 12 hex digits of an object id.
fn sh(id: &str) -> &str {
    &id[..id.len().min(12)]
}
