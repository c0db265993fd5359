//! Provenance after the merge: the run kept where a forge will not delete
//! it, the message of a squash merge, and a merged commit checked against
//! the run ([`merged`]).
//!
//! Owns `refs/steps/runs/<run id>`: the run's head, on the durable domain.
//! Invariant: it only moves forward (to a descendant of what it holds), by
//! compare-and-swap on the durable domain (the remote accepts the update,
//! or the local ref moves under its lock and is fsynced), so `git log
//! refs/steps/runs/<run>` audits the run after its branch is deleted. The
//! squash message names the run, its head, its step count and both
//! fingerprints in trailers git reads, as the last paragraph; nothing a
//! step wrote can add or change one.

pub mod merged;

use git2::{Oid, Repository};
use serde::Serialize;

use crate::error::{Error, Refusal, RefusalKind, Result};
use crate::git::short;
use crate::history::ledger;
use crate::settings::Settings;

pub const KEY_RUN: &str = "Steps-Run";
pub const KEY_HEAD: &str = "Steps-Head";
pub const KEY_COUNT: &str = "Steps-Count";
pub const KEY_HISTORY: &str = "Steps-History";
pub const KEY_ARTIFACT: &str = "Steps-Artifact";

/// Steps listed one per line in a message; the rest are counted.
const LISTED: usize = 200;

/// Where a run is kept, locally and on the remote.
pub fn refname(run: &str) -> String {
    format!("refs/steps/runs/{run}")
}

/// What `archive` did.
#[derive(Debug, Clone, Serialize)]
pub struct Archived {
    pub refname: String,
    /// What the ref holds now: the run's head, or a later head of the run
    /// another box kept already.
    pub head: String,
    /// What the ref held before (None: the run was not kept yet).
    pub previous: Option<String>,
    /// False when it held `head` already.
    pub moved: bool,
}

/// Keep the run whose head is `head` under `refs/steps/runs/<run>` on the
/// durable domain. A ref that holds a later head of the run is left as it
/// is; one that holds a commit `head` does not descend from (another run
/// under the same id, a rewritten branch) is refused (exit 3), never
/// overwritten.
pub fn archive(repo: &Repository, s: &Settings, head: Oid) -> Result<Archived> {
    // The crash points name the head's step.
    let step =
        crate::history::receipt::parse(repo.find_commit(head)?.message().unwrap_or_default())
            .map(|r| r.id)
            .unwrap_or_default();
    // Another box keeping the same run (or a later head of it) may win the
    // compare-and-swap: read again and decide again; what it kept is
    // never overwritten, only moved forward.
    let mut tries = 0;
    loop {
        tries += 1;
        match keep(repo, s, head, &step) {
            Err(Error::RemoteMoved { .. } | Error::Busy { .. }) if tries < 4 => continue,
            other => return other,
        }
    }
}

/// One try of [`archive`]: read the kept ref, then move it by
/// compare-and-swap.
fn keep(repo: &Repository, s: &Settings, head: Oid, step: &str) -> Result<Archived> {
    let name = refname(&s.run);
    let old = super::chain::load(repo, s, &name, super::chain::Missing::Push)?;
    crate::crash::point("archive-read", step);
    let done = |moved: bool| Archived {
        refname: name.clone(),
        head: head.to_string(),
        previous: old.map(|o| o.to_string()),
        moved,
    };
    if old == Some(head) {
        return Ok(done(false));
    }
    if let Some(o) = old {
        if repo.graph_descendant_of(o, head)? {
            // Another box went on with the run and kept a later head: it
            // holds this one already.
            return Ok(Archived {
                head: o.to_string(),
                ..done(false)
            });
        }
        if !repo.graph_descendant_of(head, o)? {
            return Err(Error::from(Refusal {
                kind: RefusalKind::Diverged,
                step: None,
                saw: format!(
                    "{name} holds commit {}, and the run's head {} does not descend from it",
                    short(o),
                    short(head)
                ),
                would: "replace a kept run with a history that does not contain it".into(),
                hint: format!(
                    "`git log {name}` shows what is kept; if it is another run that used the id {}, give this run its own id (`--run`)",
                    s.run
                ).into(),
            }));
        }
    }
    let log = format!("git-steps: keep run {}", s.run);
    super::chain::move_ref(repo, s, &name, old, head, &log, &|| {
        crate::crash::point("archive-pushed", step)
    })?;
    Ok(done(true))
}

/// The message of a squash merge of a run.
#[derive(Debug, Clone, Serialize)]
pub struct MergeMessage {
    pub run: String,
    pub head: String,
    pub count: usize,
    pub history: String,
    pub artifact: String,
    pub message: String,
}

/// The squash message for the run whose head is `head`: a subject, the
/// steps one per line (`<id>: <summary>`), then the trailers.
pub fn merge_message(repo: &Repository, run: &str, head: Oid) -> Result<MergeMessage> {
    let ledger = ledger::scan(repo, Some(head), run)?;
    ledger.ensure_sound(run)?;
    if ledger.entries.is_empty() {
        return Err(Error::input(format!(
            "commit {} holds no step of run {run}: there is nothing to merge",
            short(head)
        )));
    }
    let count = ledger.entries.len();
    let history = ledger.history_fingerprint();
    let artifact =
        crate::tree::fingerprint::artifact(repo, Some(&repo.find_commit(head)?.tree()?))?;
    let mut m = format!(
        "{run}: {count} step{} by git-steps\n\n",
        if count == 1 { "" } else { "s" }
    );
    for e in ledger.entries.iter().take(LISTED) {
        m.push_str(&format!("- {}: {}\n", e.id, summary(repo, e.commit, &e.id)));
    }
    if count > LISTED {
        m.push_str(&format!(
            "… and {} more (git log {})\n",
            count - LISTED,
            refname(run)
        ));
    }
    m.push_str(&format!(
        "\n{KEY_RUN}: {run}\n{KEY_HEAD}: {head}\n{KEY_COUNT}: {count}\n{KEY_HISTORY}: {history}\n{KEY_ARTIFACT}: {artifact}\n"
    ));
    Ok(MergeMessage {
        run: run.to_string(),
        head: head.to_string(),
        count,
        history,
        artifact,
        message: m,
    })
}

/// A step's summary: its commit's subject after `step <id>: `, on one line
/// of bounded length (a line of ours: never a trailer, never a divider).
fn summary(repo: &Repository, commit: Oid, id: &str) -> String {
    let subject = repo
        .find_commit(commit)
        .ok()
        .and_then(|c| c.summary().ok().flatten().map(str::to_string))
        .unwrap_or_default();
    let prefix = format!("step {id}: ");
    let s = subject.strip_prefix(&prefix).unwrap_or(&subject);
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(100)
        .collect();
    flat.trim().to_string()
}
