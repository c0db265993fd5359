//! One run session: what `apply`, `resume` and `run` share from the lock to
//! the closing fingerprints.
//!
//! Owns the session's state — repository, settings, the runner's lock, the
//! ledger read at the start, the steps applied since, the hunk counts, the
//! head and the receipt signature — and its order, which the types keep:
//! [`Session::open`] (lock, repair, reconcile: everything a resume does
//! before the first step) gives an [`Opened`] run; [`Opened::load`] reads
//! the receipts, once (reusing the ones repair read when the head did not
//! move), and gives the [`Session`] that applies steps; [`Session::finish`]
//! saves the receipt cache and computes the artifact and history
//! fingerprints. Progress goes to one [`Reporter`], which the CLI
//! implements once. Invariant: the session's head only moves when a step's
//! receipt is durable (see [`super::commit`]; in a dry run, to a commit in
//! memory), and the receipt cache is written only for a head that really
//! holds the ledger it describes.

use git2::{Oid, Repository};
use serde::Serialize;

use crate::error::Result;
use crate::git::{default_identity_note, identity, Identity};
use crate::history::cache;
use crate::history::ledger::{AppliedStep, Ledger};
use crate::lock::Lock;
use crate::plan::reader::Plan;
use crate::settings::{self, Settings};
use crate::sync::reconcile::{Reconciled, Worktree};
use crate::sync::share;
use crate::tree::fingerprint;
use crate::tree::hunks::LiveHunks;
use crate::workdir::repair::Repair;

use super::agreement::preflight;
use super::bringup::{bring_up, BroughtUp, Said};
use super::staging::Staging;

/// How to apply.
#[derive(Debug, Clone, Default)]
pub struct ApplyOptions {
    pub dry_run: bool,
    pub allow_duplicate_hunks: bool,
    /// Group commit: up to this many steps become durable in one push
    /// (0 and 1: each step on its own).
    pub batch: usize,
}

impl ApplyOptions {
    /// What the run's config says, before any flag: `steps.batch` and
    /// `steps.allowDuplicateHunks` are read in [`settings::RunConfig`] only.
    pub fn from_config(config: &settings::RunConfig) -> ApplyOptions {
        ApplyOptions {
            dry_run: false,
            allow_duplicate_hunks: config.allow_duplicate_hunks,
            batch: config.batch,
        }
    }
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
        /// The effects it would deliver once durable: `<key>: <target>`.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        effects: Vec<String>,
    },
    /// Already applied: `commit` carries its receipt with the same digest.
    Skip {
        step: String,
        commit: String,
        /// Set when this is the plan's own repeat of a step it already held
        /// (a redelivery), read once.
        #[serde(skip_serializing_if = "Option::is_none")]
        redelivery: Option<Redelivery>,
    },
}

/// A plan line that repeats an earlier one (same id, same decision).
#[derive(Debug, Clone, Serialize)]
pub struct Redelivery {
    pub line: usize,
    pub first_line: usize,
}

/// Where a step's decision came from, in the agent loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Asked of the decider in this invocation.
    Decider,
    /// Recorded before a crash; applied now without asking again.
    Journal,
    /// Made in the worktree by the agent's own tools, then recorded.
    Record,
    /// Written by `undo`: earlier steps' files as they were.
    Undo,
    /// Sent by an MCP client (`apply_step`).
    Mcp,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Decider => "decider",
            Source::Journal => "journal",
            Source::Record => "record",
            Source::Undo => "undo",
            Source::Mcp => "mcp",
        }
    }
}

/// A step of the agent loop: its index in the run and where its decision
/// came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    pub index: usize,
    pub source: Source,
}

/// Where a session reports as it goes: the CLI's terminal (status on
/// stderr, steps on stdout), JSON, or nothing. Every method has a default
/// that says nothing.
pub trait Reporter {
    /// A one-line note for the user (a stale lock removed, ...).
    fn note(&mut self, _note: &str) {}
    /// What finishing an interrupted worktree update did.
    fn repaired(&mut self, _repair: &Repair) {}
    /// What bringing the local and durable branches together did.
    fn reconciled(&mut self, _reconciled: &Reconciled) {}
    /// A step applied, skipped, or that a dry run would apply; `origin` is
    /// set in the agent loop.
    fn step(&mut self, _outcome: &StepOutcome, _origin: Option<Origin>) {}
}

