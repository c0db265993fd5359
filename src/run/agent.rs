//! The agent loop: `run --decider CMD`, git-steps as the runner.
//!
//! Owns the order of one iteration: reconcile (once, as `apply` does) → the
//! decision for the next step index, from the journal if one is recorded
//! there without a receipt, else from the decider → the journal entry made
//! durable → the step applied exactly as `apply` applies it. Invariant: the
//! decider is never asked for an index whose latest journal entry is a
//! recorded decision, and no decision is applied before it is recorded; a
//! decision that is refused (its id already applied, a duplicated hunk) or
//! does not apply is recorded as refused and not applied, so the next run
//! asks again instead of replaying it forever.

use std::collections::HashMap;
use std::time::Duration;

use git2::{Oid, Repository};
use serde::Serialize;

use crate::crash;
use crate::error::{Error, Refusal, RefusalKind, Result};
use crate::git::short;

use crate::run::decider::{Answer, Context, Decider, RefusedAnswer};
use crate::run::engine::{self, ApplyOptions, StepOutcome};
use crate::run::journal::{self, Status};
use crate::settings::Settings;
use crate::sync::reconcile::Reconciled;
use crate::workdir::repair::Repair;
use crate::workdir::worktree;

/// How to run the loop.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub decider: Decider,
    /// Stop after this many steps applied by this invocation.
    pub max_steps: Option<usize>,
    pub allow_duplicate_hunks: bool,
}

impl RunOptions {
    pub fn new(command: String, timeout: Duration) -> Self {
        RunOptions {
            decider: Decider { command, timeout },
            max_steps: None,
            allow_duplicate_hunks: false,
        }
    }
}

/// Where a step's decision came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Asked of the decider in this invocation.
    Decider,
    /// Recorded before a crash; applied now without asking again.
    Journal,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Decider => "decider",
            Source::Journal => "journal",
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

/// The result of `run`.
#[derive(Debug, Serialize)]
pub struct RunReport {
    pub run: String,
    pub branch: String,
    pub durable: &'static str,
    pub repair: Repair,
    pub reconcile: Reconciled,
    pub steps: Vec<RunStep>,
    pub stopped: Stop,
    /// Decider calls made by this invocation.
    pub decider_calls: usize,
    pub head: Option<String>,
    pub artifact: String,
    pub history: String,
}

/// Callbacks for progress as it happens.
pub struct RunHooks<'a> {
    pub on_note: &'a mut dyn FnMut(&str),
    pub on_repair: &'a mut dyn FnMut(&Repair),
    pub on_reconcile: &'a mut dyn FnMut(&Reconciled),
    pub on_step: &'a mut dyn FnMut(&RunStep),
}

/// Run the loop; on failure the error comes with the steps applied so far.
pub fn run(
    repo: &Repository,
    s: &Settings,
    opts: &RunOptions,
    hooks: &mut RunHooks<'_>,
) -> std::result::Result<RunReport, (Error, Vec<RunStep>)> {
    let mut done = Vec::new();
    match run_inner(repo, s, opts, hooks, &mut done) {
        Ok(r) => Ok(r),
        Err(e) => Err((e, done)),
    }
}

fn artifact_at(repo: &Repository, head: Option<Oid>) -> Result<String> {
    match head {
        Some(h) => crate::tree::fingerprint::artifact(repo, Some(&repo.find_commit(h)?.tree()?)),
        None => crate::tree::fingerprint::artifact(repo, None),
    }
}

