//! Issue 8: the edit formats agents emit, through the real binary: the same
//! change in every format gives the same artifact; every failure exits 1,
//! names the step, the file and the text, and writes nothing; path and
//! symlink rules hold for all; `--dry-run` shows the resolved hunks.

use serde_json::{json, Value};

use crate::harness::*;

const BASE: &str = "def greet():\n    print(\"Hi\")\n\ndef bye():\n    print(\"Hi\")\n";
const AFTER: &str = "def greet():\n    print(\"Hi\")\n\ndef bye():\n    print(\"Bye\")\n";

/// A repository holding `app.py` = BASE, and a symlink.
fn base() -> TestRepo {
    let t = TestRepo::new();
    t.write("app.py", BASE);
    std::os::unix::fs::symlink("app.py", t.path("link.py")).unwrap();
    t.commit_all("base");
    t
}

/// The same change, `print("Hi")` → `print("Bye")` in `bye`, in every format.
fn same_change() -> Vec<(&'static str, Value)> {
    vec![
        ("files", json!({"id": "c", "files": {"app.py": AFTER}})),
        (
            "patch",
            json!({"id": "c", "patch": "--- a/app.py\n+++ b/app.py\n@@ -4,2 +4,2 @@\n def bye():\n-    print(\"Hi\")\n+    print(\"Bye\")\n"}),
        ),
        (
            "patch, line numbers off",
            json!({"id": "c", "patch": "--- a/app.py\n+++ b/app.py\n@@ -40,2 +40,2 @@\n def bye():\n-    print(\"Hi\")\n+    print(\"Bye\")\n"}),
        ),
        (
            "patch, no line numbers",
            json!({"id": "c", "patch": "--- a/app.py\n+++ b/app.py\n@@ ... @@\n def bye():\n-    print(\"Hi\")\n+    print(\"Bye\")\n"}),
        ),
        (
            "edits",
            json!({"id": "c", "edits": [{"path": "app.py", "old_str": "bye():\n    print(\"Hi\")", "new_str": "bye():\n    print(\"Bye\")"}]}),
        ),
        (
            "apply_patch",
            json!({"id": "c", "apply_patch": "*** Begin Patch\n*** Update File: app.py\n@@ def bye():\n-    print(\"Hi\")\n+    print(\"Bye\")\n*** End Patch\n"}),
        ),
        (
            "search_replace",
            json!({"id": "c", "search_replace": "app.py\n```python\n<<<<<<< SEARCH\ndef bye():\n    print(\"Hi\")\n=======\ndef bye():\n    print(\"Bye\")\n>>>>>>> REPLACE\n```\n"}),
        ),
    ]
}

#[test]
fn the_same_change_in_every_format_gives_the_same_artifact() {
    let mut seen: Vec<(String, Value)> = Vec::new();
    for (name, step) in same_change() {
        let t = base();
        let plan = t.plan("p.jsonl", &[line(step)]);
        let doc = t
            .steps(&["--json", "apply", plan.to_str().unwrap()])
            .ok()
            .json();
        assert_eq!(t.read("app.py"), AFTER, "{name}");
        assert_eq!(
            independent_fingerprint(&t, "HEAD"),
            doc["data"]["artifact"],
            "{name}"
        );
        // The same hunk identity, whichever format made it first: the same
        // line change made again next to it is a duplicated hunk ...
        let hi = AFTER.replace(
            "    print(\"Bye\")\n",
            "    print(\"Bye\")\n    print(\"Hi\")\n",
        );
        let twice = AFTER.replace(
            "    print(\"Bye\")\n",
            "    print(\"Bye\")\n    print(\"Bye\")\n",
        );
        let again = t.plan(
            "again.jsonl",
            &[
                line(json!({"id": "c1", "files": {"app.py": hi}})),
                line(json!({"id": "c2", "files": {"app.py": twice}})),
            ],
        );
        t.steps(&["apply", again.to_str().unwrap()])
            .code_is(3)
            .stderr_has("refused step c2")
            .stderr_has("repeats a change step c made");
        t.git(&["reset", "-q", "--hard", "HEAD~1"]).ok();
        // ... and made in another function (`greet`), it is not.
        let elsewhere = t.plan(
            "elsewhere.jsonl",
            &[line(
                json!({"id": "c3", "files": {"app.py": AFTER.replacen("Hi", "Bye", 1)}}),
            )],
        );
        t.steps(&["apply", elsewhere.to_str().unwrap()]).ok();
        seen.push((name.to_string(), doc["data"]["artifact"].clone()));
    }
    for (name, fp) in &seen {
        assert_eq!(fp, &seen[0].1, "{name} differs from {}", seen[0].0);
    }
}

