//! Issue 3: the remote is the durable domain. Real servers on 127.0.0.1,
//! real kills, audited with plain git on the remote.

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use crate::harness::*;
use crate::servers::{Kind, Server, ALL};

/// The reference: the plan run uninterrupted, with no remote.
fn reference(plan: &std::path::Path) -> (String, String) {
    let r = TestRepo::new();
    let doc = r
        .steps(&["--json", "apply", plan.to_str().unwrap()])
        .ok()
        .json();
    (
        doc["data"]["artifact"].as_str().unwrap().to_string(),
        doc["data"]["history"].as_str().unwrap().to_string(),
    )
}

/// Audit a finished run on the remote with plain git.
#[track_caller]
fn assert_finished(
    t: &TestRepo,
    server: &Server,
    plan: &std::path::Path,
    want: &(String, String),
    ctx: &str,
) {
    assert_eq!(
        server.step_ids(),
        plan_ids(plan),
        "{ctx}: receipts on the remote"
    );
    assert_eq!(
        t.head(),
        server.head(),
        "{ctx}: local head equals durable head"
    );
    assert_eq!(
        independent_fingerprint(t, "HEAD"),
        want.0,
        "{ctx}: artifact"
    );
    assert_eq!(independent_history(t), want.1, "{ctx}: history");
    assert_eq!(
        t.git_out(&["status", "--porcelain", "--untracked-files=all"]),
        "",
        "{ctx}: worktree clean"
    );
}

#[test]
fn every_step_is_pushed_to_every_kind_of_server_with_both_transports() {
    let plan = fixture("eight-steps.jsonl");
    let want = reference(&plan);
    for kind in ALL {
        for transport in ["libgit2", "git"] {
            let (t, server) = TestRepo::with_server(kind, transport);
            let r = t.steps(&["-v", "apply", plan.to_str().unwrap()]).ok();
            assert!(
                r.stderr().contains("durable domain: remote"),
                "{}",
                r.explain()
            );
            assert_finished(&t, &server, &plan, &want, &format!("{kind:?}/{transport}"));
            let st = t.steps(&["--json", "status"]).ok().json();
            assert_eq!(st["data"]["durable"], "remote");
            assert_eq!(st["data"]["agree"], true, "{kind:?}/{transport}");
            // A rerun adds nothing, locally or remotely.
            let head = server.head();
            t.steps(&["apply", plan.to_str().unwrap()]).ok();
            assert_eq!(server.head(), head);
        }
    }
}

#[test]
fn a_fresh_box_resumes_from_the_remote_after_the_first_one_vanished() {
    let plan = fixture("mixed-30.jsonl");
    let plan_s = plan.to_str().unwrap();
    let want = reference(&plan);
    for kind in ALL {
        let (t, server) = TestRepo::with_server(kind, "libgit2");
        let r = t.steps_env(&["apply", plan_s], &[("GIT_STEPS_CRASH", "pushed@m11")]);
        assert_eq!(r.out.status.signal(), Some(9), "{}", r.explain());
        std::fs::remove_dir_all(&t.work).unwrap();
        let fresh = t.sibling("fresh", Some(server.url()));
        fresh.steps(&["init", "--remote", "origin"]).ok();
        let r = fresh.steps(&["--json", "apply", plan_s]).ok();
        let steps = r.json()["data"]["steps"].as_array().unwrap().clone();
        let skipped = steps.iter().filter(|s| s["action"] == "skip").count();
        assert_eq!(
            skipped,
            11,
            "{kind:?}: m01..m11 were durable\n{}",
            r.explain()
        );
        assert_finished(&fresh, &server, &plan, &want, &format!("{kind:?}"));
    }
}

#[test]
fn a_local_branch_behind_the_remote_is_fast_forwarded() {
    let plan = fixture("eight-steps.jsonl");
    let lines: Vec<String> = std::fs::read_to_string(&plan)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let (a, server) = TestRepo::with_server(Kind::Path, "libgit2");
    let first = a.plan("first.jsonl", &lines[..3]);
    a.steps(&["apply", first.to_str().unwrap()]).ok();
    let b = a.sibling("b", Some(server.url()));
    b.steps(&["init", "--remote", "origin"]).ok();
    a.steps(&["apply", plan.to_str().unwrap()]).ok();
    // Before the resume, verify sees local and durable disagree, and the
    // durable head's fingerprint is not computable here yet.
    let v = b.steps(&["--json", "verify"]).code_is(3).json();
    let first = v["data"]["problems"][0].as_str().unwrap().to_string();
    assert!(first.contains("durable branch"), "{v}");
    b.steps(&["fingerprint"])
        .code_is(1)
        .stderr_has("git steps resume");
    let r = b.steps(&["--json", "resume"]).ok();
    let doc = r.json();
    assert_eq!(
        doc["data"]["reconcile"]["action"],
        "fast-forward",
        "{}",
        r.explain()
    );
    assert_eq!(doc["data"]["reconcile"]["steps"], 5);
    b.steps(&["verify"]).ok();
    assert_eq!(
        b.steps(&["fingerprint"]).ok().stdout().trim(),
        a.steps(&["fingerprint"]).ok().stdout().trim()
    );
    assert_eq!(b.head(), server.head());
    assert_eq!(b.read("log.txt"), a.read("log.txt"));
    assert_eq!(
        b.git_out(&["status", "--porcelain", "--untracked-files=all"]),
        ""
    );
}

#[test]
fn local_receipted_commits_the_remote_lacks_are_pushed() {
    let plan = fixture("eight-steps.jsonl");
    let want = reference(&plan);
    let (t, server) = TestRepo::with_server(Kind::Daemon, "libgit2");
    // Applied while the durable domain was local, then the remote is added.
    t.steps(&["apply", "--remote", "", plan.to_str().unwrap()])
        .ok();
    assert_eq!(server.head(), None);
    let r = t.steps(&["--json", "resume", "--dry-run"]).ok();
    assert_eq!(r.json()["data"]["reconcile"]["action"], "push");
    assert_eq!(server.head(), None, "a dry run pushes nothing");
    let r = t.steps(&["--json", "resume"]).ok();
    assert_eq!(
        r.json()["data"]["reconcile"]["action"],
        "push",
        "{}",
        r.explain()
    );
    assert_finished(&t, &server, &plan, &want, "ahead");
}

#[test]
fn diverged_histories_are_refused_showing_both_heads() {
    let (a, server) = TestRepo::with_server(Kind::Path, "libgit2");
    let s =
        |id: &str, f: &str| line(serde_json::json!({"id": id, "files": {f: format!("{id}\n")}}));
    a.steps_stdin(&["apply", "-"], &s("s1", "a")).ok();
    let b = a.sibling("b", Some(server.url()));
    b.steps(&["init", "--remote", "origin"]).ok();
    a.steps_stdin(&["apply", "-"], &s("s2", "a")).ok();
    // b makes a receipted commit that never reached the remote.
    b.steps_stdin(&["apply", "--remote", "", "-"], &s("x2", "b"))
        .ok();
    let remote_before = server.head();
    let r = b.refuses("", 3, &["git reset --keep"], || {
        b.steps(&["--json", "resume"])
    });
    let msg = r.json()["data"]["message"].as_str().unwrap().to_string();
    let (bh, rh) = (b.head().unwrap(), remote_before.clone().unwrap());
    assert!(msg.contains(&bh[..12]) && msg.contains(&rh[..12]), "{msg}");
    assert_eq!(server.head(), remote_before);
}

