//! A path that changes type (file, directory, symlink): a crash inside such
//! a step resumes, and git's own diff of a file replaced by a symlink
//! applies.

use crate::harness::*;

/// Issue 12 item 4: a step that changes a path's type (file <-> directory
/// <-> symlink, nested) resumes after a crash at any point: the crash
/// matrix over fixtures/type-changes.jsonl is all SAME. (CI's crash-matrix
/// phase runs it for every runner; here the `apply` runner.)
#[test]
fn a_crash_in_a_step_that_changes_a_paths_type_resumes() {
    let t = TestRepo::new();
    let plan = fixture("type-changes.jsonl");
    let r = t
        .steps(&["--json", "crashtest", plan.to_str().unwrap()])
        .ok();
    let doc = r.json();
    let rows = doc["data"]["rows"].as_array().unwrap();
    assert!(rows.len() > 200, "{} rows", rows.len());
    assert_eq!(doc["data"]["summary"]["same"], rows.len(), "{}", r.stdout());
}

/// Issue 12 item 10: git's own diff of a file replaced by a symlink (a
/// deletion and an addition of one path) applies, as `git apply` takes it;
/// a path changed twice otherwise is still refused.
#[test]
fn gits_diff_of_a_file_replaced_by_a_symlink_applies() {
    let t = TestRepo::new();
    t.steps_stdin(
        &["apply", "-"],
        &line(serde_json::json!({"id": "f", "files": {"d": "a file\n", "t": "target\n"}})),
    )
    .ok();
    let swap = "diff --git a/d b/d\ndeleted file mode 100644\nindex 0000000..0000000\n--- a/d\n+++ /dev/null\n@@ -1 +0,0 @@\n-a file\ndiff --git a/d b/d\nnew file mode 120000\n--- /dev/null\n+++ b/d\n@@ -0,0 +1 @@\n+t\n\\ No newline at end of file\n";
    t.steps_stdin(
        &["apply", "-"],
        &line(serde_json::json!({"id": "l", "patch": swap})),
    )
    .ok();
    assert_eq!(std::fs::read_link(t.path("d")).unwrap().to_str(), Some("t"));
    assert_eq!(
        t.git_out(&["ls-tree", "HEAD", "d"]).split(' ').next(),
        Some("120000")
    );
    let twice =
        "--- a/t\n+++ b/t\n@@ -1 +1 @@\n-target\n+one\n--- a/t\n+++ b/t\n@@ -1 +1 @@\n-one\n+two\n";
    t.steps_stdin(
        &["apply", "-"],
        &line(serde_json::json!({"id": "x", "patch": twice})),
    )
    .code_is(1)
    .stderr_has("changed twice");
}
