//! Issue 7: the agent loop. `run --decider` against real repositories and
//! remotes, deciders that fail in every way, refusals, and random kills
//! with a decider that answers differently on every call, like a model.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::*;
use crate::servers::Kind;

/// Write an executable decider script into the test's home (outside the
/// snapshot) and return the command that runs it.
fn decider(t: &TestRepo, name: &str, body: &str) -> String {
    let path = t.home().join(name);
    std::fs::write(&path, body).unwrap();
    format!("sh '{}'", path.display())
}

fn replay(plan: &std::path::Path) -> String {
    format!("'{BIN}' replay-decider '{}'", plan.display())
}

/// Journal entries on a repository, oldest first: (index, step id, status).
fn journal(git_dir_args: &[&str], t: &TestRepo) -> Vec<(usize, String, String)> {
    let mut args: Vec<&str> = git_dir_args.to_vec();
    args.extend([
        "log",
        "--reverse",
        "--format=%(trailers:key=Journal-Index,valueonly,separator=)|%(trailers:key=Journal-Step-Id,valueonly,separator=)|%(trailers:key=Journal-Status,valueonly,separator=)",
        "refs/steps/journal/main",
    ]);
    t.git_out(&args)
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            (f[0].parse().unwrap(), f[1].to_string(), f[2].to_string())
        })
        .collect()
}

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
    let j = journal(&[], &t);
    assert_eq!(j.len(), 8);
    for (i, (index, id, status)) in j.iter().enumerate() {
        assert_eq!(
            (*index, id.as_str(), status.as_str()),
            (i, plan_ids(&plan)[i].as_str(), "recorded")
        );
    }
    // The decision itself is in the journal, exactly as the plan gives it.
    let first: Value =
        serde_json::from_str(&t.git_out(&["show", "refs/steps/journal/main~7:decision.json"]))
            .unwrap();
    let line: Value = serde_json::from_str(
        std::fs::read_to_string(&plan)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(first, line);
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

/// Every way a decider can fail: exit 1, its stderr quoted, the step
/// index named, nothing recorded or written.
#[test]
fn a_failing_decider_is_reported_with_its_stderr_and_nothing_is_recorded() {
    let cases: &[(&str, &str, &[&str], &str)] = &[
        (
            "non-zero exit",
            "echo 'model overloaded, try later' >&2; exit 7",
            &[],
            "exited with status 7",
        ),
        (
            "not JSON",
            "echo 'model says: sure!'; echo 'half a thought' >&2",
            &[],
            "not one JSON value",
        ),
        ("nothing printed", "true", &[], "printed nothing"),
        (
            "two objects",
            r#"echo '{"id":"a","files":{"a":"1"}} {"id":"b","files":{"b":"1"}}'"#,
            &[],
            "not one JSON value",
        ),
        (
            "unknown field",
            r#"echo '{"id":"a","files":{"a":"1"},"confidence":0.9}'"#,
            &[],
            "confidence",
        ),
        (
            "bad path",
            r#"echo '{"id":"a","files":{"../escape":"1"}}'"#,
            &[],
            "..",
        ),
        (
            "timeout",
            "echo 'thinking' >&2; sleep 30",
            &["--decider-timeout", "0.5"],
            "did not answer within 0.5 s",
        ),
    ];
    for (what, body, extra, needle) in cases {
        let t = TestRepo::new();
        t.write("keep.txt", "user file\n");
        t.commit_all("base");
        let cmd = decider(&t, "d.sh", body);
        let mut args = vec!["run", "--decider", cmd.as_str()];
        args.extend_from_slice(extra);
        let mut started = Instant::now();
        let r = t.refuses(
            what,
            1,
            &[needle, "step index 0", "nothing was recorded"],
            || {
                started = Instant::now();
                t.steps(&args)
            },
        );
        if *what == "non-zero exit" {
            assert!(
                r.stderr().contains("model overloaded, try later"),
                "{}",
                r.explain()
            );
        }
        if *what == "timeout" {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the decider was not killed"
            );
            assert!(r.stderr().contains("thinking"), "{}", r.explain());
        }
        assert!(
            t.git(&["rev-parse", "--verify", "-q", "refs/steps/journal/main"])
                .code()
                != Some(0),
            "{what}: a journal entry was written"
        );
    }
}

