//! Receipts: each step's commit carries `Step-Id`, `Step-Run` and
//! `Step-Decision` trailers that plain git reads, the decision digest is the
//! SHA-256 of the canonical JSON, nothing in a message or intent forges
//! them, and the receipt index is a cache that never outranks the log.

use sha2::Digest as _;

use crate::harness::*;

#[test]
fn eight_steps_apply_once_and_plain_git_reads_every_receipt() {
    let t = TestRepo::new();
    let plan = fixture("eight-steps.jsonl");
    let plan_s = plan.to_str().unwrap();
    t.steps(&["apply", plan_s]).ok();
    let ids = plan_ids(&plan);
    assert_eq!(t.step_ids(), ids);
    assert_eq!(
        t.read("log.txt"),
        (1..=8).map(|i| format!("line-{i}\n")).collect::<String>()
    );
    // Each receipt is what `git interpret-trailers --parse` sees.
    for (n, id) in ids.iter().rev().enumerate() {
        let msg = t.git_out(&["log", "-1", "--format=%B", &format!("HEAD~{n}")]);
        let parsed = interpret_trailers(&t, &msg);
        let lines: Vec<&str> = parsed.lines().collect();
        assert_eq!(lines.len(), 4, "{parsed}");
        assert_eq!(lines[3], format!("Step-Index: {}", ids.len() - n));
        assert_eq!(lines[0], format!("Step-Id: {id}"));
        assert_eq!(lines[1], "Step-Run: main");
        assert!(
            lines[2].starts_with("Step-Decision: sha256:") && lines[2].len() == 22 + 64,
            "{parsed}"
        );
    }
    // Rerunning adds nothing and reports every step as skipped.
    let head = t.head();
    let rerun = t.steps(&["apply", plan_s]).ok();
    assert_eq!(
        rerun.stdout().matches("skipped").count(),
        8,
        "{}",
        rerun.explain()
    );
    assert_eq!(t.head(), head);
    // Fingerprints agree with independent computations from plain git.
    let fp = t.steps(&["fingerprint"]).ok().stdout();
    assert_eq!(fp.trim(), independent_fingerprint(&t, "HEAD"));
    let hist = t.steps(&["fingerprint", "--history"]).ok().stdout();
    assert_eq!(hist.trim(), independent_history(&t));
    t.steps(&["verify", plan_s]).ok();
    assert_eq!(t.git_out(&["status", "--porcelain"]), "");
}

#[test]
fn decision_digest_is_sha256_of_rfc8785_canonical_json() {
    let t = TestRepo::new();
    // Keys out of order, insignificant whitespace, an escaped non-ASCII char.
    let raw = "{ \"message\" : \"caf\\u00e9\", \"files\": {\"f.txt\": \"x\\n\"}, \"id\": \"d1\" }";
    t.steps_stdin(&["apply", "-"], raw).ok();
    let canonical = "{\"files\":{\"f.txt\":\"x\\n\"},\"id\":\"d1\",\"message\":\"café\"}";
    let expected = format!(
        "sha256:{}",
        hex(&sha2::Sha256::digest(canonical.as_bytes()))
    );
    let recorded = t.git_out(&[
        "log",
        "-1",
        "--format=%(trailers:key=Step-Decision,valueonly)",
    ]);
    assert_eq!(recorded, expected);
}

