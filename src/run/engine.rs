//! The apply loop: validate the plan, decide per step, commit, move the ref,
//! update the worktree.
//!
//! Owns the order of writes for one step: objects (blobs, trees, the commit)
//! → the branch ref (compare-and-swap, fsynced: the commit point) → worktree
//! and index. Invariant: a step is reported done only after its receipt is
//! durable; a step whose receipt exists is never applied again; a step that
//! is refused or fails leaves HEAD, index and worktree as they were and writes
//! no receipt. The whole plan is validated, and every recorded decision
//! checked against the log, before the first step is applied.

use git2::{Oid, Repository, Signature};
use serde::Serialize;

use crate::crash;
use crate::error::{Error, Refusal, RefusalKind, Result};
use crate::git::short;
use crate::git::signature;
use crate::history::ledger::{self, Ledger};
use crate::history::receipt;
use crate::plan::step::{Plan, Step};
use crate::settings::{self, Settings};
use crate::sync::reconcile::{self, Reconciled};
use crate::sync::remote::RefUpdate;
use crate::tree::build;
use crate::tree::hunks::HunkCounts;
use crate::workdir::lock;
use crate::workdir::repair::{self, Repair};
use crate::workdir::worktree;

/// How to apply.
#[derive(Debug, Clone, Default)]
pub struct ApplyOptions {
    pub dry_run: bool,
    pub allow_duplicate_hunks: bool,
}

/// What happened (or would happen) to one step.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum StepOutcome {
    /// Applied now; `commit` is its receipt.
    Applied {
        step: String,
        commit: String,
        files: Vec<String>,
        added: usize,
        removed: usize,
    },
    /// Would be applied (dry run).
    WouldApply {
        step: String,
        files: Vec<String>,
        added: usize,
        removed: usize,
        /// The change as resolved against the tree it would meet: a unified
        /// diff with real line numbers, whatever format the step used.
        diff: String,
    },
    /// Already applied: `commit` carries its receipt with the same digest.
    Skip { step: String, commit: String },
}

/// The result of `apply`.
#[derive(Debug, Serialize)]
pub struct ApplyReport {
    pub run: String,
    pub branch: String,
    pub durable: &'static str,
    pub dry_run: bool,
    pub repair: Repair,
    pub reconcile: Reconciled,
    pub steps: Vec<StepOutcome>,
    pub head: Option<String>,
    pub artifact: String,
    pub history: String,
}

/// Lines added and removed by `changes`.
fn line_stats(repo: &Repository, changes: &[crate::git::Change]) -> Result<(usize, usize)> {
    let (mut add, mut rem) = (0, 0);
    for c in changes {
        let read = |e: &Option<crate::git::Entry>| -> Result<Vec<u8>> {
            Ok(match e {
                Some(e) => repo.find_blob(e.oid)?.content().to_vec(),
                None => Vec::new(),
            })
        };
        let (a, b) = (read(&c.old)?, read(&c.new)?);
        let (_, _, ops) = crate::tree::hunks::diff_lines(&a, &b);
        for op in &ops {
            rem += op.old_range().len() * usize::from(!matches!(op, similar::DiffOp::Equal { .. }));
            add += op.new_range().len() * usize::from(!matches!(op, similar::DiffOp::Equal { .. }));
        }
    }
    Ok((add, rem))
}

/// The unified diff from `old` to `new`, as `git diff` prints it.
fn resolved_diff(
    repo: &Repository,
    old: Option<&git2::Tree<'_>>,
    new: &git2::Tree<'_>,
) -> Result<String> {
    let diff = repo.diff_tree_to_tree(old, Some(new), None)?;
    let mut out = Vec::new();
    diff.print(git2::DiffFormat::Patch, |_, _, line| {
        if matches!(line.origin(), '+' | '-' | ' ') {
            out.push(line.origin() as u8);
        }
        out.extend_from_slice(line.content());
        true
    })?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Check the whole plan against the log before anything is written: every
/// step parses, recorded decisions match, and plan and history agree both
/// ways. Returns the number of steps without a receipt.
fn preflight(plan: &Plan, ledger: &Ledger) -> Result<usize> {
    let (pending, problems) = plan_agreement(plan, ledger, true)?;
    // The first found: a step's own digest mismatch comes before where it sits.
    match problems.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(pending),
    }
}

