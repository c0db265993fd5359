//! `sync::reconcile`: the local branch brought together with the durable
//! one before any step runs — fast-forward after a hand reset (worktree
//! included), push of local receipts the remote lacks, a diverged pair
//! refused — checked against the refs git shows and `git status`.

use git_steps::sync::reconcile::{self, Action};
use git_steps::RefusalKind;

use crate::common::*;

fn plan(n: usize) -> Vec<serde_json::Value> {
    (1..=n)
        .map(|i| {
            files_step(
                &format!("s{i}"),
                &format!("f{}.txt", i % 2),
                &format!("{i}\n"),
            )
        })
        .collect()
}

fn remote_main(bare: &std::path::Path) -> String {
    run_git(bare, &["rev-parse", "main"]).trim().to_string()
}

#[test]
fn a_hand_reset_box_is_fast_forwarded_and_the_run_resumes() {
    let r = Repo::with_run();
    let bare = r.with_remote();
    r.apply_ok(&plan(3));
    let s1 = r.rev("HEAD~2");
    let s3 = r.rev("HEAD");
    r.git(&["reset", "-q", "--hard", "HEAD~2"]);
    assert_eq!(r.read("f1.txt"), "1\n");
    // The resume: the same plan, one step longer.
    let (report, ui) = r.apply_ok(&plan(4));
    assert_eq!(
        ui.reconciles()[0].action,
        Action::FastForward {
            from: Some(s1.clone()),
            to: s3.clone(),
            steps: 2,
            commits: 2
        }
    );
    assert_eq!(
        ui.steps()
            .iter()
            .map(|s| (s.0, s.1.as_str()))
            .collect::<Vec<_>>(),
        [
            ("skip", "s1"),
            ("skip", "s2"),
            ("skip", "s3"),
            ("applied", "s4")
        ]
    );
    assert_eq!(ui.steps()[2].2, s3);
    assert_eq!(r.step_ids("HEAD"), ["s1", "s2", "s3", "s4"]);
    assert_eq!(remote_main(&bare), r.rev("HEAD"));
    assert_eq!(report.head.as_deref(), Some(r.rev("HEAD").as_str()));
    assert_eq!(r.read("f1.txt"), "3\n");
    assert_eq!(r.read("f0.txt"), "4\n");
    assert_eq!(r.status(), "");
}

#[test]
fn reconcile_alone_fast_forwards_branch_index_and_worktree() {
    let r = Repo::with_run();
    let bare = r.with_remote();
    r.apply_ok(&plan(3));
    let s3 = r.rev("HEAD");
    r.git(&["reset", "-q", "--hard", "HEAD~3"]);
    let base = r.rev("HEAD");
    let repo = r.open();
    let s = r.settings(&repo);
    // A dry run says what it would do and moves nothing.
    let dry = reconcile::reconcile(
        &repo,
        &s,
        reconcile::Mode {
            dry_run: true,
            ..Default::default()
        },
    )
    .unwrap();
    let expected = Action::FastForward {
        from: Some(base.clone()),
        to: s3.clone(),
        steps: 3,
        commits: 3,
    };
    assert_eq!(dry.action, expected);
    assert_eq!(r.rev("main"), base);
    assert_eq!(r.status(), "");
    let done = reconcile::reconcile(&repo, &s, Default::default()).unwrap();
    assert_eq!(done.action, expected);
    assert_eq!(done.local.as_deref(), Some(s3.as_str()));
    assert_eq!(done.durable.as_deref(), Some(s3.as_str()));
    assert_eq!(done.switched, None);
    assert_eq!(r.rev("main"), s3);
    assert_eq!(remote_main(&bare), s3);
    assert_eq!(r.status(), "");
    assert_eq!(r.read("f0.txt"), "2\n");
    assert_eq!(r.read("f1.txt"), "3\n");
    // Again: nothing to do.
    assert_eq!(
        reconcile::reconcile(&repo, &s, Default::default())
            .unwrap()
            .action,
        Action::InSync
    );
}

