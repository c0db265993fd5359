//! Bulk reading of a long run's commits straight from the pack files, on
//! every core: what makes the first scan of a long run on a fresh box
//! cheaper than `git log`.
//!
//! A scan follows first parents one commit at a time, so libgit2 looks
//! each commit up in the pack index and inflates it on one core. A fresh
//! clone's pack stores its commits together at the front (git's write
//! order), so this module reads that region once, in order, inflating and
//! parsing the commits (receipt included) on all cores, and hands the scan
//! a map from commit id to what it needs.
//!
//! Owns: reading pack index (version 2) and pack files for the commits they
//! store whole. Invariant: it answers for an object id only with the bytes
//! the pack stores under that id, which are the bytes libgit2 returns for
//! it, and parsed by the same functions; anything it is unsure of (a
//! deltified commit, a pack or index it cannot read, a commit outside the
//! packs' commit region, loose objects, alternates) it leaves out, and the
//! scan reads that commit through libgit2 as before. With or without it, a
//! scan gives the same ledger.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use git2::{Oid, Repository};

use crate::history::receipt::{self, ParseError, Receipt};

/// Runs shorter than this are walked: a bulk read would not pay for itself.
pub const MIN_RUN: u64 = 4096;

/// A bulk read is tried only when the packs hold at most this many objects
/// per step of the run: a short run on a long history (a large project's
/// packs) reads only its own commits.
const MAX_OBJECTS_PER_STEP: u64 = 16;

/// No bulk read over packs holding more objects than this (an index costs
/// about 40 bytes an object while its pack is read).
const MAX_OBJECTS: u64 = 4_000_000;

/// Bytes of pack read at a time (and the largest commit read in bulk).
const CHUNK: usize = 4 << 20;

/// This many entries in a row that are not whole commits end the pack's
/// commit region (or show that its front holds none).
const END_OF_REGION: usize = 1024;

/// What a scan needs of one commit.
pub struct Scanned {
    pub first_parent: Option<Oid>,
    pub parents: usize,
    pub receipt: std::result::Result<Receipt, ParseError>,
}

impl Scanned {
    pub fn from_raw(raw: RawCommit<'_>) -> Scanned {
        let receipt = match raw.message {
            Some(m) => receipt::parse(m),
            None => Err(ParseError::NotAReceipt),
        };
        Scanned {
            first_parent: raw.first_parent,
            parents: raw.parents,
            receipt,
        }
    }
}

/// The commits read in bulk, a chunk of pack at a time, each handed out
/// once. At most two chunks' commits are held: the one the scan is in and,
/// when it asks for a commit that one lacks, the next.
pub struct Bulk {
    reader: Reader,
    current: Chunk,
    ahead: Option<Chunk>,
}

impl Bulk {
    /// The commit `oid`, if the bulk read holds it (then no longer).
    pub fn take(&mut self, oid: Oid) -> Option<Scanned> {
        if self.current.exhausted() {
            self.current = match self.ahead.take() {
                Some(c) => c,
                None => self.reader.next_chunk().unwrap_or_default(),
            };
        }
        if let Some(s) = self.current.take(oid) {
            return Some(s);
        }
        // Not in this chunk: a commit outside the packs (the scan reads it
        // through libgit2), or the scan has moved on to the next chunk
        // (the rest of this one belongs to other branches).
        if self.ahead.is_none() {
            self.ahead = self.reader.next_chunk();
        }
        let s = self.ahead.as_mut()?.take(oid)?;
        if let Some(next) = self.ahead.take() {
            self.current = next;
        }
        Some(s)
    }
}

/// One chunk's commits, in pack order: a linear run's commits lie newest
/// first, the order a scan asks for them, so most lookups are the next one.
#[derive(Default)]
struct Chunk {
    commits: Vec<Option<(Oid, Scanned)>>,
    /// Where the next lookup is expected.
    next: usize,
    /// Commits not handed out yet.
    left: usize,
    /// Built on the first lookup that is not the next one.
    positions: Option<HashMap<Oid, usize>>,
}

impl Chunk {
    fn new(commits: Vec<(Oid, Scanned)>) -> Chunk {
        Chunk {
            left: commits.len(),
            commits: commits.into_iter().map(Some).collect(),
            next: 0,
            positions: None,
        }
    }

