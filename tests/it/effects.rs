//! Issue 35: effects beyond the artifact. A step's HTTP requests and
//! commands are recorded in its own commit, delivered once it is durable
//! with the key `<run>/<step id>/<n>`, their outcomes recorded on
//! `refs/steps/effects/<run>`; kills at every point deliver each effect at
//! least once and never before its step is durable; a failing receiver is
//! retried, then its failure recorded and redelivered by the rerun alone;
//! `undo` compensates. Checked against a receiving server on 127.0.0.1 and
//! with plain `git`.

use std::collections::{BTreeSet, HashMap};
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::*;
use crate::receiver::{Behaviour, Receiver};

/// A plan of three steps: s1 opens a "pull request" and runs a command
/// (with compensations), s2 has no effect, s3 posts a comment.
fn plan(t: &TestRepo, r: &Receiver) -> std::path::PathBuf {
    t.plan(
        "effects.jsonl",
        &[
            line(json!({
                "id": "s1", "files": {"src/a.txt": "one\n"}, "message": "add a, open the PR",
                "effects": [
                    {"http": {"method": "POST", "url": r.url("/pulls"),
                              "headers": {"Accept": "application/json"},
                              "body": {"title": "add a", "head": "main"}},
                     "compensate": {"http": {"method": "PATCH", "url": r.url("/pulls/close"), "body": {"state": "closed"}}}},
                    {"command": ["sh", "-c", "echo \"$GIT_STEPS_IDEMPOTENCY_KEY\" >> ../commands.log"]}
                ]
            })),
            line(json!({"id": "s2", "files": {"src/b.txt": "two\n"}})),
            line(json!({
                "id": "s3", "files": {"src/a.txt": "one\nmore\n"},
                "effects": [{"http": {"method": "POST", "url": r.url("/comments"), "body": "looks good"}}]
            })),
        ],
    )
}

/// Every key the plan's effects carry on run `main`.
fn keys() -> BTreeSet<String> {
    ["main/s1/1", "main/s1/2", "main/s3/1"]
        .into_iter()
        .map(str::to_string)
        .collect()
}

