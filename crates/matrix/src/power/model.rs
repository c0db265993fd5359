//! The states a power cut may leave: recorded system calls turned into
//! logical file-system operations on inodes, and the subsets of them a file
//! system may have made durable when the power went.
//!
//! Owns the in-memory file system (names → inodes → bytes), the logical
//! operations (ALICE's: create a name, remove a name, rename, write,
//! truncate, chmod, sync), and the two models below. Invariant: replaying
//! every operation of a record over the snapshot taken before the run gives
//! the disk the run left, byte for byte ([`Fs::differs_from_disk`] checks
//! it for every record), so a crash state differs from a real one only in
//! which operations the model drops.
//!
//! The models (after Pillai et al., "All File Systems Are Not Created
//! Equal", OSDI 2014):
//! - `ext4`: ext4 `data=ordered` with delayed allocation. Name operations,
//!   truncates and mode changes go through one journal in order: a cut
//!   keeps a prefix of them. Any fsync commits the journal, so every such
//!   operation before an fsync is kept. A file's data is kept only as a
//!   prefix of its writes, never past the journal's cut (its size is
//!   journalled when the data is written back), and whole up to its last
//!   fsync.
//! - `posix`: what POSIX promises and no more. A write, truncate or mode
//!   change is kept if an fsync of its file followed it; a name operation
//!   is kept if an fsync of its directory followed it; anything else may be
//!   lost independently of every other, so later operations survive where
//!   earlier ones were lost (reordering), and a file may keep some writes
//!   and not others (holes read as zeros).
//! - `fuse`: a FUSE file system that keeps its own page cache and drops
//!   every unsynced byte on a cut (LazyFS, the one Jepsen uses). Name
//!   operations, truncates and mode changes reach its backing store at
//!   once, in order; a file's data only when the file is fsynced (a prefix
//!   of its writes may have been written back before); `sync`/`syncfs`
//!   flush nothing (the kernel does not forward them to it). A rename
//!   after a `syncfs` makes an empty file durable there.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::fs::{Data, Fs, Node};

/// A file-system model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Model {
    Ext4,
    Posix,
    Fuse,
}

impl Model {
    pub fn name(self) -> &'static str {
        match self {
            Model::Ext4 => "ext4",
            Model::Posix => "posix",
            Model::Fuse => "fuse",
        }
    }

    /// Whether `syncfs` flushes everything on this model's file system:
    /// where it does not, git-steps flushes file by file, and the run this
    /// model explores is recorded that way (`GIT_STEPS_FLUSH=files`).
    pub fn syncfs_flushes(self) -> bool {
        self != Model::Fuse
    }
}

/// One logical operation, on inodes.
#[derive(Debug, Clone)]
pub enum Op {
    /// A name for an inode (create, link, mkdir, symlink).
    Name {
        path: PathBuf,
        ino: usize,
    },
    /// A name removed (unlink, rmdir).
    Unname {
        path: PathBuf,
        ino: usize,
    },
    /// An atomic rename (`exchange`: both names swap).
    Rename {
        from: PathBuf,
        to: PathBuf,
        ino: usize,
        exchange: Option<usize>,
    },
    Write {
        ino: usize,
        off: u64,
        data: Vec<u8>,
    },
    Truncate {
        ino: usize,
        len: u64,
    },
    Chmod {
        ino: usize,
        mode: u32,
    },
    /// fsync/fdatasync of an inode (a file's data, a directory's names).
    Sync {
        ino: usize,
    },
    /// sync/syncfs: everything before it.
    SyncAll,
}

impl Op {
    /// The directories whose fsync makes this name operation durable.
    fn dirs(&self) -> Vec<&Path> {
        match self {
            Op::Name { path, .. } | Op::Unname { path, .. } => path.parent().into_iter().collect(),
            Op::Rename { from, to, .. } => from.parent().into_iter().chain(to.parent()).collect(),
            _ => Vec::new(),
        }
    }

    pub fn is_name(&self) -> bool {
        matches!(
            self,
            Op::Name { .. } | Op::Unname { .. } | Op::Rename { .. }
        )
    }

