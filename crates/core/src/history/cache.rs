//! The receipt cache: a derived copy of the ledger and the live hunks, so
//! that resuming a long run costs O(new steps), not O(history).
//!
//! Owns `.git/steps/index/<run hash>` (the directory keeps its first name,
//! so existing caches are still found). Invariant: the log stays the truth.
//! The cache records the head it was built from; commits are immutable, so
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
use crate::git::hex;
use crate::history::ledger::{self, AppliedStep, Ledger};
use crate::history::receipt;
use crate::history::replay;
use crate::history::shared::{self, get_live, put_live};

use crate::tree::hunks::LiveHunks;

/// Version 7: the steps that carry effects too (`Ledger::effects`).
/// Version 6: the ledger's adopted commits too (version 5 dropped them, so a
/// box that read its ledger from here forgot that the run held any).
/// Version 5: live hunks with their lines and anchors, from whitespace-blind
/// diffs with slid insertions (version 2 held counts per hunk identity, 3
/// and 4 came from other diffs; an older file is rebuilt by one scan).
/// Binary, CRC-32 checked (version 1 was text under SHA-256; reading 19 MB
/// of it cost more than the rest of a warm resume).
/// (Bump the shared hunk cache's identities version when hunk identities
/// change: [`crate::history::shared`]; they have not since version 5.)
const MAGIC: &[u8] = b"git-steps-index 7\n";

/// The ledger and live hunks at a head.
pub struct Indexed {
    pub ledger: Ledger,
    pub live: LiveHunks,
}

fn path(repo: &Repository, run: &str) -> PathBuf {
    let name = hex(&Sha256::digest(run.as_bytes())[..16]);
    repo.path().join("steps").join("index").join(name)
}

struct Cached {
    head: Oid,
    base: Option<Oid>,
    entries: Vec<AppliedStep>,
    /// [`Ledger::adopted`]: (position among the entries, commit).
    adopted: Vec<(usize, Oid)>,
    /// [`Ledger::effects`].
    effects: Vec<(usize, usize)>,
    live: Option<LiveHunks>,
}

/// Read the cache; with `want_counts` false the hunk counts are skipped
/// (`status` needs only the ledger).
fn read(repo: &Repository, run: &str, want_counts: bool) -> Option<Cached> {
    decode(&fs::read(path(repo, run)).ok()?, run, want_counts)
}

/// The cache file's bytes, read back; None for anything that is not
/// exactly what [`encode`] writes for `run`.
fn decode(data: &[u8], run: &str, want_counts: bool) -> Option<Cached> {
    let mut b = shared::open(data, MAGIC, run)?;
    let head = b.oid()?;
    let base = match b.u8()? {
        0 => None,
        _ => Some(b.oid()?),
    };
    let n = b.u64()?;
    let mut entries = Vec::with_capacity(n.min(b.0.len() / 24));
    for index in 0..n {
        let id_len = b.u8()? as usize;
        let id = b.str(id_len)?.to_string();
        let d_len = b.u8()? as usize;
        let decision = b.str(d_len)?.to_string();
        let commit = b.oid()?;
        entries.push(AppliedStep {
            index,
            id,
            decision,
            commit,
        });
    }
    // The last entry is the head's own receipt (a cache is only saved for
    // a head that is one) — a cheap cross-check on top of the CRC.
    if entries.last().is_some_and(|e| e.commit != head) {
        return None;
    }
    let na = b.u64()?;
    let mut adopted = Vec::with_capacity(na.min(b.0.len() / 28));
    for _ in 0..na {
        let at = b.u64()?;
        if at > entries.len() {
            return None;
        }
        adopted.push((at, b.oid()?));
    }
    let ne = b.u64()?;
    let mut effects = Vec::with_capacity(ne.min(b.0.len() / 16));
    for _ in 0..ne {
        let (at, n) = (b.u64()?, b.u64()?);
        if at >= entries.len() || n == 0 || n > crate::plan::effect::MAX_EFFECTS {
            return None;
        }
        effects.push((at, n));
    }
    let live = if want_counts {
        let live = get_live(&mut b)?;
        if !b.0.is_empty() {
            return None;
        }
        Some(live)
    } else {
        None
    };
    Some(Cached {
        head,
        base,
        entries,
        adopted,
        effects,
        live,
    })
}

