//! Real repositories (issue 14): shallow CI clones and long histories. A
//! run's cost and what it needs follow the run, not the history it started
//! from: the scan stops at the receipt with `Step-Index: 1`.

use crate::harness::{line, TestRepo};
use crate::servers::Kind;

fn step(n: u32) -> String {
    line(
        serde_json::json!({"id": format!("s{n}"), "files": {format!("f{n}.txt"): format!("{n}\n")}}),
    )
}

/// `n` ordinary commits of a project, each touching one file.
fn project_history(t: &TestRepo, n: u32) {
    for i in 1..=n {
        t.write("README", &format!("release {i}\n"));
        t.git(&["add", "-A"]).ok();
        t.git(&["commit", "-q", "-m", &format!("project commit {i}")])
            .ok();
    }
}

/// The `Step-Index` trailers of `rev`'s first-parent history, newest first.
fn indexes(t: &TestRepo, rev: &str) -> Vec<String> {
    t.git_out(&[
        "log",
        "--first-parent",
        "--format=%(trailers:key=Step-Index,valueonly,separator=)",
        rev,
    ])
    .lines()
    .filter(|l| !l.is_empty())
    .map(str::to_string)
    .collect()
}

/// A CI checkout is shallow: the run starts on it, a second depth-1
/// checkout resumes it, and git can still read both clones' history
/// afterwards (libgit2's fetch would have dropped `.git/shallow`).
#[test]
fn shallow_ci_clones_start_and_resume_a_run() {
    let t = TestRepo::new();
    project_history(&t, 30);
    let server = t.start_server(Kind::Daemon);
    t.git(&["push", "-q", server.url(), "main"]).ok();

    let plan3 = t.plan("p3.jsonl", &[step(1), step(2), step(3)]);
    let plan4 = t.plan("p4.jsonl", &[step(1), step(2), step(3), step(4)]);

    let ci1 = t.clone_with("ci1", &["--depth", "1", server.url()]);
    assert!(ci1.path(".git/shallow").exists());
    ci1.steps(&["init", "--branch", "agent/x", "--remote", "origin"])
        .ok();
    let r = ci1.steps(&["apply", plan3.to_str().unwrap()]).ok();
    assert!(r.stderr().contains("0 step(s)") || !r.stderr().contains("error"));
    assert_eq!(ci1.git_out(&["rev-list", "--count", "HEAD"]), "4");
    assert_eq!(ci1.git_out(&["status", "--porcelain"]), "");

    // A fresh shallow box resumes: fetches the run, skips what it holds.
    let ci2 = t.clone_with("ci2", &["--depth", "1", server.url()]);
    ci2.steps(&["init", "--branch", "agent/x", "--remote", "origin"])
        .ok();
    let r = ci2.steps(&["apply", plan4.to_str().unwrap()]).ok();
    let out = r.stdout();
    for s in ["skipped s1", "skipped s2", "skipped s3", "applied s4"] {
        assert!(out.contains(s), "{s}: {}", r.explain());
    }
    assert!(
        ci2.path(".git/shallow").exists(),
        "the fetch dropped the clone's shallow boundary"
    );
    // git itself still reads the whole history of the clone.
    assert_eq!(ci2.git_out(&["rev-list", "--count", "HEAD"]), "5");
    ci2.git(&["fsck", "--connectivity-only", "--no-dangling"])
        .ok();
    assert_eq!(ci2.git_out(&["status", "--porcelain"]), "");
    let on_remote = server.git(&[
        "log",
        "--reverse",
        "--format=%(trailers:key=Step-Id,valueonly,separator=)",
        "agent/x",
    ]);
    assert_eq!(
        on_remote.split_whitespace().collect::<Vec<_>>(),
        ["s1", "s2", "s3", "s4"]
    );
    assert_eq!(
        indexes(&ci2, "HEAD"),
        ["4", "3", "2", "1"].map(String::from).to_vec()
    );
    ci2.steps(&["verify"]).ok();

    // A clone of the run's branch too shallow to hold its first step:
    // `status`, which fetches nothing, refuses with the fetch that fixes
    // it; `apply` deepens the clone itself (issue 28 item 3), by what the
    // receipts' Step-Index says is missing, and says so.
    let ci3 = t.clone_with(
        "ci3",
        &["--depth", "2", "--branch", "agent/x", server.url()],
    );
    ci3.steps(&["init", "--branch", "agent/x", "--remote", "origin"])
        .ok();
    ci3.refuses(
        "run below the boundary",
        1,
        &["shallow", "git fetch --deepen=", "--unshallow"],
        || ci3.steps(&["status"]),
    );
    // verify, which fetches nothing, will not say ok about a run it cannot
    // see whole.
    ci3.refuses(
        "verify below the boundary",
        1,
        &["shallow", "--unshallow"],
        || ci3.steps(&["verify"]),
    );
    let r = ci3.steps(&["apply", plan4.to_str().unwrap()]).ok();
    assert!(r.stdout().contains("skipped s4"), "{}", r.explain());
    assert!(
        r.stderr().contains("deepened it by 3 commit(s)"),
        "{}",
        r.explain()
    );
    assert_eq!(ci3.git_out(&["rev-list", "--count", "HEAD"]), "5");

    // A hand commit on top of the run, cloned at depth 1: no receipt is in
    // sight, but the durable branch exists, so this is not a new run.
    ci3.git(&["commit", "-q", "--allow-empty", "-m", "a human note"])
        .ok();
    ci3.git(&["push", "-q", "origin", "agent/x"]).ok();
    let ci4 = t.clone_with(
        "ci4",
        &["--depth", "1", "--branch", "agent/x", server.url()],
    );
    ci4.steps(&["init", "--branch", "agent/x", "--remote", "origin"])
        .ok();
    let plan5 = t.plan("p5.jsonl", &[step(1), step(2), step(3), step(4), step(5)]);
    ci4.refuses(
        "hand commit at the boundary",
        1,
        &["no receipt of run agent/x", "git fetch --deepen"],
        || ci4.steps(&["apply", plan5.to_str().unwrap()]),
    );
    // `status` no longer says "0 steps applied" as if it knew (found by
    // the outside review of issue 28): the receipts may lie below.
    let st = ci4.steps(&["--json", "status"]).json();
    assert!(
        st["data"]["problems"].to_string().contains("may lie below"),
        "{st}"
    );
}

