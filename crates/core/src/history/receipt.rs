//! Receipts: the trailer block that makes a commit the record of one step.
//!
//! Owns writing a step's commit message and reading a receipt back. The
//! message is `step <id>: <summary>`, a blank line, the intent (canonical JSON
//! on one line) and a blank line if there is an intent, then exactly
//! `Step-Id`, `Step-Run`, `Step-Decision`, `Step-Index` (the step's
//! position in the run, from 1; receipts written before it existed have none). Invariant (SPEC "Trailer safety"):
//! nothing a step supplies can add, hide or change a receipt as git reads it.
//! The summary is forced onto one line; the intent is one line of JSON, which
//! can start neither with `---` (git's divider) nor with `#`, and contains no
//! blank line; so the trailer paragraph is always the last one and only
//! git-steps writes it.
//!
//!
//! **Reading.** A receipt is what `git log --format='%(trailers:key=Step-Id)'`
//! shows (SPEC "Receipts"): [`parse`] reads the trailer block through
//! [`super::trailers`], a port of git's own reader.

use super::trailers::trailers;
use crate::plan::step::Step;

pub const KEY_ID: &str = "Step-Id";
pub const KEY_RUN: &str = "Step-Run";
pub const KEY_DECISION: &str = "Step-Decision";
/// The step's position in the run, from 1: where a scan may stop.
pub const KEY_INDEX: &str = "Step-Index";
/// Only on steps applied by `run`: where the decision came from.
pub const KEY_SOURCE: &str = "Step-Source";
/// Only on steps whose decision says `"allow_duplicate": true`: the step
/// repeats a change on purpose, so `verify` does not report it.
pub const KEY_ALLOW_DUPLICATE: &str = "Step-Allow-Duplicate";

/// Only on `adopt` steps: a commit without a receipt (a human's) that the
/// run takes as its own, one trailer per commit.
pub const KEY_ADOPT: &str = "Step-Adopt";

/// Only on `undo` steps: a step the step undoes, one trailer per step.
pub const KEY_UNDO: &str = "Step-Undo";

/// Only on steps with effects (SPEC "Effects"): how many; the effects
/// themselves are the paragraph above the trailers, one `effect <n>: <JSON>`
/// line each.
pub const KEY_EFFECTS: &str = "Step-Effects";

pub use crate::sign::DECISION_HEADER;

/// The decision a step commit stores ([`DECISION_HEADER`]), if any.
pub fn stored_decision(commit: &git2::Commit<'_>) -> Option<String> {
    let raw = commit.raw_header_bytes();
    let prefix = format!("{DECISION_HEADER} ");
    raw.split(|b| *b == b'\n')
        .find_map(|line| line.strip_prefix(prefix.as_bytes()))
        .and_then(|v| String::from_utf8(v.to_vec()).ok())
}

/// Longest summary kept in a subject line.
const SUMMARY_MAX: usize = 120;

/// What a receipt says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub id: String,
    pub run: String,
    pub decision: String,
    /// Position in the run, from 1 (None: a receipt older than the field).
    pub index: Option<u64>,
    /// `decider` (asked during this run) or `journal` (recorded before a
    /// crash, applied on resume without asking again); None for `apply`.
    pub source: Option<String>,
    /// `adopt` steps: the commits the run adopts (`Step-Adopt` trailers).
    pub adopts: Vec<git2::Oid>,
    /// `undo` steps: the steps undone (`Step-Undo` trailers).
    pub undoes: Vec<String>,
    /// How many effects the step carries (`Step-Effects`; 0 without it).
    pub effects: usize,
}

/// Collapse any text onto one printable line of bounded length.
fn one_line(text: &str) -> String {
    let mut s = String::with_capacity(text.len().min(SUMMARY_MAX));
    for word in text.split(|c: char| c.is_whitespace() || c.is_control()) {
        if word.is_empty() {
            continue;
        }
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(word);
    }
    if s.chars().count() > SUMMARY_MAX {
        s = s.chars().take(SUMMARY_MAX - 1).collect::<String>() + "…";
    }
    s
}

