//! A step's small objects written as loose objects, as git writes them,
//! without libgit2's object database.
//!
//! libgit2's write of one object first "freshens" it, rescans the pack
//! directory when it is not there, writes a temporary file, links it,
//! unlinks the temporary and, with strict object creation, reads back what
//! a tree names: about twenty system calls an object, sixty a step. This
//! writes `objects/xx/tmp_obj_…`, links it to its name and unlinks it:
//! five.
//!
//! Owns the objects this process wrote ([`written_here`]). Invariant: a
//! loose object's name is the SHA-1 of its content (a linked file is
//! whole: it was written and closed first), and an object already there
//! is never replaced unless it is not whole (its content does not inflate
//! to an object hashing to its name); nothing is flushed here (the
//! commit point's `syncfs` does, [`crate::flush`]). In a shared
//! repository each file and directory gets the mode git gives it
//! ([`super::shared`]). Where the file system has no hard links, the
//! object is renamed into place as git does. Objects over [`SMALL`], and
//! repositories this writer does not take (`GIT_OBJECT_DIRECTORY`, a
//! SHA-256 repository), go through libgit2.

use std::collections::{HashMap, HashSet};
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use git2::{ObjectType, Oid, Repository};

use crate::error::Result;

/// Objects up to this size are written here; a larger one through
/// libgit2, which deflates it as a stream (a whole copy would break the
/// one-large-file memory bound).
pub const SMALL: usize = 1 << 20;

thread_local! {
    /// Per repository (its git dir): the objects directory this writer
    /// uses, or None where libgit2 writes.
    static TAKES: std::cell::RefCell<Vec<(PathBuf, Option<PathBuf>)>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn written() -> &'static std::sync::Mutex<HashMap<PathBuf, HashSet<Oid>>> {
    static W: std::sync::OnceLock<std::sync::Mutex<HashMap<PathBuf, HashSet<Oid>>>> =
        std::sync::OnceLock::new();
    W.get_or_init(Default::default)
}

/// The blobs this process wrote last, their content kept (at most
/// [`RECENT`] bytes): the worktree update writes a step's new files from
/// them without reading back what was just written.
const RECENT: usize = 4 << 20;

type Recent = std::collections::VecDeque<(Oid, ObjectType, std::sync::Arc<Vec<u8>>)>;

fn recent_blobs() -> &'static std::sync::Mutex<(Recent, usize)> {
    static R: std::sync::OnceLock<std::sync::Mutex<(Recent, usize)>> = std::sync::OnceLock::new();
    R.get_or_init(Default::default)
}

/// The content of the blob `id` if this process wrote it lately.
pub fn recent(id: Oid) -> Option<std::sync::Arc<Vec<u8>>> {
    recent_of(id, ObjectType::Blob)
}

fn recent_of(id: Oid, kind: ObjectType) -> Option<std::sync::Arc<Vec<u8>>> {
    let r = recent_blobs().lock().ok()?;
    r.0.iter()
        .rev()
        .find(|(i, k, _)| *i == id && *k == kind)
        .map(|(_, _, d)| d.clone())
}

/// The tree and parents of the commit `id` if this process wrote it
/// lately, read from the bytes it wrote.
pub fn recent_commit(id: Oid) -> Option<(Oid, Vec<Oid>)> {
    let raw = recent_of(id, ObjectType::Commit)?;
    let mut tree = None;
    let mut parents = Vec::new();
    for line in raw.split(|b| *b == b'\n') {
        if line.is_empty() {
            break;
        }
        let hex = |p: &[u8]| {
            line.strip_prefix(p)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| Oid::from_str(h).ok())
        };
        if let Some(t) = hex(b"tree ") {
            tree = Some(t);
        } else if let Some(p) = hex(b"parent ") {
            parents.push(p);
        }
    }
    Some((tree?, parents))
}

fn remember(id: Oid, kind: ObjectType, data: &[u8]) {
    if let Ok(mut r) = recent_blobs().lock() {
        let (list, bytes) = &mut *r;
        list.push_back((id, kind, std::sync::Arc::new(data.to_vec())));
        *bytes += data.len();
        while *bytes > RECENT {
            match list.pop_front() {
                Some((_, _, d)) => *bytes -= d.len(),
                None => break,
            }
        }
    }
}

