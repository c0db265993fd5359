//! The shared hunk cache: the run's live hunks at one of its steps, kept on
//! the remote beside the run, so that a fresh box resumes a long run
//! without replaying every step's diff.
//!
//! Owns the format of `refs/steps/cache/<run hash>`: a commit (no parent)
//! whose tree holds one blob, `hunks`. The blob names the run, the receipt
//! it describes, the number of steps up to it and a digest of their
//! receipts, then the live hunks in the receipt cache's encoding.
//! The binary encoding of live hunks is here too; the receipt cache
//! ([`crate::history::cache`]) stores them the same way. Invariant: a
//! shared cache is derived data and never the truth about which steps are
//! applied. The ledger always comes from scanning the log; a shared cache
//! is used only when the receipt it names is step N of that scanned ledger
//! and the digest of steps 1..=N agrees; anything else — a missing,
//! damaged, oversized or forged blob, another run's — costs a replay, not a
//! wrong answer. Its hunks are trusted as the remote's commits are: a
//! remote that forges them can hide a duplicated hunk from `apply`, never
//! from `verify`, which replays the whole history and reads no cache.

use git2::{Oid, Repository};
use sha2::{Digest, Sha256};

use crate::git::hex;
use crate::history::ledger::{AppliedStep, Ledger};
use crate::tree::hunks::{Live, LiveHunks};
use std::sync::Arc;

/// The format, and the hunk identities' version: bump the second number
/// whenever hunk identities change (they last did with the receipt cache's
/// version 5, [`crate::history::cache`]), so that a box never takes hunks
/// another version computed.
/// (Format 2 names the commit the run started from.)
const MAGIC: &[u8] = b"git-steps-shared-hunks 2 5\n";

/// The blob's name in the cache commit's tree.
const BLOB: &str = "hunks";

/// A cache larger than this is neither fetched nor read (a hostile remote's
/// memory bomb): a run's live hunks take some tens of bytes each, so a run
/// of a million steps fits.
pub const MAX_BYTES: usize = 64 << 20;

/// The ref on the remote that holds `run`'s shared cache.
pub fn refname(run: &str) -> String {
    format!("refs/steps/cache/{}", run_hash(run))
}

/// This box's copy of the remote's [`refname`]: a fetch cache, like the
/// remote-tracking refs.
pub fn local_refname(run: &str) -> String {
    format!("refs/steps/remote-cache/{}", run_hash(run))
}

fn run_hash(run: &str) -> String {
    hex(&Sha256::digest(run.as_bytes())[..16])
}

/// The digest of the receipts of `entries` (a run's steps 1..=N, in order).
fn digest<'e>(entries: impl IntoIterator<Item = &'e AppliedStep>) -> [u8; 32] {
    let mut h = Sha256::new();
    for e in entries {
        h.update((e.id.len() as u32).to_le_bytes());
        h.update(e.id.as_bytes());
        h.update((e.decision.len() as u32).to_le_bytes());
        h.update(e.decision.as_bytes());
        h.update(e.commit.as_bytes());
    }
    h.finalize().into()
}

/// What a cache says of the steps it follows.
struct Upto {
    steps: usize,
    head: Oid,
    digest: [u8; 32],
}

/// The commit the run started from, as the cache names it: the zero id
/// for a run that started from nothing.
fn base_id(base: Option<Oid>) -> Oid {
    base.unwrap_or(Oid::ZERO_SHA1)
}

impl Upto {
    fn of<'e>(entries: impl IntoIterator<Item = &'e AppliedStep> + Clone) -> Option<Upto> {
        let (steps, last) = entries
            .clone()
            .into_iter()
            .fold((0, None), |(n, _), e| (n + 1, Some(e.commit)));
        Some(Upto {
            steps,
            head: last?,
            digest: digest(entries),
        })
    }
}

