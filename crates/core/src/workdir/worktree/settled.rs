//! What this process last settled in the worktree: the files a worktree
//! update wrote, with their stat data and the index it wrote after them.
//!
//! The next step asks of the same paths "does the worktree still hold
//! what HEAD holds?" (the dirty check) and "does the file still hold the
//! version the update replaces?" (before the push and before the rename).
//! libgit2's status answers the first in about thirty system calls (HEAD,
//! the index, the configuration, the ignore files, a directory scan); a
//! file read answers the second. A file whose stat data is what this
//! process saw right after writing it, under an index and HEAD nobody
//! touched since, answers both in one `lstat`.
//!
//! Invariant: a path is vouched for only when all of these hold — the
//! index file has the stat data it had right after this process wrote it;
//! HEAD names the branch, and the branch the commit, that update moved to;
//! the file's stat data (inode, size, mtime and ctime to the nanosecond,
//! mode) is unchanged since it was written, and its mtime is older than
//! the index's (git's racy-clean rule: an edit in the same clock tick as
//! the write cannot be told by stat, and is compared by content instead).
//! Anything else falls back to the full check.

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use git2::{Oid, Repository};

use crate::git::{BlobEntry, Change};

/// The stat data git keeps per index entry, to the nanosecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    mode: u32,
}

fn stamp(m: &std::fs::Metadata) -> Stamp {
    Stamp {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime: (m.mtime(), m.mtime_nsec()),
        ctime: (m.ctime(), m.ctime_nsec()),
        mode: m.mode(),
    }
}

struct Settled {
    git_dir: PathBuf,
    commit: Oid,
    index: Stamp,
    /// Path → (its file's stamp, the entry HEAD and the index hold), or
    /// None where the update removed the path.
    paths: HashMap<String, Option<(Stamp, BlobEntry)>>,
}

thread_local! {
    static SETTLED: RefCell<Option<Settled>> = const { RefCell::new(None) };
}

/// The index's stamp now, if it has one.
fn index_stamp(repo: &Repository) -> Option<Stamp> {
    std::fs::symlink_metadata(repo.path().join("index"))
        .ok()
        .map(|m| stamp(&m))
}

/// An update is about to write `changes` (and the index) in `repo`: what
/// was vouched for of those paths is not any more, and nothing is if the
/// index was written by someone else since.
pub(super) fn begin(repo: &Repository, changes: &[Change]) {
    let now = index_stamp(repo);
    SETTLED.with(|s| {
        let mut s = s.borrow_mut();
        let keep = s
            .as_ref()
            .is_some_and(|st| st.git_dir == repo.path() && Some(st.index) == now);
        if !keep {
            *s = None;
            return;
        }
        if let Some(st) = s.as_mut() {
            for c in changes {
                st.paths.remove(&c.path);
            }
        }
    });
}

/// The update of `repo` to `commit` wrote the index after
/// the files `written` (path, the stat data seen right after its rename,
/// its entry) and removed `removed`.
pub(super) fn end(
    repo: &Repository,
    commit: Oid,
    written: &[(String, std::fs::Metadata, BlobEntry)],
    removed: &[&str],
) {
    let Some(index) = index_stamp(repo) else {
        return forget();
    };
    SETTLED.with(|s| {
        let mut s = s.borrow_mut();
        let st = s.get_or_insert_with(|| Settled {
            git_dir: repo.path().to_path_buf(),
            commit,
            index,
            paths: HashMap::new(),
        });
        if st.git_dir != repo.path() {
            st.paths.clear();
        }
        st.git_dir = repo.path().to_path_buf();
        st.commit = commit;
        st.index = index;
        for (path, meta, e) in written {
            let f = stamp(meta);
            // Racily clean: written in the index's clock tick.
            if f.mtime < index.mtime {
                st.paths.insert(path.clone(), Some((f, *e)));
            }
        }
        for p in removed {
            st.paths.insert((*p).to_string(), None);
        }
    });
}

/// Nothing is vouched for any more (a write this module did not see).
pub(super) fn forget() {
    SETTLED.with(|s| *s.borrow_mut() = None);
}

/// The first line of a small file, read with one open, read and close.
fn first_line(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut buf = [0u8; 512];
    let n = f.read(&mut buf).ok()?;
    let line = buf[..n].split(|b| *b == b'\n').next()?;
    Some(line.to_vec())
}

/// Whether HEAD names a branch whose loose ref holds `commit`.
fn head_is(repo: &Repository, commit: Oid) -> bool {
    let head = first_line(&repo.path().join("HEAD"));
    let Some(name) = head
        .as_deref()
        .and_then(|h| h.strip_prefix(b"ref: refs/heads/"))
    else {
        return false;
    };
    let Ok(name) = std::str::from_utf8(name) else {
        return false;
    };
    if name.split('/').any(|c| c.is_empty() || c == "..") {
        return false;
    }
    first_line(&repo.commondir().join("refs/heads").join(name))
        .is_some_and(|v| v == commit.to_string().as_bytes())
}

/// Whether every path of `changes` is vouched for: the worktree and index
/// hold what HEAD holds there, each change's old side (false: the caller
/// takes the full check).
pub(super) fn clean(repo: &Repository, changes: &[Change]) -> bool {
    SETTLED.with(|s| {
        let s = s.borrow();
        let Some(st) = s.as_ref().filter(|st| st.git_dir == repo.path()) else {
            return false;
        };
        let vouched = changes.iter().all(|c| match st.paths.get(&c.path) {
            Some(Some((_, e))) => c.old == Some(*e),
            Some(None) => c.old.is_none(),
            None => false,
        });
        if !vouched || index_stamp(repo) != Some(st.index) {
            return false;
        }
        if !head_is(repo, st.commit) {
            return false;
        }
        let Some(workdir) = repo.workdir() else {
            return false;
        };
        changes
            .iter()
            .all(|c| unchanged(&workdir.join(&c.path), &st.paths[&c.path]))
    })
}

fn unchanged(full: &Path, was: &Option<(Stamp, BlobEntry)>) -> bool {
    match (std::fs::symlink_metadata(full), was) {
        (Ok(m), Some((f, _))) => stamp(&m) == *f,
        (Err(e), None) => e.kind() == std::io::ErrorKind::NotFound,
        _ => false,
    }
}

/// Whether the file at `path` is, by its stat data, the one this process
/// wrote for `entry` (and nobody changed since): it holds that version.
pub(super) fn holds(repo: &Repository, path: &str, entry: &Option<BlobEntry>) -> bool {
    SETTLED.with(|s| {
        let s = s.borrow();
        let Some(st) = s.as_ref().filter(|st| st.git_dir == repo.path()) else {
            return false;
        };
        let Some(was) = st.paths.get(path) else {
            return false;
        };
        let same_entry = match (was, entry) {
            (Some((_, e)), Some(x)) => e == x,
            (None, None) => true,
            _ => false,
        };
        let Some(workdir) = repo.workdir() else {
            return false;
        };
        same_entry && unchanged(&workdir.join(path), was)
    })
}