#[test]
fn a_commit_without_receipt_on_the_remote_is_refused() {
    let (a, server) = TestRepo::with_server(Kind::Path, "libgit2");
    a.steps_stdin(
        &["apply", "-"],
        &line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}})),
    )
    .ok();
    // Someone pushes a hand-made commit to the run's branch.
    let other = a.sibling("other", Some(server.url()));
    other.write("g", "hand-made\n");
    other.commit_all("hand-made");
    other.git(&["push", "-q", "origin", "main"]).ok();
    a.refuses("", 3, &["no receipt"], || {
        a.steps_stdin(
            &["apply", "-"],
            &line(serde_json::json!({"id": "s2", "files": {"f": "2\n"}})),
        )
    });
}

#[test]
fn a_worktree_left_mid_step_is_saved_then_repaired() {
    let plan = fixture("mixed-30.jsonl");
    let plan_s = plan.to_str().unwrap();
    let want = reference(&plan);
    let (t, server) = TestRepo::with_server(Kind::Http, "libgit2");
    let r = t.steps_env(
        &["apply", plan_s],
        &[("GIT_STEPS_CRASH", "worktree-partial@m17")],
    );
    assert_eq!(r.out.status.signal(), Some(9));
    assert_ne!(t.git_out(&["status", "--porcelain"]), "");
    t.steps(&["apply", plan_s])
        .ok()
        .stderr_has("saved under refs/steps/rescue/main/1");
    let rescue = t.git_out(&["log", "-1", "--format=%s", "refs/steps/rescue/main/1"]);
    assert!(rescue.contains("mid-step m17"), "{rescue}");
    assert_finished(&t, &server, &plan, &want, "repair");
}

#[test]
fn a_lock_left_by_a_dead_process_does_not_block_and_a_live_one_does() {
    let (t, _server) = TestRepo::with_server(Kind::Path, "libgit2");
    let lock = t.work.join(".git/steps.lock");
    // A pid that cannot be running (above the kernel's pid_max).
    std::fs::write(&lock, "4194305\n").unwrap();
    let one = line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}}));
    t.steps_stdin(&["apply", "-"], &one)
        .ok()
        .stderr_has("no longer running");
    // A live holder: `flock` keeps the lock while its command runs, and
    // the command says so (flock takes the lock before it starts it).
    let held = t.tmp.path().join("held");
    let mut holder = std::process::Command::new("flock")
        .arg("--close")
        .arg(&lock)
        .args(["sh", "-c", "touch \"$0\"; exec sleep 30"])
        .arg(&held)
        .spawn()
        .expect("flock(1) from util-linux");
    wait_for(&held, "flock's holder");
    let two = line(serde_json::json!({"id": "s2", "files": {"f": "2\n"}}));
    // SPEC: exit 4, another writer; with --json the kind says so too.
    t.steps_stdin(&["apply", "-"], &two)
        .code_is(4)
        .stderr_has("another git-steps is applying");
    let busy = t.steps_stdin(&["--json", "apply", "-"], &two).code_is(4);
    assert_eq!(busy.json()["data"]["kind"], "busy", "{}", busy.explain());
    // status says a run is in progress, without taking the lock (the
    // portable set knows the lock is held, not by whom, when the holder
    // is not a git-steps that wrote its pid).
    if !linux_only("the holder's pid, read from /proc/locks") {
        let st = t.steps(&["--json", "status"]).ok().json();
        assert_eq!(st["data"]["running"], holder.id(), "{st}");
        let text = t.steps(&["status"]).ok().stdout();
        assert!(
            text.contains(&format!(
                "running:       git-steps pid {} is applying",
                holder.id()
            )),
            "{text}"
        );
    }
    holder.kill().unwrap();
    holder.wait().unwrap();
    t.steps_stdin(&["apply", "-"], &two).ok();
    let st = t.steps(&["--json", "status"]).ok().json();
    assert!(st["data"].get("running").is_none(), "{st}");
}

#[test]
fn a_push_the_server_rejects_is_a_failure_never_a_success() {
    for (kind, transport) in [
        (Kind::Daemon, "libgit2"),
        (Kind::Http, "libgit2"),
        (Kind::Path, "git"),
        (Kind::Daemon, "git"),
    ] {
        let (t, server) = TestRepo::with_server(kind, transport);
        t.steps_stdin(
            &["apply", "-"],
            &line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}})),
        )
        .ok();
        server.hook(
            "pre-receive",
            "#!/bin/sh\necho 'policy: no more steps today' >&2\nexit 1\n",
        );
        let ctx = format!("{kind:?}/{transport}");
        let remote_before = server.head();
        // No local receipt either: nothing changes in the box.
        let r = t.refuses(&ctx, 1, &[], || {
            t.steps_stdin(
                &["--json", "apply", "-"],
                &line(serde_json::json!({"id": "s2", "files": {"f": "2\n"}})),
            )
        });
        let msg = r.json()["data"]["message"].as_str().unwrap().to_string();
        assert!(msg.contains("refused the update"), "{ctx}: {msg}");
        assert_eq!(server.head(), remote_before, "{ctx}");
        assert_eq!(t.step_ids(), ["s1"]);
    }
}

/// Two runners applying the same plan to one branch at the same time (a
/// runner's old box came back after its failover): one wins each race, the
/// loser exits 4 and reruns; every step lands once, in order. (Runners with
/// different plans on one run are refused: tests/it/trust.rs.)
#[test]
fn concurrent_runners_lose_nothing() {
    for kind in [Kind::Path, Kind::Daemon] {
        let (a, server) = TestRepo::with_server(kind, "libgit2");
        a.steps_stdin(
            &["apply", "-"],
            &line(serde_json::json!({"id": "init0", "files": {"README": "x\n"}})),
        )
        .ok();
        let b = a.sibling("b", Some(server.url()));
        b.steps(&["init", "--remote", "origin"]).ok();
        let mk = |t: &TestRepo, p: &str| {
            let lines: Vec<String> = (1..=12)
                .map(|i| line(serde_json::json!({"id": format!("{p}{i}"), "files": {format!("{p}/{i}.txt"): format!("{p} {i}\n")}})))
                .collect();
            t.plan(&format!("{p}.jsonl"), &lines)
        };
        let (pa, pb) = (mk(&a, "a"), mk(&b, "a"));
        // Each box commits as its own runner (the tests' clock is fixed, so
        // the same step by the same identity would be the same commit, and
        // there would be no race to lose).
        let run = |t: &TestRepo, p: &std::path::Path, who: &str| -> (usize, usize) {
            let (mut attempts, mut lost) = (0, 0);
            loop {
                attempts += 1;
                assert!(attempts < 200, "no progress");
                let r = t.steps_env(
                    &["-q", "apply", p.to_str().unwrap()],
                    &[("GIT_COMMITTER_NAME", who)],
                );
                match r.code() {
                    Some(0) => return (attempts, lost),
                    Some(4) => lost += 1,
                    _ => panic!("unexpected\n{}", r.explain()),
                }
            }
        };
        let (ra, rb) = std::thread::scope(|s| {
            let ha = s.spawn(|| run(&a, &pa, "runner a"));
            let hb = s.spawn(|| run(&b, &pb, "runner b"));
            (ha.join().unwrap(), hb.join().unwrap())
        });
        let ids = server.step_ids();
        let want: Vec<String> = std::iter::once("init0".to_string())
            .chain((1..=12).map(|i| format!("a{i}")))
            .collect();
        assert_eq!(ids, want, "{kind:?}: every step once, in order");
        eprintln!("{kind:?}: runner a {ra:?}, runner b {rb:?} (attempts, races lost)");
        // Both boxes converge on the durable head.
        for t in [&a, &b] {
            t.steps(&["resume"]).ok();
            assert_eq!(t.head(), server.head());
            t.steps(&["verify"]).ok();
        }
    }
}

