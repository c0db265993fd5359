//! The run's branch moved: on the remote, by the compare-and-swap push
//! that is a step's commit point, and here, by the local branch's own
//! compare-and-swap.
//!
//! Owns those two ref updates and the errors they say. Invariant: neither
//! is ever a force: the remote's branch moves only from the expected
//! commit, the local one only from where the run left it; a move that
//! finds the branch elsewhere changes nothing and says who moved it.

use git2::{Oid, Repository};

use crate::error::{Error, Result};
use crate::git::short;
use crate::lock;
use crate::settings::Settings;
use crate::sync::remote::RefUpdate;

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
    use lock::refwrite::Moved;
    let shown = |o: Option<Oid>| o.map(short).unwrap_or_else(|| "no branch".into());
    // The branch's own writer (lock, check, reflogs, rename: a third of
    // libgit2's system calls); libgit2 for what it does not take.
    match lock::refwrite::move_branch(repo, &refname, expected, new, &log) {
        Ok(()) => {
            if s.remote.is_none() {
                crate::flush::repository(repo)?;
            }
            return Ok(());
        }
        Err(Moved::Unsupported) => {}
        Err(Moved::Locked(lock)) => {
            return Err(Error::local(format!(
                "{step}: {refname} is locked by another process: {} exists",
                lock.display()
            ))
            .with_hint("another git command is writing this branch; let it finish, then rerun the same command"))
        }
        Err(Moved::Elsewhere(now)) => {
            return Err(Error::local(format!(
                "{step}: {refname} moved while the step was being applied (expected {}, found {})",
                shown(expected),
                shown(now),
            ))
            .with_hint("another process is writing this branch; stop it, then rerun the same command"))
        }
        Err(Moved::Io { what, .. }) => {
            return Err(Error::local(format!(
                "{step}: cannot update {refname} (still at {}): {what}",
                shown(expected),
            ))
            .with_hint("check the disk this repository is on (space, permissions), then rerun the same command"))
        }
    }
    let res = lock::intending(repo, lock::ref_locks(repo, &refname), || match expected {
        Some(old) => repo.reference_matching(&refname, new, true, old, &log),
        None => repo.reference(&refname, new, false, &log),
    });
    res.map_err(|e| {
        let now = repo.refname_to_id(&refname).ok();
        if now == expected && e.code() != git2::ErrorCode::Locked {
            // Nobody moved it: the write itself failed. Say how.
            Error::local(format!(
                "{step}: cannot update {refname} (still at {}): {}",
                shown(now),
                e.message()
            ))
            .with_hint("check the disk this repository is on (space, permissions), then rerun the same command")
        } else if now == expected {
            Error::local(format!(
                "{step}: {refname} is locked by another process: {}",
                e.message()
            ))
            .with_hint("another git command is writing this branch; let it finish, then rerun the same command")
        } else {
            Error::local(format!(
                "{step}: {refname} moved while the step was being applied (expected {}, found {}): {}",
                shown(expected),
                shown(now),
                e.message()
            ))
            .with_hint("another process is writing this branch; stop it, then rerun the same command")
        }
    })?;
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
