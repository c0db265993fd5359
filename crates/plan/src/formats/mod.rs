//! The edit formats agents emit besides unified diffs: `edits` (text-editor
//! operations), `apply_patch` (`*** Begin Patch` … `*** End Patch`) and
//! `search_replace` (SEARCH/REPLACE blocks).
//!
//! Owns parsing each format (at plan-validation time, so a malformed step
//! fails before anything is applied) and applying it to files through
//! [`Files`]. Invariant: applying is deterministic and exact — text is
//! matched byte for byte, a match must be unique, and every failure (no
//! match, several matches, a missing or already existing file, a malformed
//! block) is an error naming the file and the text that did not match; it
//! is never a guess. Paths obey the SPEC's path rules; symlinks are never
//! edited as text and never written through (the [`Files`] implementation
//! for trees enforces the latter).

pub mod apply_patch;
pub mod edits;
pub mod patch;
pub mod search_replace;

use std::collections::BTreeMap;

pub use crate::modes::MODE_FILE;
use crate::modes::MODE_LINK;

/// Why an edit failed, in any format (unified diffs among them). The text
/// names the file and the text that did not match.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// The format's text or operations are malformed: found when the plan
    /// is validated, before anything is applied.
    #[error("{0}")]
    Malformed(String),
    /// The edit does not fit the files it meets: no match, several
    /// matches, a missing or already existing file, a symlink.
    #[error("{0}")]
    DoesNotApply(String),
}

impl EditError {
    /// The same error with `what` (the format's name) in front of its text.
    pub fn in_format(self, what: &str) -> EditError {
        match self {
            EditError::Malformed(m) => EditError::Malformed(format!("{what}: {m}")),
            EditError::DoesNotApply(m) => EditError::DoesNotApply(format!("{what}: {m}")),
        }
    }
}

/// The files an edit reads or writes refused it: a directory where a file
/// is expected, a path through a symlink.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FileError(pub String);

impl From<FileError> for String {
    fn from(e: FileError) -> String {
        e.0
    }
}

/// File access for an edit format: the tree being built, or memory.
pub trait Files {
    /// The content and mode of the file at `path`; None when there is none;
    /// an error when something else is there (a directory, a path through
    /// a symlink).
    fn get(&mut self, path: &str) -> Result<Option<(Vec<u8>, u32)>, FileError>;
    fn put(&mut self, path: &str, content: Vec<u8>, mode: u32) -> Result<(), FileError>;
    fn remove(&mut self, path: &str) -> Result<(), FileError>;
}

/// Files in memory (tests, and anything that wants to preview a step).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemFiles(pub BTreeMap<String, (Vec<u8>, u32)>);

impl Files for MemFiles {
    fn get(&mut self, path: &str) -> Result<Option<(Vec<u8>, u32)>, FileError> {
        Ok(self.0.get(path).cloned())
    }
    fn put(&mut self, path: &str, content: Vec<u8>, mode: u32) -> Result<(), FileError> {
        self.0.insert(path.to_string(), (content, mode));
        Ok(())
    }
    fn remove(&mut self, path: &str) -> Result<(), FileError> {
        self.0.remove(path);
        Ok(())
    }
}

/// The text of an existing regular file, for editing.
fn existing_text(files: &mut dyn Files, path: &str, what: &str) -> Result<(Vec<u8>, u32), String> {
    match files.get(path)? {
        None => Err(format!("{what}: {path} does not exist")),
        Some((_, mode)) if mode == MODE_LINK => Err(format!(
            "{what}: {path} is a symlink; edit formats change regular files only"
        )),
        Some(found) => Ok(found),
    }
}

/// Create a file that must not exist yet.
fn create(files: &mut dyn Files, path: &str, content: Vec<u8>, what: &str) -> Result<(), String> {
    if files.get(path)?.is_some() {
        return Err(format!("{what}: {path} already exists"));
    }
    Ok(files.put(path, content, MODE_FILE)?)
}

/// Split into lines that keep their `\n` (the last may lack one).
fn lines(data: &[u8]) -> Vec<&[u8]> {
    data.split_inclusive(|b| *b == b'\n').collect()
}

/// Text for an error message: one line, at most 80 characters, quoted.
fn quote(text: &[u8]) -> String {
    let s = String::from_utf8_lossy(text);
    let mut one: String = s
        .chars()
        .map(|c| if c == '\n' { '⏎' } else { c })
        .take(80)
        .collect();
    if s.chars().count() > 80 {
        one.push('…');
    }
    format!("{one:?}")
}

