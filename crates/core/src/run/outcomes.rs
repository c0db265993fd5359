//! The recorded outcomes of a run's effects (SPEC "Effects").
//!
//! Owns `refs/steps/effects/<run>`: a first-parent chain of commits (empty
//! trees), one per outcome, whose trailers say which effect (`Effect-Key`,
//! `Effect-Step`, `Effect-Number`, `Effect-Receipt`: the step's commit) and
//! what became of it (`Effect-Status`: `delivered` or `failed`,
//! `Effect-Result`, `Effect-Tries`). Invariant: an outcome is appended only
//! with a compare-and-swap on the durable domain (the remote accepts the ref
//! update, or the local ref moves under its lock and is fsynced), so two
//! runners never both record; the latest outcome of a key is its state, and
//! an effect whose latest outcome is not `delivered` is delivered again.

use std::collections::HashMap;

use git2::{Oid, Repository};

use crate::error::{Error, Result};
use crate::git::short;
use crate::plan::effect::Effect;
use crate::settings::Settings;

const KEY_KEY: &str = "Effect-Key";
const KEY_STEP: &str = "Effect-Step";
const KEY_NUMBER: &str = "Effect-Number";
const KEY_RECEIPT: &str = "Effect-Receipt";
const KEY_STATUS: &str = "Effect-Status";
const KEY_RESULT: &str = "Effect-Result";
const KEY_TRIES: &str = "Effect-Tries";

/// The outcomes ref of `run`, locally and on the remote.
pub fn refname(run: &str) -> String {
    format!("refs/steps/effects/{run}")
}

/// What became of an effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EffectStatus {
    /// The receiver answered 2xx (a command exited 0).
    Delivered,
    /// Every try failed; delivered again by the next run.
    Failed,
    /// Given up on by the user (`git steps effects --abandon`): never
    /// delivered again.
    Abandoned,
}

impl EffectStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            EffectStatus::Delivered => "delivered",
            EffectStatus::Failed => "failed",
            EffectStatus::Abandoned => "abandoned",
        }
    }
}

/// One recorded outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Outcome {
    pub key: String,
    pub step: String,
    /// The effect's position in its step, from 1.
    pub number: usize,
    /// The step's commit.
    #[serde(serialize_with = "ser_oid")]
    pub receipt: Oid,
    pub status: EffectStatus,
    /// `HTTP 201`, `exit 0`, `timeout`…
    pub result: String,
    pub tries: usize,
    /// Why it failed (the last try's answer, shortened).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The outcome's own commit on the outcomes ref.
    #[serde(serialize_with = "ser_oid")]
    pub commit: Oid,
}

fn ser_oid<S: serde::Serializer>(oid: &Oid, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&oid.to_string())
}

/// The outcomes of a run, oldest first.
#[derive(Debug, Clone, Default)]
pub struct Outcomes {
    pub head: Option<Oid>,
    pub list: Vec<Outcome>,
    /// Key → position of its latest outcome.
    latest: HashMap<String, usize>,
}

impl Outcomes {
    fn push(&mut self, o: Outcome) {
        self.latest.insert(o.key.clone(), self.list.len());
        self.list.push(o);
    }

    /// The latest outcome recorded for `key`.
    pub fn latest(&self, key: &str) -> Option<&Outcome> {
        self.latest.get(key).map(|&i| &self.list[i])
    }

    /// The latest outcome of `key` for the step whose commit is
    /// `receipt`: an outcome that names another commit (a run started over
    /// under the same id, a forged record) is not this effect's.
    pub fn of(&self, key: &str, receipt: Oid) -> Option<&Outcome> {
        self.latest(key).filter(|o| o.receipt == receipt)
    }

    /// Whether the effect `key` of the step at `receipt` is settled:
    /// delivered, or abandoned by the user. Anything else is delivered (again).
    pub fn settled(&self, key: &str, receipt: Oid) -> bool {
        self.of(key, receipt)
            .is_some_and(|o| matches!(o.status, EffectStatus::Delivered | EffectStatus::Abandoned))
    }
}

/// What a session knows of its run's effects (the delivery itself is
/// [`super::effects`]'s).
/// The effects of one durable step, to deliver.
#[derive(Debug)]
pub(crate) struct Due {
    pub(crate) step: String,
    pub(crate) receipt: Oid,
    /// The step's decision digest (who may deliver its effects).
    pub(crate) digest: String,
    pub(crate) effects: Vec<Effect>,
}

