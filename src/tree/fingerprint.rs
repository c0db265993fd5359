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

/// `sha256:` + SHA-256 over every non-tree entry, sorted by full path as
/// bytes, each contributing `<mode> <path>\0<32-byte SHA-256 of content>`.
/// Symlinks hash their target (the blob), submodules the commit id in hex.
pub fn artifact(repo: &Repository, tree: Option<&Tree<'_>>) -> Result<String> {
    let mut entries: Vec<(Vec<u8>, u32, Oid, ObjectType)> = Vec::new();
    if let Some(tree) = tree {
        collect(repo, tree, &mut Vec::new(), &mut entries)?;
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut h = Sha256::new();
    for (path, mode, oid, kind) in entries {
        let content_hash: [u8; 32] = if kind == ObjectType::Commit {
            Sha256::digest(oid.to_string().as_bytes()).into()
        } else {
            content_hash(repo, oid)?
        };
        h.update(format!("{mode:o} ").as_bytes());
        h.update(&path);
        h.update([0u8]);
        h.update(content_hash);
    }
    Ok(format!("sha256:{}", hex(&h.finalize())))
}

/// SHA-256 of a blob's content, remembered for the process: the agent loop
/// fingerprints the artifact before every step, and a step changes few
/// blobs. (A blob id names its content, so the cache can never be stale.)
fn content_hash(repo: &Repository, oid: Oid) -> Result<[u8; 32]> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static CACHE: Mutex<Option<HashMap<Oid, [u8; 32]>>> = Mutex::new(None);
    if let Some(h) = CACHE
        .lock()
        .ok()
        .and_then(|c| c.as_ref().and_then(|m| m.get(&oid).copied()))
    {
        return Ok(h);
    }
    let mut hasher = Sha256::new();
    crate::git::blob_chunks(repo, oid, &mut |chunk| hasher.update(chunk))?;
    let h: [u8; 32] = hasher.finalize().into();
    if let Ok(mut c) = CACHE.lock() {
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
    prefix: &mut Vec<u8>,
    out: &mut Vec<(Vec<u8>, u32, Oid, ObjectType)>,
) -> Result<()> {
    for entry in tree.iter() {
        let len = prefix.len();
        if !prefix.is_empty() {
            prefix.push(b'/');
        }
        prefix.extend_from_slice(entry.name_bytes());
        match entry.kind() {
            Some(ObjectType::Tree) => {
                let sub = repo.find_tree(entry.id())?;
                collect(repo, &sub, prefix, out)?;
            }
            kind => out.push((
                prefix.clone(),
                entry.filemode() as u32,
                entry.id(),
                kind.unwrap_or(ObjectType::Blob),
            )),
        }
        prefix.truncate(len);
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
