//! `run::commit`: one step's order of writes. Staged steps move only the
//! session's head (no ref, no worktree, no remote); a flush makes them
//! durable in one push, then the local branch, then the worktree. A step
//! refused before the commit point leaves everything as it was; with
//! `--batch`, the steps staged before a failing one are durable first.

use git_steps::plan::step::Step;
use git_steps::run::session::{ApplyOptions, Session};
use git_steps::{Error, RefusalKind};

use crate::common::*;

fn step(v: serde_json::Value) -> Step {
    Step::parse(&v.to_string()).unwrap()
}

/// A base with `log.txt` and a remote.
fn box_with_remote() -> (Repo, std::path::PathBuf) {
    let r = Repo::new();
    r.write("log.txt", "one\ntwo\n");
    r.commit_all("base");
    r.git(&["config", "steps.branch", "main"]);
    r.git(&["config", "steps.run", "r1"]);
    let bare = r.with_remote();
    (r, bare)
}

fn remote_main(bare: &std::path::Path) -> String {
    run_git(bare, &["rev-parse", "main"]).trim().to_string()
}

const APPEND_THREE: &str = "--- a/log.txt\n+++ b/log.txt\n@@ -2 +2,2 @@\n two\n+three\n";

#[test]
fn staged_steps_move_nothing_until_the_flush_makes_them_durable() {
    let (r, bare) = box_with_remote();
    let base = r.rev("HEAD");
    let repo = r.open();
    let s = r.settings(&repo);
    let mut ui = Recorder::default();
    let mut session = Session::open(&repo, &s, None, ApplyOptions::default(), &mut ui)
        .unwrap()
        .load(true)
        .unwrap();
    for (i, f) in ["a.txt", "b.txt", "c.txt"].iter().enumerate() {
        let staged = session
            .stage(&step(files_step(&format!("s{}", i + 1), f, "x\n")), None)
            .unwrap();
        assert!(staged.is_none(), "a real run stages, it does not report");
        assert_eq!(session.staged(), i + 1);
        // Only the session's head moved: branch, remote, worktree stay.
        assert_ne!(session.head().unwrap().to_string(), base);
        assert_eq!(r.rev("main"), base);
        assert_eq!(remote_main(&bare), base);
        assert!(!r.path(f).exists());
        assert_eq!(r.status(), "");
    }
    let head = session.head().unwrap().to_string();
    // The staged commits exist as objects, each a receipt on the last.
    assert_eq!(
        r.git(&[
            "log",
            "--reverse",
            "--format=%(trailers:key=Step-Id,valueonly)",
            &format!("{base}..{head}")
        ])
        .split_whitespace()
        .collect::<Vec<_>>(),
        ["s1", "s2", "s3"]
    );
    let done = session.flush().unwrap();
    assert_eq!(session.staged(), 0);
    let commits: Vec<String> = done.iter().map(|o| outcome(o).2).collect();
    assert_eq!(
        commits,
        r.git(&["rev-list", "--reverse", &format!("{base}..{head}")])
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>()
    );
    // Durable: on the remote, then the local branch, then the worktree.
    assert_eq!(remote_main(&bare), head);
    assert_eq!(r.rev("main"), head);
    assert_eq!(r.status(), "");
    assert_eq!(r.read("c.txt"), "x\n");
    // One push for the three: the remote's reflog, if kept, would say so;
    // the remote-tracking ref moved straight to the last step.
    assert_eq!(r.rev("refs/remotes/origin/main"), head);
    session.finish().unwrap();
}

