//! The decider: the external command (`run --decider CMD`) that stands for
//! the model, asked for one step at a time.
//!
//! Owns running CMD through the shell with the SPEC's JSON context on stdin
//! and reading its answer: one step object, or `{"done": true}`. Invariant:
//! an answer is returned only when CMD exited 0 within the timeout and
//! printed exactly one valid step object (or `done`); anything else is an
//! error that quotes CMD's stderr, and nothing of it is recorded.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::plan::step::Step;

/// What the decider is asked: the SPEC's context object ("The agent
/// loop"), plus the refusal of its previous answer for this index, if
/// there was one.
#[derive(Debug, Clone, Serialize)]
pub struct Question {
    pub run: String,
    pub step_index: usize,
    /// The durable head, or null before the first step.
    pub head: Option<String>,
    /// The artifact fingerprint at `head`.
    pub fingerprint: String,
    pub last_step_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<RefusedAnswer>,
}

/// The previous answer for this index and why it was refused.
#[derive(Debug, Clone, Serialize)]
pub struct RefusedAnswer {
    pub step_id: String,
    pub reason: String,
}

/// What the decider answered.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A step, and its canonical JSON (what the journal records).
    Step { step: Box<Step>, text: String },
    /// `{"done": true}`: the run is finished.
    Done,
}

/// How to ask.
#[derive(Debug, Clone)]
pub struct Decider {
    pub command: String,
    pub timeout: Duration,
    /// Hand back what a decider that answered wrote to stderr (`-v`);
    /// otherwise it is shown only when the decider fails.
    pub keep_stderr: bool,
}

/// The last lines of what a decider wrote to stderr, for error messages.
fn tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(20);
    let t = lines[from..].join("\n");
    if t.trim().is_empty() {
        "its stderr was empty".into()
    } else {
        format!("its stderr:\n{t}")
    }
}

/// A way to stop a decider asked on another thread: its answer is no
/// longer wanted, and it must not go on reading or writing the worktree.
#[derive(Debug, Default)]
pub struct Stop {
    pid: std::sync::atomic::AtomicI32,
    stopped: std::sync::atomic::AtomicBool,
}

impl Stop {
    /// Kill the decider's process group (now, or as soon as it starts).
    pub fn stop(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        self.stopped.store(true, SeqCst);
        kill_group(self.pid.load(SeqCst));
    }

    fn started(&self, pid: i32) {
        use std::sync::atomic::Ordering::SeqCst;
        self.pid.store(pid, SeqCst);
        if self.stopped.load(SeqCst) {
            kill_group(pid);
        }
    }
}

fn kill_group(pid: i32) {
    if let Some(group) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    }
}

impl Decider {
    /// Ask `question` (for the step at its `step_index`), in the worktree
    /// `dir`; with [`Decider::keep_stderr`], what it wrote to stderr comes
    /// back too.
    pub fn ask(&self, dir: &Path, question: &Question) -> Result<(Answer, Option<String>)> {
        self.ask_stoppable(dir, question, &Stop::default())
    }