/// SIGKILL at random instants, one to three times in a row (a kill can land
/// in a resume), resuming on the same box or on a fresh clone; across all
/// server kinds. Trials per kind: `GIT_STEPS_TRIALS` (default 15; `scripts/soak.sh`
/// runs hundreds, over several seeds).
#[test]
fn random_kills_never_diverge() {
    random_kills(&[], 15, 0x5eed_cafe);
}

/// The same with group commit (`apply --batch 3`): a kill anywhere in a
/// batch loses nothing the rerun does not redo, and doubles nothing.
/// Trials per kind: `GIT_STEPS_TRIALS` (default 8; see `scripts/soak.sh`).
#[test]
fn random_kills_with_batches_never_diverge() {
    random_kills(&["--batch", "3"], 8, 0xba7c_4e55);
}

fn random_kills(extra: &[&str], default_trials: u64, default_seed: u64) {
    let (trials, seed) = trials_and_seed(default_trials, default_seed);
    let plan = fixture("eight-steps.jsonl");
    let mut apply = vec!["apply", plan.to_str().unwrap()];
    apply.extend(extra);
    let want = reference(&plan);
    let mut total = (0, 0, 0, 0); // trials, kills that landed, fresh boxes, exit-4 reruns
    for (k, kind) in ALL.into_iter().enumerate() {
        let mut rng = Rng(seed ^ (k as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        // How long an uninterrupted run takes here, to aim the kills.
        let (t0, _s0) = TestRepo::with_server(kind, "libgit2");
        let start = Instant::now();
        t0.steps(&apply).ok();
        let span = start.elapsed().as_micros() as u64;
        for trial in 0..trials {
            let ctx = format!("{kind:?} trial {trial} seed {seed}");
            let (t, server) = TestRepo::with_server(kind, "libgit2");
            // The user's work in progress, staged, on a path no step
            // touches: carried along through every kill and repair, and
            // never part of a step's commit.
            t.write("wip.txt", "the user's work in progress\n");
            t.git(&["add", "wip.txt"]).ok();
            let mut box_ = t;
            let mut same_box = true;
            let kills = 1 + rng.below(3);
            for n in 0..kills {
                let mut child = box_.spawn_steps(&apply);
                std::thread::sleep(Duration::from_micros(rng.below(span * 6 / 5)));
                let _ = child.kill();
                let status = child.wait().unwrap();
                if status.signal() == Some(9) {
                    total.1 += 1;
                }
                if rng.below(2) == 0 {
                    // The box vanishes: only the remote survives.
                    let name = format!("fresh-{n}");
                    let fresh = box_.sibling(&name, Some(server.url()));
                    fresh.steps(&["-q", "init", "--remote", "origin"]).ok();
                    box_ = fresh;
                    same_box = false;
                    total.2 += 1;
                }
            }
            // A push the killed run had in flight can still land after the
            // kill (the server finishes it): the resume then loses that race
            // and exits 4, and rerunning reconciles, as the SPEC says.
            let mut r = box_.steps(&apply);
            let mut reruns = 0;
            while r.code() == Some(4) && reruns < 3 {
                reruns += 1;
                total.3 += 1;
                r = box_.steps(&apply);
            }
            assert_eq!(r.code(), Some(0), "{ctx}\n{}", r.explain());
            if same_box {
                assert_eq!(
                    box_.read("wip.txt"),
                    "the user's work in progress\n",
                    "{ctx}"
                );
                assert_eq!(
                    box_.git_out(&["status", "--porcelain", "--untracked-files=all"]),
                    "A  wip.txt",
                    "{ctx}: the user's staged work, and nothing else"
                );
                box_.git(&["rm", "-q", "--cached", "wip.txt"]).ok();
                std::fs::remove_file(box_.path("wip.txt")).unwrap();
            }
            // (The remote's tree is the reference's: the staged work never
            // reached a step's commit.)
            assert_finished(&box_, &server, &plan, &want, &ctx);
            total.0 += 1;
        }
    }
    eprintln!(
        "random kills {extra:?}: {} trials, {} kills landed mid-run, {} fresh boxes, {} reruns after exit 4, 0 divergences",
        total.0, total.1, total.2, total.3
    );
    assert!(
        total.1 > total.0 / 2,
        "most kills must land mid-run to test anything: {total:?}"
    );
}

/// A local bare remote gets loose objects hard-linked; objects that are
/// packed locally (here the base history, after `git gc`) must still be
/// copied, and the remote must end up complete.
#[test]
fn a_local_remote_receives_packed_base_history_and_linked_steps() {
    let t = TestRepo::new();
    for i in 1..=3 {
        t.write(&format!("base{i}.txt"), &format!("base {i}\n"));
        t.git(&["add", "-A"]).ok();
        t.git(&["commit", "-q", "-m", &format!("base {i}")]).ok();
    }
    t.git(&["gc", "-q"]).ok();
    let loose = t.git_out(&["count-objects"]);
    assert!(loose.starts_with("0 objects"), "base not packed: {loose}");
    let server = t.start_server(Kind::Path);
    t.steps(&["init", "--remote", server.url()]).ok();
    let plan = fixture("eight-steps.jsonl");
    t.steps(&["apply", plan.to_str().unwrap()]).ok();
    assert_eq!(server.step_ids(), plan_ids(&plan));
    assert_eq!(t.head(), server.head());
    server.git(&["fsck", "--strict", "--no-dangling"]);
    let log = server.git(&["log", "--format=%s", "main"]);
    for i in 1..=3 {
        assert!(
            log.contains(&format!("base {i}")),
            "base {i} missing:\n{log}"
        );
    }
}

/// A box whose HEAD is on another branch switches to the run's branch,
/// which exists only on the remote. Killed half-way through that switch,
/// the rerun finishes it (saving what it found under a rescue ref) instead
/// of refusing the old branch's files as the user's edits; the other
/// branch keeps its commits.
#[test]
fn a_switch_to_the_run_branch_killed_half_way_is_finished_on_rerun() {
    let plan = fixture("mixed-30.jsonl");
    let plan_s = plan.to_str().unwrap();
    let want = reference(&plan);
    for point in ["worktree-partial", "worktree-files", "worktree-done"] {
        let t = TestRepo::new();
        let server = t.start_server(Kind::Path);
        // The run, done elsewhere.
        let first = t.sibling("first", None);
        first.steps(&["-q", "init", "--remote", server.url()]).ok();
        first.steps(&["-q", "apply", plan_s]).ok();
        // This box works on `dev`.
        t.git(&["switch", "-q", "-c", "dev"]).ok();
        t.write("dev.txt", "my work\n");
        t.write("README.md", "dev's readme\n");
        t.commit_all("dev work");
        let dev = t.git_out(&["rev-parse", "dev"]);
        t.steps(&["-q", "init", "--remote", server.url(), "--branch", "main"])
            .ok();
        let r = t.steps_env(
            &["apply", plan_s],
            &[("GIT_STEPS_CRASH", &format!("{point}@-"))],
        );
        assert_eq!(
            r.code(),
            None,
            "{point}: the crash did not fire: {}",
            r.explain()
        );
        let r = t.steps(&["apply", plan_s]).ok();
        assert_finished(&t, &server, &plan, &want, point);
        assert_eq!(t.git_out(&["rev-parse", "dev"]), dev, "{point}: dev moved");
        assert_eq!(
            t.git_out(&["for-each-ref", "refs/steps/switch"]),
            "",
            "{point}: the switch marker is left"
        );
        if point != "worktree-done" {
            assert!(
                r.stderr().contains("refs/steps/rescue/main/"),
                "{point}: {}",
                r.stderr()
            );
        }
    }
}

/// Issue 14, item 11: a run's first push in a project's clone carries the
/// project's own commits, and reconcile counts them as what they are, not
/// as receipted steps.
#[test]
fn reconcile_counts_receipts_and_the_base_history_apart() {
    let plan = fixture("eight-steps.jsonl");
    let (t, server) = TestRepo::with_server(Kind::Path, "libgit2");
    for i in 0..4 {
        t.write("README", &format!("version {i}\n"));
        t.commit_all(&format!("project commit {i}"));
    }
    let base: usize = t
        .git_out(&["rev-list", "--count", "HEAD"])
        .trim()
        .parse()
        .unwrap();
    t.steps(&["apply", "--remote", "", plan.to_str().unwrap()])
        .ok();
    let r = t.steps(&["resume", "--dry-run"]).ok();
    assert!(
        r.stderr().contains(&format!(
            "would push what the remote lacked (8 step(s) and {base} commit(s) of the history the run started from): the remote has no such branch; it would be created at"
        )),
        "{}",
        r.explain()
    );
    let r = t.steps(&["--json", "resume"]).ok();
    let doc = r.json();
    let action = &doc["data"]["reconcile"];
    assert_eq!(action["action"], "push", "{}", r.explain());
    assert_eq!(action["steps"], 8, "{}", r.explain());
    assert_eq!(action["commits"], 8 + base, "{}", r.explain());
    assert_eq!(server.head(), t.head());
    // A new box fast-forwards by the same count.
    let behind = TestRepo::new();
    let r = behind
        .steps(&["--json", "resume", "--remote", server.url()])
        .ok();
    let action = &r.json()["data"]["reconcile"];
    assert_eq!(action["action"], "fast-forward", "{}", r.explain());
    assert_eq!(action["steps"], 8, "{}", r.explain());
}

/// Issue 14, item 10: with a configured remote, the README's audit command
/// works as written: every accepted push and every fetch moves
/// `refs/remotes/origin/<branch>`, as git push and git fetch do.
#[test]
fn the_remote_tracking_ref_follows_the_durable_branch() {
    let plan = fixture("eight-steps.jsonl");
    for transport in ["libgit2", "git"] {
        let t = TestRepo::new();
        let server = t.start_server(Kind::Daemon);
        t.git(&["remote", "add", "origin", server.url()]).ok();
        t.steps(&[
            "init",
            "--remote",
            "origin",
            "--branch",
            "agent/run-1",
            "--transport",
            transport,
        ])
        .ok();
        t.steps(&["apply", plan.to_str().unwrap()]).ok();
        let audit = t.git_out(&[
            "log",
            "--format=%(trailers:key=Step-Id,valueonly)",
            "origin/agent/run-1",
        ]);
        let ids: Vec<&str> = audit.split_whitespace().rev().collect();
        assert_eq!(ids, plan_ids(&plan), "{transport}: {audit}");
        assert_eq!(
            t.git_out(&["rev-parse", "origin/agent/run-1"]),
            server.git(&["rev-parse", "agent/run-1"]).trim(),
            "{transport}"
        );
        // A fresh box's fetch moves it too.
        let fresh = t.sibling("fresh", Some(server.url()));
        fresh
            .steps(&["init", "--remote", "origin", "--branch", "agent/run-1"])
            .ok();
        fresh.steps(&["resume"]).ok();
        assert_eq!(
            fresh.git_out(&["rev-parse", "origin/agent/run-1"]),
            t.git_out(&["rev-parse", "origin/agent/run-1"]),
            "{transport}"
        );
    }
}

/// A kill on either side of the remote-tracking ref's update leaves a box
/// that resumes to the same head, with the tracking ref at the durable one.
#[test]
fn a_kill_around_the_tracking_ref_resumes() {
    use std::os::unix::process::ExitStatusExt;
    let plan = fixture("eight-steps.jsonl");
    for point in ["pushed", "tracking-updated"] {
        let t = TestRepo::new();
        let server = t.start_server(Kind::Path);
        t.git(&["remote", "add", "origin", server.url()]).ok();
        t.steps(&["init", "--remote", "origin", "--branch", "run"])
            .ok();
        let r = t.steps_env(
            &["apply", plan.to_str().unwrap()],
            &[("GIT_STEPS_CRASH", &format!("{point}@s3"))],
        );
        assert_eq!(r.out.status.signal(), Some(9), "{point}\n{}", r.explain());
        let durable = server.git(&["rev-parse", "run"]).trim().to_string();
        let tracking = t.git_out(&["rev-parse", "origin/run"]);
        // Before the update the ref still shows s2; after it, s3 (durable).
        assert_eq!(tracking == durable, point == "tracking-updated", "{point}");
        t.steps(&["apply", plan.to_str().unwrap()]).ok();
        assert_eq!(t.step_ids(), plan_ids(&plan), "{point}");
        assert_eq!(
            t.git_out(&["rev-parse", "origin/run"]),
            server.git(&["rev-parse", "run"]).trim(),
            "{point}"
        );
    }
}

/// Issue 16 (transient failures): a smart-HTTP server whose first two
/// receive-pack requests answer 503 (a proxy restarting). With either
/// transport the run retries with backoff and finishes: exit 0, every step
/// once on the remote. When the server keeps failing past the retries, the
/// run stops with exit 1 saying how often it tried, nothing is durable
/// twice, and the rerun after the server recovers finishes the plan.
#[test]
fn a_server_answering_503_is_retried_and_never_doubles_a_step() {
    let plan = fixture("eight-steps.jsonl");
    let p = plan.to_str().unwrap();
    let want = reference(&plan);
    for transport in ["libgit2", "git"] {
        let (t, server) = TestRepo::with_server(Kind::Http, transport);
        let fail = server.root.join("fail-receive-pack");
        std::fs::write(&fail, "2\n").unwrap();
        t.steps(&["apply", p]).ok();
        assert_finished(&t, &server, &plan, &want, transport);
        assert_eq!(
            std::fs::read_to_string(&fail).unwrap().trim(),
            "0",
            "{transport}: both 503s were served"
        );
        let log = std::fs::read_to_string(server.root.join("requests.log")).unwrap();
        assert!(
            log.lines()
                .filter(|l| l.contains("git-receive-pack"))
                .count()
                >= 8 + 2,
            "{transport}: {log}"
        );

        // Down for longer than the retries last: exit 1, said so.
        let (t, server) = TestRepo::with_server(Kind::Http, transport);
        std::fs::write(server.root.join("fail-receive-pack"), "1000\n").unwrap();
        let r = t
            .steps_env(&["apply", p], &[("GIT_STEPS_NET_RETRIES", "2")])
            .code_is(1);
        assert!(
            r.stderr().contains("tried 3 times"),
            "{transport}: {}",
            r.explain()
        );
        assert!(server.step_ids().is_empty(), "{transport}");
        // The server recovers; the same command finishes the plan.
        std::fs::write(server.root.join("fail-receive-pack"), "0\n").unwrap();
        t.steps(&["apply", p]).ok();
        assert_finished(&t, &server, &plan, &want, transport);
    }
}

/// Issue 16: `status` with the remote down shows this box's view, marked as
/// not confirmed by the remote, and exits 0; `--json` says
/// `"remote": "unreachable"`. With the remote up it says `confirmed`.
#[test]
fn status_with_the_remote_down_shows_the_local_view_unconfirmed() {
    let plan = fixture("eight-steps.jsonl");
    for kind in [Kind::Http, Kind::Daemon] {
        let (t, server) = TestRepo::with_server(kind, "libgit2");
        t.steps(&["apply", plan.to_str().unwrap()]).ok();
        let up = t.steps(&["--json", "status"]).ok().json();
        assert_eq!(up["data"]["remote"], "confirmed", "{kind:?}");
        assert_eq!(up["data"]["agree"], true);
        drop(server);
        let down = t.steps(&["--json", "status"]).ok().json();
        assert_eq!(down["data"]["remote"], "unreachable", "{kind:?}: {down}");
        assert_eq!(down["data"]["durable_head"], serde_json::Value::Null);
        assert_eq!(down["data"]["agree"], false);
        assert_eq!(down["data"]["steps_applied"], 8);
        assert_eq!(down["data"]["local_head"].as_str(), t.head().as_deref());
        assert!(
            down["data"]["remote_error"]
                .as_str()
                .unwrap()
                .contains("127.0.0.1"),
            "{down}"
        );
        let text = t.steps(&["status"]).ok().stdout();
        assert!(text.contains("not confirmed by the remote"), "{text}");
        assert!(text.contains("agree:         unknown"), "{text}");
        // Everything that writes still needs the remote: exit 1.
        t.steps(&["apply", plan.to_str().unwrap()]).code_is(1);
    }
}

/// The ssh tests' box: eight-steps, its reference, a repository, a real
/// sshd on 127.0.0.1 and the environment that reaches it.
struct SshBox {
    plan: std::path::PathBuf,
    want: (String, String),
    t: TestRepo,
    server: Server,
    env: Vec<(String, String)>,
}

fn ssh_box() -> SshBox {
    let plan = fixture("eight-steps.jsonl");
    let want = reference(&plan);
    let t = TestRepo::new();
    let server = t.start_server(Kind::Ssh);
    let env = server.client_env();
    SshBox {
        plan,
        want,
        t,
        server,
        env,
    }
}

/// Issue 16: an ssh remote works as `git push` does for the same user —
/// the key and known_hosts of the user's ssh config — against a real sshd
/// on 127.0.0.1 with a generated host key and user key. With no
/// `--transport`, an ssh remote goes through git, and `init` says so. An
/// unknown or changed host key is refused by ssh: exit 1, nothing pushed.
#[test]
fn an_ssh_remote_works_as_git_push_does() {
    let SshBox {
        plan,
        want,
        t,
        server,
        env,
    } = ssh_box();
    let p = plan.to_str().unwrap();
    let env: Vec<(&str, &str)> = env.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let init = t.steps_env(&["init", "--remote", server.url()], &env).ok();
    assert!(
        init.stderr().contains("transport git: git's own ssh"),
        "{}",
        init.explain()
    );
    assert_eq!(t.git_out(&["config", "steps.transport"]), "git");
    t.steps_env(&["apply", p], &env).ok();
    assert_finished(&t, &server, &plan, &want, "ssh");
    let st = t.steps_env(&["--json", "status"], &env).ok().json();
    assert_eq!(st["data"]["remote"], "confirmed");

    // The host key is not the one known_hosts holds (or none is known):
    // ssh refuses before anything is sent.
    let known = server.root.join("known_hosts");
    let good = std::fs::read_to_string(&known).unwrap();
    let step = line(serde_json::json!({"id": "s9", "files": {"new.txt": "x\n"}}));
    let other_key = {
        let k = server.root.join("other");
        std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&k)
            .status()
            .unwrap();
        std::fs::read_to_string(k.with_extension("pub")).unwrap()
    };
    let port_prefix = good.split_whitespace().next().unwrap().to_string();
    for (what, content) in [
        ("unknown host", String::new()),
        (
            "changed host key",
            format!(
                "{port_prefix} {}\n",
                other_key
                    .split_whitespace()
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        ),
    ] {
        std::fs::write(&known, content).unwrap();
        let before = server.head();
        let r = t
            .steps_env_stdin(&["apply", "-"], &env, Some(&step))
            .code_is(1);
        assert!(
            r.stderr()
                .to_lowercase()
                .contains("host key verification failed"),
            "{what}: {}",
            r.explain()
        );
        assert_eq!(server.head(), before, "{what}: something was pushed");
    }
    std::fs::write(&known, good).unwrap();
    t.steps_env_stdin(&["apply", "-"], &env, Some(&step)).ok();
    assert_eq!(server.step_ids().last().map(String::as_str), Some("s9"));
}

/// Issue 16: https with a private CA, both transports, the CA given the
/// ways users give it: `http.sslCAInfo` in git config, `GIT_SSL_CAINFO`, or
/// `SSL_CERT_FILE` (OpenSSL's). libgit2 read only the last until now. A server whose
/// certificate the trusted CA did not sign is refused: exit 1, nothing
/// pushed.
#[test]
fn https_with_a_private_ca_works_and_a_foreign_certificate_is_refused() {
    let plan = fixture("eight-steps.jsonl");
    let p = plan.to_str().unwrap();
    let want = reference(&plan);
    for transport in ["libgit2", "git"] {
        for how in ["http.sslCAInfo", "GIT_SSL_CAINFO", "SSL_CERT_FILE"] {
            if transport == "git" && how == "SSL_CERT_FILE" {
                // OpenSSL's variable: Debian's git speaks TLS through
                // libcurl-gnutls, which does not read it (git does not either).
                continue;
            }
            let ctx = format!("{transport}, {how}");
            let (t, server) = TestRepo::with_server(Kind::Https, transport);
            let ca = server.root.join("ca.pem");
            let ca = ca.to_str().unwrap();
            // Another CA, which did not sign the server's certificate.
            crate::servers::make_ca(&server.root, "other", "someone else");
            let other = server.root.join("other.pem");
            let other = other.to_str().unwrap();
            // Whatever this machine's environment says about CAs is not
            // part of the case: git's variables win over its config.
            let unset = [
                "GIT_SSL_CAINFO",
                "GIT_SSL_CAPATH",
                "SSL_CERT_FILE",
                "SSL_CERT_DIR",
                "CURL_CA_BUNDLE",
            ];
            let run = |ca: &str, args: &[&str]| {
                if how == "http.sslCAInfo" {
                    t.git(&["config", "http.sslCAInfo", ca]).ok();
                    t.steps_without(args, &unset, &[])
                } else {
                    t.steps_without(args, &unset, &[(how, ca)])
                }
            };
            let r = run(other, &["apply", p]).code_is(1);
            let err = r.stderr().to_lowercase();
            assert!(
                err.contains("certificate") || err.contains("ssl"),
                "{ctx}: {}",
                r.explain()
            );
            assert!(
                server.step_ids().is_empty(),
                "{ctx}: pushed through a foreign certificate"
            );
            run(ca, &["apply", p]).ok();
            assert_finished(&t, &server, &plan, &want, &ctx);
        }
    }
}

/// Issue 52: libgit2 is built without ssh. `--transport libgit2` with an
/// ssh remote — by flag, or by `steps.transport` — is refused before
/// anything is written: exit 2, the hint names `--transport git`, the
/// repository and its config as they were, the remote untouched. A
/// configured remote whose push URL alone is ssh goes through git by
/// default, and its steps land over the real sshd.
#[test]
fn the_libgit2_transport_refuses_ssh_and_an_ssh_push_url_goes_through_git() {
    let SshBox {
        plan,
        want,
        t,
        server,
        env,
    } = ssh_box();
    let p = plan.to_str().unwrap();
    let env: Vec<(&str, &str)> = env.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let config = || std::fs::read_to_string(t.path(".git/config")).unwrap();
    let needles = ["libgit2 transport has no ssh", "--transport git"];

    let before = config();
    t.refuses("--transport libgit2", 2, &needles, || {
        t.steps_env(
            &["init", "--remote", server.url(), "--transport", "libgit2"],
            &env,
        )
    });
    assert_eq!(config(), before, "init wrote config it then refused");

    // The same choice made in config, and a remote named by the clone.
    t.git(&["remote", "add", "origin", server.bare().to_str().unwrap()]);
    t.git(&["config", "remote.origin.pushurl", server.url()]);
    t.git(&["config", "steps.transport", "libgit2"]);
    let before = config();
    t.refuses("steps.transport libgit2", 2, &needles, || {
        t.steps_env(&["init", "--remote", "origin"], &env)
    });
    assert_eq!(config(), before, "init wrote config it then refused");
    assert!(server.step_ids().is_empty());

    // Without the setting, the ssh push URL makes git the transport.
    t.git(&["config", "--unset", "steps.transport"]);
    let init = t.steps_env(&["init", "--remote", "origin"], &env).ok();
    assert!(
        init.stderr().contains("transport git"),
        "{}",
        init.explain()
    );
    assert_eq!(t.git_out(&["config", "steps.transport"]), "git");
    t.steps_env(&["apply", p], &env).ok();
    assert_finished(&t, &server, &plan, &want, "ssh push URL");
    // Set by hand after init: apply refuses as init did, nothing pushed.
    t.git(&["config", "steps.transport", "libgit2"]);
    let head = server.head();
    let step = line(serde_json::json!({"id": "s9", "files": {"new.txt": "x\n"}}));
    t.refuses("apply with steps.transport libgit2", 2, &needles, || {
        t.steps_env_stdin(&["apply", "-"], &env, Some(&step))
    });
    assert_eq!(server.head(), head);
}

/// Issue 52: a URL given as it is, that git's `insteadOf` rewrites to ssh,
/// is an ssh remote too: libgit2 refused for it (exit 2, nothing written),
/// and by default git carries it over the real sshd.
#[test]
fn an_https_url_that_insteadof_makes_ssh_is_an_ssh_remote() {
    let SshBox {
        plan,
        want,
        t,
        server,
        env,
    } = ssh_box();
    let p = plan.to_str().unwrap();
    let env: Vec<(&str, &str)> = env.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let alias = "https://steps.invalid/run.git";
    t.git(&["config", &format!("url.{}.insteadOf", server.url()), alias]);
    let before = std::fs::read_to_string(t.path(".git/config")).unwrap();
    t.refuses(
        "insteadOf to ssh",
        2,
        &["libgit2 transport has no ssh", "--transport git"],
        || t.steps_env(&["init", "--remote", alias, "--transport", "libgit2"], &env),
    );
    assert_eq!(
        std::fs::read_to_string(t.path(".git/config")).unwrap(),
        before
    );
    let init = t.steps_env(&["init", "--remote", alias], &env).ok();
    assert!(
        init.stderr().contains("transport git"),
        "{}",
        init.explain()
    );
    t.steps_env(&["apply", p], &env).ok();
    assert_finished(&t, &server, &plan, &want, "insteadOf to ssh");
}

/// Receive-pack POSTs a smart-HTTP server answered: the pushes.
fn pushes(server: &Server) -> usize {
    std::fs::read_to_string(server.root.join("requests.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("POST") && l.contains("git-receive-pack"))
        .count()
}

/// Issue 16 (group commit): `apply --batch N` makes up to N steps durable
/// in one compare-and-swap push; each step keeps its own commit and
/// receipt, the artifact and history are `apply`'s, and `steps.batch`
/// sets N. Counted at a smart-HTTP server, with both transports.
#[test]
fn apply_batch_pushes_once_per_batch_and_keeps_a_receipt_per_step() {
    let plan = fixture("eight-steps.jsonl");
    let p = plan.to_str().unwrap();
    let want = reference(&plan);
    for transport in ["libgit2", "git"] {
        let (t, server) = TestRepo::with_server(Kind::Http, transport);
        let before = pushes(&server);
        let doc = t.steps(&["--json", "apply", "--batch", "3", p]).ok().json();
        assert_eq!(
            pushes(&server) - before,
            3,
            "{transport}: 8 steps in batches of 3"
        );
        assert_finished(&t, &server, &plan, &want, transport);
        // Every step its own commit with its own receipt, in order, first parent.
        let subjects = server.git(&["log", "--reverse", "--first-parent", "--format=%s", "main"]);
        assert_eq!(subjects.lines().count(), 8, "{transport}: {subjects}");
        let steps = doc["data"]["steps"].as_array().unwrap();
        let ids: Vec<&str> = steps.iter().map(|o| o["step"].as_str().unwrap()).collect();
        assert_eq!(ids, plan_ids(&plan), "{transport}: outcomes in plan order");
        assert!(
            steps.iter().all(|o| o["action"] == "applied"),
            "{transport}"
        );
        for (o, c) in steps.iter().zip(
            server
                .git(&["log", "--reverse", "--format=%H", "main"])
                .lines(),
        ) {
            assert_eq!(
                o["commit"], c,
                "{transport}: each outcome names its own receipt"
            );
        }
        // The local reflog shows one move per batch.
        let reflog = t.git_out(&["reflog", "--format=%gs", "main"]);
        assert!(
            reflog.contains("git-steps: steps s7..s8"),
            "{transport}: {reflog}"
        );
        t.steps(&["verify", p]).ok();
        // A rerun pushes nothing.
        let before = pushes(&server);
        t.steps(&["apply", "--batch", "3", p]).ok();
        assert_eq!(pushes(&server), before, "{transport}: nothing to push");

        // steps.batch in git config.
        let (t, server) = TestRepo::with_server(Kind::Http, transport);
        t.git(&["config", "steps.batch", "4"]).ok();
        let before = pushes(&server);
        t.steps(&["apply", p]).ok();
        assert_eq!(pushes(&server) - before, 2, "{transport}: steps.batch=4");
        assert_finished(&t, &server, &plan, &want, transport);
    }
    // A batch of 0 is a usage error; a bad steps.batch an input error.
    let (t, _server) = TestRepo::with_server(Kind::Path, "libgit2");
    t.steps(&["apply", "--batch", "0", p]).code_is(2);
    t.git(&["config", "steps.batch", "many"]).ok();
    t.steps(&["apply", p]).code_is(1).stderr_has("steps.batch");
}

/// A step that does not apply, in the middle of a batch: the steps staged
/// before it become durable first (as they would one push each), the
/// failing step is named (exit 1), and nothing of it is written.
#[test]
fn a_failing_step_in_a_batch_lands_the_steps_before_it() {
    let plan = fixture("eight-steps.jsonl");
    let lines: Vec<String> = std::fs::read_to_string(&plan)
        .unwrap()
        .lines()
        .take(2)
        .map(str::to_string)
        .chain([
            r#"{"id": "bad", "patch": "--- a/log.txt\n+++ b/log.txt\n@@ -1 +1 @@\n-nope\n+yes\n"}"#
                .to_string(),
            r#"{"id": "after", "files": {"z.txt": "z\n"}}"#.to_string(),
        ])
        .collect();
    let (t, server) = TestRepo::with_server(Kind::Http, "libgit2");
    let p = t.plan("bad.jsonl", &lines);
    let before = pushes(&server);
    let r = t
        .steps(&["--json", "apply", "--batch", "5", p.to_str().unwrap()])
        .code_is(1);
    assert_eq!(r.json()["data"]["step"], "bad", "{}", r.explain());
    assert_eq!(server.step_ids(), ["s1", "s2"]);
    assert_eq!(pushes(&server) - before, 1, "one push for s1 and s2");
    assert_eq!(t.head(), server.head());
    assert_eq!(
        t.git_out(&["status", "--porcelain", "--untracked-files=all"]),
        ""
    );
    let done = r.json()["data"]["steps"].clone();
    assert_eq!(done.as_array().map(Vec::len), Some(2), "{done}");
}

/// An untracked file in the way of a step staged after others: that step
/// is refused (exit 3) naming the file, the steps before it land, and the
/// file is untouched. (Its check looks at what the batch's one worktree
/// update would write, not at the steps one by one.)
#[test]
fn an_untracked_file_in_the_way_of_a_batched_step_is_refused_and_kept() {
    let (t, server) = TestRepo::with_server(Kind::Path, "libgit2");
    let p = t.plan(
        "abc.jsonl",
        &[
            r#"{"id": "s1", "files": {"a.txt": "a\n"}}"#.to_string(),
            r#"{"id": "s2", "files": {"a.txt": null, "b.txt": "b\n"}}"#.to_string(),
            r#"{"id": "s3", "files": {"c.txt": "c\n"}}"#.to_string(),
        ],
    );
    t.write("c.txt", "mine\n");
    t.steps(&["apply", "--batch", "5", p.to_str().unwrap()])
        .code_is(3)
        .stderr_has("refused step s3: c.txt is in the worktree but not in the last step's tree");
    assert_eq!(server.step_ids(), ["s1", "s2"]);
    assert_eq!(
        std::fs::read_to_string(t.work.join("c.txt")).unwrap(),
        "mine\n"
    );
    assert!(
        !t.work.join("a.txt").exists(),
        "s1's file, deleted by s2, is not written"
    );
    assert_eq!(t.git_out(&["status", "--porcelain"]), "?? c.txt");
    std::fs::remove_file(t.work.join("c.txt")).unwrap();
    t.steps(&["apply", "--batch", "5", p.to_str().unwrap()])
        .ok();
    assert_eq!(server.step_ids(), ["s1", "s2", "s3"]);
}

/// Something appears in the worktree while a batch is built — here an
/// untracked `c.txt`, written by a smudge filter that runs when the batch's
/// last step is staged (after that step's own check), standing in for a
/// user or another program. The check before the push finds it: the batch
/// is refused (exit 3), nothing of it is pushed, the file is kept.
#[test]
fn a_file_that_appears_while_a_batch_is_built_is_never_written_over() {
    let (t, server) = TestRepo::with_server(Kind::Path, "libgit2");
    t.write(".gitattributes", "*.dat filter=side\n");
    t.commit_all("attributes");
    t.git(&["config", "filter.side.smudge", "echo mine > c.txt; cat"])
        .ok();
    t.git(&["config", "filter.side.clean", "cat"]).ok();
    let p = t.plan(
        "side.jsonl",
        &[
            r#"{"id": "s1", "files": {"a.txt": "a\n"}}"#.to_string(),
            r#"{"id": "s2", "files": {"c.txt": "c\n", "x.dat": "x\n"}}"#.to_string(),
        ],
    );
    let r = t
        .steps(&["apply", "--batch", "5", p.to_str().unwrap()])
        .code_is(3)
        .stderr_has("c.txt is in the worktree but not in the last step's tree");
    assert!(server.step_ids().is_empty(), "{}", r.explain());
    assert_eq!(
        std::fs::read_to_string(t.work.join("c.txt")).unwrap(),
        "mine\n"
    );
    assert!(!t.work.join("a.txt").exists());
}

/// Issue 16 (transient failures): reads are retried like pushes. A proxy
/// that answers the first two requests of any kind with 503 (the ref
/// advertisement `apply` reads first): the run finishes, every step once;
/// `status` through one 503 still confirms the durable head.
#[test]
fn reads_answered_with_503_are_retried_too() {
    let plan = fixture("eight-steps.jsonl");
    let p = plan.to_str().unwrap();
    let want = reference(&plan);
    for transport in ["libgit2", "git"] {
        let (t, server) = TestRepo::with_server(Kind::Http, transport);
        let fail = server.root.join("fail-any");
        std::fs::write(&fail, "2\n").unwrap();
        t.steps(&["apply", p]).ok();
        assert_eq!(
            std::fs::read_to_string(&fail).unwrap().trim(),
            "0",
            "{transport}"
        );
        assert_finished(&t, &server, &plan, &want, transport);
        std::fs::write(&fail, "1\n").unwrap();
        let st = t.steps(&["--json", "status"]).ok().json();
        assert_eq!(st["data"]["remote"], "confirmed", "{transport}: {st}");
        assert_eq!(
            std::fs::read_to_string(&fail).unwrap().trim(),
            "0",
            "{transport}"
        );
    }
}

/// Issue 28 item 15: CI systems write tokens into remote URLs
/// (`https://alice:TOKEN@host/repo.git`). No command prints the password,
/// in human or JSON output, errors included, and no file git-steps writes
/// holds it; `init` warns as git's `transfer.credentialsInUrl=warn` does.
#[test]
fn a_token_in_the_remote_url_is_never_printed() {
    const TOKEN: &str = "ghp_s3cr3tT0k3n";
    let t = TestRepo::new();
    let server = t.start_server(Kind::Http);
    t.write("README", "x\n");
    t.commit_all("base");
    t.git(&["push", "-q", server.url(), "main"]).ok();
    let with_token = server
        .url()
        .replacen("://", &format!("://alice:{TOKEN}@"), 1);
    let ci = t.clone_with("ci", &[&with_token]);
    let mut seen = String::new();
    let mut run = |r: Run| {
        seen.push_str(&r.stdout());
        seen.push_str(&r.stderr());
        r
    };
    let r = run(ci
        .steps(&["init", "--remote", "origin", "--branch", "agent/x"])
        .ok());
    assert!(
        r.stderr().contains("alice:<redacted>@") && r.stderr().contains("plaintext credentials"),
        "{}",
        r.explain()
    );
    let plan = ci.plan(
        "p.jsonl",
        &[line(
            serde_json::json!({"id": "s1", "files": {"a.txt": "a\n"}}),
        )],
    );
    run(ci.steps(&["-v", "apply", plan.to_str().unwrap()]).ok());
    run(ci.steps(&["--json", "apply", plan.to_str().unwrap()]).ok());
    for args in [
        vec!["status"],
        vec!["--json", "status"],
        vec!["log"],
        vec!["--json", "log"],
        vec!["verify"],
        vec!["--json", "verify"],
        vec!["resume"],
    ] {
        run(ci.steps(&args).ok());
    }
    // A remote that is not there: the error names the URL, redacted.
    let gone = format!("http://alice:{TOKEN}@127.0.0.1:9/nothing.git");
    for json in [false, true] {
        let mut args = vec!["apply", "--remote", gone.as_str(), plan.to_str().unwrap()];
        if json {
            args.insert(0, "--json");
        }
        let r = run(ci.steps(&args));
        assert_eq!(r.code(), Some(1), "{}", r.explain());
    }
    let r = run(ci
        .steps(&["init", "--remote", &with_token, "--branch", "agent/x"])
        .ok());
    assert!(
        r.stderr().contains("plaintext credentials"),
        "{}",
        r.explain()
    );
    assert!(seen.contains("<redacted>"), "{seen}");
    assert!(!seen.contains(TOKEN), "the token was printed:\n{seen}");
    // Files: none that git-steps wrote holds it (git's own config does:
    // the clone put the URL there, and so does `init --remote <url>`, as
    // `git remote add` would).
    let grep = std::process::Command::new("grep")
        .args(["-rl", "--exclude=config", TOKEN])
        .arg(&ci.work)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&grep.stdout),
        "",
        "files holding the token"
    );
}

/// Found by the outside review of issue 28: a git:// server that accepts
/// the connection and never answers held `apply` forever (libgit2 waits
/// without a timeout by default). A read that waits past
/// `GIT_STEPS_NET_TIMEOUT_SECS` (default 60) is a timeout: retried as
/// transient, then exit 1.
#[test]
fn a_server_that_never_answers_times_out() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Every connection accepted and held open, never answered (the thread
    // blocks in accept until the test process ends).
    let held = std::thread::spawn(move || {
        let _conns: Vec<_> = listener.incoming().collect();
    });
    let t = TestRepo::new();
    t.write("README", "x\n");
    t.commit_all("base");
    let url = format!("git://127.0.0.1:{port}/r.git");
    let start = Instant::now();
    let r = t.steps_env_stdin(
        &["apply", "--remote", &url, "--branch", "steps", "-"],
        &[
            ("GIT_STEPS_NET_TIMEOUT_SECS", "2"),
            ("GIT_STEPS_NET_RETRIES", "1"),
        ],
        Some(&line(
            serde_json::json!({"id": "s1", "files": {"a": "a\n"}}),
        )),
    );
    assert_eq!(r.code(), Some(1), "{}", r.explain());
    assert!(r.stderr().contains("timed out"), "{}", r.explain());
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
    drop(held);
}

/// A server that keeps saying it is unavailable (HTTP 503), after the
/// retries: the error says to rerun as it is (`"rerun": "now"`: nothing
/// here needs fixing), through libgit2, git and the smart client, and
/// never blames the URL or the credentials.
#[test]
fn a_server_that_stays_unavailable_is_a_rerun_now() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut c in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = c.read(&mut buf);
            let _ = c.write_all(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    let t = TestRepo::new();
    let url = format!("http://127.0.0.1:{port}/r.git");
    let step = line(serde_json::json!({"id": "s1", "files": {"a": "a\n"}}));
    for transport in ["libgit2", "git", "default"] {
        let mut args = vec!["--json", "apply", "--remote", &url, "--branch", "steps"];
        if transport != "default" {
            args.extend(["--transport", transport]);
        }
        args.push("-");
        let r = t.steps_env_stdin(&args, &[("GIT_STEPS_NET_RETRIES", "0")], Some(&step));
        assert_eq!(r.code(), Some(1), "{transport}: {}", r.explain());
        let data = &r.json()["data"];
        assert_eq!(data["rerun"], "now", "{transport}: {}", r.explain());
        assert!(
            data["message"].as_str().unwrap().contains("503"),
            "{transport}: {}",
            r.explain()
        );
        assert!(
            !r.stderr().contains("credentials"),
            "{transport}: {}",
            r.explain()
        );
    }
    assert!(t.step_ids().is_empty());
}
