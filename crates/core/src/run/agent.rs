//! The agent loop: `run --decider CMD`, git-steps as the runner.
//!
//! Owns the order of one iteration: reconcile (once, as `apply` does) → the
//! decision for the next step index, from the journal if one is recorded
//! there without a receipt, else from the decider → the step applied
//! exactly as `apply` applies it. A decision becomes durable *with* its
//! step: one push carries the step's commit, whose receipt is the record
//! (a crash before that push loses the answer, which is asked again; after
//! it the receipt exists). The journal holds what has no commit: a
//! decision that is refused (its id already applied, a duplicated hunk) or
//! does not apply, recorded as refused so the next run asks again instead
//! of replaying it forever (a hook's rejection included); and a decision
//! whose step cannot be built yet (an untracked file in its way), recorded
//! so it is not lost. Invariant: the decider is never asked for an index that
//! has a receipt or whose latest journal entry is a recorded decision, and
//! no effect of a decision reaches the box before the decision is durable.

use std::time::Duration;

use git2::Repository;
use serde::Serialize;

use crate::crash;
use crate::error::{Error, Refusal, RefusalKind, Result};
use crate::git::short;
use crate::history::ledger::AppliedStep;
use crate::plan::step::Step;
use crate::settings::Settings;
use crate::workdir::worktree;

use super::decider::{Answer, Decider, Question, RefusedAnswer};
use super::journal::{self, DecisionStatus};
pub use super::session::Source;
use super::session::{ApplyOptions, Origin, Reporter, Session, StepOutcome};

/// How to run the loop.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub decider: Decider,
    /// Stop after this many steps applied by this invocation.
    pub max_steps: Option<usize>,
    pub allow_duplicate_hunks: bool,
    /// How many refused answers per step index are sent back to the
    /// decider in this invocation (with `refused` in its context) before
    /// the loop stops with the refusal.
    pub retries: usize,
}

impl RunOptions {
    pub fn new(command: String, timeout: Duration) -> Self {
        RunOptions {
            decider: Decider {
                command,
                timeout,
                keep_stderr: false,
            },
            max_steps: None,
            allow_duplicate_hunks: false,
            retries: 2,
        }
    }
}

/// One step the loop applied.
#[derive(Debug, Clone, Serialize)]
pub struct RunStep {
    pub index: usize,
    pub source: Source,
    #[serde(flatten)]
    pub outcome: StepOutcome,
}

/// Why the loop stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stop {
    /// The decider answered `{"done": true}`.
    Done,
    /// `--max-steps` steps were applied.
    MaxSteps,
}

/// What is `run`'s own in its report.
#[derive(Debug, Serialize)]
pub struct Ran {
    pub stopped: Stop,
    /// Decider calls made by this invocation.
    pub decider_calls: usize,
    /// Where the finished run is kept (`refs/steps/runs/<run>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archived: Option<super::provenance::Archived>,
}

/// The result of `run`.
pub type RunReport = super::report::Report<RunStep, Ran>;

/// Run the loop; on failure the error comes with the steps applied so far.
pub fn run(
    repo: &Repository,
    s: &Settings,
    opts: &RunOptions,
    ui: &mut dyn Reporter,
) -> std::result::Result<RunReport, (Error, Vec<RunStep>)> {
    let mut done = Vec::new();
    match run_inner(repo, s, opts, ui, &mut done) {
        Ok(r) => Ok(r),
        Err(e) => Err((e, done)),
    }
}