/// Where `plan` and the run's history disagree, as refusals (only the first
/// with `first_only`), and how many plan steps have no receipt.
///
/// A plan is a window on the run: the steps it holds that have receipts
/// must be consecutive receipts of the history, in the plan's order, from
/// the plan's first step on; the steps without receipts come after them,
/// and only when those receipts reach the head. So the whole plan, the plan
/// from some step on, and one step at a time (a runner handing git-steps the
/// next step) all work; a plan edited mid-run (`[s1, s3]` after `s1, s2`),
/// or one whose steps are not the history's (another runner's plan on the
/// same run) is refused: applying it would not give what an uninterrupted
/// run of it gives.
pub fn plan_agreement(
    plan: &Plan,
    ledger: &Ledger,
    first_only: bool,
) -> Result<(usize, Vec<Error>)> {
    let mut pending = 0;
    let mut problems = Vec::new();
    let mut first_pending: Option<String> = None;
    // The history position the next receipted plan step must have, and the
    // plan step before it.
    let mut expect: Option<(usize, String)> = None;
    let new_run_hint = "run the plan this run was started with (`git steps log` lists its steps), or give the edited plan a run of its own: `git steps init --branch <new branch> --run <new id>`";
    for step in plan.steps()? {
        if first_only && !problems.is_empty() {
            break;
        }
        let step = step?;
        match ledger.get(&step.id) {
            Some(entry) => {
                if entry.decision != step.digest {
                    problems.push(digest_refusal(&step, entry));
                }
                if let Some(pending) = &first_pending {
                    problems.push(Error::from(Refusal {
                        kind: RefusalKind::PlanMismatch,
                        step: Some(step.id.clone()),
                        saw: format!(
                            "step {} has a receipt ({}) but the earlier step {pending} of this plan has none",
                            step.id,
                            short(entry.commit)
                        ),
                        would: format!(
                            "apply {pending} after {}, which an uninterrupted run would not do",
                            step.id
                        ),
                        hint: new_run_hint.into(),
                    }));
                } else if let Some((at, prev)) = &expect {
                    if entry.index != *at {
                        problems.push(Error::from(Refusal {
                            kind: RefusalKind::PlanMismatch,
                            step: Some(step.id.clone()),
                            saw: format!(
                                "the plan puts {} right after {prev}, but the history holds {} there, and {}'s receipt ({}) is at position {}",
                                step.id,
                                position(ledger, *at),
                                step.id,
                                short(entry.commit),
                                entry.index + 1
                            ),
                            would: "continue a run whose history is not this plan's: the artifact would differ from an uninterrupted run of the plan".into(),
                            hint: new_run_hint.into(),
                        }));
                    }
                }
                expect = Some((entry.index + 1, step.id.clone()));
            }
            None => {
                if first_pending.is_none() {
                    if let Some((at, prev)) = &expect {
                        if *at != ledger.entries.len() {
                            problems.push(Error::from(Refusal {
                                kind: RefusalKind::PlanMismatch,
                                step: Some(step.id.clone()),
                                saw: format!(
                                    "the plan puts {} right after {prev}, but the history holds {} there, a receipt the plan does not hold at that position",
                                    step.id,
                                    position(ledger, *at)
                                ),
                                would: format!(
                                    "apply {} on top of steps this plan does not have: the artifact would differ from an uninterrupted run of the plan",
                                    step.id
                                ),
                                hint: new_run_hint.into(),
                            }));
                        }
                    }
                    first_pending = Some(step.id.clone());
                }
                pending += 1;
            }
        }
    }
    Ok((pending, problems))
}

/// "step X (commit C, position N)" for a history position.
fn position(ledger: &Ledger, at: usize) -> String {
    match ledger.entries.get(at) {
        Some(e) => format!(
            "step {} (receipt {}, position {})",
            e.id,
            short(e.commit),
            at + 1
        ),
        None => format!("nothing (the history ends at position {at})"),
    }
}

fn digest_refusal(step: &Step, entry: &ledger::Entry) -> Error {
    Error::from(Refusal {
        kind: RefusalKind::DigestMismatch,
        step: Some(step.id.clone()),
        saw: format!(
            "step {} already has a receipt in {} with decision {}, but the plan's step has decision {}",
            step.id,
            short(entry.commit),
            entry.decision,
            step.digest
        ),
        would: "apply a second, different decision under the same step id".into(),
        hint: format!(
            "a step id is its idempotency key: give the new decision a new id, or rerun with the plan that was applied (`git show {}` shows the recorded step)",
            short(entry.commit)
        ),
    })
}

