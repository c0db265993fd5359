//! Reading a plan: JSON Lines streamed from a file or stdin, or one step
//! object spread over several lines.
//!
//! Owns the plan as a source of steps ([`Plan`], [`PlanReader`]). Invariant:
//! a plan is read in bounded memory (one id hash per step), every step is
//! parsed by [`Step::from_value`] with its line number; the same step twice
//! (same id, same decision: an at-least-once queue's redelivery) is read
//! once and the repeat noted, and one id with two decisions is a refusal
//! naming both lines; stdin is spooled to a temporary file so the plan can
//! be read twice (validated, then applied).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::Path;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::{Error, Refusal, RefusalKind, Result};
use crate::step::Step;

/// Streams the steps of a plan, one JSON object per line (blank lines
/// ignored), or a single JSON object spread over several lines. Memory does
/// not grow with the plan's length beyond one id per step (to catch repeated
/// ids).
pub struct PlanReader<R> {
    reader: R,
    line: usize,
    buf: String,
    /// 128 bits of each id's SHA-256 → its line and 64 bits of its
    /// decision digest: repeated ids are caught in 32 bytes a step, whatever
    /// the length of the ids or steps. (Two decisions whose digests share 64
    /// bits would be read as one: only a plan's author could make such a
    /// pair, and the first of them is what is applied.)
    seen: HashMap<u128, (u32, u64)>,
    first: bool,
    stopped: bool,
    /// Redeliveries read past since the last call of
    /// [`PlanReader::take_repeats`], in plan order.
    repeats: Vec<Repeat>,
}

/// A step the plan holds twice with the same decision: read once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repeat {
    pub id: String,
    pub line: usize,
    pub first_line: usize,
}

fn prefix(bytes: &[u8]) -> u128 {
    u128::from_le_bytes(Sha256::digest(bytes)[..16].try_into().expect("16 bytes"))
}

fn prefix64(digest: &str) -> u64 {
    u64::from_le_bytes(
        Sha256::digest(digest.as_bytes())[..8]
            .try_into()
            .expect("8 bytes"),
    )
}

impl<R: BufRead> PlanReader<R> {
    pub fn new(reader: R) -> Self {
        PlanReader {
            reader,
            line: 0,
            buf: String::new(),
            seen: HashMap::new(),
            first: true,
            stopped: false,
            repeats: Vec::new(),
        }
    }

    /// The redeliveries skipped since the last call, in plan order: each
    /// came after the step returned before it, and before the next one.
    pub fn take_repeats(&mut self) -> Vec<Repeat> {
        std::mem::take(&mut self.repeats)
    }

    fn bad(&self, line: usize, message: String) -> Error {
        Error::Input {
            step: None,
            line: Some(line),
            message,
        }
    }

