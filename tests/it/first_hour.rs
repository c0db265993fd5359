//! What a new user meets first: a run never lands on the default branch by
//! accident (the default run branch is `steps/<run id>`; `apply` without
//! `init` on the default branch refuses with the `init` line to run), `init`
//! in a clone uses its only remote and the run branch tracks it, and the
//! same `init` on a fresh clone resumes the same run.

use std::os::unix::process::ExitStatusExt;

use crate::harness::*;

fn plan(t: &TestRepo) -> std::path::PathBuf {
    t.plan(
        "plan.jsonl",
        &[
            line(serde_json::json!({"id": "s1", "files": {"a.txt": "1\n"}})),
            line(serde_json::json!({"id": "s2", "files": {"b.txt": "2\n"}})),
        ],
    )
}

/// Every ref and the config, as `git` shows them: what "nothing written" means.
fn refs_and_config(t: &TestRepo) -> String {
    format!(
        "{}\n{}",
        t.git_out(&["for-each-ref", "--format=%(refname) %(objectname)"]),
        std::fs::read_to_string(t.path(".git/config")).unwrap()
    )
}

#[test]
fn apply_without_init_on_the_default_branch_refuses_and_names_the_init_line() {
    let t = TestRepo::fresh();
    t.write("base.txt", "base\n");
    t.commit_all("base");
    let p = plan(&t);
    let before = refs_and_config(&t);
    for cmd in [
        vec!["apply", p.to_str().unwrap()],
        vec!["apply", "--dry-run", p.to_str().unwrap()],
        vec!["run", "--decider", "false"],
        vec!["record", "--id", "r1"],
    ] {
        let r = t
            .steps(&cmd)
            .code_is(2)
            .stderr_has("HEAD is on main, the repository's default branch")
            .stderr_has("`git steps init`")
            .stderr_has("steps/main")
            .stderr_has("--branch main");
        assert_eq!(refs_and_config(&t), before, "{}", r.explain());
    }
    let j = t
        .steps(&["--json", "apply", p.to_str().unwrap()])
        .code_is(2)
        .json();
    assert_eq!(j["data"]["kind"], "usage");
    assert!(j["data"]["hint"]
        .as_str()
        .unwrap()
        .contains("git steps init"));
    assert_eq!(refs_and_config(&t), before);

    // Named on purpose, main it is.
    t.steps(&["apply", "--branch", "main", p.to_str().unwrap()])
        .ok();
    assert_eq!(t.step_ids(), ["s1", "s2"]);
    assert_eq!(t.git_out(&["symbolic-ref", "--short", "HEAD"]), "main");
}

#[test]
fn without_init_a_run_lands_on_a_checked_out_branch_that_is_not_the_default() {
    let t = TestRepo::fresh();
    t.write("base.txt", "base\n");
    t.commit_all("base");
    let main = t.git_out(&["rev-parse", "main"]);
    t.git(&["switch", "-q", "-c", "feature"]).ok();
    t.steps(&["apply", plan(&t).to_str().unwrap()]).ok();
    assert_eq!(t.git_out(&["rev-parse", "main"]), main);
    assert_eq!(
        t.git_out(&[
            "log",
            "--format=%(trailers:key=Step-Id,valueonly,separator=)",
            "main..feature"
        ]),
        "s2\ns1"
    );
    // `init.defaultBranch` names a default branch too.
    let u = TestRepo::fresh();
    u.git(&["switch", "-q", "--orphan", "trunk"]).ok();
    u.write("base.txt", "base\n");
    u.commit_all("base");
    u.git(&["config", "init.defaultBranch", "trunk"]).ok();
    u.steps(&["apply", plan(&u).to_str().unwrap()])
        .code_is(2)
        .stderr_has("HEAD is on trunk");
}