/// A decision that reuses an applied id, or repeats a change still in
/// effect, is refused (exit 3), journaled as refused, not applied; the next
/// run asks again and tells the decider why.
#[test]
fn refused_decisions_are_journaled_not_applied_and_asked_again() {
    let t = TestRepo::new();
    let state = t.home().join("answers");
    // Answers come from files the test fills in, one per call.
    let cmd = decider(
        &t,
        "d.sh",
        &format!(
            r#"ctx=$(cat); printf '%s\n' "$ctx" >> '{dir}/contexts'
n=$(ls '{dir}' | grep -c '^used-' || true)
f='{dir}'/answer-$n
if [ -f "$f" ]; then cat "$f"; mv "$f" '{dir}'/used-$n; else echo '{{"done":true}}'; fi
"#,
            dir = state.display()
        ),
    );
    std::fs::create_dir(&state).unwrap();
    let answer = |n: usize, v: Value| {
        std::fs::write(state.join(format!("answer-{n}")), v.to_string()).unwrap()
    };
    answer(
        0,
        json!({"id": "a", "patch": "--- /dev/null\n+++ b/f.txt\n@@ -0,0 +1 @@\n+one\n"}),
    );
    answer(
        1,
        json!({"id": "b", "patch": "--- a/f.txt\n+++ b/f.txt\n@@ -1 +1,2 @@\n one\n+two\n"}),
    );
    t.steps(&["run", "--max-steps", "2", "--decider", &cmd])
        .ok();
    let head = t.head();

    // Same id as an applied step, another decision.
    answer(2, json!({"id": "a", "files": {"g.txt": "x\n"}}));
    let before = t.snapshot();
    let r = t
        .steps(&["--json", "run", "--decider", &cmd])
        .code_is(3)
        .stderr_has("step a already has a receipt");
    assert_eq!(r.json()["data"]["kind"], "digest-mismatch");
    assert_eq!(t.head(), head);
    let mut after = t.snapshot();
    assert_ne!(after.refs, before.refs, "the refusal is journaled");
    after.refs = before.refs.clone();
    assert_eq!(after, before, "nothing else changed");
    let j = journal(&[], &t);
    assert_eq!(
        j.last().unwrap(),
        &(2, "a".to_string(), "refused".to_string())
    );

    // A duplicated hunk: appending `two` again after `one`.
    answer(
        3,
        json!({"id": "c", "patch": "--- a/f.txt\n+++ b/f.txt\n@@ -2 +2,2 @@\n two\n+two\n"}),
    );
    let r = t
        .steps(&["--json", "run", "--decider", &cmd])
        .code_is(3)
        .stderr_has("repeats a change step b made");
    assert_eq!(r.json()["data"]["kind"], "duplicate-hunk");
    assert_eq!(t.head(), head);
    assert_eq!(t.git_out(&["status", "--porcelain"]), "");
    let j = journal(&[], &t);
    assert_eq!(
        j[j.len() - 2..],
        [
            (2, "c".to_string(), "recorded".to_string()),
            (2, "c".to_string(), "refused".to_string())
        ]
    );
    // `status` says so.
    let st = t.steps(&["status"]).ok().stdout();
    assert!(
        st.contains("the last answer for step index 2 (c) was refused"),
        "{st}"
    );

    // A patch that does not apply: exit 1, journaled as refused.
    answer(
        4,
        json!({"id": "d", "patch": "--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n-nope\n+yes\n"}),
    );
    t.steps(&["run", "--decider", &cmd]).code_is(1);
    assert_eq!(journal(&[], &t).last().unwrap().2, "refused");

    // The next run asks again for index 2, telling the decider why.
    answer(5, json!({"id": "e", "files": {"g.txt": "fine\n"}}));
    t.steps(&["run", "--decider", &cmd]).ok();
    assert_eq!(t.step_ids(), ["a", "b", "e"]);
    let contexts = std::fs::read_to_string(state.join("contexts")).unwrap();
    let last_asks: Vec<Value> = contexts
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|c: &Value| c["step_index"] == 2)
        .collect();
    let told = &last_asks[last_asks.len() - 1]["refused"];
    assert_eq!(told["step_id"], "d", "{contexts}");
    assert!(
        told["reason"].as_str().unwrap().contains("does not apply"),
        "{told}"
    );
}