    fn next_step(&mut self) -> Result<Option<Step>> {
        loop {
            self.buf.clear();
            let n = self
                .reader
                .read_line(&mut self.buf)
                .map_err(|e| self.bad(self.line + 1, format!("cannot read the plan: {e}")))?;
            if n == 0 {
                return Ok(None);
            }
            self.line += 1;
            // A UTF-8 byte order mark (editors on Windows write one) is not
            // part of the plan.
            if self.line == 1 && self.buf.starts_with('\u{feff}') {
                self.buf.drain(..'\u{feff}'.len_utf8());
            }
            if self.buf.starts_with('\u{feff}') {
                return Err(self.bad(
                    self.line,
                    "the line starts with a byte order mark (U+FEFF); only a plan's first line may (were two plans joined?)".into(),
                ));
            }
            if self.buf.trim().is_empty() {
                continue;
            }
            let start = self.line;
            // A long line (a step carrying a large file) is parsed inside
            // its own buffer; on an error it comes back as it was.
            let parsed = if self.buf.len() > 1 << 20 {
                crate::inplace::parse(std::mem::take(&mut self.buf)).map_err(|(e, line)| {
                    self.buf = line;
                    e
                })
            } else {
                serde_json::from_str::<Value>(&self.buf)
            };
            let value = match parsed {
                Ok(v) => v,
                Err(e) if e.is_eof() && self.first => {
                    // Perhaps a single step object spread over several lines.
                    let mut rest = String::new();
                    self.reader.read_to_string(&mut rest).map_err(|e| {
                        self.bad(start, format!("cannot read the plan: {e}"))
                    })?;
                    let whole = std::mem::take(&mut self.buf) + &rest;
                    drop(rest);
                    let parsed = if whole.len() > 1 << 20 {
                        crate::inplace::parse(whole).map_err(|(e, _)| e)
                    } else {
                        serde_json::from_str::<Value>(&whole)
                    };
                    parsed.map_err(|e| {
                        let line = start + e.line().saturating_sub(1);
                        if e.is_eof() {
                            self.bad(line, format!("the plan is truncated: {e}"))
                        } else {
                            self.bad(line, format!("not valid JSON: {e}"))
                        }
                    })?
                }
                Err(e) if e.is_eof() => {
                    return Err(self.bad(
                        start,
                        format!("the line is truncated (a plan holds one complete JSON object per line): {e}"),
                    ))
                }
                Err(e) => return Err(self.bad(start, format!("not valid JSON: {e}"))),
            };
            self.first = false;
            // A long line's buffer goes before its step is built: a step
            // that writes a large file is not held twice while it waits.
            if self.buf.capacity() > 1 << 20 {
                self.buf = String::new();
            }
            let step = Step::from_value(value, start)?;
            let key = prefix(step.id.as_bytes());
            let decision = prefix64(&step.digest);
            if let Some(&(prev, prev_decision)) = self.seen.get(&key) {
                let prev = prev as usize;
                if prev_decision == decision {
                    // A redelivery: the same decision again is applied once.
                    self.repeats.push(Repeat {
                        id: step.id,
                        line: start,
                        first_line: prev,
                    });
                    continue;
                }
                if step.plain_digest.as_deref().map(prefix64) == Some(prev_decision) {
                    return Err(Error::from(Refusal {
                        kind: RefusalKind::DigestMismatch,
                        step: Some(step.id.clone()),
                        saw: format!(
                            "plan line {start} repeats step {} of plan line {prev} with {} effect(s) added: otherwise it is a redelivery",
                            step.id,
                            step.effects.len()
                        ),
                        would: "apply one of two different decisions under the same idempotency key".into(),
                        hint: "effects belong on the step's one line: put them on the first line, or give the second step an id of its own".into(),
                    }));
                }
                return Err(Error::from(Refusal {
                    kind: RefusalKind::DigestMismatch,
                    step: Some(step.id.clone()),
                    saw: format!(
                        "plan line {start} holds step {} with another decision than plan line {prev} ({})",
                        step.id, step.digest
                    ),
                    would: "apply one of two different decisions under the same idempotency key".into(),
                    hint: "a step id names one decision: give the other step an id of its own, or drop one of the two lines".into(),
                }));
            }
            self.seen
                .insert(key, (u32::try_from(start).unwrap_or(u32::MAX), decision));
            return Ok(Some(step));
        }
    }
}

impl<R: BufRead> Iterator for PlanReader<R> {
    type Item = Result<Step>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.stopped {
            return None;
        }
        match self.next_step() {
            Ok(Some(step)) => Some(Ok(step)),
            Ok(None) => None,
            Err(e) => {
                // A plan with an error is not read any further.
                self.stopped = true;
                Some(Err(e))
            }
        }
    }
}

/// A plan that can be read more than once (validated fully, then applied),
/// without holding it in memory. Standard input is spooled to an anonymous
/// temporary file in `spool_dir` (inside `.git`, so nothing is written outside
/// the repository); it vanishes when the plan is dropped.
pub struct Plan {
    file: File,
    pub name: String,
}

impl Plan {
    pub fn open(source: &str, spool_dir: &Path) -> Result<Plan> {
        if source == "-" {
            let mut file = spool(spool_dir, "stdin")?;
            std::io::copy(&mut std::io::stdin().lock(), &mut file)
                .map_err(|e| Error::input(format!("cannot read the plan from stdin: {e}")))?;
            Ok(Plan {
                file,
                name: "<stdin>".into(),
            })
        } else {
            let file = File::open(source)
                .map_err(|e| Error::input(format!("cannot open the plan {source}: {e}")))?;
            Ok(Plan {
                file,
                name: source.to_string(),
            })
        }
    }

    /// A plan given as text (one step object, or JSON Lines), spooled like
    /// standard input; `name` is what messages call it.
    pub fn from_text(text: &str, spool_dir: &Path, name: &str) -> Result<Plan> {
        let mut file = spool(spool_dir, name)?;
        file.write_all(text.as_bytes())
            .map_err(|e| Error::io(format!("cannot spool the plan {name}"), e))?;
        Ok(Plan {
            file,
            name: name.to_string(),
        })
    }

    /// Read the steps from the start.
    pub fn steps(&self) -> Result<PlanReader<BufReader<File>>> {
        let mut f = self
            .file
            .try_clone()
            .map_err(|e| Error::input(format!("cannot read the plan {}: {e}", self.name)))?;
        f.seek(SeekFrom::Start(0))
            .map_err(|e| Error::input(format!("cannot read the plan {}: {e}", self.name)))?;
        Ok(PlanReader::new(BufReader::new(f)))
    }
}