fn run_inner(
    repo: &Repository,
    s: &Settings,
    opts: &RunOptions,
    hooks: &mut RunHooks<'_>,
    done: &mut Vec<RunStep>,
) -> Result<RunReport> {
    crash::validate_env().map_err(Error::input)?;
    let workdir = worktree::workdir(repo)?.to_path_buf();
    let (_lock, repair, reconciled) = engine::prepare(
        repo,
        s,
        None,
        false,
        hooks.on_note,
        hooks.on_repair,
        hooks.on_reconcile,
    )?;
    let mut head = reconciled.local.as_deref().map(Oid::from_str).transpose()?;
    let crate::history::cache::Indexed { ledger, mut counts } =
        crate::history::cache::load(repo, head, &s.run, true)?;
    ledger.ensure_sound(&s.branch)?;
    let mut journal = journal::load(repo, s)?;
    journal.check(&ledger, &s.branch)?;
    let mut entries = ledger.entries.clone();
    let mut applied_ids: HashMap<String, usize> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (e.id.clone(), i))
        .collect();
    let sig = crate::git::signature(repo)?;
    let apply_opts = ApplyOptions {
        dry_run: false,
        allow_duplicate_hunks: opts.allow_duplicate_hunks,
    };
    // Nothing is asked while the worktree holds changes no step explains.
    let dirty = worktree::dirty_paths(repo)?;
    if !dirty.is_empty() {
        return Err(worktree::dirty_refusal(None, &dirty));
    }
    let mut calls = 0;
    let stopped = loop {
        if opts.max_steps.is_some_and(|m| done.len() >= m) {
            break Stop::MaxSteps;
        }
        let index = entries.len();
        let (step, text, source) = match journal.pending(index) {
            Some(e) => {
                let (step, text) = e.step(repo)?;
                (step, text, Source::Journal)
            }
            None => {
                let ctx = Context {
                    run: s.run.clone(),
                    step_index: index,
                    head: head.map(|h| h.to_string()),
                    fingerprint: artifact_at(repo, head)?,
                    last_step_id: entries.last().map(|e| e.id.clone()),
                    refused: journal
                        .latest(index)
                        .filter(|e| e.status == Status::Refused)
                        .map(|e| RefusedAnswer {
                            step_id: e.step_id.clone(),
                            reason: e.reason.clone().unwrap_or_default(),
                        }),
                };
                calls += 1;
                match opts.decider.ask(&workdir, &ctx)? {
                    Answer::Done => break Stop::Done,
                    Answer::Step { step, text } => {
                        crash::point("decided", &step.id);
                        if let Some(&at) = applied_ids.get(&step.id) {
                            let e = &entries[at];
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
                            journal::append(
                                repo,
                                s,
                                &mut journal,
                                index,
                                &step,
                                &text,
                                Some(&reason),
                            )?;
                            return Err(Error::from(Refusal {
                                kind: if same {
                                    RefusalKind::RepeatedStep
                                } else {
                                    RefusalKind::DigestMismatch
                                },
                                step: Some(step.id.clone()),
                                saw: reason,
                                would: "apply a second step under an id that already has a receipt".into(),
                                hint: "the journal records the refusal; rerun to ask the decider again (it is told why in `refused`), and have it use a new step id".into(),
                            }));
                        }
                        journal::append(repo, s, &mut journal, index, &step, &text, None)?;
                        crash::point("journaled", &step.id);
                        (*step, text, Source::Decider)
                    }
                }
            }
        };
        let result = engine::apply_one(
            repo,
            s,
            &step,
            head,
            &mut counts,
            &apply_opts,
            &sig,
            Some(source.as_str()),
        );
        let (outcome, new_head) = match result {
            Ok(r) => r,
            Err(e) => {
                // The decision itself is at fault: record that, so the next
                // run asks again rather than replaying it forever.
                let reason = match &e {
                    Error::Refused(r) if r.kind == RefusalKind::DuplicateHunk => {
                        Some(r.saw.clone())
                    }
                    Error::Apply { message, .. } => Some(format!("it does not apply: {message}")),
                    Error::Input { message, .. } => Some(message.clone()),
                    _ => None,
                };
                if let Some(reason) = reason {
                    journal::append(repo, s, &mut journal, index, &step, &text, Some(&reason))?;
                }
                return Err(e);
            }
        };
        head = Some(new_head);
        applied_ids.insert(step.id.clone(), entries.len());
        entries.push(crate::history::ledger::Entry {
            index,
            id: step.id.clone(),
            decision: step.digest.clone(),
            commit: new_head,
        });
        let rs = RunStep {
            index,
            source,
            outcome,
        };
        (hooks.on_step)(&rs);
        done.push(rs);
    };
    if entries.len() > ledger.entries.len() {
        let fresh = crate::history::ledger::Ledger::from_parts(head, ledger.base, entries.clone());
        crate::history::cache::save(repo, &s.run, &fresh, &counts);
    }
    Ok(RunReport {
        run: s.run.clone(),
        branch: s.branch.clone(),
        durable: s.durable_kind(),
        repair,
        reconcile: reconciled,
        steps: std::mem::take(done),
        stopped,
        decider_calls: calls,
        head: head.map(|h| h.to_string()),
        artifact: artifact_at(repo, head)?,
        history: crate::tree::fingerprint::history(
            entries.iter().map(|e| (e.id.as_str(), e.decision.as_str())),
        ),
    })
}