#[test]
fn init_in_a_clone_uses_its_only_remote_a_run_branch_that_tracks_it_and_resumes_on_a_fresh_clone() {
    let t = TestRepo::fresh();
    let bare = t.tmp.path().join("remote.git");
    git_in(
        t.tmp.path(),
        &[
            "init",
            "-q",
            "--bare",
            "-b",
            "trunk",
            bare.to_str().unwrap(),
        ],
        &t,
    );
    t.git(&["switch", "-q", "--orphan", "trunk"]).ok();
    t.write("base.txt", "base\n");
    t.commit_all("base");
    t.git(&["push", "-q", bare.to_str().unwrap(), "trunk"]).ok();

    // A fresh clone, as a new user has it: HEAD on the remote's HEAD.
    let a = t.clone_with("a", &[bare.to_str().unwrap()]);
    a.git(&["config", "--unset", "steps.branch"]).ok();
    let p = plan(&a);
    // Forgetting init: refused, because trunk is the remote's HEAD.
    a.steps(&["apply", p.to_str().unwrap()])
        .code_is(2)
        .stderr_has("HEAD is on trunk");
    let init = a.steps(&["--json", "init"]).ok();
    assert!(
        init.stderr()
            .contains("the durable domain is origin, this clone's only remote"),
        "{}",
        init.explain()
    );
    let j = init.json();
    assert_eq!(j["data"]["branch"], "steps/trunk");
    assert_eq!(j["data"]["run"], "trunk");
    assert_eq!(j["data"]["remote"], "origin");
    a.steps(&["apply", p.to_str().unwrap()]).ok();
    // The remote's default branch is untouched; the run is on steps/trunk.
    let remote_log = |format: &str, rev: &str| {
        let bare = bare.to_str().unwrap();
        git_in(t.tmp.path(), &["--git-dir", bare, "log", format, rev], &t)
    };
    assert_eq!(remote_log("--format=%s", "trunk"), "base");
    assert_eq!(
        remote_log(
            "--format=%(trailers:key=Step-Id,valueonly,separator=)",
            "steps/trunk"
        ),
        "s2\ns1"
    );
    // The run branch tracks its remote branch: git shows ahead/behind.
    assert_eq!(
        a.git_out(&["rev-parse", "--abbrev-ref", "steps/trunk@{upstream}"]),
        "origin/steps/trunk"
    );
    let status = a.git_out(&["status", "-sb"]);
    assert!(
        status.starts_with("## steps/trunk...origin/steps/trunk"),
        "{status}"
    );
    assert!(
        !status.contains("ahead") && !status.contains("behind"),
        "{status}"
    );

    // A fresh clone runs the same init: the same run, nothing applied twice.
    let b = t.clone_with("b", &[bare.to_str().unwrap()]);
    b.git(&["config", "--unset", "steps.branch"]).ok();
    // Before init, status says the run is on the remote and how to resume.
    let st = b.steps(&["status"]).ok();
    assert!(
        st.stderr().contains("no run is set up here (`git steps init`), so the durable domain is this local repository, not origin; origin/steps/trunk holds run trunk: `git steps init` resumes it"),
        "{}",
        st.explain()
    );
    let j = b.steps(&["--json", "init"]).ok().json();
    assert_eq!(
        (j["data"]["branch"].as_str(), j["data"]["run"].as_str()),
        (Some("steps/trunk"), Some("trunk"))
    );
    let out = b
        .steps(&["--json", "apply", p.to_str().unwrap()])
        .ok()
        .json();
    assert!(
        out["data"]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["action"] == "skip"),
        "{out}"
    );
    assert_eq!(b.step_ids(), ["s1", "s2"]);

    // init again with no flags keeps the run; --run starts another one on
    // its own branch.
    let j = b.steps(&["--json", "init"]).ok().json();
    assert_eq!(j["data"]["branch"], "steps/trunk");
    let j = b.steps(&["--json", "init", "--run", "second"]).ok().json();
    assert_eq!(
        (j["data"]["branch"].as_str(), j["data"]["run"].as_str()),
        (Some("steps/second"), Some("second"))
    );
}

#[test]
fn init_with_several_remotes_refuses_a_local_domain_is_asked_for_by_name_and_a_detached_head_needs_a_run_name(
) {
    let t = TestRepo::fresh();
    t.write("base.txt", "base\n");
    t.commit_all("base");
    t.git(&["remote", "add", "one", "/nonexistent/one.git"])
        .ok();
    t.git(&["remote", "add", "two", "/nonexistent/two.git"])
        .ok();
    // Issue 50 item 2: which remote is the user's to say; nothing written.
    t.steps(&["--json", "init"])
        .code_is(2)
        .stderr_has("this clone has 2 remotes (one, two)")
        .stderr_has("git steps init --remote one");
    t.git(&["config", "--get", "steps.branch"]).code_is(1);
    // Local by name: stored as such, and every later command keeps it.
    let j = t.steps(&["--json", "init", "--remote", ""]).ok().json();
    assert_eq!(j["data"]["durable"], "local");
    assert_eq!(j["data"]["branch"], "steps/main");
    assert_eq!(t.git_out(&["config", "steps.remote"]), "");
    // No upstream for a local run.
    t.git(&["config", "--get", "branch.steps/main.remote"])
        .code_is(1);
    let p = t.plan(
        "p.jsonl",
        &[line(serde_json::json!({"id": "s1", "files": {"a": "1\n"}}))],
    );
    t.steps(&["apply", p.to_str().unwrap()]).ok();

    let u = TestRepo::fresh();
    u.write("base.txt", "base\n");
    u.commit_all("base");
    u.git(&["switch", "-q", "--detach"]).ok();
    u.steps(&["init"])
        .code_is(2)
        .stderr_has("HEAD is detached")
        .stderr_has("--run");
    u.steps(&["init", "--run", "x"]).ok();
    assert_eq!(u.git_out(&["config", "steps.branch"]), "steps/x");
}