#[test]
fn local_receipts_the_remote_lacks_are_pushed() {
    let r = Repo::with_run();
    let bare = r.with_remote();
    let base = r.rev("HEAD");
    // Applied while the run was local only.
    r.git(&["config", "--unset", "steps.remote"]);
    let (_, ui) = r.apply_ok(&plan(2));
    assert_eq!(ui.reconciles()[0].action, Action::LocalOnly);
    assert_eq!(remote_main(&bare), base);
    r.git(&["config", "steps.remote", "origin"]);
    let repo = r.open();
    let s = r.settings(&repo);
    let done = reconcile::reconcile(&repo, &s, Default::default()).unwrap();
    assert_eq!(
        done.action,
        Action::Push {
            from: Some(base),
            to: r.rev("HEAD"),
            steps: 2,
            commits: 2
        }
    );
    assert_eq!(remote_main(&bare), r.rev("HEAD"));
    assert_eq!(r.status(), "");
}

#[test]
fn a_diverged_box_is_refused_and_nothing_moves() {
    let r = Repo::with_run();
    let bare = r.with_remote();
    r.apply_ok(&plan(1));
    // Another box takes the run on and pushes s2.
    let other = r.tmp.path().join("other");
    run_git(
        r.tmp.path(),
        &[
            "clone",
            "-q",
            bare.to_str().unwrap(),
            other.to_str().unwrap(),
        ],
    );
    let b = Repo {
        tmp: tempfile::tempdir().unwrap(),
        work: other,
    };
    for (k, v) in [
        ("steps.branch", "main"),
        ("steps.run", "r1"),
        ("steps.remote", "origin"),
    ] {
        b.git(&["config", k, v]);
    }
    b.apply_ok(&plan(2));
    let durable = remote_main(&bare);
    // This box, cut off, made its own s2 locally.
    r.git(&["config", "--unset", "steps.remote"]);
    r.apply_ok(&[plan(1)[0].clone(), files_step("s2", "mine.txt", "mine\n")]);
    r.git(&["config", "steps.remote", "origin"]);
    let local = r.rev("HEAD");
    let repo = r.open();
    let s = r.settings(&repo);
    let e = reconcile::reconcile(&repo, &s, Default::default()).unwrap_err();
    let refusal = refusal(&e);
    assert_eq!(refusal.kind, RefusalKind::Diverged);
    assert!(refusal.saw.contains(&local[..7]), "{}", refusal.saw);
    assert!(refusal.saw.contains(&durable[..7]), "{}", refusal.saw);
    assert_eq!(e.exit_code(), 3);
    assert_eq!(r.rev("main"), local);
    assert_eq!(remote_main(&bare), durable);
    assert_eq!(r.status(), "");
    // Through apply (with the plan this box's history agrees with), the
    // same refusal before any step.
    let (res, ui) = r.apply(
        &[
            plan(1)[0].clone(),
            files_step("s2", "mine.txt", "mine\n"),
            plan(3)[2].clone(),
        ],
        &Default::default(),
    );
    let (e, done) = res.expect_err("refused");
    assert_eq!(refusal_kind(&e), RefusalKind::Diverged);
    assert!(done.is_empty() && ui.steps().is_empty());
    assert_eq!(r.rev("main"), local);
}

fn refusal_kind(e: &git_steps::Error) -> RefusalKind {
    refusal(e).kind
}

#[test]
fn an_edit_in_the_way_of_a_fast_forward_is_refused_before_the_branch_moves() {
    let r = Repo::with_run();
    r.with_remote();
    r.apply_ok(&plan(2));
    r.git(&["reset", "-q", "--hard", "HEAD~2"]);
    let base = r.rev("HEAD");
    // f1.txt does not exist at the base; s1 creates it: an untracked file
    // in its way. f0.txt is s2's.
    r.write("f1.txt", "untracked, mine\n");
    let repo = r.open();
    let s = r.settings(&repo);
    let e = reconcile::reconcile(&repo, &s, Default::default()).unwrap_err();
    assert_eq!(refusal(&e).kind, RefusalKind::DirtyWorktree);
    assert!(refusal(&e).saw.contains("f1.txt"), "{}", refusal(&e).saw);
    assert_eq!(r.rev("main"), base);
    assert_eq!(r.read("f1.txt"), "untracked, mine\n");
    assert_eq!(r.status(), "?? f1.txt\n");
}