/// SPEC "Trailer safety": nothing in `message` or `intent` changes the
/// receipt as git reads it.
#[test]
fn forged_trailers_in_message_and_intent_do_not_change_the_receipt() {
    let t = TestRepo::new();
    let forged = "x\n\nStep-Id: forged\nStep-Run: evil\nStep-Decision: sha256:00\n";
    let cases = [
        serde_json::json!({"id": "t1", "files": {"a": "1\n"}, "message": forged}),
        serde_json::json!({"id": "t2", "files": {"a": "2\n"}, "intent": forged}),
        serde_json::json!({"id": "t3", "files": {"a": "3\n"}, "intent": {"k": "---\nStep-Id: forged"}, "message": "---"}),
        serde_json::json!({"id": "t4", "files": {"a": "4\n"}, "intent": ["Step-Id: forged", "  continued", "Signed-off-by: x"]}),
        serde_json::json!({"id": "t5", "files": {"a": "5\n"}, "message": "Step-Id: forged\n Step-Id: more"}),
        // A `---` line would end the message for git's trailer parser.
        serde_json::json!({"id": "t6", "files": {"a": "6\n"}, "message": "fix\n---\nStep-Id: forged"}),
    ];
    for (n, case) in cases.iter().enumerate() {
        let id = case["id"].as_str().unwrap();
        t.steps_stdin(&["apply", "-"], &line(case.clone())).ok();
        let msg = t.git_out(&["log", "-1", "--format=%B"]);
        let parsed = interpret_trailers(&t, &msg);
        let keys: Vec<&str> = parsed
            .lines()
            .map(|l| l.split(':').next().unwrap())
            .collect();
        assert_eq!(
            keys,
            ["Step-Id", "Step-Run", "Step-Decision", "Step-Index"],
            "case {n}: {msg}\n{parsed}"
        );
        assert!(
            parsed.starts_with(&format!("Step-Id: {id}\nStep-Run: main\n")),
            "case {n}: {parsed}"
        );
        let via_log = t.git_out(&["log", "-1", "--format=%(trailers:key=Step-Id,valueonly)"]);
        assert_eq!(via_log, id, "case {n}");
    }
    assert_eq!(t.step_ids(), ["t1", "t2", "t3", "t4", "t5", "t6"]);
    t.steps(&["verify"]).ok();
}

/// The receipt index is a cache of the log: a damaged or stale index must
/// never change a decision.
#[test]
fn the_receipt_index_never_outranks_the_log() {
    let t = TestRepo::new();
    let plan = fixture("eight-steps.jsonl");
    let plan_s = plan.to_str().unwrap();
    t.steps(&["apply", plan_s]).ok();
    let dir = t.work.join(".git/steps/index");
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    // Damaged: a receipt's id edited by hand (the checksum no longer holds).
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes
        .windows(3)
        .position(|w| w == b"\x02s3")
        .expect("s3 in the index");
    bytes[at + 1..at + 3].copy_from_slice(b"zz");
    std::fs::write(&file, &bytes).unwrap();
    let st = t.steps(&["--json", "status", plan_s]).ok().json();
    assert_eq!(st["data"]["steps_applied"], 8);
    assert_eq!(st["data"]["pending"].as_array().unwrap().len(), 0);
    // Stale: the branch moved back behind the index's head; the run resumes
    // from the log, not from the index.
    t.git(&["reset", "-q", "--hard", "HEAD~3"]).ok();
    let r = t.steps(&["--json", "apply", plan_s]).ok().json();
    let applied: Vec<&str> = r["data"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["action"] == "applied")
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(applied, ["s6", "s7", "s8"]);
    assert_eq!(t.step_ids(), plan_ids(&plan));
    t.steps(&["verify", plan_s]).ok();
    // A duplicate made after the index was written is still refused.
    let again = r#"{"id":"s8-again","patch":"--- a/log.txt\n+++ b/log.txt\n@@ -8 +8,2 @@\n line-8\n+line-8\n"}"#;
    t.steps_stdin(&["apply", "-"], again)
        .code_is(3)
        .stderr_has("repeats a change step s8 made");
}

/// The receipt index is written only by a real run, under its lock: a dry
/// run leaves `.git/steps/index` alone, and a run clears temporary files a
/// killed runner left there.
#[test]
fn the_receipt_index_is_written_only_by_real_runs() {
    let t = TestRepo::new();
    let plan = fixture("eight-steps.jsonl");
    let first: Vec<String> = std::fs::read_to_string(&plan)
        .unwrap()
        .lines()
        .take(4)
        .map(str::to_string)
        .collect();
    let half = t.plan("half.jsonl", &first);
    t.steps(&["apply", half.to_str().unwrap()]).ok();
    let dir = t.work.join(".git/steps/index");
    std::fs::remove_dir_all(&dir).unwrap();
    t.steps(&["apply", "--dry-run", plan.to_str().unwrap()])
        .ok();
    assert!(!dir.exists(), "a dry run wrote the receipt index");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(".tmpKILLED"), "half a write").unwrap();
    t.steps(&["apply", plan.to_str().unwrap()]).ok();
    assert!(
        !dir.join(".tmpKILLED").exists(),
        "a killed runner's temporary file is left"
    );
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        1,
        "one index file"
    );
}
