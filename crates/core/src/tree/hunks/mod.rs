//! Hunk identity, position, and the duplicated-hunk rule (SPEC "Duplicated
//! hunks").
//!
//! Owns what makes a hunk "the same change made again in the same place".
//! A hunk's identity is its path with its removed and added lines, ignoring
//! line numbers, context and whitespace, computed from the old and new
//! contents of each changed path (so every edit format, and the history
//! scan, see the same hunks); hunks that change only blank lines or only
//! whitespace have none. Each accepted hunk stays *live* at the lines it
//! left (a deletion: at the point between two lines), and those lines are
//! carried through every later step's diff. A live change ends when its
//! inverse is made over it, or when every line it left is gone.
//!
//! Invariant: a step is refused when one of its hunks has the identity of a
//! live change of an earlier step and lands next to it or over it (blank
//! lines between count as next to): the same change, made again, in the same
//! place. The same change elsewhere in the file is not a duplicate. The live
//! set only changes when a step is accepted ([`LiveHunks::record`]).

use std::collections::HashMap;

use sha2::{Digest, Sha256};
use similar::algorithms::{Capture, Replace};
use similar::DiffOp;

mod live;
pub use live::{Duplicate, Live, LiveHunks};

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
    let ops = line_ops(&a, &b);
    (a, b, ops)
}

/// The most work a Myers diff may take, in (lines) × (edits): past it, the
/// differing middle is one block. Deterministic (it depends on the contents
/// only, never on time), so every box finds the same hunks.
const DIFF_BUDGET: u64 = 50_000_000;

/// Lines added and removed from `old` to `new`, as `git diff --stat`
/// counts them (a file added or deleted whole is counted, not diffed).
pub fn line_counts(old: &[u8], new: &[u8]) -> (usize, usize) {
    let count = |t: &[u8]| t.split_inclusive(|b| *b == b'\n').count();
    if old.is_empty() || new.is_empty() {
        return (count(new), count(old));
    }
    let (_, _, ops) = diff_lines(old, new);
    let (mut add, mut rem) = (0, 0);
    for op in ops.iter().filter(|op| !matches!(op, DiffOp::Equal { .. })) {
        rem += op.old_range().len();
        add += op.new_range().len();
    }
    (add, rem)
}

/// Myers diff ops between two line sequences (adjacent delete + insert
/// merged into replace), bounded: when even a lower bound of the edits
/// (the lines one side has that the other lacks) times the lines exceeds
/// [`DIFF_BUDGET`] — a file rewritten from top to bottom — the middle
/// between the common start and end is one replaced block, found in linear
/// time instead of Myers's quadratic.
fn line_ops<T: Eq + std::hash::Hash>(a: &[T], b: &[T]) -> Vec<DiffOp> {
    let pre = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suf = a[pre..]
        .iter()
        .rev()
        .zip(b[pre..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (am, bm) = (&a[pre..a.len() - suf], &b[pre..b.len() - suf]);
    let mut count: HashMap<&T, i64> = HashMap::new();
    for x in am {
        *count.entry(x).or_default() += 1;
    }
    for y in bm {
        *count.entry(y).or_default() -= 1;
    }
    let edits: u64 = count.values().map(|c| c.unsigned_abs()).sum();
    if edits.saturating_mul((am.len() + bm.len()) as u64) <= DIFF_BUDGET {
        let mut hook = Replace::new(Capture::new());
        // Capture and Replace never fail.
        let _ = similar::algorithms::myers::diff(&mut hook, a, 0..a.len(), b, 0..b.len());
        return hook.into_inner().into_ops();
    }
    let mut ops = Vec::new();
    if pre > 0 {
        ops.push(DiffOp::Equal {
            old_index: 0,
            new_index: 0,
            len: pre,
        });
    }
    ops.push(match (am.len(), bm.len()) {
        (0, n) => DiffOp::Insert {
            old_index: pre,
            new_index: pre,
            new_len: n,
        },
        (n, 0) => DiffOp::Delete {
            old_index: pre,
            old_len: n,
            new_index: pre,
        },
        (o, n) => DiffOp::Replace {
            old_index: pre,
            old_len: o,
            new_index: pre,
            new_len: n,
        },
    });
    if suf > 0 {
        ops.push(DiffOp::Equal {
            old_index: a.len() - suf,
            new_index: b.len() - suf,
            len: suf,
        });
    }
    ops
}

/// A range of lines, 0-based, end exclusive; empty for a point between two
/// lines.
pub type Lines = (u32, u32);

/// One hunk with its identity and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HunkId {
    pub key: [u8; 32],
    pub inverse: [u8; 32],
    /// Human description: `path:line (-2 +1): +first added line`.
    pub describe: String,
    /// The lines it replaces in the old file.
    pub old: Lines,
    /// The lines it leaves in the new file: its added lines without the
    /// blank ones at either end (a point, for a deletion).
    pub new: Lines,
    /// Where it was made: the point before `new` in the new file.
    pub anchor: u32,
    /// `old` widened over the blank lines around it in the old file: a live
    /// change this range touches is "next to" the hunk.
    pub reach: Lines,
}

/// The changes to one path: its hunks with identities, and every changed
/// block (blank-only ones too), which carry live changes to their new lines.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileDiff {
    pub path: String,
    pub hunks: Vec<HunkId>,
    /// Old range → new range of each changed block, in file order.
    pub blocks: Vec<(Lines, Lines)>,
}