/// What a session knows of its effects.
#[derive(Debug, Default)]
pub struct Effects {
    /// Read (fetched) when first needed.
    pub(crate) outcomes: Option<Outcomes>,
    /// Steps whose effects are to be delivered, oldest first.
    pub(crate) queue: Vec<Due>,
    /// Whether the durable history's undelivered effects were queued.
    pub(crate) history_queued: bool,
    /// What this session delivered or recorded as failed.
    pub(crate) done: Vec<Delivered>,
    /// Set when this box held an effect back (`steps.effects`): it and
    /// every effect after it wait, in order, for a box that delivers them.
    pub(crate) held: bool,
    /// The steps this session applied that carry effects: (position in the
    /// run, how many), as [`crate::history::ledger::Ledger::effects`].
    pub(crate) applied: Vec<(usize, usize)>,
}

impl Effects {
    /// Queue the effects of a step that just became durable.
    pub(crate) fn due(&mut self, step: &str, receipt: Oid, digest: &str, effects: Vec<Effect>) {
        if !effects.is_empty() {
            self.queue.push(Due {
                step: step.to_string(),
                receipt,
                digest: digest.to_string(),
                effects,
            });
        }
    }
}

/// One delivery (or recorded failure), as reported.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Delivered {
    pub key: String,
    pub step: String,
    pub number: usize,
    /// `POST https://…` or `command …`.
    pub target: String,
    pub status: EffectStatus,
    pub result: String,
    pub tries: usize,
}

/// Read the chain ending at `head`.
pub fn read(repo: &Repository, head: Option<Oid>) -> Result<Outcomes> {
    let mut list = Vec::new();
    let mut next = head;
    while let Some(oid) = next {
        let c = repo.find_commit(oid)?;
        let msg = c
            .message()
            .map_err(|_| not_an_outcome(oid, "its message is not UTF-8"))?;
        list.push(parse_message(msg, oid)?);
        next = c.parent_ids().next();
        if list.len() > 10_000_000 {
            return Err(not_an_outcome(oid, "the chain does not end"));
        }
    }
    list.reverse();
    let mut o = Outcomes {
        head,
        ..Outcomes::default()
    };
    for x in list {
        o.push(x);
    }
    Ok(o)
}

fn not_an_outcome(commit: Oid, what: &str) -> Error {
    Error::corrupt(format!(
        "effects commit {} is not an effect's outcome: {what}",
        short(commit)
    ))
    .with_hint("refs/steps/effects/<run> must only be written by git-steps")
}

fn parse_message(msg: &str, commit: Oid) -> Result<Outcome> {
    let bad = |what: &str| not_an_outcome(commit, what);
    let fields = super::chain::Fields::of(msg, &bad)?;
    let get = |key: &str| fields.get(key);
    let status = match get(KEY_STATUS)?.as_str() {
        "delivered" => EffectStatus::Delivered,
        "failed" => EffectStatus::Failed,
        "abandoned" => EffectStatus::Abandoned,
        other => return Err(bad(&format!("unknown status {other:?}"))),
    };
    let receipt = get(KEY_RECEIPT)?;
    let receipt = (receipt.len() == 40)
        .then(|| Oid::from_str(&receipt).ok())
        .flatten()
        .ok_or_else(|| bad("a bad Effect-Receipt"))?;
    let number: usize = get(KEY_NUMBER)?
        .parse()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| bad("a bad Effect-Number"))?;
    let reason = (status != EffectStatus::Delivered).then(|| {
        // The paragraph of ours between the subject and the trailers.
        let body: Vec<&str> = msg.split("\n\n").collect();
        let inner = body
            .get(1..body.len().saturating_sub(1))
            .unwrap_or_default();
        inner
            .iter()
            .find_map(|p| p.trim().strip_prefix("Reason: "))
            .unwrap_or_default()
            .to_string()
    });
    Ok(Outcome {
        key: get(KEY_KEY)?,
        step: get(KEY_STEP)?,
        number,
        receipt,
        status,
        result: get(KEY_RESULT)?,
        tries: get(KEY_TRIES)?
            .parse()
            .map_err(|_| bad("a bad Effect-Tries"))?,
        reason,
        commit,
    })
}

/// The message of an outcome. Every value is one line of our own making or
/// an id that cannot break a line; the reason is flattened onto one line of
/// its own paragraph.
fn message(o: &Outcome) -> String {
    let mut m = format!(
        "effect {}: {} ({})\n\n",
        o.key,
        o.status.as_str(),
        flat(&o.result)
    );
    if let Some(r) = &o.reason {
        m.push_str("Reason: ");
        m.push_str(&flat(r));
        m.push_str("\n\n");
    }
    // Who recorded it: two boxes that both deliver an effect write two
    // different records, so the second compare-and-swap fails (exit 4).
    m.push_str(&format!(
        "Recorded by git-steps {} (pid {}) on {}.\n\n",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        flat(&hostname())
    ));
    m.push_str(&format!(
        "{KEY_KEY}: {}\n{KEY_STEP}: {}\n{KEY_NUMBER}: {}\n{KEY_RECEIPT}: {}\n{KEY_STATUS}: {}\n{KEY_RESULT}: {}\n{KEY_TRIES}: {}\n",
        o.key,
        o.step,
        o.number,
        o.receipt,
        o.status.as_str(),
        flat(&o.result),
        o.tries
    ));
    m
}

