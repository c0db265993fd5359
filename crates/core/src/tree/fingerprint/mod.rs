//! Artifact and history fingerprints, exactly as the SPEC defines them.
//!
//! Owns the two numbers the invariant is stated in. Invariant: they depend
//! only on the tree's content and modes (artifact) and on the ordered
//! `(step id, decision digest)` pairs (history) — never on commit ids, times
//! or authors — so two runs of the same steps agree and anyone can recompute
//! them with plain git and sha256sum.

use git2::{ObjectType, Oid, Repository, Tree};
use sha2::{Digest, Sha256};

use crate::error::Result;
use crate::git::hex;

mod spliced;

/// `sha256:` + SHA-256 over every non-tree entry, sorted by full path as
/// bytes, each contributing `<mode> <path>\0<32-byte SHA-256 of content>`.
/// Symlinks hash their target (the blob), submodules the commit id in hex.
pub fn artifact(repo: &Repository, tree: Option<&Tree<'_>>) -> Result<String> {
    fingerprint(repo, tree, Remember::Nothing)
}

/// As [`artifact`], for a run's own head (`apply`, `run`, MCP): the blobs'
/// content hashes earlier processes computed are read from
/// `.git/steps/blob-sha256` rather than every blob again, so one process
/// per step costs what the step changes, not what the tree holds. An
/// audit (`fingerprint`, `verify --merged`, the crash matrix's judge) reads
/// every blob itself ([`artifact`]): a damaged object is an error there.
///
/// The bytes it hashed are kept in `steps/artifact/stream`, and the next
/// process splices its fingerprint from them (`spliced`): it reads only
/// the directories the head changed. `keep` false (a dry run: no lock,
/// objects in memory): what was remembered is read, nothing is written.
pub fn artifact_remembered(
    repo: &Repository,
    tree: Option<&Tree<'_>>,
    keep: bool,
) -> Result<String> {
    let how = match keep {
        true => Remember::ReadAndKeep,
        false => Remember::Read,
    };
    fingerprint(repo, tree, how)
}

/// What a fingerprint may use and leave of what earlier processes
/// computed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Remember {
    /// An audit: every tree and blob read.
    Nothing,
    /// The hashes and the stream read; nothing written.
    Read,
    /// Read, and what this computed kept.
    ReadAndKeep,
}

fn fingerprint(repo: &Repository, tree: Option<&Tree<'_>>, how: Remember) -> Result<String> {
    let remembered = how != Remember::Nothing;
    let keep = how == Remember::ReadAndKeep;
    let cache_file = repo.commondir().join("steps").join("blob-sha256");
    let mut new = Vec::new();
    // A run's own head: spliced from the stream of the last one, where
    // that can be vouched for.
    let spliced = match (remembered, tree) {
        (true, Some(tree)) => spliced::spliced(repo, tree, keep, &mut new),
        _ => None,
    };
    let fingerprint = match spliced {
        Some(f) => f,
        None => {
            let mut entries: Vec<Collected> = Vec::new();
            if let Some(tree) = tree {
                collect(repo, tree, &[], &mut entries)?;
            }
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            // The content hashes of earlier processes (a lost stream costs
            // reading the tree again, not every blob).
            if remembered {
                load_disk(&cache_file);
            }
            let mut out = match (keep, tree) {
                (true, Some(tree)) => spliced::Emitter::keeping(repo, tree.id()),
                _ => spliced::Emitter::hashing(),
            };
            for (path, mode, oid, kind) in entries {
                out.entry(mode, &path, &entry_hash(repo, oid, Some(kind), &mut new)?);
            }
            out.finish(repo)
        }
    };
    if keep && !new.is_empty() {
        save_disk(&cache_file, &new);
    }
    Ok(fingerprint)
}

/// What an entry contributes after its path: the SHA-256 of its content
/// (a symlink's target), or of a submodule's commit id in hex.
fn entry_hash(
    repo: &Repository,
    oid: Oid,
    kind: Option<ObjectType>,
    new: &mut Vec<(Oid, [u8; 32])>,
) -> Result<[u8; 32]> {
    if kind == Some(ObjectType::Commit) {
        Ok(Sha256::digest(oid.to_string().as_bytes()).into())
    } else {
        content_hash(repo, oid, new)
    }
}

/// A non-tree entry: full path, mode, id, kind.
type Collected = (Vec<u8>, u32, Oid, ObjectType);

/// One record of the on-disk cache: blob id, SHA-256 of its content, and
/// 8 bytes of SHA-256 over both (a torn or damaged record is never read
/// as a hash).
const RECORD: usize = 20 + 32 + 8;

/// A cache file larger than this is started again (about a million blobs).
const DISK_MAX: u64 = 64 << 20;

fn check(oid: &[u8], hash: &[u8]) -> [u8; 8] {
    let mut c = Sha256::new();
    c.update(oid);
    c.update(hash);
    let d = c.finalize();
    let mut out = [0u8; 8];
    out.copy_from_slice(&d[..8]);
    out
}

/// Read the on-disk cache into the process's, once a process. A record
/// that fails its check (a power cut tore the file's tail) is skipped.
fn load_disk(path: &std::path::Path) {
    static LOADED: std::sync::Once = std::sync::Once::new();
    LOADED.call_once(|| {
        let Ok(bytes) = std::fs::read(path) else {
            return;
        };
        let Ok(mut c) = cache().lock() else {
            return;
        };
        let m = c.get_or_insert_with(std::collections::HashMap::new);
        for r in bytes.chunks_exact(RECORD) {
            let (oid, rest) = r.split_at(20);
            let (hash, sum) = rest.split_at(32);
            if check(oid, hash) == sum {
                if let (Ok(oid), Ok(hash)) = (Oid::from_bytes(oid), <[u8; 32]>::try_from(hash)) {
                    m.insert(oid, hash);
                }
            }
        }
    });
}

