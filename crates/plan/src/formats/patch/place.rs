//! Place hunks on file contents and produce the new contents.
//!
//! A hunk applies where its context and removed lines match the file
//! exactly, byte for byte (CR and a missing final newline included). It is
//! tried at its stated line first, then outward from there, as `git apply`
//! does; two matches at the same distance are ambiguous and an error, never a
//! guess.

use super::Hunk;
use crate::formats::EditError;

/// Split contents into lines, each keeping its `\n` (the last may lack one).
pub fn split_lines(data: &[u8]) -> Vec<&[u8]> {
    data.split_inclusive(|b| *b == b'\n').collect()
}

/// Apply `hunks` in order to `old`. The error names the failing hunk (its
/// 1-based number and header) and why.
pub fn apply_hunks(old: &[u8], hunks: &[Hunk]) -> Result<Vec<u8>, EditError> {
    apply_str(old, hunks).map_err(EditError::DoesNotApply)
}

fn apply_str(old: &[u8], hunks: &[Hunk]) -> Result<Vec<u8>, String> {
    let lines = split_lines(old);
    let mut out = Out::default();
    let mut cursor = 0usize;
    let mut offset: isize = 0;
    for (k, hunk) in hunks.iter().enumerate() {
        let name = || format!("hunk #{} ({})", k + 1, hunk.header());
        let pre = hunk.preimage();
        let stated = if hunk.old_len == 0 {
            hunk.old_start
        } else {
            hunk.old_start.saturating_sub(1)
        };
        let expected = (stated as isize + offset).max(cursor as isize) as usize;
        let pos = if hunk.numbered {
            find(&lines, &pre, cursor, expected)
        } else {
            find_unique(&lines, &pre, cursor)
        }
        .map_err(|why| format!("{} {why}", name()))?;
        for l in lines[cursor..pos].iter().chain(hunk.postimage().iter()) {
            out.push(l).map_err(|why| format!("{} {why}", name()))?;
        }
        cursor = pos + pre.len();
        if hunk.numbered {
            offset = pos as isize - stated as isize;
        }
    }
    for l in &lines[cursor..] {
        out.push(l).map_err(|why| format!("the last hunk {why}"))?;
    }
    Ok(out.bytes)
}

/// The new contents, refusing to glue a line that has no newline to the next.
#[derive(Default)]
struct Out {
    bytes: Vec<u8>,
}

impl Out {
    fn push(&mut self, line: &[u8]) -> Result<(), String> {
        if !self.bytes.is_empty() && self.bytes.last() != Some(&b'\n') {
            return Err(
                "marks a line `\\ No newline at end of file` but more lines follow it".into(),
            );
        }
        self.bytes.extend_from_slice(line);
        Ok(())
    }
}

/// Where an unnumbered hunk goes: the one place at or after `min` where its
/// context and removed lines match.
fn find_unique(lines: &[&[u8]], pre: &[&[u8]], min: usize) -> Result<usize, String> {
    if pre.is_empty() {
        return Err(
            "has no context or removed lines and no line numbers: nothing says where it goes"
                .into(),
        );
    }
    let hits: Vec<usize> = if lines.len() < pre.len() {
        Vec::new()
    } else {
        (min..=lines.len() - pre.len())
            .filter(|&p| lines[p..p + pre.len()] == *pre)
            .collect()
    };
    match hits.as_slice() {
        [p] => Ok(*p),
        [] => Err(format!(
            "does not apply: its context and removed lines (starting {:?}) are not in the file{}{}",
            String::from_utf8_lossy(pre[0]).trim_end(),
            if min > 0 {
                format!(" after line {min}")
            } else {
                String::new()
            },
            closest(lines, pre)
        )),
        [a, b, ..] => Err(format!(
            "is ambiguous: it has no line numbers and its context matches at line {} and at line {}{}",
            a + 1,
            b + 1,
            if hits.len() > 2 {
                format!(" (and {} more)", hits.len() - 2)
            } else {
                String::new()
            }
        )),
    }
}

/// Find where `pre` matches `lines`, at or after `min`, nearest to `expected`.
fn find(lines: &[&[u8]], pre: &[&[u8]], min: usize, expected: usize) -> Result<usize, String> {
    if lines.len() < min + pre.len() {
        return Err(format!(
            "does not apply: it needs {} line(s) at line {}, the file has {} line(s) left there",
            pre.len(),
            expected + 1,
            lines.len().saturating_sub(min)
        ));
    }
    let max = lines.len() - pre.len();
    let at = |p: usize| lines[p..p + pre.len()] == *pre;
    if pre.is_empty() {
        // A pure insertion has no context to search by: it goes exactly where
        // it says.
        return if expected <= lines.len() {
            Ok(expected)
        } else {
            Err(format!(
                "does not apply: it inserts after line {expected}, the file has {} line(s)",
                lines.len()
            ))
        };
    }
    let expected = expected.clamp(min, max);
    for d in 0..=(max - min) {
        let up = expected.checked_sub(d).filter(|p| *p >= min && at(*p));
        let down = Some(expected + d).filter(|p| d > 0 && *p <= max && at(*p));
        match (up, down) {
            (Some(a), Some(b)) => {
                return Err(format!(
                    "is ambiguous: its context matches at line {} and at line {}, both {d} line(s) from line {}",
                    a + 1,
                    b + 1,
                    expected + 1
                ))
            }
            (Some(p), None) | (None, Some(p)) => return Ok(p),
            (None, None) => {}
        }
        if expected.saturating_sub(d) <= min && expected + d >= max {
            break;
        }
    }
    let first = pre[0];
    Err(format!(
        "does not apply: its context and removed lines (starting {:?}) are not in the file{}",
        String::from_utf8_lossy(first).trim_end(),
        closest(lines, pre)
    ))
}