    fn exhausted(&self) -> bool {
        self.left == 0
    }

    fn take(&mut self, oid: Oid) -> Option<Scanned> {
        let at = match self.commits.get(self.next) {
            Some(Some((o, _))) if *o == oid => self.next,
            _ => {
                let commits = &self.commits;
                let positions = self.positions.get_or_insert_with(|| {
                    commits
                        .iter()
                        .enumerate()
                        .filter_map(|(i, c)| c.as_ref().map(|(o, _)| (*o, i)))
                        .collect()
                });
                positions.remove(&oid)?
            }
        };
        let (_, s) = self.commits[at].take()?;
        self.next = at + 1;
        self.left -= 1;
        Some(s)
    }
}

/// Read the packs' commits in bulk for a run of `run_len` steps, or None
/// when that would not pay (a short run, packs much larger than the run)
/// or the packs cannot be read this way.
pub fn read(repo: &Repository, run_len: u64) -> Option<Bulk> {
    if run_len < MIN_RUN {
        return None;
    }
    let dir = repo.commondir().join("objects").join("pack");
    let mut packs = Vec::new();
    let mut objects = 0u64;
    for e in std::fs::read_dir(&dir).ok()?.flatten() {
        let name = e.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".idx")) else {
            continue;
        };
        // Only the index's header is read to decide; each index is read
        // whole when its pack is.
        if let Some(n) = PackIndex::count(&e.path()) {
            objects += n;
            packs.push((e.path(), dir.join(format!("{stem}.pack"))));
        }
    }
    // The Step-Index that says how long the run is can be forged: the
    // object count bounds what a bulk read holds whatever it says.
    if packs.is_empty()
        || objects > run_len.saturating_mul(MAX_OBJECTS_PER_STEP)
        || objects > MAX_OBJECTS
    {
        return None;
    }
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8);
    let mut reader = Reader {
        packs: packs.into_iter(),
        open: None,
        threads,
        buf: Vec::new(),
    };
    let current = reader.next_chunk()?;
    Some(Bulk {
        reader,
        current,
        ahead: None,
    })
}

/// Reads the packs' commit regions a chunk at a time.
struct Reader {
    /// Index and pack files not read yet.
    packs: std::vec::IntoIter<(PathBuf, PathBuf)>,
    open: Option<OpenPack>,
    threads: usize,
    buf: Vec<u8>,
}

impl Reader {
    /// The next chunk holding commits, or None when the packs' commit
    /// regions are read.
    fn next_chunk(&mut self) -> Option<Chunk> {
        loop {
            let Some(pack) = self.open.as_mut() else {
                let (idx, path) = self.packs.next()?;
                // A pack that cannot be read leaves its commits to libgit2.
                self.open = PackIndex::read(&idx).and_then(|ix| OpenPack::new(&path, ix));
                continue;
            };
            match pack.chunk(&mut self.buf, self.threads) {
                Some(c) if c.is_empty() => continue,
                Some(c) => return Some(Chunk::new(c)),
                None => self.open = None,
            }
        }
    }
}

/// A pack being read, with its entries in pack order.
struct OpenPack {
    file: File,
    len: u64,
    ix: PackIndex,
    /// Entry numbers in pack order; each entry ends where the next begins
    /// (the last one where the pack's trailing checksum begins).
    order: Vec<u32>,
    /// The next entry to read.
    k: usize,
    others_in_a_row: usize,
}

/// A version 2 pack index: object ids (read in place) and their offsets in
/// the pack.
struct PackIndex {
    data: Vec<u8>,
    offsets: Vec<u64>,
}

const IDX_OIDS_AT: usize = 8 + 256 * 4;

impl PackIndex {
    /// The number of objects a version 2 index lists, from its header.
    fn count(path: &Path) -> Option<u64> {
        use std::io::Read;
        let mut head = [0u8; IDX_OIDS_AT];
        File::open(path).ok()?.read_exact(&mut head).ok()?;
        if &head[..4] != b"\xfftOc" || head[4..8] != [0, 0, 0, 2] {
            return None;
        }
        Some(u64::from(u32::from_be_bytes(
            head[8 + 255 * 4..IDX_OIDS_AT].try_into().ok()?,
        )))
    }

