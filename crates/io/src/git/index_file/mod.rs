//! The index file, read and rewritten without libgit2, for a step's few
//! paths in a tree of any size.
//!
//! libgit2 parses every entry of the index into its own map and hashes the
//! file with SHA-1DC to read it, then does both again to write it: in a
//! tree of 100,000 files that is most of a step's time. Here the file is
//! walked once (entries located, names compared in place), looked up by
//! binary search, and written back as it was read (each entry's bytes
//! copied, version 4's path compression recomputed where a neighbour
//! changed) with the step's entries put in, the cache tree invalidated
//! along their paths as git invalidates it, and the optional extensions
//! git rebuilds (untracked cache, fsmonitor data, offset tables) left out,
//! as libgit2 leaves them out.
//!
//! Owns that format. Invariant: [`IndexFile::read`] takes only an index
//! laid out as git writes it (version 2 to 4, entries in git's order, every
//! extension within the file, none mandatory: no split or sparse index) and
//! whole (its SHA-1 trailer checked, unless `index.skipHash` left none);
//! anything else is None, for libgit2. A rewrite keeps every entry and
//! extension it does not change byte for byte, smudges entries that were
//! racily clean (git's rule), and refuses (writes nothing) where the result
//! would not be a valid index (a path both a file and a directory).

use git2::Oid;

mod cache_tree;
mod rewrite;

/// Where an entry's name is: in the file (versions 2 and 3), or rebuilt
/// from the prefix compression of version 4.
#[derive(Debug, Clone)]
enum Name {
    At(usize, usize),
    Own(Box<[u8]>),
}

#[derive(Debug, Clone)]
struct Span {
    /// The entry's bytes, name included (and its padding in versions 2
    /// and 3).
    start: usize,
    end: usize,
    name: Name,
    stage: u16,
}

/// One entry as git keeps it: stat data (truncated to 32 bits, as git
/// stores them), mode, object id, flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub ctime: (u32, u32),
    pub mtime: (u32, u32),
    pub dev: u32,
    pub ino: u32,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u32,
    pub oid: Oid,
    /// The extended flags of version 3 and later (intent-to-add,
    /// skip-worktree), 0 where there are none.
    pub extended: u16,
    /// "Assume unchanged" (`git update-index --assume-unchanged`). Never
    /// set on an entry this module writes.
    pub assume_valid: bool,
}

/// `CE_SKIP_WORKTREE`, `CE_INTENT_TO_ADD` in the extended flags.
pub const SKIP_WORKTREE: u16 = 0x4000;
pub const INTENT_TO_ADD: u16 = 0x2000;

/// An index file as read.
pub struct IndexFile {
    bytes: Vec<u8>,
    version: u32,
    entries: Vec<Span>,
    /// Where the extensions start.
    extensions: usize,
    /// The file's mtime when read (git's racy-clean rule).
    mtime: (i64, i64),
    /// The file's stat data when read, if it was read from a file.
    stamp: Option<Stamp>,
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

/// The stat data that tells an index file from another at one path.
type Stamp = (u64, u64, i64, i64, i64, i64);

fn stamp(m: &std::fs::Metadata) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    (
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    )
}

/// An index file remembered: its path, stat data, whether it was read
/// with `index.skipHash` allowed, and what it holds.
type Remembered = (std::path::PathBuf, Stamp, bool, Held);

/// What is remembered of an index: as parsed, or the bytes this process
/// wrote, parsed when first asked for (a process that writes the index
/// once and ends never parses it again).
enum Held {
    Parsed(std::rc::Rc<IndexFile>),
    Written(Vec<u8>, (i64, i64)),
}

thread_local! {
    /// The index last read or written by this process, with the stat
    /// data its file had: a step's checks and its update read it once, and
    /// the next step reads what this one wrote without reading the file.
    /// git replaces an index by renaming a new file over it, so a file
    /// with the same inode, size and times to the nanosecond is the same.
    static LAST: std::cell::RefCell<Option<Remembered>> =
        const { std::cell::RefCell::new(None) };
}