/// Keys the command effect wrote (its environment variable), one a line.
fn command_keys(t: &TestRepo) -> Vec<String> {
    std::fs::read_to_string(t.tmp.path().join("commands.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Step ids on the bare remote's `main`, oldest first (plain git).
fn durable_steps(t: &TestRepo, bare: &std::path::Path) -> Vec<String> {
    let r = t.git(&[
        "--git-dir",
        bare.to_str().unwrap(),
        "log",
        "--reverse",
        "--format=%(trailers:key=Step-Id,valueonly)",
        "main",
    ]);
    r.stdout()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// (key, status) of every outcome on the bare remote, oldest first.
fn outcomes(t: &TestRepo, bare: &std::path::Path) -> Vec<(String, String)> {
    let r = t.git(&[
        "--git-dir",
        bare.to_str().unwrap(),
        "log",
        "--reverse",
        "--format=%(trailers:key=Effect-Key,valueonly,separator=)|%(trailers:key=Effect-Status,valueonly,separator=)",
        "refs/steps/effects/main",
    ]);
    if !r.out.status.success() {
        return Vec::new();
    }
    r.stdout()
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (k, s) = l.split_once('|').unwrap();
            (k.to_string(), s.to_string())
        })
        .collect()
}

#[test]
fn effects_are_recorded_with_their_step_delivered_once_and_audited_with_git() {
    let r = Receiver::start();
    let t = TestRepo::new();
    let bare = t.with_local_bare();
    let p = plan(&t, &r);
    let doc = t
        .steps(&["--json", "apply", p.to_str().unwrap()])
        .ok()
        .json();
    let delivered: Vec<&str> = doc["data"]["effects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["key"].as_str().unwrap())
        .collect();
    assert_eq!(delivered, ["main/s1/1", "main/s1/2", "main/s3/1"], "{doc}");

    // The receiver saw each request once, with its key, method and body.
    let got = r.deliveries();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].key.as_deref(), Some("main/s1/1"));
    assert_eq!(
        (got[0].method.as_str(), got[0].path.as_str()),
        ("POST", "/pulls")
    );
    let body: Value = serde_json::from_str(&got[0].body).unwrap();
    assert_eq!(body, json!({"title": "add a", "head": "main"}));
    assert_eq!(got[0].content_type.as_deref(), Some("application/json"));
    assert!(got[0]
        .headers
        .iter()
        .any(|(k, v)| k == "Accept" && v == "application/json"));
    assert_eq!(got[1].key.as_deref(), Some("main/s3/1"));
    assert_eq!(got[1].body, "looks good");
    assert_eq!(
        got[1].content_type.as_deref(),
        Some("text/plain; charset=utf-8")
    );
    // The command got its key in the environment, in the worktree.
    assert_eq!(command_keys(&t), ["main/s1/2"]);

    // Plain git: the step's commit carries its effects above the trailers
    // and counts them in a trailer git reads.
    let count = t.git_out(&[
        "log",
        "--reverse",
        "--format=%(trailers:key=Step-Effects,valueonly,separator=)|",
        "main",
    ]);
    assert_eq!(
        count.split('|').map(str::trim).collect::<Vec<_>>(),
        ["2", "", "1", ""]
    );
    let body = t.git_out(&["log", "-1", "--format=%b", "main~2"]);
    assert!(body.contains("effect 1: {\"compensate\""), "{body}");
    assert!(body.contains("effect 2: {\"command\":[\"sh\""), "{body}");
    // The outcomes, on the durable remote, by compare-and-swap.
    assert_eq!(
        outcomes(&t, &bare),
        [
            ("main/s1/1".to_string(), "delivered".to_string()),
            ("main/s1/2".into(), "delivered".into()),
            ("main/s3/1".into(), "delivered".into()),
        ]
    );
    let receipt = t.git_out(&["rev-parse", "main~2"]);
    let first = t.git_out(&[
        "--git-dir",
        bare.to_str().unwrap(),
        "log",
        "--reverse",
        "--format=%(trailers:key=Effect-Receipt,valueonly,separator=)|%(trailers:key=Effect-Result,valueonly,separator=)",
        "refs/steps/effects/main",
    ]);
    assert_eq!(
        first.lines().next().unwrap(),
        format!("{}|HTTP 201", receipt.trim())
    );

    // `effects` lists them; `verify` agrees.
    let list = t.steps(&["--json", "effects"]).ok().json();
    let states: Vec<(&str, &str)> = list["data"]["effects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["key"].as_str().unwrap(), e["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        [
            ("main/s1/1", "delivered"),
            ("main/s1/2", "delivered"),
            ("main/s3/1", "delivered")
        ]
    );
    assert_eq!(
        list["data"]["effects"][0]["compensate"],
        "PATCH ".to_string() + &r.url("/pulls/close")
    );
    let human = t.steps(&["effects"]).ok().stdout();
    assert!(
        human.contains("3 delivered, 0 pending, 0 failed"),
        "{human}"
    );
    t.steps(&["verify", p.to_str().unwrap()]).ok();

    // The rerun delivers nothing again.
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    t.steps(&["resume"]).ok();
    assert_eq!(r.deliveries().len(), 2);
    assert_eq!(command_keys(&t).len(), 1);
}

/// The points a step with effects passes with a local bare remote, in order.
const POINTS: [&str; 15] = [
    "before-write",
    "objects-written",
    "update-noted",
    "push-sent",
    "pushed",
    "tracking-updated",
    "worktree-staged",
    "ref-updated",
    "worktree-partial",
    "worktree-files",
    "worktree-done",
    "effect-start",
    "effect-try-noted",
    "effect-delivered",
    "effect-recorded",
];

/// Kill at every point of every step with effects, resume on the same box
/// or a fresh clone: every effect is delivered at least once, a receiver
/// that honours keys applies each exactly once, and at the moment of every
/// kill no effect has reached the receiver for a step the remote lacks.
#[test]
fn a_kill_at_every_point_delivers_each_effect_at_least_once_and_never_early() {
    let r = Receiver::start();
    let mut rows = 0;
    let mut twice = 0;
    for step in ["s1", "s3"] {
        for point in POINTS {
            for vanish in [false, true] {
                let ctx = format!(
                    "kill at {point}@{step}, box {}",
                    if vanish { "vanishes" } else { "survives" }
                );
                r.clear();
                let t = TestRepo::new();
                let bare = t.with_local_bare();
                let p = plan(&t, &r);
                let crash = format!("{point}@{step}");
                let killed = t.steps_env(
                    &["apply", p.to_str().unwrap()],
                    &[("GIT_STEPS_CRASH", &crash)],
                );
                assert!(
                    killed.out.status.signal() == Some(9),
                    "{ctx}: the crash point did not fire\n{}",
                    killed.explain()
                );
                // Never early: every key delivered so far is of a durable step.
                let durable = durable_steps(&t, &bare);
                for d in r.deliveries() {
                    let key = d.key.unwrap_or_default();
                    let id = key.split('/').nth(1).unwrap_or_default().to_string();
                    assert!(
                        durable.contains(&id),
                        "{ctx}: {key} delivered before step {id} was durable ({durable:?})"
                    );
                }
                for key in command_keys(&t) {
                    let id = key.split('/').nth(1).unwrap_or_default().to_string();
                    assert!(durable.contains(&id), "{ctx}: command {key} ran early");
                }
                let resumed = if vanish {
                    let fresh = t.sibling("fresh", Some(bare.to_str().unwrap()));
                    fresh.steps(&["-q", "init", "--remote", "origin"]).ok();
                    fresh
                } else {
                    t
                };
                let done = resumed.steps(&["apply", p.to_str().unwrap()]);
                assert_eq!(done.code(), Some(0), "{ctx}\n{}", done.explain());
                // At least once each, applied once each.
                let mut counts = r.counts();
                for k in command_keys(&resumed) {
                    *counts.entry(k).or_insert(0) += 1;
                }
                // The fresh box's command log is beside the old one.
                let got: BTreeSet<String> = counts.keys().cloned().collect();
                assert_eq!(got, keys(), "{ctx}: {counts:?}");
                let applied: HashMap<String, usize> = r.applied();
                assert!(applied.values().all(|&n| n == 1), "{ctx}: {applied:?}");
                assert!(
                    counts.values().all(|&n| (1..=2).contains(&n)),
                    "{ctx}: {counts:?}"
                );
                twice += counts.values().filter(|&&n| n == 2).count();
                // The outcomes: one delivered per key, on the remote.
                let recorded: BTreeSet<String> = outcomes(&resumed, &bare)
                    .into_iter()
                    .filter(|(_, s)| s == "delivered")
                    .map(|(k, _)| k)
                    .collect();
                assert_eq!(recorded, keys(), "{ctx}");
                assert_eq!(
                    outcomes(&resumed, &bare).len(),
                    3,
                    "{ctx}: one outcome each"
                );
                resumed.steps(&["verify", p.to_str().unwrap()]).ok();
                rows += 1;
            }
        }
    }
    assert_eq!(rows, 2 * POINTS.len() * 2);
    // A kill between a delivery and its record delivers again, with the
    // same key (at effect-delivered: both boxes, both steps).
    assert!(twice >= 4, "{twice}");
}

/// Without a remote the local repository is the durable domain: a step is
/// durable once its ref update is fsynced, and so is an outcome. A kill
/// around an effect's record, and the rerun, on the box itself.
#[test]
fn without_a_remote_the_outcomes_are_recorded_locally() {
    let r = Receiver::start();
    for point in [
        "effect-start",
        "effect-try-noted",
        "effect-delivered",
        "effect-recorded",
        "worktree-done",
    ] {
        r.clear();
        let t = TestRepo::new();
        let p = plan(&t, &r);
        let killed = t.steps_env(
            &["apply", p.to_str().unwrap()],
            &[("GIT_STEPS_CRASH", &format!("{point}@s3"))],
        );
        assert_eq!(
            killed.out.status.signal(),
            Some(9),
            "{point}: {}",
            killed.explain()
        );
        let done = t.steps(&["--json", "apply", p.to_str().unwrap()]);
        assert_eq!(done.code(), Some(0), "{point}: {}", done.explain());
        let counts = r.counts();
        assert_eq!(counts.len(), 2, "{point}: {counts:?}");
        assert_eq!(counts["main/s1/1"], 1, "{point}");
        let s3 = counts["main/s3/1"];
        assert_eq!(
            s3,
            if point == "effect-delivered" { 2 } else { 1 },
            "{point}"
        );
        // Issue 50: the outcome counts every try this box started, a try a
        // kill cut short included (the receiver saw s3 twice at
        // effect-delivered; at effect-try-noted a try was counted and
        // never sent).
        let listed = t.steps(&["--json", "effects"]).ok().json();
        let tries = listed["data"]["effects"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["key"] == "main/s3/1")
            .unwrap_or_else(|| panic!("{listed}"))["tries"]
            .clone();
        let want = match point {
            "effect-delivered" | "effect-try-noted" => 2,
            _ => 1,
        };
        assert_eq!(tries, want, "{point}: {listed}");
        let listed = t.git_out(&[
            "log",
            "--format=%(trailers:key=Effect-Key,valueonly,separator=)",
            "refs/steps/effects/main",
        ]);
        assert_eq!(
            listed.lines().filter(|l| !l.is_empty()).count(),
            3,
            "{point}: {listed}"
        );
        t.steps(&["verify", p.to_str().unwrap()]).ok();
    }
}

/// Two writers of the outcomes on one box, without a remote. A run is held
/// before its last delivery: `effects --abandon` waits for its lock (exit
/// 4), and a hand rewind of the outcomes ref (`git update-ref`) makes the
/// run's compare-and-swap lose: exit 4 (SPEC: another writer; it was exit
/// 1), naming the ref and that the delivered effect goes again with its
/// key. Nothing is overwritten, and the rerun delivers what the rewound
/// ref no longer records, with the same keys.
#[test]
fn a_second_writer_of_the_outcomes_without_a_remote_is_exit_4_and_loses_nothing() {
    let r = Receiver::start();
    let t = TestRepo::new();
    let p = plan(&t, &r);
    let gate = t.tmp.path().join("gate");
    std::fs::create_dir_all(&gate).unwrap();
    let mut cmd = t.steps_command(&["apply", p.to_str().unwrap()]);
    cmd.env(
        "GIT_STEPS_PAUSE",
        format!("effect-start@s3:{}", gate.display()),
    )
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    wait_for(&gate.join("reached"), "apply at effect-start@s3");
    let busy = t.steps(&["effects", "--abandon", "main/s3/1"]);
    assert_eq!(busy.code(), Some(4), "{}", busy.explain());
    let first = t.git_out(&["rev-parse", "refs/steps/effects/main~1"]);
    t.git(&["update-ref", "refs/steps/effects/main", first.trim()])
        .ok();
    std::fs::write(gate.join("go"), b"").unwrap();
    let lost = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&lost.stderr);
    assert_eq!(lost.status.code(), Some(4), "{err}");
    assert!(
        err.contains("refs/steps/effects/main moved")
            && err.contains("main/s3/1")
            && err.contains("delivers it again with the same key"),
        "{err}"
    );
    assert_eq!(
        t.git_out(&["rev-parse", "refs/steps/effects/main"]).trim(),
        first.trim(),
        "the rewound ref is left as the other writer left it"
    );
    let done = t.steps(&["apply", p.to_str().unwrap()]);
    assert_eq!(done.code(), Some(0), "{}", done.explain());
    let counts = r.counts();
    assert_eq!(counts["main/s1/1"], 1, "{counts:?}");
    assert_eq!(counts["main/s3/1"], 2, "{counts:?}");
    assert_eq!(command_keys(&t), ["main/s1/2", "main/s1/2"]);
    let states = t.git_out(&[
        "log",
        "--reverse",
        "--format=%(trailers:key=Effect-Key,valueonly,separator=) %(trailers:key=Effect-Status,valueonly,separator=)",
        "refs/steps/effects/main",
    ]);
    assert_eq!(
        states
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect::<Vec<_>>(),
        [
            "main/s1/1 delivered",
            "main/s1/2 delivered",
            "main/s3/1 delivered"
        ],
        "{states}"
    );
}

