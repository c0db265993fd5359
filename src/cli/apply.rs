//! `git steps apply`: apply a plan, one commit per step.
//!
//! This file parses and renders; what it shows comes from
//! [`crate::run::engine::apply_plan`].

use std::io::Write;

use super::terminal::Terminal;
use super::{emit_json, Ctx, Failure, RunArgs};
use crate::error::Error;
use crate::plan::reader::Plan;
use crate::run::engine;
use crate::run::session::{ApplyOptions, StepOutcome};

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
    /// Group commit: make up to N steps durable in one push (each keeps its own commit and receipt) [config: steps.batch; default 1].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) batch: Option<u32>,
}

pub fn run(ctx: &Ctx, a: Args, out: &mut dyn Write) -> Result<(), Failure> {
    // The default plan is stdin: at a terminal that would wait, silently,
    // for a plan nobody is typing.
    if a.plan == "-" && std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        return Err(Error::Usage {
            message: "no plan given, and stdin (the default plan) is a terminal".into(),
            hint: "name a plan file (`git steps apply plan.jsonl`) or pipe one in (`… | git steps apply -`)".into(),
        }
        .into());
    }
    // A dry run changes nothing, not even the clone's depth.
    let (repo, s) = if a.dry_run {
        ctx.open_to_write(&a.run)?
    } else {
        ctx.open_deepened(&a.run)?
    };
    let plan = Plan::open(&a.plan, repo.path())?;
    let mut opts = ApplyOptions::from_config(&s.config);
    opts.dry_run = a.dry_run;
    opts.allow_duplicate_hunks |= a.allow_duplicate_hunks;
    if let Some(n) = a.batch {
        opts.batch = n as usize;
    }
    let mut ui = Terminal::new(ctx.ui, a.dry_run);
    match engine::apply_plan(&repo, &s, &plan, &opts, &mut ui) {
        Ok(report) => {
            if ctx.ui.json {
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
                ctx.ui.status(&format!(
                    "{} {applied} step(s), skipped {skipped}; artifact {}",
                    if a.dry_run { "would apply" } else { "applied" },
                    report.artifact
                ));
            }
            Ok(())
        }
        Err((error, done)) => {
            let error = match &error {
                // A step that does not apply: what came before it stays.
                Error::Apply { step, .. } if !a.dry_run => {
                    let applied = done
                        .iter()
                        .filter(|o| matches!(o, StepOutcome::Applied { .. }))
                        .count();
                    let before = if applied > 0
                        || done.iter().any(|o| matches!(o, StepOutcome::Skip { .. }))
                    {
                        format!(
                            "the steps before {step} are durable ({applied} applied by this command, {} already there)",
                            done.len() - applied
                        )
                    } else {
                        "nothing was applied".to_string()
                    };
                    let step = step.clone();
                    error.with_hint(
                        crate::error::Hint::rerun_after(format!(
                            "{before}; fix step {step} in the plan (or take it out)"
                        ))
                        .because("steps with a receipt are skipped, not applied again"),
                    )
                }
                _ => error,
            };
            Err(Failure {
                error,
                partial: Some(serde_json::json!({ "steps": done })),
                json_written: false,
            })
        }
    }
}