/// Save the cache for `ledger` (which must have no problems) and `live`.
pub fn save(repo: &Repository, run: &str, ledger: &Ledger, live: &LiveHunks) {
    let Some(data) = encode(run, ledger, live) else {
        return;
    };
    let target = path(repo, run);
    let Some(dir) = target.parent() else { return };
    // A cache: failures to write it are not errors.
    let _ = fs::create_dir_all(dir);
    // Saving happens under the runner's lock, so a temporary file here is
    // what a killed runner left mid-write.
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(".tmp") {
                let _ = fs::remove_file(e.path());
            }
        }
    }
    if let Ok(mut tmp) = tempfile::NamedTempFile::new_in(dir) {
        if tmp.write_all(&data).is_ok() && tmp.persist(&target).is_ok() {
            let _ = crate::git::shared::created_under(repo.path(), repo.path(), &target);
        }
    }
}

/// The cache file's bytes for `ledger` and `live`, CRC-32 at the end;
/// None when the ledger is not one to cache (problems, no head, a head
/// that is not its last receipt, a field too long for the format).
fn encode(run: &str, ledger: &Ledger, live: &LiveHunks) -> Option<Vec<u8>> {
    let (Some(head), true) = (ledger.head, ledger.problems.is_empty()) else {
        return None;
    };
    if ledger.last().is_some_and(|e| e.commit != head) {
        return None;
    }
    let mut body: Vec<u8> = Vec::with_capacity(64 + ledger.entries.len() * 100 + live.len() * 50);
    body.extend_from_slice(MAGIC);
    body.extend_from_slice(&(run.len() as u32).to_le_bytes());
    body.extend_from_slice(run.as_bytes());
    body.extend_from_slice(head.as_bytes());
    match ledger.base {
        None => body.push(0),
        Some(b) => {
            body.push(1);
            body.extend_from_slice(b.as_bytes());
        }
    }
    body.extend_from_slice(&(ledger.entries.len() as u64).to_le_bytes());
    for e in &ledger.entries {
        // Ids are at most 128 bytes; a decision that does not fit is not
        // one git-steps wrote: such a ledger is not cached.
        let (Ok(il), Ok(dl)) = (u8::try_from(e.id.len()), u8::try_from(e.decision.len())) else {
            return None;
        };
        body.push(il);
        body.extend_from_slice(e.id.as_bytes());
        body.push(dl);
        body.extend_from_slice(e.decision.as_bytes());
        body.extend_from_slice(e.commit.as_bytes());
    }
    body.extend_from_slice(&(ledger.adopted.len() as u64).to_le_bytes());
    for (at, oid) in &ledger.adopted {
        body.extend_from_slice(&(*at as u64).to_le_bytes());
        body.extend_from_slice(oid.as_bytes());
    }
    body.extend_from_slice(&(ledger.effects.len() as u64).to_le_bytes());
    for (at, n) in &ledger.effects {
        body.extend_from_slice(&(*at as u64).to_le_bytes());
        body.extend_from_slice(&(*n as u64).to_le_bytes());
    }
    put_live(&mut body, live)?;
    let sum = crc32fast::hash(&body).to_le_bytes();
    body.extend_from_slice(&sum);
    Some(body)
}