/// The blob's bytes for `live` after the steps `upto` describes.
fn encode(run: &str, base: Option<Oid>, upto: &Upto, live: &LiveHunks) -> Option<Vec<u8>> {
    let Upto {
        steps,
        head,
        digest,
    } = upto;
    let mut body = Vec::with_capacity(128 + live.len() * 50);
    body.extend_from_slice(MAGIC);
    body.extend_from_slice(&u32::try_from(run.len()).ok()?.to_le_bytes());
    body.extend_from_slice(run.as_bytes());
    body.extend_from_slice(base_id(base).as_bytes());
    body.extend_from_slice(head.as_bytes());
    body.extend_from_slice(&(*steps as u64).to_le_bytes());
    body.extend_from_slice(digest);
    put_live(&mut body, live)?;
    let sum = crc32fast::hash(&body).to_le_bytes();
    body.extend_from_slice(&sum);
    Some(body)
}

/// Write the cache commit for `live` after `entries` (steps 1..=N of `run`,
/// N >= 1, started from `base`) into the object database; None when it
/// cannot be encoded, or when `base` is not in this repository (a shallow
/// clone cut at the run's first step replays it against nothing: its hunks
/// are not the run's, and are never published).
/// Signed as the run's receipts are (`commit.gpgSign`), so that a server
/// that takes only signed commits takes it too.
pub fn write<'e>(
    repo: &Repository,
    run: &str,
    base: Option<Oid>,
    entries: impl IntoIterator<Item = &'e AppliedStep> + Clone,
    live: &LiveHunks,
    signer: Option<&crate::sign::Signer>,
) -> crate::error::Result<Option<Oid>> {
    if base.is_some_and(|b| repo.find_commit(b).is_err()) {
        return Ok(None);
    }
    let Some(upto) = Upto::of(entries) else {
        return Ok(None);
    };
    let Some(data) = encode(run, base, &upto, live) else {
        return Ok(None);
    };
    let head = upto.head;
    let blob = repo.blob(&data)?;
    let mut tb = repo.treebuilder(None)?;
    tb.insert(BLOB, blob, 0o100644)?;
    let tree = repo.find_tree(tb.write()?)?;
    // The same cache is the same commit, whoever writes it: the time is
    // the described receipt's.
    let when = repo.find_commit(head)?.committer().when();
    let sig = git2::Signature::new("git-steps", "git-steps@localhost", &when)?;
    let message = format!(
        "git-steps: hunk cache of run {run} after {} steps (at {head})\n\nDerived data for fresh boxes; `git steps verify` never reads it.\n",
        upto.steps
    );
    Ok(Some(crate::sign::commit(
        repo,
        signer,
        &sig,
        &sig,
        &message,
        &tree,
        &[],
        None,
    )?))
}

/// How many steps the cache commit `id` says it describes (from its
/// message, as [`write`] makes it); None for anything else.
pub fn described_steps(repo: &Repository, id: Oid) -> Option<usize> {
    let commit = repo.find_commit(id).ok()?;
    let summary = commit.summary_bytes()?;
    let summary = std::str::from_utf8(summary).ok()?;
    let (head, _) = summary.rsplit_once(" steps (at ")?;
    let (_, n) = head.rsplit_once(" after ")?;
    n.parse().ok()
}

/// The live hunks a cache commit holds, and how many steps of `ledger` they
/// cover; None unless the commit is a well-formed cache of `run` whose
/// receipt is a step of `ledger` with the same receipts up to it.
pub fn read(
    repo: &Repository,
    commit: Oid,
    run: &str,
    ledger: &Ledger,
) -> Option<(usize, LiveHunks)> {
    if !ledger.problems.is_empty() || !ledger.adopted.is_empty() {
        return None;
    }
    let c = repo.find_commit(commit).ok()?;
    let id = c.tree().ok()?.get_name(BLOB)?.id();
    // The size first, from the object's header: a small object can
    // inflate to gigabytes.
    if !fits(repo, id, MAX_BYTES) {
        return None;
    }
    decode(repo.find_blob(id).ok()?.content(), run, ledger)
}

