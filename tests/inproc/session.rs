//! `run::session` (through `run::engine::apply_plan`, as `git steps apply`
//! calls it, and on its own): what a run reports to its `Ui`, in order,
//! against the commits `git log` shows, their trailers, and a clean
//! `git status`.

use git_steps::run::session::{ApplyOptions, Session, StepOutcome};
use git_steps::sync::reconcile::Action;
use git_steps::workdir::repair::Repair;
use git_steps::RefusalKind;

use crate::common::*;

/// `git log` of `rev`'s first parents, oldest first: (commit, subject,
/// Step-Id, Step-Run, Step-Decision, Step-Index).
fn log(r: &Repo, rev: &str) -> Vec<[String; 6]> {
    r.git(&[
        "log",
        "--reverse",
        "--first-parent",
        "--format=%H%x01%s%x01%(trailers:key=Step-Id,valueonly)%x01%(trailers:key=Step-Run,valueonly)%x01%(trailers:key=Step-Decision,valueonly)%x01%(trailers:key=Step-Index,valueonly)%x02",
        rev,
    ])
    .split('\x02')
    .map(|rec| rec.trim_start_matches('\n'))
    .filter(|rec| !rec.is_empty())
    .map(|rec| {
        let f: Vec<String> = rec.split('\x01').map(|v| v.trim().to_string()).collect();
        f.try_into().unwrap()
    })
    .collect()
}

fn plan3() -> Vec<serde_json::Value> {
    vec![
        files_step("s1", "a.txt", "one\n"),
        serde_json::json!({"id": "s2", "message": "add b", "files": {"dir/b.txt": "bee\n"}}),
        serde_json::json!({"id": "s3", "patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1,2 @@\n one\n+two\n"}),
    ]
}

#[test]
fn apply_reports_each_step_as_the_log_records_it() {
    let r = Repo::with_run();
    let base = r.rev("HEAD");
    let (report, ui) = r.apply_ok(&plan3());
    let log = log(&r, &format!("{base}..HEAD"));
    assert_eq!(log.len(), 3);
    // The Ui saw, in order: the repair, the reconcile, then each step
    // with the commit git shows.
    assert!(
        matches!(ui.events[0], Event::Repaired(Repair::Clean)),
        "{:?}",
        ui.events
    );
    assert!(
        matches!(&ui.events[1], Event::Reconciled(rc) if rc.action == Action::LocalOnly && rc.local.as_deref() == Some(base.as_str())),
        "{:?}",
        ui.events
    );
    let steps = ui.steps();
    assert_eq!(
        steps,
        log.iter()
            .map(|l| ("applied", l[2].clone(), l[0].clone()))
            .collect::<Vec<_>>()
    );
    assert_eq!(ui.events.len(), 5, "{:?}", ui.events);
    assert!(ui.notes().is_empty(), "{:?}", ui.notes());
    // Each commit is its step's receipt.
    for (i, l) in log.iter().enumerate() {
        assert_eq!(l[2], format!("s{}", i + 1));
        assert_eq!(l[3], "r1");
        assert!(l[4].starts_with("sha256:") && l[4].len() == 71, "{l:?}");
        assert_eq!(l[5], (i + 1).to_string());
    }
    assert_eq!(log[1][1], "step s2: add b");
    // What the report says is what git has.
    assert_eq!(report.head.as_deref(), Some(r.rev("HEAD").as_str()));
    assert_eq!(report.run, "r1");
    assert_eq!(report.branch, "main");
    assert_eq!(report.durable, "local");
    assert!(
        report.artifact.starts_with("sha256:"),
        "{}",
        report.artifact
    );
    assert_eq!(report.steps.len(), 3);
    if let StepOutcome::Applied {
        files,
        added,
        removed,
        ..
    } = &report.steps[2]
    {
        assert_eq!(
            (files.as_slice(), *added, *removed),
            (&["a.txt".to_string()][..], 1, 0)
        );
    } else {
        panic!("{:?}", report.steps[2]);
    }
    // Worktree and index are the head's.
    assert_eq!(r.status(), "");
    assert_eq!(r.read("a.txt"), "one\ntwo\n");
    assert_eq!(r.read("dir/b.txt"), "bee\n");
    assert_eq!(r.git(&["symbolic-ref", "--short", "HEAD"]).trim(), "main");
}