fn run_inner(
    repo: &Repository,
    s: &Settings,
    opts: &RunOptions,
    ui: &mut dyn Reporter,
    done: &mut Vec<RunStep>,
) -> Result<RunReport> {
    crash::validate_env().map_err(Error::input)?;
    let workdir = worktree::workdir(repo)?.to_path_buf();
    let apply_opts = ApplyOptions {
        dry_run: false,
        allow_duplicate_hunks: opts.allow_duplicate_hunks,
        batch: 1,
    };
    let mut session = Session::open(repo, s, None, apply_opts, ui)?.load(true)?;
    let mut journal = journal::load(repo, s)?;
    journal.check(session.ledger(), &s.branch)?;
    // Effects of durable steps a crash left undelivered go first.
    session.deliver_effects(ui)?;
    let mut calls = 0;
    // Refused answers sent back to the decider for the current index.
    let mut retried = 0;
    // The decider asked for the next index while the last step's push was
    // in flight (against the worktree that holds that step).
    let mut ahead: Option<Ahead> = None;
    let stopped = loop {
        if opts.max_steps.is_some_and(|m| done.len() >= m) {
            break Stop::MaxSteps;
        }
        let index = session.len();
        let (step, text, source) = match journal.pending(index) {
            Some(e) => {
                let (step, text) = e.step(repo)?;
                (step, text, Source::Journal)
            }
            None => {
                let asked = match ahead.take() {
                    Some(a) if a.index == index => a.answer(),
                    other => {
                        drop(other.map(Ahead::answer));
                        // An answer asked ahead that a kill kept from being
                        // applied: on the very commit it was asked against,
                        // it is used, not asked for again.
                        match super::ahead::take(repo.path(), &s.run, index, session.head())
                            .and_then(|k| Step::parse(&k.text).ok().map(|st| (st, k.text)))
                        {
                            Some((step, text)) => {
                                ui.note(&format!(
                                    "step index {index}: the decider's answer {} was asked ahead before the last run stopped, and kept on this box: applied without asking again",
                                    step.id
                                ));
                                Ok((
                                    Answer::Step {
                                        step: Box::new(step),
                                        text,
                                    },
                                    None,
                                ))
                            }
                            None => {
                                calls += 1;
                                opts.decider
                                    .ask(&workdir, &question(s, &session, &journal, index)?)
                            }
                        }
                    }
                };
                let (answer, said) = asked?;
                for l in said.iter().flat_map(|t| t.lines()) {
                    ui.note(&format!("decider (step index {index}): {l}"));
                }
                match answer {
                    Answer::Done => break Stop::Done,
                    Answer::Step { step, text } => {
                        crash::point("decided", &step.id);
                        if let Some(e) = session.receipt(&step.id) {
                            let refusal = repeated(&step, e);
                            journal::append(
                                repo,
                                s,
                                &mut journal,
                                index,
                                &step,
                                &text,
                                Some(&refusal.saw),
                            )?;
                            if retried < opts.retries {
                                retried += 1;
                                ui.note(&retry_note(
                                    index,
                                    &step.id,
                                    &refusal.saw,
                                    retried,
                                    opts.retries,
                                ));
                                continue;
                            }
                            return Err(Error::from(refusal));
                        }
                        (*step, text, Source::Decider)
                    }
                }
            }
        };
        if let Some(note) = session.identity_note() {
            ui.note(&note);
        }
        // While this step's push is in flight, the decider is asked for the
        // next index (unless the journal holds its decision, or the run
        // stops after this step). Its answer is taken only once this step
        // is durable: a crash before that loses it, and it is asked again.
        let next = index + 1;
        let ask_ahead =
            opts.max_steps.is_none_or(|m| done.len() + 1 < m) && journal.pending(next).is_none();
        let (applied, asked_ahead) = session.apply_overlapped(&step, Some(source), |session| {
            if !ask_ahead {
                return None;
            }
            let question = question(s, session, &journal, next).ok()?;
            calls += 1;
            let (decider, dir) = (opts.decider.clone(), workdir.clone());
            let stop = std::sync::Arc::new(super::decider::Stop::default());
            let stopping = stop.clone();
            // Kept on this box as soon as it arrives (the push may still be
            // in flight), for a run a kill stops before it is applied.
            let (git_dir, run, after) = (repo.path().to_path_buf(), s.run.clone(), session.head());
            Some(Ahead {
                index: next,
                stop,
                thread: std::thread::spawn(move || {
                    let asked = decider.ask_stoppable(&dir, &question, &stopping);
                    if let (Ok((Answer::Step { step, text }, _)), Some(after)) = (&asked, after) {
                        if super::ahead::keep(&git_dir, &run, next, after, text).is_ok() {
                            crash::point("ahead-kept", &step.id);
                        }
                    }
                    asked
                }),
            })
        });
        let asked_ahead = asked_ahead.flatten();
        let outcome = match applied {
            Ok(o) => o,
            Err(e) => {
                // The answer for the next index is not taken: this step is
                // not durable. (Waited for, so no decider outlives the run.)
                drop(asked_ahead.map(Ahead::answer));
                if let Some(reason) = decision_fault(&e) {
                    // The decision itself is at fault: record that, so the
                    // next ask (now, or the next run's) says why, rather
                    // than replaying it forever.
                    journal::append(repo, s, &mut journal, index, &step, &text, Some(&reason))?;
                    if retried < opts.retries {
                        retried += 1;
                        ui.note(&retry_note(index, &step.id, &reason, retried, opts.retries));
                        continue;
                    }
                } else if source == Source::Decider && not_buildable_yet(&e) {
                    // Refused before anything of it was written, for a reason
                    // outside the decision: keep the answer for the next run.
                    journal::append(repo, s, &mut journal, index, &step, &text, None)?;
                    crash::point("journaled", &step.id);
                }
                return Err(e);
            }
        };
        ahead = asked_ahead;
        retried = 0;
        let origin = Origin { index, source };
        ui.step(&outcome, Some(origin));
        done.push(RunStep {
            index,
            source,
            outcome,
        });
        // The step is durable: its effects go now.
        if let Err(e) = session.deliver_effects(ui) {
            drop(ahead.take().map(Ahead::answer));
            return Err(e);
        }
    };
    // A run that stopped (`--max-steps`) with an answer asked ahead: waited
    // for, not taken (and kept on this box, for the next run on this head).
    drop(ahead.map(Ahead::answer));
    if stopped == Stop::Done {
        super::ahead::forget(repo.path(), &s.run);
    }
    let finished = session.finish()?;
    // A finished run is kept where a forge's branch deletion cannot reach
    // it. Its steps are durable either way: a failure here is said, and
    // `git steps archive` does it later.
    let archived = match (stopped, finished.head) {
        (Stop::Done, Some(head)) => match super::provenance::archive(repo, s, head) {
            Ok(k) => Some(k),
            Err(e) => {
                ui.note(&format!(
                    "the run is done, but keeping it under {} failed: {e}; `git steps archive` keeps it later",
                    super::provenance::refname(&s.run)
                ));
                None
            }
        },
        _ => None,
    };
    Ok(RunReport::new(
        s,
        finished,
        std::mem::take(done),
        Ran {
            stopped,
            decider_calls: calls,
            archived,
        },
    ))
}