/// Where `needle` (lines) comes closest to matching `hay` (lines), for an
/// error message when it is not there: `line N, where it has "…" for "…"`
/// (1-based, the first line that differs). The window with the most lines
/// equal up to whitespace wins, then the one whose first differing line is
/// most alike; None for an empty needle or hay, or when no line of the best
/// window is even close.
pub fn closest_match(hay: &[&[u8]], needle: &[&[u8]]) -> Option<String> {
    // Bounded work: no hint rather than a slow error.
    if hay.is_empty() || needle.is_empty() || hay.len().saturating_mul(needle.len()) > 20_000_000 {
        return None;
    }
    let squash = |l: &[u8]| -> Vec<u8> {
        l.iter()
            .copied()
            .filter(|b| !b.is_ascii_whitespace())
            .collect()
    };
    let n = needle.len().min(hay.len());
    let want: Vec<Vec<u8>> = needle.iter().map(|l| squash(l)).collect();
    let have: Vec<Vec<u8>> = hay.iter().map(|l| squash(l)).collect();
    // Character similarity of two lines, 0..=1 (cheap enough for the
    // windows that tie on equal lines).
    // (case is compared last: `fn B()` is closer to `fn b()` than to `fn a()`).
    let alike = |a: &[u8], b: &[u8]| -> f32 {
        // The start of a long line (minified code, CSV) says enough.
        let (a, b) = (&a[..a.len().min(160)], &b[..b.len().min(160)]);
        let (a, b) = (String::from_utf8_lossy(a), String::from_utf8_lossy(b));
        let chars = |a: &str, b: &str| {
            similar::TextDiff::configure()
                .timeout(std::time::Duration::from_millis(5))
                .diff_chars(a, b)
                .ratio()
        };
        0.9 * chars(&a.to_lowercase(), &b.to_lowercase()) + 0.1 * chars(&a, &b)
    };
    let mut best: Option<(usize, f32, usize)> = None; // (equal lines, likeness, position)
    let budget = 400usize;
    let mut scored = 0;
    for p in 0..=hay.len() - n {
        let equal = (0..n).filter(|&i| want[i] == have[p + i]).count();
        if best.is_some_and(|b| equal < b.0) {
            continue;
        }
        let first_diff = (0..n).find(|&i| want[i] != have[p + i]);
        let like = match first_diff {
            Some(i) if scored < budget => {
                scored += 1;
                alike(&want[i], &have[p + i])
            }
            Some(_) => 0.0,
            None => 1.0,
        };
        if best.is_none_or(|b| equal > b.0 || (equal == b.0 && like > b.1)) {
            best = Some((equal, like, p));
        }
    }
    let (equal, like, p) = best?;
    if equal == 0 && like < 0.5 {
        return None;
    }
    let Some(i) = (0..n).find(|&i| body(needle[i]) != body(hay[p + i])) else {
        // Equal line for line: what differs is a line ending (the file's
        // last line has no newline, or the text has one more).
        return Some(format!(
            "line {}, where the text is the same but for a line ending (a missing final newline?)",
            p + 1
        ));
    };
    Some(format!(
        "line {}, where it has {} for {}",
        p + i + 1,
        quote(body(hay[p + i])),
        quote(body(needle[i]))
    ))
}

/// A line without its `\n` (a `\r` stays: CRLF files match only CRLF text).
fn body(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\n").unwrap_or(line)
}

/// Every position where `needle` occurs in `hay` as whole lines, at or after
/// line `from`, comparing lines without their `\n` (so a file's last line
/// matches whether or not it ends with one). An empty needle matches
/// nowhere.
fn line_matches(hay: &[&[u8]], needle: &[&[u8]], from: usize) -> Vec<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return Vec::new();
    }
    (from..=hay.len() - needle.len())
        .filter(|&p| {
            hay[p..p + needle.len()]
                .iter()
                .zip(needle)
                .all(|(a, b)| body(a) == body(b))
        })
        .collect()
}

/// Every byte offset where `needle` occurs in `hay`.
fn byte_matches(hay: &[u8], needle: &[u8]) -> Vec<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return Vec::new();
    }
    hay.windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect()
}

/// The 1-based line number of byte offset `at`.
fn line_of(hay: &[u8], at: usize) -> usize {
    hay[..at].iter().filter(|b| **b == b'\n').count() + 1
}

/// "lines 3, 9 and 12" for error messages.
fn list_lines(ns: &[usize]) -> String {
    let s: Vec<String> = ns.iter().map(|n| n.to_string()).collect();
    match s.len() {
        0 => String::new(),
        1 => format!("line {}", s[0]),
        _ => format!(
            "lines {} and {}",
            s[..s.len() - 1].join(", "),
            s[s.len() - 1]
        ),
    }
}

