//! Live hunks: the changes still in effect, carried through every later
//! step's diff, and the duplicates a step would make of them.
//!
//! Owns [`LiveHunks`]: each accepted hunk stays live at the lines it left
//! until its inverse is made over it or every line it left is gone.
//! Invariant: the live set only changes when a step is accepted
//! ([`LiveHunks::record`]).

use std::collections::HashMap;
use std::sync::Arc;

use super::{FileDiff, Lines};

/// A hunk that repeats a live change of an earlier step in the same place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    pub hunk: String,
    pub earlier_step: String,
    /// The file both changed.
    pub path: String,
    /// Where the earlier change is, 1-based, in the file as it was before
    /// this step (the hunk's own line is in the file after it).
    pub earlier_line: u32,
}

/// A live change: the lines an accepted hunk left, as they are now, and the
/// point where it was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Live {
    pub key: [u8; 32],
    pub lines: Lines,
    pub anchor: Option<u32>,
    pub maker: Arc<str>,
}

/// Where a live change is, where it was made, and which step made it.
#[derive(Debug, Clone)]
pub(super) struct Slot {
    pub(super) lines: Lines,
    /// The point it was made at, carried like a deletion's point (a later
    /// insertion at that very point goes after it), None once the lines on
    /// both sides of it were replaced: "at the same anchor".
    pub(super) anchor: Option<u32>,
    pub(super) maker: Arc<str>,
}

/// The live changes of one earlier step a step lands on, as (identity,
/// index among that identity's slots), the step's hunks that land on them,
/// and the first such hunk.
pub(super) type Hits = (Vec<([u8; 32], usize)>, Vec<usize>, Duplicate);

/// The run's live changes: per path, per identity (so a step's checks cost
/// what its own hunks cost, not what the run holds).
#[derive(Debug, Default, Clone)]
pub struct LiveHunks {
    pub(super) files: HashMap<String, HashMap<[u8; 32], Vec<Slot>>>,
}

pub(super) fn touches(a: Lines, b: Lines) -> bool {
    a.0 <= b.1 && b.0 <= a.1
}

/// Where line `i` of the old file is in the new one; None if a block
/// changed it.
pub(super) fn map_line(blocks: &[(Lines, Lines)], i: u32) -> Option<u32> {
    // The blocks that start at or before `i`.
    let k = blocks.partition_point(|(o, _)| o.0 <= i);
    match k.checked_sub(1).map(|j| blocks[j]) {
        None => Some(i),
        Some((o, _)) if i < o.1 => None,
        Some((o, nw)) => Some(nw.1 + (i - o.1)),
    }
}

/// Where the point before line `p` of the old file is in the new one; None
/// if a block replaced the lines on both sides of it.
pub(super) fn map_point(blocks: &[(Lines, Lines)], p: u32) -> Option<u32> {
    // Blocks ending at or before `p` (an insertion at `p` itself comes after
    // the point).
    let k = blocks.partition_point(|(o, _)| o.1 < p || (o.1 == p && o.0 < p));
    if let Some((o, _)) = blocks.get(k) {
        if o.0 < p && p < o.1 {
            return None;
        }
    }
    match k.checked_sub(1).map(|j| blocks[j]) {
        None => Some(p),
        Some((o, nw)) => Some(nw.1 + (p - o.1)),
    }
}

/// Whether `blocks` leave every line of `lines` (or the point) as it is.
pub(super) fn intact(blocks: &[(Lines, Lines)], lines: Lines) -> bool {
    if lines.0 == lines.1 {
        return map_point(blocks, lines.0).is_some();
    }
    (lines.0..lines.1).all(|i| map_line(blocks, i).is_some())
}

/// Carry a live change's lines through `blocks`; None when none is left.
pub(super) fn carry(blocks: &[(Lines, Lines)], lines: Lines) -> Option<Lines> {
    if lines.0 == lines.1 {
        return map_point(blocks, lines.0).map(|p| (p, p));
    }
    let first = (lines.0..lines.1).find_map(|i| map_line(blocks, i))?;
    let last = (lines.0..lines.1).rev().find_map(|i| map_line(blocks, i))?;
    Some((first, last + 1))
}

impl LiveHunks {
    /// Every live change, by path (sorted by path, identity and lines, for a
    /// stable encoding).
    pub fn to_raw(&self) -> Vec<(&str, Vec<Live>)> {
        let mut v: Vec<(&str, Vec<Live>)> = self
            .files
            .iter()
            .map(|(p, keys)| {
                let mut lives: Vec<Live> = keys
                    .iter()
                    .flat_map(|(k, slots)| {
                        slots.iter().map(|s| Live {
                            key: *k,
                            lines: s.lines,
                            anchor: s.anchor,
                            maker: s.maker.clone(),
                        })
                    })
                    .collect();
                lives.sort_unstable_by_key(|l| (l.key, l.lines));
                (p.as_str(), lives)
            })
            .collect();
        v.sort_unstable_by_key(|e| e.0);
        v
    }

    /// The inverse of [`LiveHunks::to_raw`].
    pub fn from_raw(raw: Vec<(String, Vec<Live>)>) -> LiveHunks {
        let mut files: HashMap<String, HashMap<[u8; 32], Vec<Slot>>> = HashMap::new();
        for (path, lives) in raw {
            for l in lives {
                files
                    .entry(path.clone())
                    .or_default()
                    .entry(l.key)
                    .or_default()
                    .push(Slot {
                        lines: l.lines,
                        anchor: l.anchor,
                        maker: l.maker,
                    });
            }
        }
        LiveHunks { files }
    }

