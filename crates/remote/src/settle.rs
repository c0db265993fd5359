//! Settling a push: what a failed or ambiguous push really did.
//!
//! Owns the reading of a remote's answer — a hook saying no, a lock another
//! writer holds, a branch that moved, a write that failed on the server —
//! and the rule that the remote's current value decides. Invariant: a push
//! is reported as landed only when the remote holds the new id, and as
//! moved only when it holds neither the expected nor the new one.

use git2::Repository;

use super::{PushError, RefUpdate, Remote};
use crate::error::{Error, Result};
use crate::git::short;

impl Remote {
    /// What the remote holds now settles a failed push: the update may have
    /// landed before the connection broke, or another writer may have moved
    /// the branch while we waited for its lock.
    pub(super) fn settle(
        &self,
        repo: &Repository,
        update: &RefUpdate<'_>,
        e: PushError,
    ) -> Result<(), PushError> {
        let RefUpdate {
            refname,
            expected,
            new,
            ..
        } = *update;
        match self.head(repo, refname) {
            Ok(Some(h)) if h == new => Ok(()),
            Ok(found) if found != expected => Err(PushError::Moved { found }),
            // Said to have moved, yet where we expected it: the update was
            // refused for another reason, most likely a lock; try again.
            Ok(_) if matches!(e, PushError::Moved { .. }) => Err(PushError::Locked(format!(
                "{refname} on {} refused the update although it is still at the expected commit",
                self.spec
            ))),
            Ok(_) => Err(e),
            Err(unreachable) => match e {
                // The connection broke and the remote cannot be asked: the
                // update may or may not have landed. Say exactly that.
                PushError::Failed(first) => Err(PushError::Failed(
                    Error::remote(format!(
                        "the push to {} broke off ({first}) and the remote cannot be asked now ({unreachable}): whether it accepted {} is unknown",
                        self.spec,
                        short(new)
                    ), first.is_spurious() || unreachable.is_spurious())
                    .with_hint(crate::error::Hint::rerun_when("wait until the remote answers").because("it asks the remote first, so a step it accepted is finished, not applied again")),
                )),
                other => Err(other),
            },
        }
    }
}

/// Sort a ref update the remote did not make, by what it said: a hook or
/// policy saying no is a refusal; a lock that another writer holds is
/// contention; a branch that is no longer where we expected it has moved
/// (the caller reads it); a write that failed on the server (its disk, its
/// permissions) is a failure, reported with the server's own words.
pub(super) fn classify_rejection(status: &str, remote_said: &str) -> PushError {
    let said = remote_said.trim();
    let both = format!("{status}\n{said}");
    let lower = both.to_lowercase();
    let detail = if said.is_empty() {
        status.to_string()
    } else {
        format!("{status} (the remote said: {})", one_paragraph(said))
    };
    if lower.contains("hook declined") || lower.contains("denied") {
        PushError::Rejected(detail)
    } else if lower.contains("file exists") || lower.contains("another git process") {
        PushError::Locked(detail)
    } else if lower.contains("but expected") || lower.contains("stale info") {
        PushError::Moved { found: None }
    } else if said.is_empty()
        && (lower.contains("failed to update ref") || lower.contains("failed to lock"))
    {
        // receive-pack's status for a ref transaction that failed, without
        // the reason (an old server, or no side band): most often another
        // push holding the lock, so wait and retry before saying so.
        PushError::Locked(detail)
    } else if lower.contains("failed to update ref") || lower.contains("unable to") {
        PushError::Failed(
            Error::remote(
                format!("the remote could not record the branch update: {detail}"),
                false,
            )
            .with_hint(crate::error::Hint::rerun_after(
                "nothing of this step became durable; fix the remote (its disk, its permissions)",
            )),
        )
    } else {
        PushError::Rejected(detail)
    }
}

/// Text folded onto one line, for an error message.
fn one_paragraph(text: &str) -> String {
    text.lines()
        .map(|l| l.trim().trim_start_matches("remote:").trim())
        .filter(|l| !l.is_empty() && !l.starts_with("hint:"))
        .collect::<Vec<_>>()
        .join(" ")
}