/// Whether this process wrote (linked into place) the loose object `id`
/// in `objects`: it is whole, and needs no check before it is copied.
pub fn written_here(objects: &Path, id: Oid) -> bool {
    written()
        .lock()
        .is_ok_and(|w| w.get(objects).is_some_and(|s| s.contains(&id)))
}

/// The objects directory this writer writes into for `repo`, if it takes it.
fn objects_dir(repo: &Repository) -> Option<PathBuf> {
    TAKES.with(|c| {
        let mut c = c.borrow_mut();
        if let Some((_, d)) = c.iter().find(|(p, _)| p == repo.path()) {
            return d.clone();
        }
        let format = repo
            .config()
            .ok()
            .and_then(|c| c.get_string("extensions.objectFormat").ok())
            .is_some_and(|v| !v.eq_ignore_ascii_case("sha1"));
        let dir = (!format && std::env::var_os("GIT_OBJECT_DIRECTORY").is_none())
            .then(|| repo.commondir().join("objects"))
            .filter(|d| d.is_dir());
        // (A box and the remotes it pushes to: a handful.)
        if c.len() >= 8 {
            c.remove(0);
        }
        c.push((repo.path().to_path_buf(), dir.clone()));
        dir
    })
}

/// The id `data` has as an object of `kind`.
/// (libgit2's SHA-1, with its collision detection: a crafted collision is
/// refused as git refuses it.)
pub fn hash(kind: ObjectType, data: &[u8]) -> Result<Oid> {
    Ok(Oid::hash_object(kind, data)?)
}