#[test]
fn a_failing_receiver_is_retried_with_backoff_then_recorded_and_the_rerun_redelivers_only_it() {
    let r = Receiver::start();
    let t = TestRepo::new();
    let bare = t.with_local_bare();
    t.git(&["config", "steps.effectRetries", "3"]).ok();
    r.set(
        "/flaky",
        Behaviour {
            status: Some(503),
            ..Default::default()
        },
    );
    let p = t.plan(
        "p.jsonl",
        &[
            line(json!({"id": "s1", "files": {"a": "1\n"}, "effects": [
                {"http": {"method": "POST", "url": r.url("/ok")}},
                {"http": {"method": "PUT", "url": r.url("/flaky"), "body": {"n": 1}}},
                {"http": {"method": "POST", "url": r.url("/after")}}
            ]})),
            line(json!({"id": "s2", "files": {"b": "2\n"}})),
        ],
    );
    let failed = t.steps(&["apply", p.to_str().unwrap()]);
    assert_eq!(failed.code(), Some(1), "{}", failed.explain());
    let err = failed.stderr();
    for needle in [
        "step s1: effect 2",
        &format!("PUT {}", r.url("/flaky")),
        "key main/s1/2",
        "failed after 3 tries",
        "503",
        "the step itself is durable",
        "rerun the same command",
    ] {
        assert!(err.contains(needle), "{needle:?} missing\n{err}");
    }
    // The step is durable; the run stopped before s2.
    assert_eq!(durable_steps(&t, &bare), ["s1"]);
    let by_path = |path: &str| {
        r.deliveries()
            .into_iter()
            .filter(|d| d.path == path)
            .collect::<Vec<_>>()
    };
    assert_eq!(by_path("/ok").len(), 1);
    let flaky = by_path("/flaky");
    assert_eq!(flaky.len(), 3, "3 tries");
    assert!(flaky.iter().all(|d| d.key.as_deref() == Some("main/s1/2")));
    // Backoff: 0.5 s, then 1 s, jittered: at least half of each (less a
    // little for the clock), so tries are spaced, not hammered.
    let gaps: Vec<Duration> = flaky.windows(2).map(|w| w[1].at - w[0].at).collect();
    assert!(gaps[0] >= Duration::from_millis(225), "{gaps:?}");
    assert!(gaps[1] >= Duration::from_millis(475), "{gaps:?}");
    assert!(by_path("/after").is_empty(), "nothing after the failure");
    assert_eq!(
        outcomes(&t, &bare),
        [
            ("main/s1/1".to_string(), "delivered".to_string()),
            ("main/s1/2".into(), "failed".into())
        ]
    );
    let list = t.steps(&["--json", "effects"]).ok().json();
    let e = &list["data"]["effects"][1];
    assert_eq!(
        (
            e["state"].as_str(),
            e["tries"].as_u64(),
            e["result"].as_str()
        ),
        (Some("failed"), Some(3), Some("HTTP 503")),
        "{list}"
    );
    assert_eq!(list["data"]["effects"][2]["state"], "pending");
    let human = t.steps(&["effects"]).ok().stdout();
    assert!(
        human.contains("1 delivered, 1 pending, 1 failed"),
        "{human}"
    );
    // `status`, the first thing a user runs after a stop, counts them too.
    let st = t.steps(&["--json", "status"]).ok().json();
    let e = &st["data"]["effects"];
    assert_eq!(
        [&e["total"], &e["delivered"], &e["pending"], &e["failed"]],
        [3, 1, 1, 1],
        "{st}"
    );
    let human = t.steps(&["status"]).ok().stdout();
    assert!(
        human.contains("effects:       1 of 3 delivered, 1 pending, 1 failed; the next `apply`"),
        "{human}"
    );
    // Another box, set up now, reads the same outcomes.
    let other = t.sibling("other", Some(bare.to_str().unwrap()));
    other.steps(&["-q", "init", "--remote", "origin"]).ok();
    let human = other.steps(&["status"]).ok().stdout();
    assert!(
        human.contains("effects:       1 of 3 delivered, 1 pending, 1 failed"),
        "{human}"
    );

    // The receiver recovers after two more 503s: the rerun delivers the
    // failed effect (same key) and the pending one, never the delivered one.
    r.set(
        "/flaky",
        Behaviour {
            fail_first: 5,
            ..Default::default()
        },
    );
    let again = t
        .steps(&["--json", "apply", p.to_str().unwrap()])
        .ok()
        .json();
    assert_eq!(
        by_path("/ok").len(),
        1,
        "a delivered effect is not repeated"
    );
    assert_eq!(by_path("/flaky").len(), 6);
    assert_eq!(by_path("/after").len(), 1);
    let tries: Vec<(String, u64)> = again["data"]["effects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["key"].as_str().unwrap().to_string(),
                e["tries"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        tries,
        [("main/s1/2".to_string(), 3), ("main/s1/3".to_string(), 1)]
    );
    assert_eq!(durable_steps(&t, &bare), ["s1", "s2"]);
    t.steps(&["verify", p.to_str().unwrap()]).ok();
    let human = t.steps(&["status"]).ok().stdout();
    assert!(
        human.contains("effects:       3 of 3 delivered, 0 pending, 0 failed\n"),
        "{human}"
    );
    // The other box has not fetched the newer outcomes: `status` (which
    // writes nothing) says so and gives no stale counts; `effects` fetches.
    let human = other.steps(&["status"]).ok().stdout();
    assert!(
        human.contains("effects:       3 (their recorded outcomes are not on this box yet"),
        "{human}"
    );
    let human = other.steps(&["effects"]).ok().stdout();
    assert!(
        human.contains("3 delivered, 0 pending, 0 failed"),
        "{human}"
    );
    let human = other.steps(&["status"]).ok().stdout();
    assert!(
        human.contains("effects:       3 of 3 delivered, 0 pending, 0 failed\n"),
        "{human}"
    );
}

#[test]
fn a_receiver_that_times_out_is_tried_again_with_the_same_key() {
    let r = Receiver::start();
    let t = TestRepo::new();
    t.with_local_bare();
    t.git(&["config", "steps.effectTimeout", "1"]).ok();
    r.set(
        "/slow",
        Behaviour {
            delay: Duration::from_secs(3),
            delay_first: 1,
            ..Default::default()
        },
    );
    let p = t.plan(
        "p.jsonl",
        &[line(json!({"id": "s1", "files": {"a": "1\n"}, "effects": [
            {"http": {"method": "POST", "url": r.url("/slow")}}
        ]}))],
    );
    let start = Instant::now();
    let doc = t
        .steps(&["--json", "apply", p.to_str().unwrap()])
        .ok()
        .json();
    assert!(start.elapsed() < Duration::from_secs(20));
    let e = &doc["data"]["effects"][0];
    assert_eq!(
        (e["status"].as_str(), e["tries"].as_u64()),
        (Some("delivered"), Some(2)),
        "{doc}"
    );
    let got = r.deliveries();
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|d| d.key.as_deref() == Some("main/s1/1")));
    // Applied once: the receiver honoured the key.
    assert_eq!(r.applied().get("main/s1/1"), Some(&1));
}

