//! `effects` and verify's check of them: every effect of the run's steps
//! with its state (pending, delivered, failed), and the recorded outcomes
//! held against the log.
//!
//! Invariant: read-only, like the rest of [`super`]; an effect's state is
//! its latest recorded outcome, and an outcome that names no durable step
//! of the run (another step id, another commit, an effect its step does
//! not have) is a problem, never a delivery.

use std::collections::HashMap;

use git2::{Oid, Repository};
use serde::Serialize;

use crate::error::Result;
use crate::git::short;
use crate::history::ledger::{self, Ledger};
use crate::history::receipt;
use crate::plan::effect::key;
use crate::run::outcomes::{self, Outcomes};
use crate::settings::Settings;

/// One effect of the run.
#[derive(Debug, Serialize)]
pub struct EffectRow {
    pub key: String,
    pub step: String,
    pub number: usize,
    /// The step's commit.
    pub commit: String,
    /// `POST https://…` or `command …`.
    pub target: String,
    /// `pending`, `delivered`, `failed` or `abandoned`.
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tries: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The outcome's commit on refs/steps/effects/<run>.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// What `undo` would dispatch for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compensate: Option<String>,
    /// Pending or failed, and not to be delivered from this box: why (the
    /// step came from the history and local config does not allow its
    /// command, a secret unbound, a private address, `steps.effects`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
}

/// `effects`.
#[derive(Debug, Serialize)]
pub struct EffectsReport {
    pub run: String,
    pub branch: String,
    /// The commit whose steps are listed: the head the next `resume` stands
    /// on (the durable head when it is ahead of this box's branch: a step
    /// someone pushed is listed before anything runs it).
    pub head: Option<String>,
    /// Which head that is, in words.
    pub head_from: String,
    /// Where the outcomes were read: `durable` (fetched just now, or the
    /// local repository is durable) or `local copy` (the remote could not be
    /// asked).
    pub outcomes_from: String,
    pub effects: Vec<EffectRow>,
    pub pending: usize,
    pub delivered: usize,
    pub failed: usize,
    pub abandoned: usize,
    /// Recorded outcomes that belong to no durable step of the run.
    pub problems: Vec<String>,
}

/// The run's effects as `status` counts them, read without fetching: the
/// outcomes' durable head is asked of the remote, as the journal's is.
#[derive(Debug, Serialize)]
pub struct EffectsStatus {
    /// The outcomes' durable head (None: no outcome recorded yet).
    pub head: Option<String>,
    /// False when that head is not on this box: the counts are then this
    /// box's copy's (`git steps effects` fetches it).
    pub read: bool,
    pub total: usize,
    pub pending: usize,
    pub delivered: usize,
    pub failed: usize,
    pub abandoned: usize,
    /// What this box delivers (`steps.effects`): `all`, `http` or `none`.
    pub delivers: &'static str,
}

/// [`EffectsStatus`] for the steps of `ledger` (None: none has effects).
pub(super) fn status(
    repo: &Repository,
    s: &Settings,
    ledger: &Ledger,
) -> Result<Option<EffectsStatus>> {
    if ledger.effects.is_empty() {
        return Ok(None);
    }
    let name = outcomes::refname(&s.run);
    let local = repo.refname_to_id(&name).ok();
    let head = match &s.remote {
        None => local,
        Some(r) => r.head(repo, &name)?,
    };
    let read = head.is_none_or(|h| repo.find_commit(h).is_ok());
    let recorded = outcomes::read(repo, if read { head } else { local })?;
    let mut st = EffectsStatus {
        head: head.map(|h| h.to_string()),
        read,
        total: 0,
        pending: 0,
        delivered: 0,
        failed: 0,
        abandoned: 0,
        delivers: s.config.effects.as_str(),
    };
    for &(at, count) in &ledger.effects {
        let e = &ledger.entries[at];
        for n in 1..=count {
            st.total += 1;
            match recorded
                .of(&key(&s.run, &e.id, n), e.commit)
                .map(|o| o.status)
            {
                None => st.pending += 1,
                Some(outcomes::EffectStatus::Delivered) => st.delivered += 1,
                Some(outcomes::EffectStatus::Failed) => st.failed += 1,
                Some(outcomes::EffectStatus::Abandoned) => st.abandoned += 1,
            }
        }
    }
    Ok(Some(st))
}

