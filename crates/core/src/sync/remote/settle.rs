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
                    .with_hint("rerun the same command when the remote answers: it asks the remote first, so a step it accepted is finished, not applied again"),
                )),
                other => Err(other),
            },
        }
    }
}

/// How long a push waits for a branch lock that another writer holds on the
/// remote before it gives up with [`PushError::Locked`] (exit 4): 8 seconds,
/// or `GIT_STEPS_LOCK_WAIT` seconds.
pub(super) fn lock_patience() -> std::time::Duration {
    crate::keys::environment().lock_wait
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
        PushError::Failed(Error::remote(format!(
            "the remote could not record the branch update: {detail}"
        ), false).with_hint("nothing of this step became durable; fix the remote (its disk, its permissions), then rerun"))
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

/// How a transient network failure is retried: at most `attempts` tries in
/// all, backoff from `first` doubling to 4 s ([`crate::backoff`], jittered),
/// never past `total` since the first try. `GIT_STEPS_NET_RETRIES` (tries after the first, default 3)
/// and `GIT_STEPS_NET_RETRY_SECS` (default 30) set them.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub attempts: u32,
    pub first: std::time::Duration,
    pub total: std::time::Duration,
}

impl RetryPolicy {
    pub fn from_env() -> RetryPolicy {
        let env = crate::keys::environment();
        RetryPolicy {
            attempts: 1 + env.net_retries,
            first: std::time::Duration::from_millis(200),
            total: env.net_retry_total,
        }
    }
}

/// The tries of one push or read: after each failure, [`Tries::after`]
/// waits and says go on, or hands back the error to report. The one retry
/// rule of pushes and reads.
pub struct Tries<'c> {
    clock: &'c dyn crate::backoff::Clock,
    policy: RetryPolicy,
    started: std::time::Instant,
    attempts: u32,
    backoff: crate::backoff::Backoff,
    last: String,
}

impl<'c> Tries<'c> {
    pub fn new(clock: &'c dyn crate::backoff::Clock, policy: RetryPolicy) -> Tries<'c> {
        Tries {
            clock,
            policy,
            started: clock.now(),
            attempts: 1,
            backoff: crate::backoff::Backoff::new(policy.first, std::time::Duration::from_secs(4)),
            last: String::new(),
        }
    }

    /// The same tries with a fixed jitter seed.
    #[cfg(test)]
    fn seeded(clock: &'c dyn crate::backoff::Clock, policy: RetryPolicy, seed: u64) -> Tries<'c> {
        Tries {
            backoff: crate::backoff::Backoff::seeded(
                policy.first,
                std::time::Duration::from_secs(4),
                seed,
            ),
            ..Tries::new(clock, policy)
        }
    }

    /// After a failed try: a transient failure (see [`Error::is_spurious`])
    /// within the policy is waited out and `Ok` says try again; any other
    /// is the error to report, noting the earlier tries when there were
    /// some.
    pub fn after(&mut self, e: Error) -> Result<(), Error> {
        let elapsed = self.clock.now().saturating_duration_since(self.started);
        if e.is_spurious()
            && self.attempts < self.policy.attempts
            && elapsed + self.backoff.peek() <= self.policy.total
        {
            self.last = first_line(&e.to_string()).to_string();
            self.backoff.wait(self.clock, None);
            self.attempts += 1;
            return Ok(());
        }
        if self.attempts > 1 {
            return Err(e.with_note(format!(
                "tried {} times in {:.1} s; before the last try: {}",
                self.attempts,
                elapsed.as_secs_f64(),
                self.last
            )));
        }
        Err(e)
    }
}

/// The first line of a message.
pub fn first_line(message: &str) -> &str {
    message.lines().next().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::{RetryPolicy, Tries};
    use crate::backoff::testing::FakeClock;
    use crate::error::{spurious_text, Error};
    use std::time::Duration;

    const POLICY: RetryPolicy = RetryPolicy {
        attempts: 4,
        first: Duration::from_millis(200),
        total: Duration::from_secs(30),
    };

    #[test]
    fn a_transient_failure_is_tried_again_within_the_policy() {
        let clock = FakeClock::new();
        let mut tries = Tries::new(&clock, POLICY);
        for _ in 0..3 {
            tries.after(Error::remote("HTTP 503", true)).unwrap();
        }
        let e = tries.after(Error::remote("HTTP 503", true)).unwrap_err();
        assert!(e.to_string().contains("tried 4 times"), "{e}");
        assert!(
            e.to_string().contains("before the last try: HTTP 503"),
            "{e}"
        );
        let slept = clock.slept.borrow().clone();
        assert_eq!(slept.len(), 3);
        for (w, base) in slept.iter().zip([200, 400, 800]) {
            let base = Duration::from_millis(base);
            assert!(*w <= base && *w >= base / 2, "{slept:?}");
        }
    }

    #[test]
    fn a_failure_that_is_not_transient_ends_the_tries_at_once() {
        let clock = FakeClock::new();
        let mut tries = Tries::new(&clock, POLICY);
        let e = tries.after(Error::remote("HTTP 401", false)).unwrap_err();
        assert_eq!(e.to_string(), Error::remote("HTTP 401", false).to_string());
        assert!(clock.slept.borrow().is_empty());
        // After a transient one, the refusal notes the tries before it.
        let mut tries = Tries::new(&clock, POLICY);
        tries
            .after(Error::remote("connection reset", true))
            .unwrap();
        let e = tries.after(Error::remote("HTTP 401", false)).unwrap_err();
        assert!(e.to_string().contains("tried 2 times"), "{e}");
    }

    #[test]
    fn the_tries_stop_before_the_total_time_runs_out() {
        let policy = RetryPolicy {
            attempts: 100,
            first: Duration::from_millis(200),
            total: Duration::from_secs(5),
        };
        let mut counts = std::collections::BTreeSet::new();
        for seed in 0..64 {
            let clock = FakeClock::new();
            let mut tries = Tries::seeded(&clock, policy, seed);
            let mut n = 0;
            while tries.after(Error::remote("timed out", true)).is_ok() {
                n += 1;
            }
            // Never past the total; stopped because the next wait would
            // have gone past it, not because the tries ran out.
            assert!(clock.elapsed() <= policy.total, "seed {seed}");
            assert!(
                clock.elapsed() + tries.backoff.peek() > policy.total,
                "seed {seed}: {:?}",
                clock.slept.borrow()
            );
            counts.insert(n);
        }
        // Waits of 200, 400, 800, 1,600 ms (each 50-100 %): the next, 3.2 s,
        // fits in 5 s only after short jittered waits.
        assert!(counts.iter().all(|n| (4..=5).contains(n)), "{counts:?}");
    }

    #[test]
    fn transient_failures_are_told_from_the_others() {
        for yes in [
            "cannot push to http://x: unexpected http status code: 503",
            "error: RPC failed; HTTP 503 curl 22 The requested URL returned error: 503",
            "fatal: unable to access 'https://x/': The requested URL returned error: 502",
            "Connection reset by peer",
            "fatal: the remote end hung up unexpectedly",
            "operation timed out",
        ] {
            assert!(spurious_text(yes), "{yes}");
        }
        for no in [
            "unexpected http status code: 401",
            "fatal: repository 'x' not found",
            "the remote refused the update: hook declined",
            "commit a503f1e is not at the expected",
        ] {
            assert!(!spurious_text(no), "{no}");
        }
    }
}