fn git_in(dir: &std::path::Path, args: &[&str], t: &TestRepo) -> String {
    let mut cmd = std::process::Command::new("git");
    cmd.args(args).current_dir(dir);
    hermetic(&mut cmd, &t.home());
    let r = t.run_cmd(cmd, format!("git {}", args.join(" ")), None);
    assert!(r.out.status.success(), "{}", r.explain());
    r.stdout().trim_end().to_string()
}

/// The first run of a new user who has work in progress: `init`, then
/// `apply` switches to the run branch and carries the edits along (as
/// `git switch` would); a crash mid-step and the rerun's repair leave them
/// alone too.
#[test]
fn work_in_progress_is_carried_onto_the_run_branch_and_through_a_repair() {
    let t = TestRepo::fresh();
    t.write("notes.txt", "base\n");
    t.write("a.txt", "0\n");
    t.commit_all("base");
    t.write("notes.txt", "my unsaved thoughts\n");
    t.write("scratch.txt", "untracked\n");
    t.steps(&["init"]).ok();
    let plan = t.plan(
        "plan.jsonl",
        &[
            line(serde_json::json!({"id": "s1", "files": {"a.txt": "1\n", "b.txt": "b\n"}})),
            line(serde_json::json!({"id": "s2", "files": {"a.txt": "2\n", "c.txt": "c\n"}})),
        ],
    );
    let p = plan.to_str().unwrap();
    // Killed half-way through s2's worktree update.
    let r = t.steps_env(&["apply", p], &[("GIT_STEPS_CRASH", "worktree-partial@s2")]);
    assert_eq!(r.out.status.signal(), Some(9), "{}", r.explain());
    assert!(
        r.stderr().contains(
            "switched from main to the run's branch steps/main (uncommitted changes come along"
        ),
        "{}",
        r.explain()
    );
    // status tells the cut update from the user's own edit.
    let st = t.steps(&["status"]).ok().stdout();
    assert!(
        st.contains("an update to step s2 was cut short by a crash (a.txt"),
        "{st}"
    );
    assert!(st.contains("other changed path(s): notes.txt"), "{st}");
    let j = t.steps(&["--json", "status"]).ok().json();
    assert_eq!(j["data"]["interrupted"]["step"], "s2", "{j}");
    assert_eq!(
        t.git_out(&["symbolic-ref", "--short", "HEAD"]),
        "steps/main"
    );
    assert_eq!(t.read("notes.txt"), "my unsaved thoughts\n");
    let r = t.steps(&["apply", p]).ok();
    assert!(
        r.stderr().contains("repaired the worktree"),
        "{}",
        r.explain()
    );
    assert_eq!(t.read("notes.txt"), "my unsaved thoughts\n");
    assert_eq!(t.read("scratch.txt"), "untracked\n");
    assert_eq!(
        (t.read("a.txt"), t.read("c.txt")),
        ("2\n".into(), "c\n".into())
    );
    assert_eq!(
        t.git_out(&["status", "--porcelain"]),
        " M notes.txt\n?? scratch.txt"
    );
    assert_eq!(t.git_out(&["show", "steps/main:notes.txt"]), "base");
    assert_eq!(
        t.git_out(&["rev-parse", "main"]),
        t.git_out(&["rev-parse", "steps/main~2"])
    );

    // An edit to a path a pending update involves is not guessed at: a
    // crash after s3's commit, the user edits a.txt, the rerun refuses.
    let more = t.plan(
        "more.jsonl",
        &[
            line(serde_json::json!({"id": "s1", "files": {"a.txt": "1\n", "b.txt": "b\n"}})),
            line(serde_json::json!({"id": "s2", "files": {"a.txt": "2\n", "c.txt": "c\n"}})),
            line(serde_json::json!({"id": "s3", "files": {"a.txt": "3\n"}})),
            line(serde_json::json!({"id": "s4", "files": {"d.txt": "d\n"}})),
        ],
    );
    let m = more.to_str().unwrap();
    let r = t.steps_env(&["apply", m], &[("GIT_STEPS_CRASH", "ref-updated@s3")]);
    assert_eq!(r.out.status.signal(), Some(9), "{}", r.explain());
    t.write("a.txt", "the user's\n");
    // (With nothing left to apply it would be left alone, exit 0.)
    t.steps(&["apply", m])
        .code_is(3)
        .stderr_has("changes that no step of the run explains")
        .stderr_has("a.txt");
    assert_eq!(t.step_ids(), ["s1", "s2", "s3"]);
    assert_eq!(t.read("a.txt"), "the user's\n");
    assert_eq!(t.read("notes.txt"), "my unsaved thoughts\n");
}

