//! Progress of long work — reading a long run's receipts, replaying its
//! hunks, applying a big plan, the crash matrix — for a front end to show.
//!
//! Owns the process's progress sink. Invariant: reporting never changes
//! what the work does or writes; with no sink (a library user, a test,
//! `--quiet`, `--json`, stderr not a terminal) a report costs one atomic
//! load.

use std::sync::OnceLock;

/// Where progress goes: the CLI draws a bar on a terminal.
pub trait Sink: Send + Sync {
    /// Work named `what` begins: `total` units, when known.
    fn begin(&self, what: &str, total: Option<u64>);
    /// The total became known (or changed).
    fn total(&self, total: u64);
    /// `done` units are done.
    fn set(&self, done: u64);
    /// The work is over.
    fn end(&self);
    /// Run `f`, which writes to the terminal, with the bar out of its way.
    fn suspend(&self, f: &mut dyn FnMut());
}

static SINK: OnceLock<Box<dyn Sink>> = OnceLock::new();

/// Set the process's sink (once; later calls are ignored).
pub fn set_sink(sink: Box<dyn Sink>) {
    let _ = SINK.set(sink);
}

/// One piece of long work; it ends when dropped.
pub struct Phase {
    sink: Option<&'static dyn Sink>,
}

/// Begin `what`, of `total` units when known.
pub fn phase(what: &str, total: Option<u64>) -> Phase {
    let sink = SINK.get().map(|s| &**s);
    if let Some(s) = sink {
        s.begin(what, total);
    }
    Phase { sink }
}

impl Phase {
    pub fn set(&self, done: u64) {
        if let Some(s) = self.sink {
            s.set(done);
        }
    }

    pub fn total(&self, total: u64) {
        if let Some(s) = self.sink {
            s.total(total);
        }
    }
}

impl Drop for Phase {
    fn drop(&mut self) {
        if let Some(s) = self.sink {
            s.end();
        }
    }
}

/// Run `f`, which writes to the terminal, without tearing a bar.
pub fn suspend(mut f: impl FnMut()) {
    match SINK.get() {
        Some(s) => s.suspend(&mut f),
        None => f(),
    }
}
