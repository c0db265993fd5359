//! The artifact fingerprint of a run's head, spliced from the last one.
//!
//! Owns `steps/artifact/stream` in the worktree's git directory: the exact
//! bytes the artifact fingerprint hashes for one tree (SPEC
//! "Fingerprints"), after that tree's id, with a CRC-32 at the end.
//! Invariant: a spliced fingerprint is the full one ([`super::artifact`]).
//! The bytes of subtrees both trees share are copied from the stream;
//! every other entry is computed again. Wherever the splice cannot vouch
//! for that — no stream, a torn or foreign one, a tree whose entries are
//! not strictly in git's order or whose names hold a `/`, a missing
//! object, a tree nested too deep — it gives up and the caller computes
//! the whole fingerprint (and saves its stream for the next process).

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use git2::{ObjectType, Oid, Repository, Tree};
use sha2::{Digest, Sha256};

use crate::git::hex;

const MAGIC: &[u8] = b"git-steps artifact stream 1\n";
/// After the stream: its SHA-256 (the fingerprint), its length, and the
/// CRC-32 of every byte before the CRC.
const TRAILER: u64 = 32 + 8 + 4;
/// The stream is read and written in pieces this large: a few system
/// calls a step however large the tree (a 100,000-file stream is about
/// 5.6 MB).
const BUFFER: usize = 1 << 20;
/// Deeper than this, the splice gives up (the full computation decides).
const MAX_DEPTH: usize = crate::git::MAX_TREE_DEPTH;

fn path(repo: &Repository) -> PathBuf {
    repo.path().join("steps").join("artifact").join("stream")
}

/// Where the fingerprint's bytes go: the SHA-256 that is the fingerprint
/// and, when a stream is kept, a temporary file beside the stream.
pub(super) struct Emitter {
    sha: Sha256,
    out: Option<Out>,
}

struct Out {
    file: BufWriter<tempfile::NamedTempFile>,
    crc: crc32fast::Hasher,
    len: u64,
    failed: bool,
}

impl Out {
    fn write(&mut self, bytes: &[u8]) {
        self.crc.update(bytes);
        self.failed |= self.file.write_all(bytes).is_err();
    }
}

impl Emitter {
    /// Only the fingerprint.
    pub(super) fn hashing() -> Emitter {
        Emitter {
            sha: Sha256::new(),
            out: None,
        }
    }