#[test]
fn a_command_that_fails_is_recorded_and_named() {
    let t = TestRepo::new();
    let bare = t.with_local_bare();
    t.git(&["config", "steps.effectRetries", "2"]).ok();
    let p = t.plan(
        "p.jsonl",
        &[line(json!({"id": "s1", "files": {"a": "1\n"}, "effects": [
            {"command": ["sh", "-c", "echo no such ticket >&2; exit 7"]}
        ]}))],
    );
    let r = t.steps(&["apply", p.to_str().unwrap()]);
    assert_eq!(r.code(), Some(1), "{}", r.explain());
    let err = r.stderr();
    assert!(err.contains("effect 1 (command sh -c"), "{err}");
    assert!(err.contains("failed after 2 tries"), "{err}");
    assert!(err.contains("no such ticket"), "{err}");
    assert_eq!(
        outcomes(&t, &bare),
        [("main/s1/1".to_string(), "failed".to_string())]
    );
}

#[test]
fn bad_effects_are_refused_naming_the_step_and_nothing_is_written() {
    let r = Receiver::start();
    let t = TestRepo::new();
    let bare = t.with_local_bare();
    let cases: Vec<(Value, &str)> = vec![
        (
            json!([{"http": {"method": "POST", "url": "ftp://example.com/x"}}]),
            "scheme `ftp`",
        ),
        (
            json!([{"http": {"method": "POST", "url": "file:///etc/passwd"}}]),
            "scheme `file`",
        ),
        (
            json!([{"command": "gh pr create --fill"}]),
            "argv array, not a shell string",
        ),
        (json!([{"command": [["gh"]]}]), "must be a string"),
        (
            json!([{"http": {"method": "POST", "url": r.url("/x"), "body": 42}}]),
            "text (a string) or JSON",
        ),
        (
            json!([{"http": {"method": "POST", "url": r.url("/x"), "body": true}}]),
            "text (a string) or JSON",
        ),
        (
            json!([{"http": {"method": "POST", "url": "https://user:secret@forge.example/x"}}]),
            "credentials",
        ),
        (
            json!([{"http": {"method": "POST", "url": r.url("/x"), "headers": {"Idempotency-Key": "mine"}}}]),
            "set by git-steps",
        ),
        (json!({"http": {}}), "must be an array"),
    ];
    for (effects, needle) in cases {
        let p = t.plan(
            "bad.jsonl",
            &[line(
                json!({"id": "bad", "files": {"a": "1\n"}, "effects": effects}),
            )],
        );
        t.refuses(needle, 1, &["bad", needle], || {
            t.steps(&["apply", p.to_str().unwrap()])
        });
    }
    assert!(r.deliveries().is_empty());
    assert!(durable_steps(&t, &bare).is_empty());

    // A step already applied, given again with effects added: otherwise a
    // redelivery, so named as such (and refused as another decision).
    let p = t.plan(
        "ok.jsonl",
        &[line(json!({"id": "s1", "files": {"a": "1\n"}}))],
    );
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    let with = t.plan(
        "with.jsonl",
        &[line(json!({"id": "s1", "files": {"a": "1\n"}, "effects": [{"http": {"method": "POST", "url": r.url("/x")}}]}))],
    );
    t.refuses(
        "effects added",
        3,
        &[
            "s1",
            "already applied without effects",
            "1 effect(s) added",
            "new step",
        ],
        || t.steps(&["apply", with.to_str().unwrap()]),
    );
    // The same inside one plan.
    let twice = t.plan(
        "twice.jsonl",
        &[
            line(json!({"id": "s9", "files": {"z": "1\n"}})),
            line(json!({"id": "s9", "files": {"z": "1\n"}, "effects": [{"command": ["true"]}]})),
        ],
    );
    t.refuses(
        "in one plan",
        3,
        &[
            "s9",
            "with 1 effect(s) added",
            "otherwise it is a redelivery",
        ],
        || t.steps(&["apply", twice.to_str().unwrap()]),
    );
    assert!(r.deliveries().is_empty());
    let none = t.git(&[
        "--git-dir",
        bare.to_str().unwrap(),
        "rev-parse",
        "-q",
        "--verify",
        "refs/steps/effects/main",
    ]);
    assert_eq!(none.code(), Some(1), "no outcome was recorded");
}

#[test]
fn undo_dispatches_the_compensations_of_the_steps_it_undoes() {
    let r = Receiver::start();
    let t = TestRepo::new();
    let bare = t.with_local_bare();
    let p = plan(&t, &r);
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    r.clear();
    t.steps(&["undo", "--last", "1"]).ok();
    // s3 undone: its effect has no compensation.
    assert!(r.deliveries().is_empty(), "{:?}", r.deliveries());
    t.steps(&["undo", "--last", "4", "--id", "back-to-start"])
        .ok();
    let got = r.deliveries();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0].method.as_str(), got[0].path.as_str()),
        ("PATCH", "/pulls/close")
    );
    assert_eq!(got[0].key.as_deref(), Some("main/back-to-start/1"));
    assert_eq!(
        serde_json::from_str::<Value>(&got[0].body).unwrap(),
        json!({"state": "closed"})
    );
    // The undo step carries it as its own effect, recorded and delivered.
    let last = t.git_out(&["log", "-1", "--format=%(trailers:key=Step-Effects,valueonly,separator=)|%(trailers:key=Step-Undo,valueonly,separator=+)"]);
    assert_eq!(last.trim(), "1|s1+s2+s3+undo:s2");
    assert!(outcomes(&t, &bare)
        .contains(&("main/back-to-start/1".to_string(), "delivered".to_string())));
    // A rerun of the same undo compensates nothing again.
    t.steps(&["undo", "--last", "4", "--id", "back-to-start"])
        .ok();
    assert_eq!(r.deliveries().len(), 1);
}

#[test]
fn a_forged_outcome_for_no_durable_step_fails_verify() {
    let r = Receiver::start();
    let t = TestRepo::new();
    t.with_local_bare();
    let p = plan(&t, &r);
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    t.steps(&["verify"]).ok();
    let tree = t.git_out(&["hash-object", "-w", "-t", "tree", "/dev/null"]);
    let parent = t.git_out(&["rev-parse", "refs/steps/effects/main"]);
    let msg = format!(
        "effect main/ghost/1: delivered (HTTP 201)\n\nEffect-Key: main/ghost/1\nEffect-Step: ghost\nEffect-Number: 1\nEffect-Receipt: {}\nEffect-Status: delivered\nEffect-Result: HTTP 201\nEffect-Tries: 1\n",
        "1".repeat(40)
    );
    let forged = t.run_cmd(
        {
            let mut c = std::process::Command::new("git");
            c.args(["commit-tree", tree.trim(), "-p", parent.trim(), "-F", "-"])
                .current_dir(&t.work);
            hermetic(&mut c, &t.home());
            c
        },
        "git commit-tree".into(),
        Some(msg.as_bytes()),
    );
    let forged = forged.stdout().trim().to_string();
    t.git(&["update-ref", "refs/steps/effects/main", &forged])
        .ok();
    let v = t.steps(&["verify"]);
    assert_eq!(v.code(), Some(3), "{}", v.explain());
    assert!(
        v.stdout().contains("main/ghost/1") || v.stderr().contains("main/ghost/1"),
        "{}",
        v.explain()
    );
    assert!(
        v.explain().contains("belongs to no durable step"),
        "{}",
        v.explain()
    );
}