    /// Journalled metadata (ext4): names, sizes set by truncate, modes.
    fn is_meta(&self) -> bool {
        self.is_name() || matches!(self, Op::Truncate { .. } | Op::Chmod { .. })
    }

    /// The inode whose data this changes.
    fn data_ino(&self) -> Option<usize> {
        match self {
            Op::Write { ino, .. } | Op::Truncate { ino, .. } | Op::Chmod { ino, .. } => Some(*ino),
            _ => None,
        }
    }

    /// A short description, for a row's list of dropped operations.
    pub fn describe(&self, root: &Path, fs: &Record) -> String {
        let rel = |p: &Path| p.strip_prefix(root).unwrap_or(p).display().to_string();
        let ino_name = |i: usize| fs.names.get(&i).map(|p| rel(p)).unwrap_or(format!("#{i}"));
        match self {
            Op::Name { path, .. } => format!("create {}", rel(path)),
            Op::Unname { path, .. } => format!("unlink {}", rel(path)),
            Op::Rename { from, to, .. } => format!("rename {} -> {}", rel(from), rel(to)),
            Op::Write { ino, off, data } => {
                format!("write {} @{} +{}", ino_name(*ino), off, data.len())
            }
            Op::Truncate { ino, len } => format!("truncate {} to {}", ino_name(*ino), len),
            Op::Chmod { ino, mode } => format!("chmod {} {:o}", ino_name(*ino), mode),
            Op::Sync { ino } => format!("fsync {}", ino_name(*ino)),
            Op::SyncAll => "sync".into(),
        }
    }
}

/// A run's record: the snapshot before it and its operations.
#[derive(Debug, Clone)]
pub struct Record {
    pub root: PathBuf,
    pub before: Fs,
    pub ops: Vec<Op>,
    /// What each inode is when made (kind, mode; a file empty).
    pub(super) kinds: Vec<Node>,
    /// A name each inode had, for descriptions.
    pub(super) names: HashMap<usize, PathBuf>,
}

impl Record {
    /// Whether operation `i` touches a worktree file (under the root, not
    /// in a git directory).
    pub fn in_worktree(&self, i: usize) -> bool {
        let path = match &self.ops[i] {
            Op::Name { path, .. } | Op::Unname { path, .. } => Some(path),
            Op::Rename { to, .. } => Some(to),
            Op::Write { ino, .. }
            | Op::Truncate { ino, .. }
            | Op::Chmod { ino, .. }
            | Op::Sync { ino } => self.names.get(ino),
            Op::SyncAll => None,
        };
        path.and_then(|p| p.strip_prefix(&self.root).ok())
            .is_some_and(|rel| {
                !rel.components().any(|c| {
                    let c = c.as_os_str();
                    c == ".git" || c.to_string_lossy().ends_with(".git")
                })
            })
    }

    /// Every operation replayed: the disk the run left.
    pub fn after(&self) -> Fs {
        self.state(&vec![true; self.ops.len()])
    }

    /// The file system with the operations `kept` marks (a prefix's worth).
    pub fn state(&self, kept: &[bool]) -> Fs {
        let mut fs = self.before.clone();
        for (op, &k) in self.ops.iter().zip(kept) {
            if k {
                fs.apply(op, &self.kinds);
            }
        }
        fs
    }

