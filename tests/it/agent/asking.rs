//! How `run` asks: it asks the decider, applies the answer (its receipt is
//! the record: one push per step), and stops when told done; the decider sees the SPEC's
//! context; the example decider README points to works.

use serde_json::Value;

use crate::harness::*;

use super::{decider, journal, replay};

#[test]
fn run_asks_records_then_applies_each_step_and_stops_when_done() {
    let t = TestRepo::new();
    let plan = fixture("eight-steps.jsonl");
    let r = t
        .steps(&["--json", "run", "--decider", &replay(&plan)])
        .ok();
    let doc = r.json();
    assert_eq!(doc["type"], "run");
    assert_eq!(doc["data"]["stopped"], "done");
    assert_eq!(doc["data"]["decider_calls"], 9, "8 steps, then done");
    // The same artifact and history as `apply` of the same plan.
    let a = TestRepo::new();
    let want = a
        .steps(&["--json", "apply", plan.to_str().unwrap()])
        .ok()
        .json();
    assert_eq!(doc["data"]["artifact"], want["data"]["artifact"]);
    assert_eq!(doc["data"]["history"], want["data"]["history"]);
    assert_eq!(
        independent_fingerprint(&t, "HEAD"),
        want["data"]["artifact"]
    );
    // Audit with plain git: receipts, their source, and the journal.
    assert_eq!(t.step_ids(), plan_ids(&plan));
    let sources = t.git_out(&[
        "log",
        "--format=%(trailers:key=Step-Source,valueonly,separator=)",
        "main",
    ]);
    assert!(sources.lines().all(|l| l == "decider"), "{sources}");
    // Each decision became durable with its step, in one push: the
    // receipt is its record, and the journal (for refused answers and
    // decisions that could not be built yet) was never written.
    assert!(journal(&[], &t).is_empty());
    assert_eq!(
        t.git(&["rev-parse", "--verify", "-q", "refs/steps/journal/main"])
            .out
            .status
            .code(),
        Some(1),
        "no journal ref on the happy path"
    );
    // Rerunning asks once (for the next index) and is told done.
    let again = t
        .steps(&["--json", "run", "--decider", &replay(&plan)])
        .ok()
        .json();
    assert_eq!(again["data"]["decider_calls"], 1);
    assert_eq!(again["data"]["steps"].as_array().unwrap().len(), 0);
    // --max-steps stops early; the rest comes on the next run.
    let m = TestRepo::new();
    let r = m
        .steps(&[
            "--json",
            "run",
            "--max-steps",
            "3",
            "--decider",
            &replay(&plan),
        ])
        .ok()
        .json();
    assert_eq!(r["data"]["stopped"], "max-steps");
    assert_eq!(m.step_ids().len(), 3);
    // Log and journal agree: verify is clean.
    t.steps(&["verify", plan.to_str().unwrap()]).ok();
}

/// The decider gets the SPEC's context on stdin.
#[test]
fn the_decider_sees_run_index_head_fingerprint_and_last_step() {
    let t = TestRepo::new();
    let log = t.home().join("contexts.jsonl");
    let cmd = decider(
        &t,
        "d.sh",
        &format!(
            r#"ctx=$(cat); printf '%s\n' "$ctx" >> '{}'
case "$ctx" in
  *'"step_index":0'*) printf '%s\n' '{{"id":"a","files":{{"a.txt":"1\n"}}}}' ;;
  *) printf '%s\n' '{{"done":true}}' ;;
esac
"#,
            log.display()
        ),
    );
    t.steps(&["run", "--decider", &cmd]).ok();
    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["run"], "main");
    assert_eq!(lines[0]["step_index"], 0);
    assert_eq!(lines[0]["head"], Value::Null);
    assert_eq!(lines[0]["last_step_id"], Value::Null);
    assert_eq!(lines[1]["step_index"], 1);
    assert_eq!(lines[1]["head"].as_str(), t.head().as_deref());
    assert_eq!(lines[1]["last_step_id"], "a");
    assert_eq!(lines[1]["fingerprint"], independent_fingerprint(&t, "HEAD"));
}

/// The example decider README points to works as documented.
#[test]
fn the_example_decider_works_through_a_todo_list() {
    let t = TestRepo::new();
    t.write("TODO.txt", "- [ ] parse\n- [x] old\n- [ ] test\n");
    t.commit_all("base");
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/example-decider.py");
    let cmd = format!("python3 '{}'", script.display());
    let doc = t.steps(&["--json", "run", "--decider", &cmd]).ok().json();
    assert_eq!(doc["data"]["stopped"], "done");
    assert_eq!(t.read("TODO.txt"), "- [x] parse\n- [x] old\n- [x] test\n");
    assert_eq!(t.step_ids(), ["todo-0", "todo-1"]);
    let msg = t.git_out(&["log", "-1", "--format=%B"]);
    assert!(
        msg.contains(r#"{"item":"test","tool":"mark_done"}"#),
        "{msg}"
    );
}