    /// The fingerprint of the tree `root`, its stream kept for the next
    /// process (when a temporary file can be made; a cache, never an
    /// error).
    pub(super) fn keeping(repo: &Repository, root: Oid) -> Emitter {
        let target = path(repo);
        let out = target.parent().and_then(|dir| {
            let _ = std::fs::create_dir_all(dir);
            // Written under the runner's lock: a temporary file here is
            // what a killed process left mid-write.
            if let Ok(entries) = std::fs::read_dir(dir) {
                for e in entries.flatten() {
                    if e.file_name().to_string_lossy().starts_with(".tmp") {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
            let tmp = tempfile::NamedTempFile::new_in(dir).ok()?;
            let mut out = Out {
                file: BufWriter::with_capacity(BUFFER, tmp),
                crc: crc32fast::Hasher::new(),
                len: 0,
                failed: false,
            };
            out.write(MAGIC);
            out.write(root.as_bytes());
            Some(out)
        });
        Emitter {
            sha: Sha256::new(),
            out,
        }
    }

    /// One entry: `<mode> <path>\0<32-byte content hash>`.
    pub(super) fn entry(&mut self, mode: u32, path: &[u8], hash: &[u8; 32]) {
        let head = format!("{mode:o} ");
        for part in [head.as_bytes(), path, &[0u8], hash] {
            self.raw(part);
        }
    }

    /// Bytes of the stream as they are.
    fn raw(&mut self, bytes: &[u8]) {
        self.sha.update(bytes);
        if let Some(out) = &mut self.out {
            out.write(bytes);
            out.len += bytes.len() as u64;
        }
    }

    /// The fingerprint; the stream, when kept, is put in place.
    pub(super) fn finish(self, repo: &Repository) -> String {
        let digest: [u8; 32] = self.sha.finalize().into();
        if let Some(mut out) = self.out {
            let len = out.len.to_le_bytes();
            out.write(&digest);
            out.write(&len);
            let crc = out.crc.clone().finalize().to_le_bytes();
            out.failed |= out.file.write_all(&crc).is_err();
            let target = path(repo);
            if !out.failed {
                if let Ok(tmp) = out.file.into_inner() {
                    if tmp.persist(&target).is_ok() {
                        let _ =
                            crate::git::shared::created_under(repo.path(), repo.path(), &target);
                        crate::crash::point("fingerprint-streamed", "artifact");
                    }
                }
            }
        }
        format!("sha256:{}", hex(&digest))
    }
}

/// A CRC-32 over everything read through it.
struct Crc<R> {
    inner: R,
    crc: crc32fast::Hasher,
}

impl<R: Read> Read for Crc<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.crc.update(&buf[..n]);
        Ok(n)
    }
}

/// The stream on disk, read entry by entry.
struct Old {
    r: BufReader<Crc<std::io::Take<File>>>,
    /// The tree the stream is of.
    root: Oid,
    /// Its fingerprint, as the trailer says.
    fingerprint: [u8; 32],
    /// The CRC the trailer says.
    crc: u32,
    /// Stream bytes not yet read.
    left: u64,
    /// The current entry (`<mode> <path>\0<hash>`), when `has`.
    cur: Vec<u8>,
    has: bool,
    /// The bytes were not entries: nothing read from them counts.
    bad: bool,
}

impl Old {
    fn open(repo: &Repository) -> Option<Old> {
        let file = File::open(path(repo)).ok()?;
        let len = file.metadata().ok()?.len();
        let head = MAGIC.len() as u64 + 20;
        if len < head + TRAILER {
            return None;
        }
        let mut trailer = [0u8; TRAILER as usize];
        file.read_exact_at(&mut trailer, len - TRAILER).ok()?;
        let fingerprint: [u8; 32] = trailer[..32].try_into().ok()?;
        let stream = u64::from_le_bytes(trailer[32..40].try_into().ok()?);
        let crc = u32::from_le_bytes(trailer[40..].try_into().ok()?);
        if head.checked_add(stream)?.checked_add(TRAILER)? != len {
            return None;
        }
        let mut r = BufReader::with_capacity(
            BUFFER,
            Crc {
                inner: file.take(len - 4),
                crc: crc32fast::Hasher::new(),
            },
        );
        let mut first = vec![0u8; head as usize];
        r.read_exact(&mut first).ok()?;
        if &first[..MAGIC.len()] != MAGIC {
            return None;
        }
        let root = Oid::from_bytes(&first[MAGIC.len()..]).ok()?;
        let mut old = Old {
            r,
            root,
            fingerprint,
            crc,
            left: stream,
            cur: Vec::new(),
            has: false,
            bad: false,
        };
        old.advance();
        Some(old)
    }

    /// The next entry, or none at the stream's end.
    fn advance(&mut self) {
        self.has = false;
        if self.left == 0 || self.bad {
            return;
        }
        self.cur.clear();
        let whole = match self.r.read_until(0, &mut self.cur) {
            Ok(n) if n > 0 && self.cur.last() == Some(&0) => {
                let at = self.cur.len();
                self.cur.resize(at + 32, 0);
                self.r.read_exact(&mut self.cur[at..]).is_ok()
            }
            _ => false,
        };
        match self.cur.len() as u64 {
            n if whole && n <= self.left && self.cur.contains(&b' ') => {
                self.left -= n;
                self.has = true;
            }
            _ => self.bad = true,
        }
    }

