//! The one retry rule of a remote: how long a push waits for a branch lock
//! another writer holds, and how a transient failure of a push or a read
//! is tried again (backoff from `git-steps-io`'s [`crate::backoff`],
//! jittered, so a fleet does not retry in step).
//!
//! Owns the push loop and the reads' retry. Invariant: only what cannot
//! have changed the remote is tried again: a read, or a push whose
//! settling found the branch still at the expected id (a compare-and-swap
//! cannot land twice); a retry that finds the new id already there is a
//! success.

use std::time::Duration;

use git2::Repository;

use crate::error::{Error, Result};
use crate::transport::Op;
use crate::{PushError, RefUpdate, Remote};

impl Remote {
    /// Make `update` on the remote, or fail without changing it. A lock held
    /// by another writer is contention, not a refusal: the push is retried
    /// for a few seconds, then reported as [`PushError::Locked`].
    ///
    /// A transient failure (the server answered 502/503/504, the connection
    /// was reset or timed out) whose settling found the branch still at the
    /// expected commit is retried with backoff too, within
    /// [`RetryPolicy`]: the update did not land, and the push is a
    /// compare-and-swap, so trying again cannot apply anything twice. A
    /// retry that finds the branch already at the new commit (an earlier
    /// attempt landed before its connection died) is a success.
    pub fn push(&self, repo: &Repository, update: &RefUpdate<'_>) -> Result<(), PushError> {
        let wire = self.transport_for(repo, Op::Push);
        pushing(
            &crate::backoff::RealClock,
            lock_patience(),
            RetryPolicy::from_env(),
            update.new,
            || self.push_once(repo, &*wire, update),
        )
    }
}

/// The first wait for a branch lock another writer holds on the remote,
/// doubling (jittered) up to [`LOCK_WAIT_MAX`].
const LOCK_WAIT_FIRST: Duration = Duration::from_millis(20);
/// The longest wait between two tries of a locked branch.
const LOCK_WAIT_MAX: Duration = Duration::from_millis(500);
/// The longest wait between two tries after a transient failure.
const RETRY_WAIT_MAX: Duration = Duration::from_secs(4);

/// The push loop, on `clock`: `attempt` (one settled push of `new`) is
/// tried again while the branch is locked (for `patience` in all) and after
/// a transient failure (within `policy`); an attempt that finds `new`
/// already there (an earlier one landed before its connection died) is a
/// success.
fn pushing(
    clock: &dyn crate::backoff::Clock,
    patience: Duration,
    policy: RetryPolicy,
    new: git2::Oid,
    mut attempt: impl FnMut() -> Result<(), PushError>,
) -> Result<(), PushError> {
    let deadline = clock.now() + patience;
    let mut locked = crate::backoff::Backoff::new(LOCK_WAIT_FIRST, LOCK_WAIT_MAX);
    let mut tries = Tries::new(clock, policy);
    loop {
        match attempt() {
            Err(PushError::Moved { found: Some(h) }) if h == new => return Ok(()),
            Err(PushError::Locked(_)) if clock.now() < deadline => {
                locked.wait(clock, Some(deadline));
            }
            Err(PushError::Failed(e)) => tries.after(e).map_err(PushError::Failed)?,
            other => return other,
        }
    }
}

/// Run a read of the remote (a ref, a fetch), retrying a transient failure
/// (see [`Error::is_spurious`]) with backoff within [`RetryPolicy`],
/// as a push is: a read changes nothing, so trying again is always safe.
pub(crate) fn retrying<T>(mut read: impl FnMut() -> Result<T>) -> Result<T> {
    let mut tries = Tries::new(&crate::backoff::RealClock, RetryPolicy::from_env());
    loop {
        match read() {
            Err(e) => tries.after(e)?,
            ok => return ok,
        }
    }
}

/// How long a push waits for a branch lock that another writer holds on the
/// remote before it gives up with [`PushError::Locked`] (exit 4): 8 seconds,
/// or `GIT_STEPS_LOCK_WAIT` seconds.
pub(crate) fn lock_patience() -> std::time::Duration {
    crate::keys::environment().lock_wait
}

/// How a transient network failure is retried: at most `attempts` tries in
/// all, backoff from `first` doubling to 4 s ([`crate::backoff`], jittered),
/// never past `total` since the first try. `GIT_STEPS_NET_RETRIES` (tries
/// after the first: `attempts` is one more) and `GIT_STEPS_NET_RETRY_SECS`
/// set them; their defaults are `keys::Environment::DEFAULT`'s.
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
            backoff: crate::backoff::Backoff::new(policy.first, RETRY_WAIT_MAX),
            last: String::new(),
        }
    }

    /// The same tries with a fixed jitter seed.
    #[cfg(test)]
    fn seeded(clock: &'c dyn crate::backoff::Clock, policy: RetryPolicy, seed: u64) -> Tries<'c> {
        Tries {
            backoff: crate::backoff::Backoff::seeded(policy.first, RETRY_WAIT_MAX, seed),
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

    /// The push loop on a fake clock: a lock is waited for until the
    /// patience runs out, never past it, then reported; a transient failure
    /// is tried again within the policy; an attempt that finds the new
    /// commit there is a success; a refusal ends the loop at once.
    #[test]
    fn the_push_loop_waits_for_a_lock_within_its_patience_and_retries_only_what_cannot_land_twice()
    {
        use super::{pushing, PushError, LOCK_WAIT_MAX};
        let new = git2::Oid::from_bytes(&[7; 20]).unwrap();
        let patience = Duration::from_secs(8);
        // Locked every time: waits that never pass the deadline, then Locked.
        let clock = FakeClock::new();
        let mut n = 0;
        let r = pushing(&clock, patience, POLICY, new, || {
            n += 1;
            Err(PushError::Locked("held".into()))
        });
        assert!(matches!(r, Err(PushError::Locked(_))), "{r:?}");
        assert_eq!(clock.elapsed(), patience, "waited exactly its patience");
        assert!(n > 10, "tried {n} times");
        assert!(clock.slept.borrow().iter().all(|w| *w <= LOCK_WAIT_MAX));
        // Locked, then landed by another attempt's connection: success.
        let clock = FakeClock::new();
        let mut answers = vec![
            Err(PushError::Moved { found: Some(new) }),
            Err(PushError::Locked("held".into())),
        ];
        let r = pushing(&clock, patience, POLICY, new, || answers.pop().unwrap());
        assert!(r.is_ok(), "{r:?}");
        // Transient failures: tried again, at most POLICY.attempts times.
        let clock = FakeClock::new();
        let mut n = 0;
        let r = pushing(&clock, patience, POLICY, new, || {
            n += 1;
            Err(PushError::Failed(Error::remote("HTTP 503", true)))
        });
        assert!(matches!(r, Err(PushError::Failed(_))), "{r:?}");
        assert_eq!(n, POLICY.attempts);
        // A refusal, or a branch another writer moved: no second try.
        for answer in [
            PushError::Rejected("hook declined".into()),
            PushError::Moved { found: None },
        ] {
            let clock = FakeClock::new();
            let mut answer = Some(answer);
            let mut n = 0;
            let r = pushing(&clock, patience, POLICY, new, || {
                n += 1;
                Err(answer.take().unwrap())
            });
            assert!(r.is_err());
            assert_eq!((n, clock.elapsed()), (1, Duration::ZERO));
        }
    }
}