/// `n` more commits on `main`, made fast with `git fast-import`: commit
/// `i` has the message, and writes the file and content, `commit(i)` gives.
fn fast_import(t: &TestRepo, n: u32, commit: impl Fn(u32) -> (String, String, String)) {
    let mut stream = String::new();
    for i in 1..=n {
        let (msg, file, data) = commit(i);
        stream.push_str(&format!(
            "commit refs/heads/main\ncommitter b <b@x> {} +0000\ndata {}\n{msg}\n",
            1_700_000_000 + i,
            msg.len()
        ));
        if i == 1 {
            stream.push_str("from refs/heads/main^0\n");
        }
        stream.push_str(&format!(
            "M 100644 inline {file}\ndata {}\n{data}\n",
            data.len()
        ));
    }
    let mut cmd = std::process::Command::new("git");
    cmd.args(["fast-import", "--quiet"]).current_dir(&t.work);
    crate::harness::hermetic(&mut cmd, &t.home());
    t.run_cmd(cmd, "git fast-import".into(), Some(stream.as_bytes()))
        .ok();
    t.git(&["reset", "-q", "--hard", "main"]).ok();
}

/// `n` more ordinary commits on `main`.
fn fast_history(t: &TestRepo, n: u32) {
    fast_import(t, n, |i| {
        (
            format!("bulk commit {i}\n"),
            "bulk.txt".into(),
            format!("bulk {i}\n"),
        )
    });
}

/// The scan reads the run and a bounded window below it (1000 commits,
/// where another receipt of the run would make it read on), nothing older:
/// with a commit 1200 below the base missing from the object database,
/// `status` and a further `apply` work, while `verify`, which walks
/// everything, reaches the hole.
#[test]
fn the_scan_stops_at_the_runs_first_step() {
    let t = TestRepo::new();
    project_history(&t, 2);
    let far_below = t.git_out(&["rev-parse", "HEAD"]);
    fast_history(&t, 1200);
    let plan = t.plan("p.jsonl", &[step(1), step(2), step(3)]);
    t.steps(&["apply", plan.to_str().unwrap()]).ok();
    assert_eq!(
        indexes(&t, "HEAD"),
        ["3", "2", "1"].map(String::from).to_vec()
    );
    // Take a commit far below the base out of the object database.
    let obj = t.path(&format!(
        ".git/objects/{}/{}",
        &far_below[..2],
        &far_below[2..]
    ));
    std::fs::remove_file(&obj).unwrap();

    let st = t.steps(&["--json", "status"]).ok().json();
    assert_eq!(st["data"]["steps_applied"], 3, "{st}");
    let plan4 = t.plan("p4.jsonl", &[step(1), step(2), step(3), step(4)]);
    let r = t.steps(&["apply", plan4.to_str().unwrap()]).ok();
    assert!(r.stdout().contains("applied s4"), "{}", r.explain());
    assert_eq!(
        t.git_out(&["log", "-1", "--format=%(trailers:key=Step-Index,valueonly)"]),
        "4"
    );
    let v = t.steps(&["verify"]);
    assert_ne!(
        v.code(),
        Some(0),
        "verify walks the whole history\n{}",
        v.explain()
    );
}

/// A first step forged on top of a hand commit, to make the scan stop there
/// and hide the run's real receipts (anyone who can push can append both):
/// the window below the first step finds the real receipts, and the step
/// the forgery would have doubled is refused.
#[test]
fn a_first_step_forged_on_top_of_the_run_does_not_hide_it() {
    let t = TestRepo::new();
    project_history(&t, 2);
    let plan = t.plan("p.jsonl", &[step(1), step(2)]);
    t.steps(&["apply", plan.to_str().unwrap()]).ok();
    let s1 = t.git_out(&["rev-parse", "HEAD~1"]);
    let forged = t.git_out(&["log", "-1", "--format=%B", &s1]);
    assert!(forged.contains("Step-Index: 1"), "{forged}");
    t.git(&[
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "an innocent hand commit",
    ])
    .ok();
    t.git(&["commit", "-q", "--allow-empty", "-m", &forged])
        .ok();
    let plan3 = t.plan("p3.jsonl", &[step(1), step(2), step(3)]);
    t.refuses(
        "forged first step",
        3,
        &["no receipt inside the run"],
        || t.steps(&["apply", plan3.to_str().unwrap()]),
    );
    t.refuses("verify reports it", 3, &[], || t.steps(&["verify"]));
}

