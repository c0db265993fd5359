//! Whether the index file is whole, torn, or whole in a format libgit2
//! does not read, judged as git judges it.
//!
//! Owns that judgement for [`super`]'s mend. Invariant: an index is torn
//! only when git's own checks fail on it (its SHA-1 trailer, or, where
//! `index.skipHash` leaves none, git's read of it); a sparse or split
//! index is whole, and never rebuilt.

use std::path::Path;

/// What the index file is.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum IndexState {
    Whole,
    /// Whole as git reads it, in a format libgit2 does not read (a
    /// sparse or split index).
    Unreadable,
    /// Torn: git's own checks fail on it.
    Torn,
}

/// Whether the index file is whole, as git checks it: the "DIRC" header
/// and a trailing SHA-1 of everything before it, as `git fsck` checks
/// (git's other commands read a torn index without complaint, and so does
/// libgit2 until it reaches the torn part). An all-zero trailer
/// (`index.skipHash`, which `feature.manyFiles` sets) cannot be checked:
/// where the config asks for one, whole if libgit2 reads every entry, or
/// else if git itself reads it (elsewhere it is torn). A sparse index (`index.sparse`: directory entries and the `sdir`
/// extension) is whole and not libgit2's: never "torn", never rebuilt.
pub(super) fn index_state(path: &Path, workdir: &Path, skip_hash: bool) -> IndexState {
    use sha1::Digest;
    let Ok(bytes) = std::fs::read(path) else {
        return IndexState::Torn;
    };
    if bytes.len() < 12 + 20 || &bytes[..4] != b"DIRC" {
        return IndexState::Torn;
    }
    let (body, trailer) = bytes.split_at(bytes.len() - 20);
    let hashed = !trailer.iter().all(|b| *b == 0);
    if (hashed && sha1::Sha1::digest(body).as_slice() != trailer) || (!hashed && !skip_hash) {
        return IndexState::Torn;
    }
    let libgit2 = git2::Index::open(path).ok().map(|i| {
        let whole = i.iter().count() == i.len();
        let sparse = i.iter().any(|e| e.mode == 0o040000);
        (whole, sparse)
    });
    match libgit2 {
        Some((true, false)) => IndexState::Whole,
        _ if !hashed
            && !super::git_reads(
                workdir,
                &[
                    "ls-files",
                    "--sparse",
                    "--stage",
                    "--",
                    ":(top,literal).git",
                ],
            ) =>
        {
            IndexState::Torn
        }
        _ => IndexState::Unreadable,
    }
}
