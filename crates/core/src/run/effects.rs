//! A session's effects: delivered once their steps are durable, their
//! outcomes recorded, redelivered on resume (SPEC "Effects").
//!
//! Owns the order: the effects of the durable history that have no
//! delivered outcome first (a crash, a failure or another box left them),
//! oldest step first, then those of the steps this session makes durable,
//! as each flush lands. Each effect passes `effect-start`, is tried
//! ([`super::deliver`]), passes `effect-delivered` when it was, and its
//! outcome is recorded ([`super::outcomes`]) before `effect-recorded` and
//! the next effect. Invariant: no effect is started before its step's
//! receipt is durable (only flushed steps and the durable ledger's are ever
//! queued); every effect of a durable step is tried until an outcome
//! `delivered` is recorded for its key (at least once; exactly once for a
//! receiver that honours the key); a failure stops the run with exit 1
//! naming the effect, after its outcome is recorded.

use std::time::Duration;

use git2::Oid;

use crate::crash;
use crate::error::{Error, Result};
use crate::git::short;
use crate::plan::effect::{key, Effect};

use super::deliver::{deliver, Policy};
use super::outcomes::{self, Delivered, Due, EffectStatus, Outcome, Outcomes};
use super::session::{Reporter, Session};

impl Session<'_> {
    /// The run's recorded outcomes (fetched from the durable domain once).
    pub fn outcomes(&mut self) -> Result<&Outcomes> {
        if self.effects.outcomes.is_none() {
            let o = outcomes::load(self.context.repo, self.context.settings)?;
            self.effects.outcomes = Some(o);
        }
        Ok(self.effects.outcomes.as_ref().expect("loaded above"))
    }

    /// Deliver every effect that is due: first, once per session, those of
    /// the durable history without a delivered outcome, then those of the
    /// steps flushed since the last call. Stops at the first effect whose
    /// tries all fail (exit 1, naming it; its failure is recorded). A dry
    /// run delivers nothing.
    /// A plan step this box holds, whose receipt exists with the same
    /// decision: the decision is this box's own too (SPEC "Effects"), so
    /// effects held back for want of that authority are tried again at the
    /// next delivery.
    pub fn own_decision(&mut self, step: &crate::plan::step::Step) {
        if !self.context.opts.dry_run
            && super::authority::note_decided(
                self.context.repo,
                &self.context.settings.run,
                &step.digest,
                &step.effects,
            )
        {
            self.effects.held = false;
        }
    }

    pub fn deliver_effects(&mut self, ui: &mut dyn Reporter) -> Result<()> {
        if self.context.opts.dry_run {
            return self.preview_effects(ui);
        }
        if !self.effects.history_queued {
            self.effects.history_queued = true;
            let mut earlier = self.undelivered_in_history()?;
            earlier.append(&mut self.effects.queue);
            self.effects.queue = earlier;
        }
        while !self.effects.held && !self.effects.queue.is_empty() {
            let due = self.effects.queue.remove(0);
            for (i, effect) in due.effects.iter().enumerate() {
                match self.deliver_one(&due, i + 1, effect, ui) {
                    Ok(true) => {}
                    // Held back on this box: it and what follows wait, in
                    // order (an undo's compensation never goes before the
                    // effect it undoes).
                    Ok(false) => {
                        self.effects.held = true;
                        self.effects.queue.insert(0, due);
                        break;
                    }
                    Err(e) => {
                        // What is left of this step's effects stays due.
                        self.effects.queue.insert(0, due);
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }

    /// The keys of the effects still due after this session (held back by
    /// `steps.effects`, or queued behind one that was): pending for a box
    /// that delivers them.
    pub fn effects_pending(&mut self) -> Result<Vec<String>> {
        let run = self.context.settings.run.clone();
        let queue: Vec<(String, Oid, usize)> = self
            .effects
            .queue
            .iter()
            .map(|d| (d.step.clone(), d.receipt, d.effects.len()))
            .collect();
        let mut out = Vec::new();
        for (step, receipt, count) in queue {
            for n in 1..=count {
                let k = key(&run, &step, n);
                if !self.outcomes()?.settled(&k, receipt) {
                    out.push(k);
                }
            }
        }
        Ok(out)
    }

    /// A dry run's word on the effects of the durable history that the
    /// real run would deliver first (once; read without fetching). The
    /// plan's own steps list theirs with the step.
    /// When the real run would first fast-forward to the durable head,
    /// the history is that head's: its steps' effects are what the real
    /// run would deliver, and a dry run must show them before anything
    /// runs (a step someone pushed carries them).
    fn preview_effects(&mut self, ui: &mut dyn Reporter) -> Result<()> {
        if self.effects.history_queued {
            return Ok(());
        }
        self.effects.history_queued = true;
        let ahead = match &self.reconciled().action {
            crate::sync::reconcile::Action::FastForward { to, .. } => {
                Some(crate::history::cache::load_ledger(
                    self.context.repo,
                    Some(to.parse()?),
                    &self.context.settings.run,
                )?)
            }
            _ => None,
        };
        if ahead.as_ref().unwrap_or(self.ledger()).effects.is_empty() {
            return Ok(());
        }
        let Some(peeked) = outcomes::peek(self.context.repo, self.context.settings)? else {
            ui.note(&format!(
                "the run's steps carry effects whose recorded outcomes are not on this box ({}): `git steps effects` fetches them and lists what is due",
                outcomes::refname(&self.context.settings.run)
            ));
            return Ok(());
        };
        self.effects.outcomes = Some(peeked);
        let dues = match &ahead {
            Some(l) => self.undelivered_in(with_effects(l))?,
            None => self.undelivered_in_history()?,
        };
        for due in &dues {
            for (i, e) in due.effects.iter().enumerate() {
                let k = key(&self.context.settings.run, &due.step, i + 1);
                if !self.outcomes()?.settled(&k, due.receipt) {
                    // (A plan step read later may still make its decision
                    // this box's own: said as it stands now.)
                    let why = match super::authority::refusal(
                        self.context.repo,
                        self.context.settings,
                        &due.digest,
                        &due.effects,
                        &e.action,
                    ) {
                        Some(why) if !self.effects.held => {
                            self.effects.held = true;
                            format!(" (held: {why})")
                        }
                        _ => held_back(self.context.settings, &e.action, &mut self.effects.held),
                    };
                    ui.note(&format!(
                        "would deliver effect {k} first ({}): step {} is durable and the effect has no delivered outcome{why}",
                        e.action.describe(),
                        due.step,
                    ));
                }
            }
        }
        // Nothing is delivered: every one of them is still pending after
        // this dry run (`effects_pending`).
        self.effects.queue.splice(0..0, dues);
        Ok(())
    }

    /// The steps of the durable history (the ledger at the start) that
    /// carry an effect with no delivered outcome, oldest first, their
    /// effects read back from their commits.
    fn undelivered_in_history(&mut self) -> Result<Vec<Due>> {
        let with = with_effects(self.ledger());
        self.undelivered_in(with)
    }

    /// As [`Session::undelivered_in_history`], for the receipts `with`
    /// (each with how many effects it carries).
    fn undelivered_in(
        &mut self,
        with: Vec<(crate::history::ledger::AppliedStep, usize)>,
    ) -> Result<Vec<Due>> {
        let run = self.context.settings.run.clone();
        let repo = self.context.repo;
        let mut out = Vec::new();
        for (entry, count) in with {
            let outcomes = self.outcomes()?;
            if (1..=count).all(|n| outcomes.settled(&key(&run, &entry.id, n), entry.commit)) {
                continue;
            }
            let commit = repo.find_commit(entry.commit)?;
            let message = commit.message().unwrap_or_default();
            let effects = crate::history::receipt::effects(message, count).map_err(|m| {
                Error::corrupt(format!(
                    "step {}'s commit {}: {m}",
                    entry.id,
                    short(entry.commit)
                ))
                .with_hint("the effects of a step are written by git-steps above its trailers; a commit whose block was changed by hand cannot be delivered from")
            })?;
            out.push(Due {
                step: entry.id,
                receipt: entry.commit,
                digest: entry.decision,
                effects,
            });
        }
        Ok(out)
    }

    /// Deliver the `n`th effect of `due` unless it was delivered, and record
    /// its outcome. False: this box holds it back (`steps.effects`).
    fn deliver_one(
        &mut self,
        due: &Due,
        n: usize,
        effect: &Effect,
        ui: &mut dyn Reporter,
    ) -> Result<bool> {
        let (repo, s) = (self.context.repo, self.context.settings);
        let k = key(&s.run, &due.step, n);
        if self.outcomes()?.settled(&k, due.receipt) {
            return Ok(true);
        }
        if let Some(why) =
            super::authority::refusal(repo, s, &due.digest, &due.effects, &effect.action)
        {
            // Not on this box's authority: held, named, for a box (or a
            // local config) that allows it; nothing is sent or recorded.
            ui.note(&format!(
                "effect {k} of step {} is not delivered: {why}; it, and every effect after it, stays pending (not yours to run? give it up: `git steps effects --abandon {k}`)",
                due.step
            ));
            return Ok(false);
        }
        let allowed = s.config.effects;
        if !allowed.allows(&effect.action) {
            // Held back on this box (a reviewer's, an auditor's): nothing
            // is sent or recorded, so a box that allows it delivers it.
            ui.note(&format!(
                "effect {k} ({}) is not delivered on this box (steps.effects={}): it, and every effect after it, stays pending for a box that delivers them, in order",
                effect.action.describe(),
                allowed.as_str()
            ));
            return Ok(false);
        }
        crash::point("effect-start", &due.step);
        let policy = Policy {
            tries: s.config.effect_retries.max(1),
            timeout: Duration::from_secs(s.config.effect_timeout_secs.max(1) as u64),
            ca: crate::git::ca_locations(repo),
            proxies: crate::sync::remote::proxy::Rules::read(repo),
            counted: Some((
                super::deliver::tries_file(repo.path(), &k),
                due.step.clone(),
            )),
        };
        let dir = repo.workdir().unwrap_or_else(|| repo.path()).to_path_buf();
        let tried = deliver(&effect.action, &k, &dir, &policy);
        if tried.status == EffectStatus::Delivered {
            crash::point("effect-delivered", &due.step);
        }
        let outcome = Outcome {
            key: k.clone(),
            step: due.step.clone(),
            number: n,
            receipt: due.receipt,
            status: tried.status,
            result: tried.result.clone(),
            tries: tried.tries,
            reason: tried.reason.clone(),
            commit: Oid::ZERO_SHA1,
        };
        let mut recorded = self.effects.outcomes.take().unwrap_or_default();
        let res = outcomes::append(repo, s, &mut recorded, outcome);
        self.effects.outcomes = Some(recorded);
        res.map_err(|e| {
            e.with_note(format!(
                "effect {n} of step {} (key {k}) was {} ({}) but its outcome could not be recorded: the next run delivers it again with the same key",
                due.step,
                tried.status.as_str(),
                tried.result
            ))
        })?;
        crash::point("effect-recorded", &due.step);
        // Its tries are in the outcome now.
        let _ = std::fs::remove_file(super::deliver::tries_file(repo.path(), &k));
        let target = effect.action.describe();
        ui.note(&format!(
            "effect {k}: {} ({}, {} tr{}) — {target}",
            tried.status.as_str(),
            tried.result,
            tried.tries,
            if tried.tries == 1 { "y" } else { "ies" }
        ));
        self.effects.done.push(Delivered {
            key: k.clone(),
            step: due.step.clone(),
            number: n,
            target: target.clone(),
            status: tried.status,
            result: tried.result.clone(),
            tries: tried.tries,
        });
        if tried.status == EffectStatus::Failed {
            return Err(Error::program(format!(
                "step {}: effect {n} ({target}, key {k}) failed after {} tr{}: {}; the failure is recorded on {}; the step itself is durable",
                due.step,
                tried.tries,
                if tried.tries == 1 { "y" } else { "ies" },
                match (&tried.reason, &tried.detail) {
                    (Some(r), Some(d)) if super::deliver::answers_shown() => format!("{r}: {d} (this answer is shown here, never recorded)"),
                    (Some(r), Some(_)) => format!("{r} (what it answered or printed is neither recorded nor shown: `-v` shows it on this box)"),
                    (Some(r), None) => r.clone(),
                    (None, _) => tried.result.clone(),
                },
                outcomes::refname(&s.run)
            ))
            .with_hint(crate::error::Hint::rerun_after("fix the receiver (or what the effect needs on this box)").because("it delivers this effect again with the same key, and none that were delivered; `git steps effects` lists them")));
        }
        Ok(true)
    }
}

/// Give up on the effect `key` (pending or failed): an outcome
/// `abandoned` is recorded by compare-and-swap, so no run delivers it
/// again and none stops on it. Takes this repository's runner lock. A
/// delivered effect, or a key no durable step of the run carries, is
/// refused (exit 1).
pub fn abandon(
    repo: &git2::Repository,
    s: &crate::settings::Settings,
    k: &str,
    why: &str,
) -> Result<Outcome> {
    let _lock = crate::lock::acquire(repo.path())?;
    let head = match &s.remote {
        Some(r) => r.fetch(
            repo,
            &s.refname(),
            &crate::settings::remote::tracking_ref(&s.branch),
        )?,
        None => repo.refname_to_id(&s.refname()).ok(),
    };
    let ledger = crate::history::ledger::scan(repo, head, &s.run)?;
    let found = ledger.effects.iter().find_map(|&(at, count)| {
        let e = ledger.entries.get(at)?;
        (1..=count)
            .find(|&n| key(&s.run, &e.id, n) == k)
            .map(|n| (e.id.clone(), e.commit, n))
    });
    let Some((step, receipt, n)) = found else {
        return Err(Error::input(format!(
            "no durable step of run {} carries an effect with the key {k:?}",
            s.run
        ))
        .with_hint("`git steps effects` lists every effect with its key"));
    };
    let mut recorded = outcomes::load(repo, s)?;
    if let Some(o) = recorded.of(k, receipt) {
        if o.status != EffectStatus::Failed {
            return Err(Error::input(format!(
                "effect {k} is {} already (outcome {}): only a pending or failed effect can be abandoned",
                o.status.as_str(),
                short(o.commit)
            )));
        }
    }
    let outcome = Outcome {
        key: k.to_string(),
        step,
        number: n,
        receipt,
        status: EffectStatus::Abandoned,
        result: "abandoned".into(),
        tries: 0,
        reason: Some(why.to_string()),
        commit: Oid::ZERO_SHA1,
    };
    outcomes::append(repo, s, &mut recorded, outcome)?;
    Ok(recorded.list.last().cloned().expect("appended above"))
}

/// What a dry run adds to an effect the real run would not deliver: one
/// this box holds back (`steps.effects`), and, once one is (`waiting`),
/// every effect after it, since effects go in order.
/// The receipts of `ledger` that carry effects, with how many.
fn with_effects(
    ledger: &crate::history::ledger::Ledger,
) -> Vec<(crate::history::ledger::AppliedStep, usize)> {
    ledger
        .effects
        .iter()
        .filter_map(|&(at, count)| Some((ledger.entries.get(at)?.clone(), count)))
        .collect()
}

pub(super) fn held_back(
    s: &crate::settings::Settings,
    action: &crate::plan::effect::Action,
    waiting: &mut bool,
) -> String {
    let how = s.config.effects.as_str();
    if *waiting {
        format!(" (waits behind an effect this box holds back, steps.effects={how})")
    } else if s.config.effects.allows(action) {
        String::new()
    } else {
        *waiting = true;
        format!(" (held back on this box, steps.effects={how}: it and the effects after it wait for a box that delivers them)")
    }
}