/// `line` without its whitespace, into `out` (cleared first): one buffer
/// for every line of a hunk, however large the file.
fn normalise_into(line: &[u8], out: &mut Vec<u8>) {
    out.clear();
    // ASCII (nearly every line of code): the same whitespace as
    // `char::is_whitespace`, without decoding (as `line_key`).
    if line.is_ascii() {
        out.extend(
            line.iter()
                .copied()
                .filter(|b| !matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')),
        );
        return;
    }
    match std::str::from_utf8(line) {
        Ok(s) => {
            for c in s.chars().filter(|c| !c.is_whitespace()) {
                let mut buf = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
        Err(_) => out.extend(line.iter().copied().filter(|b| !b.is_ascii_whitespace())),
    }
}

/// What a hunk's side is, its lines normalised one at a time.
struct Side<'a> {
    /// Lines that are not blank once normalised.
    count: usize,
    /// Every such line is punctuation only.
    bare: bool,
    first: Option<&'a [u8]>,
}

fn side<'a>(lines: &[&'a [u8]], buf: &mut Vec<u8>) -> Side<'a> {
    let mut s = Side {
        count: 0,
        bare: true,
        first: None,
    };
    for line in lines {
        normalise_into(line, buf);
        if !buf.is_empty() {
            s.first.get_or_insert(line);
            s.count += 1;
            s.bare &= !buf.iter().any(|b| b.is_ascii_alphanumeric() || *b >= 0x80);
        }
    }
    s
}

/// SHA-256 of the path and the normalised non-blank lines, removed (`-`)
/// then added (`+`), each with its length.
fn key(path: &str, removed: &[&[u8]], added: &[&[u8]], buf: &mut Vec<u8>) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(path.as_bytes());
    h.update([0]);
    for (sign, lines) in [(b'-', removed), (b'+', added)] {
        for l in lines {
            normalise_into(l, buf);
            if buf.is_empty() {
                continue;
            }
            h.update([sign]);
            h.update((buf.len() as u64).to_le_bytes());
            h.update(&buf[..]);
        }
    }
    h.finalize().into()
}

