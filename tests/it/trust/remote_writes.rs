//! What a run writes to its remote and how it reports it: no run branch
//! beside a ref git would refuse it next to, never the checked-out branch of
//! a non-bare remote, and a failure after the push reported as durable or
//! unknown, with a rerun that finishes.

use crate::harness::*;
use crate::servers::Kind;

/// Found attacking the fixes: on a bare remote on this machine the run's
/// branch `feat/run` must not be created beside a (packed) branch `feat`;
/// git refuses such a pair, and a clone of the remote would fail.
#[test]
fn a_run_branch_whose_name_conflicts_with_a_remote_ref_is_not_created() {
    let (t, server) = TestRepo::with_server(Kind::Path, "libgit2");
    t.write("README", "x\n");
    t.commit_all("base");
    t.git(&["push", "-q", server.url(), "main:feat"]).ok();
    server.git(&["pack-refs", "--all"]);
    t.steps(&[
        "init",
        "--remote",
        server.url(),
        "--branch",
        "feat/run",
        "--run",
        "r",
    ])
    .ok();
    t.steps_stdin(
        &["apply", "-"],
        &line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}})),
    )
    .code_is(1)
    .stderr_has("refs/heads/feat is there");
    let clone = t.sibling("clone", Some(server.url()));
    assert!(clone.git_out(&["branch", "-r"]).contains("origin/feat"));
}

/// Issue 12 item 8: failures are reported as what they are. A step the
/// remote accepted before this box failed to record it says it is durable
/// and that the rerun finishes (which it does, once); a server that dies
/// after accepting a push leaves an outcome the error calls unknown, with
/// no hint about credentials, and the rerun finds the step durable.
#[test]
fn a_failure_after_the_push_says_the_step_is_durable_and_the_rerun_finishes() {
    let s1 = line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}}));
    let s2 = line(serde_json::json!({"id": "s2", "files": {"f": "2\n"}}));
    let plan = format!("{s1}\n{s2}\n");

    // The remote accepts s2; meanwhile the box's branch gets locked.
    let (t, server) = TestRepo::with_server(Kind::Daemon, "libgit2");
    t.steps_stdin(&["apply", "-"], &s1).ok();
    let local_lock = t.path(".git/refs/heads/main.lock");
    server.hook(
        "pre-receive",
        &format!("#!/bin/sh\necho held > '{}'\n", local_lock.display()),
    );
    // Another process's lock: busy (exit 4), as without a remote, and the
    // rerun waits for the lock to go.
    let r = t.steps_stdin(&["--json", "apply", "-"], &plan).code_is(4);
    assert_eq!(r.json()["data"]["kind"], "busy", "{}", r.explain());
    assert_eq!(r.json()["data"]["rerun"], "after", "{}", r.explain());
    for needle in [
        "step s2 is durable on",
        "updating this box failed",
        "main.lock exists",
        "rerun",
    ] {
        assert!(
            r.stderr().contains(needle),
            "lacks {needle}\n{}",
            r.explain()
        );
    }
    assert_eq!(server.step_ids(), ["s1", "s2"]);
    std::fs::remove_file(&local_lock).unwrap();
    t.steps_stdin(&["apply", "-"], &plan).ok();
    assert_eq!(t.head(), server.head());
    assert_eq!(t.read("f"), "2\n");
    assert_eq!(server.step_ids(), ["s1", "s2"]);

    // The HTTP server dies right after accepting s2.
    let (t, server) = TestRepo::with_server(Kind::Http, "libgit2");
    t.steps_stdin(&["apply", "-"], &s1).ok();
    server.hook(
        "post-receive",
        "#!/bin/sh\np=$PPID\nwhile [ \"$p\" -gt 1 ]; do\n  if [ \"$(cat /proc/$p/comm)\" = lighttpd ]; then kill -9 $p; break; fi\n  p=$(awk '{print $4}' /proc/$p/stat)\ndone\n",
    );
    let r = t.steps_stdin(&["apply", "-"], &plan).code_is(1);
    let err = r.stderr();
    assert!(err.contains("unknown"), "{}", r.explain());
    assert!(!err.contains("credentials"), "{}", r.explain());
    assert_eq!(server.step_ids(), ["s1", "s2"], "the remote accepted s2");
    // The same remote, reached as a path now: the rerun finds s2 durable.
    t.steps(&["init", "--remote", server.bare.to_str().unwrap()])
        .ok();
    t.steps_stdin(&["apply", "-"], &plan).ok();
    assert_eq!(server.step_ids(), ["s1", "s2"]);
    assert_eq!(t.read("f"), "2\n");
}

/// Found attacking the fixes: a non-bare repository on this machine as the
/// remote keeps its checked-out branch, as `git push` does
/// (receive.denyCurrentBranch); nothing moves.
#[test]
fn the_checked_out_branch_of_a_non_bare_remote_is_not_moved() {
    let t = TestRepo::new();
    let other = t.sibling("other", None);
    other.write("x", "x\n");
    other.commit_all("base");
    let clone = t.sibling("clone", Some(other.work.to_str().unwrap()));
    clone.steps(&["init", "--remote", "origin"]).ok();
    let before = other.head();
    clone
        .steps_stdin(
            &["apply", "-"],
            &line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}})),
        )
        .code_is(1)
        .stderr_has("checked out");
    assert_eq!(other.head(), before);
    assert_eq!(other.git_out(&["status", "--porcelain"]), "");
}