    /// As [`Decider::ask`], stopped (killed, with what it started) by
    /// `stop` from another thread.
    pub fn ask_stoppable(
        &self,
        dir: &Path,
        question: &Question,
        stop: &Stop,
    ) -> Result<(Answer, Option<String>)> {
        let index = question.step_index;
        let who = format!("step index {index}: the decider `{}`", self.command);
        let input = serde_json::to_vec(question).expect("the question serialises");
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(&self.command)
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so a timeout kills what it started too.
            .process_group(0)
            .spawn()
            .map_err(|e| Error::program(format!("{who} cannot be started: {e}")))?;
        stop.started(child.id() as i32);
        let mut stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        // Feed and drain on threads: a decider that writes a lot before
        // reading must not deadlock against us.
        // Read into buffers shared with this thread, each reader saying when
        // its pipe ended: a process the decider left running in the
        // background (`server &`) may hold the pipes open after the decider
        // exits, and is not waited for.
        let (ended, pipes_ended) = std::sync::mpsc::channel::<()>();
        let _feeder = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let read = |mut from: Box<dyn Read + Send>| {
            let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            let (into, ended) = (got.clone(), ended.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                while let Ok(n @ 1..) = from.read(&mut buf) {
                    into.lock()
                        .expect("decider output")
                        .extend_from_slice(&buf[..n]);
                }
                let _ = ended.send(());
            });
            got
        };
        let out_buf = read(Box::new(stdout));
        let err_buf = read(Box::new(stderr));
        let start = Instant::now();
        // Woken when the decider exits (a pidfd on Linux), not by polling:
        // the agent loop waits no longer than the decider takes.
        let exited = crate::os::ExitWatch::new(&child, Duration::from_millis(5));
        let status = loop {
            let left = self.timeout.saturating_sub(start.elapsed());
            match child.try_wait() {
                Ok(Some(st)) => break Some(st),
                Ok(None) if left.is_zero() => {
                    // The child leads its own process group: all of it goes.
                    if let Some(group) = rustix::process::Pid::from_raw(child.id() as i32) {
                        let _ = rustix::process::kill_process_group(
                            group,
                            rustix::process::Signal::KILL,
                        );
                    }
                    let _ = child.wait();
                    break None;
                }
                Ok(None) => exited.wait(left),
                Err(e) => return Err(Error::program(format!("{who}: cannot wait for it: {e}"))),
            }
        };
        // Both pipes end with the decider, unless something it left running
        // holds them: then what it wrote is taken after a moment.
        let grace = Instant::now() + Duration::from_secs(2);
        for _ in 0..2 {
            let left = grace.saturating_duration_since(Instant::now());
            if pipes_ended.recv_timeout(left).is_err() {
                break;
            }
        }
        let take = |b: &std::sync::Arc<std::sync::Mutex<Vec<u8>>>| {
            b.lock().expect("decider output").clone()
        };
        let (out, err) = (take(&out_buf), take(&err_buf));
        let Some(status) = status else {
            return Err(Error::program(format!(
                "{who} did not answer within {} s and was killed; nothing was recorded; {}",
                self.timeout.as_secs_f64(),
                tail(&err)
            ))
            .with_hint("raise --decider-timeout, or fix the decider; rerunning asks it again"));
        };
        if !status.success() {
            let how = match status.code() {
                Some(c) => format!("exited with status {c}"),
                None => "was killed by a signal".into(),
            };
            return Err(Error::program(format!(
                "{who} {how}; nothing was recorded; {}",
                tail(&err)
            ))
            .with_hint("fix the decider; rerunning asks it again for this step"));
        }
        let answer = parse_answer(&out).map_err(|m| {
            Error::input(format!(
                "{who} answered something that is not a step: {m}; nothing was recorded; {}",
                tail(&err)
            ))
        })?;
        let said = (self.keep_stderr && !err.is_empty())
            .then(|| String::from_utf8_lossy(&err).trim_end().to_string());
        Ok((answer, said))
    }
}

/// Why a decider's answer is not a step. Each message says it whole (the
/// caller folds it into one line), so none is chained as a source.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error("its output is not UTF-8")]
    NotUtf8,
    #[error("it printed nothing (print a step object, or {{\"done\": true}})")]
    Empty,
    #[error("its output is not one JSON value: {0}")]
    NotJson(serde_json::Error),
    #[error("a done answer must be exactly {{\"done\": true}}")]
    BadDone,
    #[error("cannot canonicalise it: {0}")]
    NotCanonical(serde_json::Error),
    /// A JSON value that is not a valid step object.
    #[error("{0}")]
    NotAStep(Box<Error>),
}

/// Parse a decider's stdout: one JSON object, a step or `{"done": true}`.
pub fn parse_answer(out: &[u8]) -> std::result::Result<Answer, AnswerError> {
    let text = std::str::from_utf8(out).map_err(|_| AnswerError::NotUtf8)?;
    if text.trim().is_empty() {
        return Err(AnswerError::Empty);
    }
    let value: Value = serde_json::from_str(text.trim()).map_err(AnswerError::NotJson)?;
    if let Some(obj) = value.as_object() {
        if obj.contains_key("done") {
            return match (obj.get("done"), obj.len()) {
                (Some(Value::Bool(true)), 1) => Ok(Answer::Done),
                _ => Err(AnswerError::BadDone),
            };
        }
    }
    let text = serde_jcs::to_string(&value).map_err(AnswerError::NotCanonical)?;
    let step = Step::from_value(value, 0).map_err(|e| AnswerError::NotAStep(Box::new(e)))?;
    Ok(Answer::Step {
        step: Box::new(step),
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_and_bad_ones_say_why() {
        assert!(matches!(
            parse_answer(b"{\"done\": true}\n"),
            Ok(Answer::Done)
        ));
        match parse_answer(b" {\"files\":{\"a\":\"x\\n\"},\"id\":\"s1\"}\n") {
            Ok(Answer::Step { step, text }) => {
                assert_eq!(step.id, "s1");
                assert_eq!(text, r#"{"files":{"a":"x\n"},"id":"s1"}"#);
                assert_eq!(Step::parse(&text).unwrap().digest, step.digest);
            }
            other => panic!("{other:?}"),
        }
        for (bad, why) in [
            (&b""[..], "printed nothing"),
            (b"{\"done\": false}", "exactly"),
            (b"{\"id\":\"s1\"} {\"id\":\"s2\"}", "one JSON value"),
            (b"{\"id\":\"s1\"}", "content"),
            (b"\xff", "UTF-8"),
        ] {
            let e = parse_answer(bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }
}