/// Write `data` as an object of `kind` in `repo`, returning its id.
pub fn write(repo: &Repository, kind: ObjectType, data: &[u8]) -> Result<Oid> {
    let dir = match objects_dir(repo) {
        Some(d) if data.len() <= SMALL => d,
        Some(d) => {
            // libgit2 takes any file at the object's name for the object
            // (an empty one a power cut left included): one that is not
            // whole goes first, and libgit2 writes it afresh.
            let hex = hash(kind, data)?.to_string();
            let target = d.join(&hex[..2]).join(&hex[2..]);
            if target.exists() && !is_whole(&target, &hex) {
                std::fs::remove_file(&target)?;
            }
            let id = repo.odb()?.write(kind, data)?;
            // libgit2 ignores core.sharedRepository: git's modes given.
            super::shared::created_under(repo.path(), &d, &target)?;
            return Ok(id);
        }
        None => return Ok(repo.odb()?.write(kind, data)?),
    };
    let id = hash(kind, data)?;
    let hex = id.to_string();
    let fan = dir.join(&hex[..2]);
    let target = fan.join(&hex[2..]);
    // Written by this process, and still there (a `git prune` may have
    // taken it since, if nothing named it).
    if written_here(&dir, id) && target.exists() {
        return Ok(id);
    }
    let mut raw = Vec::with_capacity(data.len() + 32);
    raw.extend_from_slice(format!("{} {}\0", kind.str(), data.len()).as_bytes());
    raw.extend_from_slice(data);
    let mut z = libdeflater::Compressor::new(libdeflater::CompressionLvl::new(1).expect("level 1"));
    let mut out = vec![0; z.zlib_compress_bound(raw.len())];
    let n = z
        .zlib_compress(&raw, &mut out)
        .map_err(|e| crate::error::Error::other(format!("cannot deflate an object: {e:?}")))?;
    out.truncate(n);
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    // A name no other writer holds: a killed run's leftover (the same pid
    // in a new container) or another process's is passed over.
    let mut tmp = PathBuf::new();
    let mut made = None;
    for attempt in 0u64..64 {
        tmp = fan.join(format!(
            "tmp_obj_steps_{}_{}",
            PID.get_or_init(std::process::id),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let open = |p: &Path| {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o444)
                .open(p)
        };
        let opened = match open(&tmp) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && attempt == 0 => {
                match std::fs::create_dir(&fan) {
                    Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e.into()),
                    Err(_) => {}
                    Ok(()) => super::shared::created(repo.path(), &fan)?,
                }
                open(&tmp)
            }
            r => r,
        };
        match opened {
            Ok(file) => {
                made = Some(file);
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // Somewhere else in the sequence (a leftover names the
                // ones after it too).
                N.fetch_add(attempt * 7919 + 1, std::sync::atomic::Ordering::Relaxed);
            }
            Err(e) => return Err(e.into()),
        }
    }
    let Some(mut f) = made else {
        return Err(crate::error::Error::local(format!(
            "cannot create a temporary object in {}: every name tried is taken",
            fan.display()
        )));
    };
    // Linked, as git does, never renamed over an object already there:
    // that one may be durable, and a power cut before the commit point's
    // flush must not trade it for these unflushed bytes.
    let linked = f.write_all(&out).and_then(|()| {
        // Where a file system's syncfs does not flush, its bytes before
        // its name ([`super::fsync`]).
        super::fsync::before_naming(&f)?;
        drop(f);
        super::shared::created(repo.path(), &tmp)?;
        let link = match std::fs::hard_link(&tmp, &target) {
            // git's fallback (finalize_object_file) where a file system
            // has no hard links (FAT, some FUSE and network file
            // systems): an object already there is kept, else the
            // temporary is renamed to its name.
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                match std::fs::symlink_metadata(&target) {
                    Ok(_) => Err(std::io::Error::from(std::io::ErrorKind::AlreadyExists)),
                    Err(_) => std::fs::rename(&tmp, &target).map_err(|_| e),
                }
            }
            other => other,
        };
        match link {
            Ok(()) => {
                super::fsync::named(&fan);
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && !is_whole(&target, &hex) => {
                // Not the object (empty, cut short: what a power cut
                // leaves, and git then calls "object file is empty"): this
                // whole copy takes its place, in one rename.
                std::fs::rename(&tmp, &target)?;
                super::fsync::wrote(&target);
                super::fsync::named(&fan);
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // Perhaps left by a run a kill stopped before its flush:
                // flushed with this step where syncfs does not flush.
                super::fsync::wrote(&target);
                super::fsync::named(&fan);
                // Freshened, as git does, so a `git gc` running now does
                // not prune an old object this step starts to use.
                let _ = std::fs::File::open(&target)
                    .and_then(|t| t.set_modified(std::time::SystemTime::now()));
                Ok(false)
            }
            Err(e) => Err(e),
        }
    });
    let _ = std::fs::remove_file(&tmp);
    // (Only a file this process made is vouched for as whole.)
    if linked? {
        if let Ok(mut w) = written().lock() {
            w.entry(dir).or_default().insert(id);
        }
    }
    if matches!(kind, ObjectType::Blob | ObjectType::Commit) {
        remember(id, kind, data);
    }
    Ok(id)
}

/// Whether a loose object file inflates whole to an object hashing to
/// `hex` (SHA-1 repositories; another length is not checked).
pub fn is_whole(path: &Path, hex: &str) -> bool {
    use sha1::Digest;
    let Some(inflated) = inflate(path) else {
        return false;
    };
    if inflated.is_empty() {
        // Over the bound: not checked (said in the guide).
        return true;
    }
    // The header's size must match what follows it.
    let Some(nul) = inflated.iter().position(|b| *b == 0) else {
        return false;
    };
    let header = String::from_utf8_lossy(&inflated[..nul]);
    let size_ok = header
        .split_once(' ')
        .and_then(|(_, n)| n.parse::<usize>().ok())
        .is_some_and(|n| n == inflated.len() - nul - 1);
    size_ok && super::hex(&sha1::Sha1::digest(&inflated)) == hex
}