    fn read(path: &Path) -> Option<PackIndex> {
        let data = std::fs::read(path).ok()?;
        let be32 = |at: usize| -> Option<u32> {
            Some(u32::from_be_bytes(data.get(at..at + 4)?.try_into().ok()?))
        };
        if data.get(..4)? != b"\xfftOc" || be32(4)? != 2 {
            return None;
        }
        let n = be32(8 + 255 * 4)? as usize;
        let offsets_at = IDX_OIDS_AT + n * (20 + 4);
        let large_at = offsets_at + n * 4;
        // The large-offset table fills what lies between the small offsets
        // and the two trailing 20-byte checksums (SHA-1 only).
        let large = data.len().checked_sub(large_at + 40)?;
        if large % 8 != 0 {
            return None;
        }
        let mut offsets = Vec::with_capacity(n);
        for i in 0..n {
            let small = be32(offsets_at + i * 4)?;
            offsets.push(if small & 0x8000_0000 == 0 {
                u64::from(small)
            } else {
                let at = large_at + (small & 0x7fff_ffff) as usize * 8;
                if at + 8 > large_at + large {
                    return None;
                }
                u64::from_be_bytes(data[at..at + 8].try_into().ok()?)
            });
        }
        Some(PackIndex { data, offsets })
    }

    /// The id of entry `i` (within the table: `read` checked its size).
    fn oid(&self, i: usize) -> [u8; 20] {
        let at = IDX_OIDS_AT + i * 20;
        let mut id = [0u8; 20];
        id.copy_from_slice(&self.data[at..at + 20]);
        id
    }
}

/// One whole commit in the pack: its id and where its deflated bytes lie.
struct Job {
    oid: [u8; 20],
    /// Within the chunk read.
    start: usize,
    end: usize,
    size: usize,
}

impl OpenPack {
    fn new(path: &Path, ix: PackIndex) -> Option<OpenPack> {
        let file = File::open(path).ok()?;
        let len = file.metadata().ok()?.len();
        let mut head = [0u8; 12];
        read_at(&file, &mut head, 0)?;
        if &head[..4] != b"PACK" || !matches!(head[4..8], [0, 0, 0, 2] | [0, 0, 0, 3]) {
            return None;
        }
        let mut order: Vec<u32> = (0..ix.offsets.len() as u32).collect();
        order.sort_unstable_by_key(|&i| ix.offsets[i as usize]);
        Some(OpenPack {
            file,
            len,
            ix,
            order,
            k: 0,
            others_in_a_row: 0,
        })
    }

    fn end_of(&self, k: usize) -> u64 {
        self.order
            .get(k + 1)
            .map_or(self.len.saturating_sub(20), |&j| {
                self.ix.offsets[j as usize]
            })
    }

    /// The commits of the next chunk of the pack's commit region (perhaps
    /// none), or None when the region is read or the pack cannot be.
    fn chunk(&mut self, buf: &mut Vec<u8>, threads: usize) -> Option<Vec<(Oid, Scanned)>> {
        if self.k >= self.order.len() || self.others_in_a_row >= END_OF_REGION {
            return None;
        }
        let chunk_at = self.ix.offsets[self.order[self.k] as usize];
        let want = (self.len.saturating_sub(20).saturating_sub(chunk_at) as usize).min(CHUNK);
        buf.resize(want, 0);
        read_at(&self.file, buf, chunk_at)?;
        let mut jobs = Vec::new();
        while self.k < self.order.len() && self.others_in_a_row < END_OF_REGION {
            let i = self.order[self.k] as usize;
            let s = self.ix.offsets[i] - chunk_at;
            let e = self.end_of(self.k).checked_sub(chunk_at)?;
            if e > want as u64 {
                if s == 0 {
                    // One entry larger than a chunk: never a commit read
                    // in bulk.
                    self.k += 1;
                    self.others_in_a_row += 1;
                }
                break;
            }
            let (s, e) = (s as usize, e as usize);
            match entry_header(buf.get(s..e)?) {
                Some((1, size, header_len)) => {
                    jobs.push(Job {
                        oid: self.ix.oid(i),
                        start: s + header_len,
                        end: e,
                        size,
                    });
                    self.others_in_a_row = 0;
                }
                _ => self.others_in_a_row += 1,
            }
            self.k += 1;
        }
        Some(inflate_all(buf, &jobs, threads))
    }
}

