//! What a run refuses, changing nothing: another decision under an applied
//! id, a duplicated hunk (a reverted change is not one), a patch that does
//! not apply, a bad plan, uncommitted work in the way, a commit without a
//! receipt, and a plan order the log disagrees with.

use crate::harness::*;

#[test]
fn redelivered_step_is_skipped_and_a_different_decision_is_refused() {
    let t = TestRepo::new();
    let s1 = line(serde_json::json!({"id": "s1", "files": {"a.txt": "one\n"}}));
    t.steps_stdin(&["apply", "-"], &s1).ok();
    let again = t.steps_stdin(&["apply", "-"], &s1).ok();
    assert!(again.stdout().contains("skipped s1"), "{}", again.explain());
    assert_eq!(t.step_ids(), ["s1"]);
    let other = line(serde_json::json!({"id": "s1", "files": {"a.txt": "two\n"}}));
    let r = t.refuses("", 3, &["already has a receipt", "Hint:"], || {
        t.steps_stdin(&["--json", "apply", "-"], &other)
    });
    assert_eq!(r.json()["data"]["kind"], "digest-mismatch");
    // The same command would be refused the same way: not a rerun.
    assert_eq!(r.json()["data"]["rerun"], "no", "{}", r.explain());
}

#[test]
fn a_duplicated_hunk_is_refused_unless_allowed() {
    let t = TestRepo::new();
    let s1 = line(serde_json::json!({"id": "s1", "files": {"log.txt": "line-1\n"}}));
    let s2 = line(
        serde_json::json!({"id": "s2", "patch": "--- a/log.txt\n+++ b/log.txt\n@@ -1 +1,2 @@\n line-1\n+line-2\n"}),
    );
    t.steps_stdin(&["apply", "-"], &format!("{s1}\n{s2}\n"))
        .ok();
    // The same append again, under a new id and with other context.
    let replay = line(
        serde_json::json!({"id": "s2-again", "patch": "--- a/log.txt\n+++ b/log.txt\n@@ -2 +2,2 @@\n line-2\n+line-2\n"}),
    );
    t.refuses(
        "",
        3,
        &["repeats a change step s2 made", "--allow-duplicate-hunks"],
        || t.steps_stdin(&["apply", "-"], &replay),
    );
    // Allowed explicitly: applied, and `log` and `verify` report the pair.
    t.steps_stdin(&["apply", "--allow-duplicate-hunks", "-"], &replay)
        .ok();
    assert_eq!(t.read("log.txt"), "line-1\nline-2\nline-2\n");
    let log = t.steps(&["log"]).ok().stdout();
    assert!(log.contains("DUPLICATE of step s2"), "{log}");
    let v = t.steps(&["--json", "verify"]).code_is(3).json();
    assert_eq!(v["type"], "verify");
    assert!(v["data"]["problems"][0]
        .as_str()
        .unwrap()
        .contains("s2-again repeats a change of step s2"));
}

#[test]
fn a_reverted_change_may_be_made_again() {
    let t = TestRepo::new();
    let plan = [
        line(serde_json::json!({"id": "a", "files": {"f": "x\n"}})),
        line(serde_json::json!({"id": "b", "files": {"f": ""}})),
        line(serde_json::json!({"id": "c", "files": {"f": "x\n"}})),
    ];
    t.steps_stdin(&["apply", "-"], &plan.join("\n")).ok();
    assert_eq!(t.step_ids(), ["a", "b", "c"]);
    t.steps(&["verify"]).ok();
}