/// Random kills (SIGKILL at any instant, not only at named points) of runs
/// with effects, on the same box or a fresh clone: never early, at least
/// once, applied once. Trials: `GIT_STEPS_TRIALS` (default 12).
#[test]
fn random_kills_with_effects_deliver_each_once_to_an_honouring_receiver() {
    let (trials, seed) = trials_and_seed(12, 0xeffe_c7ed);
    let r = Receiver::start();
    let mut rng = Rng(seed);
    // An uninterrupted run's length, to aim the kills.
    let t0 = TestRepo::new();
    t0.with_local_bare();
    let p0 = plan(&t0, &r);
    let start = Instant::now();
    t0.steps(&["apply", p0.to_str().unwrap()]).ok();
    let span = start.elapsed().as_micros() as u64;
    for trial in 0..trials {
        let ctx = format!("trial {trial} seed {seed:#x}");
        r.clear();
        let t = TestRepo::new();
        let bare = t.with_local_bare();
        let p = plan(&t, &r);
        let mut box_ = t;
        for n in 0..1 + rng.below(3) {
            let mut child = box_.spawn_steps(&["apply", p.to_str().unwrap()]);
            std::thread::sleep(Duration::from_micros(rng.below(span * 6 / 5)));
            let _ = child.kill();
            let _ = child.wait();
            let durable = durable_steps(&box_, &bare);
            for d in r.deliveries() {
                let key = d.key.unwrap_or_default();
                let id = key.split('/').nth(1).unwrap_or_default().to_string();
                assert!(
                    durable.contains(&id),
                    "{ctx}: {key} before its step was durable"
                );
            }
            if rng.below(2) == 0 {
                let fresh = box_.sibling(&format!("fresh-{n}"), Some(bare.to_str().unwrap()));
                fresh.steps(&["-q", "init", "--remote", "origin"]).ok();
                box_ = fresh;
            }
        }
        let done = box_.steps(&["apply", p.to_str().unwrap()]);
        assert_eq!(done.code(), Some(0), "{ctx}\n{}", done.explain());
        let http: BTreeSet<String> = r.counts().keys().cloned().collect();
        let want: BTreeSet<String> = ["main/s1/1", "main/s3/1"]
            .into_iter()
            .map(str::to_string)
            .collect();
        assert_eq!(http, want, "{ctx}");
        assert!(r.applied().values().all(|&n| n == 1), "{ctx}");
        let recorded: BTreeSet<String> =
            outcomes(&box_, &bare).into_iter().map(|(k, _)| k).collect();
        assert_eq!(recorded, keys(), "{ctx}");
        box_.steps(&["verify", p.to_str().unwrap()]).ok();
    }
}

