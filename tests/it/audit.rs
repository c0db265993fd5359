//! Issue 50: runs you can find and audit from any clone. The run follows
//! the checked-out branch, `--run X` alone names run X's own branch, and a
//! run with no branch anywhere is never "ok"; durability is never silently
//! local; a fresh clone audits every run read-only (`runs`, `log`,
//! `verify`, `effects`, `show`); every step's decision is stored in its
//! commit, so `verify` applies every kind of step again.

use crate::harness::*;
use serde_json::json;

fn steps(prefix: &str, n: usize) -> Vec<String> {
    (1..=n)
        .map(|i| line(json!({"id": format!("{prefix}{i}"), "files": {format!("{prefix}.txt"): format!("{i}\n")}})))
        .collect()
}

/// Two runs in one clone, mcp1 (2 steps) set up, loop1 (3 steps) checked
/// out. A supervisor reading only exit codes used to be told "ok: 0
/// step(s)" for `verify --run loop1`, and `log` showed mcp1 on loop1's
/// branch.
#[test]
fn the_run_follows_its_branch_and_no_run_is_never_ok() {
    let t = TestRepo::new();
    t.write("base.txt", "base\n");
    t.commit_all("base");
    let bare = t.tmp.path().join("remote.git");
    t.git(&["init", "-q", "--bare", "-b", "main", bare.to_str().unwrap()])
        .ok();
    let remote = bare.to_str().unwrap();
    t.steps(&["init", "--run", "loop1", "--remote", remote])
        .ok();
    let p = t.plan("loop.jsonl", &steps("l", 3));
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    t.steps(&["init", "--run", "mcp1", "--remote", remote]).ok();
    let p = t.plan("mcp.jsonl", &steps("m", 2));
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    assert_eq!(t.git_out(&["config", "steps.run"]), "mcp1");
    let heads = t.git_out(&["for-each-ref", "refs/heads/steps"]);

    // On loop1's branch, loop1 is the run.
    t.git(&["switch", "-q", "steps/loop1"]).ok();
    let log = t.steps(&["log", "--json"]).ok().json();
    let ids: Vec<String> = log["data"]["steps"]
        .as_array()
        .unwrap_or_else(|| panic!("{log}"))
        .iter()
        .map(|e| e["step"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["l1", "l2", "l3"], "{log}");
    assert_eq!(log["data"]["run"], "loop1");
    let r = t.steps(&["verify"]).ok();
    assert!(r.stdout().starts_with("ok: 3 step(s)"), "{}", r.explain());

    // From mcp1's branch, `--run loop1` names loop1's branch.
    t.git(&["switch", "-q", "steps/mcp1"]).ok();
    let r = t.steps(&["verify", "--run", "loop1"]).ok();
    assert!(r.stdout().starts_with("ok: 3 step(s)"), "{}", r.explain());
    let r = t.steps(&["verify"]).ok();
    assert!(r.stdout().starts_with("ok: 2 step(s)"), "{}", r.explain());

    // Any branch whose head receipt names a run is that run's: a branch
    // `review` at loop1's head audits loop1.
    t.git(&["branch", "review", "steps/loop1"]).ok();
    t.git(&["switch", "-q", "review"]).ok();
    let log = t.steps(&["log", "--json"]).ok().json();
    assert_eq!(log["data"]["run"], "loop1", "{log}");
    assert_eq!(
        log["data"]["steps"].as_array().map(Vec::len),
        Some(3),
        "{log}"
    );
    t.git(&["switch", "-q", "steps/mcp1"]).ok();
    t.git(&["branch", "-q", "-D", "review"]).ok();
    // A run that exists nowhere is not a verified run of no steps.
    let r = t.steps(&["verify", "--run", "loop2"]).code_is(3);
    assert!(
        r.stdout().contains("no branch steps/loop2"),
        "{}",
        r.explain()
    );
    // Nothing of either run moved.
    assert_eq!(t.git_out(&["for-each-ref", "refs/heads/steps"]), heads);
}

/// A fresh repository with one commit, pushed to a bare `origin` beside
/// it (no run set up): the box, and the bare remote's path.
fn box_with_origin() -> (TestRepo, std::path::PathBuf) {
    let t = TestRepo::fresh();
    t.write("base.txt", "base\n");
    t.commit_all("base");
    let bare = t.tmp.path().join("remote.git");
    t.git(&["init", "-q", "--bare", "-b", "main", bare.to_str().unwrap()])
        .ok();
    t.git(&["remote", "add", "origin", bare.to_str().unwrap()])
        .ok();
    t.git(&["push", "-q", "origin", "main"]).ok();
    (t, bare)
}

/// An MCP session, as a client's stdin: initialize, then `apply_step` with
/// `step`, then `more` calls.
fn mcp_session(step: serde_json::Value, more: &[serde_json::Value]) -> String {
    [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "apply_step", "arguments": step}}),
    ]
    .iter()
    .chain(more)
    .map(|m| m.to_string() + "\n")
    .collect()
}