#[test]
fn a_failing_step_in_a_batch_comes_after_the_steps_before_it_are_durable() {
    let (r, bare) = box_with_remote();
    let opts = ApplyOptions {
        batch: 3,
        ..ApplyOptions::default()
    };
    let (res, ui) = r.apply(
        &[
            files_step("s1", "a.txt", "1\n"),
            files_step("s2", "b.txt", "2\n"),
            serde_json::json!({"id": "s3", "patch": "--- a/log.txt\n+++ b/log.txt\n@@ -1 +1 @@\n-nine\n+ten\n"}),
            files_step("s4", "d.txt", "4\n"),
        ],
        &opts,
    );
    let (e, done) = res.expect_err("s3 does not apply");
    match &e {
        Error::Apply { step, .. } => assert_eq!(step, "s3"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        done.iter().map(|o| outcome(o).1).collect::<Vec<_>>(),
        ["s1", "s2"]
    );
    assert_eq!(ui.steps().len(), 2);
    assert_eq!(r.step_ids("main").len(), 2);
    assert_eq!(remote_main(&bare), r.rev("main"));
    assert_eq!(outcome(&done[1]).2, r.rev("main"));
    assert!(!r.path("d.txt").exists());
    assert_eq!(r.status(), "");
}

#[test]
fn a_duplicated_hunk_is_refused_unless_allowed() {
    let (r, bare) = box_with_remote();
    r.apply_ok(&[serde_json::json!({"id": "s1", "patch": APPEND_THREE})]);
    let head = r.rev("HEAD");
    // The same append again, under another id: it still applies as a patch.
    let again = serde_json::json!({"id": "s2", "patch": APPEND_THREE});
    let (res, _) = r.apply(std::slice::from_ref(&again), &ApplyOptions::default());
    let (e, done) = res.expect_err("refused");
    let refusal = refusal(&e);
    assert_eq!(refusal.kind, RefusalKind::DuplicateHunk);
    assert_eq!(refusal.step.as_deref(), Some("s2"));
    assert!(refusal.saw.contains("step s1"), "{}", refusal.saw);
    assert!(done.is_empty());
    assert_eq!(r.rev("HEAD"), head);
    assert_eq!(remote_main(&bare), head);
    assert_eq!(r.read("log.txt"), "one\ntwo\nthree\n");
    assert_eq!(r.status(), "");
    // Allowed for the run: applied, and the receipt says nothing of it
    // (the option is the run's, not the decision's).
    let opts = ApplyOptions {
        allow_duplicate_hunks: true,
        ..ApplyOptions::default()
    };
    let (res, _) = r.apply(&[again], &opts);
    res.map_err(|(e, _)| e).unwrap();
    assert_eq!(r.read("log.txt"), "one\ntwo\nthree\nthree\n");
    // Allowed by the decision: the receipt carries Step-Allow-Duplicate.
    let r2 = box_with_remote().0;
    r2.apply_ok(&[
        serde_json::json!({"id": "s1", "patch": APPEND_THREE}),
        serde_json::json!({"id": "s2", "patch": APPEND_THREE, "allow_duplicate": true}),
    ]);
    assert_eq!(
        r2.git(&[
            "log",
            "-1",
            "--format=%(trailers:key=Step-Allow-Duplicate,valueonly)"
        ])
        .trim(),
        "true"
    );
}

#[test]
fn a_step_that_changes_nothing_is_refused() {
    let (r, _) = box_with_remote();
    let head = r.rev("HEAD");
    let (res, _) = r.apply(
        &[files_step("s1", "log.txt", "one\ntwo\n")],
        &ApplyOptions::default(),
    );
    let (e, _) = res.expect_err("refused");
    match &e {
        Error::Apply { step, message, .. } => {
            assert_eq!(step, "s1");
            assert!(message.contains("changes nothing"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(e.exit_code(), 1);
    assert_eq!(r.rev("HEAD"), head);
}

#[test]
fn an_edit_to_a_file_the_step_writes_is_refused_other_edits_are_carried() {
    let (r, _) = box_with_remote();
    r.apply_ok(&[files_step("s1", "a.txt", "1\n")]);
    let head = r.rev("HEAD");
    r.write("a.txt", "my own edit\n");
    r.write("log.txt", "one\ntwo\nmine\n");
    let (res, _) = r.apply(
        &[
            files_step("s1", "a.txt", "1\n"),
            files_step("s2", "a.txt", "2\n"),
        ],
        &ApplyOptions::default(),
    );
    let (e, done) = res.expect_err("refused");
    let refusal = refusal(&e);
    assert_eq!(refusal.kind, RefusalKind::DirtyWorktree);
    assert!(refusal.saw.contains("a.txt"), "{}", refusal.saw);
    assert!(!refusal.saw.contains("log.txt"), "{}", refusal.saw);
    // s1 was skipped before s2 was refused.
    assert_eq!(
        done.iter().map(|o| outcome(o).0).collect::<Vec<_>>(),
        ["skip"]
    );
    assert_eq!(r.rev("HEAD"), head);
    assert_eq!(r.read("a.txt"), "my own edit\n");
    assert_eq!(r.status(), " M a.txt\n M log.txt\n");
    // Without the edit in its way, s2 lands; the edit to log.txt stays.
    r.git(&["checkout", "--", "a.txt"]);
    r.apply_ok(&[
        files_step("s1", "a.txt", "1\n"),
        files_step("s2", "a.txt", "2\n"),
    ]);
    assert_eq!(r.read("a.txt"), "2\n");
    assert_eq!(r.read("log.txt"), "one\ntwo\nmine\n");
    assert_eq!(r.status(), " M log.txt\n");
}
