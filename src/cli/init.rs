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
/// A run never lands on the repository's default branch unless `--branch`
/// names it: without `--branch`, a new run's branch is `steps/<run id>`,
/// and its id is `--run` or the checked-out branch's name (on `main`: run
/// `main` on `steps/main`), so the same `init` on a fresh clone resumes the
/// same run. `init` again with no flags keeps the run it has. `init` with
/// another `--branch` and no `--run` starts a new run on that branch, whose
/// id is the branch name.
///
/// Without `--remote`, a clone with exactly one remote uses it (and says
/// so); `--remote ''` keeps the durable domain local. The run branch
/// tracks its branch on a named remote (`git status` shows ahead/behind).
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: RunArgs,
}

pub fn run(ctx: &Ctx, mut a: Args, out: &mut dyn Write) -> Result<()> {
    // `git -c steps.…` lasts one command; init stores the run's settings,
    // and would read them back as settings some other file holds.
    let given: Vec<String> = crate::git::cmdline::entries()
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| {
            // The settings init stores; a `-c` of any other key (a box's
            // authority for effects, say) is this command's, as git's.
            [
                crate::keys::BRANCH,
                crate::keys::RUN,
                crate::keys::REMOTE,
                crate::keys::TRANSPORT,
            ]
            .iter()
            .any(|c| c.name.eq_ignore_ascii_case(k))
        })
        .collect();
    if !given.is_empty() {
        return Err(crate::Error::Usage {
            message: format!(
                "init stores a run's settings, and `git -c` sets {} for this one command only",
                given.join(", ")
            ),
            hint: "pass them to init as flags (--branch, --run, --remote, --transport); nothing was changed".into(),
        });
    }
    let repo = crate::git::open(&ctx.repo)?;
    let stored = settings::config_str(&repo, crate::keys::BRANCH.name)?;
    let stored_transport = settings::config_str(&repo, crate::keys::TRANSPORT.name)?;
    match (&a.run.branch, &stored) {
        // Another branch is another run: its id is not the old run's.
        (Some(new), Some(old)) if a.run.run.is_none() && new != old => {
            a.run.run = Some(settings::run_of_branch(&repo, new));
        }
        // A new run (or another one, by --run): on its own branch.
        (None, _) if stored.is_none() || a.run.run.is_some() => {
            let run = match &a.run.run {
                Some(r) => r.clone(),
                None => settings::default_run(&repo)?,
            };
            a.run.branch = Some(format!("steps/{run}"));
            a.run.run = Some(run);
        }
        _ => {}
    }
    let mut picked = None;
    // Only for a new run: an existing run keeps its durable domain (a
    // local one chosen with `--remote ''` included).
    if a.run.remote.is_none()
        && stored.is_none()
        && settings::config_str(&repo, crate::keys::REMOTE.name)?.is_none()
    {
        let remotes = crate::git::remote_names(&repo);
        match remotes.as_slice() {
            [only] => {
                a.run.remote = Some(only.clone());
                picked = Some(only.clone());
            }
            [] => {}
            many => {
                return Err(crate::Error::Usage {
                    message: format!(
                        "this clone has {} remotes ({}): which one the run is durable on is yours to say",
                        many.len(),
                        many.join(", ")
                    ),
                    hint: format!(
                        "name it: `git steps init --remote {}`; `--remote ''` keeps the steps on this box alone; nothing was changed",
                        many[0]
                    ).into(),
                })
            }
        }
    }
    if let Some(b) = &a.run.branch {
        settings::refuse_branch_clash(&repo, b)?;
    }
    let others = runs_on_remotes(&repo, a.run.branch.as_deref());
    // The run's own branch on a remote: this init resumes it.
    let resumed = a.run.branch.as_deref().is_some_and(|b| {
        crate::git::remote_names(&repo).iter().any(|r| {
            repo.find_reference(&format!("refs/remotes/{r}/{b}"))
                .is_ok()
        })
    });
    drop(repo);
    let (repo, s) = ctx.open_for_init(&a.run)?;
    crate::git::ensure_branch_is_ours(&repo, &s.branch)?;
    if let Some(r) = &s.remote {
        crate::sync::remote::check_spec(&repo, &r.spec)?;
    }
    // No run applies while its settings change.
    let _lock = crate::lock::acquire(repo.path())?;
    settings::store(&repo, &s)?;
    if !ctx.ui.json || ctx.ui.verbose {
        ctx.ui.status(&s.durable_domain());
    }
    // A fresh clone checked out elsewhere than the box that started a run
    // would start another: name the runs the remotes hold.
    if !others.is_empty() && stored.is_none() {
        ctx.ui.status(&format!(
            "note: the remote holds other runs: {}; to go on with one of them instead of run {}, `git steps init --run <id>`",
            others.join(", "),
            s.run
        ));
    }
    if let (None, Some(t), Some(r)) = (a.run.transport, &stored_transport, &s.remote) {
        if t == r.transport.as_str() {
            ctx.ui.status(&format!(
                "note: the transport stays {t}, as an earlier `init` set it (`--transport {}` changes it)",
                if t == "git" { "libgit2" } else { "git" }
            ));
        }
    }
    if resumed && stored.is_none() {
        ctx.ui.status(&format!(
            "note: the remote already holds run {} on {}: the next `git steps apply` (or `resume`) goes on with it",
            s.run, s.branch
        ));
    }
    if let Some(r) = &picked {
        ctx.ui.status(&format!(
            "note: the durable domain is {r}, this clone's only remote (`git steps init --remote ''` keeps it local)"
        ));
    }
    if ctx.ui.json {
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
        if crate::git::head_branch(&repo).as_deref() != Some(s.branch.as_str()) {
            ctx.ui.status(&format!(
                "note: `git steps apply` (or `run`, `record`) switches this worktree to {}, carrying uncommitted changes along as `git switch` does",
                s.branch
            ));
        }
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
            ctx.ui.status(&format!(
                "warning: URL '{shown}' uses plaintext credentials; a credential helper keeps them out of the URL (`git config credential.helper`)"
            ));
        }
    }
    let hooks = crate::git::installed_hooks(&repo);
    if !hooks.is_empty() {
        let run = crate::run::inspect::hooks_run(&repo, &s);
        ctx.ui.status(&format!(
            "note: hooks: {}",
            crate::run::inspect::hooks_sentence(&hooks, &run)
        ));
    }
    Ok(())
}

/// The run branches (`steps/…`) the remotes hold as this clone knows them,
/// other than `branch`: `origin/steps/feature (run feature)`.
fn runs_on_remotes(repo: &git2::Repository, branch: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    for remote in crate::git::remote_names(repo) {
        let prefix = format!("refs/remotes/{remote}/");
        let Ok(refs) = repo.references_glob(&format!("{prefix}steps/*")) else {
            continue;
        };
        for r in refs.flatten() {
            let Some(name) = r.name().ok().and_then(|n| n.strip_prefix(&prefix)) else {
                continue;
            };
            if Some(name) != branch {
                let run = settings::run_of_branch(repo, name);
                out.push(format!("{remote}/{name} (run {run})"));
            }
        }
    }
    out
}
