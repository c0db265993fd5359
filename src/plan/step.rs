//! The step format: recorded decisions, read from a plan, validated, digested.
//!
//! Owns the SPEC's "Steps" section: JSON Lines plans (or one JSON object),
//! the id charset, unknown-field and type checks, the content fields, and the
//! decision digest (`sha256:` + SHA-256 of the RFC 8785 canonical JSON of the
//! step object exactly as given). Invariant: a [`Step`] that exists has a
//! valid id (which can never inject a trailer line), exactly one content field,
//! only valid paths, and a digest anyone can recompute from the plan line.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::Path;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::git::hex;
use crate::plan::path;

/// Longest id the SPEC allows.
pub const MAX_ID_LEN: usize = 128;

/// Fields a step object may carry.
const FIELDS: &[&str] = &[
    "id",
    "patch",
    "files",
    "edits",
    "apply_patch",
    "search_replace",
    "message",
    "intent",
];

/// The content fields; exactly one is present.
const CONTENT_FIELDS: &[&str] = &["patch", "files", "edits", "apply_patch", "search_replace"];

/// What a step changes, in one of the SPEC's edit formats.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// A unified diff (git-style or plain `---`/`+++`).
    Patch(String),
    /// Whole-file writes; `None` deletes the file.
    Files(BTreeMap<String, Option<String>>),
    /// Text-editor operations (see `formats::edits`).
    Edits(Vec<Value>),
    /// A `*** Begin Patch` … `*** End Patch` patch (see `formats::apply_patch`).
    ApplyPatch(String),
    /// SEARCH/REPLACE blocks (see `formats::search_replace`).
    SearchReplace(String),
}

impl Content {
    /// The field name this content came from.
    pub fn format(&self) -> &'static str {
        match self {
            Content::Patch(_) => "patch",
            Content::Files(_) => "files",
            Content::Edits(_) => "edits",
            Content::ApplyPatch(_) => "apply_patch",
            Content::SearchReplace(_) => "search_replace",
        }
    }
}

/// One recorded decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub id: String,
    pub content: Content,
    pub message: Option<String>,
    pub intent: Option<Value>,
    /// `sha256:<hex>` of the canonical JSON of the step object.
    pub digest: String,
    /// 1-based line of the plan where the step starts (0 when not from a plan).
    pub line: usize,
}

/// Check an id against `^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$`.
pub fn validate_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("the id is empty".into());
    }
    if id.len() > MAX_ID_LEN {
        return Err(format!(
            "the id is {} bytes long; at most {MAX_ID_LEN} are allowed",
            id.len()
        ));
    }
    let mut chars = id.chars();
    let first = chars.next().unwrap_or(' ');
    if !first.is_ascii_alphanumeric() {
        return Err(format!("the id {id:?} must start with a letter or digit"));
    }
    if let Some(bad) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '/' | '-')))
    {
        return Err(format!(
            "the id {id:?} contains {bad:?}; ids use only A-Z a-z 0-9 . _ : / -"
        ));
    }
    Ok(())
}

