//! Applying plans: a mixed plan applies, verifies and reruns to nothing,
//! real `git diff` output reproduces the real trees, a directory can become
//! a file and back, and a dry run reports without changing anything.

use crate::harness::*;

#[test]
fn mixed_thirty_step_plan_applies_verifies_and_reruns_to_nothing() {
    let t = TestRepo::new();
    // Exact bytes, no conversion: git's default policy.
    t.pin_policy();
    let plan = fixture("mixed-30.jsonl");
    let plan_s = plan.to_str().unwrap();
    let first = t.steps(&["--json", "apply", plan_s]).ok();
    let doc = first.json();
    assert_eq!(doc["type"], "apply");
    assert_eq!(doc["data"]["steps"].as_array().unwrap().len(), 30);
    assert_eq!(t.step_ids(), plan_ids(&plan));
    assert_eq!(
        t.git_out(&["status", "--porcelain", "--untracked-files=all"]),
        ""
    );
    // The index matches HEAD exactly, stat data included (no refresh needed).
    assert_eq!(t.git_out(&["diff-index", "--cached", "HEAD"]), "");
    assert_eq!(t.git_out(&["diff-files"]), "");
    let fp = doc["data"]["artifact"].as_str().unwrap().to_string();
    assert_eq!(fp, independent_fingerprint(&t, "HEAD"));
    assert_eq!(
        doc["data"]["history"].as_str().unwrap(),
        independent_history(&t)
    );
    // The worktree holds what the commits say: symlink, modes, CRLF, no final newline.
    assert_eq!(
        std::fs::read_link(t.path("READ-ME")).unwrap().to_str(),
        Some("docs/café.md")
    );
    assert_eq!(t.read("win.txt"), "one\r\nTWO\r\nthree\r\n");
    assert_eq!(t.read("gen/file3.txt"), "generated 3");
    assert_eq!(
        t.git_out(&["ls-files", "-s", "run.sh"]).split(' ').next(),
        Some("100644")
    );
    let head = t.head();
    let again = t.steps(&["--json", "apply", plan_s]).ok().json();
    assert!(again["data"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["action"] == "skip"));
    assert_eq!(t.head(), head);
    t.steps(&["verify", plan_s]).ok();
}

/// Patches taken from real `git diff` output of a history made with the git
/// CLI (renames, deletions, mode changes, binary-free) reproduce its trees
/// exactly: the same tree ids, not just the same fingerprints.
#[test]
fn real_git_diffs_reproduce_the_real_trees() {
    let src = TestRepo::new();
    src.write(
        "a.txt",
        &(1..=50).map(|i| format!("a{i}\n")).collect::<String>(),
    );
    src.write("dir/b.txt", "b\n");
    src.write("tool.sh", "#!/bin/sh\n");
    src.commit_all("base");
    let base = src.head().unwrap();
    type Edit = Box<dyn Fn(&TestRepo)>;
    let edits: Vec<Edit> = vec![
        Box::new(|r| {
            r.write(
                "a.txt",
                &r.read("a.txt")
                    .replace("a3\n", "A3\n")
                    .replace("a40\n", "a40\nnew\n"),
            )
        }),
        Box::new(|r| {
            r.git(&["mv", "dir/b.txt", "dir/c.txt"]).ok();
        }),
        Box::new(|r| {
            r.git(&["update-index", "--chmod=+x", "tool.sh"]).ok();
            std::fs::set_permissions(
                r.path("tool.sh"),
                std::os::unix::fs::PermissionsExt::from_mode(0o755),
            )
            .unwrap();
        }),
        Box::new(|r| {
            r.git(&["rm", "-q", "a.txt"]).ok();
            r.write("z/new.txt", "z\n");
        }),
        Box::new(|r| {
            r.git(&["mv", "dir/c.txt", "moved.txt"]).ok();
            r.write("moved.txt", "b\nmore\n");
        }),
    ];
    let mut plan = Vec::new();
    for (i, edit) in edits.iter().enumerate() {
        edit(&src);
        src.commit_all(&format!("change {i}"));
        let diff = src.git_out(&["diff", "-M", "HEAD~1", "HEAD"]) + "\n";
        plan.push(line(
            serde_json::json!({"id": format!("r{i}"), "patch": diff}),
        ));
    }
    // Replay on a clone of the base commit.
    let dst = TestRepo::new();
    dst.git(&["fetch", "-q", src.work.to_str().unwrap(), "main"])
        .ok();
    dst.git(&["reset", "-q", "--hard", &base]).ok();
    let p = dst.plan("real.jsonl", &plan);
    dst.steps(&["apply", p.to_str().unwrap()]).ok();
    assert_eq!(
        dst.git_out(&["rev-parse", "HEAD^{tree}"]),
        src.git_out(&["rev-parse", "HEAD^{tree}"])
    );
    for n in 0..edits.len() {
        let rev = format!("HEAD~{n}^{{tree}}");
        assert_eq!(
            dst.git_out(&["rev-parse", &rev]),
            src.git_out(&["rev-parse", &rev]),
            "tree {rev}"
        );
    }
    assert_eq!(
        dst.git_out(&["status", "--porcelain", "--untracked-files=all"]),
        ""
    );
}