/// Whether git may leave the index's trailing hash zero here
/// (`index.skipHash`, which `feature.manyFiles` sets).
pub fn skip_hash(repo: &git2::Repository) -> bool {
    let cfg = |key: &str| repo.config().and_then(|c| c.get_bool(key)).ok();
    cfg("index.skipHash")
        .or_else(|| cfg("feature.manyFiles"))
        .unwrap_or(false)
}

impl IndexFile {
    /// An index without entries.
    pub fn empty() -> IndexFile {
        let mut bytes = b"DIRC\0\0\0\x02\0\0\0\0".to_vec();
        bytes.extend_from_slice(&[0; 20]);
        IndexFile {
            bytes,
            version: 2,
            entries: Vec::new(),
            extensions: 12,
            mtime: (0, 0),
            stamp: None,
        }
    }

    /// [`IndexFile::read`], or the index this process last read or wrote
    /// at `path` while the file is still that one.
    pub fn cached(path: &std::path::Path, skip_hash: bool) -> Option<std::rc::Rc<IndexFile>> {
        let now = stamp(&std::fs::symlink_metadata(path).ok()?);
        let hit = LAST.with(|l| {
            let mut l = l.borrow_mut();
            let (p, st, skip, held) = l.as_mut()?;
            if !(p == path && *st == now && (*skip == skip_hash)) {
                return None;
            }
            if let Held::Written(bytes, mtime) = held {
                let mut file = IndexFile::parse(std::mem::take(bytes))?;
                file.mtime = *mtime;
                file.stamp = Some(now);
                *held = Held::Parsed(std::rc::Rc::new(file));
            }
            match held {
                Held::Parsed(f) => Some(f.clone()),
                Held::Written(..) => None,
            }
        });
        // The stat data can repeat (a freed inode reused in one clock
        // tick): the file's trailer must be the remembered one too.
        if let Some(f) = hit.filter(|f| f.trailer_is(path)) {
            return Some(f);
        }
        let file = std::rc::Rc::new(IndexFile::read(path, skip_hash)?);
        let now = stamp(&std::fs::symlink_metadata(path).ok()?);
        if file.stamp == Some(now) {
            LAST.with(|l| {
                *l.borrow_mut() = Some((
                    path.to_path_buf(),
                    now,
                    skip_hash,
                    Held::Parsed(file.clone()),
                ))
            });
        }
        Some(file)
    }

    /// Whether the file at `path` ends with this index's trailer.
    fn trailer_is(&self, path: &std::path::Path) -> bool {
        use std::os::unix::fs::FileExt;
        let mut tail = [0u8; 20];
        let len = self.bytes.len() as u64;
        std::fs::File::open(path)
            .and_then(|f| f.read_exact_at(&mut tail, len - 20))
            .is_ok_and(|()| tail == self.bytes[self.bytes.len() - 20..])
    }

    /// This process just renamed `bytes` into place at `path`, and `meta`
    /// is the stat data of the file it wrote (taken through its own
    /// descriptor): remembered as [`IndexFile::cached`] reads it, if the
    /// file at `path` is still that one.
    pub fn wrote(
        path: &std::path::Path,
        bytes: Vec<u8>,
        skip_hash: bool,
        meta: &std::fs::Metadata,
    ) {
        let st = stamp(meta);
        if std::fs::symlink_metadata(path).map(|m| stamp(&m)).ok() != Some(st) {
            return forget();
        }
        LAST.with(|l| {
            *l.borrow_mut() = Some((
                path.to_path_buf(),
                st,
                skip_hash,
                Held::Written(bytes, (st.2, st.3)),
            ))
        });
    }

    /// The index at `path` when it is plainly git's and whole (see the
    /// module's invariant); None otherwise, and when there is none.
    /// `skip_hash`: the config lets git leave the trailer zero.
    pub fn read(path: &std::path::Path, skip_hash: bool) -> Option<IndexFile> {
        use std::os::unix::fs::MetadataExt;
        let mut f = std::fs::File::open(path).ok()?;
        let meta = f.metadata().ok()?;
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        std::io::Read::read_to_end(&mut f, &mut bytes).ok()?;
        let mut file = IndexFile::parse(bytes)?;
        let trailer = &file.bytes[file.bytes.len() - 20..];
        let whole = if trailer.iter().all(|b| *b == 0) {
            skip_hash
        } else {
            use sha1::Digest;
            sha1::Sha1::digest(&file.bytes[..file.bytes.len() - 20]).as_slice() == trailer
        };
        if !whole {
            return None;
        }
        file.mtime = (meta.mtime(), meta.mtime_nsec());
        file.stamp = Some(stamp(&meta));
        Some(file)
    }

