//! Issue 32, part 2: a broken network path between git-steps and every
//! real server kind. Each trial runs a plan through a [`Proxy`] that gives
//! connections at random a fault (a cut after K bytes either way, a reset,
//! a stall past the client's timeout, a drip, a 503 in the middle of a
//! request), then reruns it through a faithful path. The invariant: the
//! faulty run exits 0, 1 or 4 (never 3 for a fault, never a panic, never a
//! hang), and the rerun exits 0 with every step exactly once on the server
//! and the tree of an uninterrupted run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::harness::*;
use crate::proxy::{upstream_of, Dir, Fault, Proxy};
use crate::servers::Kind;

/// How long a faulty run may take before it counts as a hang: its network
/// waits are bounded by `GIT_STEPS_NET_TIMEOUT_SECS` (2 here) per read,
/// with one retry.
const HANG: Duration = Duration::from_secs(90);

fn fault(kind: &str, rng: &mut Rng) -> Fault {
    let dir = if rng.below(2) == 0 {
        Dir::Up
    } else {
        Dir::Down
    };
    // Small packs: most faults land inside the ref advertisement, the
    // request or the pack; some past the end (no fault at all).
    let after = rng.below(3000) as usize;
    match kind {
        "cut" => Fault::Cut { dir, after },
        "reset" => Fault::Reset { dir, after },
        "stall" => Fault::Stall { dir, after },
        "drip" => Fault::Drip {
            dir,
            after,
            every: Duration::from_millis(2),
        },
        "503" => Fault::Http503 { after },
        _ => unreachable!("{kind}"),
    }
}