#[test]
fn a_rerun_skips_every_step_and_writes_nothing() {
    let r = Repo::with_run();
    let (first, _) = r.apply_ok(&plan3());
    let head = r.rev("HEAD");
    let reflog = r.git(&["reflog", "main"]);
    let (again, ui) = r.apply_ok(&plan3());
    assert_eq!(r.rev("HEAD"), head);
    assert_eq!(r.git(&["reflog", "main"]), reflog);
    let applied: Vec<_> = first.steps.iter().map(outcome).collect();
    let skipped: Vec<_> = ui.steps();
    assert_eq!(skipped.len(), 3);
    for (a, s) in applied.iter().zip(&skipped) {
        assert_eq!(("skip", &a.1, &a.2), (s.0, &s.1, &s.2));
    }
    // The same fingerprints: a resume is the same artifact.
    assert_eq!(again.artifact, first.artifact);
    assert_eq!(again.history, first.history);
    assert_eq!(r.status(), "");
}

#[test]
fn a_plan_that_repeats_a_line_reports_the_redelivery_once() {
    let r = Repo::with_run();
    let s1 = files_step("s1", "a.txt", "one\n");
    let (_, ui) = r.apply_ok(&[s1.clone(), files_step("s2", "b.txt", "b\n"), s1]);
    let steps = ui.steps();
    assert_eq!(
        steps
            .iter()
            .map(|s| (s.0, s.1.as_str()))
            .collect::<Vec<_>>(),
        [("applied", "s1"), ("applied", "s2"), ("skip", "s1")]
    );
    // The redelivery names the receipt the first line got.
    assert_eq!(steps[2].2, steps[0].2);
    assert_eq!(r.step_ids("HEAD"), ["s1", "s2"]);
}

#[test]
fn a_dry_run_reports_what_it_would_apply_and_changes_nothing() {
    let r = Repo::with_run();
    let head = r.rev("HEAD");
    let opts = ApplyOptions {
        dry_run: true,
        ..ApplyOptions::default()
    };
    let (res, ui) = r.apply(&plan3(), &opts);
    let report = res.map_err(|(e, _)| e).unwrap();
    assert!(report.command.dry_run);
    assert_eq!(report.head, None);
    assert_eq!(
        ui.steps()
            .iter()
            .map(|s| (s.0, s.1.as_str()))
            .collect::<Vec<_>>(),
        [
            ("would-apply", "s1"),
            ("would-apply", "s2"),
            ("would-apply", "s3")
        ]
    );
    match &report.steps[2] {
        StepOutcome::WouldApply { diff, .. } => assert!(diff.contains("+two"), "{diff}"),
        o => panic!("{o:?}"),
    }
    assert_eq!(r.rev("HEAD"), head);
    assert_eq!(r.status(), "");
    // The objects went to memory: the real run writes the same artifact.
    let (real, _) = r.apply_ok(&plan3());
    assert_eq!(real.artifact, report.artifact);
}

#[test]
fn the_same_id_with_another_decision_is_refused_and_changes_nothing() {
    let r = Repo::with_run();
    r.apply_ok(&plan3()[..1]);
    let head = r.rev("HEAD");
    let (res, ui) = r.apply(
        &[files_step("s1", "a.txt", "ONE\n")],
        &ApplyOptions::default(),
    );
    let (e, done) = res.expect_err("refused");
    let refusal = refusal(&e);
    assert_eq!(refusal.kind, RefusalKind::DigestMismatch);
    assert_eq!(refusal.step.as_deref(), Some("s1"));
    assert_eq!(e.exit_code(), 3);
    assert!(done.is_empty() && ui.steps().is_empty(), "{done:?}");
    assert_eq!(r.rev("HEAD"), head);
    assert_eq!(r.read("a.txt"), "one\n");
    assert_eq!(r.status(), "");
}