/// Every way each format can fail, through the binary: exit 1, the step,
/// the file and the text named, nothing written.
#[test]
fn every_failure_is_named_and_writes_nothing() {
    let cases: Vec<(Value, Vec<&str>)> = vec![
        // edits
        (
            json!({"id": "e1", "edits": [{"path": "app.py", "old_str": "print(\"Ho\")", "new_str": "x"}]}),
            vec![
                "step e1",
                "edits[0]",
                "old_str \"print(\\\"Ho\\\")\" is not in app.py",
            ],
        ),
        (
            json!({"id": "e2", "edits": [{"path": "app.py", "old_str": "print(\"Hi\")", "new_str": "x"}]}),
            vec!["step e2", "occurs 2 times in app.py (at lines 2 and 5)"],
        ),
        (
            json!({"id": "e3", "edits": [{"path": "nope.py", "old_str": "x", "new_str": "y"}]}),
            vec!["step e3", "nope.py does not exist"],
        ),
        (
            json!({"id": "e4", "edits": [{"path": "app.py", "create": "x"}]}),
            vec!["step e4", "app.py already exists"],
        ),
        (
            json!({"id": "e5", "edits": [{"path": "app.py", "insert_line": 99, "text": "x"}]}),
            vec!["step e5", "it has 5 line(s)"],
        ),
        (
            json!({"id": "e6", "edits": [{"path": "app.py", "replace": "x"}]}),
            vec!["plan line 1, step e6", "unknown operation"],
        ),
        (
            json!({"id": "e7", "edits": [{"path": "link.py", "old_str": "Hi", "new_str": "x"}]}),
            vec!["step e7", "link.py is a symlink"],
        ),
        (
            json!({"id": "e8", "edits": [{"path": "link.py/x", "create": "x"}]}),
            vec!["step e8", "goes through the symlink link.py"],
        ),
        (
            json!({"id": "e9", "edits": [{"path": ".git/config", "create": "x"}]}),
            vec!["step e9", ".git"],
        ),
        // apply_patch
        (
            json!({"id": "a1", "apply_patch": "*** Begin Patch\n*** Update File: app.py\n-    print(\"Hi\")\n+x\n*** End Patch\n"}),
            vec![
                "step a1",
                "occur 2 times in app.py (at lines 2 and 5)",
                "add context or an @@ anchor",
            ],
        ),
        (
            json!({"id": "a2", "apply_patch": "*** Begin Patch\n*** Update File: app.py\n@@ def nope():\n-x\n*** End Patch\n"}),
            vec!["step a2", "its anchor @@ \"def nope():\" is not in app.py"],
        ),
        (
            json!({"id": "a3", "apply_patch": "*** Begin Patch\n*** Update File: app.py\n-gone\n*** End Patch\n"}),
            vec!["step a3", "\"gone\" are not in app.py"],
        ),
        (
            json!({"id": "a4", "apply_patch": "*** Begin Patch\n*** Delete File: nope.py\n*** End Patch\n"}),
            vec!["step a4", "nope.py does not exist"],
        ),
        (
            json!({"id": "a5", "apply_patch": "*** Begin Patch\n*** Update File: app.py\n*** Move to: app.py\n@@ def bye():\n-    print(\"Hi\")\n*** End Patch\n"}),
            vec![
                "plan line 1, step a5",
                "app.py is the file itself (Codex would delete it)",
            ],
        ),
        (
            json!({"id": "a6", "apply_patch": "*** Begin Patch\n*** Update File: app.py\n-x\n"}),
            vec!["plan line 1, step a6", "must end with \"*** End Patch\""],
        ),
        (
            json!({"id": "a7", "apply_patch": "*** Update File: app.py\n"}),
            vec!["plan line 1, step a7", "must start with"],
        ),
        (
            json!({"id": "a8", "apply_patch": "*** Begin Patch\n*** Add File: ../out.txt\n+x\n*** End Patch\n"}),
            vec!["plan line 1, step a8", "Add File"],
        ),
        (
            json!({"id": "a9", "apply_patch": "*** Begin Patch\n*** Update File: link.py\n-x\n*** End Patch\n"}),
            vec!["step a9", "link.py is a symlink"],
        ),
        // search_replace
        (
            json!({"id": "s1", "search_replace": "app.py\n<<<<<<< SEARCH\n    print(\"Ho\")\n=======\nx\n>>>>>>> REPLACE\n"}),
            vec!["step s1", "the SEARCH text", "is not in app.py"],
        ),
        (
            json!({"id": "s2", "search_replace": "app.py\n<<<<<<< SEARCH\n    print(\"Hi\")\n=======\nx\n>>>>>>> REPLACE\n"}),
            vec!["step s2", "occurs 2 times in app.py (at lines 2 and 5)"],
        ),
        (
            json!({"id": "s3", "search_replace": "nope.py\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n"}),
            vec!["step s3", "nope.py does not exist"],
        ),
        (
            json!({"id": "s4", "search_replace": "Here is the fix for it:\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n"}),
            vec!["step s4", "the file name is missing"],
        ),
        (
            json!({"id": "s5", "search_replace": "app.py\n<<<<<<< SEARCH\nx\n=======\ny\n"}),
            vec!["plan line 1, step s5", "is not closed"],
        ),
        (
            json!({"id": "s6", "search_replace": "/etc/passwd\n<<<<<<< SEARCH\n=======\ny\n>>>>>>> REPLACE\n"}),
            vec!["plan line 1, step s6", "path"],
        ),
        // unified diff without numbers
        (
            json!({"id": "u1", "patch": "--- a/app.py\n+++ b/app.py\n@@ @@\n-    print(\"Hi\")\n+x\n"}),
            vec!["step u1", "ambiguous", "line 2", "line 5"],
        ),
    ];
    for (step, wants) in cases {
        let t = base();
        let plan = t.plan("p.jsonl", &[line(step.clone())]);
        t.refuses(&step.to_string(), 1, &wants, || {
            t.steps(&["apply", plan.to_str().unwrap()])
        });
    }
}

