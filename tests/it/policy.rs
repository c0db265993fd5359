//! The repository's own policy (issue 14): git-steps commits as git would
//! in the same repository — the identity git resolves.

use crate::harness::{line, TestRepo};

const IDENTITY: [&str; 7] = [
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_DATE",
    "EMAIL",
];

fn who(t: &TestRepo) -> String {
    t.git_out(&[
        "log",
        "-1",
        "--format=%an <%ae> %ad | %cn <%ce> %cd",
        "--date=iso-strict",
    ])
}

/// Identity as git resolves it: the environment first, then config; where
/// git has none, git-steps' own, said once on stderr.
#[test]
fn commits_carry_the_identity_git_would_use() {
    let t = TestRepo::new();
    let step =
        |n: u32| line(serde_json::json!({"id": format!("s{n}"), "files": {"f": format!("{n}\n")}}));
    let plan = t.plan("p.jsonl", &[step(1), step(2)]);
    let p = plan.to_str().unwrap();

    // 1. The environment, author and committer apart, dates included.
    let r = t.steps_without(
        &["apply", p],
        &IDENTITY,
        &[
            ("GIT_AUTHOR_NAME", "Ada"),
            ("GIT_AUTHOR_EMAIL", "ada@example.invalid"),
            ("GIT_AUTHOR_DATE", "2026-02-03T04:05:06Z"),
            ("GIT_COMMITTER_NAME", "Runner"),
            ("GIT_COMMITTER_EMAIL", "runner@example.invalid"),
            ("GIT_COMMITTER_DATE", "2026-02-03T04:05:07Z"),
        ],
    );
    assert_eq!(r.code(), Some(0), "{}", r.explain());
    assert_eq!(
        who(&t),
        "Ada <ada@example.invalid> 2026-02-03T04:05:06Z | Runner <runner@example.invalid> 2026-02-03T04:05:07Z"
    );
    assert!(
        !r.stderr().contains("git has no identity"),
        "{}",
        r.explain()
    );

    // 2. Config, when the environment says nothing.
    t.git(&["config", "user.name", "Config Person"]).ok();
    t.git(&["config", "user.email", "config@example.invalid"])
        .ok();
    let plan = t.plan("q.jsonl", &[step(3)]);
    let r = t.steps_without(&["apply", plan.to_str().unwrap()], &IDENTITY, &[]);
    assert_eq!(r.code(), Some(0), "{}", r.explain());
    assert!(
        who(&t).starts_with("Config Person <config@example.invalid>"),
        "{}",
        who(&t)
    );
    assert!(
        who(&t).contains("| Config Person <config@example.invalid>"),
        "{}",
        who(&t)
    );

    // 3. Nothing at all: git-steps' own identity, and a note, once for the
    //    whole command however many steps it commits.
    t.git(&["config", "--unset", "user.name"]).ok();
    t.git(&["config", "--unset", "user.email"]).ok();
    let plan = t.plan("r.jsonl", &[step(4), step(5)]);
    let r = t.steps_without(&["apply", plan.to_str().unwrap()], &IDENTITY, &[]);
    assert_eq!(r.code(), Some(0), "{}", r.explain());
    assert!(
        who(&t).starts_with("git-steps <git-steps@localhost>"),
        "{}",
        who(&t)
    );
    assert_eq!(
        r.stderr().matches("git has no identity here").count(),
        1,
        "{}",
        r.explain()
    );
    // A rerun that commits nothing says nothing.
    let r = t.steps_without(&["apply", plan.to_str().unwrap()], &IDENTITY, &[]);
    assert_eq!(r.code(), Some(0), "{}", r.explain());
    assert!(
        !r.stderr().contains("git has no identity"),
        "{}",
        r.explain()
    );
}

/// Issue 14, item 4: `init` with another branch starts that run as a whole:
/// its own run id, so its first step is not measured against the old run's
/// receipts; the same branch again keeps the run.
#[test]
fn init_with_another_branch_starts_another_run() {
    let t = TestRepo::new();
    t.steps(&["init", "--branch", "task-a", "--run", "run-a"])
        .ok();
    let a1 = line(serde_json::json!({"id": "s1", "files": {"a.txt": "a\n"}}));
    t.steps_stdin(&["apply", "-"], &a1).ok();
    // The same branch again: the same run.
    let r = t.steps(&["--json", "init", "--branch", "task-a"]).ok();
    assert_eq!(r.json()["data"]["run"], "run-a", "{}", r.explain());
    // Another branch, no --run: a run of its own, named after the branch.
    let r = t.steps(&["--json", "init", "--branch", "task-b"]).ok();
    assert_eq!(r.json()["data"]["run"], "task-b", "{}", r.explain());
    assert_eq!(t.git_out(&["config", "steps.run"]), "task-b");
    // Its s1 is another decision under the same id, in another run: applied.
    let b1 = line(serde_json::json!({"id": "s1", "files": {"b.txt": "b\n"}}));
    let r = t.steps_stdin(&["apply", "-"], &b1);
    assert_eq!(r.code(), Some(0), "{}", r.explain());
    assert_eq!(
        t.git_out(&["log", "-1", "--format=%(trailers:key=Step-Run,valueonly)"]),
        "task-b"
    );
    // An explicit --run still wins.
    let r = t
        .steps(&["--json", "init", "--branch", "task-c", "--run", "mine"])
        .ok();
    assert_eq!(r.json()["data"]["run"], "mine");
}