/// The decider asked for `index` on a thread of its own.
struct Ahead {
    index: usize,
    stop: std::sync::Arc<super::decider::Stop>,
    thread: std::thread::JoinHandle<Result<(Answer, Option<String>)>>,
}

impl super::overlap::Cancel for Option<Ahead> {
    /// The step did not become durable: the decider asked ahead is killed
    /// before the box is set back, so it reads and writes nothing more.
    fn cancel(&self) {
        if let Some(a) = self {
            a.stop.stop();
        }
    }
}

impl Ahead {
    /// Wait for the decider's answer.
    fn answer(self) -> Result<(Answer, Option<String>)> {
        self.thread
            .join()
            .unwrap_or_else(|_| Err(Error::internal("the thread asking the decider panicked")))
    }
}

/// What the decider is told when asked for `index`.
fn question(
    s: &Settings,
    session: &Session<'_>,
    journal: &journal::Journal,
    index: usize,
) -> Result<Question> {
    Ok(Question {
        run: s.run.clone(),
        step_index: index,
        head: session.head().map(|h| h.to_string()),
        fingerprint: session.artifact()?,
        last_step_id: session.receipts().last().map(|e| e.id.clone()),
        refused: journal
            .latest(index)
            .filter(|e| e.status == DecisionStatus::Refused)
            .map(|e| RefusedAnswer {
                step_id: e.step_id.clone(),
                reason: e.reason.clone().unwrap_or_default(),
            }),
    })
}

/// The refusal of a decider's step whose id already has a receipt: the
/// same decision again (`repeated-step`) or another one under a used id.
fn repeated(step: &Step, e: &AppliedStep) -> Refusal {
    let at = e.index;
    let same = e.decision == step.digest;
    let reason = if same {
        format!(
            "the decider proposed step {} again, which is already applied at index {at} (receipt {})",
            step.id,
            short(e.commit)
        )
    } else {
        format!(
            "step {} already has a receipt (index {at}, {}) with decision {}; the decider proposed {}",
            step.id,
            short(e.commit),
            e.decision,
            step.digest
        )
    };
    Refusal {
        kind: if same {
            RefusalKind::RepeatedStep
        } else {
            RefusalKind::DigestMismatch
        },
        step: Some(step.id.clone()),
        saw: reason,
        would: "apply a second step under an id that already has a receipt".into(),
        hint: "the journal records the refusal; rerun to ask the decider again (it is told why in `refused`), and have it use a new step id".into(),
    }
}

/// What `run` says when it sends a refused answer back to the decider.
fn retry_note(index: usize, id: &str, reason: &str, n: usize, of: usize) -> String {
    let reason = reason.lines().next().unwrap_or_default();
    format!("step index {index}: the answer {id} was refused ({reason}); asking the decider again with the reason (retry {n} of {of})")
}

/// A step refused before its commit point for a reason outside its
/// decision (an untracked file in its way): the answer is kept.
fn not_buildable_yet(e: &Error) -> bool {
    matches!(e, Error::Refused(r) if r.kind == RefusalKind::DirtyWorktree)
}

/// Why a step failed, when the decision itself is at fault (a duplicated
/// hunk, a change that does not apply, a malformed step): the reason the
/// journal records, so the next run asks again instead of replaying it.
fn decision_fault(e: &Error) -> Option<String> {
    match e {
        // A hook judges the content: the decider is told why and asked
        // again (its answer is not replayed into the same rejection).
        Error::Refused(r)
            if matches!(
                r.kind,
                RefusalKind::DuplicateHunk | RefusalKind::HookRejected
            ) =>
        {
            Some(r.saw.clone())
        }
        Error::Apply { message, .. } => Some(format!("it does not apply: {message}")),
        Error::Input { message, .. } => Some(message.clone()),
        _ => None,
    }
}