    /// What the run had promised by operation `cut`: for each file under
    /// `under` that a rename replaced and an fsync of its directory then
    /// made durable (a ref's commit point: what git-steps reports only
    /// after it), its path and the bytes the rename put there, the last
    /// such value per path.
    pub fn promised(&self, under: &Path, cut: usize) -> Vec<(PathBuf, Vec<u8>)> {
        let mut live = self.before.clone();
        let mut renamed: HashMap<PathBuf, Vec<u8>> = HashMap::new();
        let mut promised: std::collections::BTreeMap<PathBuf, Vec<u8>> = Default::default();
        for op in &self.ops[..cut.min(self.ops.len())] {
            live.apply(op, &self.kinds);
            match op {
                Op::Rename { to, .. } if to.starts_with(under) => {
                    let bytes = live
                        .names
                        .get(to)
                        .and_then(|&i| match &live.nodes[i].data {
                            Data::File(b) => Some(b.clone()),
                            _ => None,
                        })
                        .unwrap_or_default();
                    renamed.insert(to.clone(), bytes);
                }
                Op::Sync { ino } => {
                    let Some(dir) = live
                        .names
                        .iter()
                        .find(|(_, i)| *i == ino)
                        .map(|(p, _)| p.clone())
                    else {
                        continue;
                    };
                    let done: Vec<PathBuf> = renamed
                        .keys()
                        .filter(|p| p.parent() == Some(dir.as_path()))
                        .cloned()
                        .collect();
                    for p in done {
                        if let Some(b) = renamed.remove(&p) {
                            promised.insert(p, b);
                        }
                    }
                }
                _ => {}
            }
        }
        promised.into_iter().collect()
    }

    /// The indexes where a cut is worth taking: just before each sync (the
    /// longest prefix with the same durable set) and the end.
    pub fn cut_points(&self) -> Vec<usize> {
        let mut out: Vec<usize> = self
            .ops
            .iter()
            .enumerate()
            .filter(|(_, o)| matches!(o, Op::Sync { .. } | Op::SyncAll))
            .map(|(i, _)| i)
            .collect();
        out.push(self.ops.len());
        out.dedup();
        out
    }

    /// Which of the first `k` operations a cut after them must keep.
    fn forced(&self, k: usize, model: Model) -> Vec<bool> {
        let mut forced = vec![false; k];
        // Walk backwards, collecting what the syncs seen so far cover.
        let mut synced_inos: std::collections::HashSet<usize> = Default::default();
        let mut synced_dirs: std::collections::HashSet<PathBuf> = Default::default();
        let mut any_sync = false;
        let mut all = false;
        for i in (0..k).rev() {
            let op = &self.ops[i];
            match op {
                Op::SyncAll => all = true,
                Op::Sync { ino } => {
                    any_sync = true;
                    synced_inos.insert(*ino);
                    if let Some(p) = self.names.get(ino) {
                        if self.kinds[*ino].data == Data::Dir {
                            synced_dirs.insert(p.clone());
                        }
                    }
                }
                _ => {}
            }
            let by_data = op.data_ino().is_some_and(|x| synced_inos.contains(&x));
            let by_dir = op.dirs().iter().any(|d| synced_dirs.contains(*d));
            let by_journal = model == Model::Ext4 && any_sync && op.is_meta();
            // FUSE: names, sizes and modes are written through at once;
            // sync/syncfs reach nothing.
            let at_once = model == Model::Fuse && op.is_meta();
            let all = all && model != Model::Fuse;
            forced[i] = all
                || at_once
                || by_data
                || by_dir
                || by_journal
                || matches!(op, Op::Sync { .. } | Op::SyncAll);
        }
        forced
    }

    /// The least a cut after `k` operations keeps.
    pub fn minimal(&self, k: usize, model: Model) -> Vec<bool> {
        let mut kept = self.forced(k, model);
        kept.resize(self.ops.len(), false);
        kept
    }

    /// A random state a cut after `k` operations may leave under `model`.
    pub fn sample(&self, k: usize, model: Model, rng: &mut Rng) -> Vec<bool> {
        let forced = self.forced(k, model);
        let mut kept = forced.clone();
        match model {
            Model::Posix => {
                for (i, f) in forced.iter().enumerate() {
                    if !f {
                        kept[i] = rng.below(2) == 1;
                    }
                }
            }
            Model::Fuse => {
                // Each file's unsynced data: a prefix of its writes (what
                // the cache wrote back before the cut), often none.
                self.keep_write_prefixes(k, &forced, &mut kept, rng);
            }
            Model::Ext4 => {
                // The journal's cut: metadata before it is kept.
                let meta: Vec<usize> = (0..k)
                    .filter(|&i| !forced[i] && self.ops[i].is_meta())
                    .collect();
                let cut_at = rng.below(meta.len() as u64 + 1) as usize;
                let journal = meta.get(cut_at).copied().unwrap_or(k);
                for &i in &meta[..cut_at] {
                    kept[i] = true;
                }
                // Each file's data: a prefix of its writes, before the cut.
                self.keep_write_prefixes(journal, &forced, &mut kept, rng);
            }
        }
        kept.resize(self.ops.len(), false);
        kept
    }
}