    /// How many changes are live.
    pub fn len(&self) -> usize {
        self.files
            .values()
            .flat_map(HashMap::values)
            .map(Vec::len)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Every hunk of `files` that repeats a live change of another step in
    /// the same place, when the step repeats *every* live change that
    /// earlier step made in that file (a redelivery repeats the whole step;
    /// a step that wraps code again in `#ifdef … #endif` repeats only the
    /// `#endif`). Changes nothing.
    pub fn duplicates(&self, step: &str, files: &[FileDiff]) -> Vec<Duplicate> {
        let mut out = Vec::new();
        for f in files {
            let Some(live) = self.files.get(&f.path) else {
                continue;
            };
            // Per earlier step: the live changes this step lands on, as
            // (identity, index in its slots), and the first such hunk.
            let mut hit: HashMap<&str, Hits> = HashMap::new();
            for (hi, h) in f.hunks.iter().enumerate() {
                let Some(slots) = live.get(&h.key) else {
                    continue;
                };
                // The earlier change must still be there after this step: a
                // step that takes a line out and puts it back next door (a
                // reordering, rustfmt sorting `mod` lines) moves it.
                for (i, l) in slots.iter().enumerate() {
                    let here = touches(l.lines, h.reach)
                        || l.anchor.is_some_and(|a| touches((a, a), h.reach));
                    if &*l.maker == step || !here || !intact(&f.blocks, l.lines) {
                        continue;
                    }
                    let e = hit.entry(&*l.maker).or_insert_with(|| {
                        (
                            Vec::new(),
                            Vec::new(),
                            Duplicate {
                                hunk: h.describe.clone(),
                                earlier_step: l.maker.to_string(),
                                path: f.path.clone(),
                                earlier_line: l.lines.0 + 1,
                            },
                        )
                    });
                    if !e.0.contains(&(h.key, i)) {
                        e.0.push((h.key, i));
                    }
                    if !e.1.contains(&hi) {
                        e.1.push(hi);
                    }
                }
            }
            if hit.is_empty() {
                continue;
            }
            let mut found: Vec<Duplicate> = hit
                .into_iter()
                .filter(|(maker, (hits, hunks, _))| {
                    let made = live
                        .values()
                        .flat_map(|slots| slots.iter())
                        .filter(|l| &*l.maker == *maker)
                        .count();
                    // Each of its changes made again, by a hunk of its own
                    // (one hunk between two of them is not both again).
                    hits.len() >= made && hunks.len() >= made
                })
                .map(|(_, (_, _, d))| d)
                .collect();
            found.sort_by_key(|d| d.earlier_line);
            out.extend(found);
        }
        out
    }

    /// Accept `step`'s changes: a hunk made over its live inverse ends it;
    /// every other live change of a changed path moves with the diff (and
    /// ends if none of its lines is left); every other hunk becomes live.
    pub fn record(&mut self, step: &str, files: &[FileDiff]) {
        let maker: Arc<str> = Arc::from(step);
        for f in files {
            let mut live = self.files.remove(&f.path).unwrap_or_default();
            let mut born = Vec::new();
            for h in &f.hunks {
                let undone = live.get_mut(&h.inverse).and_then(|slots| {
                    let i = slots.iter().position(|l| touches(l.lines, h.reach))?;
                    slots.swap_remove(i);
                    Some(())
                });
                if undone.is_none() {
                    born.push((
                        h.key,
                        Slot {
                            lines: h.new,
                            anchor: Some(h.anchor),
                            maker: maker.clone(),
                        },
                    ));
                }
            }
            // Changes that end before the first changed line do not move
            // (the common case: a run that appends to a file).
            let first = f.blocks.first().map_or(u32::MAX, |(o, _)| o.0);
            live.retain(|_, slots| {
                slots.retain_mut(|l| {
                    if l.lines.1 < first && l.anchor.is_none_or(|a| a < first) {
                        return true;
                    }
                    l.anchor = l.anchor.and_then(|a| map_point(&f.blocks, a));
                    match carry(&f.blocks, l.lines) {
                        Some(lines) => {
                            l.lines = lines;
                            true
                        }
                        None => false,
                    }
                });
                !slots.is_empty()
            });
            for (k, slot) in born {
                live.entry(k).or_default().push(slot);
            }
            if !live.is_empty() {
                self.files.insert(f.path.clone(), live);
            }
        }
    }

    /// `steps` were undone (an `undo` step restored what they touched):
    /// none of their changes is in effect any more, so making them again is
    /// no duplicate.
    pub fn forget(&mut self, steps: &[String]) {
        if steps.is_empty() {
            return;
        }
        self.files.retain(|_, keys| {
            keys.retain(|_, slots| {
                slots.retain(|l| !steps.iter().any(|s| **s == *l.maker));
                !slots.is_empty()
            });
            !keys.is_empty()
        });
    }

    /// [`LiveHunks::duplicates`], then [`LiveHunks::record`] unless one was
    /// found and `allow` is false (then the first is the error).
    pub fn admit(
        &mut self,
        step: &str,
        files: &[FileDiff],
        allow: bool,
    ) -> Result<Vec<Duplicate>, Duplicate> {
        let dups = self.duplicates(step, files);
        if let (Some(d), false) = (dups.first(), allow) {
            return Err(d.clone());
        }
        self.record(step, files);
        Ok(dups)
    }
}
