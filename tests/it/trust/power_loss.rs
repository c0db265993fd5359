//! Issue 32: `crashtest --power-loss` — resume equivalence after a power
//! cut, from the states strace's record of an uninterrupted run says a cut
//! may leave (ext4 `data=ordered`, and the POSIX worst case that reorders).
//! Short sweeps here (a seeded sample of cut points); the full sweep over
//! every cut point is `scripts/soak.sh`'s.

use crate::harness::*;

/// A sweep's JSON document and exit code (`TestRepo::new()` is an empty
/// repository: every box starts from an empty one).
fn sweep(args: &[&str]) -> (serde_json::Value, Option<i32>) {
    let t = TestRepo::new();
    let mut all = vec!["--json", "crashtest", "--power-loss"];
    all.extend_from_slice(args);
    let r = t.steps(&all);
    (r.json(), r.code())
}

/// What every sweep must show: states under both models and both box
/// modes, each row naming its cut and model, the counts adding up, and no
/// row DIVERGED or REFUSED.
fn all_same(doc: &serde_json::Value, code: Option<i32>) {
    let data = &doc["data"];
    let rows = data["rows"].as_array().unwrap();
    let power = &data["power"];
    assert_eq!(
        code,
        Some(0),
        "{}",
        serde_json::to_string_pretty(&data["summary"]).unwrap()
    );
    assert_eq!(data["summary"]["diverged"], 0);
    let bad: Vec<_> = rows.iter().filter(|r| r["verdict"] != "SAME").collect();
    assert!(bad.is_empty(), "{bad:#?}");
    let ops = power["operations"].as_u64().unwrap();
    assert!(
        ops > 100 && power["syncs"].as_u64().unwrap() > 10,
        "{power}"
    );
    let states: u64 = power["states"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[1].as_u64().unwrap())
        .sum();
    assert_eq!(states as usize, rows.len());
    for model in ["ext4", "posix"] {
        assert!(rows.iter().any(|r| r["model"] == model), "no {model} row");
    }
    for b in ["survive", "vanish"] {
        assert!(rows.iter().any(|r| r["box"] == b), "no {b} row");
    }
    for r in rows {
        let op = r["op"].as_u64().unwrap();
        assert!(op <= ops);
        assert_eq!(r["point"], format!("op {op}/{ops}"));
    }
    // Cuts inside the run, not only at its ends.
    let inside = rows
        .iter()
        .filter(|r| r["op"].as_u64().unwrap() < ops && r["step"] != "s1")
        .count();
    assert!(inside > 0);
}

#[test]
fn apply_survives_power_cuts_under_both_models() {
    let plan = fixture("eight-steps.jsonl");
    let (doc, code) = sweep(&[
        "--cuts",
        "16",
        "--states",
        "2",
        "--seed",
        "7",
        plan.to_str().unwrap(),
    ]);
    all_same(&doc, code);
}

#[test]
fn group_commit_survives_power_cuts() {
    let plan = fixture("eight-steps.jsonl");
    let (doc, code) = sweep(&[
        "--batch",
        "3",
        "--cuts",
        "10",
        "--seed",
        "11",
        plan.to_str().unwrap(),
    ]);
    all_same(&doc, code);
}

#[test]
fn the_agent_loop_survives_power_cuts() {
    let plan = fixture("eight-steps.jsonl");
    let (doc, code) = sweep(&[
        "--runner",
        "run",
        "--cuts",
        "10",
        "--seed",
        "3",
        plan.to_str().unwrap(),
    ]);
    all_same(&doc, code);
}

/// Modes, symlinks, a file that becomes a directory: what the record must
/// model beyond bytes (chmod, symlink, rmdir).
#[test]
fn type_changes_survive_power_cuts() {
    let plan = fixture("type-changes.jsonl");
    let (doc, code) = sweep(&["--cuts", "12", "--seed", "5", plan.to_str().unwrap()]);
    all_same(&doc, code);
}

/// The sweep can fail: the classic runner, whose cursor is not its log,
/// diverges after a power cut as after SIGKILL, and a DIVERGED row names
/// the operations its cut dropped.
#[test]
fn the_sweep_catches_the_classic_runner() {
    let plan = fixture("eight-steps.jsonl");
    let (doc, code) = sweep(&[
        "--runner",
        "classic",
        "--classic-log",
        "volatile",
        "--cuts",
        "12",
        plan.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(3), "{}", doc["data"]["summary"]);
    let rows = doc["data"]["rows"].as_array().unwrap();
    let diverged: Vec<_> = rows.iter().filter(|r| r["verdict"] == "DIVERGED").collect();
    assert!(!diverged.is_empty());
    assert!(
        diverged
            .iter()
            .any(|r| r["dropped"].as_array().is_some_and(|d| !d.is_empty())),
        "{diverged:#?}"
    );
}

/// Without strace the sweep says what it needs, exits 1 and makes no
/// scratch space.
#[test]
fn without_strace_the_sweep_says_so() {
    let t = TestRepo::new();
    let bin = t.tmp.path().join("bin-without-strace");
    std::fs::create_dir(&bin).unwrap();
    let git = std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|d| d.join("git"))
        .find(|p| p.is_file())
        .unwrap();
    std::os::unix::fs::symlink(&git, bin.join("git")).unwrap();
    let plan = fixture("eight-steps.jsonl");
    let scratch = t.tmp.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let r = t.steps_env(
        &["crashtest", "--power-loss", plan.to_str().unwrap()],
        &[
            ("PATH", bin.to_str().unwrap()),
            ("GIT_STEPS_SCRATCH", scratch.to_str().unwrap()),
        ],
    );
    assert_eq!(r.code(), Some(1), "{}", r.stderr());
    assert!(r.stderr().contains("strace"), "{}", r.stderr());
    assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0);
}

/// `--model`, `--cuts` and the rest belong to `--power-loss`: a usage error
/// without it.
#[test]
fn power_loss_options_need_power_loss() {
    let t = TestRepo::new();
    let plan = fixture("eight-steps.jsonl");
    t.steps(&["crashtest", "--model", "posix", plan.to_str().unwrap()])
        .code_is(2);
}