/// Where `apply` reports as it goes (status on stderr, lines on stdout).
pub struct Hooks<'a> {
    /// A one-line note for the user (stale lock removed, ...).
    pub on_note: &'a mut dyn FnMut(&str),
    pub on_repair: &'a mut dyn FnMut(&Repair),
    pub on_reconcile: &'a mut dyn FnMut(&Reconciled),
    pub on_step: &'a mut dyn FnMut(&StepOutcome),
}

/// Parse every step of the plan (syntax, ids, paths, unique ids); returns
/// how many there are.
pub fn validate(plan: &Plan) -> Result<usize> {
    let mut n = 0;
    for step in plan.steps()? {
        step?;
        n += 1;
    }
    if n == 0 {
        return Err(Error::input(format!(
            "the plan {} holds no steps",
            plan.name
        )));
    }
    Ok(n)
}

/// Take the lock, finish an interrupted worktree update, and reconcile the
/// local branch with the durable one: everything a resume does before the
/// first step. With a plan, the user's own edits are left alone (not
/// refused) when every step of it already has a receipt.
#[allow(clippy::type_complexity)]
pub fn prepare(
    repo: &Repository,
    s: &Settings,
    plan: Option<&Plan>,
    dry_run: bool,
    on_note: &mut dyn FnMut(&str),
    on_repair: &mut dyn FnMut(&Repair),
    on_reconcile: &mut dyn FnMut(&Reconciled),
) -> Result<(Option<lock::Lock>, Repair, Reconciled)> {
    let lock = if dry_run {
        None
    } else {
        let lock = lock::acquire(repo.path())?;
        if let Some(stale) = &lock.stale {
            on_note(stale);
        }
        for f in lock::clear_stale(repo.path())
            .into_iter()
            .chain(settings::clear_config_leftover(repo))
        {
            on_note(&format!(
                "removed {f}, left by a git-steps that was killed mid-write"
            ));
        }
        Some(lock)
    };
    // First the local side: finish a worktree update a crash interrupted.
    let repair = if crate::git::head_branch(repo).as_deref() == Some(s.branch.as_str()) {
        let local = repo.refname_to_id(&s.refname()).ok();
        let ledger = crate::history::cache::load_ledger(repo, local, &s.run)?;
        ledger.ensure_sound(&s.branch)?;
        let pending = match plan {
            Some(p) => preflight(p, &ledger)?,
            None => 1,
        };
        match repair::repair(repo, s, &ledger, dry_run) {
            // The user's own edits only matter when a step would land on them.
            Err(Error::Refused(r)) if pending == 0 && r.kind == RefusalKind::DirtyWorktree => {
                Repair::LeftAlone {
                    paths: worktree::dirty_paths(repo)?,
                }
            }
            other => other?,
        }
    } else {
        Repair::Clean
    };
    on_repair(&repair);
    // Then local against durable.
    let reconciled = reconcile::reconcile(repo, s, dry_run)?;
    on_reconcile(&reconciled);
    Ok((lock, repair, reconciled))
}

/// Apply `plan` in the repository. `on_step` sees each outcome as it happens.
/// On failure the error is returned with the outcomes so far.
pub fn apply_plan(
    repo: &Repository,
    s: &Settings,
    plan: &Plan,
    opts: &ApplyOptions,
    hooks: &mut Hooks<'_>,
) -> std::result::Result<ApplyReport, (Error, Vec<StepOutcome>)> {
    let mut outcomes = Vec::new();
    match apply_inner(repo, s, plan, opts, hooks, &mut outcomes) {
        Ok(report) => Ok(report),
        Err(e) => Err((e, outcomes)),
    }
}

