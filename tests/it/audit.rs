//! Issue 50 (item 1 so far): runs you can find and audit from any clone.
//! The run follows the checked-out branch, `--run X` alone names run X's
//! own branch, and a run with no branch anywhere is never "ok".

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