/// Whether `id` is a blob of at most `max` bytes (read from its header).
fn fits(repo: &Repository, id: Oid, max: usize) -> bool {
    repo.odb()
        .and_then(|odb| odb.read_header(id))
        .is_ok_and(|(size, kind)| kind == git2::ObjectType::Blob && size <= max)
}

/// The body of a cache file or blob after its `magic` and `run`, once its
/// CRC-32 (the last four bytes) checks; None for anything else.
pub(super) fn open<'a>(data: &'a [u8], magic: &[u8], run: &str) -> Option<Bytes<'a>> {
    let (body, sum) = data.split_at(data.len().checked_sub(4)?);
    if crc32fast::hash(body).to_le_bytes() != sum {
        return None;
    }
    let mut b = Bytes(body);
    if b.take(magic.len())? != magic {
        return None;
    }
    let run_len = b.u32()? as usize;
    if b.str(run_len)? != run {
        return None;
    }
    Some(b)
}

fn decode(data: &[u8], run: &str, ledger: &Ledger) -> Option<(usize, LiveHunks)> {
    let mut b = open(data, MAGIC, run)?;
    // Built from the same start as this box's run: a cache from a history
    // without the run's base is another replay's.
    if b.oid()? != base_id(ledger.base) {
        return None;
    }
    let head = b.oid()?;
    let n = b.u64()?;
    let want: [u8; 32] = b.take(32)?.try_into().ok()?;
    let upto = ledger.entries.get(..n)?;
    if n == 0 || upto.last()?.commit != head || digest(upto) != want {
        return None;
    }
    let live = get_live(&mut b)?;
    if !b.0.is_empty() {
        return None;
    }
    Some((n, live))
}

/// A cursor over the file's bytes; every read is bounds-checked.
pub(super) struct Bytes<'a>(pub(super) &'a [u8]);

impl<'a> Bytes<'a> {
    pub(super) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    pub(super) fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    pub(super) fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }
    pub(super) fn u64(&mut self) -> Option<usize> {
        self.take(8)
            .and_then(|b| usize::try_from(u64::from_le_bytes(b.try_into().expect("8 bytes"))).ok())
    }
    pub(super) fn oid(&mut self) -> Option<Oid> {
        self.take(20).and_then(|b| Oid::from_bytes(b).ok())
    }
    pub(super) fn str(&mut self, n: usize) -> Option<&'a str> {
        self.take(n).and_then(|b| std::str::from_utf8(b).ok())
    }
}

/// Append the live hunks to `body`; None when a field does not fit the
/// format (then nothing is cached).
pub(super) fn put_live(body: &mut Vec<u8>, live: &LiveHunks) -> Option<()> {
    let raw = live.to_raw();
    body.extend_from_slice(&(raw.len() as u64).to_le_bytes());
    for (path, lives) in raw {
        body.extend_from_slice(&u32::try_from(path.len()).ok()?.to_le_bytes());
        body.extend_from_slice(path.as_bytes());
        body.extend_from_slice(&(lives.len() as u64).to_le_bytes());
        for l in lives {
            let ml = u8::try_from(l.maker.len()).ok()?;
            body.extend_from_slice(&l.key);
            body.extend_from_slice(&l.lines.0.to_le_bytes());
            body.extend_from_slice(&l.lines.1.to_le_bytes());
            body.extend_from_slice(&l.anchor.unwrap_or(u32::MAX).to_le_bytes());
            body.push(ml);
            body.extend_from_slice(l.maker.as_bytes());
        }
    }
    Some(())
}