/// This machine's name, as the kernel has it.
fn hostname() -> String {
    crate::os::hostname().unwrap_or_else(|| "an unnamed host".into())
}

/// Text on one line, without control characters, at most 300 characters.
fn flat(text: &str) -> String {
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect();
    let s = words.join(" ");
    if s.chars().count() > 300 {
        s.chars().take(299).collect::<String>() + "…"
    } else {
        s
    }
}

/// Bring the local outcomes ref up to the durable one and read it.
pub fn load(repo: &Repository, s: &Settings) -> Result<Outcomes> {
    // Outcomes recorded while the local repository was the durable domain
    // (a run that gained its remote later) go to the remote as they are,
    // never dropped: their effects would be delivered again.
    let name = refname(&s.run);
    if s.remote.is_some() {
        if let Ok(local) = repo.refname_to_id(&name) {
            read(repo, Some(local))?;
        }
    }
    let head = super::chain::load(repo, s, &name, super::chain::Missing::Push)?;
    read(repo, head)
}

/// The run's outcomes as the durable domain holds them, read without
/// fetching or writing (a dry run): None when the remote's head of them is
/// not on this box.
pub fn peek(repo: &Repository, s: &Settings) -> Result<Option<Outcomes>> {
    let name = refname(&s.run);
    let head = match &s.remote {
        None => repo.refname_to_id(&name).ok(),
        Some(r) => r.head(repo, &name)?,
    };
    match head {
        Some(h) if repo.find_commit(h).is_err() => Ok(None),
        head => read(repo, head).map(Some),
    }
}

/// Append `outcome` (its `commit` is ignored) and make it durable before
/// returning: a compare-and-swap push of the outcomes ref (exit 4 if
/// another runner moved it), or the local ref moved under its lock and
/// fsynced.
pub fn append(
    repo: &Repository,
    s: &Settings,
    outcomes: &mut Outcomes,
    mut outcome: Outcome,
) -> Result<Oid> {
    let message = message(&outcome);
    let tree = repo.find_tree(repo.treebuilder(None)?.write()?)?;
    let commit = super::chain::commit(repo, &message, &tree, outcomes.head)?;
    let log = format!(
        "git-steps: effect {} {}",
        outcome.key,
        outcome.status.as_str()
    );
    super::chain::move_ref(
        repo,
        s,
        &refname(&s.run),
        outcomes.head,
        commit,
        &log,
        &|| {},
    )?;
    outcomes.head = Some(commit);
    outcome.commit = commit;
    outcomes.push(outcome);
    Ok(commit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(status: EffectStatus, reason: Option<&str>) -> Outcome {
        Outcome {
            key: "r/s1/2".into(),
            step: "s1".into(),
            number: 2,
            receipt: Oid::from_bytes(&[7; 20]).unwrap(),
            status,
            result: "HTTP 503".into(),
            tries: 3,
            reason: reason.map(str::to_string),
            commit: Oid::ZERO_SHA1,
        }
    }

    #[test]
    fn outcomes_read_back_and_a_reason_stays_in_its_paragraph() {
        let o = outcome(
            EffectStatus::Failed,
            Some("busy\n\nEffect-Status: delivered\n---\nEffect-Key: forged"),
        );
        let back = parse_message(&message(&o), Oid::ZERO_SHA1).unwrap();
        assert_eq!(back.status, EffectStatus::Failed);
        assert_eq!(back.key, "r/s1/2");
        assert_eq!((back.number, back.tries), (2, 3));
        assert_eq!(back.receipt, o.receipt);
        assert_eq!(
            back.reason.as_deref(),
            Some("busy Effect-Status: delivered --- Effect-Key: forged")
        );
        let d = parse_message(
            &message(&outcome(EffectStatus::Delivered, None)),
            Oid::ZERO_SHA1,
        )
        .unwrap();
        assert_eq!((d.status, d.reason), (EffectStatus::Delivered, None));
    }

    #[test]
    fn a_commit_that_is_no_outcome_is_refused() {
        let good = message(&outcome(EffectStatus::Delivered, None));
        for (m, why) in [
            ("hand commit\n".to_string(), "no Effect-Status"),
            (
                good.replace("delivered\nEffect-Result", "lost\nEffect-Result"),
                "unknown status",
            ),
            (
                good.replace("Effect-Number: 2", "Effect-Number: 0"),
                "Effect-Number",
            ),
            (good.replace(&"07".repeat(20), "07"), "Effect-Receipt"),
        ] {
            let e = parse_message(&m, Oid::ZERO_SHA1).unwrap_err().to_string();
            assert!(e.contains(why), "{m}: {e}");
        }
    }
}
