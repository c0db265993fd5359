//! Issue 4: the crash matrix, the classic runner's divergences, `demo`.

use std::path::{Path, PathBuf};

use git_steps::matrix::{self, Env, Runner, Verdict};
use proptest::prelude::*;

use crate::harness::*;

#[test]
fn list_points_prints_every_point_one_per_line() {
    let t = TestRepo::new();
    let out = t.steps(&["crashtest", "--list-points"]).ok().stdout();
    let names: Vec<&str> = git_steps::crash::POINTS.iter().map(|p| p.name).collect();
    assert_eq!(out.lines().collect::<Vec<_>>(), names);
    for must in [
        "before-write",
        "objects-written",
        "pushed",
        "ref-updated",
        "worktree-partial",
        "worktree-done",
    ] {
        assert!(names.contains(&must), "{must}");
    }
}

#[test]
fn the_eight_step_matrix_is_all_same() {
    let t = TestRepo::new();
    let plan = fixture("eight-steps.jsonl");
    let r = t
        .steps(&["--json", "crashtest", plan.to_str().unwrap()])
        .ok();
    let doc = r.json();
    let data = &doc["data"];
    let rows = data["rows"].as_array().unwrap();
    // Every step × every point × both boxes (resume points: surviving box;
    // the agent loop's points belong to `--runner run`).
    use git_steps::crash::Scope;
    let count = |s: Scope| {
        git_steps::crash::POINTS
            .iter()
            .filter(|p| p.scope == s)
            .count()
    };
    // The `apply` runner's boxes publish the shared hunk cache every
    // `CACHE_EVERY` (3) steps, so its points are crossed at s3 and s6.
    assert_eq!(git_steps::matrix::CACHE_EVERY, 3);
    let direct = count(Scope::Step) + count(Scope::RemoteStep);
    let resume = count(Scope::Resume);
    let cache = count(Scope::Cache);
    assert_eq!(rows.len(), 8 * (direct * 2 + resume) + 2 * cache * 2);
    for point in ["cache-written", "cache-pushed"] {
        let at: Vec<&str> = rows
            .iter()
            .filter(|r| r["point"] == point)
            .map(|r| r["step"].as_str().unwrap())
            .collect();
        assert_eq!(at, ["s3", "s3", "s6", "s6"], "{point}");
    }
    assert_eq!(data["summary"]["diverged"], 0, "{}", r.stdout());
    assert_eq!(data["summary"]["refused"], 0);
    assert_eq!(data["summary"]["same"], rows.len());
    for row in rows {
        assert_eq!(row["artifact"], data["reference"]["artifact"]);
        assert_eq!(row["history"], data["reference"]["history"]);
        assert_eq!(row["reason"], "", "every armed crash fired: {row}");
        let receipts: Vec<&str> = row["receipts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(receipts, ["s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8"]);
    }
}

fn matrix_rows(runner: &str, log: &str) -> (serde_json::Value, Option<i32>) {
    let t = TestRepo::new();
    let plan = fixture("eight-steps.jsonl");
    let r = t.steps(&[
        "--json",
        "crashtest",
        "--runner",
        runner,
        "--classic-log",
        log,
        plan.to_str().unwrap(),
    ]);
    (r.json(), r.code())
}

fn row_of(doc: &serde_json::Value, step: &str, point: &str, b: &str) -> serde_json::Value {
    doc["data"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["step"] == step && r["point"] == point && r["box"] == b)
        .unwrap_or_else(|| panic!("no row {step} {point} {b}"))
        .clone()
}

fn verdict_of(doc: &serde_json::Value, step: &str, point: &str, b: &str) -> String {
    row_of(doc, step, point, b)["verdict"]
        .as_str()
        .unwrap()
        .to_string()
}

fn receipts_of(doc: &serde_json::Value, step: &str, point: &str, b: &str) -> Vec<String> {
    row_of(doc, step, point, b)["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// The matrix over the agent loop: every point of `apply` plus the loop's
/// own (after the answer), with a decider replaying the plan; all SAME, and
/// the decider never asked for an index whose receipt (or recorded
/// decision) was durable (the matrix marks that DIVERGED; see
/// `the_matrix_catches_a_decider_asked_too_late`).
#[test]
fn the_agent_loop_matrix_is_all_same() {
    let t = TestRepo::new();
    let plan = fixture("eight-steps.jsonl");
    let r = t
        .steps(&[
            "--json",
            "crashtest",
            "--runner",
            "run",
            plan.to_str().unwrap(),
        ])
        .ok();
    let doc = r.json();
    let data = &doc["data"];
    assert_eq!(data["runner"], "git-steps-run");
    let rows = data["rows"].as_array().unwrap();
    use git_steps::crash::Scope;
    let count = |s: Scope| {
        git_steps::crash::POINTS
            .iter()
            .filter(|p| p.scope == s)
            .count()
    };
    let direct = count(Scope::Step) + count(Scope::RemoteStep) + count(Scope::Decide);
    // `reconcile-ref` only at s1: the loop moves the local branch before
    // the push of every later step, so no crash leaves the remote ahead.
    // A finished run keeps itself (refs/steps/runs/): its two points at
    // the head's step, both boxes, and every row checks the kept ref.
    assert_eq!(count(Scope::Archive), 2);
    // `ahead-kept` from s3 on: s1 is never asked ahead, and s2 is not
    // when s1's push creates the branch.
    assert_eq!(
        rows.len(),
        8 * (direct * 2 + count(Scope::Resume)) - 7 + 2 * 2 - 2 * 2
    );
    let ahead: Vec<&str> = rows
        .iter()
        .filter(|r| r["point"] == "ahead-kept")
        .map(|r| r["step"].as_str().unwrap())
        .collect();
    assert_eq!(ahead.len(), 12, "ahead-kept at s3..s8, both boxes");
    assert!(!ahead.contains(&"s1") && !ahead.contains(&"s2"));
    for point in ["archive-read", "archive-pushed"] {
        let at: Vec<&str> = rows
            .iter()
            .filter(|r| r["point"] == point)
            .map(|r| r["step"].as_str().unwrap())
            .collect();
        assert_eq!(at, ["s8", "s8"], "{point}");
    }
    let ff: Vec<&str> = rows
        .iter()
        .filter(|r| r["point"] == "reconcile-ref")
        .map(|r| r["step"].as_str().unwrap())
        .collect();
    assert_eq!(ff, ["s1"]);
    assert_eq!(
        rows.iter().filter(|r| r["point"] == "decided").count(),
        16,
        "decided"
    );
    // The journal's points are off the happy path: a replayed plan never
    // gives an answer that is refused or cannot be built.
    assert_eq!(count(Scope::Journal), 3);
    for point in ["journal-objects", "journal-pushed", "journaled"] {
        assert_eq!(rows.iter().filter(|r| r["point"] == point).count(), 0);
    }
    assert_eq!(data["summary"]["same"], rows.len(), "{}", r.stdout());
    for row in rows {
        assert_eq!(row["reason"], "", "every armed crash fired: {row}");
    }
    // The reference is `apply`'s: the loop changes how decisions arrive,
    // not what they make.
    let apply = t
        .steps(&["--json", "apply", plan.to_str().unwrap()])
        .ok()
        .json();
    assert_eq!(data["reference"]["artifact"], apply["data"]["artifact"]);
    assert_eq!(data["reference"]["history"], apply["data"]["history"]);
}

#[test]
fn the_classic_runner_diverges_where_it_must() {
    let (durable, code) = matrix_rows("classic", "durable");
    assert_eq!(code, Some(3), "any DIVERGED row fails the command");
    // Durable log, volatile receipts: the box vanishes after s5 was pushed;
    // the cursor says 3, so s4 and s5 are applied again (duplicated hunks).
    assert_eq!(
        verdict_of(&durable, "s5", "before-write", "vanish"),
        "DIVERGED"
    );
    let receipts = receipts_of(&durable, "s5", "before-write", "vanish");
    assert_eq!(
        receipts,
        ["s1", "s2", "s3", "s4", "s4", "s5", "s6", "s7", "s8"]
    );
    // Pushed but no receipt yet, even on a surviving box: applied twice.
    assert_eq!(verdict_of(&durable, "s2", "pushed", "survive"), "DIVERGED");
    // Right after a checkpoint nothing is lost or repeated.
    assert_eq!(verdict_of(&durable, "s4", "before-write", "vanish"), "SAME");
    assert_eq!(
        verdict_of(&durable, "s3", "receipt-written", "survive"),
        "SAME"
    );

    let (volatile, code) = matrix_rows("classic", "volatile");
    assert_eq!(code, Some(3));
    // Volatile log: the cursor checkpointed at 3 and 6 survives, the commits
    // do not: resuming at 6 on a fresh clone loses s1..s6's hunks.
    assert_eq!(
        verdict_of(&volatile, "s7", "before-write", "vanish"),
        "DIVERGED"
    );
    let receipts = receipts_of(&volatile, "s7", "before-write", "vanish");
    // s7's hunk needs s6's line as context; with s1..s6 lost it does not even
    // apply, and the durable branch ends without them.
    assert!(
        !receipts.iter().any(|r| r == "s1" || r == "s6"),
        "lost hunks: {receipts:?}"
    );
    assert_eq!(
        verdict_of(&volatile, "s2", "before-write", "vanish"),
        "SAME"
    );
}

#[test]
fn demo_tells_the_story() {
    // The document a program reads; CI runs the text story (README's main
    // job) and checks its verdict line.
    let t = TestRepo::new();
    let doc = t.steps(&["--json", "demo"]).ok().json();
    let runners: Vec<&str> = doc["data"]["matrices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["runner"].as_str().unwrap())
        .collect();
    assert_eq!(
        runners,
        ["classic-durable-log", "classic-volatile-log", "git-steps"]
    );
    assert_eq!(doc["data"]["holds"], true);
    let ours = &doc["data"]["matrices"][2];
    assert_eq!(ours["runner"], "git-steps");
    assert_eq!(ours["summary"]["diverged"], 0);
    assert!(
        doc["data"]["matrices"][0]["summary"]["diverged"]
            .as_u64()
            .unwrap()
            > 0
    );
}

/// A random plan made with the git CLI: patch steps are real `git diff`
/// output, files steps whole contents; edge contents included.
fn make_plan(dir: &Path, steps: &[(u8, u8, u8)]) -> PathBuf {
    let t = TestRepo::new();
    // Real diffs, byte for byte: git's default policy for the generator.
    t.pin_policy();
    let names = ["a.txt", "dir/é.txt", "crlf.txt"];
    let mut lines = Vec::new();
    for (i, &(file, shape, kind)) in steps.iter().enumerate() {
        if file == 3 {
            // The path `t` changes its type: a file, a directory, a deep
            // tree, a symlink (git prints the last as a deletion and an
            // addition of one path; a `files` step cannot make a link).
            let state = shape % 4;
            let kind = if state == 3 { 0 } else { kind };
            if let Some(l) = type_change(&t, &format!("p{i}"), state, kind, i) {
                lines.push(l);
            }
            continue;
        }
        let name = names[file as usize % names.len()];
        let exists = t.path(name).exists();
        let old = if exists { t.read(name) } else { String::new() };
        let new = match shape % 6 {
            0 => String::new(),                            // empty file
            1 => format!("{old}line-{i}"),                 // no final newline
            2 => format!("{old}crlf-{i}\r\nmore-{i}\r\n"), // CRLF
            3 => format!("ünïcödé-{i} ✓\n{old}"),          // non-ASCII, at the top
            4 => old.lines().map(|l| format!("{l}\n")).collect::<String>() + &format!("tail-{i}\n"),
            _ => format!("fresh-{i}\nbody-{i}\n"),
        };
        let delete = exists && shape % 7 == 6;
        if !delete && exists && new == old {
            continue;
        }
        let id = format!("p{i}");
        if kind % 2 == 0 {
            if delete {
                std::fs::remove_file(t.path(name)).unwrap();
            } else {
                t.write(name, &new);
            }
            t.git(&["add", "-A"]).ok();
            // Untrimmed: a CRLF file's last line ends in "\r\n".
            let diff = t
                .git(&["-c", "core.quotePath=false", "diff", "--cached"])
                .ok()
                .stdout();
            if diff.trim().is_empty() {
                continue;
            }
            t.git(&["commit", "-q", "-m", &id]).ok();
            lines.push(line(serde_json::json!({"id": id, "patch": diff})));
        } else {
            let content = if delete {
                serde_json::Value::Null
            } else {
                serde_json::json!(new)
            };
            if delete {
                std::fs::remove_file(t.path(name)).unwrap();
            } else {
                t.write(name, &new);
            }
            t.git(&["add", "-A"]).ok();
            t.git(&["commit", "-q", "--allow-empty", "-m", &id]).ok();
            lines.push(line(
                serde_json::json!({"id": id, "files": {name: content}}),
            ));
        }
    }
    if lines.is_empty() {
        lines.push(r#"{"id":"only","files":{"x":"x\n"}}"#.to_string());
    }
    let p = dir.join("plan.jsonl");
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    p
}

/// Put `t` in `state` (0 file, 1 directory, 2 deep tree, 3 symlink), commit,
/// and return the step that does it (None when nothing changed).
fn type_change(t: &TestRepo, id: &str, state: u8, kind: u8, i: usize) -> Option<String> {
    let before = tracked(t);
    let full = t.path("t");
    match std::fs::symlink_metadata(&full) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(&full).unwrap(),
        Ok(_) => std::fs::remove_file(&full).unwrap(),
        Err(_) => {}
    }
    match state {
        0 => t.write("t", &format!("file-{i}\n")),
        1 => t.write("t/inner", &format!("inner-{i}\n")),
        2 => t.write("t/x/y/z", &format!("deep-{i}\n")),
        _ => std::os::unix::fs::symlink("a.txt", &full).unwrap(),
    }
    t.git(&["add", "-A"]).ok();
    let diff = t
        .git(&["-c", "core.quotePath=false", "diff", "--cached"])
        .ok()
        .stdout();
    if diff.trim().is_empty() {
        return None;
    }
    t.git(&["commit", "-q", "-m", id]).ok();
    let step = if kind.is_multiple_of(2) {
        serde_json::json!({"id": id, "patch": diff})
    } else {
        let after = tracked(t);
        let mut files = serde_json::Map::new();
        for p in before.iter().filter(|p| !after.contains(*p)) {
            files.insert(p.clone(), serde_json::Value::Null);
        }
        for p in &after {
            files.insert(p.clone(), serde_json::json!(t.read(p)));
        }
        serde_json::json!({"id": id, "files": files})
    };
    Some(line(step))
}

fn tracked(t: &TestRepo) -> Vec<String> {
    t.git_out(&["-c", "core.quotePath=false", "ls-files"])
        .lines()
        .map(str::to_string)
        .collect()
}

proptest! {
    // Cases: `GIT_STEPS_TRIALS` (default 24; `scripts/soak.sh` runs more).
    #![proptest_config(ProptestConfig { cases: trials_and_seed(24, 0).0 as u32, failure_persistence: None, ..ProptestConfig::default() })]

    /// Random plans × a random crash point × a random box mode → SAME.
    #[test]
    fn random_plan_random_crash_resumes_to_the_same_fingerprint(
        steps in proptest::collection::vec((0u8..4, 0u8..7, 0u8..2), 1..7),
        pick in any::<u32>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let plan = make_plan(dir.path(), &steps);
        let env = Env { exe: PathBuf::from(BIN), plan: plan.clone(), runner: Runner::GitSteps, base: None, batch: 1, flush_files: false };
        let reference = matrix::reference(&env).unwrap();
        let ids = plan_ids(&plan);
        let cells = matrix::cells(Runner::GitSteps, &ids, 1);
        let cell = &cells[pick as usize % cells.len()];
        let row = matrix::run_cell(&env, cell, &reference).unwrap();
        let plan_text = std::fs::read_to_string(&plan).unwrap();
        prop_assert_eq!(row.verdict, Verdict::Same, "{:?} at {}@{} ({:?}): {}\nplan:\n{}",
            row.verdict, row.point, row.step, row.box_mode, row.reason, plan_text);
        // SAME only means something if the crash happened: a point that was
        // armed but never reached leaves the run uninterrupted there. (The
        // eight-step and agent-loop matrices check every row the same way.)
        prop_assert_eq!(row.reason.as_str(), "", "at {}@{} ({:?})\nplan:\n{}",
            row.point, row.step, row.box_mode, plan_text);
    }
}

/// Issue 8's acceptance: a plan mixing every edit format (files, patch with
/// wrong and with no line numbers, edits, apply_patch, search_replace)
/// applies, and its crash matrix is all SAME.
#[test]
fn the_all_formats_matrix_is_all_same() {
    let t = TestRepo::new();
    let plan = fixture("all-formats.jsonl");
    let formats: std::collections::BTreeSet<String> = std::fs::read_to_string(&plan)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            ["patch", "files", "edits", "apply_patch", "search_replace"]
                .into_iter()
                .find(|k| v.get(*k).is_some())
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(formats.len(), 5, "every format is in the plan: {formats:?}");
    let r = t
        .steps(&["--json", "crashtest", plan.to_str().unwrap()])
        .ok();
    let doc = r.json();
    let data = &doc["data"];
    let rows = data["rows"].as_array().unwrap();
    assert!(rows.len() > 100);
    assert_eq!(data["summary"]["same"], rows.len(), "{}", r.stdout());
}

/// Issue 16: `crashtest --batch 3` crashes `apply --batch 3`: every step at
/// its staging points, the last step of each batch at every point (push,
/// local branch, worktree, resume). All SAME, every armed crash fired, and
/// the reference is plain `apply`'s.
#[test]
fn the_batch_matrix_is_all_same() {
    let t = TestRepo::new();
    let plan = fixture("eight-steps.jsonl");
    let doc = t
        .steps(&[
            "--json",
            "crashtest",
            "--batch",
            "3",
            plan.to_str().unwrap(),
        ])
        .ok()
        .json();
    let data = &doc["data"];
    let rows = data["rows"].as_array().unwrap();
    use git_steps::crash::Scope;
    let direct = git_steps::crash::POINTS
        .iter()
        .filter(|p| matches!(p.scope, Scope::Step | Scope::RemoteStep))
        .count();
    let cache = git_steps::crash::POINTS
        .iter()
        .filter(|p| p.scope == Scope::Cache)
        .count();
    let resume = git_steps::crash::POINTS
        .iter()
        .filter(|p| p.scope == Scope::Resume)
        .count();
    // s3, s6, s8 end a batch; the other five pass only the staging points.
    // The flushes of s3 and s6 pass a multiple of the boxes' cache interval
    // (3): they publish the shared hunk cache, named by their last step.
    assert_eq!(
        rows.len(),
        5 * 2 * 2 + 3 * (direct * 2 + resume) + 2 * cache * 2
    );
    for end in ["s3", "s6", "s8"] {
        assert!(rows
            .iter()
            .any(|r| r["step"] == end && r["point"] == "pushed"));
    }
    assert!(!rows
        .iter()
        .any(|r| r["step"] == "s4" && r["point"] == "pushed"));
    assert!(!rows
        .iter()
        .any(|r| r["step"] == "s4" && r["point"] == "cache-pushed"));
    assert_eq!(data["summary"]["same"], rows.len(), "{doc}");
    for row in rows {
        assert_eq!(row["reason"], "", "every armed crash fired: {row}");
    }
    let apply = t
        .steps(&["--json", "apply", plan.to_str().unwrap()])
        .ok()
        .json();
    assert_eq!(data["reference"]["artifact"], apply["data"]["artifact"]);
    assert_eq!(data["reference"]["history"], apply["data"]["history"]);
    // --batch is apply's: not for the agent loop.
    t.steps(&[
        "crashtest",
        "--runner",
        "run",
        "--batch",
        "3",
        plan.to_str().unwrap(),
    ])
    .code_is(1)
    .stderr_has("--batch");
}

/// The check behind "no index asked after its answer was durable" can
/// fail: the matrix's replaying decider, asked for an index whose receipt
/// is already on the box's remote, writes it down.
#[test]
fn the_matrix_catches_a_decider_asked_too_late() {
    let t = TestRepo::new();
    let server = t.start_server(crate::servers::Kind::Path);
    t.steps(&["-q", "init", "--remote", server.url()]).ok();
    let plan = fixture("eight-steps.jsonl");
    t.steps(&["apply", plan.to_str().unwrap()]).ok();
    let late = t.home().join("late-asks");
    let ask = |index: usize| {
        let mut c = std::process::Command::new(BIN);
        c.args(["replay-decider", plan.to_str().unwrap()])
            .env("GIT_STEPS_MATRIX_REMOTE", server.bare())
            .env("GIT_STEPS_MATRIX_LATE", &late)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        let mut child = c.spawn().unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(format!("{{\"step_index\": {index}}}").as_bytes())
            .unwrap();
        assert!(child.wait_with_output().unwrap().status.success());
    };
    ask(8);
    assert!(!late.exists(), "index 8 has no receipt: not late");
    ask(2);
    let written = std::fs::read_to_string(&late).unwrap();
    assert!(
        written.contains("asked for step index 2 (s3) although its receipt"),
        "{written}"
    );
}

/// A runner or classic log the matrix does not know is a usage error (exit
/// 2) that lists the known ones; nothing runs.
#[test]
fn an_unknown_runner_is_a_usage_error() {
    let t = TestRepo::new();
    let plan = fixture("eight-steps.jsonl");
    let plan = plan.to_str().unwrap();
    t.steps(&["crashtest", "--runner", "nope", plan])
        .code_is(2)
        .stderr_has("git-steps, run, record, undo, classic");
    t.steps(&[
        "crashtest",
        "--runner",
        "classic",
        "--classic-log",
        "nah",
        plan,
    ])
    .code_is(2)
    .stderr_has("durable, volatile");
}