#[test]
fn a_patch_that_does_not_apply_names_step_file_and_hunk_and_changes_nothing() {
    let t = TestRepo::new();
    t.steps_stdin(
        &["apply", "-"],
        &line(serde_json::json!({"id": "s1", "files": {"f.txt": "a\nb\n"}})),
    )
    .ok();
    t.write("untracked.txt", "mine\n");
    let bad = line(
        serde_json::json!({"id": "s2", "patch": "--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n a\n-nope\n+c\n"}),
    );
    let r = t.refuses("", 1, &[], || {
        t.steps_stdin(&["--json", "apply", "-"], &bad)
    });
    let msg = r.json()["data"]["message"].as_str().unwrap().to_string();
    assert!(
        msg.contains("step s2") && msg.contains("f.txt") && msg.contains("hunk #1"),
        "{msg}"
    );
    assert_eq!(t.step_ids(), ["s1"]);
}

#[test]
fn bad_plans_fail_before_anything_is_applied() {
    let t = TestRepo::new();
    let good = line(serde_json::json!({"id": "s1", "files": {"a": "1\n"}}));
    for (plan, needle) in [
        (format!("{good}\n{{\"id\":\"s2\",\"files\""), "plan line 2"),
        (
            format!("{good}\n{{\"id\":\"s2\",\"files\":{{\"a\":\"2\\n\"}},\"extra\":true}}"),
            "unknown field `extra`",
        ),
        (
            format!("{good}\n{{\"id\":\"s2\",\"files\":{{\".git/config\":\"x\"}}}}"),
            ".git",
        ),
        ("\n\n".to_string(), "holds no steps"),
    ] {
        t.refuses(&plan, 1, &[needle], || {
            t.steps_stdin(&["apply", "-"], &plan)
        });
        assert_eq!(t.head(), None);
    }
}