/// The ledger and live hunks of `run` at `head`, from the cache where it
/// is exact, else from a full scan (which refreshes the cache).
///
/// `refresh`: write the refreshed cache back (only under the runner's lock;
/// a dry run writes nothing). `shared`: where the full scan finds a long
/// run, fetch its shared cache ([`crate::history::shared`]) and name the
/// commit; the hunks of the steps after it are replayed, the rest are not.
pub fn load(
    repo: &Repository,
    head: Option<Oid>,
    run: &str,
    refresh: bool,
    shared: &mut dyn FnMut(usize) -> Option<Oid>,
) -> Result<Indexed> {
    if let (Some(h), Some(cached)) = (head, read(repo, run, true)) {
        let cached_head = cached.head;
        if let Some(ix) = extend(repo, h, run, cached)? {
            if refresh && cached_head != h {
                save(repo, run, &ix.ledger, &ix.live);
            }
            return Ok(ix);
        }
    }
    let ledger = ledger::scan_last(repo, head, run)?;
    let from_shared = (ledger.problems.is_empty() && ledger.adopted.is_empty())
        .then(|| shared(ledger.entries.len()))
        .flatten()
        .and_then(|c| shared::read(repo, c, run, &ledger));
    let live = match from_shared {
        Some((n, live)) => replay::live_hunks_after(repo, &ledger.entries[n..], live)?,
        None => replay::live_hunks(repo, &ledger)?.0,
    };
    if refresh {
        save(repo, run, &ledger, &live);
    }
    Ok(Indexed { ledger, live })
}

/// Only the ledger: from the cache where it is exact (or can be caught up),
/// else from a plain history scan — without replaying the hunk counts,
/// which `status` does not need.
pub fn load_ledger(repo: &Repository, head: Option<Oid>, run: &str) -> Result<Ledger> {
    if let (Some(h), Some(cached)) = (head, read(repo, run, false)) {
        if let Some(ix) = extend(repo, h, run, cached)? {
            return Ok(ix.ledger);
        }
    }
    ledger::scan(repo, head, run)
}