/// `status` after a crash between a push and the local branch update
/// counts what is durable (the remote's head, which this box holds), says
/// the box is behind, and `--json` gives the remote's name and URL fields
/// of their own; `log` numbers steps from 1, as `Step-Index` does.
#[test]
fn status_after_a_crash_counts_the_durable_steps_and_log_numbers_from_one() {
    let (t, server) = TestRepo::with_server(crate::servers::Kind::Path, "libgit2");
    t.git(&["remote", "add", "origin", server.url()]).ok();
    t.steps(&["init", "--remote", "origin"]).ok();
    let plan = t.plan(
        "plan.jsonl",
        &[
            line(serde_json::json!({"id": "s1", "files": {"a.txt": "1\n"}})),
            line(serde_json::json!({"id": "s2", "files": {"a.txt": "2\n"}})),
            line(serde_json::json!({"id": "s3", "files": {"a.txt": "3\n"}})),
        ],
    );
    let p = plan.to_str().unwrap();
    let r = t.steps_env(&["apply", p], &[("GIT_STEPS_CRASH", "pushed@s2")]);
    assert_eq!(r.out.status.signal(), Some(9), "{}", r.explain());
    assert_eq!(server.step_ids(), ["s1", "s2"]);
    assert_eq!(t.step_ids(), ["s1"]);
    let st = t.steps(&["status", p]).ok().stdout();
    assert!(
        st.contains("steps applied: 2 (last: s2); this box's branch holds 1"),
        "{st}"
    );
    assert!(st.contains("pending:       1 (next: s3)"), "{st}");
    assert!(
        st.contains(&format!("durable:       remote origin ({})", server.url())),
        "{st}"
    );
    let j = t.steps(&["--json", "status", p]).ok().json();
    let d = &j["data"];
    assert_eq!(
        (d["steps_applied"].as_u64(), d["steps_local"].as_u64()),
        (Some(2), Some(1)),
        "{j}"
    );
    assert_eq!(d["last_step"], "s2");
    assert_eq!(d["pending"], serde_json::json!(["s3"]));
    assert_eq!(d["remote_name"], "origin");
    assert_eq!(d["remote_url"], server.url());
    // verify: local and durable differ (exit 3), said as the crash state it is.
    let v = t.steps(&["verify"]).code_is(3);
    assert!(
        v.stdout()
            .contains("this box's branch main is behind the durable branch on origin")
            && v.stdout().contains("nothing is lost"),
        "{}",
        v.explain()
    );
    t.steps(&["apply", p]).ok();
    let j = t.steps(&["--json", "status"]).ok().json();
    assert!(j["data"].get("steps_local").is_none(), "{j}");
    assert_eq!(j["data"]["steps_applied"], 3);

    let log = t.steps(&["--json", "log"]).ok().json();
    let idx: Vec<u64> = log["data"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["index"].as_u64().unwrap())
        .collect();
    assert_eq!(idx, [1, 2, 3]);
    let receipts = t.git_out(&[
        "log",
        "--reverse",
        "--format=%(trailers:key=Step-Index,valueonly,separator=)",
    ]);
    assert_eq!(receipts, "1\n2\n3");
    let text = t.steps(&["log"]).ok().stdout();
    assert!(
        text.lines().next().unwrap().trim_start().starts_with("1  "),
        "{text}"
    );
}