/// A malformed step anywhere in the plan fails validation before the
/// first step is applied.
#[test]
fn a_malformed_format_fails_the_plan_before_anything_is_applied() {
    let t = base();
    let head = t.head();
    let plan = t.plan(
        "p.jsonl",
        &[
            line(json!({"id": "ok", "files": {"n.txt": "n\n"}})),
            line(json!({"id": "bad", "search_replace": "n.txt\n<<<<<<< SEARCH\nx\n"})),
        ],
    );
    t.steps(&["apply", plan.to_str().unwrap()])
        .code_is(1)
        .stderr_has("plan line 2, step bad: search_replace:");
    assert_eq!(t.head(), head);
    // Every format, unified diffs included (issue 29): not a patch, a
    // `../` path, a hunk with no lines.
    for (bad, want) in [
        (
            "this is not a patch
",
            "patch:",
        ),
        (
            "--- a/../x
+++ b/../x
@@ -0,0 +1 @@
+x
",
            "patch: line 1",
        ),
        (
            "--- a/app.py
+++ b/app.py
@@ -1 +1 @@
",
            "patch:",
        ),
    ] {
        let plan = t.plan(
            "p.jsonl",
            &[
                line(json!({"id": "ok", "files": {"n.txt": "n
"}})),
                line(json!({"id": "bad", "patch": bad})),
            ],
        );
        t.refuses(bad, 1, &["plan line 2, step bad:", want], || {
            t.steps(&["apply", plan.to_str().unwrap()])
        });
        assert_eq!(t.head(), head, "{bad:?}: a step was applied");
    }
}

/// `--dry-run` shows each step's hunks as they would land, with real line
/// numbers, whatever format the step used.
#[test]
fn dry_run_shows_the_resolved_hunks() {
    for (name, step) in same_change() {
        let t = base();
        let plan = t.plan("p.jsonl", &[line(step)]);
        let out = t
            .steps(&["apply", "--dry-run", plan.to_str().unwrap()])
            .ok()
            .stdout();
        assert!(
            out.contains("    @@ -2,4 +2,4 @@") || out.contains("    @@ -1,5 +1,5 @@"),
            "{name}:\n{out}"
        );
        assert!(
            out.contains("    -    print(\"Hi\")") && out.contains("    +    print(\"Bye\")"),
            "{name}:\n{out}"
        );
        let doc = t
            .steps(&["--json", "apply", "--dry-run", plan.to_str().unwrap()])
            .ok()
            .json();
        let diff = doc["data"]["steps"][0]["diff"].as_str().unwrap();
        assert!(diff.contains("+++ b/app.py"), "{name}: {diff}");
        assert_eq!(t.read("app.py"), BASE, "{name}: a dry run wrote");
    }
}

/// Issue 29: a patch as Codex's agents send it — in a heredoc, with padded
/// markers, adding a file that exists, moving onto one, chunks of added
/// lines with a bare `@@`, lines found only once trailing whitespace is
/// ignored — applies as Codex's `apply_patch` applies it, byte for byte, in
/// one receipted step.
#[test]
fn a_codex_patch_applies_as_codex_applies_it() {
    let t = TestRepo::new();
    t.write("notes.txt", "old notes\n");
    t.write("src/a.txt", "alpha  \nbeta\n");
    t.write("dst/a.txt", "to be replaced\n");
    t.write("tail.txt", "no newline");
    t.commit_all("base");
    let patch = "apply_patch <<'EOF'\n *** Begin Patch\n*** Add File: notes.txt\n+new notes\n  *** Update File: src/a.txt\n*** Move to: dst/a.txt\n@@\n alpha\n-beta\n+BETA\n*** Update File: tail.txt\n@@\n+appended\n*** End Patch \nEOF\n";
    let step = json!({"id": "codex-1", "apply_patch": patch});
    t.steps_stdin(&["apply", "-"], &line(step)).ok();
    // What Codex writes: the Add over the file, the move over the
    // destination (its context line as the patch spells it), the addition
    // at the end after a final newline Codex adds.
    assert_eq!(t.git_out(&["show", "HEAD:notes.txt"]), "new notes");
    assert_eq!(t.read("notes.txt"), "new notes\n");
    assert_eq!(t.read("dst/a.txt"), "alpha\nBETA\n");
    assert!(!t.path("src/a.txt").exists());
    assert_eq!(t.read("tail.txt"), "no newline\nappended\n");
    assert_eq!(t.git_out(&["status", "--porcelain"]), "");
    assert_eq!(t.step_ids(), vec!["codex-1".to_string()]);
}