/// A path from inside a format's text, checked against the path rules.
fn checked_path(p: &str, what: &str) -> Result<String, String> {
    let p = crate::path::normalise(p);
    crate::path::validate(p).map_err(|m| format!("{what}: {m}"))?;
    Ok(p.to_string())
}

#[cfg(test)]
mod roundtrip {
    //! Generate an edit from text A to text B in each format, apply it to A,
    //! and get B — for random texts from a small alphabet, so repeated lines
    //! (and so ambiguity, which the generators must resolve with context)
    //! are common. The texts have LF or CRLF line ends, a final newline or
    //! none (A and B alike: only `edits` and unified diffs can change that),
    //! empty lines and non-ASCII lines.
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// One text: lines that keep their line end; without a final newline
    /// the last line has none (and is not empty, or there would be one).
    fn lines(eol: &'static str, final_newline: bool) -> impl Strategy<Value = Vec<String>> {
        prop::collection::vec(
            prop::sample::select(vec!["a", "b", "c", "é", "日本", ""]),
            1..14,
        )
        .prop_map(move |v| {
            let n = v.len();
            v.into_iter()
                .enumerate()
                .map(|(i, l)| match (i + 1 == n, final_newline) {
                    (true, false) if l.is_empty() => "z".to_string(),
                    (true, false) => l.to_string(),
                    _ => format!("{l}{eol}"),
                })
                .collect()
        })
    }

    /// A and B, with the same line ends and final-newline rule.
    fn texts() -> impl Strategy<Value = (Vec<String>, Vec<String>)> {
        (prop::sample::select(vec!["\n", "\r\n"]), any::<bool>())
            .prop_flat_map(|(eol, nl)| (lines(eol, nl), lines(eol, nl)))
    }

    /// A line as a line-based format writes it: with its end, or, for a
    /// last line without one, with `\n` added (the formats keep a file
    /// that had no final newline without one).
    fn ended(l: &str) -> String {
        if l.ends_with('\n') {
            l.to_string()
        } else {
            format!("{l}\n")
        }
    }

    /// A line of a unified diff hunk, with git's marker for a missing
    /// final newline.
    fn diff_line(prefix: char, l: &str) -> String {
        if l.ends_with('\n') {
            format!("{prefix}{l}")
        } else {
            format!("{prefix}{l}\n\\ No newline at end of file\n")
        }
    }

    /// The changed region (common prefix and suffix removed), widened with
    /// context until `unique` says it occurs once in A: (lo, p, s, hi) with
    /// A[lo..hi] the old text and A[lo..p] / A[nA-s..hi] its context.
    fn region(
        a: &[String],
        b: &[String],
        unique: impl Fn(usize, usize) -> bool,
    ) -> (usize, usize, usize, usize) {
        let p = a.iter().zip(b).take_while(|(x, y)| x == y).count();
        let s = a[p..]
            .iter()
            .rev()
            .zip(b[p..].iter().rev())
            .take_while(|(x, y)| x == y)
            .count();
        let (mut lo, mut hi) = (p, a.len() - s);
        while lo == hi || !unique(lo, hi) {
            if lo > 0 && (hi == a.len() || (p - lo) <= (hi - (a.len() - s))) {
                lo -= 1;
            } else if hi < a.len() {
                hi += 1;
            } else {
                break;
            }
        }
        (lo, p, s, hi)
    }

    fn mem(a: &[String]) -> MemFiles {
        let mut f = MemFiles::default();
        f.put("f.txt", a.concat().into_bytes(), MODE_FILE).unwrap();
        f
    }

