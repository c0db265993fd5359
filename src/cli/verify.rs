//! `git steps verify`: check every invariant of the history.
//!
//! This file parses and renders; what it shows comes from
//! [`crate::run::inspect::verify`] (and `run::provenance::merged` for a
//! merge).

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
    #[arg(value_name = "PLAN", conflicts_with = "merged")]
    plan: Option<String>,
    /// Check a commit on the target branch (a squash, a rebase merge or a
    /// merge) against the run it merged, kept under refs/steps/runs/<run>:
    /// its trailers or copied receipts, the run's history, and every path
    /// the run changed (each difference named).
    #[arg(long, value_name = "COMMIT")]
    merged: Option<String>,
    #[command(flatten)]
    run: RunArgs,
}

pub fn run(ctx: &Ctx, a: Args, out: &mut dyn Write) -> Result<(), Failure> {
    if let Some(rev) = &a.merged {
        return merged(ctx, rev, &a.run, out);
    }
    let (repo, s) = ctx.open_audit(&a.run)?;
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
        hint: format!(
            "each problem above names its step and what is wrong; `git steps log --run {run}` lists the steps and `git steps show <step> --run {run}` shows one (its decision, and the diff its commit holds); docs/troubleshooting.md, \"verify reports problems\", says what to do for each kind",
            run = s.run
        ).into(),
    })
}

/// `verify --merged`: read-only, but for fetching the kept run from the
/// durable remote (the configured one, or the clone's remotes), and the
/// whole history of a shallow clone.
fn merged(ctx: &Ctx, rev: &str, run: &RunArgs, out: &mut dyn Write) -> Result<(), Failure> {
    // No run need be set up here (a fresh clone of the target branch):
    // the settings only say where the kept run may be.
    let repo = crate::git::open(&ctx.repo)?;
    let commit = repo
        .revparse_single(rev)
        .and_then(|o| o.peel_to_commit())
        .map_err(|e| Error::input(format!("--merged {rev:?}: {}", e.message())))?
        .id();
    // Settings that cannot work (libgit2 asked for over ssh) are refused
    // as every command refuses them; any other unreadable setting leaves
    // the clone's own remotes to check.
    let configured = match crate::settings::resolve(&repo, &run.overrides()) {
        Err(e @ Error::Usage { .. }) => return Err(e.into()),
        r => r.ok().and_then(|s| s.remote),
    };
    let remote = |spec: String| crate::settings::Remote {
        transport: run
            .transport
            .unwrap_or_else(|| crate::settings::remote::default_transport(&repo, &spec)),
        spec,
    };
    // The configured remote, or every remote of the clone, origin first.
    let remotes: Vec<crate::settings::Remote> = match configured {
        Some(r) => vec![r],
        None => {
            let mut names = crate::git::remote_names(&repo);
            names.sort_by_key(|n| n != "origin");
            names.into_iter().map(remote).collect()
        }
    };
    for r in &remotes {
        crate::settings::remote::refuse_libgit2_ssh(&repo, r)?;
    }
    // A shallow CI checkout is made whole first (never a verdict on a cut
    // history); one that stays shallow is refused by the check.
    let repo = match crate::run::provenance::merged::unshallow(repo.path(), &remotes)? {
        Some(from) => {
            ctx.ui.note(&format!(
                "this clone was shallow: fetched its whole history from {from} (`git fetch --unshallow`)"
            ));
            crate::git::open(&ctx.repo)?
        }
        None => repo,
    };
    let v = crate::run::provenance::merged::check(&repo, &remotes, commit, run.run.as_deref())?;
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
            "{}: {} {} of run {}: {} step(s), head {}, history {}",
            if v.ok { "ok" } else { "FAILED" },
            v.kind,
            &v.commit[..12],
            v.run,
            v.steps,
            v.head.as_deref().map_or("unknown", |h| &h[..12]),
            v.history.as_deref().unwrap_or("unknown")
        )?;
    }
    if v.ok {
        return Ok(());
    }
    Err(Failure {
        json_written: ctx.ui.json,
        partial: None,
        error: Error::from(Refusal {
            kind: RefusalKind::BrokenHistory,
            step: None,
            saw: format!(
                "{} problem(s) with {} {} of run {}: {}",
                v.problems.len(),
                v.kind,
                &v.commit[..12],
                v.run,
                v.problems[0]
            ),
            would: "report the merge as carrying the run".into(),
            hint: "each problem above names what differs; `git log refs/steps/runs/<run>` shows the run".into(),
        }),
    })
}
