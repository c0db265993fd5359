//! Progress bars on stderr (indicatif): for the library's long work
//! ([`crate::progress`]) and the crash matrix. Drawn only when stderr is a
//! terminal and neither `--quiet` nor `--json` is given; a bar appears
//! after a quarter of a second, so quick commands never show one
//! (`GIT_STEPS_PROGRESS_DELAY_MS` changes the wait).

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Whether bars are drawn for this command.
pub(super) fn enabled(quiet: bool, json: bool) -> bool {
    !quiet && !json && std::io::stderr().is_terminal()
}

fn bar(what: &str, total: Option<u64>) -> ProgressBar {
    let style = match total {
        Some(_) => ProgressStyle::with_template(
            "{msg}: [{bar:30}] {human_pos}/{human_len} ({elapsed}, ETA {eta})",
        )
        .expect("a valid template")
        .progress_chars("#>-"),
        None => ProgressStyle::with_template("{msg}: {human_pos} ({elapsed})")
            .expect("a valid template"),
    };
    let b = ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr_with_hz(15))
        .with_style(style)
        .with_message(what.to_string());
    b.set_position(0);
    b
}

/// Work shorter than this shows no bar: a quarter of a second, or
/// [`crate::keys::PROGRESS_DELAY`] when it is a number.
fn delay() -> Duration {
    static DELAY: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *DELAY.get_or_init(|| {
        std::env::var(crate::keys::PROGRESS_DELAY.name)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(Duration::from_millis(250), Duration::from_millis)
    })
}

/// One bar at a time, shown once its work has lasted [`delay`].
struct Delayed {
    what: String,
    total: Option<u64>,
    done: u64,
    started: Instant,
    bar: Option<ProgressBar>,
}

impl Delayed {
    fn new(what: &str, total: Option<u64>) -> Delayed {
        Delayed {
            what: what.to_string(),
            total,
            done: 0,
            started: Instant::now(),
            bar: None,
        }
    }

    fn update(&mut self) {
        if self.bar.is_none() && self.started.elapsed() >= delay() {
            self.bar = Some(bar(&self.what, self.total));
        }
        if let Some(b) = &self.bar {
            if let Some(t) = self.total {
                b.set_length(t);
            }
            b.set_position(self.done);
        }
    }

    fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.set_position(self.done);
            b.finish_and_clear();
        }
    }
}

/// The library's progress, drawn as bars: work inside other work (the
/// hunks replayed while a plan is applied) shows its own bar, then the
/// outer one again.
#[derive(Default)]
pub(super) struct Bars {
    stack: Mutex<Vec<Delayed>>,
}

impl crate::progress::Sink for Bars {
    fn begin(&self, what: &str, total: Option<u64>) {
        let mut st = self.stack.lock().expect("progress lock");
        if let Some(outer) = st.last_mut() {
            if let Some(b) = outer.bar.take() {
                b.finish_and_clear();
            }
        }
        st.push(Delayed::new(what, total));
    }

    fn total(&self, total: u64) {
        if let Some(d) = self.stack.lock().expect("progress lock").last_mut() {
            d.total = Some(total);
            if let Some(b) = d.bar.take() {
                // A counter becomes a bar.
                b.finish_and_clear();
            }
            d.update();
        }
    }

    fn set(&self, done: u64) {
        if let Some(d) = self.stack.lock().expect("progress lock").last_mut() {
            d.done = done;
            d.update();
        }
    }

    fn end(&self) {
        let mut st = self.stack.lock().expect("progress lock");
        if let Some(mut d) = st.pop() {
            d.finish();
        }
        if let Some(outer) = st.last_mut() {
            outer.update();
        }
    }

    fn suspend(&self, f: &mut dyn FnMut()) {
        let st = self.stack.lock().expect("progress lock");
        match st.last().and_then(|d| d.bar.as_ref()) {
            Some(b) => b.suspend(f),
            None => f(),
        }
    }
}

/// The crash matrix's bar: rows done of all rows, from worker threads.
#[cfg(feature = "harness")]
pub(crate) struct Progress {
    inner: Option<Mutex<Delayed>>,
}

#[cfg(feature = "harness")]
impl Progress {
    pub(crate) fn new(label: &str, enabled: bool) -> Progress {
        Progress {
            inner: enabled.then(|| Mutex::new(Delayed::new(label, None))),
        }
    }

    pub(crate) fn tick(&self, done: usize, total: usize) {
        let Some(m) = &self.inner else { return };
        let mut d = m.lock().expect("progress lock");
        d.total = Some(total as u64);
        d.done = done as u64;
        d.update();
        if done >= total {
            d.finish();
        }
    }
}
