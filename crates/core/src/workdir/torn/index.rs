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
    if crate::git::index_file::IndexFile::cached(path, skip_hash).is_some() {
        // Laid out as git writes it and whole (its trailer checked, or
        // left zero as the config allows), nothing libgit2 cannot read:
        // read once for the process (the step's checks and its index
        // write use the same read), never parsed by libgit2 (a step costs
        // what it writes; libgit2's read of a large index is most of a
        // step's time).
        return IndexState::Whole;
    }
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

#[cfg(test)]
mod tests {
    use crate::git::index_file::IndexFile;
    use crate::git::testing::git;

    fn plainly_whole(b: &[u8]) -> bool {
        IndexFile::parse(b.to_vec()).is_some()
    }

    /// Indexes as git writes them, in every version, with the extensions
    /// a monorepo's git writes (cache tree, untracked cache, fsmonitor,
    /// the end-of-entries and offset tables), are plainly whole; a sparse
    /// index, a split one, and every torn or shortened copy are not.
    #[test]
    fn git_s_own_indexes_and_their_tears() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        git(p, &["init", "-q"]);
        for i in 0..300 {
            let dir = p.join(format!("d{}", i % 7));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(format!("{}{i}.txt", "x".repeat(i % 90))), "x").unwrap();
        }
        git(p, &["add", "-A"]);
        git(
            p,
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-qm",
                "base",
            ],
        );
        // A path longer than the flags' 12 bits (NUL-terminated), in the
        // index only (no file system takes it; its blob need not exist).
        let deep: Vec<String> = (0..25).map(|i| format!("{i}{}", "L".repeat(200))).collect();
        let cacheinfo = format!(
            "100644,{},{}/f",
            "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391",
            deep.join("/")
        );
        git(p, &["update-index", "--add", "--cacheinfo", &cacheinfo]);
        let index = p.join(".git/index");
        for (version, extra) in [
            ("2", &[][..]),
            ("3", &["-c", "core.untrackedCache=true"][..]),
            (
                "4",
                &["-c", "index.threads=4", "-c", "core.untrackedCache=true"][..],
            ),
        ] {
            git(p, &["update-index", "--index-version", version]);
            // An intent-to-add entry sets the extended flags (version 3).
            std::fs::write(p.join("new.txt"), "n").unwrap();
            git(p, &["add", "-N", "new.txt"]);
            let mut args = extra.to_vec();
            args.extend([
                "-c",
                "index.recordEndOfIndexEntries=true",
                "-c",
                "index.recordOffsetTable=true",
                "status",
                "--porcelain",
            ]);
            git(p, &args);
            git(p, &["reset", "-q", "--", "new.txt"]);
            git(p, &args);
            let bytes = std::fs::read(&index).unwrap();
            assert!(plainly_whole(&bytes), "version {version}");
            for cut in [bytes.len() - 21, bytes.len() / 2, 40] {
                let mut torn = bytes[..cut].to_vec();
                torn.extend_from_slice(&[0; 20]);
                assert!(!plainly_whole(&torn), "version {version} cut at {cut}");
            }
            let mut zeroed = bytes.clone();
            let mid = bytes.len() / 2;
            zeroed[mid..bytes.len() - 20].fill(0);
            assert!(
                !plainly_whole(&zeroed),
                "version {version} zeroed from {mid}"
            );
        }
        git(
            p,
            &[
                "-c",
                "core.splitIndex=true",
                "update-index",
                "--split-index",
            ],
        );
        assert!(!plainly_whole(&std::fs::read(&index).unwrap()), "split");
    }
}
