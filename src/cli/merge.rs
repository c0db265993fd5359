//! `git steps merge-message` and `git steps archive`: a run's provenance
//! for after its merge.
//!
//! This file parses and renders; what it shows comes from
//! [`crate::run::provenance::merge_message`] and
//! [`crate::run::provenance::archive`].

use std::io::Write;

use super::{emit_json, Ctx, RunArgs};
use crate::error::{Error, Result};
use crate::run::provenance;
use crate::settings::Settings;

/// Print the commit message for a squash merge of the run.
///
/// A summary of the run's steps, then the trailers `Steps-Run`,
/// `Steps-Head`, `Steps-Count`, `Steps-History` and `Steps-Artifact`:
/// paste it into a forge's squash dialog, or use it with `git merge --squash
/// <branch> && git commit -F <file>`. The run's head is read from the
/// durable domain, and the run is kept under refs/steps/runs/<run> there
/// first (as `git steps archive` does), so it can be audited after its
/// branch is deleted.
#[derive(Debug, clap::Args)]
pub struct MessageArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Do not keep the run under refs/steps/runs/<run>.
    #[arg(long)]
    no_archive: bool,
}

/// Keep the run's head under refs/steps/runs/<run> on the durable domain.
///
/// A forge deletes a merged branch; this ref stays, so `git log
/// refs/steps/runs/<run>` and `git steps verify --merged` still read the
/// run. It only moves forward (compare-and-swap); `run --decider` keeps the
/// run when the decider says done, and `merge-message` keeps it too.
#[derive(Debug, clap::Args)]
pub struct ArchiveArgs {
    #[command(flatten)]
    run: RunArgs,
}

/// " on <remote>", or nothing when the local repository is durable.
fn on(s: &Settings) -> String {
    s.remote
        .as_ref()
        .map(|r| format!(" on {}", r.spec))
        .unwrap_or_default()
}

/// The run's durable head, which must exist.
fn durable_head(repo: &git2::Repository, s: &Settings) -> Result<git2::Oid> {
    crate::run::chain::durable_head(repo, s)?.ok_or_else(|| {
        Error::input(format!(
            "run {} has no steps: its branch {} does not exist{}",
            s.run,
            s.branch,
            on(s)
        ))
    })
}

pub fn message(ctx: &Ctx, a: MessageArgs, out: &mut dyn Write) -> Result<()> {
    let (repo, s) = ctx.open_audit(&a.run)?;
    let head = durable_head(&repo, &s)?;
    // A box whose branch is not the durable head would squash something
    // else than the message describes.
    let local = repo.refname_to_id(&s.refname()).ok();
    if s.remote.is_some() && local != Some(head) {
        ctx.ui.note(&format!(
            "this box's {} is at {}, the durable head is {}: the message describes the durable head; squash that (`git steps resume` brings this box up to it, or merge {})",
            s.branch,
            local.map_or("nothing".to_string(), crate::git::short),
            crate::git::short(head),
            s.remote
                .as_ref()
                .and_then(|r| repo.find_remote(&r.spec).ok().map(|_| format!("{}/{}", r.spec, s.branch)))
                .unwrap_or_else(|| "the remote's branch".into())
        ));
    }
    let m = provenance::merge_message(&repo, &s.run, head)?;
    let archived = if a.no_archive {
        None
    } else {
        Some(provenance::archive(&repo, &s, head)?)
    };
    if ctx.ui.json {
        return emit_json(
            out,
            "merge-message",
            &serde_json::json!({
                "run": m.run,
                "head": m.head,
                "count": m.count,
                "history": m.history,
                "artifact": m.artifact,
                "message": m.message,
                "local_head": local.map(|l| l.to_string()),
                "archived": archived,
            }),
        );
    }
    if let Some(k) = &archived {
        if k.moved {
            ctx.ui.note(&format!(
                "kept run {} at {} under {}{}",
                s.run,
                &k.head[..12],
                k.refname,
                on(&s)
            ));
        }
    }
    write!(out, "{}", m.message)?;
    Ok(())
}

pub fn archive(ctx: &Ctx, a: ArchiveArgs, out: &mut dyn Write) -> Result<()> {
    let (repo, s) = ctx.open(&a.run)?;
    let head = durable_head(&repo, &s)?;
    let k = provenance::archive(&repo, &s, head)?;
    if ctx.ui.json {
        return emit_json(out, "archive", &k);
    }
    writeln!(
        out,
        "{} run {} at {} under {}{}",
        if k.moved { "kept" } else { "already kept:" },
        s.run,
        &k.head[..12],
        k.refname,
        on(&s)
    )?;
    Ok(())
}