/// Refs and config, to show that a refusal wrote nothing.
fn refs_and_config(t: &TestRepo) -> String {
    format!(
        "{}\n{}",
        t.git_out(&["for-each-ref"]),
        t.git_out(&["config", "--list", "--local"])
    )
}

/// Item 2: in a clone with a remote, a command that writes with no durable
/// domain asked for refuses (exit 2), lists the remotes and writes nothing;
/// `--remote ''` asks for a local one by name; `init` with several remotes
/// refuses too.
#[test]
fn durability_is_never_silently_local() {
    let (t, bare) = box_with_origin();
    let p = t.plan("p.jsonl", &steps("s", 2));
    let p = p.to_str().unwrap();
    let before = refs_and_config(&t);
    for args in [
        vec!["apply", "--branch", "main", p],
        vec!["apply", "--branch", "main", "--dry-run", p],
        vec!["record", "--branch", "main", "--id", "r1"],
    ] {
        t.steps(&args)
            .code_is(2)
            .stderr_has("this clone has a remote (origin)")
            .stderr_has("`git steps init --remote origin`")
            .stderr_has("`git steps init --remote ''`");
    }
    assert_eq!(refs_and_config(&t), before);
    // Asked for by name, it is local.
    t.steps(&["apply", "--branch", "main", "--remote", "", p])
        .ok();
    assert_ne!(
        t.git_out(&["rev-parse", "main"]),
        t.git_out(&["ls-remote", bare.to_str().unwrap(), "refs/heads/main"])[..40]
    );

    // Two remotes: init names neither by itself.
    let u = TestRepo::fresh();
    u.write("base.txt", "base\n");
    u.commit_all("base");
    u.git(&["remote", "add", "one", bare.to_str().unwrap()])
        .ok();
    u.git(&["remote", "add", "two", bare.to_str().unwrap()])
        .ok();
    let before = refs_and_config(&u);
    u.steps(&["init"])
        .code_is(2)
        .stderr_has("this clone has 2 remotes (one, two)");
    assert_eq!(refs_and_config(&u), before);
    let r = u.steps(&["init", "--remote", "two"]).ok();
    assert!(
        r.stderr().contains("durable domain: remote two"),
        "init says where steps become durable: {}",
        r.explain()
    );
    // Said at init; other commands say it only with -v.
    let p2 = u.plan("p2.jsonl", &steps("u", 1));
    let r = u.steps(&["apply", p2.to_str().unwrap()]).ok();
    assert!(!r.stderr().contains("durable domain"), "{}", r.explain());
    let r = u.steps(&["status"]).ok();
    assert!(!r.stderr().contains("durable domain"), "{}", r.explain());
    let r = u.steps(&["-v", "status"]).ok();
    assert!(
        r.stderr().contains("durable domain: remote two"),
        "{}",
        r.explain()
    );
}