/// Loose objects under `objects` that are not whole (empty, cut short, or
/// not hashing to their name), at most `cap` of them: what a file system
/// that dropped unflushed data leaves of a write nobody flushed (a clone's
/// objects, which git does not fsync by default). Read only on an error's
/// path: every loose object is inflated.
pub fn damaged(objects: &Path, cap: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(fans) = std::fs::read_dir(objects) else {
        return out;
    };
    let mut fans: Vec<_> = fans.flatten().map(|e| e.path()).collect();
    fans.sort();
    for fan in fans {
        let Some(prefix) = fan
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| n.len() == 2 && n.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(str::to_string)
        else {
            continue;
        };
        let Ok(entries) = std::fs::read_dir(&fan) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.len() != 38 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
                continue;
            }
            if !is_whole(&e.path(), &format!("{prefix}{name}")) {
                out.push(e.path());
                if out.len() >= cap {
                    return out;
                }
            }
        }
    }
    out
}

/// A loose object file, inflated (None when it does not inflate whole).
pub fn inflate(path: &Path) -> Option<Vec<u8>> {
    let Ok(bytes) = std::fs::read(path) else {
        return None;
    };
    // libdeflate inflates whole streams only: grow the buffer until the
    // object fits (a torn stream fails at any size).
    let mut z = libdeflater::Decompressor::new();
    let mut inflated = vec![0u8; (bytes.len() * 4).max(64)];
    loop {
        match z.zlib_decompress(&bytes, &mut inflated) {
            Ok(n) => {
                inflated.truncate(n);
                break;
            }
            // Up to 1 GiB inflated (a crafted stream could ask for any
            // size): a larger loose object is not checked, and stays.
            Err(libdeflater::DecompressionError::InsufficientSpace)
                if inflated.len() < (1 << 30) =>
            {
                let more = inflated.len() * 4;
                inflated.resize(more, 0);
            }
            Err(libdeflater::DecompressionError::InsufficientSpace) => return Some(Vec::new()),
            Err(_) => return None,
        }
    }
    Some(inflated)
}

