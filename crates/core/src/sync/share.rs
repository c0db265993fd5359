//! Publishing and fetching the shared hunk cache
//! ([`crate::history::shared`]) beside the run on the remote.
//!
//! Owns the remote's `refs/steps/cache/<run hash>` and this box's copy,
//! `refs/steps/remote-cache/<run hash>` (the last value it saw or wrote). Invariant: a cache is
//! published only for a step that is already durable, by a compare-and-swap
//! that may replace the old cache but touches no other ref; every failure
//! is swallowed, because a missing or stale cache costs a fresh box a
//! replay and nothing else. A kill at any point leaves the old cache or the
//! new one.

use git2::{Oid, Repository};

use crate::crash;
use crate::history::ledger::AppliedStep;
use crate::history::shared;
use crate::settings::Settings;
use crate::sync::remote::{PushError, RefUpdate};
use crate::tree::hunks::LiveHunks;

/// The cache commit for a run of `steps` steps, when it is long enough to
/// want one (`every` steps or more): fetched from the remote, else this
/// box's last copy (only that with `remote` false). None when there is
/// none or it cannot be fetched.
pub fn fetch(
    repo: &Repository,
    settings: &Settings,
    every: usize,
    steps: usize,
    remote: bool,
) -> Option<Oid> {
    if every == 0 || steps < every {
        return None;
    }
    let (name, local) = (
        shared::refname(&settings.run),
        shared::local_refname(&settings.run),
    );
    if let Some(remote) = settings.remote.as_ref().filter(|_| remote) {
        if let Ok(Some(id)) = remote.fetch_bounded(repo, &name, &local, shared::MAX_BYTES) {
            return Some(id);
        }
    }
    repo.refname_to_id(&local).ok()
}

/// Whether a flush that took the run from `before` to `after` steps passed
/// a multiple of `every`.
pub fn due(every: usize, before: usize, after: usize) -> bool {
    every > 0 && after / every > before / every
}

/// Publish the cache of `live` after `entries` (the run's steps 1..=N, the
/// last one durable) on the remote; `step`: the last step's id, for the
/// crash points. Returns whether the remote took it.
pub fn publish<'e>(
    repo: &Repository,
    settings: &Settings,
    base: Option<git2::Oid>,
    entries: impl IntoIterator<Item = &'e AppliedStep> + Clone,
    live: &LiveHunks,
    signer: Option<&crate::sign::Signer>,
    step: &str,
) -> bool {
    let Some(remote) = &settings.remote else {
        return false;
    };
    let Ok(Some(commit)) = shared::write(repo, &settings.run, base, entries, live, signer) else {
        return false;
    };
    crash::point("cache-written", step);
    let (name, local) = (
        shared::refname(&settings.run),
        shared::local_refname(&settings.run),
    );
    let mut expected = repo.refname_to_id(&local).ok();
    let ours = shared::described_steps(repo, commit);
    // Another box may have published since this one last looked: then
    // replace its cache only if it describes fewer steps (a box that
    // stalled between its push and this publish must not put an older
    // cache over a newer one).
    for _ in 0..2 {
        let update = RefUpdate {
            refname: &name,
            expected,
            new: commit,
            replace: true,
            step: None,
        };
        match remote.push(repo, &update) {
            Ok(()) => {
                crash::point("cache-pushed", step);
                let _ = crate::lock::intending(repo, crate::lock::ref_locks(repo, &local), || {
                    repo.reference(&local, commit, true, "git-steps: shared hunk cache")
                });
                return true;
            }
            Err(PushError::Moved { .. }) => {
                // What is there now, in this box's copy, to read.
                // (Too large to fetch, or gone again: leave it.)
                let Ok(Some(found)) = remote.fetch_bounded(repo, &name, &local, shared::MAX_BYTES)
                else {
                    return false;
                };
                let found = Some(found);
                let theirs = found.and_then(|f| shared::described_steps(repo, f));
                if let (Some(theirs), Some(ours)) = (theirs, ours) {
                    if theirs >= ours {
                        return false;
                    }
                }
                expected = found;
            }
            Err(_) => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_is_due_when_a_flush_passes_a_multiple() {
        assert!(due(1, 0, 1));
        assert!(due(1000, 999, 1000));
        assert!(due(1000, 995, 1004));
        assert!(!due(1000, 1000, 1001));
        assert!(!due(1000, 1, 999));
        assert!(!due(0, 0, 5000));
    }
}