/// The session driven step by step, as `run` and `record` drive it:
/// open (repair, reconcile), load, apply, finish.
#[test]
fn a_session_driven_by_hand_commits_each_step_and_finishes_at_the_head() {
    let r = Repo::with_run();
    let base = r.rev("HEAD");
    let repo = r.open();
    let s = r.settings(&repo);
    let mut ui = Recorder::default();
    let opened = Session::open(&repo, &s, None, ApplyOptions::default(), &mut ui).unwrap();
    assert_eq!(opened.head().map(|h| h.to_string()), Some(base.clone()));
    // Receipts are read once: `load` takes the opened session and gives
    // the one that applies steps (a second read does not compile).
    let mut session = opened.load(true).unwrap();
    assert!(session.ledger().entries.is_empty());
    let mut commits = Vec::new();
    for (i, step) in plan3().into_iter().enumerate() {
        let step = git_steps::plan::step::Step::parse(&step.to_string()).unwrap();
        match session.apply(&step, None).unwrap() {
            StepOutcome::Applied {
                step: id, commit, ..
            } => {
                assert_eq!(id, format!("s{}", i + 1));
                // Durable before it is reported: the branch is there.
                assert_eq!(r.rev("main"), commit);
                commits.push(commit);
            }
            o => panic!("{o:?}"),
        }
    }
    assert_eq!(session.len(), 3);
    assert_eq!(
        session.receipt("s2").map(|e| e.commit.to_string()),
        Some(commits[1].clone())
    );
    let done = session.finish().unwrap();
    assert_eq!(done.head.map(|h| h.to_string()), Some(r.rev("HEAD")));
    assert_eq!(done.repair, Repair::Clean);
    assert_eq!(done.reconcile.action, Action::LocalOnly);
    assert_eq!(
        r.git(&["rev-list", "--reverse", &format!("{base}..HEAD")])
            .lines()
            .collect::<Vec<_>>(),
        commits
    );
    assert_eq!(r.status(), "");
    // The session's Ui heard the repair and the reconcile only (steps are
    // reported by its caller).
    assert_eq!(ui.repairs().len(), 1);
    assert_eq!(ui.reconciles().len(), 1);
    assert!(ui.steps().is_empty());
}

/// A remote durable domain: every step is on the remote when reported.
#[test]
fn with_a_remote_every_reported_step_is_on_the_remote() {
    let r = Repo::with_run();
    let bare = r.with_remote();
    let base = r.rev("HEAD");
    let (report, ui) = r.apply_ok(&plan3());
    assert_eq!(report.durable, "remote");
    assert!(
        matches!(ui.reconciles()[0].action, Action::InSync),
        "{:?}",
        ui.reconciles()
    );
    let remote_head = run_git(&bare, &["rev-parse", "main"]);
    assert_eq!(remote_head.trim(), r.rev("HEAD"));
    assert_eq!(ui.steps().last().unwrap().2, remote_head.trim());
    assert_eq!(
        run_git(
            &bare,
            &[
                "log",
                "--reverse",
                "--format=%(trailers:key=Step-Id,valueonly)",
                &format!("{base}..main")
            ]
        )
        .split_whitespace()
        .collect::<Vec<_>>(),
        ["s1", "s2", "s3"]
    );
    assert_eq!(r.status(), "");
}

/// The runner's lock: one left by a runner that died is noted through the
/// Ui (before anything else is reported); one held by a live session
/// makes a second run busy, writing nothing.
#[test]
fn a_dead_runners_lock_is_noted_and_a_held_one_is_busy() {
    let r = Repo::with_run();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    std::fs::write(r.path(".git/steps.lock"), format!("{pid}\n")).unwrap();
    let (_, ui) = r.apply_ok(&plan3()[..1]);
    let notes = ui.notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains(&format!("pid {pid}")), "{}", notes[0]);
    assert!(matches!(ui.events[0], Event::Note(_)), "{:?}", ui.events);
    // Released on the way out: the next run has nothing to note.
    let (_, ui) = r.apply_ok(&plan3()[..2]);
    assert!(ui.notes().is_empty(), "{:?}", ui.notes());
    let head = r.rev("HEAD");
    let repo = r.open();
    let s = r.settings(&repo);
    let mut held_ui = Recorder::default();
    let held = Session::open(&repo, &s, None, ApplyOptions::default(), &mut held_ui).unwrap();
    let (res, ui) = r.apply(&plan3(), &ApplyOptions::default());
    let (e, done) = res.expect_err("busy");
    assert_eq!(e.kind(), "busy", "{e:?}");
    assert!(done.is_empty() && ui.events.is_empty(), "{:?}", ui.events);
    assert_eq!(r.rev("HEAD"), head);
    drop(held);
    r.apply_ok(&plan3());
    assert_eq!(r.step_ids("HEAD"), ["s1", "s2", "s3"]);
}