/// Bring a cache from its head up to `head` by reading only the newer
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
    let mut effects = cached.effects;
    // Without counts (a ledger-only read), newer steps' hunks are not
    // replayed: the caller does not want them.
    let want_counts = cached.live.is_some();
    let mut live = cached.live.unwrap_or_default();
    for oid in newer.into_iter().rev() {
        let c = repo.find_commit(oid)?;
        let r = match c.message().ok().map(receipt::parse) {
            Some(Ok(r)) if r.run == run => r,
            _ => return Ok(None),
        };
        // A repeated id or a position that is not the next one: the full
        // scan reports it.
        if entries.iter().any(|e| e.id == r.id)
            || r.index.is_some_and(|n| n != entries.len() as u64 + 1)
        {
            return Ok(None);
        }
        if want_counts {
            let tree = c.tree()?;
            let parent = c.parent(0)?.tree()?;
            let files = replay::tree_hunks(repo, Some(&parent), Some(&tree))?;
            live.record(&r.id, &files);
            live.forget(&r.undoes);
        }
        if r.effects > 0 {
            effects.push((entries.len(), r.effects));
        }
        entries.push(AppliedStep {
            index: entries.len(),
            id: r.id,
            decision: r.decision,
            commit: oid,
        });
    }
    let mut ledger = Ledger::from_parts(Some(head), cached.base, entries);
    ledger.adopted = cached.adopted;
    ledger.effects = effects;
    Ok(Some(Indexed { ledger, live }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::hunks::Live;
    use std::sync::Arc;

    fn oid(n: u8) -> Oid {
        Oid::from_bytes(&[n; 20]).unwrap()
    }

    fn ledger(n: usize) -> Ledger {
        let entries: Vec<AppliedStep> = (0..n)
            .map(|i| AppliedStep {
                index: i,
                id: format!("s{i}"),
                decision: format!("sha256:{i:064x}"),
                commit: oid(i as u8 + 1),
            })
            .collect();
        let head = entries.last().map(|e| e.commit);
        Ledger::from_parts(head, Some(oid(200)), entries)
    }

    fn counts() -> LiveHunks {
        let live = |key: u8, lines: (u32, u32), maker: &str| Live {
            key: [key; 32],
            lines,
            anchor: (key == 7).then_some(lines.0),
            maker: Arc::from(maker),
        };
        LiveHunks::from_raw(vec![
            (
                "src/a.rs".into(),
                vec![live(7, (2, 5), "s1"), live(3, (9, 9), "s0")],
            ),
            ("b".into(), vec![live(7, (0, 1), "s2")]),
        ])
    }

    #[test]
    fn round_trip() {
        let l = ledger(3);
        let data = encode("run-é", &l, &counts()).unwrap();
        let c = decode(&data, "run-é", true).unwrap();
        assert_eq!(c.head, oid(3));
        assert_eq!(c.base, Some(oid(200)));
        let got: Vec<_> = c
            .entries
            .iter()
            .map(|e| (e.index, e.id.clone(), e.decision.clone(), e.commit))
            .collect();
        let want: Vec<_> = l
            .entries
            .iter()
            .map(|e| (e.index, e.id.clone(), e.decision.clone(), e.commit))
            .collect();
        assert_eq!(got, want);
        assert_eq!(c.live.unwrap().to_raw(), counts().to_raw());
        // Without the live hunks, the ledger alone.
        let c = decode(&data, "run-é", false).unwrap();
        assert!(c.live.is_none());
        assert_eq!(c.entries.len(), 3);
        assert!(c.adopted.is_empty());
    }

    #[test]
    fn adopted_commits_are_kept() {
        let mut l = ledger(3);
        l.adopted = vec![(1, oid(77)), (3, oid(78))];
        let data = encode("r", &l, &counts()).unwrap();
        let c = decode(&data, "r", true).unwrap();
        assert_eq!(c.adopted, l.adopted);
        assert_eq!(c.entries.len(), 3);
        // A position past the entries is not one encode writes.
        l.adopted = vec![(4, oid(77))];
        let data = encode("r", &l, &counts()).unwrap();
        assert!(decode(&data, "r", true).is_none());
    }

    #[test]
    fn steps_with_effects_are_kept() {
        let mut l = ledger(3);
        l.effects = vec![(0, 2), (2, 1)];
        let data = encode("r", &l, &counts()).unwrap();
        assert_eq!(decode(&data, "r", true).unwrap().effects, l.effects);
        // A position past the entries, or a count of none: not ours.
        for bad in [vec![(3, 1)], vec![(1, 0)]] {
            l.effects = bad;
            let data = encode("r", &l, &counts()).unwrap();
            assert!(decode(&data, "r", true).is_none());
        }
    }

    #[test]
    fn a_run_with_no_base_and_no_counts() {
        let mut l = ledger(1);
        l.base = None;
        let data = encode("r", &l, &LiveHunks::default()).unwrap();
        let c = decode(&data, "r", true).unwrap();
        assert_eq!(c.base, None);
        assert!(c.live.unwrap().to_raw().is_empty());
    }

    #[test]
    fn anything_but_the_exact_file_is_ignored() {
        let data = encode("r", &ledger(2), &counts()).unwrap();
        // Another run's file.
        assert!(decode(&data, "r2", true).is_none());
        // Every single flipped byte (the CRC), and every truncation.
        for i in 0..data.len() {
            let mut bad = data.clone();
            bad[i] ^= 0x40;
            assert!(decode(&bad, "r", true).is_none(), "byte {i} flipped");
            assert!(decode(&data[..i], "r", true).is_none(), "cut at {i}");
        }
        // Bytes after the counts, with a valid CRC over them.
        let mut body = data[..data.len() - 4].to_vec();
        body.push(0);
        let sum = crc32fast::hash(&body).to_le_bytes();
        body.extend_from_slice(&sum);
        assert!(decode(&body, "r", true).is_none());
        // Another format version.
        let mut v1 = data[..data.len() - 4].to_vec();
        v1[MAGIC.len() - 2] = b'1';
        let sum = crc32fast::hash(&v1).to_le_bytes();
        v1.extend_from_slice(&sum);
        assert!(decode(&v1, "r", true).is_none());
    }

    #[test]
    fn ledgers_that_are_not_cached() {
        // A head that is not the last receipt.
        let mut l = ledger(2);
        l.head = Some(oid(99));
        assert!(encode("r", &l, &counts()).is_none());
        // No head at all.
        let l = Ledger::from_parts(None, None, Vec::new());
        assert!(encode("r", &l, &counts()).is_none());
        // An id longer than the format holds is not one git-steps wrote.
        let mut l = ledger(1);
        l.entries[0].id = "x".repeat(300);
        assert!(encode("r", &l, &counts()).is_none());
    }
}