    fn path(&self) -> &[u8] {
        let space = self.cur.iter().position(|&b| b == b' ').unwrap_or(0);
        &self.cur[space + 1..self.cur.len() - 33]
    }

    /// Past every entry before `path`.
    fn skip_below(&mut self, path: &[u8]) {
        while self.has && self.path() < path {
            self.advance();
        }
    }

    /// Whether the rest of the file matches its CRC (read to the end).
    fn sound(mut self) -> bool {
        if self.bad {
            return false;
        }
        let _ = std::io::copy(&mut self.r, &mut std::io::sink());
        self.r.get_ref().crc.clone().finalize() == self.crc
    }
}

/// The artifact fingerprint of `tree` from the stream an earlier process
/// kept, the new stream kept in its place; None where the splice cannot
/// vouch for it (the caller computes it in full). Blobs hashed here go on
/// `new`.
pub(super) fn spliced(
    repo: &Repository,
    tree: &Tree<'_>,
    keep: bool,
    new: &mut Vec<(Oid, [u8; 32])>,
) -> Option<String> {
    let mut old = Old::open(repo)?;
    if old.root == tree.id() {
        let fingerprint = old.fingerprint;
        return old.sound().then(|| format!("sha256:{}", hex(&fingerprint)));
    }
    let mut out = match keep {
        true => Emitter::keeping(repo, tree.id()),
        false => Emitter::hashing(),
    };
    let mut splice = Splice {
        repo,
        old: &mut old,
        out: &mut out,
        new,
    };
    splice.dir(splice.old.root, tree.id(), &mut Vec::new(), 0)?;
    if !old.sound() {
        return None;
    }
    Some(out.finish(repo))
}

struct Splice<'a, 'r> {
    repo: &'r Repository,
    old: &'a mut Old,
    out: &'a mut Emitter,
    new: &'a mut Vec<(Oid, [u8; 32])>,
}

impl Splice<'_, '_> {
    /// The entries under `prefix` (empty, or ending in `/`) of the tree
    /// `new`, where the stream holds them for the tree `old`.
    fn dir(&mut self, old: Oid, new: Oid, prefix: &mut Vec<u8>, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        let old_tree = self.repo.find_tree(old).ok()?;
        let new_tree = self.repo.find_tree(new).ok()?;
        let tree = |kind| kind == Some(ObjectType::Tree);
        let before: std::collections::HashMap<(Vec<u8>, bool), (Oid, i32)> = ordered(&old_tree)?
            .into_iter()
            .map(|(name, kind, id, mode)| ((name, tree(kind)), (id, mode)))
            .collect();
        for (name, kind, id, mode) in ordered(&new_tree)? {
            let is_tree = tree(kind);
            let len = prefix.len();
            prefix.extend_from_slice(&name);
            let was = before.get(&(name, is_tree)).copied();
            if is_tree {
                prefix.push(b'/');
                match was {
                    Some((same, _)) if same == id => {
                        self.old.skip_below(prefix);
                        while self.old.has && self.old.path().starts_with(prefix) {
                            self.out.raw(&self.old.cur);
                            self.old.advance();
                        }
                    }
                    Some((before, _)) => self.dir(before, id, prefix, depth + 1)?,
                    None => {
                        prefix.pop();
                        self.fresh(id, prefix)?;
                    }
                }
            } else if was == Some((id, mode)) {
                self.old.skip_below(prefix);
                if !(self.old.has && self.old.path() == prefix.as_slice()) {
                    return None;
                }
                self.out.raw(&self.old.cur);
                self.old.advance();
            } else {
                let hash = super::entry_hash(self.repo, id, kind, self.new).ok()?;
                self.out.entry(mode as u32, prefix, &hash);
            }
            prefix.truncate(len);
        }
        Some(())
    }