/// A receipt whose index is not its position (a step missing, or out of
/// order) and a copied first step are reported, not skipped over.
#[test]
fn gaps_and_copied_first_steps_are_refused() {
    let t = TestRepo::new();
    project_history(&t, 2);
    let plan = t.plan("p.jsonl", &[step(1), step(2), step(3)]);
    t.steps(&["apply", plan.to_str().unwrap()]).ok();
    let good = t.head().unwrap();
    let plan5 = t.plan("p5.jsonl", &[step(1), step(2), step(3), step(4), step(5)]);

    // A hand commit that carries a receipt of this run, numbered 5 where it
    // is the run's 4th step.
    t.write("f4.txt", "4\n");
    t.git(&["add", "-A"]).ok();
    let msg = "step s4: by hand\n\nStep-Id: s4\nStep-Run: main\nStep-Decision: sha256:0000000000000000000000000000000000000000000000000000000000000000\nStep-Index: 5\n";
    t.git(&["commit", "-q", "-m", msg]).ok();
    let r = t.refuses("gap", 3, &["Step-Index 5", "step 4 of the run"], || {
        t.steps(&["apply", plan5.to_str().unwrap()])
    });
    assert!(
        r.stderr().contains("missing or out of order"),
        "{}",
        r.explain()
    );
    let v = t.steps(&["verify"]).code_is(3);
    assert!(v.stdout().contains("Step-Index 5"), "{}", v.explain());

    // The first step cherry-picked on top: the scan does not stop at the
    // copy, it reads on and finds the step twice.
    t.git(&["reset", "-q", "--hard", &good]).ok();
    let first = t.git_out(&["rev-list", "--reverse", "HEAD"]);
    let s1 = first.lines().nth(2).unwrap().to_string();
    assert!(t
        .git_out(&["log", "-1", "--format=%s", &s1])
        .starts_with("step s1"));
    t.write("f1.txt", "1 again\n");
    t.git(&["add", "-A"]).ok();
    let copied = t.git_out(&["log", "-1", "--format=%B", &s1]);
    t.git(&["commit", "-q", "-m", &copied]).ok();
    t.refuses("copied first step", 3, &["step s1 appears twice"], || {
        t.steps(&["apply", plan5.to_str().unwrap()])
    });
}

/// Receipts written before `Step-Index` existed still resume: the scan
/// falls back to the whole history, and new receipts carry their
/// position.
#[test]
fn receipts_without_an_index_resume() {
    let t = TestRepo::new();
    project_history(&t, 3);
    // The decision digests of the plan's steps, as git-steps records them
    // (a digest depends on the step alone).
    let elsewhere = t.sibling("elsewhere", None);
    let two = elsewhere.plan("two.jsonl", &[step(1), step(2)]);
    elsewhere.steps(&["apply", two.to_str().unwrap()]).ok();
    let digests = elsewhere.git_out(&[
        "log",
        "--reverse",
        "--format=%(trailers:key=Step-Decision,valueonly,separator=)",
    ]);
    let digests: Vec<&str> = digests.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(digests.len(), 2);
    for n in 1..=2u32 {
        t.write(&format!("f{n}.txt"), &format!("{n}\n"));
        t.git(&["add", "-A"]).ok();
        let msg = format!(
            "step s{n}: old\n\nStep-Id: s{n}\nStep-Run: main\nStep-Decision: {}\n",
            digests[n as usize - 1]
        );
        t.git(&["commit", "-q", "-m", &msg]).ok();
    }
    let plan = t.plan("p.jsonl", &[step(1), step(2), step(3)]);
    let r = t.steps(&["apply", plan.to_str().unwrap()]).ok();
    assert!(r.stdout().contains("skipped s2"), "{}", r.explain());
    assert_eq!(indexes(&t, "HEAD"), vec!["3".to_string()]);
    t.steps(&["verify"]).ok();
}