/// The commit message for `step`, the run's `index`th (from 1), ending with
/// its receipt (and, for the agent loop, where its decision came from).
pub fn message(
    step: &Step,
    run: &str,
    index: usize,
    summary_fallback: &str,
    source: Option<&str>,
) -> String {
    let summary = step
        .message
        .as_deref()
        .map(one_line)
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| one_line(summary_fallback));
    let mut m = format!("step {}: {}\n\n", step.id, summary);
    if let Some(intent) = &step.intent {
        // Canonical JSON is one line with no raw control characters.
        let line = serde_jcs::to_string(intent).expect("a JSON value canonicalises");
        m.push_str(&line);
        m.push_str("\n\n");
    }
    // Each effect one line of canonical JSON after our own words: the
    // paragraph can be neither git's `---` divider nor a trailer block, and
    // it is always the one right above the trailers.
    for (n, e) in step.effects.iter().enumerate() {
        m.push_str(&format!("effect {}: {}\n", n + 1, e.line()));
    }
    if !step.effects.is_empty() {
        m.push('\n');
    }
    m.push_str(&format!(
        "{KEY_ID}: {}\n{KEY_RUN}: {}\n{KEY_DECISION}: {}\n{KEY_INDEX}: {index}\n",
        step.id, run, step.digest
    ));
    if step.allow_duplicate {
        m.push_str(&format!("{KEY_ALLOW_DUPLICATE}: true\n"));
    }
    for u in &step.undo {
        m.push_str(&format!("{KEY_UNDO}: {u}\n"));
    }
    if let Some(src) = source {
        m.push_str(&format!("{KEY_SOURCE}: {src}\n"));
    }
    if !step.effects.is_empty() {
        m.push_str(&format!("{KEY_EFFECTS}: {}\n", step.effects.len()));
    }
    m
}

/// The effects a receipt's message records: the paragraph right above the
/// trailer block, `effect 1: …` to `effect <n>: …`, where `n` is the
/// receipt's `Step-Effects`. Anything else there is an error (a message
/// git-steps did not write).
pub fn effects(message: &str, count: usize) -> Result<Vec<crate::plan::effect::Effect>, String> {
    if count == 0 {
        return Ok(Vec::new());
    }
    let paragraphs: Vec<&str> = message.trim_end_matches('\n').split("\n\n").collect();
    let block = match paragraphs.len() {
        n if n >= 3 => paragraphs[n - 2],
        _ => {
            return Err(format!(
                "{KEY_EFFECTS} says {count} but the message holds no effects"
            ))
        }
    };
    let lines: Vec<&str> = block.lines().collect();
    if lines.len() != count {
        return Err(format!(
            "{KEY_EFFECTS} says {count} but {} effect line(s) precede the trailers",
            lines.len()
        ));
    }
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let prefix = format!("effect {}: ", i + 1);
            let json = l
                .strip_prefix(&prefix)
                .ok_or_else(|| format!("effect line {} does not start with {prefix:?}", i + 1))?;
            let v: serde_json::Value = serde_json::from_str(json)
                .map_err(|e| format!("effect {} is not JSON: {e}", i + 1))?;
            crate::plan::effect::Effect::from_value(&v)
                .map_err(|m| format!("effect {}: {m}", i + 1))
        })
        .collect()
}

/// Why a message's trailers are not a well-formed receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// No `Step-Id` trailer at all: not a step commit.
    NotAReceipt,
    /// Some receipt keys, but not exactly one of each.
    Malformed(String),
}