/// The messages a new user meets: a mistyped remote, a patch that fails
/// mid-plan, a decider's stderr with -v.
#[test]
fn a_mistyped_remote_a_failing_patch_and_a_deciders_stderr_are_said_plainly() {
    let t = TestRepo::new();
    t.git(&["remote", "add", "origin", "/nonexistent/remote.git"])
        .ok();
    let before = refs_and_config(&t);
    for args in [
        vec!["apply", "--remote", "orgin", "-"],
        vec!["init", "--remote", "orgin"],
    ] {
        t.steps_stdin(&args, "")
            .code_is(2)
            .stderr_has("--remote orgin: not a configured remote")
            .stderr_has("`git remote` lists: origin")
            .stderr_has("did you mean `--remote origin`?");
    }
    assert_eq!(refs_and_config(&t), before);

    let plan = t.plan(
        "plan.jsonl",
        &[
            line(serde_json::json!({"id": "s1", "files": {"a.txt": "1\n"}})),
            line(serde_json::json!({"id": "s2", "patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-nope\n+2\n"})),
        ],
    );
    // Without init, a clone with a remote keeps steps local only by name.
    t.steps(&["apply", plan.to_str().unwrap()])
        .code_is(2)
        .stderr_has("this clone has a remote (origin)")
        .stderr_has("`git steps init --remote ''`");
    assert_eq!(refs_and_config(&t), before);
    let r = t
        .steps(&["apply", "--remote", "", plan.to_str().unwrap()])
        .code_is(1);
    for needle in [
        "step s2:",
        "Hint: the steps before s2 are durable (1 applied by this command, 0 already there)",
        "fix step s2 in the plan (or take it out), then rerun the same command",
    ] {
        assert!(r.stderr().contains(needle), "{needle}\n{}", r.explain());
    }
    assert_eq!(t.step_ids(), ["s1"]);

    // `apply` with no plan at a terminal refuses instead of waiting.
    let mut script = std::process::Command::new("script");
    script
        .args(["-qec", &format!("{BIN} apply; echo exit=$?"), "/dev/null"])
        .current_dir(&t.work);
    hermetic(&mut script, &t.home());
    let r = t.run_cmd(script, "script -qec 'git-steps apply'".into(), None);
    assert!(
        r.stdout()
            .contains("no plan given, and stdin (the default plan) is a terminal"),
        "{}",
        r.explain()
    );
    assert!(r.stdout().contains("exit=2"), "{}", r.explain());

    let decider = t.tmp.path().join("decider.sh");
    std::fs::write(
        &decider,
        "echo 'thinking about the next step' >&2\necho '{\"done\": true}'\n",
    )
    .unwrap();
    let cmd = format!("sh {}", decider.display());
    let quiet = t.steps(&["run", "--remote", "", "--decider", &cmd]).ok();
    assert!(!quiet.stderr().contains("thinking"), "{}", quiet.explain());
    let loud = t
        .steps(&["-v", "run", "--remote", "", "--decider", &cmd])
        .ok();
    assert!(
        loud.stderr()
            .contains("decider (step index 1): thinking about the next step"),
        "{}",
        loud.explain()
    );
}