/// SPEC, `resume`: uncommitted changes to paths no step touches are
/// carried along, as `git switch` carries them (unstaged, staged, untracked
/// alike, and none of them reaches a step's commit); a change to a path a
/// step writes is refused before anything is written, naming that path.
#[test]
fn uncommitted_work_is_carried_along_and_never_overwritten() {
    let t = TestRepo::new();
    t.steps_stdin(
        &["apply", "-"],
        &line(serde_json::json!({"id": "s1", "files": {"f.txt": "a\n", "h.txt": "h\n", "k.txt": "k\n"}})),
    )
    .ok();
    // The user's work: an unstaged edit, a staged one, an untracked file.
    t.write("f.txt", "my edit\n");
    t.write("h.txt", "staged edit\n");
    t.git(&["add", "h.txt"]).ok();
    t.write("u.txt", "untracked\n");
    // A file an earlier step made, deleted by the user: a change of theirs,
    // not an update to finish (it is not put back).
    std::fs::remove_file(t.path("k.txt")).unwrap();
    let s2 = line(serde_json::json!({"id": "s2", "files": {"g.txt": "g\n"}}));
    let r = t.steps_stdin(&["apply", "-"], &s2).ok();
    // A step looks only at the paths it writes (issue 51: its cost does
    // not grow with the worktree): the carried changes are not listed by
    // `apply`, and `status` lists them all.
    assert!(!r.stderr().contains("f.txt"), "{}", r.explain());
    let st = t.steps(&["--json", "status"]).ok();
    assert_eq!(
        st.json()["data"]["dirty"],
        serde_json::json!(["f.txt", "h.txt", "k.txt"]),
        "{}",
        st.explain()
    );
    assert_eq!(t.step_ids(), ["s1", "s2"]);
    assert_eq!(t.read("f.txt"), "my edit\n");
    assert_eq!(t.read("u.txt"), "untracked\n");
    assert_eq!(t.git_out(&["diff", "--cached", "--name-only"]), "h.txt");
    assert_eq!(t.git_out(&["diff", "--name-only"]), "f.txt\nk.txt");
    assert!(!t.path("k.txt").exists());
    assert!(!r.stderr().contains("repaired"), "{}", r.explain());
    // The step's commit holds the step, not the user's work.
    assert_eq!(t.git_out(&["show", "HEAD:f.txt"]), "a");
    assert_eq!(t.git_out(&["show", "HEAD:h.txt"]), "h");
    assert_eq!(
        t.git_out(&["show", "--name-only", "--format=", "HEAD"]),
        "g.txt"
    );
    // A step that writes an edited path: refused, naming it, nothing written
    // (for the staged edit too, and in a batch).
    let mut landed: Vec<String> = Vec::new();
    for (k, (path, args)) in [
        ("f.txt", vec!["apply", "-"]),
        ("h.txt", vec!["apply", "-"]),
        ("f.txt", vec!["apply", "--batch", "3", "-"]),
    ]
    .into_iter()
    .enumerate()
    {
        let s3 = line(
            serde_json::json!({"id": format!("s3-{k}"), "files": {format!("other{k}.txt"): "o\n"}}),
        );
        let s4 = line(serde_json::json!({"id": format!("s4-{k}"), "files": {path: "theirs\n"}}));
        let plan = [landed.clone(), vec![s3.clone(), s4]].concat().join("\n");
        // s3 lands (it touches nothing of the user's); s4 is refused.
        let r = t.steps_stdin(&args, &plan).code_is(3);
        for needle in [
            format!("refused step s4-{k}: {path} has uncommitted changes"),
            format!("Would have: overwrite {path}"),
            format!("git stash push -- {path}"),
        ] {
            assert!(r.stderr().contains(&needle), "{needle}\n{}", r.explain());
        }
        landed.push(s3);
        assert_eq!(t.step_ids().last().unwrap(), &format!("s3-{k}"));
        assert_eq!(t.read("f.txt"), "my edit\n");
        assert_eq!(t.git_out(&["diff", "--cached", "--name-only"]), "h.txt");
        assert_eq!(t.git_out(&["show", "HEAD:f.txt"]), "a");
    }
    // An untracked file where a step would create one: refused, kept.
    t.write("g2.txt", "mine\n");
    let plan = [
        landed.clone(),
        vec![line(
            serde_json::json!({"id": "s5", "files": {"g2.txt": "g\n"}}),
        )],
    ]
    .concat()
    .join("\n");
    t.refuses("", 3, &["untracked"], || {
        t.steps_stdin(&["apply", "-"], &plan)
    });
    assert_eq!(t.read("g2.txt"), "mine\n");
    // Stashed, a step that writes f.txt applies; the stash keeps the edit.
    t.git(&["stash", "-q"]).ok();
    let plan = [
        landed,
        vec![line(
            serde_json::json!({"id": "s5", "files": {"f.txt": "theirs\n"}}),
        )],
    ]
    .concat()
    .join("\n");
    t.steps_stdin(&["apply", "-"], &plan).ok();
    assert_eq!(t.read("f.txt"), "theirs\n");
    assert_eq!(t.read("g2.txt"), "mine\n");
}

#[test]
fn a_commit_without_receipt_inside_the_run_is_refused() {
    let t = TestRepo::new();
    t.steps_stdin(
        &["apply", "-"],
        &line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}})),
    )
    .ok();
    t.write("other", "x\n");
    t.commit_all("a hand-made commit");
    t.refuses("", 3, &["no receipt"], || {
        t.steps_stdin(
            &["apply", "-"],
            &line(serde_json::json!({"id": "s2", "files": {"f": "2\n"}})),
        )
    });
    t.steps(&["verify"]).code_is(3);
}

#[test]
fn plan_order_disagreeing_with_the_log_is_refused() {
    let t = TestRepo::new();
    let s = |id: &str| line(serde_json::json!({"id": id, "files": {format!("{id}.txt"): "x\n"}}));
    t.steps_stdin(&["apply", "-"], &format!("{}\n{}", s("a"), s("c")))
        .ok();
    // The plan now says b comes between a and c, but c is already applied.
    t.refuses("", 3, &["the history holds step c"], || {
        t.steps_stdin(
            &["apply", "-"],
            &format!("{}\n{}\n{}", s("a"), s("b"), s("c")),
        )
    });
}
