//! The in-memory file system a crash state is built in: names (whole
//! paths) → inodes → bytes, read from disk before a run and written back
//! to disk as a crash state.
//!
//! Owns the snapshot, the replay of one logical operation, the comparison
//! with a disk, and the materialization. Invariant: a state is written as
//! it is held, hard links as links, with only the recorded root's path
//! replaced in file contents by the state's own (the same length), and
//! every file dated before this boot.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::model::Op;
use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Data {
    File(Vec<u8>),
    Dir,
    Symlink(Vec<u8>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Node {
    pub(super) data: Data,
    pub(super) mode: u32,
}

/// Names (whole paths) → inodes.
#[derive(Debug, Clone)]
pub struct Fs {
    pub(super) nodes: Vec<Node>,
    pub(super) names: BTreeMap<PathBuf, usize>,
}

impl Fs {
    /// Everything under `root` as it is on disk now.
    pub fn snapshot(root: &Path) -> Result<Fs> {
        let mut fs = Fs {
            nodes: Vec::new(),
            names: BTreeMap::new(),
        };
        fs.add_disk(root)?;
        Ok(fs)
    }

    fn add_disk(&mut self, path: &Path) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let io = |e: std::io::Error| Error::io(path.display().to_string(), e);
        let meta = std::fs::symlink_metadata(path).map_err(io)?;
        let mode = meta.permissions().mode() & 0o7777;
        let data = if meta.is_dir() {
            Data::Dir
        } else if meta.file_type().is_symlink() {
            use std::os::unix::ffi::OsStrExt;
            Data::Symlink(
                std::fs::read_link(path)
                    .map_err(io)?
                    .as_os_str()
                    .as_bytes()
                    .to_vec(),
            )
        } else {
            Data::File(std::fs::read(path).map_err(io)?)
        };
        let is_dir = data == Data::Dir;
        self.nodes.push(Node { data, mode });
        self.names.insert(path.to_path_buf(), self.nodes.len() - 1);
        if is_dir {
            let mut kids: Vec<_> = std::fs::read_dir(path)
                .map_err(io)?
                .map(|e| e.map(|e| e.path()))
                .collect::<std::io::Result<_>>()
                .map_err(io)?;
            kids.sort();
            for k in kids {
                self.add_disk(&k)?;
            }
        }
        Ok(())
    }

    /// Where this file system and the disk under `root` differ (the first
    /// few paths), or None.
    pub fn differs_from_disk(&self, root: &Path) -> Result<Option<String>> {
        let disk = Fs::snapshot(root)?;
        let mut diffs = Vec::new();
        let keys: std::collections::BTreeSet<&PathBuf> =
            self.names.keys().chain(disk.names.keys()).collect();
        for k in keys {
            let a = self.names.get(k).map(|&i| &self.nodes[i]);
            let b = disk.names.get(k).map(|&i| &disk.nodes[i]);
            let same = match (a, b) {
                (Some(a), Some(b)) => {
                    a.data == b.data
                        && (!matches!(a.data, Data::File(_))
                            || (a.mode & 0o100 != 0) == (b.mode & 0o100 != 0))
                }
                _ => false,
            };
            if !same {
                let what = match (a, b) {
                    (None, _) => "on disk only",
                    (_, None) => "in the model only",
                    _ => "different bytes or mode",
                };
                diffs.push(format!("{} ({what})", k.display()));
            }
        }
        Ok((!diffs.is_empty()).then(|| {
            let n = diffs.len();
            diffs.truncate(5);
            format!("{} path(s): {}", n, diffs.join(", "))
        }))
    }

    pub(super) fn apply(&mut self, op: &Op, kinds: &[Node]) {
        // A new inode starts as the record first saw it (kind, mode).
        let grow = |nodes: &mut Vec<Node>, ino: usize| {
            while nodes.len() <= ino {
                nodes.push(kinds[nodes.len()].clone());
            }
        };
        match op {
            Op::Name { path, ino } => {
                grow(&mut self.nodes, *ino);
                self.names.insert(path.clone(), *ino);
            }
            Op::Unname { path, ino } => {
                if self.names.get(path) == Some(ino) {
                    self.names.remove(path);
                }
            }
            Op::Rename {
                from,
                to,
                ino,
                exchange,
            } => {
                grow(&mut self.nodes, *ino);
                if let Some(x) = exchange {
                    grow(&mut self.nodes, *x);
                }
                // A rename made durable names the inode at `to` even when
                // the name it had at `from` never reached the disk (POSIX:
                // an fsync of `to`'s directory covers the new entry, and
                // the inode is there).
                let moved = if self.names.get(from) == Some(ino) {
                    self.take_tree(from)
                } else {
                    vec![(PathBuf::new(), *ino)]
                };
                let other = exchange
                    .and_then(|_| Some(self.take_tree(to)))
                    .unwrap_or_default();
                if exchange.is_none() {
                    // What `to` named (and, for a directory, held) is gone.
                    self.take_tree(to);
                }
                for (rel, i) in moved {
                    self.names.insert(join(to, &rel), i);
                }
                for (rel, i) in other {
                    self.names.insert(join(from, &rel), i);
                }
            }
            Op::Write { ino, off, data } => {
                grow(&mut self.nodes, *ino);
                if let Data::File(bytes) = &mut self.nodes[*ino].data {
                    let end = *off as usize + data.len();
                    if bytes.len() < end {
                        bytes.resize(end, 0);
                    }
                    bytes[*off as usize..end].copy_from_slice(data);
                }
            }
            Op::Truncate { ino, len } => {
                grow(&mut self.nodes, *ino);
                if let Data::File(bytes) = &mut self.nodes[*ino].data {
                    bytes.resize(*len as usize, 0);
                }
            }
            Op::Chmod { ino, mode } => {
                grow(&mut self.nodes, *ino);
                self.nodes[*ino].mode = *mode;
            }
            Op::Sync { .. } | Op::SyncAll => {}
        }
    }

    /// Remove `path` and everything under it; their names relative to it.
    fn take_tree(&mut self, path: &Path) -> Vec<(PathBuf, usize)> {
        let keys: Vec<PathBuf> = self
            .names
            .range(path.to_path_buf()..)
            .take_while(|(k, _)| k.starts_with(path))
            .map(|(k, _)| k.clone())
            .collect();
        keys.into_iter()
            .filter_map(|k| {
                let i = self.names.remove(&k)?;
                Some((
                    k.strip_prefix(path).unwrap_or(Path::new("")).to_path_buf(),
                    i,
                ))
            })
            .collect()
    }

    /// Write this file system's `from` tree to disk at `to` (an empty
    /// directory), with every byte string `from` in file contents replaced by
    /// `to` (the same length: the run wrote absolute paths into config and
    /// state files). A name whose parent directory is not in the state is
    /// lost, as an orphan is.
    pub fn materialize(&self, from: &Path, to: &Path) -> Result<()> {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::PermissionsExt;
        let (fb, tb) = (from.as_os_str().as_bytes(), to.as_os_str().as_bytes());
        if fb.len() != tb.len() {
            return Err(Error::internal(
                "a crash state's root must be as long as the recorded one",
            ));
        }
        let io = |p: &Path, e: std::io::Error| Error::io(p.display().to_string(), e);
        // A cut means a reboot: every file in the state was written before
        // the current boot, and says so in its mtime (the rule that tells a
        // stale lock, `lock::from_before_boot`, reads it). Where the boot
        // time is unknown (the portable set), a minute ago: one instant
        // for every file either way, so that a lock is never older than
        // the intent that names it (`lock::clear_stale`).
        let written = crate::lock::boot_time().unwrap_or_else(std::time::SystemTime::now)
            - std::time::Duration::from_secs(60);
        // Hard links stay links (a pusher's pending file and its lock).
        let mut made: HashMap<usize, PathBuf> = HashMap::new();
        for (path, &ino) in &self.names {
            let Ok(rel) = path.strip_prefix(from) else {
                continue;
            };
            let parent_ok = path == from
                || path
                    .parent()
                    .and_then(|p| self.names.get(p))
                    .is_some_and(|&i| self.nodes[i].data == Data::Dir);
            if !parent_ok {
                continue;
            }
            if path == from {
                // The root: the caller's fresh directory.
                continue;
            }
            let dest = to.join(rel);
            if !dest.parent().is_some_and(|p| p.exists()) {
                // The parent itself was an orphan.
                continue;
            }
            let node = &self.nodes[ino];
            match &node.data {
                Data::Dir => std::fs::create_dir(&dest).map_err(|e| io(&dest, e))?,
                Data::Symlink(t) => {
                    std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(t), &dest)
                        .map_err(|e| io(&dest, e))?
                }
                Data::File(_) if made.contains_key(&ino) => {
                    std::fs::hard_link(&made[&ino], &dest).map_err(|e| io(&dest, e))?
                }
                Data::File(bytes) => {
                    let bytes = replace_all(bytes, fb, tb);
                    let f = std::fs::File::create_new(&dest).map_err(|e| io(&dest, e))?;
                    let done = std::io::Write::write_all(&mut &f, &bytes)
                        .and_then(|()| {
                            f.set_permissions(std::fs::Permissions::from_mode(node.mode & 0o777))
                        })
                        .and_then(|()| f.set_modified(written));
                    done.map_err(|e| io(&dest, e))?;
                    made.insert(ino, dest);
                }
            }
        }
        Ok(())
    }
}

fn join(base: &Path, rel: &Path) -> PathBuf {
    if rel.as_os_str().is_empty() {
        base.to_path_buf()
    } else {
        base.join(rel)
    }
}

fn replace_all(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    if from.is_empty() || from == to {
        return out;
    }
    let mut i = 0;
    while let Some(at) = memchr::memmem::find(&out[i..], from) {
        out[i + at..i + at + from.len()].copy_from_slice(to);
        i += at + from.len();
    }
    out
}
