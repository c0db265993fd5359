//! Reading a plan: JSON Lines streamed from a file or stdin, or one step
//! object spread over several lines.
//!
//! Owns the plan as a source of steps ([`Plan`], [`PlanReader`]). Invariant:
//! a plan is read in bounded memory (one id hash per step), every step is
//! parsed by [`Step::from_value`] with its line number, and a duplicate id
//! is an error naming both lines; stdin is spooled to a temporary file so
//! the plan can be read twice (validated, then applied).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::Path;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::plan::step::Step;

/// Streams the steps of a plan, one JSON object per line (blank lines
/// ignored), or a single JSON object spread over several lines. Memory does
/// not grow with the plan's length beyond one id per step (to catch duplicate
/// ids).
pub struct PlanReader<R> {
    reader: R,
    line: usize,
    buf: String,
    /// 128 bits of each id's SHA-256 → its line: duplicate ids are caught
    /// in 24 bytes a step, whatever the length of the ids or steps.
    seen: HashMap<u128, usize>,
    first: bool,
    stopped: bool,
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
        }
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
            if self.buf.trim().is_empty() {
                continue;
            }
            let start = self.line;
            let value = match serde_json::from_str::<Value>(&self.buf) {
                Ok(v) => v,
                Err(e) if e.is_eof() && self.first => {
                    // Perhaps a single step object spread over several lines.
                    let mut rest = String::new();
                    self.reader.read_to_string(&mut rest).map_err(|e| {
                        self.bad(start, format!("cannot read the plan: {e}"))
                    })?;
                    let whole = std::mem::take(&mut self.buf) + &rest;
                    serde_json::from_str::<Value>(&whole).map_err(|e| {
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
            let step = Step::from_value(value, start)?;
            let key = u128::from_le_bytes(
                Sha256::digest(step.id.as_bytes())[..16]
                    .try_into()
                    .expect("16 bytes"),
            );
            if let Some(prev) = self.seen.get(&key) {
                return Err(Error::Input {
                    step: Some(step.id.clone()),
                    line: Some(start),
                    message: format!(
                        "the id is used twice in this plan (first on line {prev}); a step id is its idempotency key and must be unique"
                    ),
                });
            }
            self.seen.insert(key, start);
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
            let mut file = tempfile::tempfile_in(spool_dir).map_err(|e| {
                Error::other(format!(
                    "cannot spool the plan from stdin into {}: {e}",
                    spool_dir.display()
                ))
            })?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<Result<Step>> {
        PlanReader::new(text.as_bytes()).collect()
    }

    #[test]
    fn jsonl_and_single_object() {
        let steps =
            read("{\"id\":\"a\",\"patch\":\"x\"}\n\n{\"id\":\"b\",\"files\":{\"f\":null}}\n");
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
                "{\"id\":\"a\",\"patch\":\"x\"}\n{\"id\":\"b\",\"pa",
                "plan line 2",
                "truncated",
            ),
            (
                "{\"id\":\"a\",\"patch\":\"x\",\"extra\":1}",
                "step a",
                "unknown field `extra`",
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
                "{\"id\":\"a\",\"patch\":\"x\"}\n{\"id\":\"a\",\"patch\":\"y\"}",
                "plan line 2",
                "first on line 1",
            ),
            (
                "{\"id\":\"a\",\"patch\":\"x\"}\nnot json",
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
    fn iteration_stops_after_an_error() {
        let all = read("garbage\n{\"id\":\"a\",\"patch\":\"x\"}\n");
        assert_eq!(all.len(), 1);
        assert!(all[0].is_err());
    }
}
