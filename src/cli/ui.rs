//! The one [`Ui`] every command speaks through: it owns stdout (data),
//! stderr (status, notes, warnings, hints and errors) and the progress
//! bars, and knows `--json`, `--quiet` and `--verbose`.
//!
//! Invariant: no command writes to the process's stdout or stderr but
//! through its `Ui`, and every stderr line is redacted (no URL's password)
//! and drawn out of a progress bar's way. `main` gives the process's
//! streams ([`Ui::stdio`]); `git steps mcp` gives each call a capturing Ui
//! ([`Ui::capture`]), whose stdout must stay empty (the protocol owns it)
//! and whose stderr lines become the server's log.

use std::io::{self, Write};
use std::sync::{Arc, Mutex};

use super::progress;
use super::Failure;

/// How loud, and where: a command's streams and levels.
#[derive(Clone)]
pub struct Ui {
    out: Stream,
    err: Stream,
    /// Machine output: one JSON document on stdout.
    pub json: bool,
    /// Less status on stderr.
    pub quiet: bool,
    /// More status on stderr.
    pub verbose: bool,
    /// Progress bars are drawn (stderr is a terminal, neither `--quiet`
    /// nor `--json`); read by the crash matrix's bar.
    #[cfg_attr(not(feature = "harness"), allow(dead_code))]
    bars: bool,
}

/// One of a Ui's streams, shared by its clones (the MCP server's log is
/// written from its tool calls' threads).
type Stream = Arc<Mutex<Box<dyn Write + Send>>>;

fn stream(w: impl Write + Send + 'static) -> Stream {
    Arc::new(Mutex::new(Box::new(w)))
}

/// What a capturing [`Ui`] was told, shared with whoever made it.
#[derive(Clone, Default)]
pub struct Captured {
    out: Arc<Mutex<Vec<u8>>>,
    err: Arc<Mutex<Vec<u8>>>,
}

impl Captured {
    /// What went to stdout.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.lock().expect("capture lock")).into_owned()
    }

    /// What went to stderr.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.err.lock().expect("capture lock")).into_owned()
    }
}

/// A [`Write`] into a shared buffer.
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().expect("capture lock").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The Ui's stdout, borrowed one write at a time, so that a command may
/// hold it while it also says things on stderr.
pub struct Out<'a>(&'a Stream);

impl Write for Out<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        lock(self.0).write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        lock(self.0).write_all(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        lock(self.0).flush()
    }
}

/// A stream, locked. A thread that panicked while writing left at worst a
/// torn line: the stream is still good.
fn lock(s: &Stream) -> std::sync::MutexGuard<'_, Box<dyn Write + Send>> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

impl Ui {
    /// The process's own streams. Bars are drawn, and the library's long
    /// work reports to them, when stderr is a terminal and neither
    /// `--quiet` nor `--json` is given (and `with_bars` allows: not under
    /// `mcp`, whose stdio is a protocol).
    pub fn stdio(json: bool, quiet: bool, verbose: bool, with_bars: bool) -> Ui {
        let bars = with_bars && progress::enabled(quiet, json);
        if bars {
            crate::progress::set_sink(Box::new(progress::Bars::default()));
        }
        Ui {
            // Not locked for the whole run: `git steps mcp` writes its
            // protocol messages to stdout from another thread.
            out: stream(io::stdout()),
            err: stream(io::stderr()),
            json,
            quiet,
            verbose,
            bars,
        }
    }

    /// A Ui whose streams are kept in memory, for a front end that is not
    /// a terminal (MCP) and for tests. Never draws bars.
    pub fn capture(json: bool, quiet: bool, verbose: bool) -> (Ui, Captured) {
        let captured = Captured::default();
        let ui = Ui {
            out: stream(Shared(captured.out.clone())),
            err: stream(Shared(captured.err.clone())),
            json,
            quiet,
            verbose,
            bars: false,
        };
        (ui, captured)
    }