fn n(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

/// A line as the duplicated-hunk rule compares it: FNV-1a of its bytes
/// without whitespace (so indentation, CRLF and a missing final newline are
/// not changes), 0 for a blank line.
fn line_key(line: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut any = false;
    let mut eat = |b: u8| {
        any = true;
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    };
    // ASCII (nearly every line of code): bytes, without decoding; the same
    // whitespace as `char::is_whitespace`, so the key is the same either way.
    if line.is_ascii() {
        line.iter()
            .copied()
            .filter(|b| !matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'))
            .for_each(&mut eat);
        return if any { h | 1 } else { 0 };
    }
    match std::str::from_utf8(line) {
        Ok(s) => {
            for c in s.chars().filter(|c| !c.is_whitespace()) {
                let mut buf = [0; 4];
                c.encode_utf8(&mut buf).bytes().for_each(&mut eat);
            }
        }
        Err(_) => line
            .iter()
            .copied()
            .filter(|b| !b.is_ascii_whitespace())
            .for_each(&mut eat),
    }
    if any {
        h | 1
    } else {
        0
    }
}

/// Move every pure insertion and deletion as early as it can go (while the
/// line before it equals its last line), as git's diff does with sliders.
/// An insertion of `x y` after an `x` is then always `x y` before it, so a
/// block inserted again is the same hunk however the diff first aligned it.
/// A slide never joins two changes: the equal run before keeps a line,
/// unless it starts the file.
fn slide_up(ops: Vec<DiffOp>, a: &[u64], b: &[u64]) -> Vec<DiffOp> {
    // (old start, old len, new start, new len, equal)
    let mut v: Vec<(usize, usize, usize, usize, bool)> = ops
        .iter()
        .map(|op| {
            let (o, n) = (op.old_range(), op.new_range());
            (
                o.start,
                o.len(),
                n.start,
                n.len(),
                matches!(op, DiffOp::Equal { .. }),
            )
        })
        .collect();
    for i in 1..v.len() {
        let (prev, cur) = (v[i - 1], v[i]);
        if !prev.4 || cur.4 || (cur.1 > 0 && cur.3 > 0) {
            continue;
        }
        let first_op = i == 1;
        let mut k = 0;
        // Lines of the change, on its own side.
        let (side, start, len) = if cur.3 > 0 {
            (b, cur.2, cur.3)
        } else {
            (a, cur.0, cur.1)
        };
        while k < prev.1
            && (prev.1 - k > 1 || first_op)
            && side[start - k - 1] == side[start - k + len - 1]
        {
            k += 1;
        }
        if k == 0 {
            continue;
        }
        v[i - 1].1 -= k;
        v[i - 1].3 -= k;
        v[i].0 -= k;
        v[i].2 -= k;
        match v.get_mut(i + 1) {
            Some(next) if next.4 => {
                next.0 -= k;
                next.2 -= k;
                next.1 += k;
                next.3 += k;
            }
            _ => v.insert(i + 1, (v[i].0 + v[i].1, k, v[i].2 + v[i].3, k, true)),
        }
    }
    v.into_iter()
        .filter(|e| !(e.4 && e.1 == 0))
        .map(|(os, ol, ns, nl, eq)| match (eq, ol, nl) {
            (true, l, _) => DiffOp::Equal {
                old_index: os,
                new_index: ns,
                len: l,
            },
            (false, 0, n) => DiffOp::Insert {
                old_index: os,
                new_index: ns,
                new_len: n,
            },
            (false, o, 0) => DiffOp::Delete {
                old_index: os,
                old_len: o,
                new_index: ns,
            },
            (false, o, n) => DiffOp::Replace {
                old_index: os,
                old_len: o,
                new_index: ns,
                new_len: n,
            },
        })
        .collect()
}

/// The hunks that turn `old` into `new` at `path`, in file order, and the
/// changed blocks. Lines are compared as [`line_key`] does: a change of
/// whitespace only (a reindent, CRLF to LF, a final newline) is no block at
/// all, so the live changes it passes over stay live.
pub fn identities(path: &str, old: &[u8], new: &[u8]) -> FileDiff {
    // A file added or deleted whole (a 100 MB file among them) is one
    // block: its lines are walked, never collected.
    if old.is_empty() {
        return one_sided(path, new, true);
    }
    if new.is_empty() {
        return one_sided(path, old, false);
    }
    identities_diffed(path, old, new)
}

/// Lines added (`inserted`) or removed over an empty side, as
/// [`identities_diffed`] finds them, in constant memory.
fn one_sided(path: &str, text: &[u8], inserted: bool) -> FileDiff {
    let mut out = FileDiff {
        path: path.to_string(),
        ..FileDiff::default()
    };
    let lines = || text.split_inclusive(|b| *b == b'\n');
    let mut buf = Vec::new();
    let (mut total, mut count, mut bare) = (0usize, 0usize, true);
    let (mut first, mut last): (Option<(usize, &[u8])>, usize) = (None, 0);
    for (i, line) in lines().enumerate() {
        total += 1;
        normalise_into(line, &mut buf);
        if !buf.is_empty() {
            first.get_or_insert((i, line));
            last = i + 1;
            count += 1;
            bare &= !buf.iter().any(|b| b.is_ascii_alphanumeric() || *b >= 0x80);
        }
    }
    if total == 0 {
        return out;
    }
    let (old_r, new_r) = if inserted {
        ((0, 0), (0, total))
    } else {
        ((0, total), (0, 0))
    };
    out.blocks
        .push(((n(old_r.0), n(old_r.1)), (n(new_r.0), n(new_r.1))));
    if bare {
        return out;
    }
    // The side that has the lines hashes them as removed (`-`) or added
    // (`+`); the other side adds nothing. Both hashes in one pass.
    let (mut plus, mut minus) = (Sha256::new(), Sha256::new());
    for h in [&mut plus, &mut minus] {
        h.update(path.as_bytes());
        h.update([0]);
    }
    for l in lines() {
        normalise_into(l, &mut buf);
        if buf.is_empty() {
            continue;
        }
        let len = (buf.len() as u64).to_le_bytes();
        for (h, sign) in [(&mut plus, b'+'), (&mut minus, b'-')] {
            h.update([sign]);
            h.update(len);
            h.update(&buf[..]);
        }
    }
    let (plus, minus): ([u8; 32], [u8; 32]) = (plus.finalize().into(), minus.finalize().into());
    let (key_, inverse) = if inserted {
        (plus, minus)
    } else {
        (minus, plus)
    };
    let (first_i, first_line) = first.expect("a side that is not bare has a line");
    let left = if inserted { (first_i, last) } else { (0, 0) };
    let sample = format!(
        "{}{}",
        if inserted { '+' } else { '-' },
        String::from_utf8_lossy(first_line).trim_end()
    );
    let (removed, added) = if inserted { (0, count) } else { (count, 0) };
    out.hunks.push(HunkId {
        key: key_,
        inverse,
        describe: format!("{path}:{} (-{removed} +{added}): {sample}", new_r.0 + 1),
        old: (n(old_r.0), n(old_r.1)),
        new: (n(left.0), n(left.1)),
        anchor: n(left.0),
        reach: (n(old_r.0), n(old_r.1)),
    });
    out
}

/// [`identities`] by diffing the two versions' lines.
fn identities_diffed(path: &str, old: &[u8], new: &[u8]) -> FileDiff {
    let old_lines: Vec<&[u8]> = old.split_inclusive(|b| *b == b'\n').collect();
    let new_lines: Vec<&[u8]> = new.split_inclusive(|b| *b == b'\n').collect();
    let a: Vec<u64> = old_lines.iter().map(|l| line_key(l)).collect();
    let b: Vec<u64> = new_lines.iter().map(|l| line_key(l)).collect();
    let ops = slide_up(line_ops(&a, &b), &a, &b);
    let blank = |l: &[u8]| line_key(l) == 0;
    let mut out = FileDiff {
        path: path.to_string(),
        ..FileDiff::default()
    };
    let mut buf = Vec::new();
    for group in similar::group_diff_ops(ops, 0) {
        let changed: Vec<&DiffOp> = group
            .iter()
            .filter(|op| !matches!(op, DiffOp::Equal { .. }))
            .collect();
        let (Some(first), Some(last)) = (changed.first(), changed.last()) else {
            continue;
        };
        let old_r = (first.old_range().start, last.old_range().end);
        let new_r = (first.new_range().start, last.new_range().end);
        out.blocks
            .push(((n(old_r.0), n(old_r.1)), (n(new_r.0), n(new_r.1))));
        // The lines are normalised as they are read, never kept: a hunk
        // of a whole 100 MB file costs one line's buffer.
        let (old_side, new_side) = (&old_lines[old_r.0..old_r.1], &new_lines[new_r.0..new_r.1]);
        let removed = side(old_side, &mut buf);
        let added = side(new_side, &mut buf);
        // Blank lines only, or whitespace only: no identity. Nor punctuation
        // only (`}`, `});`, `*/`): such lines are everywhere, and the diff
        // pairs one with any other, so they name no change.
        if removed.bare && added.bare {
            continue;
        }
        let key_ = key(path, old_side, new_side, &mut buf);
        let inverse = key(path, new_side, old_side, &mut buf);
        // The same lines removed as added (up to whitespace) is no change:
        // the two hashes agree exactly then.
        if key_ == inverse {
            continue;
        }
        let mut reach = old_r;
        while reach.0 > 0 && blank(old_lines[reach.0 - 1]) {
            reach.0 -= 1;
        }
        while reach.1 < old_lines.len() && blank(old_lines[reach.1]) {
            reach.1 += 1;
        }
        // What the hunk leaves: its added lines from the first non-blank
        // one to the last (blank lines around them belong to no change, and
        // would let it grow over its neighbours); a deletion leaves a point.
        let mut left = new_r;
        while left.0 < left.1 && blank(new_lines[left.0]) {
            left.0 += 1;
        }
        while left.1 > left.0 && blank(new_lines[left.1 - 1]) {
            left.1 -= 1;
        }
        let sample = match (added.first, removed.first) {
            (Some(a), _) => format!("+{}", String::from_utf8_lossy(a).trim_end()),
            (None, Some(r)) => format!("-{}", String::from_utf8_lossy(r).trim_end()),
            (None, None) => String::new(),
        };
        out.hunks.push(HunkId {
            key: key_,
            inverse,
            describe: format!(
                "{path}:{} (-{} +{}): {sample}",
                new_r.0 + 1,
                removed.count,
                added.count
            ),
            old: (n(old_r.0), n(old_r.1)),
            new: (n(left.0), n(left.1)),
            anchor: n(left.0),
            reach: (n(reach.0), n(reach.1)),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A file added or deleted whole gets the identities a diff against
        /// the empty file gives.
        #[test]
        fn whole_file_identities_are_the_diffs(text in "([ \t]{0,2}(ab|}|\\{|x y|\u{e9})?[ \t]{0,2}(\r?\n)?){0,12}") {
            let t = text.as_bytes();
            prop_assert_eq!(one_sided("p", t, true), identities_diffed("p", b"", t));
            prop_assert_eq!(one_sided("p", t, false), identities_diffed("p", t, b""));
            let (_, _, ops) = diff_lines(b"", t);
            let added: usize = ops.iter().map(|o| o.new_range().len()).sum();
            prop_assert_eq!(line_counts(b"", t), (added, 0));
            prop_assert_eq!(line_counts(t, b""), (0, added));
        }
    }

    fn diff(old: &str, new: &str) -> Vec<FileDiff> {
        vec![identities("f", old.as_bytes(), new.as_bytes())]
    }

    fn ids(old: &str, new: &str) -> Vec<HunkId> {
        identities("f", old.as_bytes(), new.as_bytes()).hunks
    }

    /// Apply a sequence of file versions as steps; the first refused step's
    /// index and the step it repeats.
    fn run(versions: &[&str]) -> Option<(usize, String)> {
        let mut live = LiveHunks::default();
        for (i, w) in versions.windows(2).enumerate() {
            if let Err(d) = live.admit(&format!("s{}", i + 1), &diff(w[0], w[1]), false) {
                return Some((i + 1, d.earlier_step));
            }
        }
        None
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
        assert_ne!(identities("g", b"", b"line-1\n").hunks[0].key, a[0].key);
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

    /// A file rewritten from top to bottom: one block, in linear time, and
    /// the ops still cover every line in order.
    #[test]
    fn a_whole_rewrite_is_one_block_not_a_quadratic_diff() {
        let old: String = (0..40_000).map(|i| format!("line {i}\n")).collect();
        let new: String = (0..40_000).map(|i| format!("LINE {i}\n")).collect();
        let d = identities(
            "f",
            format!("head\n{old}tail\n").as_bytes(),
            format!("head\n{new}tail\n").as_bytes(),
        );
        assert_eq!(d.blocks, [((1, 40_001), (1, 40_001))]);
        assert_eq!(d.hunks.len(), 1);
        // A small change in a big file is still found exactly.
        let edited = old.replacen("line 20000\n", "line 20000!\n", 1);
        let d = identities("f", old.as_bytes(), edited.as_bytes());
        assert_eq!(d.blocks, [((20_000, 20_001), (20_000, 20_001))]);
        let (a, b, ops) = diff_lines(old.as_bytes(), new.as_bytes());
        assert_eq!(ops.len(), 1);
        assert_eq!(
            (ops[0].old_range(), ops[0].new_range()),
            (0..a.len(), 0..b.len())
        );
    }

    /// The ASCII fast path keys a line as the general one does.
    #[test]
    fn ascii_lines_are_keyed_as_decoded_ones() {
        for l in ["  fn a() {}\r\n", "\x0b\x0cx\ty", "", " \t\n", "a b"] {
            let slow = l.chars().filter(|c| !c.is_whitespace()).collect::<String>();
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in slow.bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
            let want = if slow.is_empty() { 0 } else { h | 1 };
            assert_eq!(line_key(l.as_bytes()), want, "{l:?}");
        }
    }

    #[test]
    fn blank_only_and_whitespace_only_hunks_have_no_identity() {
        assert!(ids("a\n", "a\n\n  \n").is_empty());
        assert!(ids("a\n  b\n", "a\n\tb\n").is_empty());
        // ... but their blocks still carry live changes.
        assert_eq!(diff("a\n", "\na\n")[0].blocks, [((0, 0), (0, 1))]);
    }

    #[test]
    fn the_same_change_in_the_same_place_is_a_duplicate() {
        // An append replayed after it.
        assert_eq!(run(&["a\n", "a\nx\n", "a\nx\nx\n"]), Some((2, "s1".into())));
        // An insert replayed before it.
        assert_eq!(
            run(&["a\nb\n", "a\nx\nb\n", "a\nx\nx\nb\n"]),
            Some((2, "s1".into()))
        );
        // With a blank line between the copies.
        assert_eq!(
            run(&["a\n", "a\nx\n", "a\nx\n\nx\n"]),
            Some((2, "s1".into()))
        );
        // After other lines moved it: still where it is now.
        assert_eq!(
            run(&[
                "a\nb\n",
                "a\nx\nb\n",
                "0\n1\na\nx\nb\n",
                "0\n1\na\nx\nx\nb\n"
            ]),
            Some((3, "s1".into()))
        );
        // A deletion made again at the same point.
        assert_eq!(
            run(&["p\nx\nx\nq\n", "p\nx\nq\n", "p\nq\n"]),
            Some((2, "s1".into()))
        );
        // A replacement made again next to it.
        assert_eq!(
            run(&["f(1)\nf(1)\n", "f(2)\nf(1)\n", "f(2)\nf(2)\n"]),
            Some((2, "s1".into()))
        );
    }

    #[test]
    fn the_same_change_elsewhere_is_not_a_duplicate() {
        let a = "#[inline]\nfn a() {}\n\nfn b() {}\n";
        assert_eq!(
            run(&[
                "fn a() {}\n\nfn b() {}\n",
                a,
                "#[inline]\nfn a() {}\n\n#[inline]\nfn b() {}\n"
            ]),
            None
        );
        assert_eq!(run(&["a\nb\nc\n", "x\na\nb\nc\n", "x\na\nb\nc\nx\n"]), None);
        // A line moved next door (rustfmt sorting `mod` lines) is not made
        // twice: the step that adds it takes the earlier copy out.
        let mut live = LiveHunks::default();
        live.admit("s1", &diff("\n", "b\n\n"), false).unwrap();
        let mut moved = diff("b\n\n", "\nb\n")[0].clone();
        let h = diff("\n", "\nb\n")[0].hunks[0].clone();
        moved.hunks = vec![HunkId { reach: (1, 2), ..h }];
        moved.blocks = vec![((0, 1), (0, 0)), ((2, 2), (1, 2))];
        assert!(live.duplicates("s2", &[moved.clone()]).is_empty());
        // The same hunk without taking the earlier copy out is one.
        moved.blocks = vec![((2, 2), (2, 3))];
        assert_eq!(live.duplicates("s2", &[moved]).len(), 1);
    }

    #[test]
    fn a_change_whose_lines_are_gone_is_not_live() {
        // x added, then the block holding it deleted: adding x again is new.
        assert_eq!(run(&["a\nb\n", "a\nx\nb\n", "b\n", "x\nb\n"]), None);
        // A revert ends the change, so making it again is not a duplicate.
        assert_eq!(run(&["a\n", "a\nx\n", "a\n", "a\nx\n"]), None);
        // Revert of a deletion, then the deletion again.
        assert_eq!(run(&["a\nx\nb\n", "a\nb\n", "a\nx\nb\n", "a\nb\n"]), None);
    }

    #[test]
    fn blank_lines_around_a_change_are_not_part_of_it() {
        let d = diff("a\n", "a\n\nmod x;\n\n");
        assert_eq!(d[0].hunks[0].new, (2, 3));
        // So a line added next to the blank line is not next to the change.
        assert_eq!(run(&["a\n", "a\n\nmod x;\n\n", "a\n\nmod x;\n\nb\n"]), None);
        // But made again where it was made (its anchor, behind `mod y;`
        // which came later, blank lines between): a duplicate.
        assert_eq!(
            run(&[
                "a\n",
                "a\n\nmod x;\n\n",
                "a\n\nmod y;\nmod x;\n\n",
                "a\nmod x;\n\nmod y;\nmod x;\n\n"
            ]),
            Some((3, "s1".into()))
        );
    }

    #[test]
    fn a_block_inserted_again_is_one_hunk_however_the_diff_aligns_it() {
        // After a later step edited the block, the diff may align the
        // redelivered `os sys` as `sys os` after the first `os`.
        assert_eq!(
            run(&[
                "f\n",
                "os\nsys\nf\n",
                "os\njson\nsys\nf\n",
                "os\nsys\nos\njson\nsys\nf\n"
            ]),
            Some((3, "s1".into()))
        );
        // Slides keep every line covered once, in order.
        for (old, new) in [
            ("a\nx\n", "a\nx\nx\n"),
            ("x\ny\nx\n", "x\ny\nx\ny\nx\n"),
            ("a\nb\nb\nb\n", "a\nb\n"),
        ] {
            let d = identities("f", old.as_bytes(), new.as_bytes());
            for ((o, n), (o2, n2)) in d.blocks.iter().zip(d.blocks.iter().skip(1)) {
                assert!(
                    o.1 < o2.0 && n.1 < n2.0,
                    "{old:?} -> {new:?}: {:?}",
                    d.blocks
                );
            }
        }
    }

    /// Random line sequences: slid ops still cover both sides exactly once,
    /// in order, and every equal op is equal.
    #[test]
    fn slides_keep_the_diff_exact() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..3000 {
            let a: Vec<u64> = (0..next(12)).map(|_| next(3)).collect();
            let b: Vec<u64> = (0..next(12)).map(|_| next(3)).collect();
            let ops = slide_up(line_ops(&a, &b), &a, &b);
            let (mut i, mut j) = (0, 0);
            for op in &ops {
                assert_eq!(
                    (op.old_range().start, op.new_range().start),
                    (i, j),
                    "{a:?} {b:?} {ops:?}"
                );
                if let DiffOp::Equal {
                    old_index,
                    new_index,
                    len,
                } = *op
                {
                    assert_eq!(a[old_index..old_index + len], b[new_index..new_index + len]);
                }
                i = op.old_range().end;
                j = op.new_range().end;
            }
            assert_eq!((i, j), (a.len(), b.len()), "{a:?} {b:?} {ops:?}");
        }
    }

    #[test]
    fn punctuation_only_hunks_have_no_identity() {
        assert!(ids("a\n", "a\n}\n").is_empty());
        assert!(ids("a\n", "a\n});\n*/\n").is_empty());
        assert_eq!(ids("a\n", "a\n}\nb\n").len(), 1);
        // A closing brace added next to one an earlier step added (wrapping
        // a line in a new block) is not a duplicate.
        assert_eq!(
            run(&[
                "a\nb\nc\nd\n",
                "if p {\na\nb\nc\n}\nd\n",
                "if q {\na\nb\nc\n}\nd\n",
                "if q {\na\nb\nif r {\nc\n}\n}\nd\n"
            ]),
            None
        );
    }

    #[test]
    fn whitespace_eol_and_anchors() {
        // No final newline: an append made twice is still one change twice.
        assert_eq!(
            run(&["a\nb", "a\nb\nc", "a\nb\nc\nc"]),
            Some((2, "s1".into()))
        );
        // A reformatting step in between does not end the change.
        assert_eq!(
            run(&[
                "f {\n  a();\n}\n",
                "f {\n  a();\n b();\n}\n",
                "f {\n  a();\n  b();\n}\n",
                "f {\n  a();\n  b();\n b();\n}\n"
            ]),
            Some((3, "s1".into()))
        );
        // CRLF to LF in between neither.
        assert_eq!(
            run(&["a\r\nb\r\n", "a\r\nx\r\nb\r\n", "a\nx\nb\n", "a\nx\nx\nb\n"]),
            Some((3, "s1".into()))
        );
        // Made again at the same anchor after another change was made there.
        assert_eq!(
            run(&[
                "## U\n- a\n",
                "## U\n- b\n- a\n",
                "## U\n- c\n- b\n- a\n",
                "## U\n- b\n- c\n- b\n- a\n"
            ]),
            Some((3, "s1".into()))
        );
        // Wrapping again (`#ifdef` … `#endif` around `#ifdef` … `#endif`)
        // repeats one of the earlier step's two changes, not the step.
        assert_eq!(
            run(&[
                "f;\n",
                "#ifdef A\nf;\n#endif\n",
                "#ifndef B\n#ifdef A\nf;\n#endif\n#endif\n"
            ]),
            None
        );
        // One change between two equal ones an earlier step made (the rest
        // of a rename) is not that step again.
        assert_eq!(
            run(&[
                "x = old()\n\nx = old()\n\nx = old()\n",
                "x = new()\n\nx = old()\n\nx = new()\n",
                "x = new()\n\nx = new()\n\nx = new()\n"
            ]),
            None
        );
        // ... while the whole step again is a duplicate.
        assert_eq!(
            run(&[
                "f;\n",
                "#ifdef A\nf;\n#endif\n",
                "#ifdef A\n#ifdef A\nf;\n#endif\n#endif\n"
            ]),
            Some((2, "s1".into()))
        );
    }

    #[test]
    fn live_changes_move_with_later_diffs() {
        let mut live = LiveHunks::default();
        live.admit("s1", &diff("a\nb\nc\n", "a\nb\nX\nc\n"), false)
            .unwrap();
        live.admit("s2", &diff("a\nb\nX\nc\n", "0\n0\na\nX\nc\n"), false)
            .unwrap();
        let raw = live.to_raw();
        let x = raw[0].1.iter().find(|l| &*l.maker == "s1").unwrap();
        assert_eq!(x.lines, (3, 4));
    }

    #[test]
    fn equal_hunks_inside_one_step_are_not_duplicates() {
        let h = diff("a\nk\na\nk\n", "x\nk\nx\nk\n");
        assert_eq!(h[0].hunks[0].key, h[0].hunks[1].key);
        assert_eq!(LiveHunks::default().admit("s1", &h, false), Ok(vec![]));
    }

    #[test]
    fn allow_records_and_reports() {
        let mut c = LiveHunks::default();
        c.admit("s1", &diff("", "z\n"), false).unwrap();
        let d = c.admit("s2", &diff("z\n", "z\nz\n"), true).unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].earlier_step, "s1");
        assert_eq!(d[0].earlier_line, 1);
        assert_eq!(c.len(), 2);
    }

    /// Random edits of a small alphabet (so identities repeat): live
    /// changes always lie inside the file, and survive the cache's encoding.
    #[test]
    fn live_changes_stay_inside_the_file() {
        for seed in 1..=200u64 {
            let mut x = seed;
            let mut next = |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            };
            let words = ["a", "b", "x", "", "fn f() {}", "  x"];
            let mut file: Vec<&str> = Vec::new();
            let mut live = LiveHunks::default();
            for step in 0..40 {
                let old = file.iter().map(|l| format!("{l}\n")).collect::<String>();
                for _ in 0..=next(3) {
                    let at = next(file.len() as u64 + 1) as usize;
                    match next(3) {
                        0 if at < file.len() => {
                            file.remove(at);
                        }
                        1 if at < file.len() => file[at] = words[next(6) as usize],
                        _ => file.insert(at, words[next(6) as usize]),
                    }
                }
                let new = file.iter().map(|l| format!("{l}\n")).collect::<String>();
                let d = vec![identities("f", old.as_bytes(), new.as_bytes())];
                live.admit(&format!("s{step}"), &d, true).unwrap();
                for (_, lives) in live.to_raw() {
                    for l in lives {
                        assert!(
                            l.lines.0 <= l.lines.1
                                && l.lines.1 as usize <= file.len()
                                && l.anchor.is_none_or(|a| a as usize <= file.len()),
                            "seed {seed} step {step}: {:?} in {} lines",
                            l.lines,
                            file.len()
                        );
                    }
                }
                let raw: Vec<(String, Vec<Live>)> = live
                    .to_raw()
                    .into_iter()
                    .map(|(p, l)| (p.to_string(), l))
                    .collect();
                assert_eq!(LiveHunks::from_raw(raw).to_raw(), live.to_raw());
            }
        }
    }

    #[test]
    fn refusing_changes_nothing() {
        let mut c = LiveHunks::default();
        c.admit("s1", &diff("", "z\n"), false).unwrap();
        assert!(c.admit("s2", &diff("z\n", "z\nz\n"), false).is_err());
        assert_eq!(c.len(), 1);
        assert_eq!(c.to_raw()[0].1[0].lines, (0, 1));
    }
}