/// `crashtest` over a plan with effects, with both runners that apply the
/// plan's own steps: every row SAME, the effect points crashed at for every
/// step that has effects, and each row's deliveries counted per key: every
/// key at least once.
#[test]
fn the_crash_matrix_crashes_at_the_effect_points_and_counts_deliveries() {
    let r = Receiver::start();
    let t = TestRepo::new();
    let p = t.plan(
        "matrix.jsonl",
        &[
            line(json!({"id": "s1", "files": {"a.txt": "1\n"}, "effects": [
                {"http": {"method": "POST", "url": r.url("/one")}},
                {"http": {"method": "POST", "url": r.url("/two"), "body": {"n": 2}}}
            ]})),
            line(json!({"id": "s2", "files": {"b.txt": "2\n"}, "effects": [
                {"http": {"method": "POST", "url": r.url("/three")}}
            ]})),
        ],
    );
    for runner in ["git-steps", "run"] {
        let doc = t
            .steps(&[
                "--json",
                "crashtest",
                "--empty-base",
                "--runner",
                runner,
                p.to_str().unwrap(),
            ])
            .ok()
            .json();
        let data = &doc["data"];
        let rows = data["rows"].as_array().unwrap();
        assert_eq!(data["summary"]["diverged"], 0, "{runner}: {doc}");
        assert_eq!(data["summary"]["refused"], 0, "{runner}: {doc}");
        let mut at: Vec<(String, String, String)> = rows
            .iter()
            .filter(|r| r["point"].as_str().unwrap().starts_with("effect-"))
            .map(|r| {
                (
                    r["step"].as_str().unwrap().to_string(),
                    r["point"].as_str().unwrap().to_string(),
                    r["box"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        at.sort();
        assert_eq!(at.len(), 2 * 4 * 2, "{runner}: {at:?}");
        for row in rows {
            let d = row["deliveries"]
                .as_object()
                .unwrap_or_else(|| panic!("{runner}: {row}"));
            assert_eq!(d.len(), 3, "{runner}: every key of the run: {row}");
            assert!(d.values().all(|n| n.as_u64().unwrap() >= 1), "{row}");
            assert!(
                d.keys()
                    .all(|k| k.ends_with("/s1/1") || k.ends_with("/s1/2") || k.ends_with("/s2/1")),
                "{row}"
            );
            // A crash between a delivery and its record: that key twice.
            if row["point"] == "effect-delivered" {
                let twice = d.values().filter(|n| n.as_u64() == Some(2)).count();
                assert_eq!(twice, 1, "{runner}: {row}");
            }
        }
    }
}

/// The agent loop's decider may answer a step with effects: delivered once
/// the step is durable; a kill before its outcome is recorded redelivers it
/// with the same key on resume, and the decider is not asked again.
#[test]
fn a_deciders_step_with_effects_is_delivered_and_never_asked_again() {
    let r = Receiver::start();
    let t = TestRepo::new();
    t.with_local_bare();
    let calls = t.tmp.path().join("calls.log");
    let script = t.home().join("decider.sh");
    std::fs::write(
        &script,
        format!(
            "ctx=$(cat)\necho \"$ctx\" >> '{}'\ncase \"$ctx\" in\n  *'\"step_index\":0'*) printf '%s\\n' '{}' ;;\n  *) echo '{{\"done\": true}}' ;;\nesac\n",
            calls.display(),
            json!({"id": "d1", "files": {"a.txt": "1\n"}, "effects": [
                {"http": {"method": "POST", "url": r.url("/ticket"), "body": {"comment": "done"}}}
            ]})
        ),
    )
    .unwrap();
    let cmd = format!("sh '{}'", script.display());
    let killed = t.steps_env(
        &["run", "--decider", &cmd],
        &[("GIT_STEPS_CRASH", "effect-delivered@d1")],
    );
    assert_eq!(killed.out.status.signal(), Some(9), "{}", killed.explain());
    assert_eq!(r.deliveries().len(), 1);
    let doc = t.steps(&["--json", "run", "--decider", &cmd]).ok().json();
    assert_eq!(doc["data"]["effects"][0]["key"], "main/d1/1", "{doc}");
    let got = r.deliveries();
    assert_eq!(got.len(), 2, "redelivered once");
    assert!(got.iter().all(|d| d.key.as_deref() == Some("main/d1/1")));
    assert_eq!(r.applied().get("main/d1/1"), Some(&1));
    let asked = std::fs::read_to_string(&calls).unwrap();
    assert_eq!(
        asked.matches("\"step_index\":0").count(),
        1,
        "index 0 asked once: {asked}"
    );
    let sources = t.git_out(&["log", "-1", "--format=%(trailers:key=Step-Source,valueonly,separator=)|%(trailers:key=Step-Effects,valueonly,separator=)"]);
    assert_eq!(sources.trim(), "decider|1");
}

/// docs/effects.md's worked example, as the guide gives it (its plan line
/// read from the page, the port changed): `scripts/fake-forge.py` serves
/// the pull-request API, `crashtest` kills the step at every point on both
/// kinds of box, every row is SAME, and the forge opened one pull request.
#[test]
fn the_guides_forge_example_opens_the_pull_request_once() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let guide = std::fs::read_to_string(root.join("docs/effects.md")).unwrap();
    let line = guide
        .lines()
        .find(|l| l.starts_with("{\"id\": \"fix-1\"") && serde_json::from_str::<Value>(l).is_ok())
        .expect("the guide's plan line");
    let port = crate::servers::free_port();
    let t = TestRepo::new();
    let log = t.tmp.path().join("forge.log");
    let mut forge = std::process::Command::new("python3")
        .arg(root.join("scripts/fake-forge.py"))
        .arg(port.to_string())
        .arg(&log)
        .spawn()
        .expect("python3 runs scripts/fake-forge.py");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _guard = Kill(std::mem::replace(
        &mut forge,
        std::process::Command::new("true").spawn().unwrap(),
    ));
    let _ = forge.wait();
    // Listening before the matrix starts.
    let up = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        crate::servers::listening(port)
    });
    assert!(up, "the fake forge did not start");
    let plan = t.plan("plan.jsonl", &[line.replace("8765", &port.to_string())]);
    // The token goes only where local config binds it (the guide says
    // so): here as `git -c` would pass it, which every box inherits.
    let forge_url = format!("http://127.0.0.1:{port}/");
    let doc = t
        .steps_env(
            &[
                "--json",
                "crashtest",
                "--empty-base",
                plan.to_str().unwrap(),
            ],
            &[
                ("FORGE_TOKEN", "token-for-the-example"),
                ("GIT_CONFIG_COUNT", "2"),
                ("GIT_CONFIG_KEY_0", "steps.effectPrivateHosts"),
                ("GIT_CONFIG_VALUE_0", "true"),
                ("GIT_CONFIG_KEY_1", "steps.effectSecret.FORGE_TOKEN.url"),
                ("GIT_CONFIG_VALUE_1", forge_url.as_str()),
            ],
        )
        .ok()
        .json();
    let data = &doc["data"];
    let rows = data["rows"].as_array().unwrap();
    assert_eq!(
        data["summary"]["same"].as_u64(),
        Some(rows.len() as u64),
        "{doc}"
    );
    let points: BTreeSet<&str> = rows.iter().map(|r| r["point"].as_str().unwrap()).collect();
    for p in [
        "effect-start",
        "effect-delivered",
        "effect-recorded",
        "pushed",
        "worktree-done",
    ] {
        assert!(points.contains(p), "{p}: {points:?}");
    }
    let opened: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(opened.len(), 1, "{opened:?}");
    assert_eq!(opened[0]["opened"], 1);
    assert_eq!(opened[0]["key"], "main/fix-1/1");
}

/// A run applied with the local repository durable, then given a remote:
/// its recorded outcomes go to the remote with it, and nothing delivered is
/// delivered again.
#[test]
fn a_run_that_gains_a_remote_keeps_its_outcomes_and_sends_nothing_twice() {
    let r = Receiver::start();
    let t = TestRepo::new();
    let p = plan(&t, &r);
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    assert_eq!(r.deliveries().len(), 2);
    let bare = t.tmp.path().join("remote.git");
    t.git(&["init", "-q", "--bare", "-b", "main", bare.to_str().unwrap()])
        .ok();
    t.steps(&["init", "--remote", bare.to_str().unwrap()]).ok();
    t.steps(&["resume"]).ok();
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    assert_eq!(r.deliveries().len(), 2, "{:?}", r.deliveries());
    assert_eq!(command_keys(&t).len(), 1);
    assert_eq!(outcomes(&t, &bare).len(), 3);
    // A fresh box from the remote delivers nothing either.
    let fresh = t.sibling("fresh", Some(bare.to_str().unwrap()));
    fresh.steps(&["-q", "init", "--remote", "origin"]).ok();
    fresh.steps(&["apply", p.to_str().unwrap()]).ok();
    assert_eq!(r.deliveries().len(), 2);
}

/// An outcome counts only for the step commit it names: a run started over
/// under the same id (its branch deleted) delivers its new step's effect,
/// and verify names the stale outcome.
#[test]
fn an_outcome_of_another_commit_does_not_stop_a_delivery() {
    let r = Receiver::start();
    let t = TestRepo::new();
    let bare = t.with_local_bare();
    let first = t.plan("first.jsonl", &[line(json!({"id": "s1", "files": {"a": "1\n"}, "effects": [{"http": {"method": "POST", "url": r.url("/x"), "body": "first"}}]}))]);
    t.steps(&["apply", first.to_str().unwrap()]).ok();
    // Start over: the branch is deleted here and on the remote; the
    // outcomes stay.
    t.git(&["checkout", "-q", "--detach"]).ok();
    t.git(&["branch", "-q", "-D", "main"]).ok();
    t.git(&[
        "--git-dir",
        bare.to_str().unwrap(),
        "update-ref",
        "-d",
        "refs/heads/main",
    ])
    .ok();
    t.git(&["checkout", "-q", "--orphan", "main"]).ok();
    t.git(&["rm", "-rq", "--cached", "."]).ok();
    std::fs::remove_file(t.path("a")).unwrap();
    let second = t.plan("second.jsonl", &[line(json!({"id": "s1", "files": {"a": "2\n"}, "effects": [{"http": {"method": "POST", "url": r.url("/x"), "body": "second"}}]}))]);
    t.steps(&["apply", second.to_str().unwrap()]).ok();
    let bodies: Vec<String> = r.deliveries().into_iter().map(|d| d.body).collect();
    assert_eq!(bodies, ["first", "second"]);
    let list = t.steps(&["--json", "effects"]).ok().json();
    assert_eq!(list["data"]["effects"][0]["state"], "delivered", "{list}");
    let v = t.steps(&["verify"]);
    assert_eq!(v.code(), Some(3), "{}", v.explain());
    assert!(
        v.stdout().contains("belongs to no durable step"),
        "{}",
        v.explain()
    );
}

/// An effect that will never succeed (a 422) stops every run until it is
/// abandoned; then the run goes on, undo works, and nothing delivers it.
#[test]
fn an_abandoned_effect_is_never_delivered_again_and_stops_nothing() {
    let r = Receiver::start();
    let t = TestRepo::new();
    let bare = t.with_local_bare();
    t.git(&["config", "steps.effectRetries", "2"]).ok();
    r.set(
        "/pulls",
        Behaviour {
            status: Some(422),
            ..Default::default()
        },
    );
    let p = t.plan("p.jsonl", &[line(json!({"id": "s1", "files": {"a": "1\n"}, "effects": [{"http": {"method": "POST", "url": r.url("/pulls")}}]}))]);
    let e = t.steps(&["apply", p.to_str().unwrap()]);
    assert_eq!(e.code(), Some(1));
    assert!(
        e.stderr().contains("failed after 1 try"),
        "a 422 is final: {}",
        e.explain()
    );
    let p2 = t.plan(
        "p2.jsonl",
        &[line(json!({"id": "s2", "files": {"b": "2\n"}}))],
    );
    assert_eq!(
        t.steps(&["apply", p2.to_str().unwrap()]).code(),
        Some(1),
        "blocked"
    );
    // Only a failed or pending effect of a durable step can be abandoned.
    t.steps(&["effects", "--abandon", "main/nope/1"]).code_is(1);
    let a = t
        .steps(&[
            "effects",
            "--abandon",
            "main/s1/1",
            "--reason",
            "opened by hand",
        ])
        .ok();
    assert!(
        a.stdout().starts_with("abandoned main/s1/1"),
        "{}",
        a.explain()
    );
    t.steps(&["apply", p2.to_str().unwrap()]).ok();
    assert_eq!(
        r.deliveries().len(),
        2,
        "tried twice (two runs), never after"
    );
    let list = t.steps(&["--json", "effects"]).ok().json();
    assert_eq!(list["data"]["effects"][0]["state"], "abandoned", "{list}");
    assert_eq!(
        list["data"]["effects"][0]["reason"], "opened by hand",
        "{list}"
    );
    assert_eq!(outcomes(&t, &bare).last().unwrap().1, "abandoned");
    t.steps(&["effects", "--abandon", "main/s1/1"]).code_is(1);
    t.steps(&["undo", "--last", "2"]).ok();
    assert_eq!(r.deliveries().len(), 2);
    t.steps(&["verify"]).ok();
}

/// Whether process `pid` is gone (or a zombie nobody reaped yet).
fn gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// A git-steps SIGKILLed while a command effect runs takes the command
/// with it, and what the command started: the command runs under a
/// supervisor (`git-steps effect-exec`) that kills its process group when
/// git-steps is gone. Before, the command (here a `sleep` it started) ran
/// on while the resume started the same effect again.
#[test]
fn a_killed_run_leaves_no_command_running() {
    let t = TestRepo::new();
    let script = "if [ -e ../second ]; then exit 0; fi; echo $$ > ../cmd.pid; sleep 30 & echo $! > ../sleep.tmp; mv ../sleep.tmp ../sleep.pid; wait";
    let p = t.plan(
        "p.jsonl",
        &[line(json!({"id": "s1", "files": {"a": "1\n"},
            "effects": [{"command": ["sh", "-c", script]}]}))],
    );
    let mut child = t
        .steps_command(&["apply", p.to_str().unwrap()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let dir = t.tmp.path();
    wait_for(&dir.join("sleep.pid"), "the command's sleep");
    let pids = [
        std::fs::read_to_string(dir.join("cmd.pid")).unwrap(),
        std::fs::read_to_string(dir.join("sleep.pid")).unwrap(),
    ];
    let pids: Vec<&str> = pids.iter().map(|p| p.trim()).collect();
    assert!(pids.iter().all(|p| !gone(p)), "running: {pids:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    let start = Instant::now();
    while !pids.iter().all(|p| gone(p)) && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<&&str> = pids.iter().filter(|p| !gone(p)).collect();
    for p in &left {
        let _ = std::process::Command::new("kill").args(["-9", p]).status();
    }
    assert!(
        left.is_empty(),
        "left running after git-steps died: {left:?}"
    );
    // The resume delivers it again (its outcome was never recorded).
    std::fs::write(dir.join("second"), b"").unwrap();
    let done = t
        .steps(&["--json", "apply", p.to_str().unwrap()])
        .ok()
        .json();
    assert_eq!(done["data"]["effects"][0]["key"], "main/s1/1", "{done}");
    assert_eq!(done["data"]["effects"][0]["status"], "delivered", "{done}");
}

/// A command that cannot be started is named and not tried again, through
/// the supervisor as without it.
#[test]
fn a_command_that_cannot_start_is_named_once() {
    let t = TestRepo::new();
    let p = t.plan(
        "p.jsonl",
        &[line(json!({"id": "s1", "files": {"a": "1\n"},
            "effects": [{"command": ["/nonexistent/tool", "--flag"]}]}))],
    );
    let r = t.steps(&["apply", p.to_str().unwrap()]);
    assert_eq!(r.code(), Some(1), "{}", r.explain());
    let err = r.stderr();
    assert!(
        err.contains("`/nonexistent/tool --flag` cannot be started") && err.contains("after 1 try"),
        "{err}"
    );
}

/// `apply --dry-run` says which effects the real run would deliver: first
/// those of durable steps with no delivered outcome (a failed one here),
/// then each new step's, under the step, with its key; it sends nothing
/// and records nothing.
#[test]
fn a_dry_run_lists_the_effects_it_would_deliver_and_sends_nothing() {
    let r = Receiver::start();
    let t = TestRepo::new();
    let bare = t.with_local_bare();
    t.git(&["config", "steps.effectRetries", "1"]).ok();
    r.set(
        "/down",
        Behaviour {
            status: Some(503),
            ..Default::default()
        },
    );
    let s1 = line(json!({"id": "s1", "files": {"a": "1\n"},
        "effects": [{"http": {"method": "POST", "url": r.url("/down")}}]}));
    let p1 = t.plan("p1.jsonl", std::slice::from_ref(&s1));
    assert_eq!(t.steps(&["apply", p1.to_str().unwrap()]).code(), Some(1));
    let p2 = t.plan(
        "p2.jsonl",
        &[
            s1,
            line(json!({"id": "s2", "files": {"b": "2\n"},
                "effects": [{"command": ["true"]}, {"http": {"method": "PUT", "url": r.url("/up")}}]})),
        ],
    );
    let sent = r.deliveries().len();
    let outcomes_before = outcomes(&t, &bare);
    let dry = t.steps(&["apply", "--dry-run", p2.to_str().unwrap()]).ok();
    assert!(
        dry.stderr().contains(&format!(
            "would deliver effect main/s1/1 first (POST {})",
            r.url("/down")
        )),
        "{}",
        dry.explain()
    );
    let out = dry.stdout();
    assert!(
        out.contains("  then deliver main/s2/1: command true")
            && out.contains(&format!("  then deliver main/s2/2: PUT {}", r.url("/up"))),
        "{}",
        dry.explain()
    );
    let json = t
        .steps(&["--json", "apply", "--dry-run", p2.to_str().unwrap()])
        .ok()
        .json();
    let s2 = json["data"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == "s2")
        .unwrap()
        .clone();
    assert_eq!(s2["effects"][0], "main/s2/1: command true", "{json}");
    assert_eq!(r.deliveries().len(), sent, "a dry run sends nothing");
    assert_eq!(outcomes(&t, &bare), outcomes_before, "and records nothing");
    assert_eq!(durable_steps(&t, &bare), ["s1"]);
}

/// `steps.effects` says which effects a box delivers: a reviewer's box
/// (`none`) applies and resumes without acting on the world, a box that
/// runs no commands (`http`) sends only the requests; what they hold back
/// stays pending, named, and a box that allows it delivers it once.
#[test]
fn a_box_that_delivers_no_effects_or_no_commands_leaves_them_pending() {
    let r = Receiver::start();
    let t = TestRepo::new();
    let p = plan(&t, &r);
    let git_c = |value: &str, args: &[&str]| {
        t.git(&["config", "steps.effects", value]).ok();
        t.steps(args)
    };
    let none = git_c("none", &["--json", "apply", p.to_str().unwrap()]).ok();
    assert!(
        none.stderr().contains("effect main/s1/1 (POST ")
            && none.stderr().contains("steps.effects=none")
            && none.stderr().contains("every effect after it"),
        "{}",
        none.explain()
    );
    assert_eq!(
        none.json()["data"]["effects_pending"],
        json!(["main/s1/1", "main/s1/2", "main/s3/1"]),
        "{}",
        none.explain()
    );
    assert!(r.counts().is_empty(), "{:?}", r.counts());
    assert!(command_keys(&t).is_empty());
    assert_eq!(t.step_ids(), ["s1", "s2", "s3"]);
    let st = t.steps(&["status"]).ok().stdout();
    assert!(
        st.contains("0 of 3 delivered, 3 pending") && st.contains("steps.effects=none"),
        "{st}"
    );
    // resume says so in --json too; and a dry run under `http` marks the
    // command held back and what comes after it waiting.
    let resumed = t.steps(&["--json", "resume"]).ok().json();
    assert_eq!(
        resumed["data"]["effects_pending"],
        json!(["main/s1/1", "main/s1/2", "main/s3/1"]),
        "{resumed}"
    );
    t.git(&["config", "steps.effects", "http"]).ok();
    let more = std::fs::read_to_string(&p).unwrap()
        + &line(json!({"id": "s4", "files": {"d": "4\n"},
            "effects": [{"http": {"method": "POST", "url": r.url("/later")}}]}))
        + "\n";
    let p4 = t.plan("p4.jsonl", &[more]);
    let dry = t.steps(&["apply", "--dry-run", p4.to_str().unwrap()]).ok();
    assert!(
        dry.stderr()
            .contains("would deliver effect main/s1/2 first (command")
            && dry
                .stderr()
                .contains("held back on this box, steps.effects=http")
            && dry
                .stderr()
                .contains("would deliver effect main/s3/1 first (POST"),
        "{}",
        dry.explain()
    );
    assert!(
        dry.stdout().contains(&format!(
            "then deliver main/s4/1: POST {} (waits behind an effect this box holds back",
            r.url("/later")
        )),
        "{}",
        dry.explain()
    );
    assert!(r.counts().is_empty(), "a dry run sends nothing");
    // No commands: the request before the command goes; the command, and
    // the request after it, wait (effects go in order).
    let http = git_c("http", &["--json", "resume"]).ok();
    assert!(
        http.stderr().contains("effect main/s1/2 (command sh -c"),
        "{}",
        http.explain()
    );
    assert_eq!(r.counts().keys().collect::<Vec<_>>(), ["main/s1/1"]);
    assert!(command_keys(&t).is_empty());
    // A box that allows them delivers the rest, once each, in order.
    git_c("all", &["resume"]).ok();
    assert_eq!(command_keys(&t), ["main/s1/2"]);
    let counts = r.counts();
    assert_eq!(
        (counts.get("main/s1/1"), counts.get("main/s3/1")),
        (Some(&1), Some(&1)),
        "{counts:?}"
    );
    let order: Vec<String> = r.deliveries().into_iter().filter_map(|d| d.key).collect();
    assert_eq!(order, ["main/s1/1", "main/s3/1"]);
    // A value it does not know is refused, naming the key.
    let before = t.git_out(&["rev-parse", "refs/steps/effects/main"]);
    let bad = git_c("some", &["apply", p.to_str().unwrap()]);
    assert_eq!(bad.code(), Some(1), "bad input: {}", bad.explain());
    assert_eq!(t.git_out(&["rev-parse", "refs/steps/effects/main"]), before);
    assert!(
        bad.stderr().contains("steps.effects") && bad.stderr().contains("all, http or none"),
        "{}",
        bad.explain()
    );
}

/// An undo on a box that holds back the effect it undoes: the compensation
/// waits behind that effect, so a box that delivers them sends the action,
/// then its compensation; never the compensation first.
#[test]
fn a_compensation_never_goes_before_the_effect_it_undoes() {
    let r = Receiver::start();
    let t = TestRepo::new();
    let p = t.plan(
        "p.jsonl",
        &[line(json!({"id": "s1", "files": {"a": "1\n"}, "effects": [
            {"command": ["sh", "-c", "echo \"$GIT_STEPS_IDEMPOTENCY_KEY\" >> ../commands.log"],
             "compensate": {"http": {"method": "POST", "url": r.url("/undo")}}}
        ]}))],
    );
    t.git(&["config", "steps.effects", "http"]).ok();
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    let undone = t.steps(&["--json", "undo", "--last", "1"]).ok().json();
    let pending = undone["data"]["effects_pending"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(
        pending.len(),
        2,
        "the effect, then its compensation: {undone}"
    );
    assert_eq!(pending[0], "main/s1/1", "{undone}");
    assert!(r.deliveries().is_empty(), "{:?}", r.counts());
    assert!(command_keys(&t).is_empty());
    t.git(&["config", "steps.effects", "all"]).ok();
    t.steps(&["resume"]).ok();
    assert_eq!(command_keys(&t), ["main/s1/1"]);
    assert_eq!(r.deliveries().len(), 1, "{:?}", r.counts());
}

/// The `undo` runner's scenario over steps with effects: the plan applied,
/// its last step undone (whose `compensate` the undo step delivers), then
/// made again. The matrix crashes at every effect point of the plan's
/// steps, of the undo step and of the step made again: every row SAME,
/// every key delivered, a key twice only at `effect-delivered`.
#[test]
fn the_undo_matrix_crashes_at_the_compensations_too() {
    let r = Receiver::start();
    let t = TestRepo::new();
    let p = t.plan(
        "undo.jsonl",
        &[
            line(json!({"id": "s1", "files": {"a.txt": "1\n"}, "effects": [
                {"http": {"method": "POST", "url": r.url("/one")}}
            ]})),
            line(json!({"id": "s2", "files": {"b.txt": "2\n"}, "effects": [
                {"http": {"method": "POST", "url": r.url("/pr")},
                 "compensate": {"http": {"method": "PATCH", "url": r.url("/pr/close")}}}
            ]})),
        ],
    );
    let doc = t
        .steps(&[
            "--json",
            "crashtest",
            "--empty-base",
            "--runner",
            "undo",
            p.to_str().unwrap(),
        ])
        .ok()
        .json();
    let data = &doc["data"];
    let rows = data["rows"].as_array().unwrap();
    assert_eq!(data["summary"]["same"], rows.len(), "{doc}");
    let mut at: Vec<String> = rows
        .iter()
        .filter(|r| r["point"].as_str().unwrap().starts_with("effect-"))
        .map(|r| r["step"].as_str().unwrap().to_string())
        .collect();
    at.sort();
    at.dedup();
    assert_eq!(at, ["again-s2", "s1", "s2", "undo-replay"], "{doc}");
    let keys = [
        "main/s1/1",
        "main/s2/1",
        "main/undo-replay/1",
        "main/again-s2/1",
    ];
    for row in rows {
        assert_eq!(row["reason"], "", "every armed crash fired: {row}");
        let d = row["deliveries"].as_object().unwrap();
        let got: Vec<&str> = d.keys().map(|k| k.as_str()).collect();
        let mut want = keys.to_vec();
        want.sort();
        assert_eq!(got, want, "{row}");
        let twice = d.values().filter(|n| n.as_u64() == Some(2)).count();
        let expected = usize::from(row["point"] == "effect-delivered");
        assert_eq!(twice, expected, "{row}");
        assert!(
            d.values().all(|n| (1..=2).contains(&n.as_u64().unwrap())),
            "{row}"
        );
    }
}

/// A try whose supervisor is killed on its own (here by SIGTERM) leaves no
/// command behind: its process group goes before the next try starts, so
/// two copies never run at once. A command a signal kills is recorded as
/// killed, not as an exit code.
#[test]
fn a_failed_try_leaves_nothing_running_and_a_signal_is_named() {
    let t = TestRepo::new();
    t.git(&["config", "steps.effectRetries", "2"]).ok();
    let p = t.plan(
        "p.jsonl",
        &[line(json!({"id": "s1", "files": {"a": "1\n"}, "effects": [
            {"command": ["sh", "-c", "echo $$ $PPID >> ../pids; sleep 2"]}
        ]}))],
    );
    let child = t
        .steps_command(&["--json", "apply", p.to_str().unwrap()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pids = t.tmp.path().join("pids");
    wait_for(&pids, "the first try");
    // The file appears before the shell's line is in it: wait for the line.
    let start = Instant::now();
    let first = loop {
        let text = std::fs::read_to_string(&pids).unwrap();
        if text.ends_with('\n') || start.elapsed() > Duration::from_secs(20) {
            break text;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let (sh, supervisor) = first
        .lines()
        .next()
        .and_then(|l| l.split_once(' '))
        .unwrap_or_else(|| panic!("the first try's pids: {first:?}"));
    let (sh, supervisor) = (sh.to_string(), supervisor.to_string());
    std::process::Command::new("kill")
        .args(["-TERM", &supervisor])
        .status()
        .unwrap();
    let start = Instant::now();
    while std::fs::read_to_string(&pids).unwrap().lines().count() < 2
        && start.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        gone(&sh),
        "the first try's command still runs beside the second"
    );
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["data"]["effects"][0]["tries"], 2, "{doc}");
    assert_eq!(doc["data"]["effects"][0]["status"], "delivered", "{doc}");

    // SIGPIPE too, which Rust's runtime ignores in its own processes.
    for sig in ["SEGV", "PIPE"] {
        let t = TestRepo::new();
        t.git(&["config", "steps.effectRetries", "1"]).ok();
        let p = t.plan(
            "p.jsonl",
            &[line(json!({"id": "s1", "files": {"a": "1\n"}, "effects": [
                {"command": ["sh", "-c", format!("kill -{sig} $$")]}
            ]}))],
        );
        let r = t.steps(&["apply", p.to_str().unwrap()]);
        assert_eq!(r.code(), Some(1), "{}", r.explain());
        assert!(r.stderr().contains("was killed"), "{sig}: {}", r.explain());
        let list = t.steps(&["--json", "effects"]).ok().json();
        assert_eq!(
            list["data"]["effects"][0]["result"], "killed",
            "{sig}: {list}"
        );
        assert!(
            !t.work.join("core").exists(),
            "{sig}: no core in the worktree"
        );
    }
}