/// Found attacking the defaults: a branch's receipts keep their run
/// through `init` (no step applied twice), a branch `steps` cannot shadow
/// the run's branch, a fresh clone checked out elsewhere is told which
/// runs the remote holds, and `--remote ''` takes the upstream with it.
#[test]
fn init_keeps_a_branchs_run_and_names_clashes_and_other_runs() {
    let t = TestRepo::fresh();
    let bare = t.tmp.path().join("remote.git");
    git_in(
        t.tmp.path(),
        &["init", "-q", "--bare", "-b", "main", bare.to_str().unwrap()],
        &t,
    );
    t.write("base.txt", "base\n");
    t.commit_all("base");
    t.git(&["remote", "add", "origin", bare.to_str().unwrap()])
        .ok();
    t.git(&["push", "-q", "-u", "origin", "main"]).ok();
    let p = plan(&t);
    let p = p.to_str().unwrap();

    // Applied on steps/foo without init (local by name), then init: the
    // same run, foo.
    t.git(&["switch", "-q", "-c", "steps/foo"]).ok();
    t.steps(&["apply", "--remote", "", p]).ok();
    let j = t.steps(&["--json", "init"]).ok().json();
    assert_eq!(
        (j["data"]["branch"].as_str(), j["data"]["run"].as_str()),
        (Some("steps/foo"), Some("foo"))
    );
    let again = t.steps(&["--json", "apply", p]).ok().json();
    assert!(
        again["data"]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["action"] == "skip"),
        "{again}"
    );
    assert_eq!(t.step_ids(), ["s1", "s2"]);

    // A fresh clone on main: init names the run the remote holds.
    let c = t.clone_with("c", &[bare.to_str().unwrap()]);
    c.git(&["config", "--unset", "steps.branch"]).ok();
    let r = c.steps(&["init"]).ok();
    assert!(
        r.stderr()
            .contains("the remote holds other runs: origin/steps/foo (run foo)")
            && r.stderr().contains("`git steps init --run <id>`"),
        "{}",
        r.explain()
    );
    let j = c.steps(&["--json", "init", "--run", "foo"]).ok().json();
    assert_eq!(j["data"]["branch"], "steps/foo");
    let resumed = c.steps(&["--json", "apply", p]).ok().json();
    assert!(
        resumed["data"]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["action"] == "skip"),
        "{resumed}"
    );

    // A branch named `steps` and the run branch steps/main cannot both be.
    let d = t.clone_with("d", &[bare.to_str().unwrap()]);
    d.git(&["config", "--unset", "steps.branch"]).ok();
    d.git(&["branch", "steps"]).ok();
    let before = refs_and_config(&d);
    d.steps(&["init", "--run", "main"])
        .code_is(2)
        .stderr_has("a branch steps exists")
        .stderr_has("git branch -m steps");
    assert_eq!(refs_and_config(&d), before);

    // --remote '' keeps the run local and drops the upstream init set.
    let e = t.clone_with("e", &[bare.to_str().unwrap()]);
    e.git(&["config", "--unset", "steps.branch"]).ok();
    e.steps(&["init", "--run", "loc"]).ok();
    assert_eq!(e.git_out(&["config", "branch.steps/loc.remote"]), "origin");
    e.steps(&["init", "--remote", ""]).ok();
    e.git(&["config", "--get", "branch.steps/loc.remote"])
        .code_is(1);
    // Local by name: kept as such (an empty steps.remote).
    assert_eq!(e.git_out(&["config", "--get", "steps.remote"]), "");
}

/// A `.gitattributes` the worktree holds otherwise than the run (here
/// untracked) would decide how a step is stored, on this box only: the step
/// is refused, naming the file, and nothing is written.
#[test]
fn a_gitattributes_only_this_box_has_is_refused() {
    let t = TestRepo::new();
    t.write("base.txt", "base\n");
    t.commit_all("base");
    t.write(".gitattributes", "*.txt text eol=crlf\n");
    let plan = t.plan(
        "plan.jsonl",
        &[line(
            serde_json::json!({"id": "s1", "files": {"d/a.txt": "x\r\ny\r\n"}}),
        )],
    );
    let r = t.refuses(
        "untracked .gitattributes",
        3,
        &[
            ".gitattributes in the worktree differs from the run's",
            "git stash push -u -- .gitattributes",
        ],
        || t.steps(&["apply", plan.to_str().unwrap()]),
    );
    assert!(
        r.stderr()
            .contains("would decide how step s1 stores d/a.txt"),
        "{}",
        r.explain()
    );
    // Committed (part of the run's history), it is what every box reads.
    t.git(&["add", ".gitattributes"]).ok();
    t.git(&["commit", "-q", "-m", "attributes"]).ok();
    t.steps(&["apply", "--branch", "main", plan.to_str().unwrap()])
        .ok();
}

/// A repository whose path is not UTF-8 (a Latin-1 directory name) is
/// reached with `-C` as any other: the arguments are read as bytes before
/// clap sees them, never a panic.
#[test]
fn a_repository_path_that_is_not_utf8_is_taken_by_dash_c() {
    use std::os::unix::ffi::OsStrExt;
    let t = TestRepo::new();
    let dir = t.tmp.path().join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
    std::fs::create_dir(&dir).unwrap();
    let git = std::process::Command::new("git")
        .args(["init", "-q", "-b", "main"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(git.status.success(), "{git:?}");
    let mut cmd = t.steps_command(&["status"]);
    cmd.arg("-C").arg(&dir);
    let out = cmd.output().unwrap();
    assert!(out.status.code().is_some(), "killed by a signal: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}