/// Every effect of the run at this box's branch head, with its state; the
/// outcomes are fetched from the durable domain when it can be asked
/// (`fetch`), else read from this box's copy.
pub fn list(repo: &Repository, s: &Settings, fetch: bool) -> Result<EffectsReport> {
    let (head, head_from) = listed_head(repo, s, fetch)?;
    let ledger = ledger::scan(repo, head, &s.run)?;
    let (recorded, from) = read_outcomes(repo, s, fetch)?;
    let mut rows = Vec::new();
    for &(at, count) in &ledger.effects {
        let e = &ledger.entries[at];
        let commit = repo.find_commit(e.commit)?;
        let effects =
            receipt::effects(commit.message().unwrap_or_default(), count).unwrap_or_default();
        for n in 1..=count {
            let k = key(&s.run, &e.id, n);
            let effect = effects.get(n - 1);
            let latest = recorded.of(&k, e.commit);
            let open = latest.is_none_or(|o| o.status == outcomes::EffectStatus::Failed);
            let held = match effect {
                Some(f) if open => {
                    crate::run::authority::refusal(repo, s, &e.decision, &effects, &f.action)
                        .or_else(|| {
                            (!s.config.effects.allows(&f.action)).then(|| {
                                format!(
                                    "this box delivers no such effect (steps.effects={})",
                                    s.config.effects.as_str()
                                )
                            })
                        })
                }
                _ => None,
            };
            rows.push(EffectRow {
                key: k.clone(),
                step: e.id.clone(),
                number: n,
                commit: e.commit.to_string(),
                target: effect
                    .map(|f| f.action.describe())
                    .unwrap_or_else(|| "(unreadable)".into()),
                state: latest.map_or("pending", |o| o.status.as_str()),
                result: latest.map(|o| o.result.clone()),
                tries: latest.map(|o| o.tries),
                reason: latest.and_then(|o| o.reason.clone()),
                outcome: latest.map(|o| o.commit.to_string()),
                compensate: effect
                    .and_then(|f| f.compensate.as_ref())
                    .map(|c| c.describe()),
                held,
            });
        }
    }
    let count = |st: &str| rows.iter().filter(|r| r.state == st).count();
    Ok(EffectsReport {
        run: s.run.clone(),
        branch: s.branch.clone(),
        head: head.map(|h| h.to_string()),
        head_from,
        outcomes_from: from,
        pending: count("pending"),
        delivered: count("delivered"),
        failed: count("failed"),
        abandoned: count("abandoned"),
        problems: stray(&recorded, &ledger, &s.run),
        effects: rows,
    })
}

/// The head whose effects `effects` lists, and which head it is: the one
/// the next run stands on. The durable branch is fetched (`fetch`; into
/// refs/steps/remote/<branch>, never this box's branch or worktree), else
/// this box's last copy of it is read. When this box's branch and the
/// durable head have diverged, the durable head is listed: it is what the
/// remote holds and what a fresh clone would deliver.
fn listed_head(repo: &Repository, s: &Settings, fetch: bool) -> Result<(Option<Oid>, String)> {
    let local = repo.refname_to_id(&s.refname()).ok();
    let Some(remote) = &s.remote else {
        return Ok((local, "this box's branch, the durable one".into()));
    };
    let tracking = crate::sync::remote::tracking_ref(&s.branch);
    let (durable, copy) = if fetch {
        match remote.fetch(repo, &s.refname(), &tracking) {
            Ok(d) => (d, "the durable head"),
            Err(e) => {
                return Ok((
                    local,
                    format!("this box's branch (the remote could not be asked: {e})"),
                ))
            }
        }
    } else {
        (
            repo.refname_to_id(&tracking).ok(),
            "this box's last copy of the durable head",
        )
    };
    Ok(match (local, durable) {
        (l, None) if fetch => (l, "this box's branch (the remote has no such branch yet)".into()),
        (l, None) => (l, "this box's branch".into()),
        (None, Some(d)) => (Some(d), copy.into()),
        (Some(l), Some(d)) if l == d => (Some(d), copy.into()),
        (Some(l), Some(d)) if repo.graph_descendant_of(l, d)? => (
            Some(l),
            format!("this box's branch, ahead of {copy} {}", short(d)),
        ),
        (Some(l), Some(d)) if repo.graph_descendant_of(d, l)? => (
            Some(d),
            format!("{copy}, ahead of this box's branch at {}", short(l)),
        ),
        (Some(l), Some(d)) => (
            Some(d),
            format!(
                "{copy}; this box's branch at {} has diverged from it (`git steps resume` refuses until that is settled)",
                short(l)
            ),
        ),
    })
}

