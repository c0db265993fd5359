//! Hunk identity and the duplicated-hunk count (SPEC "Duplicated hunks").
//!
//! Owns what makes two changes "the same change": path plus removed and added
//! lines, ignoring line numbers, context and whitespace, computed from the
//! old and new contents of each changed path (so every edit format, and the
//! history scan, see the same hunks). Invariant: a step is refused when one of
//! its hunks repeats a change an earlier step made that is still in effect
//! (its count positive), and counts only change when a step is accepted.

use std::collections::HashMap;

use sha2::{Digest, Sha256};
use similar::algorithms::{Capture, Replace};
use similar::DiffOp;

/// The lines of `old` and `new` (split at LF only, as git does) and the
/// Myers diff ops between them.
///
/// Not `similar::TextDiff`: its always-on compaction pass (similar 2.7.0)
/// can return ops whose indices skip or repeat lines — our fuzzer found
/// `a b c x` + 7 blank lines → 10 blank lines + `@` giving an Insert at old
/// index 7 instead of 11 — so the hunks would name the wrong lines. The raw
/// Myers ops (with adjacent delete + insert merged into replace) are exact.
pub fn diff_lines<'a>(old: &'a [u8], new: &'a [u8]) -> (Vec<&'a [u8]>, Vec<&'a [u8]>, Vec<DiffOp>) {
    let a: Vec<&[u8]> = old.split_inclusive(|b| *b == b'\n').collect();
    let b: Vec<&[u8]> = new.split_inclusive(|b| *b == b'\n').collect();
    let mut hook = Replace::new(Capture::new());
    // Capture and Replace never fail.
    let _ = similar::algorithms::myers::diff(&mut hook, &a, 0..a.len(), &b, 0..b.len());
    let ops = hook.into_inner().into_ops();
    (a, b, ops)
}

/// The identity of one hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HunkId {
    pub key: [u8; 32],
    pub inverse: [u8; 32],
    /// Human description: `path (-2 +1): +first added line`.
    pub describe: String,
}

fn normalise(line: &[u8]) -> Vec<u8> {
    match std::str::from_utf8(line) {
        Ok(s) => s
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect::<String>()
            .into_bytes(),
        Err(_) => line
            .iter()
            .copied()
            .filter(|b| !b.is_ascii_whitespace())
            .collect(),
    }
}

fn key(path: &str, removed: &[Vec<u8>], added: &[Vec<u8>]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(path.as_bytes());
    h.update([0]);
    for (sign, lines) in [(b'-', removed), (b'+', added)] {
        for l in lines {
            h.update([sign]);
            h.update((l.len() as u64).to_le_bytes());
            h.update(l);
        }
    }
    h.finalize().into()
}

/// The identities of the hunks that turn `old` into `new` at `path`, in file
/// order. Hunks that change only blank lines have none.
pub fn identities(path: &str, old: &[u8], new: &[u8]) -> Vec<HunkId> {
    let (old_lines, new_lines, ops) = diff_lines(old, new);
    let mut out = Vec::new();
    for group in similar::group_diff_ops(ops, 0) {
        let (mut removed, mut added) = (Vec::new(), Vec::new());
        let mut first_added: Option<&[u8]> = None;
        let mut first_removed: Option<&[u8]> = None;
        for op in &group {
            if let DiffOp::Equal { .. } = op {
                continue;
            }
            for i in op.old_range() {
                let n = normalise(old_lines[i]);
                if !n.is_empty() {
                    first_removed.get_or_insert(old_lines[i]);
                    removed.push(n);
                }
            }
            for i in op.new_range() {
                let n = normalise(new_lines[i]);
                if !n.is_empty() {
                    first_added.get_or_insert(new_lines[i]);
                    added.push(n);
                }
            }
        }
        if removed.is_empty() && added.is_empty() {
            continue;
        }
        let sample = match (first_added, first_removed) {
            (Some(a), _) => format!("+{}", String::from_utf8_lossy(a).trim_end()),
            (None, Some(r)) => format!("-{}", String::from_utf8_lossy(r).trim_end()),
            (None, None) => String::new(),
        };
        out.push(HunkId {
            key: key(path, &removed, &added),
            inverse: key(path, &added, &removed),
            describe: format!("{path} (-{} +{}): {sample}", removed.len(), added.len()),
        });
    }
    out
}

/// A hunk repeated from an earlier step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    pub hunk: String,
    pub earlier_step: String,
}

#[derive(Debug, Clone, Default)]
struct Count {
    n: u32,
    /// The step that last made the count positive.
    maker: String,
}

/// The run's count per hunk identity.
#[derive(Debug, Default, Clone)]
pub struct HunkCounts {
    counts: HashMap<[u8; 32], Count>,
}

impl HunkCounts {
    /// Every positive count as (identity, count, maker), sorted by identity.
    pub fn to_raw(&self) -> Vec<([u8; 32], u32, String)> {
        let mut v: Vec<_> = self
            .counts
            .iter()
            .map(|(k, c)| (*k, c.n, c.maker.clone()))
            .collect();
        v.sort_unstable_by_key(|e| e.0);
        v
    }