    /// The layout of `bytes`, trailer unchecked: see
    /// [`crate::git::index_file`]'s invariant.
    pub fn parse(bytes: Vec<u8>) -> Option<IndexFile> {
        if bytes.len() < 12 + 20 || &bytes[..4] != b"DIRC" {
            return None;
        }
        let version = u32_at(&bytes, 4)?;
        let count = u32_at(&bytes, 8)? as usize;
        if !(2..=4).contains(&version) || count > bytes.len() / 40 {
            return None;
        }
        let end = bytes.len() - 20;
        let mut entries: Vec<Span> = Vec::with_capacity(count);
        let mut at = 12usize;
        let mut previous: Vec<u8> = Vec::new();
        for _ in 0..count {
            let mode = u32_at(&bytes, at + 24)?;
            if mode & 0o170000 == 0o040000 {
                // A directory entry: a sparse index.
                return None;
            }
            let b = bytes.get(at + 60..at + 62)?;
            let flags = u16::from_be_bytes([b[0], b[1]]);
            let mut name_at = at + 62;
            if flags & 0x4000 != 0 {
                if version < 3 {
                    return None;
                }
                name_at += 2;
            }
            let stage = (flags >> 12) & 3;
            let (name, next) = if version == 4 {
                // A varint (git's offset encoding) of bytes to drop from the
                // previous name, then the rest, NUL-terminated.
                let (mut strip, mut i) = (0usize, name_at);
                loop {
                    let b = *bytes.get(i)?;
                    i += 1;
                    strip = (strip << 7) | usize::from(b & 0x7f);
                    if b & 0x80 == 0 {
                        break;
                    }
                    strip += 1;
                    if strip > previous.len() {
                        return None;
                    }
                }
                if strip > previous.len() {
                    return None;
                }
                let len = bytes.get(i..end)?.iter().position(|b| *b == 0)?;
                let mut whole = previous[..previous.len() - strip].to_vec();
                whole.extend_from_slice(&bytes[i..i + len]);
                (Name::Own(whole.into_boxed_slice()), i + len + 1)
            } else {
                let len = usize::from(flags & 0x0fff);
                let len = if len < 0x0fff {
                    len
                } else {
                    bytes.get(name_at..end)?.iter().position(|b| *b == 0)?
                };
                bytes.get(name_at..name_at + len)?;
                // Padded with 1 to 8 NULs to a multiple of 8 from the
                // entry's start.
                (
                    Name::At(name_at, name_at + len),
                    at + ((name_at - at + len + 8) & !7),
                )
            };
            let span = Span {
                start: at,
                end: next,
                name,
                stage,
            };
            let this = name_of(&bytes, &span);
            if this.is_empty() || this.contains(&0) || next > end {
                return None;
            }
            if let Some(last) = entries.last() {
                if (this, stage) <= (name_of(&bytes, last), last.stage) {
                    return None;
                }
            }
            if version == 4 {
                previous = this.to_vec();
            }
            entries.push(span);
            at = next;
        }
        let extensions = at;
        while at < end {
            let sig = bytes.get(at..at + 4)?;
            if !sig[0].is_ascii_uppercase() {
                // Mandatory (git and libgit2: anything not starting A–Z):
                // `link` (split index), `sdir` (sparse), one not known
                // yet, or bytes that are no extension at all.
                return None;
            }
            let size = u32_at(&bytes, at + 4)? as usize;
            at = (at + 8).checked_add(size).filter(|n| *n <= end)?;
        }
        (at == end).then_some(IndexFile {
            bytes,
            version,
            entries,
            extensions,
            mtime: (0, 0),
            stamp: None,
        })
    }