/// Two agents in two linked worktrees of one clone, against one remote, at
/// the same time: each run's settings live in its worktree (`init` in one
/// does not touch the other's), each branch holds only its own receipts,
/// and a worktree cannot run a branch another worktree has checked out.
#[test]
fn two_agents_in_two_worktrees_of_one_clone() {
    let t = TestRepo::new();
    project_history(&t, 3);
    let server = t.start_server(Kind::Daemon);
    t.git(&["push", "-q", server.url(), "main"]).ok();
    let a = t.clone_with("a", &[server.url()]);
    // A's run is set up before any worktree exists (in the shared config).
    a.steps(&["init", "--branch", "agent/a", "--remote", "origin"])
        .ok();
    let b_path = t.tmp.path().join("b");
    a.git(&[
        "worktree",
        "add",
        "-q",
        "--detach",
        b_path.to_str().unwrap(),
    ])
    .ok();
    let b = TestRepo {
        tmp: t.tmp.clone(),
        work: b_path,
    };
    // B has no run of its own yet: A's settings in the shared config are
    // neither taken nor silently ignored.
    b.refuses(
        "shared settings in a linked worktree",
        1,
        &[
            "linked worktree",
            "steps.branch=agent/a",
            "git steps init --branch",
        ],
        || b.steps(&["status"]),
    );
    b.steps(&["init", "--branch", "agent/b", "--remote", "origin"])
        .ok();
    assert_eq!(
        b.git_out(&["config", "--worktree", "steps.branch"]),
        "agent/b"
    );
    assert_eq!(a.git_out(&["config", "steps.branch"]), "agent/a");
    assert_eq!(a.git_out(&["config", "steps.run"]), "agent/a");

    let plan = |who: &str, n: u32| {
        let lines: Vec<String> = (1..=n)
            .map(|i| {
                line(serde_json::json!({
                    "id": format!("{who}{i}"),
                    "files": {format!("{who}/f{i}.txt"): format!("{who} {i}\n")}
                }))
            })
            .collect();
        t.plan(&format!("{who}.jsonl"), &lines)
    };
    let (pa, pb) = (plan("a", 12), plan("b", 12));
    let ca = a.spawn_steps(&["apply", pa.to_str().unwrap()]);
    let cb = b.spawn_steps(&["apply", pb.to_str().unwrap()]);
    for (mut c, who) in [(ca, "a"), (cb, "b")] {
        assert!(c.wait().unwrap().success(), "agent {who} failed");
    }
    let ids = |branch: &str| -> Vec<String> {
        server
            .git(&[
                "log",
                "--reverse",
                "--format=%(trailers:key=Step-Id,valueonly,separator=)%x09%(trailers:key=Step-Run,valueonly,separator=)",
                branch,
            ])
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect()
    };
    let want =
        |who: &str| -> Vec<String> { (1..=12).map(|i| format!("{who}{i}\tagent/{who}")).collect() };
    assert_eq!(ids("agent/a"), want("a"));
    assert_eq!(ids("agent/b"), want("b"));
    assert_eq!(a.git_out(&["status", "--porcelain"]), "");
    assert_eq!(b.git_out(&["status", "--porcelain"]), "");
    a.steps(&["verify"]).ok();
    b.steps(&["verify"]).ok();

    // A third worktree pointed at A's branch is refused, before anything.
    let c_path = t.tmp.path().join("c");
    a.git(&[
        "worktree",
        "add",
        "-q",
        "--detach",
        c_path.to_str().unwrap(),
    ])
    .ok();
    let c = TestRepo {
        tmp: t.tmp.clone(),
        work: c_path,
    };
    c.refuses(
        "branch checked out elsewhere",
        1,
        &["checked out in another worktree", "git steps init --branch"],
        || {
            c.steps(&[
                "apply",
                "--branch",
                "agent/a",
                "--run",
                "agent/a",
                "--remote",
                "origin",
                pa.to_str().unwrap(),
            ])
        },
    );
    c.refuses(
        "init on a branch checked out elsewhere",
        1,
        &["checked out in another worktree"],
        || c.steps(&["init", "--branch", "agent/b"]),
    );
}

/// `crashtest` inside a repository starts every box from its HEAD tree, so a
/// plan that edits the repository's own files can be crashed; the
/// repository itself is left as it was. `--empty-base` (and running
/// outside a repository) keeps the empty default, where this plan cannot
/// apply.
#[test]
fn crashtest_starts_every_box_from_the_repositorys_head() {
    let t = TestRepo::new();
    t.write("notes.md", "alpha\nbeta\ngamma\n");
    t.write("src/main.rs", "fn main() {}\n");
    t.commit_all("the project");
    let plan = t.plan(
        "edits.jsonl",
        &[
            line(serde_json::json!({"id": "e1", "patch": "--- a/notes.md\n+++ b/notes.md\n@@ -1,3 +1,4 @@\n alpha\n+inserted\n beta\n gamma\n"})),
            line(serde_json::json!({"id": "e2", "edits": [{"path": "src/main.rs", "old_str": "fn main() {}", "new_str": "fn main() { println!(\"hi\"); }"}]})),
        ],
    );
    let p = plan.to_str().unwrap();
    let before = t.snapshot();
    let doc = t.steps(&["--json", "crashtest", p]).ok().json();
    let sum = &doc["data"]["summary"];
    assert_eq!(sum["diverged"], 0, "{doc}");
    assert!(sum["same"].as_u64().unwrap() > 10, "{doc}");
    assert_eq!(t.snapshot(), before, "crashtest wrote into the repository");
    assert_eq!(t.git_out(&["status", "--porcelain"]), "");

    // The reference artifact is the plan applied on this HEAD's tree.
    let box_ = t.sibling("box", None);
    box_.write("notes.md", "alpha\nbeta\ngamma\n");
    box_.write("src/main.rs", "fn main() {}\n");
    box_.commit_all("the project");
    let applied = box_.steps(&["--json", "apply", p]).ok().json();
    assert_eq!(
        doc["data"]["reference"]["artifact"], applied["data"]["artifact"],
        "{doc}"
    );

    let r = t.steps(&["crashtest", "--empty-base", p]).code_is(1);
    assert!(r.stderr().contains("notes.md"), "{}", r.explain());
}

