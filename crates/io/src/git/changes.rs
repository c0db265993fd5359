//! The net changes between two trees, path by path.
//!
//! Owns [`tree_changes`]. Invariant: the same changes `git diff-tree -r`
//! reports (a type change one change of its path), reading only the
//! subtrees that differ.

use git2::{Oid, Repository, Tree};

use super::{BlobEntry, Change};
use crate::error::{Error, Result};

use super::MAX_TREE_DEPTH as MAX_DEPTH;

/// The net changes, path by path, from tree `old` to tree `new` (None: the
/// empty tree), sorted by path. A rename is a deletion and an addition; a
/// type change (file ↔ symlink, or a file where a directory was) is one
/// change of that path, the directory's files each deleted. Subtrees the
/// two sides share (the same id) are never read: a step's changes cost
/// the directories it touches, not the tree's size (libgit2's tree diff
/// reads every subtree). Matches `git diff-tree -r` path for path (tested
/// against it).
pub fn tree_changes(
    repo: &Repository,
    old: Option<&Tree<'_>>,
    new: Option<&Tree<'_>>,
) -> Result<Vec<Change>> {
    let mut out: Vec<Change> = Vec::new();
    // The directories still to compare: their path prefix, their two
    // sides, their depth. A stack, not recursion: a crafted tree cannot
    // run the process out of stack.
    let mut todo: Vec<Pending> = vec![(String::new(), old.map(Tree::id), new.map(Tree::id), 0)];
    while let Some((prefix, old, new, depth)) = todo.pop() {
        if old == new {
            continue;
        }
        if depth > MAX_DEPTH {
            // Nested deeper than any path a file system takes: refused,
            // not walked.
            return Err(Error::other(format!(
                "a tree nests directories deeper than {MAX_DEPTH} levels under {:.200}…; no worktree can hold it",
                prefix
            )));
        }
        changes_in(repo, &prefix, (old, new), depth, &mut todo, &mut out)?;
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// A directory still to compare: its path prefix, its two sides, its
/// depth.
type Pending = (String, Option<Oid>, Option<Oid>, usize);

/// The changes between the trees `old` and `new` (paths under `prefix`)
/// among their own entries; the subtrees that differ go on `todo`.
fn changes_in(
    repo: &Repository,
    prefix: &str,
    (old, new): (Option<Oid>, Option<Oid>),
    depth: usize,
    todo: &mut Vec<Pending>,
    out: &mut Vec<Change>,
) -> Result<()> {
    type Sides = (Option<(Oid, u32)>, Option<(Oid, u32)>);
    let mut names: std::collections::BTreeMap<Vec<u8>, Sides> = Default::default();
    for (side, id) in [(0, old), (1, new)] {
        let Some(id) = id else { continue };
        for e in repo.find_tree(id)?.iter() {
            let slot = names.entry(e.name_bytes().to_vec()).or_default();
            let v = Some((e.id(), e.filemode() as u32));
            if side == 0 {
                slot.0 = v;
            } else {
                slot.1 = v;
            }
        }
    }
    const MODE_TREE: u32 = 0o040000;
    let tree = |v: Option<(Oid, u32)>| v.filter(|(_, m)| *m == MODE_TREE).map(|(o, _)| o);
    let leaf = |v: Option<(Oid, u32)>| {
        v.filter(|(_, m)| *m != MODE_TREE)
            .map(|(oid, mode)| BlobEntry { oid, mode })
    };
    for (name, (o, n)) in names {
        if o == n {
            continue;
        }
        let path = format!("{prefix}{}", String::from_utf8_lossy(&name));
        let (ot, nt) = (tree(o), tree(n));
        if ot.is_some() || nt.is_some() {
            todo.push((format!("{path}/"), ot, nt, depth + 1));
        }
        let (ol, nl) = (leaf(o), leaf(n));
        if ol.is_some() || nl.is_some() {
            out.push(Change {
                path,
                old: ol,
                new: nl,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::git::testing::git;

    type Side = Option<(String, u32)>;

    /// A crafted tree nested 5,000 deep is refused with an error, not a
    /// stack overflow.
    #[test]
    fn a_tree_nested_past_any_path_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(d.path()).unwrap();
        let id = crate::git::testing::nested_tree(&repo, 5000);
        let tree = repo.find_tree(id).unwrap();
        let err = super::tree_changes(&repo, None, Some(&tree)).unwrap_err();
        assert!(err.to_string().contains("deeper than 2048 levels"), "{err}");
    }

    /// Every kind of change, in both directions and from the empty tree,
    /// path for path what `git diff-tree -r` says (a `T` record, or a `D`
    /// and an `A` of one path, is one change).
    #[test]
    fn the_changes_git_diff_tree_reports() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        git(p, &["init", "-q"]);
        let write = |path: &str, body: &str| {
            let f = p.join(path);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, body).unwrap();
        };
        for i in 0..40 {
            write(&format!("same/d{}/f{i}", i % 4), "same");
        }
        write("mod.txt", "a");
        write("gone.txt", "g");
        write("exe", "x");
        write("link", "target");
        write("dir2file/a", "a");
        write("dir2file/sub/b", "b");
        write("file2dir", "f");
        write("deep/er/still/m", "m");
        write("sp ace/\u{e9}t\u{e9}", "u");
        git(p, &["add", "-A"]);
        git(p, &["commit", "-qm", "one"]);
        write("mod.txt", "b");
        std::fs::remove_file(p.join("gone.txt")).unwrap();
        write("new/in/dir", "n");
        git(p, &["update-index", "--chmod=+x", "exe"]);
        std::fs::remove_file(p.join("link")).unwrap();
        std::os::unix::fs::symlink("target", p.join("link")).unwrap();
        std::fs::remove_dir_all(p.join("dir2file")).unwrap();
        write("dir2file", "now a file");
        std::fs::remove_file(p.join("file2dir")).unwrap();
        write("file2dir/inner", "i");
        write("deep/er/still/m", "m2");
        write("sp ace/\u{e9}t\u{e9}", "u2");
        git(p, &["add", "-A"]);
        git(p, &["commit", "-qm", "two"]);
        let repo = git2::Repository::open(p).unwrap();
        let tree = |rev: &str| repo.revparse_single(rev).unwrap().peel_to_tree().unwrap();
        let (one, two) = (tree("HEAD~1"), tree("HEAD"));
        for (a, b, args) in [
            (Some(&one), Some(&two), vec!["HEAD~1", "HEAD"]),
            (Some(&two), Some(&one), vec!["HEAD", "HEAD~1"]),
            (
                None,
                Some(&two),
                vec!["4b825dc642cb6eb9a060e54bf8d69288fbee4904", "HEAD"],
            ),
        ] {
            let ours: Vec<(String, Side, Side)> = super::tree_changes(&repo, a, b)
                .unwrap()
                .into_iter()
                .map(|c| {
                    let side =
                        |e: Option<crate::git::BlobEntry>| e.map(|e| (e.oid.to_string(), e.mode));
                    (c.path, side(c.old), side(c.new))
                })
                .collect();
            let mut argv = vec!["diff-tree", "-r", "-z", "--no-renames", "--no-commit-id"];
            argv.extend(args.iter().copied());
            let raw = git(p, &argv);
            let mut theirs: std::collections::BTreeMap<String, (Side, Side)> = Default::default();
            let mut fields = raw.split('\0').filter(|f| !f.is_empty());
            while let (Some(meta), Some(path)) = (fields.next(), fields.next()) {
                let m: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
                let side = |mode: &str, id: &str| {
                    let mode = u32::from_str_radix(mode, 8).unwrap();
                    (mode != 0).then(|| (id.to_string(), mode))
                };
                let slot = theirs.entry(path.to_string()).or_default();
                slot.0 = slot.0.clone().or(side(m[0], m[2]));
                slot.1 = slot.1.clone().or(side(m[1], m[3]));
            }
            let theirs: Vec<_> = theirs.into_iter().map(|(p, (o, n))| (p, o, n)).collect();
            assert_eq!(ours, theirs, "{args:?}");
            assert!(ours.len() >= 8, "{args:?}: {ours:?}");
        }
    }
}
