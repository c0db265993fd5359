//! `git steps apply`: apply a plan, one commit per step.

use std::io::Write;

use super::{emit_json, Ctx, Failure, RunArgs};
use crate::plan::step::Plan;
use crate::run::engine::{self, ApplyOptions, StepOutcome};
use crate::settings;
use crate::sync::reconcile::{Action, Reconciled};
use crate::workdir::repair::Repair;

/// Apply each step of PLAN that has no receipt, in order, one commit per step.
///
/// A step whose receipt exists with the same decision digest is skipped; with
/// another digest it is refused (exit 3), as is a step that repeats a change
/// still in effect (a duplicated hunk). The whole plan is validated before the
/// first step is applied. Rerunning the same command after a crash resumes.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The plan: JSON Lines, one step per line, or one step object; `-` reads stdin.
    #[arg(default_value = "-", value_name = "PLAN")]
    pub(super) plan: String,
    #[command(flatten)]
    pub(super) run: RunArgs,
    /// Print what would be applied, skipped or refused, and what reconcile would do; change nothing.
    #[arg(long)]
    pub(super) dry_run: bool,
    /// Apply steps whose hunks repeat an earlier change [config: steps.allowDuplicateHunks].
    #[arg(long)]
    pub(super) allow_duplicate_hunks: bool,
}

pub(super) fn human(o: &StepOutcome, dry_run: bool) -> String {
    let short = |c: &str| c[..c.len().min(12)].to_string();
    match o {
        StepOutcome::Applied {
            step,
            commit,
            files,
            added,
            removed,
        } => format!(
            "applied {step} {} ({} file(s), +{added} -{removed})",
            short(commit),
            files.len()
        ),
        StepOutcome::WouldApply {
            step,
            files,
            added,
            removed,
            diff,
        } => {
            let mut s = format!(
                "apply {step} ({}, +{added} -{removed})",
                if files.is_empty() {
                    "no change".to_string()
                } else {
                    files.join(", ")
                }
            );
            // The hunks as they would land, indented under the step.
            for l in diff.lines() {
                s.push_str("\n    ");
                s.push_str(l);
            }
            s
        }
        StepOutcome::Skip { step, commit } => format!(
            "{} {step} (receipt {})",
            if dry_run { "skip" } else { "skipped" },
            short(commit)
        ),
    }
}

/// Say on stderr what a worktree repair did.
pub(super) fn print_repair(r: &Repair) {
    match r {
        Repair::Repaired {
            step,
            paths,
            rescue: Some(rescue),
        } => eprintln!(
            "repaired the worktree: an update to step {step} was interrupted ({}); what was there is saved under {rescue}",
            paths.join(", ")
        ),
        Repair::Repaired { step, paths, rescue: None } => eprintln!(
            "would repair the worktree: an update to step {step} was interrupted ({})",
            paths.join(", ")
        ),
        Repair::LeftAlone { paths } => eprintln!(
            "note: uncommitted changes no step explains are left alone (nothing to apply): {}",
            paths.join(", ")
        ),
        Repair::Clean => {}
    }
}

/// Say on stderr what reconcile did.
pub(super) fn print_reconcile(r: &Reconciled, dry_run: bool) {
    let short = |o: &Option<String>| {
        o.as_deref()
            .map(|h| h[..12].to_string())
            .unwrap_or_else(|| "nothing".into())
    };
    let verb = |now: &'static str, later: &'static str| if dry_run { later } else { now };
    match &r.action {
        Action::LocalOnly | Action::InSync => {}
        Action::FastForward { from, steps, .. } => eprintln!(
            "reconcile: {} the local branch from {} to the durable head {} ({steps} commit(s))",
            verb("fast-forwarded", "would fast-forward"),
            short(from),
            short(&r.durable)
        ),
        Action::Push { from, to, steps } => eprintln!(
            "reconcile: {} {steps} local receipted commit(s) the remote lacked ({} → {})",
            verb("pushed", "would push"),
            short(from),
            &to[..12]
        ),
        Action::Fetch { durable } => eprintln!(
            "reconcile: the durable head {} is not fetched; apply would fetch it and fast-forward if it descends from the local head",
            &durable[..12]
        ),
    }
}

pub fn run(ctx: &Ctx, a: Args, out: &mut dyn Write) -> Result<(), Failure> {
    let (repo, s) = ctx.open(&a.run)?;
    let plan = Plan::open(&a.plan, repo.path())?;
    let opts = ApplyOptions {
        dry_run: a.dry_run,
        allow_duplicate_hunks: a.allow_duplicate_hunks
            || settings::config_bool(&repo, "steps.allowDuplicateHunks")?,
    };
    let json = ctx.json;
    let mut on_step = |o: &StepOutcome| {
        if !json {
            let _ = writeln!(out, "{}", human(o, a.dry_run));
            let _ = out.flush();
        }
    };
    let quiet = ctx.quiet;
    let dry_run = a.dry_run;
    let mut on_repair = |r: &Repair| {
        if !quiet {
            print_repair(r)
        }
    };
    let mut on_note = |n: &str| {
        if !quiet {
            eprintln!("note: {n}");
        }
    };
    let mut on_reconcile = |r: &Reconciled| {
        if !quiet {
            print_reconcile(r, dry_run)
        }
    };
    let mut hooks = engine::Hooks {
        on_note: &mut on_note,
        on_repair: &mut on_repair,
        on_reconcile: &mut on_reconcile,
        on_step: &mut on_step,
    };
    match engine::apply_plan(&repo, &s, &plan, &opts, &mut hooks) {
        Ok(report) => {
            if ctx.json {
                emit_json(out, "apply", &report)?;
            } else {
                let applied = report
                    .steps
                    .iter()
                    .filter(|o| {
                        matches!(
                            o,
                            StepOutcome::Applied { .. } | StepOutcome::WouldApply { .. }
                        )
                    })
                    .count();
                let skipped = report.steps.len() - applied;
                ctx.status(&format!(
                    "{} {applied} step(s), skipped {skipped}; artifact {}",
                    if a.dry_run { "would apply" } else { "applied" },
                    report.artifact
                ));
            }
            Ok(())
        }
        Err((error, done)) => Err(Failure {
            error,
            partial: Some(serde_json::json!({ "steps": done })),
            json_written: false,
        }),
    }
}
