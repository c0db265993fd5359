//! Waiting between tries: the one backoff schedule of pushes, remote
//! reads, effects and lock waits, and the clock it waits on.
//!
//! A wait doubles from `first` up to `cap`, and is jittered ("equal
//! jitter": half the wait fixed, the other half random), so that a fleet of
//! boxes refused by the same server at the same instant does not try again
//! in step. Invariant: a wait is never longer than the schedule's
//! un-jittered wait, never shorter than half of it unless a deadline the
//! caller gave cuts it, and never runs past that deadline; a server's own `Retry-After` replaces a wait
//! (capped), un-jittered. Time is read and slept through [`Clock`], so the
//! schedule is unit-tested without sleeping.

use std::time::{Duration, Instant};

/// Where time comes from: the real clock, or a test's.
pub trait Clock {
    fn now(&self) -> Instant;
    fn sleep(&self, d: Duration);
}

/// The process's clock: [`Instant::now`] and [`std::thread::sleep`].
#[derive(Debug, Clone, Copy, Default)]
pub struct RealClock;

impl Clock for RealClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep(&self, d: Duration) {
        std::thread::sleep(d)
    }
}

/// An exponential schedule with jitter. [`Backoff::wait`] sleeps the next
/// wait and doubles it.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    cap: Duration,
    rng: fastrand::Rng,
}

impl Backoff {
    /// Waits of `first`, doubling to `cap`, each jittered.
    pub fn new(first: Duration, cap: Duration) -> Backoff {
        Backoff {
            next: first.min(cap),
            cap,
            rng: fastrand::Rng::new(),
        }
    }

    /// The same schedule with a fixed seed: the same waits every time.
    pub fn seeded(first: Duration, cap: Duration, seed: u64) -> Backoff {
        Backoff {
            rng: fastrand::Rng::with_seed(seed),
            ..Backoff::new(first, cap)
        }
    }

    /// A poll of fixed period, as for a lock whose holder is about to go:
    /// no doubling, still jittered.
    pub fn poll(period: Duration) -> Backoff {
        Backoff::new(period, period)
    }

    /// The un-jittered wait the next [`Backoff::wait`] is based on.
    pub fn peek(&self) -> Duration {
        self.next
    }

    /// The next wait, jittered, and the schedule moved on.
    pub fn next_wait(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(self.cap);
        if base.is_zero() {
            return base;
        }
        let half = base / 2;
        let spread = (base - half).as_nanos() as u64;
        half + Duration::from_nanos(self.rng.u64(0..=spread))
    }

    /// Sleep the next wait on `clock`, never past `deadline` (when given).
    /// Returns what was slept.
    pub fn wait(&mut self, clock: &dyn Clock, deadline: Option<Instant>) -> Duration {
        let mut d = self.next_wait();
        if let Some(end) = deadline {
            d = d.min(end.saturating_duration_since(clock.now()));
        }
        clock.sleep(d);
        d
    }

    /// Sleep what a server asked for (`Retry-After`), at most `most`,
    /// un-jittered: the server chose the instant. The schedule moves on as
    /// if its own wait had been slept.
    pub fn wait_as_asked(
        &mut self,
        clock: &dyn Clock,
        asked: Duration,
        most: Duration,
    ) -> Duration {
        self.next_wait();
        let d = asked.min(most);
        clock.sleep(d);
        d
    }
}

/// A clock for tests: time moves only when something sleeps on it, and
/// every sleep is recorded.
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use std::cell::RefCell;
    use std::time::{Duration, Instant};

    pub struct FakeClock {
        start: Instant,
        pub slept: RefCell<Vec<Duration>>,
    }

    impl FakeClock {
        pub fn new() -> FakeClock {
            FakeClock {
                start: Instant::now(),
                slept: RefCell::new(Vec::new()),
            }
        }

        pub fn elapsed(&self) -> Duration {
            self.slept.borrow().iter().sum()
        }
    }

    impl Default for FakeClock {
        fn default() -> FakeClock {
            FakeClock::new()
        }
    }

    impl super::Clock for FakeClock {
        fn now(&self) -> Instant {
            self.start + self.elapsed()
        }

        fn sleep(&self, d: Duration) {
            self.slept.borrow_mut().push(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::FakeClock;
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn waits_double_to_the_cap_each_between_half_and_whole() {
        for seed in [1, 2, 3, 0xdead_beef] {
            let mut b = Backoff::seeded(200 * MS, 4000 * MS, seed);
            let bases = [200, 400, 800, 1600, 3200, 4000, 4000, 4000];
            for base in bases {
                let base = base * MS;
                assert_eq!(b.peek(), base);
                let w = b.next_wait();
                assert!(
                    w <= base && w >= base / 2,
                    "seed {seed}: {w:?} for {base:?}"
                );
            }
        }
    }

    #[test]
    fn jitter_spreads_a_fleet() {
        // Boxes refused at the same instant: their first waits differ.
        let waits: std::collections::BTreeSet<Duration> = (0..16)
            .map(|seed| Backoff::seeded(1000 * MS, 1000 * MS, seed).next_wait())
            .collect();
        assert!(waits.len() >= 12, "{waits:?}");
        // The same seed, the same waits.
        let a: Vec<_> = {
            let mut b = Backoff::seeded(100 * MS, 800 * MS, 7);
            (0..6).map(|_| b.next_wait()).collect()
        };
        let mut b = Backoff::seeded(100 * MS, 800 * MS, 7);
        assert_eq!(a, (0..6).map(|_| b.next_wait()).collect::<Vec<_>>());
    }

    #[test]
    fn a_wait_never_runs_past_the_deadline() {
        let clock = FakeClock::new();
        let deadline = clock.now() + 1000 * MS;
        let mut b = Backoff::seeded(300 * MS, 4000 * MS, 5);
        while clock.now() < deadline {
            b.wait(&clock, Some(deadline));
        }
        assert_eq!(clock.now(), deadline, "{:?}", clock.slept.borrow());
        // Past the deadline a wait is nothing.
        assert_eq!(b.wait(&clock, Some(deadline)), Duration::ZERO);
    }

    #[test]
    fn a_servers_retry_after_is_slept_as_asked_within_the_cap() {
        let clock = FakeClock::new();
        let mut b = Backoff::seeded(500 * MS, 30_000 * MS, 9);
        assert_eq!(b.wait_as_asked(&clock, 2000 * MS, 60_000 * MS), 2000 * MS);
        assert_eq!(
            b.wait_as_asked(&clock, 3_600_000 * MS, 60_000 * MS),
            60_000 * MS
        );
        // The schedule moved on under the server's waits.
        assert_eq!(b.peek(), 2000 * MS);
        assert_eq!(*clock.slept.borrow(), vec![2000 * MS, 60_000 * MS]);
    }

    #[test]
    fn a_poll_does_not_grow() {
        let mut b = Backoff::seeded(20 * MS, 20 * MS, 3);
        for _ in 0..10 {
            let w = b.next_wait();
            assert!(w >= 10 * MS && w <= 20 * MS, "{w:?}");
        }
        let mut b = Backoff::poll(20 * MS);
        assert_eq!(b.peek(), 20 * MS);
        b.next_wait();
        assert_eq!(b.peek(), 20 * MS);
    }
}
