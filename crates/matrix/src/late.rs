//! The crash matrix's check on the agent loop's decider: a call for an
//! index whose answer was already durable (a receipt, a recorded journal
//! entry) is written down beside the box's remote, and fails its row.
//!
//! Owns that lateness rule. Invariant: only an answer that was durable
//! when the decider was asked counts; an answer asked for ahead of a push
//! in flight (not durable yet) never does.

use std::path::{Path, PathBuf};

use git2::Repository;

use crate::error::Result;

/// Where the matrix's replaying decider finds the durable domain of its box
/// (the scratch bare remote) and where it writes a call that came too late.
pub const ENV_REMOTE: &str = crate::keys::MATRIX_REMOTE.name;
pub const ENV_LATE: &str = crate::keys::MATRIX_LATE.name;

/// For `run`: the decider is asked for `index`, whose answer is step `id`;
/// why that is too late (its receipt, or a recorded journal entry for the
/// index, is already durable in `bare`: the remote, or the box itself in a
/// local-only phase), or None.
pub fn asked_late(bare: &Path, index: usize, id: &str) -> Result<Option<String>> {
    // libgit2 set up as everywhere else (no CA bundle parsed at start: it
    // would cost each decider call ~30 ms).
    crate::git::setup()?;
    let repo = Repository::open(bare)?;
    if let Ok(head) = repo.refname_to_id("refs/heads/main") {
        let mut walk = repo.revwalk()?;
        walk.push(head)?;
        walk.simplify_first_parent()?;
        for oid in walk {
            let c = repo.find_commit(oid?)?;
            let receipt = c
                .message()
                .ok()
                .and_then(|m| crate::history::receipt::parse(m).ok());
            if receipt.is_some_and(|r| r.id == id) {
                return Ok(Some(format!(
                    "the decider was asked for step index {index} ({id}) although its receipt {} was durable",
                    crate::git::short(c.id())
                )));
            }
        }
    }
    let head = repo.refname_to_id("refs/steps/journal/main").ok();
    let journal = crate::run::journal::read(&repo, head)?;
    Ok(journal.pending(index).map(|e| {
        format!(
            "the decider was asked for step index {index} although its decision {} was recorded in the journal",
            crate::git::short(e.commit)
        )
    }))
}

/// For `run`: an index whose decision the journal recorded twice means the
/// decider was asked again after its answer was durable.
pub(super) fn recorded_twice(bare: &Path) -> Result<Option<String>> {
    let repo = Repository::open_bare(bare)?;
    let head = repo.refname_to_id("refs/steps/journal/main").ok();
    let journal = crate::run::journal::read(&repo, head)?;
    let mut seen = std::collections::BTreeMap::new();
    for e in &journal.entries {
        if e.status == crate::run::journal::DecisionStatus::Recorded {
            *seen.entry(e.index).or_insert(0) += 1;
        }
    }
    Ok(seen.into_iter().find(|(_, n)| *n > 1).map(|(i, n)| {
        format!("the journal recorded {n} decisions for step index {i}: the decider was asked again after its answer was recorded")
    }))
}

/// Where a box's late decider calls are written: beside its remote.
pub(super) fn late_file(bare: &Path) -> PathBuf {
    bare.with_file_name("late-asks")
}