/// `trials` trials of each fault kind on `kind`'s server, with
/// `transport`; returns (trials, bad) per fault kind.
fn trials(kind: Kind, transport: &str, trials: u64, seed: u64) -> Vec<(String, u64, usize)> {
    let plan = fixture("eight-steps.jsonl");
    let p = plan.to_str().unwrap();
    let want = {
        let r = TestRepo::new();
        r.steps(&["--json", "apply", p]).ok().json()["data"]["artifact"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let ids: Vec<String> = std::fs::read_to_string(&plan)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let mut kinds = vec!["cut", "reset", "stall", "drip"];
    if kind == Kind::Http {
        kinds.push("503");
    }
    let mut tally = Vec::new();
    let mut rng = Rng(seed | 1);
    for fault_kind in kinds {
        let mut faults_seen = 0;
        for trial in 0..trials {
            let ctx =
                format!("{kind:?}, {transport}, {fault_kind}, trial {trial} (seed {seed:#x})");
            let t = TestRepo::new();
            let server = t.start_server(kind);
            let faulty = Arc::new(AtomicBool::new(true));
            let (on, mut conn_rng) = (faulty.clone(), Rng(rng.next() | 1));
            let proxy = Proxy::start(upstream_of(server.url()), move |_| {
                // Every other connection, at random, while the run is faulty.
                if on.load(Ordering::SeqCst) && conn_rng.below(2) == 0 {
                    fault(fault_kind, &mut conn_rng)
                } else {
                    Fault::None
                }
            });
            let url = proxy.url(server.url());
            let ca = server.root.join("ca.pem");
            let mut env: Vec<(String, String)> = vec![
                ("GIT_STEPS_NET_TIMEOUT_SECS".into(), "2".into()),
                ("GIT_STEPS_NET_RETRIES".into(), "1".into()),
                ("GIT_STEPS_NET_RETRY_SECS".into(), "5".into()),
            ];
            if kind == Kind::Https {
                env.push(("GIT_SSL_CAINFO".into(), ca.display().to_string()));
            }
            let env_ref: Vec<(&str, &str)> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            t.steps_env(
                &["init", "--remote", &url, "--transport", transport],
                &env_ref,
            )
            .ok();
            let mut cmd = t.steps_command(&["apply", p]);
            for (k, v) in &env_ref {
                cmd.env(k, v);
            }
            let out = tempfile::tempfile().unwrap();
            let err = tempfile::tempfile().unwrap();
            cmd.stdin(std::process::Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(err.try_clone().unwrap());
            let mut child = cmd.spawn().unwrap();
            let status = wait_exit(&mut child, HANG);
            let stderr = || {
                use std::io::{Read, Seek};
                let mut e = err.try_clone().unwrap();
                e.seek(std::io::SeekFrom::Start(0)).unwrap();
                let mut s = String::new();
                e.read_to_string(&mut s).unwrap();
                s
            };
            let Some(status) = status else {
                let _ = child.kill();
                panic!(
                    "{ctx}: apply still running after {HANG:?} (a hang); faults {:?}\n{}",
                    proxy.log.lock().unwrap(),
                    stderr()
                );
            };
            let code = status.code();
            assert!(
                matches!(code, Some(0 | 1 | 4)),
                "{ctx}: exit {code:?} (a fault must exit 0, 1 or 4); faults {:?}\n{}",
                proxy.log.lock().unwrap(),
                stderr()
            );
            assert!(!stderr().contains("panicked"), "{ctx}\n{}", stderr());
            faults_seen += proxy
                .log
                .lock()
                .unwrap()
                .iter()
                .filter(|f| **f != Fault::None)
                .count();
            // The same command through a faithful path.
            faulty.store(false, Ordering::SeqCst);
            let r = t.steps_env(&["apply", p], &env_ref);
            assert_eq!(r.code(), Some(0), "{ctx}\n{}", t.explain_with_log(&r));
            assert_eq!(
                server.step_ids(),
                ids,
                "{ctx}: every step once on the server"
            );
            let fp = t
                .steps_env(&["--json", "fingerprint"], &env_ref)
                .ok()
                .json();
            assert_eq!(fp["data"]["artifact"], want.as_str(), "{ctx}");
            let branch = t.git_out(&["config", "steps.branch"]);
            assert_eq!(
                t.git_out(&["rev-parse", "HEAD^{tree}"]),
                server.git(&["rev-parse", &format!("refs/heads/{branch}^{{tree}}")]),
                "{ctx}: the box and the server hold the same tree"
            );
        }
        tally.push((fault_kind.to_string(), trials, faults_seen));
    }
    tally
}

/// Every fault kind on `kind`'s server through `transport`, one test per
/// pair (they run side by side, and a failure names its pair); skipped
/// when `GIT_STEPS_FAULT_TRANSPORT` names the other transport.
fn faults_on(kind: Kind, transport: &str) {
    let (n, seed) = trials_and_seed(1, 0x5eed);
    let only = std::env::var("GIT_STEPS_FAULT_TRANSPORT").ok();
    if only.as_deref().is_some_and(|o| o != transport) {
        return;
    }
    let report: Vec<String> = trials(kind, transport, n, seed)
        .into_iter()
        .map(|(fault, trials, seen)| {
            format!("{kind:?}/{transport}/{fault}: {trials} trial(s), {seen} faulty connection(s), 0 bad")
        })
        .collect();
    println!(
        "network faults (seed {seed:#x}):\n  {}",
        report.join("\n  ")
    );
}

#[test]
fn faults_on_smart_http_through_libgit2_never_double_a_step_never_hang_and_a_rerun_finishes() {
    faults_on(Kind::Http, "libgit2");
}

#[test]
fn faults_on_smart_http_through_git_never_double_a_step_never_hang_and_a_rerun_finishes() {
    faults_on(Kind::Http, "git");
}

#[test]
fn faults_on_git_daemon_through_libgit2_never_double_a_step_never_hang_and_a_rerun_finishes() {
    faults_on(Kind::Daemon, "libgit2");
}

#[test]
fn faults_on_git_daemon_through_git_never_double_a_step_never_hang_and_a_rerun_finishes() {
    faults_on(Kind::Daemon, "git");
}

#[test]
fn faults_on_https_through_libgit2_never_double_a_step_never_hang_and_a_rerun_finishes() {
    faults_on(Kind::Https, "libgit2");
}

#[test]
fn faults_on_https_through_git_never_double_a_step_never_hang_and_a_rerun_finishes() {
    faults_on(Kind::Https, "git");
}