    fn lines_unique(a: &[String], lo: usize, hi: usize) -> bool {
        let hay: Vec<&[u8]> = a.iter().map(|l| l.as_bytes()).collect();
        line_matches(&hay, &hay[lo..hi], 0).len() == 1
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn every_format_round_trips((a, b) in texts()) {
            prop_assume!(a != b);
            let joined = a.concat();
            let nb = b.len();
            // edits: old_str must be unique as text.
            let (lo, p, s, hi) = region(&a, &b, |lo, hi| byte_matches(joined.as_bytes(), a[lo..hi].concat().as_bytes()).len() == 1);
            let new_mid = [&a[lo..p], &b[p..nb - s], &a[a.len() - s..hi]].concat().concat();
            let ops = json!([{"path": "f.txt", "old_str": a[lo..hi].concat(), "new_str": new_mid}]);
            let mut f = mem(&a);
            edits::apply(&mut f, &edits::parse(ops.as_array().unwrap()).unwrap()).unwrap();
            prop_assert_eq!(&f.0["f.txt"].0, &b.concat().into_bytes());

            // Line-based formats: the region must be unique as lines.
            // (A SEARCH of blank lines only appends, as in aider: the
            // region holds a line with text.)
            let (lo, p, s, hi) = region(&a, &b, |lo, hi| {
                lines_unique(&a, lo, hi) && a[lo..hi].iter().any(|l| !l.trim().is_empty())
            });
            let old = &a[lo..hi];
            let new: Vec<String> = [&a[lo..p], &b[p..nb - s], &a[a.len() - s..hi]].concat();

            let block = |ls: &[String]| ls.iter().map(|l| ended(l)).collect::<String>();
            let sr = format!("f.txt\n<<<<<<< SEARCH\n{}=======\n{}>>>>>>> REPLACE\n", block(old), block(&new));
            // (A file of blank lines only has no such region: a SEARCH of
            // its blank lines would append, as aider does.)
            // Nor does aider take CRLF files (it rewrites them LF), or keep
            // a SEARCH's or REPLACE's last blank line (it drops one).
            let blank_end = |ls: &[String]| ls.last().is_some_and(|l| l.trim().is_empty());
            let texty = a.iter().any(|l| !l.trim().is_empty())
                && !a.iter().chain(&b).any(|l| l.ends_with("\r\n"))
                && !blank_end(old)
                && !blank_end(&new);
            let mut f = mem(&a);
            if texty {
                search_replace::apply(&mut f, &search_replace::parse(&sr).unwrap()).unwrap();
            }
            // As aider writes it: a replaced file ends with a line end: the
            // REPLACE text's (a LF here) when its last line ends the file,
            // else the file's own.
            let mut want = b.concat();
            if !want.ends_with('\n') {
                want += if hi < a.len() && a[0].ends_with("\r\n") { "\r\n" } else { "\n" };
            }
            if texty {
                prop_assert_eq!(String::from_utf8_lossy(&f.0["f.txt"].0), want);
            }

            let mut chunk = String::new();
            let mut hunk = String::new();
            let parts: [(char, &[String]); 4] = [
                (' ', &a[lo..p]),
                ('-', &a[p..a.len() - s]),
                ('+', &b[p..nb - s]),
                (' ', &a[a.len() - s..hi]),
            ];
            for (prefix, ls) in parts {
                for l in ls {
                    chunk += &format!("{prefix}{}", ended(l));
                    hunk += &diff_line(prefix, l);
                }
            }
            // apply_patch reads its text as LF lines (a `\r` before a line
            // end is dropped, as Codex reads it) and finds CRLF lines in a
            // later pass; the file keeps its line ends, and, as Codex
            // writes it, ends with one.
            // Its region is unique as Codex compares lines (a CRLF line
            // also matches a last line without a line end).
            let trimmed: Vec<&str> = a.iter().map(|l| l.trim_end()).collect();
            let (lo, p, s, hi) = region(&a, &b, |lo, hi| {
                (0..=a.len() - (hi - lo))
                    .filter(|&q| trimmed[q..q + hi - lo] == trimmed[lo..hi])
                    .count()
                    == 1
            });
            let mut chunk = String::new();
            let parts: [(char, &[String]); 4] = [
                (' ', &a[lo..p]),
                ('-', &a[p..a.len() - s]),
                ('+', &b[p..nb - s]),
                (' ', &a[a.len() - s..hi]),
            ];
            for (prefix, ls) in parts {
                for l in ls {
                    chunk += &format!("{prefix}{}", ended(l));
                }
            }
            let ap = format!("*** Begin Patch\n*** Update File: f.txt\n@@\n{chunk}*** End Patch\n");
            // (CRLF files and files that end in a blank line are refused:
            // Codex's two line-ending modes write them differently.)
            let crlf = a.iter().chain(&b).any(|l| l.ends_with("\r\n"));
            if !crlf && !a.concat().ends_with("\n\n") {
                let mut f = mem(&a);
                apply_patch::apply(&mut f, &apply_patch::parse(&ap).unwrap()).unwrap();
                let mut want = b.concat();
                if !want.ends_with('\n') {
                    want += if crlf { "\r\n" } else { "\n" };
                }
                prop_assert_eq!(String::from_utf8_lossy(&f.0["f.txt"].0), want);
            }

            // A unified diff without line numbers, placed by context.
            let ud = format!("--- a/f.txt\n+++ b/f.txt\n@@ @@\n{hunk}");
            let files = crate::formats::patch::parse(&ud).unwrap();
            let out = crate::formats::patch::apply_hunks(joined.as_bytes(), &files[0].hunks).unwrap();
            prop_assert_eq!(out, b.concat().into_bytes());
        }
    }
}