fn apply_inner(
    repo: &Repository,
    s: &Settings,
    plan: &Plan,
    opts: &ApplyOptions,
    hooks: &mut Hooks<'_>,
    outcomes: &mut Vec<StepOutcome>,
) -> Result<ApplyReport> {
    let Hooks {
        on_note,
        on_repair,
        on_reconcile,
        on_step,
    } = hooks;
    crash::validate_env().map_err(Error::input)?;
    worktree::workdir(repo)?;
    // Every step parses before anything is written or fetched.
    validate(plan)?;
    let (_lock, repair, reconciled) = prepare(
        repo,
        s,
        Some(plan),
        opts.dry_run,
        on_note,
        on_repair,
        on_reconcile,
    )?;
    // In a dry run whose durable head is not fetched, the steps are shown
    // against the local head.
    let mut head = reconciled.local.as_deref().map(Oid::from_str).transpose()?;
    let ledger = crate::history::cache::load_ledger(repo, head, &s.run)?;
    ledger.ensure_sound(&s.branch)?;
    preflight(plan, &ledger)?;
    // The hunk counts are read only when a step is to be applied: a rerun
    // that skips everything does not need them.
    let mut counts: Option<HunkCounts> = None;
    if opts.dry_run {
        // Objects a dry run builds go to memory and are dropped with it.
        repo.odb()?.add_new_mempack_backend(1000)?;
    }
    let sig = signature(repo)?;
    let mut checked_clean = false;
    let mut applied: Vec<ledger::Entry> = Vec::new();
    for step in plan.steps()? {
        let step = step?;
        if let Some(entry) = ledger.get(&step.id) {
            let o = StepOutcome::Skip {
                step: step.id.clone(),
                commit: entry.commit.to_string(),
            };
            on_step(&o);
            outcomes.push(o);
            continue;
        }
        if !checked_clean && !opts.dry_run {
            let dirty = worktree::dirty_paths(repo)?;
            if !dirty.is_empty() {
                return Err(worktree::dirty_refusal(Some(&step.id), &dirty));
            }
            checked_clean = true;
        }
        let counts = match &mut counts {
            Some(c) => c,
            None => counts
                .insert(crate::history::cache::load(repo, head, &s.run, !opts.dry_run)?.counts),
        };
        let (outcome, new_head) = apply_one(repo, s, &step, head, counts, opts, &sig, None)?;
        head = Some(new_head);
        applied.push(ledger::Entry {
            index: ledger.entries.len() + applied.len(),
            id: step.id.clone(),
            decision: step.digest.clone(),
            commit: new_head,
        });
        on_step(&outcome);
        outcomes.push(outcome);
    }
    let history = crate::tree::fingerprint::history(
        ledger
            .entries
            .iter()
            .chain(&applied)
            .map(|e| (e.id.as_str(), e.decision.as_str())),
    );
    if !opts.dry_run && !applied.is_empty() {
        // The next run starts from here without reading the history again.
        let mut entries = ledger.entries;
        entries.extend(applied);
        let done = ledger::Ledger::from_parts(head, ledger.base, entries);
        if let Some(counts) = &counts {
            crate::history::cache::save(repo, &s.run, &done, counts);
        }
    }
    let artifact = match head {
        Some(h) => crate::tree::fingerprint::artifact(repo, Some(&repo.find_commit(h)?.tree()?))?,
        None => crate::tree::fingerprint::artifact(repo, None)?,
    };
    Ok(ApplyReport {
        run: s.run.clone(),
        branch: s.branch.clone(),
        durable: s.durable_kind(),
        dry_run: opts.dry_run,
        repair,
        reconcile: reconciled,
        steps: std::mem::take(outcomes),
        head: if opts.dry_run {
            None
        } else {
            head.map(|h| h.to_string())
        },
        artifact,
        history,
    })
}