/// A one-commit project and its bare clone `proj.git` (in the same scratch
/// directory).
fn bare_project() -> (TestRepo, std::path::PathBuf) {
    let t = TestRepo::new();
    t.write("README", "project\n");
    t.commit_all("base");
    let bare = t.tmp.path().join("proj.git");
    t.git(&["clone", "-q", "--bare", ".", bare.to_str().unwrap()])
        .ok();
    (t, bare)
}

/// A linked worktree `name` of `bare` on `main` (with `extra` options).
fn add_worktree(t: &TestRepo, bare: &std::path::Path, name: &str, extra: &[&str]) -> TestRepo {
    let path = t.tmp.path().join(name);
    let mut args = vec!["-C", bare.to_str().unwrap(), "worktree", "add", "-q"];
    args.extend_from_slice(extra);
    args.push(path.to_str().unwrap());
    args.push("main");
    t.git(&args).ok();
    TestRepo {
        tmp: t.tmp.clone(),
        work: path,
    }
}

/// `init` in a worktree of a bare repository writes three config files
/// (the main worktree's own, the shared one, this worktree's own), each
/// replaced atomically. A kill at any instant leaves every worktree usable
/// by git, and the rerun of the same `init` finishes the job.
#[test]
fn a_killed_init_in_a_worktree_leaves_git_working() {
    let (trials, mut seed) = crate::harness::trials_and_seed(40, 0x9e37_79b9_7f4a_7c15);
    let mut rng = crate::harness::Rng(seed | 1);
    let (mut landed, mut window) = (0u32, 20_000u64);
    for trial in 0..trials {
        let (t, bare) = bare_project();
        let (w1, w2) = (
            add_worktree(&t, &bare, "wt1", &[]),
            add_worktree(&t, &bare, "wt2", &["--detach"]),
        );
        let mut child = w1.spawn_steps(&["init", "--branch", "agent/a", "--run", "a"]);
        std::thread::sleep(std::time::Duration::from_micros(rng.below(window)));
        let finished = child.try_wait().unwrap().is_some();
        let _ = child.kill();
        child.wait().unwrap();
        if finished {
            window = (window / 2).max(200);
        } else {
            landed += 1;
        }
        for w in [&w1, &w2] {
            let r = w.git(&["status", "--porcelain"]);
            assert_eq!(
                r.code(),
                Some(0),
                "trial {trial} seed {seed}: {}",
                r.explain()
            );
        }
        w1.steps(&["init", "--branch", "agent/a", "--run", "a"])
            .ok();
        assert_eq!(w1.git_out(&["config", "steps.branch"]), "agent/a");
        for w in [&w1, &w2] {
            w.git(&["status", "--porcelain"]).ok();
        }
        seed = rng.next();
    }
    assert!(
        landed >= trials as u32 / 4,
        "only {landed} of {trials} kills landed mid-init"
    );
}

/// What a kill between taking the lock and renaming it leaves, on each of
/// the three config files `init` in a bare repository's worktree writes:
/// the lock is git-steps' own (the same file as its pending copy), so the
/// rerun clears it and finishes; a lock that is not its own (git's, held by
/// a running `git config`) is left alone and reported.
#[test]
fn a_config_lock_left_by_a_killed_init_is_cleared_and_a_foreign_one_is_not() {
    for (dir, name) in [
        ("proj.git", "config.worktree"),
        ("proj.git", "config"),
        ("proj.git/worktrees/wt1", "config.worktree"),
    ] {
        let (t, bare) = bare_project();
        let w1 = add_worktree(&t, &bare, "wt1", &[]);
        let d = t.tmp.path().join(dir);
        let pending = d.join(if name == "config" {
            "steps-config.pending".to_string()
        } else {
            format!("steps-{name}.pending")
        });
        let lock = d.join(format!("{name}.lock"));
        // A foreign lock: refused, named, left alone.
        std::fs::write(&lock, "git's own\n").unwrap();
        w1.steps(&["init", "--branch", "agent/a", "--run", "a"])
            .code_is(4)
            .stderr_has(&format!("{name}.lock exists"));
        assert!(lock.exists(), "{dir}/{name}: a foreign lock was removed");
        std::fs::remove_file(&lock).unwrap();
        // Our own, as a kill leaves it: cleared, and init finishes.
        std::fs::write(&pending, "[core]\n").unwrap();
        std::fs::hard_link(&pending, &lock).unwrap();
        w1.steps(&["init", "--branch", "agent/a", "--run", "a"])
            .ok();
        assert!(!lock.exists() && !pending.exists(), "{dir}/{name}");
        assert_eq!(w1.git_out(&["config", "steps.branch"]), "agent/a");
        w1.git(&["status", "--porcelain"]).ok();
    }
}