/// Issue 14, item 4: on a detached HEAD with no run set up, git-steps does
/// not make up a branch (it used to create and switch to `main`): it says
/// which `init` to run, and changes nothing.
#[test]
fn a_detached_head_without_a_run_is_refused_with_the_init_to_run() {
    let t = TestRepo::fresh();
    t.write("README", "project\n");
    t.commit_all("base");
    let head = t.git_out(&["rev-parse", "HEAD"]);
    t.git(&["checkout", "-q", "--detach"]).ok();
    let s1 = line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}}));
    let plan = t.plan("p.jsonl", &[s1]);
    t.refuses(
        "detached",
        2,
        &[
            "HEAD is detached",
            "git steps init --run",
            "git steps init --branch",
        ],
        || t.steps(&["apply", plan.to_str().unwrap()]),
    );
    assert_eq!(t.git_out(&["rev-parse", "--abbrev-ref", "HEAD"]), "HEAD");
    assert_eq!(t.git_out(&["rev-parse", "HEAD"]), head);
    // With a branch named, it runs there.
    t.steps(&["init", "--branch", "agent"]).ok();
    t.steps(&["apply", plan.to_str().unwrap()]).ok();
    assert_eq!(t.git_out(&["rev-parse", "--abbrev-ref", "HEAD"]), "agent");
}

/// Issue 14, item 7 (the default only): git-steps runs no client hook, and
/// says so where a user looks — `init` on stderr, `status` in both forms —
/// when the repository has some (`.sample` files do not count).
#[test]
fn installed_hooks_are_named_and_not_run() {
    let t = TestRepo::new();
    // Exact bytes, no conversion: git's default policy.
    t.pin_policy();
    let r = t.steps(&["init"]).ok();
    assert!(!r.stderr().contains("hooks"), "{}", r.explain());
    let hook = |name: &str, body: &str| {
        crate::harness::script(&t.path(&format!(".git/hooks/{name}")), body);
    };
    hook("pre-commit.sample", "#!/bin/sh\nexit 1\n");
    let ran = t.tmp.path().join("hook-ran");
    hook(
        "pre-commit",
        &format!("#!/bin/sh\ntouch {}\nexit 1\n", ran.display()),
    );
    hook("commit-msg", "#!/bin/sh\nexit 1\n");
    let r = t.steps(&["init"]).ok();
    assert!(
        r.stderr()
            .contains("hooks: commit-msg, pre-commit (not run by git-steps"),
        "{}",
        r.explain()
    );
    let s1 = line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}}));
    t.steps_stdin(&["apply", "-"], &s1).ok();
    assert!(!ran.exists(), "a hook ran");
    let st = t.steps(&["--json", "status"]).ok().json();
    assert_eq!(
        st["data"]["hooks"],
        serde_json::json!(["commit-msg", "pre-commit"])
    );
    let st = t.steps(&["status"]).ok();
    assert!(
        st.stdout()
            .contains("hooks:         commit-msg, pre-commit (not run"),
        "{}",
        st.explain()
    );
    // core.hooksPath is where git looks, so it is where git-steps looks.
    std::fs::create_dir_all(t.path("githooks")).unwrap();
    t.git(&["config", "core.hooksPath", "githooks"]).ok();
    let st = t.steps(&["--json", "status"]).ok().json();
    assert!(st["data"].get("hooks").is_none(), "{st}");
}

/// An identity git would refuse (an unreadable date, an empty name) is
/// refused before anything is written, as `git commit` refuses it.
#[test]
fn an_identity_git_would_refuse_is_refused_before_anything_is_written() {
    let t = TestRepo::new();
    t.write("README", "project\n");
    t.commit_all("base");
    let s1 = line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}}));
    let plan = t.plan("p.jsonl", &[s1]);
    let p = plan.to_str().unwrap();
    t.refuses(
        "bad date",
        1,
        &["not usable", "GIT_AUTHOR_DATE or GIT_COMMITTER_DATE"],
        || t.steps_env(&["apply", p], &[("GIT_AUTHOR_DATE", "not a date")]),
    );
    t.refuses("empty name", 1, &["not usable", "empty name"], || {
        t.steps_env(&["apply", p], &[("GIT_COMMITTER_NAME", "")])
    });
    t.steps(&["apply", p]).ok();
}

/// A configured remote whose fetch refspec maps into refs/heads/ (a
/// mirror) is not a remote-tracking ref: a push never moves a local
/// branch through it.
#[test]
fn a_mirror_refspec_never_moves_a_local_branch() {
    use crate::servers::Kind;
    let t = TestRepo::new();
    let server = t.start_server(Kind::Path);
    t.git(&["remote", "add", "origin", server.url()]).ok();
    t.git(&[
        "config",
        "--replace-all",
        "remote.origin.fetch",
        "+refs/heads/*:refs/heads/*",
    ])
    .ok();
    t.write("README", "project\n");
    t.commit_all("base");
    let base = t.git_out(&["rev-parse", "main"]);
    t.steps(&["init", "--remote", "origin", "--branch", "main"])
        .ok();
    let s1 = line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}}));
    let s2 = line(serde_json::json!({"id": "s2", "files": {"f": "2\n"}}));
    let plan = t.plan("p.jsonl", &[s1, s2]);
    t.steps(&["apply", plan.to_str().unwrap()]).ok();
    assert_eq!(t.step_ids(), ["s1", "s2"]);
    assert_ne!(t.git_out(&["rev-parse", "main"]), base);
    assert_eq!(
        t.git_out(&["rev-parse", "main"]),
        server.git(&["rev-parse", "main"]).trim()
    );
    assert!(
        t.git(&["rev-parse", "--verify", "-q", "refs/remotes/origin/main"])
            .code()
            != Some(0)
    );
}