/// How a session ended: what `apply`, `resume` and `run` report at the end.
#[derive(Debug)]
pub struct Finished {
    pub repair: Repair,
    pub reconcile: Reconciled,
    /// The head the steps are on (a dry run's exists only in memory).
    pub head: Option<Oid>,
    pub artifact: String,
    pub history: String,
    /// The effects this session delivered (or whose failure it recorded).
    pub effects: Vec<super::outcomes::Delivered>,
    /// The keys of effects this box held back (`steps.effects`), and of
    /// those after them, which wait in order: pending.
    pub effects_pending: Vec<String>,
}

/// A run whose box is brought up (locked, repaired, reconciled) and whose
/// receipts are not read yet: [`Opened::load`] reads them once and gives
/// the [`Session`] that applies steps. Nothing can be applied before the
/// receipts are read, and they cannot be read twice.
pub struct Opened<'r> {
    session: Session<'r>,
    /// The receipts read for the repair, and the head they were read at.
    read: Option<(Option<Oid>, Ledger)>,
    /// Whether the plan was checked against those receipts.
    plan_checked: bool,
}

impl<'r> Opened<'r> {
    /// What finishing an interrupted worktree update did.
    pub fn repair(&self) -> &Repair {
        &self.session.bringup.repair
    }

    /// What bringing the local and durable branches together did.
    pub fn reconciled(&self) -> &Reconciled {
        &self.session.bringup.reconciled
    }

    /// The head the first step goes on.
    pub fn head(&self) -> Option<Oid> {
        self.session.receipts.head
    }

    /// Read the run's receipts at the head (from the receipt cache where it
    /// is exact, or the ones the repair read when reconcile left the head
    /// where it was), and with `counts` the hunk counts too (otherwise they
    /// are read when a step is first applied: a rerun that skips everything
    /// does not need them). Refuses a history that breaks an invariant.
    pub fn load(self, counts: bool) -> Result<Session<'r>> {
        Ok(self.load_reused(counts)?.0)
    }

    /// As [`Opened::load`] without counts, with `plan` checked against the
    /// receipts (the check `open` made is not repeated when they are the
    /// same).
    pub fn load_for(self, plan: &Plan) -> Result<Session<'r>> {
        let checked = self.plan_checked;
        let (session, reused) = self.load_reused(false)?;
        if !(reused && checked) {
            preflight(session.context.repo, plan, &session.receipts.ledger)?;
        }
        Ok(session)
    }

    fn load_reused(self, counts: bool) -> Result<(Session<'r>, bool)> {
        let Opened {
            mut session, read, ..
        } = self;
        let s = session.context.settings;
        let (ledger, reused) = match read {
            Some((at, ledger)) if !counts && at == session.receipts.head => (ledger, true),
            _ if counts => {
                let indexed = session.load_indexed()?;
                session.receipts.live = Some(indexed.live);
                (indexed.ledger, false)
            }
            _ => (
                cache::load_ledger(session.context.repo, session.receipts.head, &s.run)?,
                false,
            ),
        };
        ledger.ensure_sound(&s.branch)?;
        session.receipts.ledger = ledger;
        Ok((session, reused))
    }
}

/// One run, from the lock to the closing fingerprints: what the run is
/// ([`RunContext`]), what its history says ([`Receipts`]), the steps staged and
/// not durable yet, the outbox of effects, and what bringing the box up did.
pub struct Session<'r> {
    pub(super) context: RunContext<'r>,
    pub(super) receipts: Receipts,
    /// The steps staged on the durable head and not durable yet.
    pub(super) staging: Staging,
    /// The effects of durable steps to deliver, and their outcomes.
    pub(super) effects: super::outcomes::Effects,
    bringup: Bringup,
    /// Whether [`Session::identity_note`] was given.
    identity_noted: bool,
}

/// What a run is, settled when it opens and never changed by a step: the
/// repository, its settings and options, where the steps' content is, who
/// commits and how (signing, hooks).
pub(super) struct RunContext<'r> {
    pub(super) repo: &'r Repository,
    pub(super) settings: &'r Settings,
    pub(super) opts: ApplyOptions,
    /// Where the steps' content is: in the plan (the worktree follows the
    /// branch), or already in the worktree (`record`, made in place: only
    /// the index catches up with each step).
    pub(super) worktree: Worktree,
    pub(super) who: Identity,
    /// How commits are signed (`commit.gpgSign`), settled with `who`.
    pub(super) signer: Option<crate::sign::Signer>,
    /// The hooks each step must pass (`steps.hooks=true`).
    pub(super) hooks: Option<super::hooks::Hooks>,
    /// Publish the shared hunk cache every this many steps of the run
    /// (`steps.cacheEvery`; 0: never).
    pub(super) share_every: usize,
}