    /// Whether the file at `path` is still the one this was read from (or
    /// written as): git replaces an index by a rename, so another writer
    /// since gives it another inode or other times.
    pub fn current(&self, path: &std::path::Path) -> bool {
        self.stamp.is_some()
            && std::fs::symlink_metadata(path).is_ok_and(|m| Some(stamp(&m)) == self.stamp)
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn find(&self, path: &[u8], stage: u16) -> Result<usize, usize> {
        self.entries
            .binary_search_by(|s| (name_of(&self.bytes, s), s.stage).cmp(&(path, stage)))
    }

    /// The entry of `path` at `stage` (0: merged; 1–3: a conflict).
    pub fn get(&self, path: &[u8], stage: u16) -> Option<Stat> {
        let i = self.find(path, stage).ok()?;
        Some(self.stat(&self.entries[i]))
    }

    /// Every entry in the index's order (path, then stage): path, stage,
    /// entry.
    pub fn entries(&self) -> impl Iterator<Item = (&[u8], u16, Stat)> + '_ {
        self.entries
            .iter()
            .map(|s| (name_of(&self.bytes, s), s.stage, self.stat(s)))
    }

    /// The directories whose cache-tree entry (`TREE`) is valid, by path
    /// (empty for the root, else ending in `/`), with the tree id git
    /// computed from the entries under them; empty where there is none or
    /// it does not parse.
    pub fn valid_trees(&self) -> std::collections::HashMap<Vec<u8>, Oid> {
        let mut at = self.extensions;
        let end = self.bytes.len() - 20;
        while at + 8 <= end {
            let size = u32_at(&self.bytes, at + 4).unwrap_or(0) as usize;
            let Some(data) = self.bytes.get(at + 8..at + 8 + size) else {
                break;
            };
            if &self.bytes[at..at + 4] == b"TREE" {
                return cache_tree::valid_trees(data).unwrap_or_default();
            }
            at += 8 + size;
        }
        Default::default()
    }

    /// The entry at place `i` in the index's order: its path and entry.
    pub fn at(&self, i: usize) -> (&[u8], Stat) {
        let s = &self.entries[i];
        (name_of(&self.bytes, s), self.stat(s))
    }

    /// Whether `path` has an entry at any stage above 0 (a conflict).
    pub fn conflicted(&self, path: &[u8]) -> bool {
        (1..=3).any(|s| self.find(path, s).is_ok())
    }

    /// Whether `path` names a directory of the index: some entry lies
    /// under `path/`.
    pub fn has_under(&self, path: &[u8]) -> bool {
        let mut dir = path.to_vec();
        dir.push(b'/');
        let i = self.find(&dir, 0).unwrap_or_else(|i| i);
        self.entries
            .get(i)
            .is_some_and(|s| name_of(&self.bytes, s).starts_with(&dir))
    }

    /// Whether `st`'s stat data cannot vouch for its file: written in the
    /// index file's own clock tick or after (git's racy-clean rule), so a
    /// change of the same size in that tick would not show.
    pub fn racy(&self, st: &Stat) -> bool {
        let (s, ns) = (i64::from(st.mtime.0), i64::from(st.mtime.1));
        (s, ns) >= self.mtime
    }

    fn stat(&self, s: &Span) -> Stat {
        let b = &self.bytes[s.start..];
        let u = |at: usize| u32::from_be_bytes(b[at..at + 4].try_into().unwrap_or_default());
        let flags = u16::from_be_bytes([b[60], b[61]]);
        let extended = if flags & 0x4000 != 0 {
            u16::from_be_bytes([b[62], b[63]])
        } else {
            0
        };
        Stat {
            ctime: (u(0), u(4)),
            mtime: (u(8), u(12)),
            dev: u(16),
            ino: u(20),
            mode: u(24),
            uid: u(28),
            gid: u(32),
            size: u(36),
            oid: Oid::from_bytes(&b[40..60]).unwrap_or(Oid::ZERO_SHA1),
            extended,
            assume_valid: flags & 0x8000 != 0,
        }
    }
}

/// Forget the index remembered by [`IndexFile::cached`].
pub fn forget() {
    LAST.with(|l| *l.borrow_mut() = None);
}

fn name_of<'a>(bytes: &'a [u8], s: &'a Span) -> &'a [u8] {
    match &s.name {
        Name::At(a, b) => &bytes[*a..*b],
        Name::Own(n) => n,
    }
}

#[cfg(test)]
mod tests;
