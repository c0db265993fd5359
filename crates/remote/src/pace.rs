//! A connection's reads held to a low-speed limit, as git's
//! `http.lowSpeedLimit` holds its own.
//!
//! Owns only the pace of an answer. Invariant: an answer that arrives at
//! less than one byte a second, measured over each window of the network
//! timeout from the request, fails as a timeout.

use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

/// A connection whose reads keep git's low-speed rule (`http.lowSpeedLimit`
/// of 1 byte a second over `http.lowSpeedTime` = the network timeout, as
/// git-steps gives the git it runs): a server that answers slower than
/// that, a byte at a time inside every read timeout, is a timeout, not a
/// run held forever.
pub(super) struct Paced<S> {
    pub(super) s: S,
    window: Duration,
    since: Instant,
    got: u64,
}

impl<S> Paced<S> {
    pub(super) fn new(s: S, window: Duration) -> Self {
        Paced {
            s,
            window,
            since: Instant::now(),
            got: 0,
        }
    }

    /// A request was sent: its answer's pace is measured from now.
    pub(super) fn start(&mut self) {
        self.since = Instant::now();
        self.got = 0;
    }
}

impl<S: Read> Read for Paced<S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.s.read(buf)?;
        self.got += n as u64;
        let spent = self.since.elapsed();
        if spent >= self.window {
            if (self.got as f64) < spent.as_secs_f64() {
                return Err(std::io::Error::new(
                    ErrorKind::TimedOut,
                    format!(
                        "the server sent {} byte(s) in {:.1} s, under 1 byte a second",
                        self.got,
                        spent.as_secs_f64()
                    ),
                ));
            }
            self.start();
        }
        Ok(n)
    }
}

impl<S: Write> Write for Paced<S> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.s.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.s.flush()
    }
}