/// A receipt's message, as git-steps writes it.
fn receipt_message(id: &str, run: &str, index: u32) -> String {
    format!(
        "step {id}: add\n\nStep-Id: {id}\nStep-Run: {run}\nStep-Decision: sha256:{index:064x}\nStep-Index: {index}\n"
    )
}

/// A long run in a pack is read in bulk, a chunk of pack at a time on every
/// core (issue 18, `history::packscan`), and it reads exactly as commit by
/// commit: `status` and `verify` say the same as on the same objects
/// unpacked (no pack, so no bulk read), the history's problems included;
/// every commit the bulk read hands out is what libgit2 reads under that
/// id; and commits outside the pack (the newest, loose) are read as before.
#[test]
fn a_packed_long_run_reads_the_same_in_bulk_as_commit_by_commit() {
    use git_steps::history::{packscan, receipt};
    let t = TestRepo::new();
    project_history(&t, 2);
    // 4,300 commits: receipts of run `main`, with a hand commit, a
    // malformed receipt, another run's receipt and a repeated id among
    // them (each a problem the scan must report, wherever it is read).
    let index = std::cell::Cell::new(0u32);
    fast_import(&t, 4300, |i| {
        let msg = match i {
            1500 => "a hand commit in the run\n".to_string(),
            2500 => format!(
                "two ids\n\nStep-Id: x{i}\nStep-Id: y{i}\nStep-Run: main\nStep-Decision: sha256:{i:064x}\nStep-Index: {}\n",
                index.get() + 1
            ),
            3000 => receipt_message(&format!("other{i}"), "another-run", 1),
            3500 => receipt_message("s10", "main", index.get() + 1),
            _ => {
                index.set(index.get() + 1);
                receipt_message(&format!("s{}", index.get()), "main", index.get())
            }
        };
        (msg, format!("f{}.txt", i % 50), format!("{i}\n"))
    });
    let mut index = index.get();
    // One pack, written by git (commits first), then two newer receipts as
    // loose objects on top.
    t.git(&["repack", "-a", "-d", "-q"]).ok();
    for _ in 0..2 {
        index += 1;
        let msg = receipt_message(&format!("s{index}"), "main", index);
        t.git(&["commit", "-q", "--allow-empty", "-m", &msg]).ok();
    }
    assert_eq!(index, 4298);
    let packs: Vec<_> = std::fs::read_dir(t.path(".git/objects/pack"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "pack"))
        .collect();
    assert_eq!(packs.len(), 1, "{packs:?}");

    // The same objects, unpacked: a copy of the repository without its
    // pack, every object loose.
    let loose = t.sibling("loose", None);
    std::fs::remove_dir_all(loose.path(".git")).unwrap();
    let mut cp = std::process::Command::new("cp");
    cp.arg("-r").arg(t.path(".git")).arg(loose.path(".git"));
    assert!(cp.status().unwrap().success());
    let pack_bytes = std::fs::read(&packs[0]).unwrap();
    for f in std::fs::read_dir(loose.path(".git/objects/pack")).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    let mut cmd = std::process::Command::new("git");
    cmd.args(["unpack-objects", "-q"]).current_dir(&loose.work);
    crate::harness::hermetic(&mut cmd, &loose.home());
    loose
        .run_cmd(cmd, "git unpack-objects".into(), Some(&pack_bytes))
        .ok();
    loose.git(&["reset", "-q", "--hard"]).ok();

    // What the scan says, packed (bulk) and loose (commit by commit).
    let status = |r: &TestRepo| {
        let st = r.steps(&["--json", "status"]).ok().json();
        (
            st["data"]["steps_applied"].clone(),
            st["data"]["last_step"].clone(),
            st["data"]["problems"].clone(),
        )
    };
    let packed_status = status(&t);
    assert_eq!(packed_status, status(&loose));
    assert_eq!(packed_status.0, 4298);
    assert_eq!(packed_status.1, "s4298");
    let problems = packed_status.2.as_array().unwrap();
    let said = |what: &str| problems.iter().any(|p| p.as_str().unwrap().contains(what));
    assert!(
        said("a commit with no receipt inside the run"),
        "{problems:?}"
    );
    assert!(said("a malformed receipt"), "{problems:?}");
    assert!(
        said("a receipt of another run (another-run)"),
        "{problems:?}"
    );
    assert!(said("step s10 appears twice"), "{problems:?}");
    assert_eq!(problems.len(), 4, "{problems:?}");
    let verify = |r: &TestRepo| {
        let v = r.steps(&["--json", "verify"]);
        (v.code(), v.stdout().to_string())
    };
    let packed_verify = verify(&t);
    assert_ne!(packed_verify.0, Some(0), "the run's problems fail verify");
    assert_eq!(packed_verify, verify(&loose));

    // The bulk read itself: every commit it hands out is libgit2's.
    let repo = git2::Repository::open(&t.work).unwrap();
    let mut bulk = packscan::read(&repo, 4298).expect("a long packed run is read in bulk");
    assert!(
        packscan::read(&repo, 100).is_none(),
        "a short run is walked"
    );
    let loose_repo = git2::Repository::open(&loose.work).unwrap();
    assert!(
        packscan::read(&loose_repo, 4298).is_none(),
        "no pack, no bulk read"
    );
    // Commits the pack stores as deltas are left to libgit2 (git deltifies
    // commits that look alike; here the project's two).
    let idx = packs[0].with_extension("idx");
    let deltas: std::collections::HashSet<String> = t
        .git_out(&["verify-pack", "-v", idx.to_str().unwrap()])
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 7 && f[1] == "commit").then(|| f[0].to_string())
        })
        .collect();
    let (mut hits, mut misses, mut expected_misses) = (0, Vec::new(), vec![0, 1]);
    for (n, line) in t
        .git_out(&["rev-list", "--first-parent", "HEAD"])
        .lines()
        .enumerate()
    {
        let oid = git2::Oid::from_str(line).unwrap();
        let c = repo.find_commit(oid).unwrap();
        if deltas.contains(line) {
            expected_misses.push(n);
        }
        match bulk.take(oid) {
            None => misses.push(n),
            Some(s) => {
                hits += 1;
                assert_eq!(s.parents, c.parent_count(), "{oid}");
                assert_eq!(s.first_parent, c.parent_id(0).ok(), "{oid}");
                assert_eq!(s.receipt, receipt::parse(c.message().unwrap()), "{oid}");
            }
        }
        assert!(bulk.take(oid).is_none(), "handed out once: {oid}");
    }
    // The two loose commits on top are not the pack's; all the rest are,
    // but for the deltified ones.
    assert_eq!(misses, expected_misses);
    assert!(hits >= 4000, "{hits} of 4,304 commits read in bulk");
}

