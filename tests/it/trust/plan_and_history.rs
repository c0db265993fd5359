//! The plan and the history agree both ways: an edited plan, or runners with
//! different plans on one run, are refused; a hand-made commit inside the
//! run is refused with hints that work when followed.

use crate::harness::*;
use crate::servers::Kind;

/// Issue 12 item 5: plan and history must agree both ways. A plan edited
/// mid-run (`[s1, s3]` resumed after `s1, s2`) is refused naming the step
/// and the receipt, and `verify` of it reports the same; runners with
/// different plans on one run are refused after the first; the whole plan,
/// the plan from a later step on, one step at a time and an old step
/// redelivered alone all still work.
#[test]
fn the_plan_and_the_history_agree_both_ways() {
    let t = TestRepo::new();
    let s = |id: &str| {
        line(serde_json::json!({"id": id, "files": {format!("{id}.txt"): format!("{id}\n")}}))
    };
    let plan = t.plan("plan.jsonl", &[s("s1"), s("s2"), s("s3")]);
    // Crashed before s3.
    t.steps_env(
        &["apply", plan.to_str().unwrap()],
        &[("GIT_STEPS_CRASH", "before-write@s3")],
    );
    assert_eq!(t.step_ids(), ["s1", "s2"]);
    let s2_commit = t.git_out(&["rev-parse", "--short=12", "HEAD"]);
    let edited = t.plan("edited.jsonl", &[s("s1"), s("s3")]);
    let r = t.refuses("", 3, &["step s3", "step s2", &s2_commit], || {
        t.steps(&["--json", "apply", edited.to_str().unwrap()])
    });
    assert_eq!(r.json()["data"]["kind"], "plan-mismatch", "{}", r.explain());
    let v = t.steps(&["verify", edited.to_str().unwrap()]).code_is(3);
    assert!(
        v.stdout().contains("step s2") || v.stderr().contains("step s2"),
        "{}",
        v.explain()
    );
    t.steps(&["verify", plan.to_str().unwrap()]).ok();
    // The real plan finishes the run; then one step at a time continues it,
    // and an old step redelivered alone is skipped.
    t.steps(&["apply", plan.to_str().unwrap()]).ok();
    t.steps_stdin(&["apply", "-"], &s("s4")).ok();
    t.steps_stdin(&["apply", "-"], &s("s2")).ok();
    t.steps_stdin(&["apply", "-"], &format!("{}\n{}\n", s("s4"), s("s5")))
        .ok();
    assert_eq!(t.step_ids(), ["s1", "s2", "s3", "s4", "s5"]);
    t.steps(&["verify"]).ok();
    // A step both out of place and with another decision: the decision is
    // what is reported first.
    let other = line(serde_json::json!({"id": "s3", "files": {"s3.txt": "other\n"}}));
    let r = t
        .steps_stdin(
            &["--json", "apply", "-"],
            &format!("{}\n{other}\n", s("s1")),
        )
        .code_is(3);
    assert_eq!(
        r.json()["data"]["kind"],
        "digest-mismatch",
        "{}",
        r.explain()
    );

    // Three runners, three plans, one run: the first continues it, the
    // others are refused once their plans would interleave.
    let u = TestRepo::new();
    let plans: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|p| {
            let lines: Vec<String> = (1..=3).map(|i| s(&format!("{p}{i}"))).collect();
            u.plan(&format!("{p}.jsonl"), &lines)
        })
        .collect();
    u.steps(&["apply", plans[0].to_str().unwrap()]).ok();
    for p in &plans[1..] {
        // Each is a continuation the first time (it holds no receipt)...
        u.steps(&["apply", p.to_str().unwrap()]).ok();
    }
    assert_eq!(u.step_ids().len(), 9);
    // ...but none of them can go on once another plan's steps follow its own.
    for p in ["a", "b"] {
        let lines: Vec<String> = (1..=4).map(|i| s(&format!("{p}{i}"))).collect();
        let extended = u.plan(&format!("{p}-extended.jsonl"), &lines);
        u.refuses(
            p,
            3,
            &["a receipt the plan does not hold at that position"],
            || u.steps(&["apply", extended.to_str().unwrap()]),
        );
    }
}

