//! A decision with a receipt, or kept in the journal, is never asked for
//! again: a decider's answer becomes durable with its step (one push: the
//! receipt is the record); one whose step could not be built yet (an
//! untracked file in its way) is kept in the journal and applied on the
//! next run, on the same box or a fresh clone of any kind of server; and
//! random kills with a decider that answers differently on every call
//! never re-ask one.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::harness::*;
use crate::servers::Kind;

use super::{journal, replay};

/// Three steps, the third creating `c.txt`.
fn abc(t: &TestRepo) -> PathBuf {
    t.plan(
        "abc.jsonl",
        &[
            r#"{"id": "s1", "files": {"a.txt": "a\n"}}"#.to_string(),
            r#"{"id": "s2", "files": {"b.txt": "b\n"}}"#.to_string(),
            r#"{"id": "s3", "files": {"c.txt": "c\n"}, "message": "add c"}"#.to_string(),
        ],
    )
}

/// An answer whose step cannot be built yet (an untracked file stands where
/// it writes) is refused, kept in the journal, and applied by the next run
/// without asking; `status` shows it pending, `log` where it came from.
#[test]
fn a_kept_decision_is_applied_on_resume_without_asking_and_log_says_so() {
    let t = TestRepo::new();
    let plan = abc(&t);
    let calls = t.home().join("calls");
    let cmd = format!("echo x >> '{}'; {}", calls.display(), replay(&plan));
    std::fs::write(t.work.join("c.txt"), "mine\n").unwrap();
    t.steps(&["run", "--decider", &cmd])
        .code_is(3)
        .stderr_has("refused step s3: c.txt is in the worktree but not in the last step's tree");
    assert_eq!(std::fs::read_to_string(&calls).unwrap().lines().count(), 3);
    assert_eq!(
        journal(&[], &t),
        [(2, "s3".to_string(), "recorded".to_string())],
        "only the answer that could not be built is journaled"
    );
    assert_eq!(
        std::fs::read_to_string(t.work.join("c.txt")).unwrap(),
        "mine\n",
        "the untracked file is untouched"
    );
    let st = t.steps(&["status"]).ok().stdout();
    assert!(
        st.contains("step index 2 (s3) is RECORDED BUT NOT APPLIED"),
        "{st}"
    );
    let st = t.steps(&["--json", "status"]).ok().json();
    assert_eq!(st["data"]["journal"]["pending"]["step_id"], "s3");
    std::fs::remove_file(t.work.join("c.txt")).unwrap();
    let r = t.steps(&["run", "--decider", &cmd]).ok();
    assert!(
        r.stdout().contains("applied s3") && r.stdout().contains("[journal #2]"),
        "{}",
        r.stdout()
    );
    // s3 was not asked again: 3 calls before, then only "done".
    assert_eq!(
        std::fs::read_to_string(&calls).unwrap().lines().count(),
        3 + 1
    );
    let log = t.steps(&["log"]).ok().stdout();
    let s3 = log.lines().find(|l| l.contains(" s3 ")).unwrap();
    assert!(s3.contains("from the journal, on resume"), "{log}");
    let s2 = log.lines().find(|l| l.contains(" s2 ")).unwrap();
    assert!(s2.contains("[decider]"), "{log}");
    let doc = t.steps(&["--json", "log"]).ok().json();
    assert_eq!(doc["data"]["steps"][2]["source"], "journal");
    t.steps(&["verify", plan.to_str().unwrap()]).ok();
}

/// A box killed right after the remote accepted a step resumes without
/// asking for it: the receipt is the record. The next index's answer,
/// asked for while that push was in flight, is asked again only when the
/// kill came before it was kept on the box. Killed before that push, the
/// step's answer (asked ahead during the previous step's push, and kept on
/// this box as it arrived: issue 50 item 7) is applied without asking
/// again; either way one receipt per index.
#[test]
fn a_step_pushed_before_the_kill_is_not_asked_again() {
    let plan = fixture("eight-steps.jsonl");
    // At `pushed`, the call for s6 asked ahead may have started or not when
    // the kill lands (it runs on its own thread): one call more, or none.
    for (point, asked) in [
        ("pushed", 5 + 4..=5 + 1 + 4),
        ("objects-written", 5 + 4..=5 + 4),
        ("decided", 5 + 4..=5 + 4),
    ] {
        let t = TestRepo::new();
        let server = t.start_server(Kind::Path);
        t.steps(&["-q", "init", "--remote", server.url()]).ok();
        let calls = t.home().join("calls");
        let cmd = format!("echo x >> '{}'; {}", calls.display(), replay(&plan));
        let r = t.steps_env(
            &["run", "--decider", &cmd],
            &[("GIT_STEPS_CRASH", &format!("{point}@s5"))],
        );
        assert_eq!(r.out.status.signal(), Some(9), "{point}: {}", r.explain());
        t.steps(&["run", "--decider", &cmd]).ok();
        let calls = std::fs::read_to_string(&calls).unwrap().lines().count();
        let asked = if point == "pushed" {
            5 + 4..=5 + 1 + 4
        } else {
            asked
        };
        assert!(
            asked.contains(&calls),
            "{point}: {calls} decider calls (8 steps and done), expected {asked:?}"
        );
        assert_eq!(server.step_ids(), plan_ids(&plan), "{point}");
        assert!(journal(&[], &t).is_empty(), "{point}: nothing journaled");
    }
}