/// Append the hashes this process computed. A cache, not state: nothing is
/// flushed, a failure is ignored, and losing it costs only time.
fn save_disk(path: &std::path::Path, new: &[(Oid, [u8; 32])]) {
    use std::io::Write;
    if std::fs::metadata(path).is_ok_and(|m| m.len() > DISK_MAX) {
        let _ = std::fs::remove_file(path);
    }
    let mut buf = Vec::with_capacity(new.len() * RECORD);
    for (oid, hash) in new {
        buf.extend_from_slice(oid.as_bytes());
        buf.extend_from_slice(hash);
        buf.extend_from_slice(&check(oid.as_bytes(), hash));
    }
    let _ = path.parent().map(std::fs::create_dir_all);
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        // A tail a cut left short of a record would shift every record
        // after it: the file is started again instead.
        if f.metadata().is_ok_and(|m| m.len() % RECORD as u64 != 0) {
            let _ = f.set_len(0);
        }
        if f.write_all(&buf).is_ok() {
            crate::crash::point("fingerprint-cached", "artifact");
        }
        // As git makes its own files in a shared repository.
        if let Some(git_dir) = path.parent().and_then(|steps| steps.parent()) {
            let _ = crate::git::shared::created_under(git_dir, git_dir, path);
        }
    }
}

type Cache = std::sync::Mutex<Option<std::collections::HashMap<Oid, [u8; 32]>>>;

fn cache() -> &'static Cache {
    static CACHE: Cache = std::sync::Mutex::new(None);
    &CACHE
}

/// SHA-256 of a blob's content, remembered for the process: the agent loop
/// fingerprints the artifact before every step, and a step changes few
/// blobs. (A blob id names its content, so the cache can never be stale.)
fn content_hash(repo: &Repository, oid: Oid, new: &mut Vec<(Oid, [u8; 32])>) -> Result<[u8; 32]> {
    use std::collections::HashMap;
    if let Some(h) = cache()
        .lock()
        .ok()
        .and_then(|c| c.as_ref().and_then(|m| m.get(&oid).copied()))
    {
        return Ok(h);
    }
    let mut hasher = Sha256::new();
    crate::git::blob_chunks(repo, oid, &mut |chunk| hasher.update(chunk))?;
    let h: [u8; 32] = hasher.finalize().into();
    new.push((oid, h));
    if let Ok(mut c) = cache().lock() {
        let m = c.get_or_insert_with(HashMap::new);
        if m.len() > 1_000_000 {
            m.clear();
        }
        m.insert(oid, h);
    }
    Ok(h)
}

fn collect(
    repo: &Repository,
    tree: &Tree<'_>,
    prefix: &[u8],
    out: &mut Vec<Collected>,
) -> Result<()> {
    // A stack, not recursion: a crafted tree cannot run the process out of
    // stack. Per level: the directory's path and its entries still to go.
    let list = |t: &Tree<'_>| -> Vec<(Vec<u8>, u32, Oid, Option<ObjectType>)> {
        t.iter()
            .map(|e| {
                (
                    e.name_bytes().to_vec(),
                    e.filemode() as u32,
                    e.id(),
                    e.kind(),
                )
            })
            .collect()
    };
    let mut todo = vec![(prefix.to_vec(), list(tree).into_iter())];
    while let Some((dir, entries)) = todo.last_mut() {
        let Some((name, mode, id, kind)) = entries.next() else {
            todo.pop();
            continue;
        };
        let mut path = dir.clone();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(&name);
        match kind {
            Some(ObjectType::Tree) => {
                if todo.len() > crate::git::MAX_TREE_DEPTH {
                    return Err(crate::error::Error::other(format!(
                        "a tree nests directories deeper than {} levels under {:.200}…; no worktree can hold it",
                        crate::git::MAX_TREE_DEPTH,
                        String::from_utf8_lossy(&path)
                    )));
                }
                let sub = repo.find_tree(id)?;
                todo.push((path, list(&sub).into_iter()));
            }
            kind => out.push((path, mode, id, kind.unwrap_or(ObjectType::Blob))),
        }
    }
    Ok(())
}

/// `sha256:` + SHA-256 of `<step id> <decision digest>\n` lines, oldest first.
pub fn history<'a>(receipts: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut h = Sha256::new();
    for (id, digest) in receipts {
        h.update(id.as_bytes());
        h.update(b" ");
        h.update(digest.as_bytes());
        h.update(b"\n");
    }
    format!("sha256:{}", hex(&h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A crafted tree nested 5,000 deep is refused with an error (every
    /// way a fingerprint is taken), not a stack overflow.
    #[test]
    fn a_tree_nested_past_any_path_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let repo = Repository::init(d.path()).unwrap();
        let id = crate::git::testing::nested_tree(&repo, 5000);
        let tree = repo.find_tree(id).unwrap();
        let err = artifact(&repo, Some(&tree)).unwrap_err();
        assert!(err.to_string().contains("deeper than 2048 levels"), "{err}");
        let err = artifact_remembered(&repo, Some(&tree), true).unwrap_err();
        assert!(err.to_string().contains("deeper than 2048 levels"), "{err}");
    }

    #[test]
    fn history_of_nothing_is_sha256_of_nothing() {
        assert_eq!(
            history([]),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_ne!(
            history([("a", "d1"), ("b", "d2")]),
            history([("b", "d2"), ("a", "d1")])
        );
    }
}