/// Apply one step whose id has no receipt; returns the outcome and the new
/// head (in a dry run, a commit that exists only in memory). `source` (the
/// agent loop's `decider` or `journal`) goes into the receipt.
#[allow(clippy::too_many_arguments)]
pub(crate) fn apply_one(
    repo: &Repository,
    s: &Settings,
    step: &Step,
    head: Option<Oid>,
    counts: &mut HunkCounts,
    opts: &ApplyOptions,
    sig: &Signature<'_>,
    source: Option<&str>,
) -> Result<(StepOutcome, Oid)> {
    if !opts.dry_run {
        crash::point("before-write", &step.id);
    }
    let parent = head.map(|h| repo.find_commit(h)).transpose()?;
    let base = parent.as_ref().map(|c| c.tree()).transpose()?;
    let applied = build::apply(repo, base.clone(), step)?;
    let new_tree = repo.find_tree(applied.tree)?;
    let hunks = ledger::tree_hunks(repo, base.as_ref(), Some(&new_tree))?;
    let mut trial = counts.clone();
    if let Err(d) = trial.admit(&step.id, &hunks, opts.allow_duplicate_hunks) {
        return Err(Error::from(Refusal {
            kind: RefusalKind::DuplicateHunk,
            step: Some(step.id.clone()),
            saw: format!(
                "its hunk {} repeats a change step {} made, which is still in effect",
                d.hunk, d.earlier_step
            ),
            would: "apply the same change twice (a duplicated hunk is still a valid patch, so nothing else would notice)".into(),
            hint: format!(
                "if the repetition is intended, rerun with --allow-duplicate-hunks; `git steps log` shows step {}",
                d.earlier_step
            ),
        }));
    }
    let files: Vec<String> = applied.changes.iter().map(|c| c.path.clone()).collect();
    let (added, removed) = line_stats(repo, &applied.changes)?;
    if !opts.dry_run {
        worktree::ensure_clean(repo, Some(&step.id), &applied.changes)?;
    }
    let message = receipt::message(step, &s.run, &applied.summary(), source);
    let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
    let commit = repo.commit(None, sig, sig, &message, &new_tree, &parents)?;
    if opts.dry_run {
        *counts = trial;
        let o = StepOutcome::WouldApply {
            step: step.id.clone(),
            files,
            added,
            removed,
            diff: resolved_diff(repo, base.as_ref(), &new_tree)?,
        };
        return Ok((o, commit));
    }
    // Refer to nothing that is not really written (a full disk must not
    // turn into a receipt for a missing object).
    let odb = repo.odb()?;
    for (what, id) in [("commit", commit), ("tree", applied.tree)] {
        if !odb.exists(id) {
            return Err(Error::other(format!(
                "step {}: the {what} {id} was written but is not in the object database",
                step.id
            ))
            .with_hint("check the disk this repository is on (space, errors), then rerun"));
        }
    }
    crash::point("objects-written", &step.id);
    if let Some(remote) = &s.remote {
        // The commit point: the remote accepts the branch update.
        remote
            .push(
                repo,
                &RefUpdate {
                    refname: &s.refname(),
                    expected: head,
                    new: commit,
                },
            )
            .map_err(|e| e.into_error(&s.branch, &remote.spec, head))?;
        crash::point("pushed", &step.id);
    }
    // From here on the step is durable: a failure is this box's only.
    let local = |e: Error| {
        match &s.remote {
        Some(remote) => Error::other(format!(
            "step {} is durable on {} (commit {}); updating this box failed: {e}",
            step.id,
            remote.spec,
            short(commit)
        ))
        .with_hint("fix what failed here (the disk, a lock), then rerun the same command: it brings this box up to the durable head and does not apply the step again"),
        None => e,
    }
    };
    move_ref(repo, s, head, commit, &step.id).map_err(local)?;
    *counts = trial;
    crash::point("ref-updated", &step.id);
    worktree::update(repo, &applied.changes, &step.id).map_err(local)?;
    let o = StepOutcome::Applied {
        step: step.id.clone(),
        commit: commit.to_string(),
        files,
        added,
        removed,
    };
    Ok((o, commit))
}

/// Compare-and-swap the branch from `expected` to `new`; libgit2 fsyncs the
/// ref file and its directory (see `crate::git::enable_fsync`).
fn move_ref(
    repo: &Repository,
    s: &Settings,
    expected: Option<Oid>,
    new: Oid,
    step: &str,
) -> Result<()> {
    let refname = s.refname();
    let log = format!("git-steps: step {step}");
    let res = lock::intending(repo, lock::ref_locks(repo, &refname), || match expected {
        Some(old) => repo.reference_matching(&refname, new, true, old, &log),
        None => repo.reference(&refname, new, false, &log),
    });
    res.map(|_| ()).map_err(|e| {
        let now = repo.refname_to_id(&refname).ok();
        let shown = |o: Option<Oid>| o.map(short).unwrap_or_else(|| "no branch".into());
        if now == expected && e.code() != git2::ErrorCode::Locked {
            // Nobody moved it: the write itself failed. Say how.
            Error::other(format!(
                "step {step}: cannot update {refname} (still at {}): {}",
                shown(now),
                e.message()
            ))
            .with_hint("check the disk this repository is on (space, permissions), then rerun the same command")
        } else if now == expected {
            Error::other(format!(
                "step {step}: {refname} is locked by another process: {}",
                e.message()
            ))
            .with_hint("another git command is writing this branch; let it finish, then rerun the same command")
        } else {
            Error::other(format!(
                "step {step}: {refname} moved while the step was being applied (expected {}, found {}): {}",
                shown(expected),
                shown(now),
                e.message()
            ))
            .with_hint("another process is writing this branch; stop it, then rerun the same command")
        }
    })
}
