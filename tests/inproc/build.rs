//! `tree::build`: a step applied to a tree in the object database gives the
//! tree git gives for the same edit (`git apply --cached` on the base tree,
//! or the files written by hand into an index and `git write-tree`), its
//! changes are what `git diff-tree` lists, and a step that does not apply
//! or reaches outside the repository fails with a typed error, writing no
//! ref.

use std::path::Path;
use std::process::{Command, Stdio};

use git2::Oid;
use git_steps::plan::step::Step;
use git_steps::tree::build;
use git_steps::Error;

use crate::common::*;

/// A base commit: a text file, a file in a directory, an executable, a
/// symlink, and a file to delete.
fn base_repo() -> Repo {
    let r = Repo::new();
    let text: String = (1..=30).map(|i| format!("line {i}\n")).collect();
    r.write("a.txt", &text);
    r.write("dir/b.txt", "b one\nb two\nb three\n");
    r.write("run.sh", "#!/bin/sh\necho hi\n");
    r.write("gone.txt", "to be deleted\n");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(r.path("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("a.txt", r.path("link")).unwrap();
    r.commit_all("base");
    r
}

/// `git` with a scratch index (`GIT_INDEX_FILE`) that starts as `tree`.
struct Scratch<'a> {
    r: &'a Repo,
    index: std::path::PathBuf,
}

impl<'a> Scratch<'a> {
    fn new(r: &'a Repo, tree: &str) -> Scratch<'a> {
        let index = r.tmp.path().join("scratch-index");
        let _ = std::fs::remove_file(&index);
        let s = Scratch { r, index };
        s.git(&["read-tree", tree], b"");
        s
    }

    fn git(&self, args: &[&str], stdin: &[u8]) -> String {
        let out = self.try_git(args, stdin);
        assert!(out.0, "git {} failed: {}", args.join(" "), out.2);
        out.1
    }

    fn try_git(&self, args: &[&str], stdin: &[u8]) -> (bool, String, String) {
        use std::io::Write;
        let mut child = Command::new("git")
            .args(args)
            .current_dir(&self.r.work)
            .env("GIT_INDEX_FILE", &self.index)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Write `path` with `text` (mode 100644) into the scratch index.
    fn put(&self, path: &str, text: &str, mode: &str) {
        let blob = self.git(&["hash-object", "-w", "--stdin"], text.as_bytes());
        self.git(
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("{mode},{},{path}", blob.trim()),
            ],
            b"",
        );
    }

    fn remove(&self, path: &str) {
        self.git(&["update-index", "--force-remove", path], b"");
    }

    fn write_tree(&self) -> Oid {
        Oid::from_str(self.git(&["write-tree"], b"").trim()).unwrap()
    }
}

fn step(v: serde_json::Value) -> Step {
    Step::parse(&v.to_string()).unwrap()
}

/// Apply `step` on HEAD's tree.
fn apply(r: &Repo, step: &Step) -> git_steps::Result<build::Applied> {
    let repo = r.open();
    let base = repo.head().unwrap().peel_to_tree().unwrap();
    build::apply(&repo, Some(base), step)
}

/// `git diff-tree -r` between two trees: "status path" lines.
fn diff_tree(r: &Repo, old: &str, new: &str) -> Vec<String> {
    let mut out: Vec<String> = r
        .git(&["diff-tree", "-r", "--no-renames", "--name-status", old, new])
        .lines()
        .map(|l| l.replace('\t', " "))
        .collect();
    out.sort();
    out
}

/// The changes `build` reports, in the same form as [`diff_tree`].
fn changes(applied: &build::Applied) -> Vec<String> {
    let mut out: Vec<String> = applied
        .changes
        .iter()
        .map(|c| {
            let s = match (&c.old, &c.new) {
                (None, Some(_)) => "A",
                (Some(_), None) => "D",
                _ => "M",
            };
            format!("{s} {}", c.path)
        })
        .collect();
    out.sort();
    out
}

const PATCH: &str = "\
diff --git a/a.txt b/a.txt
--- a/a.txt
+++ b/a.txt
@@ -3,3 +3,4 @@
 line 3
-line 4
+line four
+line 4.5
 line 5
@@ -20,3 +21,3 @@
 line 20
-line 21
+line twenty-one
 line 22
diff --git a/dir/b.txt b/dir/b.txt
--- a/dir/b.txt
+++ b/dir/b.txt
@@ -1,3 +1,3 @@
 b one
-b two
+b 2
 b three
diff --git a/new/c.txt b/new/c.txt
new file mode 100644
--- /dev/null
+++ b/new/c.txt
@@ -0,0 +1,2 @@
+c one
+c two
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-to be deleted
diff --git a/tool.sh b/tool.sh
new file mode 100755
--- /dev/null
+++ b/tool.sh
@@ -0,0 +1 @@
+echo tool
";

#[test]
fn a_patch_gives_the_tree_git_apply_cached_gives() {
    let r = base_repo();
    let applied = apply(&r, &step(serde_json::json!({"id": "p1", "patch": PATCH}))).unwrap();
    let scratch = Scratch::new(&r, "HEAD^{tree}");
    scratch.git(&["apply", "--cached", "-"], PATCH.as_bytes());
    let git_tree = scratch.write_tree();
    assert_eq!(applied.tree, git_tree);
    assert_eq!(
        changes(&applied),
        diff_tree(&r, "HEAD^{tree}", &git_tree.to_string())
    );
    // Only objects: no ref, no index, no worktree file moved.
    assert_eq!(r.status(), "");
    assert_eq!(r.read("a.txt").lines().nth(3), Some("line 4"));
    // Deterministic: the same decision on the same tree.
    let again = apply(&r, &step(serde_json::json!({"id": "p1", "patch": PATCH}))).unwrap();
    assert_eq!(again.tree, applied.tree);
}

/// Line numbers that are off: the hunk is found by its context, where git
/// apply finds it.
#[test]
fn a_patch_with_shifted_line_numbers_lands_where_git_apply_lands_it() {
    let r = base_repo();
    let patch = "\
--- a/a.txt
+++ b/a.txt
@@ -12,3 +12,3 @@
 line 16
-line 17
+line seventeen
 line 18
";
    let applied = apply(&r, &step(serde_json::json!({"id": "p2", "patch": patch}))).unwrap();
    let scratch = Scratch::new(&r, "HEAD^{tree}");
    scratch.git(&["apply", "--cached", "-"], patch.as_bytes());
    assert_eq!(applied.tree, scratch.write_tree());
    let repo = r.open();
    let tree = repo.find_tree(applied.tree).unwrap();
    let blob = tree.get_path(Path::new("a.txt")).unwrap().id();
    let text = r.git(&["cat-file", "blob", &blob.to_string()]);
    assert_eq!(text.lines().nth(16), Some("line seventeen"), "{text}");
}

/// `files` writes and deletes: the tree of the same files written by hand
/// into an index (an executable keeps its bit when rewritten).
#[test]
fn files_give_the_tree_of_the_same_files_written_by_hand() {
    let r = base_repo();
    let s = step(serde_json::json!({"id": "f1", "files": {
        "a.txt": "all new\n",
        "run.sh": "#!/bin/sh\necho bye\n",
        "deep/er/new.txt": "deep\n",
        "gone.txt": null,
        "bin.sh": {"text": "echo bin\n", "mode": "100755"},
    }}));
    let applied = apply(&r, &s).unwrap();
    let scratch = Scratch::new(&r, "HEAD^{tree}");
    scratch.put("a.txt", "all new\n", "100644");
    scratch.put("run.sh", "#!/bin/sh\necho bye\n", "100755");
    scratch.put("deep/er/new.txt", "deep\n", "100644");
    scratch.put("bin.sh", "echo bin\n", "100755");
    scratch.remove("gone.txt");
    let git_tree = scratch.write_tree();
    assert_eq!(applied.tree, git_tree);
    assert_eq!(
        changes(&applied),
        diff_tree(&r, "HEAD^{tree}", &git_tree.to_string())
    );
}

/// `edits` (replace, create, insert after a line, delete): the files as
/// the operations describe them, written by hand.
#[test]
fn edits_give_the_tree_of_the_edited_files() {
    let r = base_repo();
    let s = step(serde_json::json!({"id": "e1", "edits": [
        {"path": "dir/b.txt", "old_str": "b two\n", "new_str": "b TWO\nb two and a half\n"},
        {"path": "notes.md", "create": "# Notes\n"},
        {"path": "a.txt", "insert_line": 0, "text": "line 0\n"},
        {"path": "gone.txt", "delete": true},
    ]}));
    let applied = apply(&r, &s).unwrap();
    let scratch = Scratch::new(&r, "HEAD^{tree}");
    scratch.put(
        "dir/b.txt",
        "b one\nb TWO\nb two and a half\nb three\n",
        "100644",
    );
    scratch.put("notes.md", "# Notes\n", "100644");
    let a: String = std::iter::once("line 0\n".to_string())
        .chain((1..=30).map(|i| format!("line {i}\n")))
        .collect();
    scratch.put("a.txt", &a, "100644");
    scratch.remove("gone.txt");
    assert_eq!(applied.tree, scratch.write_tree());
}

/// The `*** Begin Patch` format: the tree git apply gives for the same
/// change as a unified diff.
#[test]
fn an_apply_patch_gives_the_tree_of_the_same_unified_diff() {
    let r = base_repo();
    let text = "\
*** Begin Patch
*** Update File: dir/b.txt
@@
 b one
-b two
+b deux
 b three
*** Add File: added.txt
+added
*** Delete File: gone.txt
*** End Patch
";
    let applied = apply(
        &r,
        &step(serde_json::json!({"id": "ap1", "apply_patch": text})),
    )
    .unwrap();
    let unified = "\
--- a/dir/b.txt
+++ b/dir/b.txt
@@ -1,3 +1,3 @@
 b one
-b two
+b deux
 b three
--- /dev/null
+++ b/added.txt
@@ -0,0 +1 @@
+added
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-to be deleted
";
    let scratch = Scratch::new(&r, "HEAD^{tree}");
    scratch.git(&["apply", "--cached", "-"], unified.as_bytes());
    assert_eq!(applied.tree, scratch.write_tree());
}

/// A hunk whose context is not in the file: git apply refuses it, and so
/// does build, with `Error::Apply` naming the step; nothing moves.
#[test]
fn a_hunk_that_does_not_apply_is_an_apply_error() {
    let r = base_repo();
    let head = r.rev("HEAD");
    let patch = "\
--- a/a.txt
+++ b/a.txt
@@ -3,3 +3,3 @@
 line 3
-line four hundred
+line 4!
 line 5
";
    let scratch = Scratch::new(&r, "HEAD^{tree}");
    let (ok, _, why) = scratch.try_git(&["apply", "--cached", "--check", "-"], patch.as_bytes());
    assert!(!ok, "git applies it: {why}");
    match apply(&r, &step(serde_json::json!({"id": "bad1", "patch": patch}))) {
        Err(Error::Apply { step, message, .. }) => {
            assert_eq!(step, "bad1");
            assert!(message.contains("a.txt"), "{message}");
        }
        other => panic!("expected Error::Apply, got {other:?}"),
    }
    // An edit whose old_str is not there, a deletion of a missing file.
    for (id, v) in [
        (
            "bad2",
            serde_json::json!({"id": "bad2", "edits": [{"path": "a.txt", "old_str": "nowhere", "new_str": "x"}]}),
        ),
        (
            "bad3",
            serde_json::json!({"id": "bad3", "files": {"missing.txt": null}}),
        ),
        (
            "bad4",
            serde_json::json!({"id": "bad4", "edits": [{"path": "a.txt", "create": "exists already\n"}]}),
        ),
    ] {
        match apply(&r, &step(v)) {
            Err(Error::Apply { step, .. }) => assert_eq!(step, id),
            other => panic!("{id}: expected Error::Apply, got {other:?}"),
        }
    }
    assert_eq!(r.rev("HEAD"), head);
    assert_eq!(r.status(), "");
}

/// Paths outside the repository: refused as bad input when the step is
/// read (absolute, `..`, `.git`), or as a step that does not apply when a
/// path goes through a symlink of the tree or a link would point out.
#[test]
fn paths_outside_the_repository_are_typed_errors() {
    for (what, v) in [
        (
            "dotdot",
            serde_json::json!({"id": "o1", "files": {"../escape.txt": "x"}}),
        ),
        (
            "absolute",
            serde_json::json!({"id": "o2", "files": {"/tmp/escape.txt": "x"}}),
        ),
        (
            "git dir",
            serde_json::json!({"id": "o3", "files": {".git/config": "x"}}),
        ),
        (
            "inner dotdot",
            serde_json::json!({"id": "o4", "files": {"dir/../../x": "x"}}),
        ),
        (
            "patch dotdot",
            serde_json::json!({"id": "o5", "patch": "--- /dev/null\n+++ b/../evil.txt\n@@ -0,0 +1 @@\n+evil\n"}),
        ),
    ] {
        match Step::parse(&v.to_string()).map(|s| (s, base_repo())) {
            Err(Error::Input { .. }) => {}
            Ok((s, r)) => match apply(&r, &s) {
                // A patch's paths are read when it is applied.
                Err(Error::Apply { .. }) | Err(Error::Input { .. }) => {}
                other => panic!("{what}: expected a typed refusal, got {other:?}"),
            },
            Err(other) => panic!("{what}: expected Error::Input, got {other:?}"),
        }
    }
    let r = base_repo();
    // Through the tree's own symlink (`link` → a.txt, a file).
    match apply(
        &r,
        &step(serde_json::json!({"id": "l1", "files": {"link/inside.txt": "x"}})),
    ) {
        Err(Error::Apply { step, .. }) => assert_eq!(step, "l1"),
        other => panic!("through a symlink: expected Error::Apply, got {other:?}"),
    }
    // A new link that points out of the repository.
    match apply(
        &r,
        &step(serde_json::json!({"id": "l2", "files": {"out": {"symlink": "../../etc/passwd"}}})),
    ) {
        Err(e) => assert!(
            matches!(e, Error::Apply { .. } | Error::Input { .. }),
            "a link out: {e:?}"
        ),
        Ok(a) => panic!("a link out of the repository was built: {:?}", a.changes),
    }
}