#[test]
fn dry_run_reports_and_changes_nothing() {
    let t = TestRepo::new();
    let plan = fixture("eight-steps.jsonl");
    let lines: Vec<String> = std::fs::read_to_string(&plan)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let first = t.plan("first.jsonl", &lines[..3]);
    t.steps(&["apply", first.to_str().unwrap()]).ok();
    let before = t.snapshot();
    let r = t
        .steps(&["--json", "apply", "--dry-run", plan.to_str().unwrap()])
        .ok();
    assert_eq!(t.snapshot(), before);
    let steps = r.json()["data"]["steps"].as_array().unwrap().clone();
    let actions: Vec<&str> = steps
        .iter()
        .map(|s| s["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "skip",
            "skip",
            "skip",
            "would-apply",
            "would-apply",
            "would-apply",
            "would-apply",
            "would-apply"
        ]
    );
    assert!(steps[0]["commit"].as_str().unwrap().len() == 40);
    // The objects a dry run built were not written.
    let objects = t.git_out(&["count-objects"]);
    t.steps(&["apply", "--dry-run", plan.to_str().unwrap()])
        .ok();
    assert_eq!(t.git_out(&["count-objects"]), objects);
}

#[test]
fn a_directory_can_become_a_file_and_back() {
    let t = TestRepo::new();
    let plan = [
        line(serde_json::json!({"id": "a", "files": {"d/x": "x\n", "d/y": "y\n"}})),
        line(
            serde_json::json!({"id": "b", "files": {"d/x": null, "d/y": null, "d": "now a file\n"}}),
        ),
        line(serde_json::json!({"id": "c", "files": {"d": null, "d/z": "dir again\n"}})),
    ];
    let p = t.plan("p.jsonl", &plan);
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    assert_eq!(t.read("d/z"), "dir again\n");
    assert_eq!(t.git_out(&["ls-tree", "-r", "--name-only", "HEAD~1"]), "d");
    assert_eq!(
        t.git_out(&["status", "--porcelain", "--untracked-files=all"]),
        ""
    );
    assert_eq!(
        independent_fingerprint(&t, "HEAD"),
        t.steps(&["fingerprint"]).ok().stdout().trim()
    );
}

/// A step that writes a file and then deletes it counts the deletion (every
/// write's lines are measured as it is made; only the change that remains
/// is counted), in its report and in `git steps log` alike.
#[test]
fn a_file_written_then_deleted_in_one_step_counts_as_deleted() {
    let t = TestRepo::new();
    t.steps_stdin(
        &["apply", "-"],
        &line(serde_json::json!({"id": "s1", "files": {"n.txt": "a\nb\nc\n"}})),
    )
    .ok();
    let r = t
        .steps_stdin(
            &["apply", "-"],
            &line(serde_json::json!({"id": "s2", "apply_patch":
                "*** Begin Patch\n*** Update File: n.txt\n@@\n a\n+x\n*** Delete File: n.txt\n*** End Patch\n"})),
        )
        .ok();
    assert!(r.stdout().contains("+0 -3"), "{}", r.explain());
    let log = t.steps(&["log"]).ok().stdout();
    assert!(log.contains("+0 -3"), "{log}");
    assert!(!t.path("n.txt").exists());
}
