//! `git steps init`: record the run's settings in git config.

use std::io::Write;

use super::{emit_json, Ctx, RunArgs};
use crate::error::Result;
use crate::settings;

/// Store the run's settings in git config.
///
/// Writes `steps.branch`, `steps.run`, `steps.remote` and `steps.transport`
/// to the repository's config (with linked worktrees, to this worktree's own
/// config: each worktree holds its own run), so every later command (and a fresh box that
/// runs the same `init`) resumes the same run. With `--remote` the remote is
/// the durable domain: a step is durable once the remote accepts its branch
/// update. With no remote the durable domain is this local repository: a
/// step is durable once its branch update is fsynced here.
///
/// `init` with another `--branch` and no `--run` starts a new run on that
/// branch, whose id is the branch name; the same `--branch` again keeps the
/// run it has.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: RunArgs,
}

pub fn run(ctx: &Ctx, mut a: Args, out: &mut dyn Write) -> Result<()> {
    if a.run.run.is_none() {
        // Another branch is another run: its id is not the old run's.
        let repo = crate::git::open(&ctx.repo)?;
        let stored = settings::config_str(&repo, "steps.branch")?;
        if let (Some(new), Some(old)) = (&a.run.branch, stored) {
            if *new != old {
                a.run.run = Some(new.clone());
            }
        }
    }
    let (repo, s) = ctx.open_for_init(&a.run)?;
    crate::git::ensure_branch_is_ours(&repo, &s.branch)?;
    if let Some(r) = &s.remote {
        crate::sync::remote::check_spec(&repo, &r.spec)?;
    }
    // No run applies while its settings change.
    let _lock = crate::workdir::lock::acquire(repo.path())?;
    settings::store(&repo, &s)?;
    if ctx.json {
        emit_json(
            out,
            "init",
            &serde_json::json!({
                "branch": s.branch,
                "run": s.run,
                "durable": s.durable_kind(),
                "remote": s.remote.as_ref().map(|r| r.spec.clone()),
            }),
        )?;
    } else {
        writeln!(out, "run {} on branch {}", s.run, s.branch)?;
    }
    // As git's transfer.credentialsInUrl=warn: a password in the remote's
    // URL ends up in config files and process lists (git-steps never
    // prints it).
    if let Some(r) = &s.remote {
        let url = match repo.find_remote(&r.spec) {
            Ok(named) => String::from_utf8_lossy(named.url_bytes()).into_owned(),
            Err(_) => r.spec.clone(),
        };
        let shown = crate::git::redact(&url);
        if shown != url {
            ctx.status(&format!(
                "warning: URL '{shown}' uses plaintext credentials; a credential helper keeps them out of the URL (`git config credential.helper`)"
            ));
        }
    }
    let hooks = crate::git::installed_hooks(&repo);
    if !hooks.is_empty() {
        let run = crate::run::inspect::hooks_run(&repo)?;
        ctx.status(&format!(
            "note: hooks: {}",
            crate::run::inspect::hooks_sentence(&hooks, &run)
        ));
    }
    Ok(())
}