    /// The inverse of [`HunkCounts::to_raw`].
    pub fn from_raw(raw: Vec<([u8; 32], u32, String)>) -> HunkCounts {
        HunkCounts {
            counts: raw
                .into_iter()
                .filter(|(_, n, _)| *n > 0)
                .map(|(k, n, maker)| (k, Count { n, maker }))
                .collect(),
        }
    }

    /// Check `step`'s hunks against the counts. If none repeats an earlier
    /// step's change, or `allow` is set, record them and return the
    /// duplicates found (empty unless `allow`); otherwise change nothing and
    /// return the first duplicate as the error.
    pub fn admit(
        &mut self,
        step: &str,
        hunks: &[HunkId],
        allow: bool,
    ) -> Result<Vec<Duplicate>, Duplicate> {
        let mut touched: HashMap<[u8; 32], Count> = HashMap::new();
        let mut dups = Vec::new();
        for h in hunks {
            let get = |k: &[u8; 32], t: &HashMap<[u8; 32], Count>| -> Count {
                t.get(k)
                    .or_else(|| self.counts.get(k))
                    .cloned()
                    .unwrap_or_default()
            };
            let own = get(&h.key, &touched);
            if own.n > 0 && own.maker != step {
                let d = Duplicate {
                    hunk: h.describe.clone(),
                    earlier_step: own.maker.clone(),
                };
                if !allow {
                    return Err(d);
                }
                dups.push(d);
            }
            let mut inv = get(&h.inverse, &touched);
            if inv.n > 0 && h.inverse != h.key {
                inv.n -= 1;
                touched.insert(h.inverse, inv);
            } else {
                let mut own = own;
                own.n += 1;
                own.maker = step.to_string();
                touched.insert(h.key, own);
            }
        }
        for (k, c) in touched {
            if c.n == 0 {
                self.counts.remove(&k);
            } else {
                self.counts.insert(k, c);
            }
        }
        Ok(dups)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(old: &str, new: &str) -> Vec<HunkId> {
        identities("f", old.as_bytes(), new.as_bytes())
    }

    #[test]
    fn identity_ignores_position_context_and_whitespace() {
        let a = ids("a\nb\n", "a\nb\nline-1\n");
        let b = ids("x\ny\nz\n", "line-1\nx\ny\nz\n");
        let c = ids("q\n", "q\n  line -1\t\n");
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].key, b[0].key);
        assert_eq!(a[0].key, c[0].key);
        assert_ne!(a[0].key, a[0].inverse);
        // Different path, different identity.
        assert_ne!(identities("g", b"", b"line-1\n")[0].key, a[0].key);
    }

    /// Regression: similar's compaction misplaced this insert; the raw ops
    /// must cover every line exactly once, in order.
    #[test]
    fn diff_ops_cover_every_line_in_order() {
        let old = "a\nb\nc\n\u{fffd}\n\n\n\n\n\n\n\n";
        let new = "\n\n\n\n\n\n\n\n\n\n@";
        let (a, b, ops) = diff_lines(old.as_bytes(), new.as_bytes());
        let (mut i, mut j) = (0, 0);
        for op in &ops {
            assert_eq!(op.old_range().start, i, "{ops:?}");
            assert_eq!(op.new_range().start, j, "{ops:?}");
            i = op.old_range().end;
            j = op.new_range().end;
        }
        assert_eq!((i, j), (a.len(), b.len()));
    }

    #[test]
    fn blank_only_hunks_have_no_identity() {
        assert!(ids("a\n", "a\n\n  \n").is_empty());
    }

    #[test]
    fn replayed_append_is_a_duplicate() {
        let mut c = HunkCounts::default();
        let first = ids("", "line-1\n");
        assert_eq!(c.admit("s1", &first, false), Ok(vec![]));
        let again = ids("line-1\n", "line-1\nline-1\n");
        let d = c.admit("s1-replayed", &again, false).unwrap_err();
        assert_eq!(d.earlier_step, "s1");
        // The refusal changed nothing: a revert is still admitted once.
        let revert = ids("line-1\n", "");
        assert_eq!(c.admit("s2", &revert, false), Ok(vec![]));
        // ... and after the revert, adding the line again is new, not a duplicate.
        assert_eq!(c.admit("s3", &first, false), Ok(vec![]));
    }

    #[test]
    fn equal_hunks_inside_one_step_are_not_duplicates() {
        let mut c = HunkCounts::default();
        let h = ids("a\nk\na\nk\n", "x\nk\nx\nk\n");
        assert_eq!(h[0].key, h[1].key);
        assert_eq!(c.admit("s1", &h, false), Ok(vec![]));
    }

    #[test]
    fn allow_records_and_reports() {
        let mut c = HunkCounts::default();
        let h = ids("", "z\n");
        c.admit("s1", &h, false).unwrap();
        let d = c.admit("s2", &h, true).unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].earlier_step, "s1");
    }
}