impl Record {
    /// Keep, for each file, a random prefix of its unforced writes among
    /// the first `upto` operations (what was written back before a cut).
    fn keep_write_prefixes(&self, upto: usize, forced: &[bool], kept: &mut [bool], rng: &mut Rng) {
        let mut per_ino: HashMap<usize, Vec<usize>> = HashMap::new();
        for (i, op) in self.ops[..upto].iter().enumerate() {
            if let (false, Op::Write { ino, .. }) = (forced[i], op) {
                per_ino.entry(*ino).or_default().push(i);
            }
        }
        let mut inos: Vec<_> = per_ino.into_iter().collect();
        inos.sort();
        for (_, writes) in inos {
            let n = rng.below(writes.len() as u64 + 1) as usize;
            for &i in &writes[..n] {
                kept[i] = true;
            }
        }
    }
}

/// A small seeded generator (splitmix64): a sweep is repeatable from its seed.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when n is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fs::Fs;
    use super::super::trace;
    use super::*;

    fn hex(s: &str) -> String {
        s.bytes().map(|b| format!("\\x{b:02x}")).collect()
    }

    /// A record over an empty root from strace lines written with `{R}` for
    /// the root and `"…"` strings given plain (hex-encoded here).
    fn record(lines: &[&str]) -> (tempfile::TempDir, Record) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("r");
        std::fs::create_dir(&root).unwrap();
        let r = root.to_str().unwrap();
        let text: String = lines
            .iter()
            .map(|l| {
                let l = l.replace("{R}", r);
                // Every quoted string and <annotation> as strace -xx prints it.
                let mut out = String::new();
                let mut rest = l.as_str();
                while let Some(i) = rest.find(['"', '<']) {
                    let close = if rest.as_bytes()[i] == b'"' { '"' } else { '>' };
                    let end = rest[i + 1..].find(close).unwrap() + i + 1;
                    out.push_str(&rest[..=i]);
                    out.push_str(&hex(&rest[i + 1..end]));
                    out.push(close);
                    rest = &rest[end + 1..];
                }
                out.push_str(rest);
                format!("7 {out}\n")
            })
            .collect();
        let calls = trace::parse(&text).unwrap();
        let before = Fs::snapshot(&root).unwrap();
        let rec = Record::build(&root, &root, before, &calls).unwrap();
        (dir, rec)
    }

    /// The files of a state, written out beside the root (a name of the
    /// same length).
    fn files(rec: &Record, kept: &[bool]) -> Vec<(String, String)> {
        let t = rec.root.with_file_name("t");
        let _ = std::fs::remove_dir_all(&t);
        std::fs::create_dir(&t).unwrap();
        rec.state(kept).materialize(&rec.root, &t).unwrap();
        let mut v: Vec<(String, String)> = std::fs::read_dir(&t)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read_to_string(e.path()).unwrap_or_default(),
                )
            })
            .collect();
        v.sort();
        v
    }

    const FSYNCED_THEN_RENAMED: &[&str] = &[
        "openat(AT_FDCWD<{R}>, \"{R}/a\", O_WRONLY|O_CREAT|O_EXCL, 0666) = 3<{R}/a>",
        "write(3<{R}/a>, \"hello\", 5) = 5",
        "fsync(3<{R}/a>) = 0",
        "close(3<{R}/a>) = 0",
        "rename(\"{R}/a\", \"{R}/b\") = 0",
    ];

    #[test]
    fn every_operation_replays_to_the_disk_the_run_left() {
        let (_d, rec) = record(FSYNCED_THEN_RENAMED);
        assert_eq!(rec.ops.len(), 4, "{:?}", rec.ops);
        std::fs::write(rec.root.join("b"), "hello").unwrap();
        assert_eq!(rec.after().differs_from_disk(&rec.root).unwrap(), None);
        // And a difference is found.
        std::fs::write(rec.root.join("b"), "hellO").unwrap();
        assert!(rec.after().differs_from_disk(&rec.root).unwrap().is_some());
    }

    #[test]
    fn posix_keeps_a_name_only_when_its_directory_was_fsynced() {
        let (_d, rec) = record(FSYNCED_THEN_RENAMED);
        let n = rec.ops.len();
        // The file's data was fsynced, its name never: nothing survives.
        assert_eq!(files(&rec, &rec.minimal(n, Model::Posix)), vec![]);
        // ext4: the fsync committed the journal, with the create in it; the
        // rename after it may be lost.
        assert_eq!(
            files(&rec, &rec.minimal(n, Model::Ext4)),
            vec![("a".to_string(), "hello".to_string())]
        );
        // Cut before the fsync: the data may be lost on ext4 too.
        let before_sync = 2;
        assert_eq!(files(&rec, &rec.minimal(before_sync, Model::Ext4)), vec![]);
    }

    #[test]
    fn a_rename_made_durable_names_its_inode_even_when_its_source_name_was_lost() {
        let mut lines = FSYNCED_THEN_RENAMED.to_vec();
        lines.push("openat(AT_FDCWD<{R}>, \"{R}\", O_RDONLY|O_DIRECTORY) = 4<{R}>");
        lines.push("fsync(4<{R}>) = 0");
        let (_d, rec) = record(&lines);
        let n = rec.ops.len();
        assert_eq!(
            files(&rec, &rec.minimal(n, Model::Posix)),
            vec![("b".to_string(), "hello".to_string())]
        );
    }

    #[test]
    fn fuse_keeps_every_name_at_once_and_only_fsynced_data() {
        // Written, syncfs'd (which FUSE never sees), renamed: the name
        // survives, the bytes do not.
        let (_d, rec) = record(&[
            "openat(AT_FDCWD<{R}>, \"{R}/a\", O_WRONLY|O_CREAT|O_EXCL, 0666) = 3<{R}/a>",
            "write(3<{R}/a>, \"hello\", 5) = 5",
            "close(3<{R}/a>) = 0",
            "openat(AT_FDCWD<{R}>, \"{R}\", O_RDONLY|O_DIRECTORY) = 4<{R}>",
            "syncfs(4<{R}>) = 0",
            "rename(\"{R}/a\", \"{R}/b\") = 0",
        ]);
        let n = rec.ops.len();
        assert_eq!(
            files(&rec, &rec.minimal(n, Model::Fuse)),
            vec![("b".to_string(), String::new())]
        );
        // ext4 and POSIX take the syncfs at its word.
        assert_eq!(
            files(&rec, &rec.minimal(n, Model::Posix)),
            vec![("a".to_string(), "hello".to_string())]
        );
        // Fsynced before the rename: whole under FUSE too.
        let (_d, rec) = record(FSYNCED_THEN_RENAMED);
        let n = rec.ops.len();
        assert_eq!(
            files(&rec, &rec.minimal(n, Model::Fuse)),
            vec![("b".to_string(), "hello".to_string())]
        );
        // A sample never keeps less than the least state.
        for seed in 0..20 {
            let k = rec.sample(n, Model::Fuse, &mut Rng(seed));
            assert!(k
                .iter()
                .zip(rec.minimal(n, Model::Fuse))
                .all(|(s, m)| *s || !m));
        }
    }

    #[test]
    fn posix_reorders_and_ext4_keeps_the_journal_in_order() {
        let (_d, rec) = record(&[
            "mkdir(\"{R}/one\", 0777) = 0",
            "mkdir(\"{R}/two\", 0777) = 0",
        ]);
        let n = rec.ops.len();
        let reordered = |m: Model| {
            (0..200u64).any(|seed| {
                let k = rec.sample(n, m, &mut Rng(seed));
                !k[0] && k[1]
            })
        };
        assert!(reordered(Model::Posix));
        assert!(!reordered(Model::Ext4));
    }
}