/// The live hunks as [`put_live`] writes them; None for anything else.
pub(super) fn get_live(b: &mut Bytes<'_>) -> Option<LiveHunks> {
    let files = b.u64()?;
    let mut raw = Vec::with_capacity(files.min(b.0.len() / 8));
    // Makers are step ids of the run: shared, not copied per hunk.
    let mut makers: std::collections::HashMap<&str, Arc<str>> = Default::default();
    for _ in 0..files {
        let path_len = b.u32()? as usize;
        let path = b.str(path_len)?.to_string();
        let m = b.u64()?;
        let mut live = Vec::with_capacity(m.min(b.0.len() / 42));
        for _ in 0..m {
            let key: [u8; 32] = b.take(32)?.try_into().ok()?;
            let (start, end, anchor) = (b.u32()?, b.u32()?, b.u32()?);
            if end < start {
                return None;
            }
            let anchor = (anchor != u32::MAX).then_some(anchor);
            let maker_len = b.u8()? as usize;
            let maker = b.str(maker_len)?;
            let maker = makers
                .entry(maker)
                .or_insert_with(|| Arc::from(maker))
                .clone();
            live.push(Live {
                key,
                lines: (start, end),
                anchor,
                maker,
            });
        }
        raw.push((path, live));
    }
    Some(LiveHunks::from_raw(raw))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(n: usize) -> Ledger {
        let entries = (0..n)
            .map(|i| AppliedStep {
                index: i,
                id: format!("s{i}"),
                decision: format!("sha256:{i:064x}"),
                commit: Oid::from_bytes(&[i as u8 + 1; 20]).unwrap(),
            })
            .collect();
        Ledger::from_parts(
            Some(Oid::from_bytes(&[n as u8; 20]).unwrap()),
            None,
            entries,
        )
    }

    fn live() -> LiveHunks {
        let mut l = LiveHunks::default();
        let files = vec![crate::tree::hunks::identities("a.txt", b"", b"x\ny\n")];
        l.record("s1", &files);
        l
    }

    #[test]
    fn a_cache_is_read_back_for_the_ledger_it_describes() {
        let full = ledger(5);
        let data = encode("r", None, &Upto::of(&full.entries[..3]).unwrap(), &live()).unwrap();
        let (n, got) = decode(&data, "r", &full).unwrap();
        assert_eq!(n, 3);
        assert_eq!(got.len(), live().len());
        // A longer ledger with the same first steps: still usable.
        assert!(decode(&data, "r", &ledger(9)).is_some());
    }

    #[test]
    fn a_blob_is_measured_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let blob = repo.blob(&[0u8; 200]).unwrap();
        assert!(fits(&repo, blob, 200));
        assert!(!fits(&repo, blob, 199));
        let tree = repo.treebuilder(None).unwrap().write().unwrap();
        assert!(!fits(&repo, tree, 1 << 20), "not a blob");
    }

    #[test]
    fn anything_else_is_ignored() {
        let full = ledger(5);
        let data = encode("r", None, &Upto::of(&full.entries[..3]).unwrap(), &live()).unwrap();
        // Another run.
        assert!(decode(&data, "other", &full).is_none());
        // A ledger shorter than the cache, or one whose receipts differ.
        assert!(decode(&data, "r", &ledger(2)).is_none());
        let mut changed = ledger(5);
        changed.entries[1].decision = "sha256:forged".into();
        assert!(decode(&data, "r", &changed).is_none());
        // Issue 28 item 4: the same receipts replayed from another start
        // (a shallow clone that lacked the run's base replays its first
        // step against nothing).
        let mut based = ledger(5);
        based.base = Some(Oid::from_bytes(&[0xba; 20]).unwrap());
        assert!(decode(&data, "r", &based).is_none());
        let from_base = encode(
            "r",
            based.base,
            &Upto::of(&based.entries[..3]).unwrap(),
            &live(),
        )
        .unwrap();
        assert!(decode(&from_base, "r", &based).is_some());
        assert!(decode(&from_base, "r", &full).is_none());
        // Every flipped byte and every truncation.
        for i in 0..data.len() {
            let mut d = data.clone();
            d[i] ^= 0x40;
            assert!(decode(&d, "r", &full).is_none(), "byte {i}");
            assert!(decode(&data[..i], "r", &full).is_none(), "cut at {i}");
        }
    }
}