/// Issue 28 items 3 and 4: a CI clone whose `--depth` is exactly the run's
/// length has the run's first step at its boundary and not the commit the
/// run started from. The first step was replayed against nothing, its
/// change never counted, and a redelivered hunk landed (exit 0) where a
/// full clone refuses it (exit 3); such a box also published a shared hunk
/// cache that full clones trusted. Now the clone is deepened first (and
/// says so), the redelivery is refused as on a full clone, and the cache
/// names the base it was built from.
#[test]
fn a_clone_cut_at_the_runs_first_step_is_deepened_before_it_is_judged() {
    let t = TestRepo::new();
    t.write("app.rs", "fn a() {}\n\nfn b() {}\n");
    t.commit_all("base");
    let server = t.start_server(Kind::Daemon);
    t.git(&["push", "-q", server.url(), "main"]).ok();
    let inline = serde_json::json!({"id": "s1", "edits": [{"path": "app.rs", "old_str": "fn b() {}", "new_str": "#[inline]\nfn b() {}"}]});
    let mut again = inline.clone();
    again["id"] = serde_json::json!("s1-again");
    let s2 = serde_json::json!({"id": "s2", "files": {"notes.txt": "n\n"}});
    let s3 = serde_json::json!({"id": "s3", "files": {"more.txt": "m\n"}});
    let three: Vec<String> = [&inline, &s2, &s3]
        .iter()
        .map(|s| line((*s).clone()))
        .collect();
    let plan3 = t.plan("p3.jsonl", &three);
    let mut four = three.clone();
    four.push(line(again));
    let plan4 = t.plan("p4.jsonl", &four);
    let a = t.clone_with("a", &[server.url()]);
    a.git(&["config", "steps.cacheEvery", "1"]).ok();
    a.steps(&["init", "--branch", "agent/x", "--remote", "origin"])
        .ok();
    a.steps(&["apply", plan3.to_str().unwrap()]).ok();
    // A full clone refuses the redelivery.
    let full = t.clone_with("full", &["--branch", "agent/x", server.url()]);
    full.steps(&["init", "--branch", "agent/x", "--remote", "origin"])
        .ok();
    full.refuses("full clone", 3, &["s1-again", "s1"], || {
        full.steps(&["apply", plan4.to_str().unwrap()])
    });
    // A CI clone at the run's length: the boundary is s1.
    let ci = t.clone_with("ci", &["--depth", "3", "--branch", "agent/x", server.url()]);
    assert_eq!(ci.git_out(&["rev-list", "--count", "HEAD"]), "3");
    ci.steps(&["init", "--branch", "agent/x", "--remote", "origin"])
        .ok();
    let r = ci.steps(&["apply", plan4.to_str().unwrap()]);
    assert_eq!(r.code(), Some(3), "the redelivery landed\n{}", r.explain());
    assert!(
        r.stderr().contains("duplicate") || r.stderr().contains("repeats"),
        "{}",
        r.explain()
    );
    assert!(
        r.stderr().contains("deepened it by 1 commit(s)"),
        "{}",
        r.explain()
    );
    assert_eq!(ci.git_out(&["rev-list", "--count", "HEAD"]), "4");
    assert!(ci.path(".git/shallow").exists());
    ci.git(&["fsck", "--connectivity-only", "--no-dangling"])
        .ok();
    let on_remote = server.git(&[
        "log",
        "--format=%(trailers:key=Step-Id,valueonly,separator=)",
        "agent/x",
    ]);
    assert!(!on_remote.contains("s1-again"), "{on_remote}");
    // Without the redelivery the shallow box finishes, and `status` (which
    // fetches nothing) reads the deepened clone.
    ci.steps(&["apply", plan3.to_str().unwrap()]).ok();
    ci.steps(&["status"]).ok();
    // Item 4: the published cache names the base; a cache whose base is
    // not this run's is never read (unit test
    // `history::shared::tests::anything_else_is_ignored`), and a box
    // without the base publishes none.
    let caches = server.git(&["for-each-ref", "--format=%(refname)", "refs/steps/cache/"]);
    assert_eq!(caches.lines().count(), 1, "{caches}");
}