/// A decision recorded before a crash is applied on resume without asking;
/// `status` shows it pending, `log` shows where it came from.
#[test]
fn a_recorded_decision_is_applied_on_resume_without_asking_and_log_says_so() {
    let t = TestRepo::new();
    let plan = fixture("eight-steps.jsonl");
    let calls = t.home().join("calls");
    let cmd = format!("echo x >> '{}'; {}", calls.display(), replay(&plan));
    let r = t.steps_env(
        &["run", "--decider", &cmd],
        &[("GIT_STEPS_CRASH", "journaled@s3")],
    );
    assert_eq!(r.out.status.signal(), Some(9), "{}", r.explain());
    assert_eq!(std::fs::read_to_string(&calls).unwrap().lines().count(), 3);
    let st = t.steps(&["status"]).ok().stdout();
    assert!(
        st.contains("step index 2 (s3) is RECORDED BUT NOT APPLIED"),
        "{st}"
    );
    let st = t.steps(&["--json", "status"]).ok().json();
    assert_eq!(st["data"]["journal"]["pending"]["step_id"], "s3");
    let r = t.steps(&["run", "--decider", &cmd]).ok();
    assert!(
        r.stdout().contains("applied s3") && r.stdout().contains("[journal #2]"),
        "{}",
        r.stdout()
    );
    // s3 was not asked again: 3 calls before the crash, then s4..s8 and done.
    assert_eq!(
        std::fs::read_to_string(&calls).unwrap().lines().count(),
        3 + 6
    );
    let log = t.steps(&["log"]).ok().stdout();
    let s3 = log.lines().find(|l| l.contains(" s3 ")).unwrap();
    assert!(s3.contains("from the journal, on resume"), "{log}");
    let s4 = log.lines().find(|l| l.contains(" s4 ")).unwrap();
    assert!(s4.contains("[decider]"), "{log}");
    let doc = t.steps(&["--json", "log"]).ok().json();
    assert_eq!(doc["data"]["steps"][2]["source"], "journal");
}