/// Read the receipt from a commit message with git's trailer rules (see the
/// module doc): exactly the trailers `git log --format=%(trailers)` shows.
pub fn parse(message: &str) -> Result<Receipt, ParseError> {
    let (mut id, mut run, mut decision) = (Vec::new(), Vec::new(), Vec::new());
    let mut index = Vec::new();
    let mut source = None;
    let mut adopts = Vec::new();
    let mut undoes = Vec::new();
    let mut effects = Vec::new();
    for (k, v) in trailers(message) {
        if k.eq_ignore_ascii_case(KEY_EFFECTS) {
            effects.push(v);
            continue;
        }
        if k.eq_ignore_ascii_case(KEY_ADOPT) {
            adopts.push(v);
            continue;
        }
        if k.eq_ignore_ascii_case(KEY_UNDO) {
            undoes.push(v);
            continue;
        }
        // git compares trailer keys case-insensitively.
        if k.eq_ignore_ascii_case(KEY_ID) {
            id.push(v);
        } else if k.eq_ignore_ascii_case(KEY_RUN) {
            run.push(v);
        } else if k.eq_ignore_ascii_case(KEY_DECISION) {
            decision.push(v);
        } else if k.eq_ignore_ascii_case(KEY_INDEX) {
            index.push(v);
        } else if k.eq_ignore_ascii_case(KEY_SOURCE) {
            source = Some(v);
        }
    }
    if id.is_empty() && run.is_empty() && decision.is_empty() {
        return Err(ParseError::NotAReceipt);
    }
    match (id.as_slice(), run.as_slice(), decision.as_slice()) {
        ([i], [r], [d]) => {
            crate::plan::step::validate_id(i)
                .map_err(|e| ParseError::Malformed(format!("bad Step-Id: {e}")))?;
            let index = match index.as_slice() {
                [] => None,
                [n] => Some(parse_index(n).ok_or_else(|| {
                    ParseError::Malformed(format!(
                        "bad {KEY_INDEX}: {n:?} is not a position from 1"
                    ))
                })?),
                more => {
                    return Err(ParseError::Malformed(format!(
                        "expected at most one {KEY_INDEX}; found {}",
                        more.len()
                    )))
                }
            };
            let adopts = adopts
                .iter()
                .map(|v| {
                    (v.len() == 40 && v.bytes().all(|b| b.is_ascii_hexdigit()))
                        .then(|| git2::Oid::from_str(v).ok())
                        .flatten()
                        .ok_or_else(|| {
                            ParseError::Malformed(format!(
                                "bad {KEY_ADOPT}: {v:?} is not a full commit id"
                            ))
                        })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let effects = match effects.as_slice() {
                [] => 0,
                [n] => parse_index(n)
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|&n| n <= crate::plan::effect::MAX_EFFECTS)
                    .ok_or_else(|| {
                        ParseError::Malformed(format!(
                            "bad {KEY_EFFECTS}: {n:?} is not a count of effects from 1 to {}",
                            crate::plan::effect::MAX_EFFECTS
                        ))
                    })?,
                more => {
                    return Err(ParseError::Malformed(format!(
                        "expected at most one {KEY_EFFECTS}; found {}",
                        more.len()
                    )))
                }
            };
            Ok(Receipt {
                id: i.clone(),
                run: r.clone(),
                decision: d.clone(),
                index,
                source,
                adopts,
                undoes,
                effects,
            })
        }
        _ => Err(ParseError::Malformed(format!(
            "expected one each of {KEY_ID}, {KEY_RUN}, {KEY_DECISION}; found {}, {}, {}",
            id.len(),
            run.len(),
            decision.len()
        ))),
    }
}

/// The message of an `adopt` step: its subject, then the receipt with one
/// `Step-Adopt` trailer per adopted commit (oldest first) and
/// `Step-Source: adopt`.
pub fn adopt_message(
    id: &str,
    run: &str,
    decision: &str,
    index: usize,
    adopted: &[git2::Oid],
    summary: &str,
) -> String {
    let mut m = format!("step {id}: {}\n\n", one_line(summary));
    m.push_str(&format!(
        "{KEY_ID}: {id}\n{KEY_RUN}: {run}\n{KEY_DECISION}: {decision}\n{KEY_INDEX}: {index}\n"
    ));
    for oid in adopted {
        m.push_str(&format!("{KEY_ADOPT}: {oid}\n"));
    }
    m.push_str(&format!("{KEY_SOURCE}: adopt\n"));
    m
}

/// Whether a receipt says its step repeats a change on purpose (exactly one
/// `Step-Allow-Duplicate: true` trailer, read with git's rules). The claim
/// is covered by the decision digest: `verify PLAN` checks it against the
/// plan's step.
pub fn allows_duplicate(message: &str) -> bool {
    let v: Vec<String> = trailers(message)
        .into_iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case(KEY_ALLOW_DUPLICATE))
        .map(|(_, v)| v)
        .collect();
    matches!(v.as_slice(), [one] if one == "true")
}