/// Found by the outside review of issue 28: in a shallow clone, a merge
/// whose other side lies below the boundary (another box's s6 behind five
/// hand commits, pulled in with `git pull`) was adopted, and `apply` then
/// landed s6 a second time; `verify` said ok. Such a clone is deepened to
/// the whole history before anything is judged, so `adopt` refuses as in a
/// full clone, and a `verify` that cannot see the run refuses to say ok.
#[test]
fn a_shallow_clone_never_hides_a_merge_behind_its_boundary() {
    let t = TestRepo::new();
    t.write("code.txt", "call(a)\n");
    t.write("a.txt", "a\n");
    t.write("c.txt", "c\n");
    t.commit_all("base");
    let server = t.start_server(Kind::Daemon);
    t.git(&["push", "-q", server.url(), "main"]).ok();
    let s = |id: &str, f: &str, c: &str| line(serde_json::json!({"id": id, "files": {f: c}}));
    let s6 = line(
        serde_json::json!({"id": "s6", "edits": [{"path": "code.txt", "old_str": "(a", "new_str": "(a, b"}]}),
    );
    let p12 = t.plan(
        "p12.jsonl",
        &[s("s1", "a.txt", "a1\n"), s("s2", "a.txt", "a2\n")],
    );
    let pa = t.plan(
        "pa.jsonl",
        &[
            s("s1", "a.txt", "a1\n"),
            s("s2", "a.txt", "a2\n"),
            s("s4", "a.txt", "a4\n"),
            s("s5", "a.txt", "a5\n"),
        ],
    );
    let pc = t.plan(
        "pc.jsonl",
        &[
            s("s1", "a.txt", "a1\n"),
            s("s2", "a.txt", "a2\n"),
            s6.clone(),
        ],
    );
    let all = t.plan(
        "all.jsonl",
        &[
            s("s1", "a.txt", "a1\n"),
            s("s2", "a.txt", "a2\n"),
            s("s4", "a.txt", "a4\n"),
            s("s5", "a.txt", "a5\n"),
            s6,
        ],
    );
    let init = |b: &TestRepo| {
        b.steps(&[
            "init", "--remote", "origin", "--branch", "steps/x", "--run", "x",
        ])
        .ok();
    };
    let a = t.clone_with("a", &[server.url()]);
    init(&a);
    a.steps(&["apply", p12.to_str().unwrap()]).ok();
    // Box c works on a copy of the remote: s6, then five hand commits.
    let copy = t.tmp.path().join("copy.git");
    t.git(&[
        "clone",
        "-q",
        "--bare",
        server.bare().to_str().unwrap(),
        copy.to_str().unwrap(),
    ])
    .ok();
    let c = t.clone_with("c", &[copy.to_str().unwrap()]);
    init(&c);
    c.steps(&["apply", pc.to_str().unwrap()]).ok();
    for i in 1..=5 {
        c.write("c.txt", &format!("c{i}\n"));
        c.git(&["commit", "-q", "-am", &format!("hand {i}")]).ok();
    }
    c.git(&["push", "-q", "origin", "steps/x"]).ok();
    a.steps(&["apply", pa.to_str().unwrap()]).ok();
    // A person pulls c's line into the run and pushes the merge.
    let b = t.clone_with("b", &["-b", "steps/x", server.url()]);
    b.git(&[
        "pull",
        "-q",
        "--no-rebase",
        "--no-edit",
        copy.to_str().unwrap(),
        "steps/x",
    ])
    .ok();
    b.git(&["push", "-q", "origin", "steps/x"]).ok();
    // A CI clone at depth 2.
    let ci = t.clone_with("ci", &["--depth", "2", "-b", "steps/x", server.url()]);
    init(&ci);
    let v = ci.steps(&["verify"]);
    assert_eq!(
        v.code(),
        Some(1),
        "a shallow verify said ok\n{}",
        v.explain()
    );
    assert!(v.stderr().contains("shallow"), "{}", v.explain());
    let r = ci.steps(&["adopt", "--yes"]);
    assert_eq!(r.code(), Some(3), "{}", r.explain());
    assert!(r.stderr().contains("s6"), "{}", r.explain());
    let r = ci.steps(&["apply", all.to_str().unwrap()]);
    assert_eq!(r.code(), Some(3), "{}", r.explain());
    let ids = server.git(&[
        "log",
        "--format=%(trailers:key=Step-Id,valueonly,separator=)",
        "steps/x",
    ]);
    assert_eq!(
        ids.split_whitespace().filter(|i| *i == "s6").count(),
        1,
        "{ids}"
    );
}