/// `; closest match: line N, …` (see [`crate::formats::closest_match`]).
fn closest(lines: &[&[u8]], pre: &[&[u8]]) -> String {
    crate::formats::closest_match(lines, pre)
        .map(|m| format!("; closest match: {m}"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    fn apply(old: &str, patch: &str) -> Result<String, String> {
        let files = parse(patch).unwrap();
        apply_hunks(old.as_bytes(), &files[0].hunks)
            .map(|v| String::from_utf8(v).unwrap())
            .map_err(|e| {
                assert!(matches!(e, EditError::DoesNotApply(_)), "{e:?}");
                e.to_string()
            })
    }

    #[test]
    fn applies_at_stated_line_and_with_offset() {
        let p = "--- a/x\n+++ b/x\n@@ -2,2 +2,2 @@\n b\n-c\n+C\n";
        assert_eq!(apply("a\nb\nc\nd\n", p).unwrap(), "a\nb\nC\nd\n");
        // Two lines were added at the top since the diff was made.
        assert_eq!(
            apply("0\n0\na\nb\nc\nd\n", p).unwrap(),
            "0\n0\na\nb\nC\nd\n"
        );
    }

    #[test]
    fn no_newline_at_end() {
        let p = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n";
        assert_eq!(apply("a", p).unwrap(), "b\n");
        assert!(apply("a\n", p).is_err());
    }

    #[test]
    fn ambiguous_and_missing() {
        let p = "--- a/x\n+++ b/x\n@@ -3 +3 @@\n-x\n+y\n";
        let e = apply("x\nq\nq\nq\nx\n", p).unwrap_err();
        assert!(
            e.contains("ambiguous") && e.contains("line 1") && e.contains("line 5"),
            "{e}"
        );
        let e = apply("a\n", p).unwrap_err();
        assert!(e.contains("hunk #1") && e.contains("does not apply"), "{e}");
    }

    #[test]
    fn second_application_fails() {
        let p = "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n";
        let once = apply("a\nb\n", p).unwrap();
        assert!(apply(&once, p).is_err());
    }

    #[test]
    fn pure_insertion_goes_where_stated() {
        let p = "--- a/x\n+++ b/x\n@@ -1,0 +2 @@\n+new\n";
        assert_eq!(apply("a\nb\n", p).unwrap(), "a\nnew\nb\n");
        let p = "--- /dev/null\n+++ b/x\n@@ -0,0 +1,2 @@\n+a\n+b\n";
        assert_eq!(apply("", p).unwrap(), "a\nb\n");
    }

    #[test]
    fn hunks_without_line_numbers_are_placed_by_context() {
        for header in ["@@", "@@ @@", "@@ ... @@", "@@ def f():"] {
            let p = format!("--- a/x\n+++ b/x\n{header}\n b\n-c\n+C\n{header}\n e\n+E\n");
            assert_eq!(
                apply("a\nb\nc\nd\ne\n", &p).unwrap(),
                "a\nb\nC\nd\ne\nE\n",
                "{header}"
            );
        }
        // Twice in the file: ambiguous, both places named.
        let p = "--- a/x\n+++ b/x\n@@ @@\n-x\n+y\n";
        let e = apply("x\nq\nx\n", p).unwrap_err();
        assert!(
            e.contains("ambiguous") && e.contains("line 1") && e.contains("line 3"),
            "{e}"
        );
        let e = apply("q\n", p).unwrap_err();
        assert!(e.contains("does not apply") && e.contains("\"x\""), "{e}");
        // Only additions and no numbers: nowhere to put them.
        let p = "--- a/x\n+++ b/x\n@@ @@\n+y\n";
        assert!(apply("q\n", p).unwrap_err().contains("nothing says where"));
        // A later unnumbered hunk is looked for after the previous one.
        let p = "--- a/x\n+++ b/x\n@@ @@\n-x\n+1\n@@ @@\n-x\n+2\n";
        assert!(apply("x\nx\n", p).unwrap_err().contains("ambiguous"));
        let p = "--- a/x\n+++ b/x\n@@ @@\n-x\n+1\n q\n@@ @@\n-x\n+2\n";
        assert_eq!(apply("x\nq\nx\n", p).unwrap(), "1\nq\n2\n");
    }
}