/// The outcomes: fetched when asked and possible, else this box's copy.
fn read_outcomes(repo: &Repository, s: &Settings, fetch: bool) -> Result<(Outcomes, String)> {
    if fetch {
        match outcomes::load(repo, s) {
            Ok(o) => return Ok((o, "durable".into())),
            Err(e) if s.remote.is_some() => {
                let local = repo.refname_to_id(&outcomes::refname(&s.run)).ok();
                return Ok((
                    outcomes::read(repo, local)?,
                    format!("local copy (the remote could not be asked: {e})"),
                ));
            }
            Err(e) => return Err(e),
        }
    }
    let local = repo.refname_to_id(&outcomes::refname(&s.run)).ok();
    let from = if s.remote.is_some() {
        "local copy"
    } else {
        "durable"
    };
    Ok((outcomes::read(repo, local)?, from.into()))
}

/// Recorded outcomes that no durable step of the run explains.
fn stray(recorded: &Outcomes, ledger: &Ledger, run: &str) -> Vec<String> {
    let counts: HashMap<usize, usize> = ledger.effects.iter().copied().collect();
    let mut out = Vec::new();
    for o in &recorded.list {
        let why = match ledger.get(&o.step) {
            None => Some(format!("step {} has no receipt in the run", o.step)),
            Some(e) if e.commit != o.receipt => Some(format!(
                "it names commit {} for step {}, whose receipt is commit {}",
                short(o.receipt),
                o.step,
                short(e.commit)
            )),
            Some(e) if o.number > counts.get(&e.index).copied().unwrap_or(0) => Some(format!(
                "step {} carries {} effect(s), not an effect {}",
                o.step,
                counts.get(&e.index).copied().unwrap_or(0),
                o.number
            )),
            Some(_) if o.key != key(run, &o.step, o.number) => Some(format!(
                "its key {} is not {}",
                o.key,
                key(run, &o.step, o.number)
            )),
            Some(_) => None,
        };
        if let Some(why) = why {
            out.push(format!(
                "effect outcome {} ({} {}) belongs to no durable step: {why}",
                short(o.commit),
                o.key,
                o.status.as_str()
            ));
        }
    }
    out
}

/// verify's check: problems (outcomes of no durable step) and notes
/// (effects not delivered yet), from this box's copy of the outcomes (verify
/// fetches nothing).
pub fn check(
    repo: &Repository,
    s: &Settings,
    ledger: &Ledger,
) -> Result<(Vec<String>, Vec<String>)> {
    let local: Option<Oid> = repo.refname_to_id(&outcomes::refname(&s.run)).ok();
    let recorded = outcomes::read(repo, local)?;
    let problems = stray(&recorded, ledger, &s.run);
    let mut notes = Vec::new();
    let (mut pending, mut failed) = (0, 0);
    for &(at, count) in &ledger.effects {
        let Some(e) = ledger.entries.get(at) else {
            continue;
        };
        for n in 1..=count {
            match recorded.of(&key(&s.run, &e.id, n), e.commit) {
                None => pending += 1,
                Some(o) if o.status == outcomes::EffectStatus::Failed => failed += 1,
                Some(_) => {}
            }
        }
    }
    if pending + failed > 0 {
        notes.push(format!(
            "{pending} effect(s) pending and {failed} failed (as this box's copy of {} says): the next `apply`, `run` or `resume` delivers them; `git steps effects` lists them",
            outcomes::refname(&s.run)
        ));
    }
    Ok((problems, notes))
}