    /// Stdout, where data goes: human lines, or the `--json` document.
    pub fn out(&self) -> Out<'_> {
        Out(&self.out)
    }

    /// One line on stderr, whatever the level: redacted, and out of the
    /// bar's way. A full disk or a closed stderr (a CI log that went away)
    /// is not worth a panic: the line is dropped, and the exit code still
    /// says what happened.
    pub fn line(&self, line: &str) {
        let text = crate::git::redact(line);
        let mut err = lock(&self.err);
        crate::progress::suspend(|| {
            let _ = writeln!(err, "{text}");
        });
    }

    /// A status line on stderr (not with `--quiet`).
    pub fn status(&self, line: &str) {
        if !self.quiet {
            self.line(line);
        }
    }

    /// `note: …` on stderr (not with `--quiet`).
    pub fn note(&self, note: &str) {
        self.status(&format!("note: {note}"));
    }

    /// Status only `--verbose` shows.
    pub fn detail(&self, line: &str) {
        if self.verbose {
            self.line(line);
        }
    }

    /// A failure: its `--json` document on stdout (unless the command
    /// wrote one), and always the human message on stderr (`Error:` /
    /// `Would have:` / `Hint:` / `Caused by:`).
    pub fn failure(&self, f: &Failure) {
        if self.json && !f.json_written {
            let _ = super::emit_json(&mut self.out(), "error", &super::failure_json(f));
        }
        let text = super::failure_text_with(&f.error, self.verbose);
        let text = crate::git::redact(&text);
        let mut err = lock(&self.err);
        crate::progress::suspend(|| {
            let _ = write!(err, "{text}");
        });
    }

    /// The crash matrix's bar (drawn only where this Ui draws bars).
    #[cfg(feature = "harness")]
    pub(super) fn matrix_progress(&self, label: &str) -> progress::Progress {
        progress::Progress::new(label, self.bars)
    }

    /// With `--verbose`: the process's peak resident memory.
    pub fn peak_memory(&self) {
        if !self.verbose {
            return;
        }
        if let Some(kib) = crate::os::peak_memory_kib() {
            self.line(&format!("peak memory: {kib} KiB"));
        }
    }

    /// Flush stdout (the end of a command).
    pub fn flush(&self) {
        let _ = lock(&self.out).flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn quiet_keeps_status_and_notes_but_not_lines_and_errors() {
        let (ui, said) = Ui::capture(false, true, false);
        ui.status("status");
        ui.note("a note");
        ui.detail("detail");
        ui.line("always");
        ui.failure(&Failure::from(Error::input("bad step")));
        assert_eq!(said.stderr(), "always\nError: bad step\n");
        assert_eq!(said.stdout(), "");
    }

    #[test]
    fn every_stderr_line_is_redacted() {
        let (ui, said) = Ui::capture(false, false, true);
        ui.note("pushing to https://agent:s3cret@example.com/r.git");
        ui.detail("detail");
        assert!(!said.stderr().contains("s3cret"), "{}", said.stderr());
        assert!(said.stderr().starts_with("note: pushing to https://"));
        assert!(said.stderr().ends_with("detail\n"));
    }

    #[test]
    fn a_json_failure_is_one_document_on_stdout_and_text_on_stderr() {
        let (ui, said) = Ui::capture(true, false, false);
        ui.failure(&Failure::from(Error::input("bad step")));
        let doc: serde_json::Value = serde_json::from_str(&said.stdout()).unwrap();
        assert_eq!(doc["type"], "error");
        assert_eq!(doc["data"]["message"], "bad step");
        assert_eq!(said.stderr(), "Error: bad step\n");
        // A command that wrote its own document gets only the text.
        let (ui, said) = Ui::capture(true, false, false);
        let mut f = Failure::from(Error::input("bad step"));
        f.json_written = true;
        ui.failure(&f);
        assert_eq!(said.stdout(), "");
    }

    #[test]
    fn clones_share_their_streams() {
        let (ui, said) = Ui::capture(false, false, false);
        let log = ui.clone();
        std::thread::spawn(move || log.line("from a call's thread"))
            .join()
            .unwrap();
        writeln!(ui.out(), "data").unwrap();
        assert_eq!(said.stderr(), "from a call's thread\n");
        assert_eq!(said.stdout(), "data\n");
    }
}