    /// Every entry of the subtree `id` at `path`, which the stream does not
    /// hold, as the full computation orders them.
    fn fresh(&mut self, id: Oid, path: &[u8]) -> Option<()> {
        let tree = self.repo.find_tree(id).ok()?;
        let mut entries = Vec::new();
        super::collect(self.repo, &tree, path, &mut entries).ok()?;
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        for (p, mode, oid, kind) in entries {
            let hash = super::entry_hash(self.repo, oid, Some(kind), self.new).ok()?;
            self.out.entry(mode, &p, &hash);
        }
        Some(())
    }
}

/// A tree's entries (name, kind, id, mode), when they are strictly in
/// git's order (a tree's name compared as if it ended in `/`) and no name
/// is empty or holds a `/`: then every path under one entry sorts before
/// every path under the next, and the tree's part of the stream is its
/// entries' parts in turn. None otherwise.
fn ordered(tree: &Tree<'_>) -> Option<Vec<Listed>> {
    let mut out: Vec<Listed> = Vec::with_capacity(tree.len());
    let mut last: Option<Vec<u8>> = None;
    for e in tree.iter() {
        let name = e.name_bytes();
        if name.is_empty() || name.contains(&b'/') {
            return None;
        }
        let kind = e.kind();
        let mut key = name.to_vec();
        if kind == Some(ObjectType::Tree) {
            key.push(b'/');
        }
        if last.as_ref().is_some_and(|l| *l >= key) {
            return None;
        }
        last = Some(key);
        out.push((name.to_vec(), kind, e.id(), e.filemode()));
    }
    Some(out)
}

/// An entry of a tree: name, kind, id, mode.
type Listed = (Vec<u8>, Option<ObjectType>, Oid, i32);

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A tree made from paths (mode, content), nested as the paths say.
    fn build(repo: &Repository, files: &BTreeMap<String, (i32, Vec<u8>)>) -> Oid {
        type Flat<'a> = (&'a str, i32, &'a [u8]);
        fn level(repo: &Repository, files: &[Flat<'_>]) -> Oid {
            let mut b = repo.treebuilder(None).unwrap();
            let mut dirs: BTreeMap<&str, Vec<Flat<'_>>> = BTreeMap::new();
            for &(p, mode, content) in files {
                match p.split_once('/') {
                    Some((d, rest)) => dirs.entry(d).or_default().push((rest, mode, content)),
                    None => {
                        let id = if mode == 0o160000 {
                            Oid::hash_object(ObjectType::Commit, content).unwrap()
                        } else {
                            repo.blob(content).unwrap()
                        };
                        b.insert(p, id, mode).unwrap();
                    }
                }
            }
            for (d, inner) in dirs {
                let id = level(repo, &inner);
                b.insert(d, id, 0o040000).unwrap();
            }
            b.write().unwrap()
        }
        let flat: Vec<(&str, i32, &[u8])> = files
            .iter()
            .map(|(p, (m, c))| (p.as_str(), *m, c.as_slice()))
            .collect();
        level(repo, &flat)
    }

    /// A small xorshift: the same trees for a seed.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
            xs[(self.next() % xs.len() as u64) as usize]
        }
    }

    /// Names whose order as paths and in git's tree order could differ
    /// if the splice got either wrong.
    const NAMES: &[&str] = &["a", "a-b", "a.b", "a0", "ab", "b", "\u{e9}", "z z"];

    /// Random trees, each from the last by a few changes of every kind
    /// (edits, modes, symlinks, submodules, deletions, a file where a
    /// directory was and back): the spliced fingerprint is the full one at
    /// every step, and the splice (not the full computation) gave it.
    #[test]
    fn a_spliced_fingerprint_is_the_full_one() {
        for seed in [1u64, 0x51, 0xdead_beef] {
            let d = tempfile::tempdir().unwrap();
            let repo = Repository::init(d.path()).unwrap();
            let mut rng = Rng(seed);
            let mut files: BTreeMap<String, (i32, Vec<u8>)> = BTreeMap::new();
            for i in 0..60 {
                let depth = 1 + rng.next() % 3;
                let p: Vec<&str> = (0..depth).map(|_| rng.pick(NAMES)).collect();
                files.insert(p.join("/"), (0o100644, format!("{i}\n").into_bytes()));
            }
            let dirs: Vec<String> = files
                .keys()
                .filter(|p| files_under(p, &files))
                .cloned()
                .collect();
            for p in dirs {
                files.remove(&p);
            }
            let first = build(&repo, &files);
            let first = repo.find_tree(first).unwrap();
            assert_eq!(
                super::super::artifact_remembered(&repo, Some(&first), true).unwrap(),
                super::super::artifact(&repo, Some(&first)).unwrap()
            );
            for step in 0..40 {
                for _ in 0..1 + rng.next() % 4 {
                    change(&mut rng, &mut files, step);
                }
                let id = build(&repo, &files);
                let tree = repo.find_tree(id).unwrap();
                let full = super::super::artifact(&repo, Some(&tree)).unwrap();
                let spliced = spliced(&repo, &tree, true, &mut Vec::new());
                assert_eq!(
                    spliced.as_deref(),
                    Some(full.as_str()),
                    "seed {seed} step {step}"
                );
                // The same tree again: from the stream's trailer.
                let again = spliced_again(&repo, &tree);
                assert_eq!(again.as_deref(), Some(full.as_str()));
            }
        }
    }

    /// A stream torn, damaged, of a tree this repository lacks, or a tree
    /// out of git's order or with a `/` in a name: the splice gives up,
    /// and the fingerprint is still the full one.
    #[test]
    fn the_splice_gives_up_rather_than_guess() {
        let d = tempfile::tempdir().unwrap();
        let repo = Repository::init(d.path()).unwrap();
        let mut files: BTreeMap<String, (i32, Vec<u8>)> = BTreeMap::new();
        for i in 0..30 {
            files.insert(
                format!("d{}/f{i}", i % 5),
                (0o100644, format!("{i}\n").into_bytes()),
            );
        }
        let base = repo.find_tree(build(&repo, &files)).unwrap();
        let stream = path(&repo);
        let remembered =
            |tree: &Tree<'_>| super::super::artifact_remembered(&repo, Some(tree), true).unwrap();
        let full = |tree: &Tree<'_>| super::super::artifact(&repo, Some(tree)).unwrap();
        assert_eq!(remembered(&base), full(&base));
        let good = std::fs::read(&stream).unwrap();
        files.insert("d1/f1".into(), (0o100644, b"changed\n".to_vec()));
        let next = repo.find_tree(build(&repo, &files)).unwrap();
        let n = good.len();
        let damaged: Vec<(&str, Vec<u8>)> = vec![
            ("a content hash flipped", {
                let mut b = good.clone();
                b[n / 2] ^= 1;
                b
            }),
            ("the tail cut", good[..n - 7].to_vec()),
            ("a run of zeros", {
                let mut b = good.clone();
                b[60..120].fill(0);
                b
            }),
            ("another tree's id", {
                let mut b = good.clone();
                b[MAGIC.len()] ^= 0xff;
                b
            }),
            ("nothing", Vec::new()),
        ];
        for (what, bytes) in damaged {
            std::fs::write(&stream, &bytes).unwrap();
            assert_eq!(spliced(&repo, &next, true, &mut Vec::new()), None, "{what}");
            std::fs::write(&stream, &bytes).unwrap();
            assert_eq!(remembered(&next), full(&next), "{what}");
            // The full computation kept a sound stream again.
            assert_eq!(
                spliced(&repo, &next, true, &mut Vec::new()),
                Some(full(&next)),
                "{what}"
            );
        }
        // Trees git would not write: entries out of order, a `/` in a name.
        let blob = repo.blob(b"x\n").unwrap();
        let raw = |entries: &[(&str, &[u8])]| {
            let mut bytes = Vec::new();
            for (name, mode) in entries {
                bytes.extend_from_slice(mode);
                bytes.push(b' ');
                bytes.extend_from_slice(name.as_bytes());
                bytes.push(0);
                bytes.extend_from_slice(blob.as_bytes());
            }
            repo.odb().unwrap().write(ObjectType::Tree, &bytes).unwrap()
        };
        let d0 = base.get_name("d0").unwrap().id();
        for crafted in [
            raw(&[("z", b"100644"), ("a", b"100644")]),
            raw(&[("d0/f0", b"100644"), ("a", b"100644")]),
        ] {
            // As the root (read by the splice: refused), and as a new
            // subtree beside one the stream has (read whole and sorted, as
            // the full computation does).
            let mut b = repo.treebuilder(None).unwrap();
            b.insert("d0", d0, 0o040000).unwrap();
            b.insert("x", crafted, 0o040000).unwrap();
            let holder = b.write().unwrap();
            for (id, refused) in [(crafted, true), (holder, false)] {
                let tree = repo.find_tree(id).unwrap();
                remembered(&base);
                let got = spliced(&repo, &tree, true, &mut Vec::new());
                if refused {
                    assert_eq!(got, None);
                } else {
                    assert_eq!(got, Some(full(&tree)));
                }
                remembered(&base);
                assert_eq!(remembered(&tree), full(&tree));
            }
        }
    }

    fn spliced_again(repo: &Repository, tree: &Tree<'_>) -> Option<String> {
        spliced(repo, tree, true, &mut Vec::new())
    }

    /// Whether some other path lies under `p` (then `p` cannot be a file).
    fn files_under(p: &str, files: &BTreeMap<String, (i32, Vec<u8>)>) -> bool {
        let dir = format!("{p}/");
        files
            .range(dir.clone()..)
            .next()
            .is_some_and(|(q, _)| q.starts_with(&dir))
    }

    fn change(rng: &mut Rng, files: &mut BTreeMap<String, (i32, Vec<u8>)>, step: usize) {
        let existing: Vec<String> = files.keys().cloned().collect();
        let any = |rng: &mut Rng| existing[(rng.next() % existing.len() as u64) as usize].clone();
        match rng.next() % 7 {
            0 => {
                let p = any(rng);
                files.insert(p, (0o100644, format!("edit {step}\n").into_bytes()));
            }
            1 => {
                let p = any(rng);
                files.remove(&p);
            }
            2 => {
                let p = any(rng);
                files
                    .entry(p)
                    .and_modify(|e| e.0 = if e.0 == 0o100755 { 0o100644 } else { 0o100755 });
            }
            3 => {
                let p = any(rng);
                files.insert(p, (0o120000, b"target".to_vec()));
            }
            4 => {
                let p = any(rng);
                files.insert(p, (0o160000, format!("sub {step}").into_bytes()));
            }
            5 => {
                // A file where a directory was (its files go).
                let p = any(rng);
                let top = p.split('/').next().unwrap().to_string();
                let dir = format!("{top}/");
                files.retain(|q, _| !q.starts_with(&dir));
                files.insert(top, (0o100644, b"was a directory\n".to_vec()));
            }
            _ => {
                // A directory where a file was, or a new path anywhere.
                let p = any(rng);
                let q = format!("{p}/{}", rng.pick(NAMES));
                files.remove(&p);
                let mut prefix = String::new();
                for part in q.split('/') {
                    files.remove(&format!("{prefix}{part}"));
                    prefix.push_str(part);
                    prefix.push('/');
                }
                let under = format!("{q}/");
                files.retain(|f, _| !f.starts_with(&under));
                files.insert(q, (0o100644, format!("new {step}\n").into_bytes()));
            }
        }
        if files.is_empty() {
            files.insert("a".into(), (0o100644, b"again\n".to_vec()));
        }
    }
}