/// A pack entry's type, inflated size and header length.
fn entry_header(b: &[u8]) -> Option<(u8, usize, usize)> {
    let mut c = *b.first()?;
    let kind = (c >> 4) & 7;
    let mut size = usize::from(c & 15);
    let mut shift = 4;
    let mut at = 1;
    while c & 0x80 != 0 {
        c = *b.get(at)?;
        if shift > 56 {
            return None;
        }
        size |= usize::from(c & 0x7f) << shift;
        shift += 7;
        at += 1;
    }
    Some((kind, size, at))
}

/// Inflate and parse `jobs` on up to `threads` threads, in order.
fn inflate_all(chunk: &[u8], jobs: &[Job], threads: usize) -> Vec<(Oid, Scanned)> {
    if jobs.is_empty() {
        return Vec::new();
    }
    let per = jobs.len().div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .chunks(per)
            .map(|part| s.spawn(move || inflate_part(chunk, part)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

fn inflate_part(chunk: &[u8], jobs: &[Job]) -> Vec<(Oid, Scanned)> {
    let mut out = Vec::with_capacity(jobs.len());
    let mut z = libdeflater::Decompressor::new();
    let mut data = Vec::new();
    for j in jobs {
        if j.size > CHUNK {
            continue;
        }
        data.resize(j.size, 0);
        // The whole zlib stream, its checksum checked, inflating to
        // exactly the size the entry states.
        if z.zlib_decompress(&chunk[j.start..j.end], &mut data) != Ok(j.size) {
            continue;
        }
        let Ok(oid) = Oid::from_bytes(&j.oid) else {
            continue;
        };
        if let Ok(raw) = RawCommit::parse(oid, &data) {
            out.push((oid, Scanned::from_raw(raw)));
        }
    }
    out
}

fn read_at(file: &File, buf: &mut [u8], at: u64) -> Option<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileExt;
        file.read_exact_at(buf, at).ok()
    }
    #[cfg(not(unix))]
    {
        let _ = (file, buf, at);
        None
    }
}

/// What a scan needs of a commit, read straight from the object database:
/// parsing a full `git2::Commit` (signatures, the object cache) costs more
/// than inflating it.
pub struct RawCommit<'a> {
    pub first_parent: Option<Oid>,
    pub parents: usize,
    /// None when the message is not UTF-8 (then it is no receipt).
    pub message: Option<&'a str>,
}

impl<'a> RawCommit<'a> {
    /// Parse the bytes of commit `oid` (as stored, without the object
    /// header).
    pub fn parse(oid: Oid, data: &'a [u8]) -> crate::error::Result<RawCommit<'a>> {
        let (header, message) = match memchr::memmem::find(data, b"\n\n") {
            Some(i) => (&data[..i], &data[i + 2..]),
            None => (data, &b""[..]),
        };
        let mut first_parent = None;
        let mut parents = 0;
        // As git's parse_commit_buffer: the `tree` line first, then the
        // parents, each right after the one before; a `parent ` line
        // anywhere else (after `author`, in an extra header) is no parent.
        let mut lines = header.split(|&b| b == b'\n');
        if !lines.next().is_some_and(|l| l.starts_with(b"tree ")) {
            return Err(crate::error::Error::corrupt(format!(
                "commit {oid} does not start with its tree"
            )));
        }
        for line in lines {
            let Some(hex) = line.strip_prefix(b"parent ") else {
                break;
            };
            let id = std::str::from_utf8(hex)
                .ok()
                .filter(|h| h.len() == 40)
                .and_then(|h| Oid::from_str(h).ok())
                .ok_or_else(|| {
                    crate::error::Error::corrupt(format!(
                        "commit {oid} has a malformed parent line"
                    ))
                })?;
            first_parent.get_or_insert(id);
            parents += 1;
        }
        // As git_commit_message: leading newlines are not part of it.
        let start = message
            .iter()
            .position(|&b| b != b'\n')
            .unwrap_or(message.len());
        Ok(RawCommit {
            first_parent,
            parents,
            message: std::str::from_utf8(&message[start..]).ok(),
        })
    }
}
