//! `git steps status`: where the run stands.
//!
//! This file parses and renders; what it shows comes from
//! [`crate::run::inspect::status`].

use std::io::Write;

use super::{emit_json, Ctx, RunArgs};
use crate::error::Result;
use crate::plan::reader::Plan;
use crate::run::inspect;

/// Show where the run stands.
///
/// The durable head, the local head and whether they agree, the last step,
/// the steps of PLAN still pending, uncommitted changes, and the effects of
/// the run's steps by state.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A plan to count pending steps against; `-` reads stdin.
    #[arg(value_name = "PLAN")]
    plan: Option<String>,
    #[command(flatten)]
    run: RunArgs,
}

pub fn run(ctx: &Ctx, a: Args, out: &mut dyn Write) -> Result<()> {
    let (repo, s) = ctx.open_audit(&a.run)?;
    let plan = a
        .plan
        .as_deref()
        .map(|p| Plan::open(p, repo.path()))
        .transpose()?;
    let st = inspect::status(&repo, &s, plan.as_ref())?;
    if ctx.ui.json {
        return emit_json(out, "status", &st);
    }
    let head = |h: &Option<String>| h.clone().unwrap_or_else(|| "(no commits)".into());
    // The run `init` set up here (a fresh box resuming it) rather than
    // another run an audit reads.
    let set_up_here = crate::settings::config_str(&repo, crate::keys::BRANCH.name)?.as_deref()
        == Some(s.branch.as_str());
    writeln!(out, "run:           {} (branch {})", st.run, st.branch)?;
    if let Some(pid) = st.running {
        writeln!(
            out,
            "running:       git-steps pid {pid} is applying in this repository now: what follows may change under it"
        )?;
    }
    match (&st.remote_name, &st.remote_url) {
        (_, None) => writeln!(
            out,
            "durable:       this local repository (no remote is set up for the run)"
        )?,
        (Some(name), Some(url)) => writeln!(out, "durable:       remote {name} ({url})")?,
        (None, Some(url)) => writeln!(out, "durable:       remote {url}")?,
    }
    match &st.remote_error {
        Some(e) => writeln!(
            out,
            "durable head:  UNKNOWN: the remote cannot be reached ({e}); what follows is this box's view, not confirmed by the remote"
        )?,
        None => writeln!(out, "durable head:  {}", head(&st.durable_head))?,
    }
    writeln!(out, "local head:    {}", head(&st.local_head))?;
    writeln!(
        out,
        "agree:         {}",
        if st.remote_error.is_some() {
            "unknown (the remote cannot be reached)".to_string()
        } else if st.agree {
            "yes".to_string()
        } else if st.local_head.is_none() && !set_up_here {
            // An audit of a run this clone never checked out: nothing to
            // reconcile, and a writing command is not what the reader asked.
            format!(
                "not checked out here (an audit reads the remote's; `git switch {}` to work on the run)",
                st.branch
            )
        } else {
            "NO (`git steps resume` reconciles them)".to_string()
        }
    )?;
    writeln!(
        out,
        "steps applied: {} (last: {}){}",
        st.steps_applied,
        st.last_step.as_deref().unwrap_or("none"),
        match (st.steps_local, st.durable_not_here) {
            (Some(_), _) if st.local_head.is_none() && !set_up_here => String::new(),
            (Some(n), _) => format!(
                "; this box's branch holds {n}: `git steps resume` (or the next apply) brings it up"
            ),
            (None, true) => " on this box; the durable head is not on this box yet: `git steps resume` fetches it".into(),
            _ => String::new(),
        }
    )?;
    if let Some(p) = &st.pending {
        writeln!(
            out,
            "pending:       {}{}",
            p.len(),
            if p.is_empty() {
                String::new()
            } else {
                format!(" (next: {})", p[0])
            }
        )?;
    }
    if !st.hooks.is_empty() {
        writeln!(
            out,
            "hooks:         {}",
            crate::run::inspect::hooks_sentence(&st.hooks, &st.hooks_run)
        )?;
    }
    if let Some(i) = &st.interrupted {
        writeln!(
            out,
            "worktree:      an update to step {} was cut short by a crash ({}): the next `git steps apply` or `resume` finishes it; these are not your edits",
            i.step,
            i.paths.join(", ")
        )?;
        let others: Vec<&String> = st.dirty.iter().filter(|p| !i.paths.contains(p)).collect();
        if !others.is_empty() {
            writeln!(
                out,
                "               and {} other changed path(s): {}",
                others.len(),
                others
                    .iter()
                    .map(|p| p.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )?;
        }
    } else if st.dirty.is_empty() {
        writeln!(out, "worktree:      clean")?;
    } else {
        writeln!(
            out,
            "worktree:      {} changed path(s): {}",
            st.dirty.len(),
            st.dirty.join(", ")
        )?;
    }
    if let Some(j) = &st.journal {
        if !j.read {
            writeln!(
                out,
                "journal:       {} (not on this box yet; the next `run` fetches it)",
                &j.head[..12]
            )?;
        } else if let Some(p) = &j.pending {
            writeln!(
                out,
                "journal:       {} decision(s); step index {} ({}) is RECORDED BUT NOT APPLIED: the next `run` applies it without asking the decider",
                j.entries, p.index, p.step_id
            )?;
        } else if let Some(r) = &j.refused {
            writeln!(
                out,
                "journal:       {} decision(s); the last answer for step index {} ({}) was refused: {}",
                j.entries,
                r.index,
                r.step_id,
                r.reason.as_deref().unwrap_or("")
            )?;
        } else {
            writeln!(out, "journal:       {} decision(s), all applied", j.entries)?;
        }
    }
    if let Some(e) = &st.effects {
        let mut counts = format!(
            "{} of {} delivered, {} pending, {} failed",
            e.delivered, e.total, e.pending, e.failed
        );
        if e.abandoned > 0 {
            counts.push_str(&format!(", {} abandoned", e.abandoned));
        }
        if !e.read {
            counts = format!("{}", e.total);
        }
        let tail = if !e.read {
            " (their recorded outcomes are not on this box yet: `git steps effects` fetches them)"
        } else if e.pending + e.failed > 0 && e.delivers != "all" {
            &*format!(
                "; this box delivers {} (steps.effects={}): a box that delivers them does, in order, with their keys",
                if e.delivers == "none" { "none" } else { "no command" },
                e.delivers
            )
        } else if e.pending + e.failed > 0 {
            "; the next `apply`, `run` or `resume` delivers the pending and failed ones with their keys (`git steps effects` lists them)"
        } else {
            ""
        };
        writeln!(out, "effects:       {counts}{tail}")?;
    }
    for p in &st.problems {
        writeln!(out, "problem:       {p}")?;
    }
    Ok(())
}
