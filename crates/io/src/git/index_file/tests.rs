//! [`super::IndexFile`] against git: indexes git wrote in every version
//! read as `git ls-files` lists them; rewrites git reads back, whose cache
//! tree `git write-tree` trusts, and which libgit2 opens.

use super::{IndexFile, Stat};
use crate::git::testing::git;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

fn write(dir: &Path, path: &str, body: &str) {
    let f = dir.join(path);
    std::fs::create_dir_all(f.parent().unwrap()).unwrap();
    std::fs::write(f, body).unwrap();
}

/// A repository of a few hundred files in nested directories, committed,
/// with an index of `version` written by `git status` (cache tree and
/// untracked cache included).
fn repo(version: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    git(p, &["init", "-q"]);
    for i in 0..300 {
        write(
            p,
            &format!("d{}/s{}/{}{i}.txt", i % 7, i % 3, "x".repeat(i % 40)),
            "x\n",
        );
    }
    write(p, "d1-b", "a sibling that sorts between d1 and d1/\n");
    write(p, "top.sh", "#!/bin/sh\n");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p.join("top.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    git(p, &["add", "-A"]);
    git(p, &["commit", "-qm", "base"]);
    git(p, &["update-index", "--index-version", version]);
    // The cache tree, and an untracked cache.
    git(p, &["-c", "core.untrackedCache=true", "write-tree"]);
    git(
        p,
        &["-c", "core.untrackedCache=true", "status", "--porcelain"],
    );
    d
}

fn stat_of(p: &Path, path: &str, oid: git2::Oid, mode: u32) -> Stat {
    let m = std::fs::symlink_metadata(p.join(path)).unwrap();
    Stat {
        ctime: (m.ctime() as u32, m.ctime_nsec() as u32),
        mtime: (m.mtime() as u32, m.mtime_nsec() as u32),
        dev: m.dev() as u32,
        ino: m.ino() as u32,
        mode,
        uid: m.uid(),
        gid: m.gid(),
        size: m.size() as u32,
        oid,
        extended: 0,
        assume_valid: false,
    }
}

/// Every entry `git ls-files -s` lists, found with its mode and id, in
/// versions 2, 3 and 4.
#[test]
fn reads_every_entry_git_lists() {
    for version in ["2", "3", "4"] {
        let d = repo(version);
        let p = d.path();
        // An intent-to-add entry: extended flags, which keep version 3.
        write(p, "ita.txt", "later\n");
        git(p, &["add", "-N", "ita.txt"]);
        let idx = IndexFile::read(&p.join(".git/index"), false).expect(version);
        assert_eq!(idx.version, version.parse::<u32>().unwrap().max(3));
        let ita = idx.get(b"ita.txt", 0).unwrap();
        assert_eq!(ita.extended & super::INTENT_TO_ADD, super::INTENT_TO_ADD);
        // Kept through a rewrite, in every version.
        let bytes = idx.rewrite(&[(b"d1-b".to_vec(), None)], true).unwrap();
        std::fs::write(p.join(".git/index"), &bytes).unwrap();
        assert_eq!(
            git(p, &["status", "--porcelain", "--untracked-files=no"]),
            "D  d1-b\n A ita.txt\n",
            "{version}"
        );
        git(p, &["reset", "-q", "--", "d1-b"]);
        let idx = IndexFile::read(&p.join(".git/index"), false).expect(version);
        let listed = git(p, &["ls-files", "-s"]);
        assert_eq!(idx.len(), listed.lines().count(), "{version}");
        for line in listed.lines() {
            let (meta, path) = line.split_once('\t').unwrap();
            let f: Vec<&str> = meta.split(' ').collect();
            let e = idx
                .get(path.as_bytes(), 0)
                .unwrap_or_else(|| panic!("{version} {path}"));
            assert_eq!(format!("{:o}", e.mode), f[0], "{version} {path}");
            assert_eq!(e.oid.to_string(), f[1], "{version} {path}");
        }
        assert!(idx.get(b"nope", 0).is_none());
        assert!(idx.has_under(b"d1"));
        assert!(!idx.has_under(b"d1-b"));
    }
}

/// A rewrite putting in, replacing and removing entries (and a directory
/// turned into a file) is what `git add` and `git rm` make of the same
/// changes: the same `git ls-files -s`, the same `git write-tree` (which
/// trusts the cache tree: a directory left valid over a change would give
/// the old tree), a clean `git status`, and libgit2 opens it.
#[test]
fn a_rewrite_is_what_git_add_makes() {
    for version in ["2", "3", "4"] {
        let d = repo(version);
        let p = d.path();
        let twin = tempfile::tempdir().unwrap();
        let q = twin.path().join("twin");
        let cloned = Command::new("cp")
            .arg("-a")
            .arg(p)
            .arg(&q)
            .status()
            .unwrap();
        assert!(cloned.success());
        let repo = git2::Repository::open(p).unwrap();
        // The changes, on disk in both.
        for dir in [p, q.as_path()] {
            write(dir, "d1/s1/new.txt", "new\n");
            write(
                dir,
                "d2/s2/xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx38.txt",
                "changed\n",
            );
            std::fs::remove_file(dir.join("d0/s0/0.txt")).unwrap();
            std::fs::remove_dir_all(dir.join("d3")).unwrap();
            write(dir, "d3", "a file where a directory was\n");
            write(dir, "zz/deep/new", "n\n");
        }
        git(&q, &["add", "-A"]);
        let blob = |body: &str| repo.blob(body.as_bytes()).unwrap();
        let idx = IndexFile::read(&p.join(".git/index"), false).unwrap();
        let mut updates: Vec<(Vec<u8>, Option<Stat>)> = vec![
            (
                b"d1/s1/new.txt".to_vec(),
                Some(stat_of(p, "d1/s1/new.txt", blob("new\n"), 0o100644)),
            ),
            (
                b"d2/s2/xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx38.txt".to_vec(),
                Some(stat_of(
                    p,
                    "d2/s2/xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx38.txt",
                    blob("changed\n"),
                    0o100644,
                )),
            ),
            (b"d0/s0/0.txt".to_vec(), None),
            (
                b"d3".to_vec(),
                Some(stat_of(
                    p,
                    "d3",
                    blob("a file where a directory was\n"),
                    0o100644,
                )),
            ),
            (
                b"zz/deep/new".to_vec(),
                Some(stat_of(p, "zz/deep/new", blob("n\n"), 0o100644)),
            ),
        ];
        // Without the removals under d3, d3 would be a file and a directory.
        assert_eq!(idx.rewrite(&updates, true).unwrap_err(), "d3", "{version}");
        for line in git(p, &["ls-files", "d3"]).lines() {
            updates.push((line.as_bytes().to_vec(), None));
        }
        let bytes = idx.rewrite(&updates, true).unwrap();
        std::fs::write(p.join(".git/index"), &bytes).unwrap();
        let (ours, theirs) = (git(p, &["ls-files", "-s"]), git(&q, &["ls-files", "-s"]));
        let diff: Vec<_> = ours
            .lines()
            .zip(theirs.lines())
            .filter(|(a, b)| a != b)
            .take(3)
            .collect();
        assert_eq!(
            ours.lines().count(),
            theirs.lines().count(),
            "{version} {diff:?}"
        );
        assert!(diff.is_empty(), "{version} {diff:?}");
        assert_eq!(
            git(p, &["write-tree"]),
            git(&q, &["write-tree"]),
            "{version}"
        );
        assert_eq!(
            git(p, &["status", "--porcelain", "--untracked-files=no"]),
            git(&q, &["status", "--porcelain", "--untracked-files=no"]),
            "{version}"
        );
        let libgit2 = git2::Index::open(&p.join(".git/index")).unwrap();
        assert_eq!(
            libgit2.len(),
            git(p, &["ls-files"]).lines().count(),
            "{version}"
        );
        // Read back by this module too, and the version kept.
        let again = IndexFile::read(&p.join(".git/index"), false).unwrap();
        assert_eq!(again.version, idx.version);
        assert!(again.get(b"d3", 0).is_some() && again.get(b"d0/s0/0.txt", 0).is_none());
        // Without a hash, as `index.skipHash` writes it: read only where
        // the config allows.
        let zero = idx.rewrite(&updates, false).unwrap();
        assert!(zero.ends_with(&[0; 20]));
        std::fs::write(p.join(".git/index"), &zero).unwrap();
        assert!(IndexFile::read(&p.join(".git/index"), false).is_none());
        assert!(IndexFile::read(&p.join(".git/index"), true).is_some());
    }
}

/// An entry written in the index's own clock tick (racily clean) is
/// smudged when the index is rewritten later, as git does: its size goes
/// to 0, so git compares its content next time; an entry not racy keeps
/// its stat data.
#[test]
fn racily_clean_entries_are_smudged() {
    let d = repo("2");
    let p = d.path();
    let index = p.join(".git/index");
    // The index's mtime set back to one file's: that entry is racy.
    let racy = std::fs::metadata(p.join("top.sh"))
        .unwrap()
        .modified()
        .unwrap();
    std::fs::File::options()
        .write(true)
        .open(&index)
        .unwrap()
        .set_modified(racy)
        .unwrap();
    let idx = IndexFile::read(&index, false).unwrap();
    let before = idx.get(b"top.sh", 0).unwrap();
    assert!(idx.racy(&before) && before.size != 0);
    let bytes = idx.rewrite(&[(b"d1-b".to_vec(), None)], true).unwrap();
    let after = IndexFile::parse(bytes).unwrap();
    assert_eq!(after.get(b"top.sh", 0).unwrap().size, 0);
    let older = after.get(b"d1/s1/xxxxxxxxxxxxxxxxxxxxxx22.txt", 0);
    let was = idx.get(b"d1/s1/xxxxxxxxxxxxxxxxxxxxxx22.txt", 0);
    assert_eq!(older, was);
    assert!(was.is_some_and(|e| e.size != 0));
}

/// Damaged indexes (bytes flipped, cut, zeroed at every kind of place) are
/// refused or read without a panic, and whatever is read can be
/// rewritten: the walk never reads out of bounds.
#[test]
fn damage_never_panics() {
    for version in ["2", "4"] {
        let d = repo(version);
        let good = std::fs::read(d.path().join(".git/index")).unwrap();
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        // A tail zeroed where the extensions were (a torn write under
        // `index.skipHash`, whose trailer is zero anyway): no extension
        // starts with a NUL, so it is not an index.
        let parsed = IndexFile::parse(good.clone()).unwrap();
        let mut torn = good.clone();
        let end = torn.len() - 20;
        torn[parsed.extensions..].fill(0);
        assert!(
            parsed.extensions < end,
            "{version}: the index has extensions"
        );
        assert!(IndexFile::parse(torn).is_none(), "{version}");
        for round in 0..3000 {
            let mut bytes = good.clone();
            match round % 3 {
                0 => {
                    let at = next(bytes.len());
                    bytes[at] ^= 1 << next(8);
                }
                1 => bytes.truncate(next(bytes.len())),
                _ => {
                    let at = next(bytes.len());
                    let end = (at + next(64)).min(bytes.len());
                    bytes[at..end].fill(0);
                }
            }
            if let Some(f) = IndexFile::parse(bytes) {
                let _ = f.get(b"top.sh", 0);
                let _ = f.rewrite(&[(b"d1-b".to_vec(), None)], true);
            }
        }
    }
}

/// The directories the cache tree vouches for are exactly those whose
/// tree git would write again as it is: every one after a commit, with
/// HEAD's ids; none above a path staged since.
#[test]
fn the_cache_tree_vouches_as_git_does() {
    for version in ["2", "4"] {
        let d = repo(version);
        let p = d.path();
        let read = || IndexFile::read(&p.join(".git/index"), false).unwrap();
        let valid = read().valid_trees();
        let dirs = git(
            p,
            &[
                "ls-tree",
                "-r",
                "-d",
                "--format=%(objectname) %(path)",
                "HEAD",
            ],
        );
        let mut want: std::collections::HashMap<Vec<u8>, git2::Oid> = dirs
            .lines()
            .map(|l| {
                let (id, path) = l.split_once(' ').unwrap();
                (
                    format!("{path}/").into_bytes(),
                    git2::Oid::from_str(id).unwrap(),
                )
            })
            .collect();
        let root = git(p, &["rev-parse", "HEAD^{tree}"]);
        want.insert(Vec::new(), git2::Oid::from_str(root.trim()).unwrap());
        assert_eq!(valid, want, "version {version}");
        write(p, "d1/s0/new.txt", "new\n");
        git(p, &["add", "d1/s0/new.txt"]);
        let valid = read().valid_trees();
        for gone in ["", "d1/", "d1/s0/"] {
            assert!(!valid.contains_key(gone.as_bytes()), "{gone}");
            want.remove(gone.as_bytes());
        }
        assert_eq!(valid, want, "version {version}, after git add");
    }
}
