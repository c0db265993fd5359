//! The receipt index: a derived cache of the ledger and the hunk counts, so
//! that resuming a long run costs O(new steps), not O(history).
//!
//! Owns `.git/steps/index/<run hash>`. Invariant: the log stays the truth.
//! The index records the head it was built from; commits are immutable, so
//! it is exact for that head. It is used only when that head is the branch
//! head or a first-parent ancestor of it (then only the newer commits are
//! read, and they must all be plain receipts of this run); a checksum guards
//! against torn or edited files; anything else — a moved-back branch,
//! a foreign commit, a damaged file — falls back to the full scan, which
//! rebuilds it. It is never fsynced: losing it costs one scan.

use std::fs;
use std::io::Write;
use std::path::PathBuf;

use git2::{Oid, Repository};
use sha2::{Digest, Sha256};

use crate::error::Result;
use crate::hunks::HunkCounts;
use crate::ledger::{self, Entry, Ledger};
use crate::receipt;
use crate::step::hex;

const MAGIC: &str = "git-steps-index 1";

/// The ledger and hunk counts at a head.
pub struct Indexed {
    pub ledger: Ledger,
    pub counts: HunkCounts,
}

fn path(repo: &Repository, run: &str) -> PathBuf {
    let name = hex(&Sha256::digest(run.as_bytes())[..16]);
    repo.path().join("steps").join("index").join(name)
}

struct Cached {
    head: Oid,
    base: Option<Oid>,
    entries: Vec<Entry>,
    counts: HunkCounts,
}

fn read(repo: &Repository, run: &str) -> Option<Cached> {
    let text = fs::read_to_string(path(repo, run)).ok()?;
    let (body, sum) = text.rsplit_once("end ")?;
    if hex(&Sha256::digest(body.as_bytes())) != sum.trim() {
        return None;
    }
    let mut lines = body.lines();
    if lines.next()? != MAGIC || lines.next()? != format!("run {run}") {
        return None;
    }
    let head = Oid::from_str(lines.next()?.strip_prefix("head ")?).ok()?;
    let base = match lines.next()?.strip_prefix("base ")? {
        "-" => None,
        b => Some(Oid::from_str(b).ok()?),
    };
    let n: usize = lines.next()?.strip_prefix("entries ")?.parse().ok()?;
    let mut entries = Vec::with_capacity(n);
    for index in 0..n {
        let mut f = lines.next()?.split(' ');
        let (id, decision, commit) = (f.next()?, f.next()?, f.next()?);
        entries.push(Entry {
            index,
            id: id.to_string(),
            decision: decision.to_string(),
            commit: Oid::from_str(commit).ok()?,
        });
    }
    let m: usize = lines.next()?.strip_prefix("counts ")?.parse().ok()?;
    let mut raw = Vec::with_capacity(m);
    for _ in 0..m {
        let mut f = lines.next()?.split(' ');
        let key = f.next()?;
        let n: u32 = f.next()?.parse().ok()?;
        let maker = f.next()?;
        let mut k = [0u8; 32];
        for (i, byte) in k.iter_mut().enumerate() {
            *byte = u8::from_str_radix(key.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        raw.push((k, n, maker.to_string()));
    }
    Some(Cached {
        head,
        base,
        entries,
        counts: HunkCounts::from_raw(raw),
    })
}

/// Save the index for `ledger` (which must have no problems) and `counts`.
pub fn save(repo: &Repository, run: &str, ledger: &Ledger, counts: &HunkCounts) {
    let (Some(head), true) = (ledger.head, ledger.problems.is_empty()) else {
        return;
    };
    let mut body = String::new();
    body.push_str(&format!("{MAGIC}\nrun {run}\nhead {head}\n"));
    body.push_str(&format!(
        "base {}\n",
        ledger
            .base
            .map(|b| b.to_string())
            .unwrap_or_else(|| "-".into())
    ));
    body.push_str(&format!("entries {}\n", ledger.entries.len()));
    for e in &ledger.entries {
        body.push_str(&format!("{} {} {}\n", e.id, e.decision, e.commit));
    }
    let raw = counts.to_raw();
    body.push_str(&format!("counts {}\n", raw.len()));
    for (k, n, maker) in raw {
        body.push_str(&format!("{} {n} {maker}\n", hex(&k)));
    }
    let sum = hex(&Sha256::digest(body.as_bytes()));
    let target = path(repo, run);
    let Some(dir) = target.parent() else { return };
    // A cache: failures to write it are not errors.
    let _ = fs::create_dir_all(dir);
    if let Ok(mut tmp) = tempfile::NamedTempFile::new_in(dir) {
        if tmp.write_all(body.as_bytes()).is_ok() && writeln!(tmp, "end {sum}").is_ok() {
            let _ = tmp.persist(&target);
        }
    }
}

/// The ledger and hunk counts of `run` at `head`, from the index where it
/// is exact, else from a full scan (which refreshes the index).
pub fn load(repo: &Repository, head: Option<Oid>, run: &str) -> Result<Indexed> {
    if let (Some(h), Some(cached)) = (head, read(repo, run)) {
        let cached_head = cached.head;
        if let Some(ix) = extend(repo, h, run, cached)? {
            if cached_head != h {
                save(repo, run, &ix.ledger, &ix.counts);
            }
            return Ok(ix);
        }
    }
    let ledger = ledger::scan(repo, head, run)?;
    let (counts, _) = ledger::hunk_counts(repo, &ledger)?;
    save(repo, run, &ledger, &counts);
    Ok(Indexed { ledger, counts })
}

/// Only the ledger: from the index where it is exact (or can be caught up),
/// else from a plain history scan — without replaying the hunk counts,
/// which `status` does not need.
pub fn load_ledger(repo: &Repository, head: Option<Oid>, run: &str) -> Result<Ledger> {
    if let (Some(h), Some(cached)) = (head, read(repo, run)) {
        if let Some(ix) = extend(repo, h, run, cached)? {
            return Ok(ix.ledger);
        }
    }
    ledger::scan(repo, head, run)
}

/// Bring a cached index from its head up to `head` by reading only the newer
/// commits; None when that is not possible (then the caller scans).
fn extend(repo: &Repository, head: Oid, run: &str, cached: Cached) -> Result<Option<Indexed>> {
    let mut newer: Vec<Oid> = Vec::new();
    let mut at = head;
    while at != cached.head {
        let c = repo.find_commit(at)?;
        if c.parent_count() != 1 {
            return Ok(None);
        }
        newer.push(at);
        at = c.parent_id(0)?;
        if newer.len() > 1_000_000 {
            return Ok(None);
        }
    }
    let mut entries = cached.entries;
    let mut counts = cached.counts;
    for oid in newer.into_iter().rev() {
        let c = repo.find_commit(oid)?;
        let r = match c.message().ok().map(receipt::parse) {
            Some(Ok(r)) if r.run == run => r,
            _ => return Ok(None),
        };
        if entries.iter().any(|e| e.id == r.id) {
            return Ok(None);
        }
        let tree = c.tree()?;
        let parent = c.parent(0)?.tree()?;
        let ids = ledger::tree_hunks(repo, Some(&parent), Some(&tree))?;
        let _ = counts.admit(&r.id, &ids, true);
        entries.push(Entry {
            index: entries.len(),
            id: r.id,
            decision: r.decision,
            commit: oid,
        });
    }
    let ledger = Ledger::from_parts(Some(head), cached.base, entries);
    Ok(Some(Indexed { ledger, counts }))
}
