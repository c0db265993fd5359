//! `workdir::worktree`: bringing worktree and index up to a step commit
//! touches exactly the step's paths and leaves `git status` clean; the
//! user's uncommitted work is found as git finds it and is never
//! overwritten.

use std::os::unix::fs::PermissionsExt;

use git2::Oid;
use git_steps::git::tree_changes;
use git_steps::plan::step::Step;
use git_steps::tree::build;
use git_steps::workdir::worktree::{self, Dest};
use git_steps::RefusalKind;

use crate::common::*;

fn base_repo() -> Repo {
    let r = Repo::with_run();
    r.write("keep.txt", "keep\n");
    r.write("old/only.txt", "only\n");
    r.write("edit.txt", "before\n");
    r.commit_all("more");
    r
}

/// Build `step` on HEAD and commit it (no ref moved): the commit and the
/// changes from HEAD's tree.
fn commit_step(r: &Repo, step: serde_json::Value) -> (Oid, Vec<git_steps::git::Change>) {
    let repo = r.open();
    let head = repo.head().unwrap().peel_to_commit().unwrap();
    let step = Step::parse(&step.to_string()).unwrap();
    let applied = build::apply(&repo, Some(head.tree().unwrap()), &step).unwrap();
    let tree = repo.find_tree(applied.tree).unwrap();
    let sig = git2::Signature::now("Tester", "tester@example.invalid").unwrap();
    let commit = repo
        .commit(None, &sig, &sig, "a step", &tree, &[&head])
        .unwrap();
    let changes = tree_changes(&repo, Some(&head.tree().unwrap()), Some(&tree)).unwrap();
    (commit, changes)
}

fn mix() -> serde_json::Value {
    serde_json::json!({"id": "w1", "files": {
        "edit.txt": "after\n",
        "new/dir/file.txt": "new\n",
        "tool.sh": {"text": "echo tool\n", "mode": "100755"},
        "ln": {"symlink": "keep.txt"},
        "old/only.txt": null,
    }})
}

#[test]
fn an_update_writes_exactly_the_steps_paths_and_leaves_status_clean() {
    let r = base_repo();
    let (commit, changes) = commit_step(&r, mix());
    let mut paths: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            "edit.txt",
            "ln",
            "new/dir/file.txt",
            "old/only.txt",
            "tool.sh"
        ]
    );
    let keep_mtime = std::fs::metadata(r.path("keep.txt"))
        .unwrap()
        .modified()
        .unwrap();
    // The branch moves first (the commit point), then the worktree.
    r.git(&["update-ref", "refs/heads/main", &commit.to_string()]);
    assert!(!r.status().is_empty());
    let repo = r.open();
    worktree::update(&repo, Dest { run: "r1", commit }, &changes, "w1").unwrap();
    assert_eq!(r.status(), "");
    assert_eq!(r.git(&["diff", "--cached", "--name-only", "HEAD"]), "");
    assert_eq!(r.read("edit.txt"), "after\n");
    assert_eq!(r.read("new/dir/file.txt"), "new\n");
    let mode = std::fs::metadata(r.path("tool.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111, "{mode:o}");
    assert_eq!(
        std::fs::read_link(r.path("ln")).unwrap(),
        std::path::Path::new("keep.txt")
    );
    // The last file of old/ gone, its directory with it (as git does).
    assert!(!r.path("old").exists());
    // Paths the step does not change are not touched.
    assert_eq!(
        std::fs::metadata(r.path("keep.txt"))
            .unwrap()
            .modified()
            .unwrap(),
        keep_mtime
    );
}

#[test]
fn dirty_paths_are_the_tracked_changes_git_status_shows() {
    let r = base_repo();
    let repo = r.open();
    assert!(worktree::dirty_paths(&repo).unwrap().is_empty());
    r.write("edit.txt", "worktree edit\n");
    r.write("keep.txt", "staged edit\n");
    r.git(&["add", "keep.txt"]);
    std::fs::remove_file(r.path("old/only.txt")).unwrap();
    r.write("untracked.txt", "not tracked\n");
    let mut dirty = worktree::dirty_paths(&repo).unwrap();
    dirty.sort();
    let mut git: Vec<String> = r
        .status()
        .lines()
        .filter(|l| !l.starts_with("??"))
        .map(|l| l[3..].to_string())
        .collect();
    git.sort();
    assert_eq!(dirty, git);
    assert_eq!(dirty, ["edit.txt", "keep.txt", "old/only.txt"]);
}

#[test]
fn uncommitted_work_in_a_steps_way_is_refused_elsewhere_carried() {
    let r = base_repo();
    let (_, changes) = commit_step(&r, mix());
    let repo = r.open();
    worktree::ensure_clean(&repo, Some("w1"), &changes).unwrap();
    // An edit elsewhere is carried: not in the step's way.
    r.write("keep.txt", "mine\n");
    worktree::ensure_clean(&repo, Some("w1"), &changes).unwrap();
    assert!(worktree::dirty_among(&repo, &changes).unwrap().is_empty());
    // An edit to a file the step writes.
    r.write("edit.txt", "mine\n");
    assert_eq!(
        worktree::dirty_among(&repo, &changes).unwrap(),
        ["edit.txt"]
    );
    let e = worktree::ensure_clean(&repo, Some("w1"), &changes).unwrap_err();
    assert_eq!(refusal(&e).kind, RefusalKind::DirtyWorktree);
    assert_eq!(refusal(&e).step.as_deref(), Some("w1"));
    assert!(refusal(&e).saw.contains("edit.txt"), "{}", refusal(&e).saw);
    assert!(!refusal(&e).saw.contains("keep.txt"), "{}", refusal(&e).saw);
    r.git(&["checkout", "--", "edit.txt"]);
    // An untracked file where the step creates one.
    r.write("tool.sh", "someone else's\n");
    let e = worktree::ensure_clean(&repo, Some("w1"), &changes).unwrap_err();
    assert_eq!(refusal(&e).kind, RefusalKind::DirtyWorktree);
    assert!(refusal(&e).saw.contains("tool.sh"), "{}", refusal(&e).saw);
    assert_eq!(r.read("tool.sh"), "someone else's\n");
}

/// Through the engine: after a step with every kind of change, and after
/// a rerun, `git status` is clean and the files are the head's.
#[test]
fn apply_leaves_the_worktree_as_git_checks_it_out() {
    let r = base_repo();
    r.apply_ok(&[mix()]);
    assert_eq!(r.status(), "");
    // What git would check out for the head: a fresh clone's files.
    let clone = r.tmp.path().join("clone");
    run_git(
        r.tmp.path(),
        &[
            "clone",
            "-q",
            r.work.to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    for f in ["edit.txt", "new/dir/file.txt", "tool.sh", "keep.txt"] {
        assert_eq!(
            std::fs::read(r.path(f)).unwrap(),
            std::fs::read(clone.join(f)).unwrap(),
            "{f}"
        );
        assert_eq!(
            std::fs::metadata(r.path(f)).unwrap().permissions().mode() & 0o111,
            std::fs::metadata(clone.join(f))
                .unwrap()
                .permissions()
                .mode()
                & 0o111,
            "{f}"
        );
    }
    assert_eq!(r.path("old").exists(), clone.join("old").exists());
}