/// Serialise tree entries (name, raw mode, id) as git stores a tree: in
/// git's order, where a directory's name sorts as if it ended in `/`.
pub fn tree_bytes(entries: &mut [(Vec<u8>, u32, Oid)]) -> Vec<u8> {
    fn key(name: &[u8], mode: u32, i: usize) -> u8 {
        match name.get(i) {
            Some(b) => *b,
            None if mode & 0o170000 == 0o040000 => b'/',
            None => 0,
        }
    }
    entries.sort_by(|a, b| {
        let n = a.0.len().min(b.0.len());
        a.0[..n]
            .cmp(&b.0[..n])
            .then_with(|| key(&a.0, a.1, n).cmp(&key(&b.0, b.1, n)))
            .then_with(|| a.0.len().cmp(&b.0.len()))
    });
    let mut out = Vec::with_capacity(entries.len() * 48);
    for (name, mode, id) in entries.iter() {
        out.extend_from_slice(format!("{mode:o} ").as_bytes());
        out.extend_from_slice(name);
        out.push(0);
        out.extend_from_slice(id.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> (tempfile::TempDir, Repository) {
        let d = tempfile::tempdir().unwrap();
        let r = Repository::init(d.path()).unwrap();
        (d, r)
    }

    #[test]
    fn an_object_is_what_git_would_write() {
        let (_d, r) = repo();
        let id = write(&r, ObjectType::Blob, b"hello\n").unwrap();
        assert_eq!(id, Oid::hash_object(ObjectType::Blob, b"hello\n").unwrap());
        assert_eq!(r.find_blob(id).unwrap().content(), b"hello\n");
        assert!(written_here(&r.path().join("objects"), id));
        // Written again: the same id, no temporary left.
        assert_eq!(write(&r, ObjectType::Blob, b"hello\n").unwrap(), id);
        let fan = r.path().join("objects").join(&id.to_string()[..2]);
        let names: Vec<_> = std::fs::read_dir(fan)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn a_tree_is_in_git_order_as_libgit2_writes_it() {
        let (_d, r) = repo();
        let blob = r.blob(b"x").unwrap();
        let sub = {
            let mut tb = r.treebuilder(None).unwrap();
            tb.insert("f", blob, 0o100644).unwrap();
            tb.write().unwrap()
        };
        // "a.b" < "a/" (as a tree "a" sorts) < "a0"; a file "a-" before.
        let names: [(&str, u32, Oid); 5] = [
            ("a0", 0o100644, blob),
            ("a", 0o040000, sub),
            ("a.b", 0o100755, blob),
            ("a-", 0o120000, blob),
            ("b", 0o100644, blob),
        ];
        let mut tb = r.treebuilder(None).unwrap();
        for (n, m, id) in names {
            tb.insert(n, id, m as i32).unwrap();
        }
        let theirs = tb.write().unwrap();
        let mut entries: Vec<_> = names
            .iter()
            .map(|(n, m, id)| (n.as_bytes().to_vec(), *m, *id))
            .collect();
        let ours = write(&r, ObjectType::Tree, &tree_bytes(&mut entries)).unwrap();
        assert_eq!(ours, theirs);
    }

    #[test]
    fn a_commit_written_here_is_read_from_its_bytes() {
        let (_d, r) = repo();
        let sig = git2::Signature::new("a", "a@x", &git2::Time::new(1, -90)).unwrap();
        let tree = r
            .find_tree(r.treebuilder(None).unwrap().write().unwrap())
            .unwrap();
        let p1 = r.commit(None, &sig, &sig, "p1", &tree, &[]).unwrap();
        let p2 = r.commit(None, &sig, &sig, "p2", &tree, &[]).unwrap();
        let (c1, c2) = (r.find_commit(p1).unwrap(), r.find_commit(p2).unwrap());
        let buf = r
            .commit_create_buffer(&sig, &sig, "m\n\ntree 0000\n", &tree, &[&c1, &c2])
            .unwrap();
        let id = write(&r, ObjectType::Commit, &buf).unwrap();
        assert_eq!(recent_commit(id), Some((tree.id(), vec![p1, p2])));
        let c = r.find_commit(id).unwrap();
        assert_eq!(c.parent_ids().collect::<Vec<_>>(), [p1, p2]);
        // Kept by kind: a commit is no blob.
        assert!(recent(id).is_none());
    }

    #[test]
    fn an_object_already_there_is_never_replaced() {
        use std::os::unix::fs::MetadataExt;
        let (_d, r) = repo();
        let theirs = r.blob(b"theirs\n").unwrap();
        let hex = theirs.to_string();
        let path = r.path().join("objects").join(&hex[..2]).join(&hex[2..]);
        let ino = std::fs::metadata(&path).unwrap().ino();
        assert_eq!(write(&r, ObjectType::Blob, b"theirs\n").unwrap(), theirs);
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), ino);
        assert!(
            !written_here(&r.path().join("objects"), theirs),
            "not this process's file"
        );
        let left: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .flatten()
            .collect();
        assert_eq!(left.len(), 1, "no temporary left");
    }

    #[test]
    fn a_leftover_temporary_or_a_pruned_object_is_no_obstacle() {
        let (_d, r) = repo();
        let id = Oid::hash_object(ObjectType::Blob, b"left\n").unwrap();
        let hex = id.to_string();
        let fan = r.path().join("objects").join(&hex[..2]);
        std::fs::create_dir_all(&fan).unwrap();
        // A killed run with this pid (a container's) left these names.
        let pid = std::process::id();
        for n in 0..3000 {
            std::fs::write(fan.join(format!("tmp_obj_steps_{pid}_{n}")), b"x").unwrap();
        }
        assert_eq!(write(&r, ObjectType::Blob, b"left\n").unwrap(), id);
        assert_eq!(r.find_blob(id).unwrap().content(), b"left\n");
        assert_eq!(
            std::fs::read_dir(&fan).unwrap().count(),
            3001,
            "the leftovers are not this writer's"
        );
        // `git prune` took it since this process wrote it: written again.
        std::fs::remove_file(fan.join(&hex[2..])).unwrap();
        assert_eq!(write(&r, ObjectType::Blob, b"left\n").unwrap(), id);
        assert!(fan.join(&hex[2..]).exists());
    }

    #[test]
    fn a_large_object_goes_through_libgit2() {
        let (_d, r) = repo();
        let big = vec![b'x'; SMALL + 1];
        let id = write(&r, ObjectType::Blob, &big).unwrap();
        assert_eq!(r.find_blob(id).unwrap().size(), SMALL + 1);
        assert!(!written_here(&r.path().join("objects"), id));
    }
}