/// The decider for the random-kill test: a different answer on every
/// call, each call logged (index and answer) before it answers.
const RANDOM_DECIDER: &str = r#"
import json, os, random, subprocess, sys
ctx = json.load(sys.stdin)
i = ctx["step_index"]
if i >= int(os.environ["DECIDER_STEPS"]):
    print(json.dumps({"done": True}))
    sys.exit(0)
# Asked for an index whose receipt is durable already: written down.
ids = subprocess.run(
    ["git", "--git-dir", os.environ["DECIDER_SERVER"], "log",
     "--format=%(trailers:key=Step-Id,valueonly,separator=)", "main"],
    capture_output=True, text=True).stdout.split()
late = ("s%d" % i) in ids
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
line = json.dumps({"index": i, "answer": step, "late": late}) + "\n"
fd = os.open(os.environ["DECIDER_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, line.encode())
os.close(fd)
"#;

/// Kill the runner at random instants and at the loop's own crash points
/// (after the answer, and at the step's points), resuming on the same box
/// or a fresh clone. The decider checks the server at every call: asked
/// for an index whose receipt is already there is a failure.
/// Trials: `GIT_STEPS_TRIALS` (default 12; `scripts/soak.sh` runs more, over
/// several seeds), seed `GIT_STEPS_SEED`.
#[test]
fn random_kills_never_re_ask_a_recorded_decision() {
    let (trials, seed) = trials_and_seed(12, 0x0dec_1de5);
    const STEPS: usize = 6;
    const POINTS: &[&str] = &[
        "decided",
        "before-write",
        "objects-written",
        "pushed",
        "worktree-staged",
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
            ("DECIDER_SERVER", server.bare().display().to_string()),
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
        // The calls, per index, in order; none after its receipt was durable.
        let mut calls: BTreeMap<usize, Vec<Value>> = BTreeMap::new();
        let log = std::fs::read_to_string(&calls_log).unwrap();
        for l in log.lines() {
            let v: Value = serde_json::from_str(l).unwrap();
            assert_eq!(
                v["late"], false,
                "{ctx}: the decider was asked again after the step's receipt was durable: {l}"
            );
            calls
                .entry(v["index"].as_u64().unwrap() as usize)
                .or_default()
                .push(v["answer"].clone());
        }
        // Nothing journaled: every answer was applied or lost before its push.
        assert_eq!(
            server.git(&["for-each-ref", "refs/steps/journal/"]),
            "",
            "{ctx}: a journal entry in a clean run"
        );
        let receipts = server.git(&[
            "log",
            "--reverse",
            "--format=%(trailers:key=Step-Decision,valueonly,separator=)",
            "main",
        ]);
        let receipts: Vec<&str> = receipts.lines().collect();
        let digest = |v: &Value| {
            git_steps::plan::step::Step::parse(&v.to_string())
                .unwrap()
                .digest
        };
        let mut applied: BTreeMap<usize, Value> = BTreeMap::new();
        for i in 0..STEPS {
            let asked = &calls[&i];
            let last = asked.last().unwrap();
            assert_eq!(
                digest(last),
                receipts[i],
                "{ctx}: index {i}: the applied decision is not the last answer given"
            );
            // Every earlier answer for this index was lost before its push.
            for a in &asked[..asked.len() - 1] {
                assert_ne!(digest(a), receipts[i], "{ctx}: index {i}");
            }
            totals.3 += asked.len() as u64 - 1;
            totals.2 += asked.len() as u64;
            applied.insert(i, last.clone());
        }
        assert_eq!(receipts.len(), STEPS, "{ctx}");
        // The artifact equals the replay of the recorded decisions (and the
        // history fingerprint covers every receipt's digest).
        let replayed = TestRepo::new();
        let plan_lines: Vec<String> = (0..STEPS).map(|i| applied[&i].to_string()).collect();
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
        "agent random kills: {trials} trials, {} runs, {} killed, {} fresh boxes, {} decider calls for {} steps, {} answers lost before their push, 0 asked after it",
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

/// The journal travels with the run to every kind of server, through both
/// transports: a decision kept on one box (its step blocked there by an
/// untracked file) is applied, unasked, on a fresh clone after the first
/// box vanished.
#[test]
fn the_journal_is_durable_on_every_kind_of_server() {
    for kind in crate::servers::ALL {
        for transport in ["libgit2", "git"] {
            let ctx = format!("{kind:?} {transport}");
            let t = TestRepo::new();
            let plan = abc(&t);
            let want = TestRepo::new()
                .steps(&["--json", "apply", plan.to_str().unwrap()])
                .ok()
                .json();
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
            std::fs::write(t.work.join("c.txt"), "mine\n").unwrap();
            t.steps(&["run", "--decider", &cmd]).code_is(3);
            assert_eq!(
                server.git(&[
                    "log",
                    "-1",
                    "--format=%(trailers:key=Journal-Step-Id,valueonly,separator=)",
                    "refs/steps/journal/main"
                ]),
                "s3",
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
            assert_eq!(first["step"], "s3", "{ctx}");
            assert_eq!(first["source"], "journal", "{ctx}");
            // 3 answers on the first box, then only "done": s3 not again.
            assert_eq!(
                std::fs::read_to_string(&calls).unwrap().lines().count(),
                3 + 1,
                "{ctx}"
            );
            assert_eq!(server.step_ids(), plan_ids(&plan), "{ctx}");
            assert_eq!(doc["data"]["artifact"], want["data"]["artifact"], "{ctx}");
            assert_eq!(doc["data"]["history"], want["data"]["history"], "{ctx}");
        }
    }
}

/// The journal's own write boundaries (off the happy path: an answer whose
/// step is blocked by an untracked file is kept there). Killed at each,
/// then rerun once the way is clear: before the entry reached the remote
/// the answer is not durable, but this box kept it as it arrived (asked
/// ahead, during s2's push), so it is not asked again here either; after
/// it, the journal's entry is applied without asking. Either way each step
/// lands once and `verify` agrees.
#[test]
fn a_kill_at_each_journal_point_keeps_or_loses_the_answer_cleanly() {
    for (point, asked_again) in [
        ("journal-objects", false),
        ("journal-pushed", false),
        ("journaled", false),
    ] {
        let t = TestRepo::new();
        let server = t.start_server(Kind::Path);
        t.steps(&["-q", "init", "--remote", server.url()]).ok();
        let plan = abc(&t);
        let calls = t.home().join("calls");
        let cmd = format!("echo x >> '{}'; {}", calls.display(), replay(&plan));
        std::fs::write(t.work.join("c.txt"), "mine\n").unwrap();
        let r = t.steps_env(
            &["run", "--decider", &cmd],
            &[("GIT_STEPS_CRASH", &format!("{point}@s3"))],
        );
        assert_eq!(r.out.status.signal(), Some(9), "{point}: {}", r.explain());
        std::fs::remove_file(t.work.join("c.txt")).unwrap();
        t.steps(&["run", "--decider", &cmd]).ok();
        assert_eq!(
            std::fs::read_to_string(&calls).unwrap().lines().count(),
            3 + usize::from(asked_again) + 1,
            "{point}: decider calls"
        );
        assert_eq!(server.step_ids(), plan_ids(&plan), "{point}");
        t.steps(&["verify"]).ok();
    }
}

/// Issue 50 item 7: the answer asked ahead (for s3, during s2's push) is
/// kept on the box as soon as it arrives. Killed right then, the same box
/// resumes without asking for s3 again (one paid call saved per crash); a
/// fresh box, which never had it, asks again. Each step lands once.
#[test]
fn an_answer_asked_ahead_survives_a_kill_on_its_box() {
    let plan = fixture("eight-steps.jsonl");
    for vanish in [false, true] {
        let t = TestRepo::new();
        let server = t.start_server(Kind::Path);
        t.steps(&["-q", "init", "--remote", server.url()]).ok();
        let calls = t.home().join("calls");
        let cmd = format!("echo x >> '{}'; {}", calls.display(), replay(&plan));
        let r = t.steps_env(
            &["run", "--decider", &cmd],
            &[("GIT_STEPS_CRASH", "ahead-kept@s3")],
        );
        assert_eq!(r.out.status.signal(), Some(9), "{}", r.explain());
        assert_eq!(
            std::fs::read_to_string(&calls).unwrap().lines().count(),
            3,
            "s1, s2, and s3 asked ahead"
        );
        let fresh;
        let resumed = if vanish {
            fresh = t.sibling("fresh", Some(server.url()));
            fresh.steps(&["-q", "init", "--remote", server.url()]).ok();
            &fresh
        } else {
            &t
        };
        let r = resumed.steps(&["run", "--decider", &cmd]).ok();
        let total = std::fs::read_to_string(&calls).unwrap().lines().count();
        // s4..s8 and done: 6 more; a fresh box asks for s3 too.
        assert_eq!(
            total,
            3 + 6 + usize::from(vanish),
            "vanish={vanish}: {}",
            r.explain()
        );
        assert_eq!(
            r.stderr()
                .contains("was asked ahead before the last run stopped, and kept on this box"),
            !vanish,
            "{}",
            r.explain()
        );
        assert_eq!(server.step_ids(), plan_ids(&plan), "vanish={vanish}");
        resumed.steps(&["verify", plan.to_str().unwrap()]).ok();
        // A finished run keeps nothing asked ahead.
        assert!(!resumed
            .path(".git/steps/ahead")
            .read_dir()
            .is_ok_and(|mut d| d.next().is_some()));
    }
}