/// Items 3 and 4: box A runs loop1 (3 steps, one with a command effect
/// this box holds back) and mcp1 (2 steps) on a bare remote, then vanishes.
/// A fresh clone, which never checked either run out, lists both runs and
/// audits each read-only: the worktree, HEAD and every branch stay as
/// they were.
#[test]
fn a_fresh_clone_lists_and_audits_every_run_read_only() {
    let (a, bare) = box_with_origin();
    let remote = bare.to_str().unwrap();
    a.steps(&["init", "--run", "loop1"]).ok();
    // Box A delivers no effect: l3's stays pending, for a box that may.
    a.git(&["config", "steps.effects", "none"]).ok();
    let mut loop1 = steps("l", 3);
    loop1[2] = line(json!({
        "id": "l3", "files": {"l.txt": "3\n"}, "intent": {"tool": "write", "why": "third"},
        "effects": [{"command": ["true"]}]
    }));
    let p = a.plan("loop.jsonl", &loop1);
    a.steps(&["apply", p.to_str().unwrap()]).ok();
    a.git(&["switch", "-q", "main"]).ok();
    a.steps(&["init", "--run", "mcp1"]).ok();
    let p = a.plan("mcp.jsonl", &steps("m", 2));
    a.steps(&["apply", p.to_str().unwrap()]).ok();

    let b = a.clone_with("b", &[remote]);
    b.git(&["config", "--unset", "steps.branch"]).ok();
    let before = (
        b.git_out(&["for-each-ref", "refs/heads"]),
        b.git_out(&["symbolic-ref", "HEAD"]),
        b.git_out(&["status", "--porcelain", "--untracked-files=all"]),
    );

    let runs = b.steps(&["--json", "runs"]).ok().json();
    let rows = runs["data"]["runs"]
        .as_array()
        .unwrap_or_else(|| panic!("{runs}"));
    let by = |run: &str| {
        rows.iter()
            .find(|r| r["run"] == run)
            .unwrap_or_else(|| panic!("no {run}: {runs}"))
            .clone()
    };
    let (l, m) = (by("loop1"), by("mcp1"));
    assert_eq!(
        (l["steps"].as_u64(), m["steps"].as_u64()),
        (Some(3), Some(2)),
        "{runs}"
    );
    assert_eq!(l["last_step"], "l3");
    assert_eq!(l["pending_effects"], 1, "{runs}");
    assert_eq!(
        l["durable_head"].as_str().unwrap(),
        a.git_out(&["rev-parse", "steps/loop1"])
    );
    assert!(l["local_head"].is_null() && l["merged"].is_null(), "{runs}");
    let text = b.steps(&["runs"]).ok().stdout();
    assert!(
        text.contains("loop1  steps/loop1  3 step(s), last l3 at "),
        "{text}"
    );

    // log, verify, effects and show read the remote's refs.
    let log = b.steps(&["--json", "log", "--run", "loop1"]).ok().json();
    let ids: Vec<&str> = log["data"]["steps"]
        .as_array()
        .unwrap_or_else(|| panic!("{log}"))
        .iter()
        .map(|e| e["step"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["l1", "l2", "l3"], "{log}");
    let r = b.steps(&["verify", "--run", "loop1"]).ok();
    assert!(r.stdout().starts_with("ok: 3 step(s)"), "{}", r.explain());
    assert!(
        r.stderr()
            .contains("run loop1 is not checked out here: read its branch steps/loop1 on origin"),
        "{}",
        r.explain()
    );
    let e = b
        .steps(&["--json", "effects", "--run", "loop1"])
        .ok()
        .json();
    assert_eq!(e["data"]["pending"], 1, "{e}");
    assert_eq!(e["data"]["effects"][0]["step"], "l3", "{e}");
    let show = b
        .steps(&["--json", "show", "l3", "--run", "loop1"])
        .ok()
        .json();
    assert_eq!(show["data"]["digest_matches"], true, "{show}");
    assert_eq!(show["data"]["decision"]["intent"]["why"], "third", "{show}");
    assert!(
        show["data"]["diff"].as_str().unwrap().contains("+3"),
        "{show}"
    );
    // An unknown step is named, with the run's steps.
    b.steps(&["show", "l9", "--run", "loop1"])
        .code_is(1)
        .stderr_has("`git steps log` lists the run's steps")
        .stderr_has("run loop1 on steps/loop1 has no step l9; its steps: l1, l2, l3");

    // status of a run not checked out here reads the remote and does not
    // send the auditor to a writing command.
    let st = b.steps(&["status", "--run", "loop1"]).ok().stdout();
    assert!(
        st.contains("not checked out here") && !st.contains("git steps resume"),
        "{st}"
    );
    let after = (
        b.git_out(&["for-each-ref", "refs/heads"]),
        b.git_out(&["symbolic-ref", "HEAD"]),
        b.git_out(&["status", "--porcelain", "--untracked-files=all"]),
    );
    assert_eq!(before, after, "an audit touched the clone");
}

/// Item 5: every kind of step (plan, record, undo, adopt, decider, MCP)
/// stores its decision in its commit; `verify` without a plan applies each
/// again, and a commit whose tree or stored decision was changed under its
/// receipt is a problem, not a note.
#[test]
fn every_decision_is_stored_and_verify_applies_every_kind_again() {
    let t = TestRepo::new();
    t.write("base.txt", "base\n");
    t.commit_all("base");
    t.steps(&["init", "--remote", "", "--branch", "main"]).ok();
    let p = t.plan("p.jsonl", &steps("p", 2));
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    t.write("rec.txt", "recorded in place\n");
    t.steps(&["record", "--id", "r1"]).ok();
    t.steps(&["undo", "--last", "1", "--id", "u1"]).ok();
    t.write("hand.txt", "a human's commit\n");
    t.commit_all("a hand commit");
    t.steps(&["adopt", "--yes", "--id", "a1"]).ok();
    // A decider that decides d1, then is done.
    let decider = t.tmp.path().join("decider.sh");
    let marker = t.tmp.path().join("decided");
    crate::harness::script(
        &decider,
        &format!(
            "#!/bin/sh\ncat >/dev/null\nif [ -e {m} ]; then echo '{{\"done\": true}}'; else touch {m}; printf '%s\\n' '{{\"id\": \"d1\", \"files\": {{\"d.txt\": \"decided\\n\"}}}}'; fi\n",
            m = marker.display()
        ),
    );
    t.steps(&["run", "--decider", decider.to_str().unwrap()])
        .ok();
    let mcp = mcp_session(json!({"id": "mc1", "files": {"mcp.txt": "by mcp\n"}}), &[]);
    let r = t.steps_stdin(&["mcp"], &mcp).ok();
    assert!(r.stdout().contains("\"id\":2"), "{}", r.explain());
    assert!(!r.stdout().contains("isError\":true"), "{}", r.explain());
    assert_eq!(
        t.step_ids(),
        ["p1", "p2", "r1", "u1", "a1", "d1", "mc1"],
        "{}",
        t.log_all()
    );
    // Each commit stores its decision, as plain git shows it, and its
    // digest is the receipt's.
    for id in ["p1", "r1", "u1", "a1", "d1", "mc1"] {
        let show = t.steps(&["--json", "show", id]).ok().json();
        assert_eq!(show["data"]["digest_matches"], true, "{id}: {show}");
        if id != "a1" {
            assert_eq!(show["data"]["tree_matches"], true, "{id}: {show}");
        }
        assert_eq!(show["data"]["decision"]["id"], id, "{show}");
        let commit = show["data"]["commit"].as_str().unwrap().to_string();
        let raw = t.git_out(&["cat-file", "commit", &commit]);
        assert!(raw.contains("\nsteps-decision {"), "{raw}");
    }
    // git reads every commit as valid.
    t.git(&["fsck", "--strict", "--no-dangling"]).ok();
    // Nothing is left unchecked without a plan.
    let v = t.steps(&["--json", "verify"]).ok().json();
    assert_eq!(v["data"]["ok"], true, "{v}");
    assert!(
        !v["data"]["notes"]
            .to_string()
            .contains("not checked against their decision"),
        "{v}"
    );

    // A hand-crafted commit: r1's message and stored decision kept, its
    // tree changed (what a force-push of an edited commit leaves).
    let rewrite = |id: &str, edit: &dyn Fn(String) -> String| {
        let show = t.steps(&["--json", "show", id]).ok().json();
        let commit = show["data"]["commit"].as_str().unwrap().to_string();
        let raw = t.git_out(&["cat-file", "commit", &commit]);
        let edited = edit(raw + "\n");
        let f = t.tmp.path().join("edited");
        std::fs::write(&f, edited).unwrap();
        let new = t.git_out(&["hash-object", "-t", "commit", "-w", f.to_str().unwrap()]);
        // The commits above it, replayed onto it with their own bytes.
        let above = t.git_out(&["rev-list", "--reverse", &format!("{commit}..main")]);
        let mut parent = new;
        for c in above.lines() {
            let raw = t.git_out(&["cat-file", "commit", c]) + "\n";
            let old_parent = t.git_out(&["rev-parse", &format!("{c}^")]);
            let moved = raw.replacen(
                &format!("parent {old_parent}"),
                &format!("parent {parent}"),
                1,
            );
            std::fs::write(&f, moved).unwrap();
            parent = t.git_out(&["hash-object", "-t", "commit", "-w", f.to_str().unwrap()]);
        }
        parent
    };
    let good = t.git_out(&["rev-parse", "main"]);
    let other_tree = t.git_out(&["rev-parse", "main~6^{tree}"]);
    let forged = rewrite("r1", &|raw: String| {
        let tree = raw.lines().next().unwrap().to_string();
        raw.replacen(&tree, &format!("tree {other_tree}"), 1)
    });
    t.git(&["update-ref", "refs/heads/main", &forged]).ok();
    // `show` says so too, naming the paths.
    let show = t.steps(&["--json", "show", "r1"]).ok().json();
    assert_eq!(show["data"]["tree_matches"], false, "{show}");
    assert!(
        !show["data"]["differs"].as_array().unwrap().is_empty(),
        "{show}"
    );
    let text = t.steps(&["show", "r1"]).ok().stdout();
    assert!(
        text.contains("PROBLEM: the commit is not its decision applied to its parent"),
        "{text}"
    );
    let v = t.steps(&["verify"]).code_is(3);
    assert!(
        v.stdout().contains("step r1: its commit")
            && v.stdout()
                .contains("is not its decision applied to its parent"),
        "{}",
        v.explain()
    );
    // The stored decision changed: its digest is not the receipt's.
    t.git(&["update-ref", "refs/heads/main", &good]).ok();
    let forged = rewrite("mc1", &|raw: String| {
        raw.replacen("by mcp", "by someone else", 1)
    });
    t.git(&["update-ref", "refs/heads/main", &forged]).ok();
    let v = t.steps(&["verify"]).code_is(3);
    assert!(
        v.stdout().contains("step mc1: the decision its commit")
            && v.stdout()
                .contains("(a decision changed under a kept receipt)"),
        "{}",
        v.explain()
    );
    let show = t.steps(&["--json", "show", "mc1"]).ok().json();
    assert_eq!(show["data"]["digest_matches"], false, "{show}");
}

/// Item 6, messages found on the way: a fresh clone's `init --run X` of a
/// run the remote holds says it goes on with it; a re-run `init` says the
/// transport it keeps; a dry run's reconcile speaks in the conditional; a
/// remote path that moved is named as such (not "unsupported URL
/// protocol"); an MCP step's receipt names its source.
#[test]
fn messages_say_what_happened() {
    let (a, bare) = box_with_origin();
    let remote = bare.to_str().unwrap();
    a.steps(&["init", "--run", "loop1", "--transport", "git"])
        .ok();
    let p = a.plan("loop.jsonl", &steps("l", 2));
    let r = a.steps(&["apply", "--dry-run", p.to_str().unwrap()]).ok();
    assert!(
        r.stderr()
            .contains("the remote has no such branch; it would be created at")
            && !r.stderr().contains("it is now at"),
        "{}",
        r.explain()
    );
    a.steps(&["apply", p.to_str().unwrap()]).ok();
    let r = a.steps(&["init", "--run", "loop1"]).ok();
    assert!(
        r.stderr()
            .contains("the transport stays git, as an earlier `init` set it"),
        "{}",
        r.explain()
    );

    let b = a.clone_with("b", &[remote]);
    b.git(&["config", "--unset", "steps.branch"]).ok();
    let r = b.steps(&["init", "--run", "loop1"]).ok();
    assert!(
        r.stderr().contains("the remote already holds run loop1 on steps/loop1: the next `git steps apply` (or `resume`) goes on with it")
            && !r.stderr().contains("instead of starting run loop1"),
        "{}",
        r.explain()
    );

    // The remote moved: named as a path that is not there.
    std::fs::rename(&bare, a.tmp.path().join("moved.git")).unwrap();
    let r = b.steps(&["apply", p.to_str().unwrap()]).code_is(1);
    assert!(
        r.stderr().contains("does not exist (moved or deleted?)")
            && r.stderr().contains("git remote set-url origin")
            && !r.stderr().contains("unsupported URL protocol"),
        "{}",
        r.explain()
    );
    std::fs::rename(a.tmp.path().join("moved.git"), &bare).unwrap();

    // MCP's receipts say so.
    let mcp = mcp_session(
        json!({"id": "mc1", "files": {"mcp.txt": "by mcp\n"}}),
        &[
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "log", "arguments": {}}}),
        ],
    );
    let r = b.steps_stdin(&["mcp"], &mcp).ok();
    let answer: serde_json::Value = r
        .stdout()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["id"] == 3)
        .unwrap_or_else(|| panic!("{}", r.explain()));
    let steps = &answer["result"]["structuredContent"]["steps"];
    let mc1 = steps
        .as_array()
        .and_then(|s| s.iter().find(|e| e["step"] == "mc1"))
        .unwrap_or_else(|| panic!("{answer}"));
    assert_eq!(mc1["source"], "mcp", "{answer}");
    let trailers = b.git_out(&[
        "log",
        "-1",
        "--format=%(trailers:key=Step-Source,valueonly)",
    ]);
    assert_eq!(trailers, "mcp");
}
