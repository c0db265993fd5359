//! The run's branch moved: on the remote, by the compare-and-swap push
//! that is a step's commit point, and here, by the local branch's own
//! compare-and-swap.
//!
//! Owns those two ref updates and the errors they say. Invariant: neither
//! is ever a force: the remote's branch moves only from the expected
//! commit, the local one only from where the run left it; a move that
//! finds the branch elsewhere changes nothing and says who moved it.

use git2::{Oid, Repository};

use crate::error::Result;
use crate::lock;
use crate::settings::Settings;
use crate::sync::remote::RefUpdate;
use lock::refwrite::Moved;

/// Compare-and-swap the branch from `expected` to `new`. Without a remote
/// this is the commit point: the box is flushed before (the step's
/// objects) and after (the ref), see [`crate::flush`]; with one, the local
/// branch is a copy of the durable head and needs no flush of its own.
pub(super) fn move_ref(
    repo: &Repository,
    s: &Settings,
    expected: Option<Oid>,
    new: Oid,
    step: &str,
) -> Result<()> {
    let refname = s.refname();
    let log = format!("git-steps: {step}");
    if s.remote.is_none() {
        crate::flush::repository(repo)?;
    }
    // The branch's own writer (lock, check, reflogs, rename: a third of
    // libgit2's system calls); libgit2 for what it does not take.
    let why = match lock::refwrite::move_branch(repo, &refname, expected, new, &log) {
        Ok(()) => None,
        Err(Moved::Unsupported) => {
            lock::intending(repo, lock::ref_locks(repo, &refname), || match expected {
                Some(old) => repo.reference_matching(&refname, new, true, old, &log),
                None => repo.reference(&refname, new, false, &log),
            })
            .err()
            .map(|e| {
                Moved::from_git2(repo, &refname, expected, new, true, &e).error(
                    Some(step),
                    &refname,
                    expected,
                    Some(e.message()),
                )
            })
        }
        Err(why) => Some(why.error(Some(step), &refname, expected, None)),
    };
    if let Some(e) = why {
        return Err(e);
    }
    if s.remote.is_none() {
        crate::flush::repository(repo)?;
    }
    Ok(())
}

/// The commit point with a remote: a compare-and-swap push of the branch
/// from `expected` to the step's `commit`, failures as the SPEC's errors.
pub(super) fn push_step(
    repo: &Repository,
    s: &Settings,
    remote: &crate::sync::remote::Remote,
    expected: Option<Oid>,
    commit: Oid,
    id: &str,
) -> Result<()> {
    remote
        .push(
            repo,
            &RefUpdate {
                refname: &s.refname(),
                expected,
                new: commit,
                replace: false,
                step: Some(id),
            },
        )
        .map_err(|e| e.into_error(&s.branch, &remote.spec, expected))
}