/// A position as git-steps writes it: decimal digits, no sign or leading
/// zero, from 1.
fn parse_index(v: &str) -> Option<u64> {
    if v.is_empty() || v.starts_with('0') || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(json: &str) -> Step {
        Step::parse(json).unwrap()
    }

    #[test]
    fn round_trip() {
        let s =
            step(r#"{"id":"s6","files":{"a":"x"},"message":"add a","intent":{"tool":"write"}}"#);
        let m = message(&s, "run-1", 6, "unused", None);
        assert!(
            m.starts_with("step s6: add a\n\n{\"tool\":\"write\"}\n\nStep-Id: s6\n"),
            "{m}"
        );
        assert_eq!(
            parse(&m).unwrap(),
            Receipt {
                id: "s6".into(),
                run: "run-1".into(),
                decision: s.digest.clone(),
                index: Some(6),
                source: None,
                adopts: Vec::new(),
                undoes: Vec::new(),
                effects: 0,
            }
        );
        assert!(m.ends_with(&format!("Step-Decision: {}\nStep-Index: 6\n", s.digest)));
    }

    #[test]
    fn forged_trailers_in_message_and_intent_do_not_count() {
        let s = step(
            r#"{"id":"real","files":{"a":"x"},"message":"x\n\nStep-Id: forged\n---\n","intent":"\n\nStep-Id: forged\nStep-Run: r\n---\n  cont"}"#,
        );
        let m = message(&s, "run", 1, "unused", Some("journal"));
        let r = parse(&m).unwrap();
        assert_eq!(r.source.as_deref(), Some("journal"));
        assert_eq!(r.id, "real");
        assert_eq!(
            m.lines().next().unwrap(),
            "step real: x Step-Id: forged ---"
        );
    }

    #[test]
    fn commits_without_trailers_are_not_receipts() {
        assert_eq!(
            parse("fix typo\n\nplain body\n"),
            Err(ParseError::NotAReceipt)
        );
        assert!(matches!(
            parse("x\n\nStep-Id: a\nStep-Id: b\nStep-Run: r\nStep-Decision: d\n"),
            Err(ParseError::Malformed(_))
        ));
    }

    #[test]
    fn the_index_is_optional_but_never_malformed() {
        let base = "x\n\nStep-Id: a\nStep-Run: r\nStep-Decision: d\n";
        assert_eq!(parse(base).unwrap().index, None);
        assert_eq!(
            parse(&format!("{base}Step-Index: 12\n")).unwrap().index,
            Some(12)
        );
        for bad in [
            "0",
            "-1",
            "+3",
            "07",
            "1.5",
            "",
            "x",
            "99999999999999999999999",
        ] {
            assert!(
                matches!(
                    parse(&format!("{base}Step-Index: {bad}\n")),
                    Err(ParseError::Malformed(_))
                ),
                "{bad:?}"
            );
        }
        assert!(matches!(
            parse(&format!("{base}Step-Index: 1\nStep-Index: 2\n")),
            Err(ParseError::Malformed(_))
        ));
    }

    #[test]
    fn effects_ride_above_the_trailers_and_read_back() {
        let s = step(
            r#"{"id":"s1","files":{"a":"x"},"intent":"\n\neffect 1: {\"command\":[\"rm\"]}","effects":[{"http":{"method":"POST","url":"http://h/x","body":{"k":"v\n\nStep-Id: forged"}}},{"command":["true"]}]}"#,
        );
        let m = message(&s, "r", 1, "unused", None);
        let r = parse(&m).unwrap();
        assert_eq!((r.id.as_str(), r.effects), ("s1", 2));
        let back = effects(&m, r.effects).unwrap();
        assert_eq!(back, s.effects);
        assert!(m.ends_with("Step-Index: 1\nStep-Effects: 2\n"), "{m}");
        // A message that claims effects it does not hold, or holds other lines.
        assert!(effects(&m.replace("effect 2: ", "effect 3: "), 2).is_err());
        assert!(effects(&m, 3).is_err());
        assert!(matches!(
            parse(&m.replace("Step-Effects: 2", "Step-Effects: two")),
            Err(ParseError::Malformed(_))
        ));
    }

    #[test]
    fn long_summaries_are_cut() {
        let long = "w ".repeat(200);
        assert!(one_line(&long).chars().count() <= SUMMARY_MAX);
    }
}