/// Issue 12 item 11: the refusal of a hand-made commit inside the run only
/// gives hints that work. Followed word for word: the commit that is only
/// on this box goes to a side branch and the run goes on; one the remote
/// holds leads to a new run from here, which goes on.
#[test]
fn the_hints_for_a_hand_commit_in_the_run_work_when_followed() {
    let (t, server) = TestRepo::with_server(Kind::Path, "libgit2");
    let s = |id: &str, v: &str| line(serde_json::json!({"id": id, "files": {"f": v}}));
    t.steps_stdin(&["apply", "-"], &s("s1", "1\n")).ok();
    t.write("hand.txt", "a fix by hand\n");
    t.commit_all("hand fix");
    let hand = t.git_out(&["rev-parse", "--short=12", "HEAD"]);
    let r = t.steps_stdin(&["apply", "-"], &s("s2", "2\n")).code_is(3);
    let err = r.stderr();
    assert!(!err.contains("revert them with a step"), "{err}");
    let cmd = format!("git branch keep-{hand} {hand} && git reset --keep {hand}^");
    assert!(err.contains(&cmd), "lacks {cmd:?}\n{err}");
    for c in [
        vec!["branch".to_string(), format!("keep-{hand}"), hand.clone()],
        vec![
            "reset".to_string(),
            "--keep".to_string(),
            format!("{hand}^"),
        ],
    ] {
        t.git(&c.iter().map(String::as_str).collect::<Vec<_>>())
            .ok();
    }
    t.steps_stdin(&["apply", "-"], &s("s2", "2\n")).ok();
    assert_eq!(server.step_ids(), ["s1", "s2"]);
    assert!(t
        .git_out(&["log", "--format=%s", &format!("keep-{hand}")])
        .contains("hand fix"));

    // The same commit pushed to the durable branch by hand: a new run.
    t.write("hand.txt", "pushed by hand\n");
    t.commit_all("hand fix, pushed");
    t.git(&["push", "-q", server.url(), "main"]).ok();
    let r = t.steps_stdin(&["apply", "-"], &s("s3", "3\n")).code_is(3);
    assert!(
        r.stderr()
            .contains("git steps init --branch <new branch> --run <new id>"),
        "{}",
        r.explain()
    );
    t.steps(&[
        "init",
        "--remote",
        server.url(),
        "--branch",
        "run-2",
        "--run",
        "run-2",
    ])
    .ok();
    t.steps_stdin(&["apply", "-"], &s("s3", "3\n")).ok();
    assert_eq!(t.read("f"), "3\n");
    assert_eq!(t.read("hand.txt"), "pushed by hand\n");
    assert_eq!(
        t.git_out(&[
            "log",
            "-1",
            "--format=%(trailers:key=Step-Id,valueonly)",
            "run-2"
        ]),
        "s3"
    );
}

/// Issue 28 item 16: a step commit whose tree was changed while its
/// receipt was kept (a hand `--amend`) passed `verify PLAN`: step a1
/// decided `a.txt = "good"`, its commit wrote `evil`, and verify said ok.
/// The receipt promises its commit is its decision applied to the parent:
/// verify PLAN applies it again and names the step and the paths; without
/// a PLAN it says which steps it could not check, and why.
#[test]
fn a_tree_changed_under_a_kept_receipt_fails_verify() {
    let t = TestRepo::new();
    t.pin_policy();
    let plan = t.plan(
        "p.jsonl",
        &[
            line(serde_json::json!({"id": "a1", "files": {"a.txt": "good\n"}})),
            line(serde_json::json!({"id": "a2", "files": {"b.txt": "b\n"}})),
        ],
    );
    let p = plan.to_str().unwrap();
    t.steps(&["apply", p]).ok();
    t.steps(&["verify", p]).ok();
    // Rewrite a1's tree, keep its message (and so its receipt), and put a2
    // back on top as it was.
    let a2 = t.git_out(&["rev-parse", "HEAD"]);
    t.git(&["reset", "-q", "--hard", "HEAD~1"]).ok();
    t.write("a.txt", "evil\n");
    t.git(&["commit", "-q", "-a", "--amend", "--no-edit"]).ok();
    t.git(&["cherry-pick", "--allow-empty", &a2]).ok();
    assert_eq!(t.step_ids(), ["a1", "a2"]);
    let v = t.steps(&["verify", p]);
    assert_eq!(v.code(), Some(3), "{}", v.explain());
    let all = format!("{}{}", v.stdout(), v.stderr());
    assert!(
        all.contains("step a1")
            && all.contains("a.txt")
            && all.contains("not its decision applied"),
        "{}",
        v.explain()
    );
    assert!(!all.contains("step a2: its commit"), "{}", v.explain());
    // Without the plan too: `git commit --amend` keeps the decision a1's
    // commit stores (git carries a commit's extra headers over), which is
    // applied again. The cherry-pick dropped a2's, so a2 is named as not
    // checked.
    let v = t.steps(&["--json", "verify"]).code_is(3);
    let doc = v.json();
    assert!(
        doc["data"]["problems"]
            .to_string()
            .contains("step a1: its commit"),
        "{doc}"
    );
    let notes = doc["data"]["notes"].to_string();
    assert!(
        notes.contains("1 step(s) were not checked against their decision")
            && notes.contains(": a2"),
        "{doc}"
    );
}