/// What the run's history says: the receipts read at the start, those this
/// session applied since, the live hunks, and the head the next step goes
/// on. Invariant: `head` is the commit of the last receipt of
/// `ledger` + `applied` (or the run's base when there is none).
#[derive(Default)]
pub(super) struct Receipts {
    /// The receipts at the start (empty until [`Opened::load`]).
    pub(super) ledger: Ledger,
    /// The receipts of the steps this session applied, in order.
    pub(super) applied: Vec<AppliedStep>,
    /// The live hunks at `head`, read when a step is first applied.
    pub(super) live: Option<LiveHunks>,
    pub(super) head: Option<Oid>,
}

/// What bringing the box up left: the run's lock (held until the session
/// is dropped; None in a dry run), and what repair and reconcile did.
struct Bringup {
    _lock: Option<Lock>,
    repair: Repair,
    reconciled: Reconciled,
}

impl<'r> Session<'r> {
    /// Take the lock, finish an interrupted worktree update, and reconcile
    /// the local branch with the durable one: everything a resume does
    /// before the first step. With a plan, the plan is checked against the
    /// history first, and the user's own edits are left alone (not refused)
    /// when every step of it already has a receipt. A dry run takes no lock
    /// and changes nothing.
    pub fn open(
        repo: &'r Repository,
        settings: &'r Settings,
        plan: Option<&Plan>,
        opts: ApplyOptions,
        ui: &mut dyn Reporter,
    ) -> Result<Opened<'r>> {
        Session::open_over(repo, settings, plan, opts, Worktree::Follows, ui)
    }

    /// As [`Session::open`], for steps the worktree already holds
    /// (`record`): repair has nothing to finish, and reconcile keeps the
    /// worktree's changes.
    pub fn open_in_place(
        repo: &'r Repository,
        settings: &'r Settings,
        opts: ApplyOptions,
        ui: &mut dyn Reporter,
    ) -> Result<Opened<'r>> {
        Session::open_over(repo, settings, None, opts, Worktree::Holds, ui)
    }

    fn open_over(
        repo: &'r Repository,
        settings: &'r Settings,
        plan: Option<&Plan>,
        opts: ApplyOptions,
        worktree: Worktree,
        ui: &mut dyn Reporter,
    ) -> Result<Opened<'r>> {
        let s = settings;
        // Attributes and config as they are now (a long-lived process, the
        // MCP server, opens a session per call).
        crate::tree::convert::forget();
        crate::flush::mark_start();
        // One runner per branch: not this one if another worktree has it.
        crate::git::ensure_branch_is_ours(repo, &s.branch)?;
        // Who commits is settled before anything is written.
        let who = identity(repo)?;
        let signer = crate::sign::signer(repo, &who.committer)?;
        let config = &s.config;
        let hooks = super::hooks::enabled(repo, config)?;
        let BroughtUp {
            lock,
            repair,
            reconciled,
            read,
            plan_checked,
        } = bring_up(
            repo,
            s,
            plan,
            opts.dry_run,
            worktree,
            &mut |said| match said {
                Said::Note(n) => ui.note(n),
                Said::Repaired(r) => ui.repaired(r),
                Said::Reconciled(r) => ui.reconciled(r),
            },
        )?;
        // In a dry run whose durable head is not fetched, the steps are
        // shown against the local head.
        let head = reconciled.local.as_deref().map(Oid::from_str).transpose()?;
        let share_every = config.cache_every;
        let session = Session {
            context: RunContext {
                repo,
                settings,
                opts,
                worktree,
                who,
                signer,
                hooks,
                share_every,
            },
            receipts: Receipts {
                head,
                ..Receipts::default()
            },
            staging: Staging::on(head),
            effects: Default::default(),
            bringup: Bringup {
                _lock: lock,
                repair,
                reconciled,
            },
            identity_noted: false,
        };
        Ok(Opened {
            session,
            read,
            plan_checked,
        })
    }

    /// The receipts and live hunks at the head: from this box's receipt
    /// cache, else a scan, with the shared cache's hunks for a long run.
    pub(super) fn load_indexed(&self) -> Result<cache::Indexed> {
        let (repo, s, every) = (
            self.context.repo,
            self.context.settings,
            self.context.share_every,
        );
        // A dry run fetches nothing: it may use this box's last copy.
        let fetch = !self.context.opts.dry_run;
        cache::load(repo, self.receipts.head, &s.run, fetch, &mut |steps| {
            share::fetch(repo, s, every, steps, fetch)
        })
    }

    /// What finishing an interrupted worktree update did.
    pub fn repair(&self) -> &Repair {
        &self.bringup.repair
    }

    /// What bringing the local and durable branches together did.
    pub fn reconciled(&self) -> &Reconciled {
        &self.bringup.reconciled
    }

    pub fn repo(&self) -> &'r Repository {
        self.context.repo
    }

    pub fn settings(&self) -> &'r Settings {
        self.context.settings
    }

    /// The head the next step goes on.
    pub fn head(&self) -> Option<Oid> {
        self.receipts.head
    }

    /// The receipts read at the start.
    pub fn ledger(&self) -> &Ledger {
        &self.receipts.ledger
    }

    /// The receipt of step `id`, read at the start or applied since.
    pub fn receipt(&self, id: &str) -> Option<&AppliedStep> {
        self.receipts
            .ledger
            .get(id)
            .or_else(|| self.receipts.applied.iter().find(|e| e.id == id))
    }

    /// Every receipt of the run, in order.
    pub fn receipts(&self) -> impl Iterator<Item = &AppliedStep> + Clone {
        self.receipts
            .ledger
            .entries
            .iter()
            .chain(&self.receipts.applied)
    }

    /// How many steps the run holds: the index of the next one.
    pub fn len(&self) -> usize {
        self.receipts.ledger.entries.len() + self.receipts.applied.len()
    }

    /// Whether the run holds no step yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Once, before the first step a session commits: the note that the
    /// receipts will carry git-steps' own identity, when git has none.
    pub fn identity_note(&mut self) -> Option<String> {
        if !self.context.who.defaulted || self.identity_noted || self.context.opts.dry_run {
            return None;
        }
        self.identity_noted = true;
        Some(default_identity_note())
    }

    /// The artifact fingerprint at the head.
    pub fn artifact(&self) -> Result<String> {
        artifact_at(
            self.context.repo,
            self.receipts.head,
            !self.context.opts.dry_run,
        )
    }

    /// Close the session: save the receipt cache when steps were applied
    /// (the next run starts from here without reading the history again),
    /// and compute the fingerprints the run reports.
    pub fn finish(mut self) -> Result<Finished> {
        if !self.context.opts.dry_run {
            // The run's updates are done: their note goes once the index
            // is durable (one flush for the run).
            crate::workdir::worktree::settle_update(self.context.repo);
        }
        let effects_pending = if self.effects.held || self.context.opts.dry_run {
            self.effects_pending()?
        } else {
            Vec::new()
        };
        let history = fingerprint::history(
            self.receipts()
                .map(|e| (e.id.as_str(), e.decision.as_str())),
        );
        let Session {
            context:
                RunContext {
                    repo,
                    settings,
                    opts,
                    ..
                },
            receipts:
                Receipts {
                    ledger,
                    applied,
                    live,
                    head,
                },
            bringup: Bringup {
                repair, reconciled, ..
            },
            staging,
            effects,
            ..
        } = self;
        staging.close()?;
        if !opts.dry_run && !applied.is_empty() {
            if let Some(counts) = &live {
                let mut entries = ledger.entries;
                entries.extend(applied);
                let mut done = Ledger::from_parts(head, ledger.base, entries);
                done.adopted = ledger.adopted;
                done.effects = ledger.effects;
                done.effects.extend(effects.applied);
                cache::save(repo, &settings.run, &done, counts);
            }
        }
        Ok(Finished {
            repair,
            reconcile: reconciled,
            head,
            artifact: artifact_at(repo, head, !opts.dry_run)?,
            history,
            effects: effects.done,
            effects_pending,
        })
    }
}

/// The artifact fingerprint of the tree at `head` (None: the empty tree).
/// `keep`: what it computed is kept for the next process (not in a dry
/// run, which holds no lock and whose objects live in memory).
fn artifact_at(repo: &Repository, head: Option<Oid>, keep: bool) -> Result<String> {
    match head {
        Some(h) => {
            fingerprint::artifact_remembered(repo, Some(&repo.find_commit(h)?.tree()?), keep)
        }
        None => fingerprint::artifact_remembered(repo, None, keep),
    }
}