/// A journal that disagrees with the log is refused: another decision
/// recorded where a step was applied.
#[test]
fn a_journal_that_disagrees_with_the_log_is_refused() {
    let t = TestRepo::new();
    let plan = fixture("eight-steps.jsonl");
    t.steps(&["run", "--max-steps", "2", "--decider", &replay(&plan)])
        .ok();
    // Rewrite the log under the journal: step s2 replaced by another.
    t.git(&["reset", "-q", "--hard", "HEAD~1"]).ok();
    let other = t.plan(
        "o.jsonl",
        &[r#"{"id":"s2","files":{"x":"y\n"}}"#.to_string()],
    );
    t.steps(&["apply", other.to_str().unwrap()]).ok();
    let r = t.refuses("", 3, &["the journal recorded step s2"], || {
        t.steps(&["--json", "run", "--decider", &replay(&plan)])
    });
    assert_eq!(r.json()["data"]["kind"], "journal-mismatch");
    // `verify` reports it too.
    let v = t.steps(&["verify"]).code_is(3).stdout();
    assert!(
        v.contains("problem: journal refs/steps/journal/main: the journal recorded step s2"),
        "{v}"
    );
}

/// The decider for the random-kill test: a different answer on every
/// call, each call logged (index and answer) before it answers.
const RANDOM_DECIDER: &str = r#"
import json, os, random, sys
ctx = json.load(sys.stdin)
i = ctx["step_index"]
if i >= int(os.environ["DECIDER_STEPS"]):
    print(json.dumps({"done": True}))
    sys.exit(0)
r = random.SystemRandom()
word = "".join(r.choice("abcdefghijklmnop") for _ in range(12))
if r.random() < 0.5 or i == 0:
    step = {"id": "s%d" % i, "files": {"f%d.txt" % (i % 4): word + "\n"}}
else:
    step = {"id": "s%d" % i, "files": {"n%d-%s.txt" % (i, word): "x\n"}, "message": word}
# Answer first: a runner killed before it read the answer leaves no
# reader, the write fails, and that call never counts (nor can a late log
# line from an orphaned decider land after the next run's call).
try:
    sys.stdout.write(json.dumps(step) + "\n")
    sys.stdout.flush()
except BrokenPipeError:
    os._exit(1)
line = json.dumps({"index": i, "answer": step}) + "\n"
fd = os.open(os.environ["DECIDER_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, line.encode())
os.close(fd)
"#;

/// Kill the runner at random instants and at the loop's own crash points
/// (after the answer, after the journal objects, after the journal write,
/// and at the step's points), resuming on the same box or a fresh clone.
/// Trials: `GIT_STEPS_TRIALS` (default 40), seed `GIT_STEPS_SEED`.
#[test]
fn random_kills_never_re_ask_a_recorded_decision() {
    let (trials, seed) = trials_and_seed(40, 0x0dec_1de5);
    const STEPS: usize = 6;
    const POINTS: &[&str] = &[
        "decided",
        "journal-objects",
        "journal-pushed",
        "journaled",
        "before-write",
        "objects-written",
        "pushed",
        "ref-updated",
        "worktree-partial",
    ];
    let mut rng = Rng(seed | 1);
    let mut totals = (0u64, 0u64, 0u64, 0u64, 0u64); // kills, fresh boxes, calls, lost answers, runs
    for trial in 0..trials {
        let ctx = format!("trial {trial} seed {seed}");
        let t = TestRepo::new();
        let server = t.start_server(Kind::Path);
        t.steps(&["-q", "init", "--remote", server.url()]).ok();
        let script = t.home().join("decider.py");
        std::fs::write(&script, RANDOM_DECIDER).unwrap();
        let calls_log: PathBuf = t.home().join("calls.jsonl");
        let cmd = format!("python3 '{}'", script.display());
        let env = [
            ("DECIDER_STEPS", STEPS.to_string()),
            ("DECIDER_LOG", calls_log.display().to_string()),
        ];
        let mut box_ = t;
        // One to four runs that die — at a crash point of a random step,
        // or at a random instant — then one left to finish.
        let kills = 1 + rng.below(4);
        for attempt in 0..=kills {
            let mut c = std::process::Command::new(BIN);
            c.args(["-q", "run", "--decider", &cmd])
                .current_dir(&box_.work)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped());
            hermetic(&mut c, &box_.home());
            for (k, v) in &env {
                c.env(k, v);
            }
            let last = attempt == kills;
            let armed = !last && rng.below(2) == 0;
            if armed {
                let point = POINTS[rng.below(POINTS.len() as u64) as usize];
                let step = rng.below(STEPS as u64);
                c.env("GIT_STEPS_CRASH", format!("{point}@s{step}"));
            }
            let mut child = c.spawn().unwrap();
            if !last && !armed {
                std::thread::sleep(Duration::from_millis(rng.below(500)));
                let _ = child.kill();
            }
            let out = child.wait_with_output().unwrap();
            totals.4 += 1;
            if out.status.signal() == Some(9) {
                assert!(!last, "{ctx}: the last run was killed");
                totals.0 += 1;
            } else {
                assert_eq!(
                    out.status.code(),
                    Some(0),
                    "{ctx}: run failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            if !last && rng.below(2) == 0 {
                let fresh = box_.sibling(&format!("fresh-{attempt}"), Some(server.url()));
                fresh.steps(&["-q", "init", "--remote", "origin"]).ok();
                box_ = fresh;
                totals.1 += 1;
            }
        }
        // The receipts: each index exactly once, in order.
        let ids = server.step_ids();
        let want: Vec<String> = (0..STEPS).map(|i| format!("s{i}")).collect();
        assert_eq!(ids, want, "{ctx}: receipts");
        // The calls, per index, in order.
        let mut calls: BTreeMap<usize, Vec<Value>> = BTreeMap::new();
        let log = std::fs::read_to_string(&calls_log).unwrap();
        for l in log.lines() {
            let v: Value = serde_json::from_str(l).unwrap();
            calls
                .entry(v["index"].as_u64().unwrap() as usize)
                .or_default()
                .push(v["answer"].clone());
        }
        // The journal on the remote: recorded decisions per index.
        let jlog = server.git(&[
            "log",
            "--reverse",
            "--format=%H %(trailers:key=Journal-Index,valueonly,separator=) %(trailers:key=Journal-Status,valueonly,separator=)",
            "refs/steps/journal/main",
        ]);
        let mut recorded: BTreeMap<usize, Vec<Value>> = BTreeMap::new();
        for l in jlog.lines() {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f[2], "recorded", "{ctx}: a refusal in a clean run: {jlog}");
            let text = server.git(&["show", &format!("{}:decision.json", f[0])]);
            recorded
                .entry(f[1].parse().unwrap())
                .or_default()
                .push(serde_json::from_str(&text).unwrap());
        }
        let receipts = server.git(&[
            "log",
            "--reverse",
            "--format=%(trailers:key=Step-Decision,valueonly,separator=)",
            "main",
        ]);
        let receipts: Vec<&str> = receipts.lines().collect();
        for i in 0..STEPS {
            let rec = &recorded[&i];
            assert_eq!(rec.len(), 1, "{ctx}: index {i} recorded {} times: the decider was asked again after its answer was durable", rec.len());
            let asked = &calls[&i];
            assert_eq!(
                asked.last().unwrap(),
                &rec[0],
                "{ctx}: index {i}: the applied decision is not the last answer given"
            );
            // Every earlier answer for this index was lost before it was
            // recorded (it is not in the journal).
            for a in &asked[..asked.len() - 1] {
                assert_ne!(a, &rec[0], "{ctx}: index {i}");
            }
            totals.3 += asked.len() as u64 - 1;
            totals.2 += asked.len() as u64;
        }
        assert_eq!(receipts.len(), STEPS, "{ctx}");
        // The artifact equals the replay of the recorded decisions (and the
        // history fingerprint covers every receipt's digest).
        let replayed = TestRepo::new();
        let plan_lines: Vec<String> = (0..STEPS).map(|i| recorded[&i][0].to_string()).collect();
        let p = replayed.plan("replay.jsonl", &plan_lines);
        let doc = replayed
            .steps(&["--json", "apply", p.to_str().unwrap()])
            .ok()
            .json();
        let fresh = box_.sibling("audit", Some(server.url()));
        assert_eq!(
            independent_fingerprint(&fresh, "origin/main"),
            doc["data"]["artifact"],
            "{ctx}: artifact"
        );
        assert_eq!(
            independent_history(&fresh),
            doc["data"]["history"],
            "{ctx}: history"
        );
    }
    eprintln!(
        "agent random kills: {trials} trials, {} runs, {} killed, {} fresh boxes, {} decider calls for {} steps, {} answers lost before they were recorded, 0 re-asked",
        totals.4,
        totals.0,
        totals.1,
        totals.2,
        trials * STEPS as u64,
        totals.3
    );
    assert!(
        totals.0 > trials,
        "too few kills to test anything: {totals:?}"
    );
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

/// The journal travels with the run to every kind of server, through both
/// transports: a decision recorded on one box is applied, unasked, on a
/// fresh clone after the first box vanished.
#[test]
fn the_journal_is_durable_on_every_kind_of_server() {
    let plan = fixture("eight-steps.jsonl");
    let want = TestRepo::new()
        .steps(&["--json", "apply", plan.to_str().unwrap()])
        .ok()
        .json();
    for kind in crate::servers::ALL {
        for transport in ["libgit2", "git"] {
            let ctx = format!("{kind:?} {transport}");
            let t = TestRepo::new();
            let server = t.start_server(kind);
            t.steps(&[
                "-q",
                "init",
                "--remote",
                server.url(),
                "--transport",
                transport,
            ])
            .ok();
            let calls = t.home().join("calls");
            let cmd = format!("echo x >> '{}'; {}", calls.display(), replay(&plan));
            let r = t.steps_env(
                &["run", "--decider", &cmd],
                &[("GIT_STEPS_CRASH", "journaled@s5")],
            );
            assert_eq!(r.out.status.signal(), Some(9), "{ctx}: {}", r.explain());
            assert_eq!(
                server.git(&[
                    "log",
                    "-1",
                    "--format=%(trailers:key=Journal-Step-Id,valueonly,separator=)",
                    "refs/steps/journal/main"
                ]),
                "s5",
                "{ctx}: the decision is on the remote"
            );
            let fresh = t.sibling("fresh", Some(server.url()));
            fresh
                .steps(&["-q", "init", "--remote", "origin", "--transport", transport])
                .ok();
            let doc = fresh
                .steps(&["--json", "run", "--decider", &cmd])
                .ok()
                .json();
            let first = &doc["data"]["steps"][0];
            assert_eq!(first["step"], "s5", "{ctx}");
            assert_eq!(first["source"], "journal", "{ctx}");
            // 5 answers before the crash, then s6..s8 and done: s5 not again.
            assert_eq!(
                std::fs::read_to_string(&calls).unwrap().lines().count(),
                5 + 4,
                "{ctx}"
            );
            assert_eq!(server.step_ids(), plan_ids(&plan), "{ctx}");
            assert_eq!(doc["data"]["artifact"], want["data"]["artifact"], "{ctx}");
            assert_eq!(doc["data"]["history"], want["data"]["history"], "{ctx}");
        }
    }
}
