//! Bringing this box up before a run's first step: the runner's lock,
//! what a killed or power-cut run left (its lock files, a torn index or
//! branch), an interrupted worktree update finished, and the local branch
//! brought together with the durable one.
//!
//! Owns that order ([`bring_up`]), which [`super::session::Session::open`]
//! runs first. Invariant: nothing is read for a step before all of it is
//! done, each repair is said as it is made (a later failure does not hide
//! it), and a dry run takes no lock and changes nothing.

use git2::{Oid, Repository};

use crate::error::Result;
use crate::git::head_branch;
use crate::history::cache;
use crate::history::ledger::Ledger;
use crate::lock::{self, Lock};
use crate::plan::reader::Plan;
use crate::settings::{self, Settings};
use crate::sync::reconcile::{self, Reconciled, Worktree};
use crate::workdir::repair::{self, Repair};
use crate::workdir::torn;

use super::agreement::preflight;

/// What bringing up says as it goes, for the session's `Reporter`.
pub(super) enum Said<'a> {
    /// A one-line note (a stale lock removed, a torn file mended).
    Note(&'a str),
    Repaired(&'a Repair),
    Reconciled(&'a Reconciled),
}

/// A box brought up.
pub(super) struct BroughtUp {
    /// Held for the run; None in a dry run.
    pub lock: Option<Lock>,
    pub repair: Repair,
    pub reconciled: Reconciled,
    /// The receipts read for the repair, and the head they were read at.
    pub read: Option<(Option<Oid>, Ledger)>,
    /// Whether the plan was checked against those receipts.
    pub plan_checked: bool,
}

/// Take the lock, clear what a killed run left and mend what a power cut
/// tore, finish an interrupted worktree update (`worktree` follows the
/// branch; `record`'s holds the steps already), and reconcile the local
/// branch with the durable one. With a plan, the plan is checked against
/// the history first.
pub(super) fn bring_up(
    repo: &Repository,
    s: &Settings,
    plan: Option<&Plan>,
    dry_run: bool,
    worktree: Worktree,
    said: &mut dyn FnMut(Said<'_>),
) -> Result<BroughtUp> {
    let lock = if dry_run {
        None
    } else {
        let lock = lock::acquire(repo.path())?;
        if let Some(stale) = &lock.stale {
            said(Said::Note(stale));
        }
        for cleared in lock::clear_stale(repo.path()).into_iter().chain(
            settings::clear_config_leftover(repo)
                .into_iter()
                .map(lock::Cleared::Removed),
        ) {
            said(Said::Note(&match cleared {
                lock::Cleared::Removed(f) => {
                    format!("removed {f}, left by a git-steps that was killed mid-write")
                }
                lock::Cleared::Kept { from, to } => format!(
                    "kept {to}: a git-steps killed while it removed a worktree file left it at {from}; it holds that file as it was then (your edit, if you made one meanwhile), and nothing else reads it"
                ),
            }));
        }
        // What a power cut tore (the index, the run's branch) is mended
        // before anything reads it.
        let durable = || match &s.remote {
            Some(r) => r.fetch(
                repo,
                &s.refname(),
                &crate::sync::remote::tracking_ref(&s.branch),
            ),
            None => Ok(None),
        };
        for mended in torn::mend(repo, s, worktree == Worktree::Holds, &durable)? {
            said(Said::Note(&mended.note()));
        }
        Some(lock)
    };
    // First the local side: finish a worktree update a crash interrupted.
    // (`record` writes no worktree file, so it leaves no update to
    // finish; what another command left is refused by its own check.)
    let mut read = None;
    let mut plan_checked = false;
    let repair = if worktree == Worktree::Holds {
        Repair::Clean
    } else if head_branch(repo).as_deref() == Some(s.branch.as_str()) {
        let local = repo.refname_to_id(&s.refname()).ok();
        let ledger = cache::load_ledger(repo, local, &s.run)?;
        if let Err(e) = ledger.ensure_sound(&s.branch) {
            // Hand commits this box holds that another box adopted:
            // the durable branch takes them in, and the box only has to
            // catch up (over a clean worktree, as any fast-forward).
            if !adopted_on_durable(repo, s, local, dry_run)? {
                return Err(e);
            }
        }
        let pending = match plan {
            Some(p) => {
                plan_checked = true;
                preflight(repo, p, &ledger)?
            }
            None => 1,
        };
        let repair = repair::repair_before(repo, s, &ledger, dry_run, pending)?;
        read = Some((local, ledger));
        repair
    } else {
        Repair::Clean
    };
    said(Said::Repaired(&repair));
    // Then local against durable.
    let reconciled = reconcile::reconcile(repo, s, reconcile::Mode { dry_run, worktree })?;
    said(Said::Reconciled(&reconciled));
    Ok(BroughtUp {
        lock,
        repair,
        reconciled,
        read,
        plan_checked,
    })
}

/// Whether the durable branch descends from `local` and its history is
/// sound: what a box that holds hand commits another box adopted sees.
fn adopted_on_durable(
    repo: &Repository,
    s: &Settings,
    local: Option<Oid>,
    dry_run: bool,
) -> Result<bool> {
    let (Some(remote), Some(local), false) = (&s.remote, local, dry_run) else {
        return Ok(false);
    };
    let Some(durable) = remote.fetch(
        repo,
        &s.refname(),
        &crate::sync::remote::tracking_ref(&s.branch),
    )?
    else {
        return Ok(false);
    };
    if durable == local || !repo.graph_descendant_of(durable, local)? {
        return Ok(false);
    }
    let scanned = crate::history::ledger::scan(repo, Some(durable), &s.run)?;
    Ok(scanned.problems.is_empty() && !scanned.adopted.is_empty())
}
