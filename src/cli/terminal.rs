//! The terminal's side of a run: the engine's [`Reporter`] trait, rendered
//! through the command's [`super::Ui`].
//!
//! Owns the rendering of a session's progress: steps on stdout (one line
//! each; nothing with `--json`, whose document comes at the end), repairs,
//! reconcile and notes on stderr (nothing with `--quiet`). Invariant:
//! stdout carries only data; each step's line is flushed as it happens, so
//! a runner reading the pipe sees a step as soon as it is durable.

use std::io::Write;

use crate::run::session::{Origin, Reporter, StepOutcome};
use crate::sync::reconcile::{Action, Reconciled};
use crate::workdir::repair::Repair;

/// How a run command reports: `apply`, `resume`, `run`, `record`,
/// `adopt` and `undo`.
pub struct Terminal<'a> {
    ui: &'a super::Ui,
    dry_run: bool,
}

impl<'a> Terminal<'a> {
    pub fn new(ui: &'a super::Ui, dry_run: bool) -> Terminal<'a> {
        Terminal { ui, dry_run }
    }
}

impl Reporter for Terminal<'_> {
    fn note(&mut self, note: &str) {
        self.ui.note(note);
    }

    fn repaired(&mut self, repair: &Repair) {
        if let Some(line) = repair_line(repair) {
            self.ui.status(&line);
        }
    }

    fn reconciled(&mut self, reconciled: &Reconciled) {
        for line in reconcile_lines(reconciled, self.dry_run) {
            self.ui.status(&line);
        }
    }

    fn step(&mut self, outcome: &StepOutcome, origin: Option<Origin>) {
        if self.ui.json {
            return;
        }
        let line = human(outcome, self.dry_run);
        let out = &mut self.ui.out();
        crate::progress::suspend(|| {
            let _ = match origin {
                Some(o) => writeln!(out, "{line} [{} #{}]", o.source.as_str(), o.index),
                None => writeln!(out, "{line}"),
            };
            let _ = out.flush();
        });
    }
}

/// One step's outcome as the line stdout shows.
fn human(o: &StepOutcome, dry_run: bool) -> String {
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
            effects,
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
            for e in effects {
                s.push_str("\n  then deliver ");
                s.push_str(e);
            }
            s
        }
        StepOutcome::Skip {
            step,
            commit,
            redelivery: None,
        } => format!(
            "{} {step} (receipt {})",
            if dry_run { "skip" } else { "skipped" },
            short(commit)
        ),
        StepOutcome::Skip {
            step,
            commit,
            redelivery: Some(r),
        } => format!(
            "{} {step} (receipt {}): plan line {} repeats line {} with the same decision, a redelivery",
            if dry_run { "skip" } else { "skipped" },
            short(commit),
            r.line,
            r.first_line
        ),
    }
}

/// The stderr line that says what a worktree repair did.
fn repair_line(r: &Repair) -> Option<String> {
    Some(match r {
        Repair::Repaired {
            step,
            paths,
            rescue: Some(rescue),
        } => format!(
            "repaired the worktree: an update to step {step} was interrupted ({}); what was there is saved under {rescue}",
            paths.join(", ")
        ),
        Repair::Repaired { step, paths, rescue: None } => format!(
            "would repair the worktree: an update to step {step} was interrupted ({})",
            paths.join(", ")
        ),
        Repair::LeftAlone { paths } => format!(
            "note: uncommitted changes no step explains are left alone (nothing to apply): {}",
            paths.join(", ")
        ),
        Repair::Carried { paths } => format!(
            "note: uncommitted changes are kept as they are (a step that writes one of them is refused): {}",
            shown(paths)
        ),
        Repair::Clean => return None,
    })
}

/// "3 step(s)", or "3 step(s) and 661 commit(s) of the history the run
/// started from".
fn counted(steps: usize, commits: usize) -> String {
    match commits.saturating_sub(steps) {
        0 => format!("{steps} step(s)"),
        base => format!("{steps} step(s) and {base} commit(s) of the history the run started from"),
    }
}

/// The stderr lines that say what reconcile did (or, as a dry run, would do).
fn reconcile_lines(r: &Reconciled, dry_run: bool) -> Vec<String> {
    let mut lines = Vec::new();
    let short = |o: &Option<String>| {
        o.as_deref()
            .map(|h| h[..12].to_string())
            .unwrap_or_else(|| "nothing".into())
    };
    let verb = |now: &'static str, later: &'static str| if dry_run { later } else { now };
    if let Some(sw) = &r.switched {
        let (from, back) = match (&sw.from, &sw.from_commit) {
            (Some(b), _) => (
                b.clone(),
                format!("git switch {}", crate::git::shell_word(b)),
            ),
            (None, Some(c)) => (
                format!("a detached HEAD at {}", &c[..c.len().min(12)]),
                format!("git switch --detach {}", &c[..c.len().min(12)]),
            ),
            (None, None) => ("a detached HEAD".to_string(), String::new()),
        };
        lines.push(format!(
            "{} from {from} to the run's branch {} (uncommitted changes come along, as with `git switch`{})",
            if dry_run { "would switch" } else { "switched" },
            sw.to,
            if back.is_empty() {
                String::new()
            } else {
                format!("; `{back}` goes back")
            }
        ));
    }
    lines.extend(match &r.action {
        Action::LocalOnly | Action::InSync => None,
        Action::FastForward {
            from,
            steps,
            commits,
            ..
        } => Some(format!(
            "reconcile: {} the local branch from {} to the durable head {} ({})",
            verb("fast-forwarded", "would fast-forward"),
            short(from),
            short(&r.durable),
            counted(*steps, *commits)
        )),
        Action::Push {
            from,
            to,
            steps,
            commits,
        } => Some(format!(
            "reconcile: {} what the remote lacked ({}): {}",
            verb("pushed", "would push"),
            counted(*steps, *commits),
            match (from, dry_run) {
                (None, false) => format!("the remote had no such branch; it is now at {}", &to[..12]),
                (None, true) => format!("the remote has no such branch; it would be created at {}", &to[..12]),
                (Some(f), false) => format!("the remote's branch moved from {} to {}", &f[..12], &to[..12]),
                (Some(f), true) => format!("the remote's branch would move from {} to {}", &f[..12], &to[..12]),
            }
        )),
        Action::Fetch { durable } => Some(format!(
            "reconcile: the durable head {} is not fetched; apply would fetch it and fast-forward if it descends from the local head",
            &durable[..12]
        )),
    });
    lines
}

/// Up to 5 paths, then how many more.
fn shown(paths: &[String]) -> String {
    let mut out = paths.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if paths.len() > 5 {
        out.push_str(&format!(" and {} more", paths.len() - 5));
    }
    out
}