/// An anonymous temporary file in `dir` (it vanishes with its handle).
fn spool(dir: &Path, what: &str) -> Result<File> {
    tempfile::tempfile_in(dir).map_err(|e| {
        Error::io(
            format!("cannot spool the plan from {what} into {}", dir.display()),
            e,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<Result<Step>> {
        PlanReader::new(text.as_bytes()).collect()
    }

    #[test]
    fn jsonl_and_single_object() {
        let steps = read(
            "{\"id\":\"a\",\"files\":{\"x\":\"x\"}}\n\n{\"id\":\"b\",\"files\":{\"f\":null}}\n",
        );
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[1].as_ref().unwrap().line, 3);
        let single = read("{\n  \"id\": \"a\",\n  \"files\": {\"f\": \"x\"}\n}\n");
        assert_eq!(single.len(), 1);
        assert_eq!(single[0].as_ref().unwrap().id, "a");
    }

    #[test]
    fn errors_name_the_line_and_the_problem() {
        let cases = [
            (
                "{\"id\":\"a\",\"files\":{\"x\":\"x\"}}\n{\"id\":\"b\",\"pa",
                "plan line 2",
                "truncated",
            ),
            (
                "{\"id\":\"a\",\"patch\":\"x\",\"extra\":1}",
                "step a",
                "unknown field `extra`",
            ),
            (
                "{\"id\":\"a\",\"edit\":[]}",
                "step a",
                "unknown field `edit` (did you mean `edits` for `edit`?)",
            ),
            ("{\"id\":\"a\"}", "step a", "no content"),
            (
                "{\"id\":\"a\",\"patch\":\"x\",\"files\":{}}",
                "step a",
                "2 content fields",
            ),
            ("{\"id\":\"a\",\"patch\":5}", "step a", "must be a string"),
            (
                "{\"id\":\"a\",\"files\":{\"../x\":\"y\"}}",
                "step a",
                "`..`",
            ),
            (
                "{\"id\":\"a b\",\"patch\":\"x\"}",
                "plan line 1",
                "contains ' '",
            ),
            ("[1]", "plan line 1", "must be a JSON object"),
            (
                "{\"id\":\"a\",\"files\":{\"x\":\"x\"}}\n{\"id\":\"a\",\"files\":{\"x\":\"y\"}}",
                "plan line 2",
                "another decision than plan line 1",
            ),
            (
                "{\"id\":\"a\",\"files\":{\"x\":\"x\"}}\nnot json",
                "plan line 2",
                "not valid JSON",
            ),
        ];
        for (text, place, what) in cases {
            let all = read(text);
            let err = all
                .into_iter()
                .find_map(|r| r.err())
                .unwrap_or_else(|| panic!("{text:?} should fail"));
            let msg = err.to_string();
            assert!(msg.contains(place) && msg.contains(what), "{text:?}: {msg}");
        }
    }

    #[test]
    fn a_redelivery_is_read_once_and_noted() {
        let a = "{\"id\":\"a\",\"files\":{\"x\":\"x\"}}";
        let b = "{\"id\":\"b\",\"files\":{\"x\":\"x\"}}";
        // Key order does not make it another decision.
        let a2 = "{\"files\":{\"x\":\"x\"}, \"id\":\"a\"}";
        let text = format!("{a}\n{b}\n{a2}\n{a}\n");
        let mut r = PlanReader::new(text.as_bytes());
        assert_eq!(r.next().unwrap().unwrap().id, "a");
        assert!(r.take_repeats().is_empty());
        assert_eq!(r.next().unwrap().unwrap().id, "b");
        assert!(r.next().is_none());
        let rep = r.take_repeats();
        assert_eq!(
            rep.iter()
                .map(|x| (x.line, x.first_line))
                .collect::<Vec<_>>(),
            [(3, 1), (4, 1)]
        );
        let err = read(&format!(
            "{a}\n{{\"id\":\"a\",\"files\":{{\"x\":\"y\"}}}}\n"
        ))
        .into_iter()
        .find_map(|r| r.err())
        .unwrap();
        assert_eq!(err.exit_code(), 3, "{err}");
    }

    #[test]
    fn a_byte_order_mark_inside_a_plan_is_named() {
        let err = read("{\"id\":\"a\",\"files\":{\"x\":\"x\"}}\n\u{feff}{\"id\":\"b\",\"files\":{\"x\":\"x\"}}\n")
            .into_iter()
            .find_map(|r| r.err())
            .unwrap();
        assert!(
            err.to_string().contains("plan line 2") && err.to_string().contains("byte order mark"),
            "{err}"
        );
    }

    #[test]
    fn a_byte_order_mark_is_not_part_of_the_plan() {
        let steps = read("\u{feff}{\"id\":\"a\",\"files\":{\"x\":\"x\"}}\n");
        assert_eq!(steps[0].as_ref().unwrap().id, "a");
        let single = read("\u{feff}{\n \"id\": \"a\",\n \"files\": {\"x\": \"x\"}\n}\n");
        assert_eq!(single[0].as_ref().unwrap().id, "a");
    }

    #[test]
    fn iteration_stops_after_an_error() {
        let all = read("garbage\n{\"id\":\"a\",\"files\":{\"x\":\"x\"}}\n");
        assert_eq!(all.len(), 1);
        assert!(all[0].is_err());
    }
}