/// `sha256:` + hex SHA-256 of the RFC 8785 canonical form of `value`.
pub fn decision_digest(value: &Value) -> String {
    // Canonicalising a `Value` cannot fail: it has no non-string keys and no
    // non-finite numbers.
    let canonical = serde_jcs::to_vec(value).expect("a JSON value canonicalises");
    format!("sha256:{}", hex(&Sha256::digest(&canonical)))
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl Step {
    /// Validate a parsed JSON value as a step. `line` is where it starts in
    /// the plan (for messages).
    pub fn from_value(value: Value, line: usize) -> Result<Step> {
        let err = |step: Option<&str>, message: String| Error::Input {
            step: step.map(str::to_string),
            line: (line > 0).then_some(line),
            message,
        };
        let Value::Object(map) = &value else {
            return Err(err(
                None,
                format!("a step must be a JSON object, found {}", type_name(&value)),
            ));
        };
        let id = match map.get("id") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(err(
                    None,
                    format!("field `id` must be a string, found {}", type_name(other)),
                ))
            }
            None => return Err(err(None, "the step has no `id` field".into())),
        };
        validate_id(&id).map_err(|m| err(None, m))?;
        let step = Some(id.as_str());
        let mut unknown: Vec<&str> = map
            .keys()
            .map(String::as_str)
            .filter(|k| !FIELDS.contains(k))
            .collect();
        if !unknown.is_empty() {
            unknown.sort_unstable();
            return Err(err(
                step,
                format!(
                    "unknown field{} {}; a step has only {}",
                    if unknown.len() > 1 { "s" } else { "" },
                    unknown
                        .iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    FIELDS.join(", ")
                ),
            ));
        }
        let present: Vec<&str> = CONTENT_FIELDS
            .iter()
            .copied()
            .filter(|f| map.contains_key(*f))
            .collect();
        let field = match present.as_slice() {
            [one] => *one,
            [] => {
                return Err(err(
                    step,
                    format!(
                        "the step has no content; give exactly one of {}",
                        CONTENT_FIELDS.join(", ")
                    ),
                ))
            }
            many => {
                return Err(err(
                    step,
                    format!(
                        "the step has {} content fields ({}); give exactly one",
                        many.len(),
                        many.join(", ")
                    ),
                ))
            }
        };
        let raw = &map[field];
        let want_string = |what: &str| -> Result<String> {
            match raw {
                Value::String(s) if s.is_empty() => {
                    Err(err(step, format!("field `{what}` is empty")))
                }
                Value::String(s) => Ok(s.clone()),
                other => Err(err(
                    step,
                    format!(
                        "field `{what}` must be a string, found {}",
                        type_name(other)
                    ),
                )),
            }
        };
        let content = match field {
            "patch" => Content::Patch(want_string("patch")?),
            // The edit formats are parsed here too, so a malformed one fails
            // plan validation, before any step is applied.
            "apply_patch" => {
                let text = want_string("apply_patch")?;
                crate::plan::formats::apply_patch::parse(&text)
                    .map_err(|m| err(step, format!("apply_patch: {m}")))?;
                Content::ApplyPatch(text)
            }
            "search_replace" => {
                let text = want_string("search_replace")?;
                crate::plan::formats::search_replace::parse(&text)
                    .map_err(|m| err(step, format!("search_replace: {m}")))?;
                Content::SearchReplace(text)
            }
            "edits" => match raw {
                Value::Array(a) if a.is_empty() => {
                    return Err(err(step, "field `edits` is an empty array".into()))
                }
                Value::Array(a) => {
                    crate::plan::formats::edits::parse(a).map_err(|m| err(step, m.to_string()))?;
                    Content::Edits(a.clone())
                }
                other => {
                    return Err(err(
                        step,
                        format!("field `edits` must be an array, found {}", type_name(other)),
                    ))
                }
            },
            "files" => {
                let Value::Object(files) = raw else {
                    return Err(err(
                        step,
                        format!(
                            "field `files` must be an object of path → string or null, found {}",
                            type_name(raw)
                        ),
                    ));
                };
                if files.is_empty() {
                    return Err(err(step, "field `files` is an empty object".into()));
                }
                let mut out = BTreeMap::new();
                for (p, v) in files {
                    path::validate(p).map_err(|m| err(step, format!("files: {m}")))?;
                    let v = match v {
                        Value::String(s) => Some(s.clone()),
                        Value::Null => None,
                        other => {
                            return Err(err(
                                step,
                                format!(
                                "files: the content of {p:?} must be a string or null, found {}",
                                type_name(other)
                            ),
                            ))
                        }
                    };
                    out.insert(p.clone(), v);
                }
                Content::Files(out)
            }
            _ => unreachable!("CONTENT_FIELDS is exhaustive"),
        };
        let message = match map.get("message") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                return Err(err(
                    step,
                    format!(
                        "field `message` must be a string, found {}",
                        type_name(other)
                    ),
                ))
            }
        };
        let intent = map.get("intent").cloned();
        let digest = decision_digest(&value);
        Ok(Step {
            id,
            content,
            message,
            intent,
            digest,
            line,
        })
    }

    /// Parse one step from JSON text (a single object).
    pub fn parse(text: &str) -> Result<Step> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| Error::input(format!("the step is not valid JSON: {e}")))?;
        Step::from_value(value, 0)
    }
}

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
    fn digest_is_canonical_json() {
        // Key order and insignificant whitespace do not matter.
        let a: Value = serde_json::from_str(r#"{"id":"s1","files":{"a":"x\n"}}"#).unwrap();
        let b: Value =
            serde_json::from_str("{ \"files\" : { \"a\" : \"x\\n\" } ,\n \"id\": \"s1\" }")
                .unwrap();
        assert_eq!(decision_digest(&a), decision_digest(&b));
        // The canonical text is exactly what RFC 8785 says, so anyone can
        // recompute the digest with `printf ... | sha256sum`.
        assert_eq!(
            serde_jcs::to_string(&a).unwrap(),
            r#"{"files":{"a":"x\n"},"id":"s1"}"#
        );
        let expected = format!(
            "sha256:{}",
            hex(&Sha256::digest(br#"{"files":{"a":"x\n"},"id":"s1"}"#))
        );
        assert_eq!(decision_digest(&a), expected);
    }

    #[test]
    fn digest_canonicalises_unicode_escapes_and_numbers() {
        // "\u00e9" and "é" are the same string; JCS writes it as raw UTF-8.
        let a: Value =
            serde_json::from_str(r#"{"id":"s","message":"caf\u00e9","intent":1.0}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"id":"s","message":"café","intent":1}"#).unwrap();
        assert_eq!(decision_digest(&a), decision_digest(&b));
        assert_eq!(
            serde_jcs::to_string(&a).unwrap(),
            r#"{"id":"s","intent":1,"message":"café"}"#
        );
        // Control characters use the short escapes or \u00xx in lower case.
        let c: Value = serde_json::from_str(r#"{"m":"\u0001\t\u001F"}"#).unwrap();
        assert_eq!(
            serde_jcs::to_string(&c).unwrap(),
            r#"{"m":"\u0001\t\u001f"}"#
        );
        // Keys sort by UTF-16 code units, not bytes: U+E000 sorts after U+1F600.
        let d: Value = serde_json::from_str("{\"\u{e000}\":1,\"\u{1f600}\":2}").unwrap();
        assert_eq!(
            serde_jcs::to_string(&d).unwrap(),
            "{\"\u{1f600}\":2,\"\u{e000}\":1}"
        );
    }

    #[test]
    fn ids_follow_the_charset() {
        for ok in ["s1", "a.b_c:d/e-f", "9", &"x".repeat(128)] {
            assert_eq!(validate_id(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "-x",
            ".x",
            "a b",
            "a\nStep-Id: x",
            "a: b",
            "é",
            &"x".repeat(129),
        ] {
            assert!(validate_id(bad).is_err(), "{bad:?}");
        }
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
