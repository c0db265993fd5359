//! Issue 28 item 14: I/O faults. A disk that fills up or fails (a call of
//! write, fsync, rename, link, openat, mkdir, ftruncate or unlink failing
//! once, or from some call on), injected with strace into the real binary,
//! must end with a clear error and an exit code from the SPEC — never a
//! panic — and a clean rerun must finish the run: every step once on the
//! remote, the tree of an uninterrupted run, the user's untracked file
//! intact.

use std::process::Command;

use crate::harness::*;
use crate::servers::Kind;

const SYSCALLS: [&str; 9] = [
    "write",
    "fsync",
    "rename",
    "link",
    "linkat",
    "openat",
    "mkdir",
    "ftruncate",
    "unlink",
];

fn plan() -> Vec<String> {
    vec![
        line(serde_json::json!({"id": "s1", "files": {"a.txt": "1\n", "d/b.txt": "b\n"}})),
        line(
            serde_json::json!({"id": "s2", "patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1,2 @@\n 1\n+2\n"}),
        ),
        line(serde_json::json!({"id": "s3", "files": {"d/b.txt": null, "c.txt": "c\n"}})),
    ]
}

/// git-steps `args` in `t`, under strace with `syscall` failing as
/// `inject` says (`error=EIO:when=3+`).
fn strace(t: &TestRepo, syscall: &str, inject: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new("strace");
    cmd.args(["-f", "-qq", "-o", "/dev/null", "-e"])
        .arg(format!("trace={syscall}"))
        .arg("-e")
        .arg(format!("inject={syscall}:{inject}"))
        .arg(env!("CARGO_BIN_EXE_git-steps"))
        .args(args)
        .current_dir(&t.work);
    hermetic(&mut cmd, &t.home());
    cmd
}

struct Outcome {
    code: Option<i32>,
    stderr: String,
}

/// One trial: `apply` with `syscall` failing (`errno`) at its `when`-th
/// call (`N` once, `N+` from then on), then a clean rerun; returns what the
/// faulty run did. Panics (the test fails) on anything the issue forbids.
fn trial(syscall: &str, when: &str, errno: &str, reference: &str) -> Outcome {
    let (t, server) = TestRepo::with_server(Kind::Path, "libgit2");
    t.write("base.txt", "base\n");
    t.commit_all("base");
    t.write("mine.txt", "the user's untracked file\n");
    let plan = t.plan("plan.jsonl", &plan());
    let p = plan.to_str().unwrap();
    let out = strace(
        &t,
        syscall,
        &format!("error={errno}:when={when}"),
        &["apply", p],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let what = format!("{syscall} failing ({errno}) at call {when}");
    let code = out.status.code();
    // The dynamic loader's own opens can be the ones that fail: the
    // program never started.
    let unstarted = code == Some(127) && stderr.contains("loading shared libraries");
    assert!(
        unstarted || matches!(code, Some(0 | 1 | 3 | 4)),
        "{what}: exit {:?}\n{stderr}",
        out.status
    );
    assert!(!stderr.contains("panicked"), "{what}: a panic\n{stderr}");
    // With every write failing from some call on, stderr fails too: the
    // exit code is all that can say it.
    let mute = syscall == "write" && when.ends_with('+');
    if code != Some(0) && !unstarted && !mute {
        assert!(
            stderr.contains("Error: "),
            "{what}: no error message\n{stderr}"
        );
    }
    // The rerun, on a healthy disk, finishes the run.
    let r = t.steps(&["apply", p]);
    assert_eq!(
        r.code(),
        Some(0),
        "{what}: the clean rerun failed (first run: {code:?}\n{stderr})\n{}",
        r.explain()
    );
    let ids = server.git(&[
        "log",
        "--reverse",
        "--format=%(trailers:key=Step-Id,valueonly,separator=)",
        "main",
    ]);
    assert_eq!(
        ids.split_whitespace().collect::<Vec<_>>(),
        ["s1", "s2", "s3"],
        "{what}: every step once on the remote"
    );
    assert_eq!(
        server.git(&["rev-parse", "main^{tree}"]).trim(),
        reference,
        "{what}: the tree of an uninterrupted run"
    );
    assert_eq!(t.read("mine.txt"), "the user's untracked file\n", "{what}");
    assert_eq!(
        t.git_out(&["status", "--porcelain"]),
        "?? mine.txt",
        "{what}: worktree and index at the run's head"
    );
    Outcome { code, stderr }
}

fn reference_tree() -> String {
    let (t, server) = TestRepo::with_server(Kind::Path, "libgit2");
    t.write("base.txt", "base\n");
    t.commit_all("base");
    t.steps_stdin(&["apply", "-"], &plan().join("\n")).ok();
    server.git(&["rev-parse", "main^{tree}"]).trim().to_string()
}

#[test]
fn io_faults_end_with_a_clear_error_and_a_clean_rerun_finishes() {
    let reference = reference_tree();
    // Every syscall, once and from some call on, early and late; then
    // `GIT_STEPS_TRIALS` more at random calls (scripts/soak.sh runs many).
    let mut cases: Vec<(&str, String, &str)> = Vec::new();
    for (i, sc) in SYSCALLS.iter().enumerate() {
        let errno = if i % 2 == 0 { "ENOSPC" } else { "EIO" };
        // (The dynamic loader opens ~30 files before main: openat's
        // failures from an early call on would only stop the start.)
        let whens: &[&str] = if *sc == "openat" {
            &["40", "90", "60+", "150+"]
        } else {
            &["2", "9", "40", "5+", "30+", "90+"]
        };
        for when in whens {
            cases.push((sc, when.to_string(), errno));
        }
    }
    let (extra, seed) = trials_and_seed(4, 0xf417);
    let mut rng = Rng(seed | 1);
    for _ in 0..extra {
        let sc = SYSCALLS[rng.below(SYSCALLS.len() as u64) as usize];
        let n = 1 + rng.below(120);
        let when = if rng.below(2) == 0 {
            n.to_string()
        } else {
            format!("{n}+")
        };
        let errno = ["ENOSPC", "EIO", "EROFS", "EDQUOT"][rng.below(4) as usize];
        cases.push((sc, when, errno));
    }
    let mut codes = std::collections::BTreeMap::new();
    let mut local_hint = 0;
    let mut per_case = Vec::new();
    for (sc, when, errno) in &cases {
        let o = trial(sc, when, errno, &reference);
        *codes.entry(o.code).or_insert(0) += 1;
        if o.stderr.contains("check the remote's URL") {
            panic!(
                "{sc} at {when}: a local failure blamed on the remote's URL\n{}",
                o.stderr
            );
        }
        // An error the user sees says what to do next (stderr itself may
        // be what failed: then nothing is seen).
        if o.stderr.contains("Error: ") && !o.stderr.contains("Hint: ") {
            panic!(
                "{sc} at {when} ({errno}): an error without a hint\n{}",
                o.stderr
            );
        }
        if [
            "file-system error",
            "disk is full",
            "read-only",
            "check the disk",
        ]
        .iter()
        .any(|w| o.stderr.contains(w))
        {
            local_hint += 1;
        }
        per_case.push(format!("{sc} {when} {errno}: {:?}", o.code));
    }
    eprintln!(
        "I/O faults: {} trials (seed {seed:#x}), exit codes {codes:?}, {local_hint} said the disk here failed, 0 blamed the remote",
        cases.len()
    );
    // The faults did bite (a single failed call is often retried or
    // harmless, and then the first run succeeds too).
    let failed: usize = codes
        .iter()
        .filter(|(c, _)| **c != Some(0))
        .map(|(_, n)| n)
        .sum();
    assert!(failed >= 10, "{codes:?}\n{}", per_case.join("\n"));
}

/// A one-step apply (`--json`) with the first `syscall` failing as `errno`
/// says, in a fresh repository.
fn apply_with_first_failing(syscall: &str, errno: &str) -> (TestRepo, std::path::PathBuf, Run) {
    let t = TestRepo::new();
    let plan = t.plan(
        "plan.jsonl",
        &[line(
            serde_json::json!({"id": "s1", "files": {"a.txt": "1\n"}}),
        )],
    );
    let cmd = strace(
        &t,
        syscall,
        &format!("error={errno}:when=1"),
        &["--json", "apply", plan.to_str().unwrap()],
    );
    let r = t.run_cmd(
        cmd,
        format!("strace … git-steps --json apply (the first {syscall} fails with {errno})"),
        None,
    );
    (t, plan, r)
}

/// A step whose objects cannot be made durable (the disk failed the first
/// fsync, or the syncfs that flushes the step's objects at its commit
/// point) is the machine's failure, reported as such: not "does not
/// apply", not "fix the step in the plan", and nothing written; a rerun
/// applies it.
#[test]
fn a_failed_object_write_is_the_machines_failure_not_a_step_that_does_not_apply() {
    // Through the portable set (as on macOS) every write is flushed file by
    // file: there is no syncfs to fail.
    let syscalls: &[&str] = if portable() {
        &["fsync"]
    } else {
        &["fsync", "syncfs"]
    };
    for &syscall in syscalls {
        let (t, plan, r) = apply_with_first_failing(syscall, "EIO");
        assert_eq!(r.code(), Some(1), "{}", r.explain());
        let j = r.json();
        assert_eq!(j["data"]["kind"], "error", "{}", r.explain());
        assert!(r.stderr().contains("Input/output error"), "{}", r.explain());
        assert!(r.stderr().contains("file-system error"), "{}", r.explain());
        assert!(!r.stderr().contains("fix step"), "{}", r.explain());
        assert!(!r.stderr().contains("class="), "{}", r.explain());
        assert_eq!(t.head(), None, "{syscall}");
        t.steps(&["apply", plan.to_str().unwrap()]).ok();
        assert_eq!(t.step_ids(), ["s1"], "{syscall}");
    }
}

/// A full disk, a disk quota reached and a read-only file system are each
/// said as such where the step's flush fails (the OS's own words, then
/// what to do), and `--json` says a rerun is the way on once that is
/// fixed; nothing is written, and the rerun applies the step.
#[test]
fn a_full_disk_is_said_as_such_and_a_rerun_after_freeing_space_finishes() {
    for (errno, os_words, hint_words) in [
        ("ENOSPC", "No space left on device", "disk is full"),
        ("EDQUOT", "Disk quota exceeded", "disk is full"),
        ("EROFS", "Read-only file system", "read-only"),
    ] {
        let (t, plan, r) = apply_with_first_failing("fsync", errno);
        assert_eq!(r.code(), Some(1), "{errno}: {}", r.explain());
        let data = &r.json()["data"];
        assert_eq!(data["kind"], "error", "{errno}: {}", r.explain());
        assert_eq!(data["rerun"], "after", "{errno}: {}", r.explain());
        let hint = data["hint"].as_str().unwrap_or_default();
        assert!(hint.contains(hint_words), "{errno}: {hint}");
        assert!(r.stderr().contains(os_words), "{errno}: {}", r.explain());
        assert!(
            r.stderr().contains(&format!("Hint: {hint}")),
            "{errno}: {}",
            r.explain()
        );
        assert_eq!(t.head(), None, "{errno}");
        t.steps(&["apply", plan.to_str().unwrap()]).ok();
        assert_eq!(t.step_ids(), ["s1"], "{errno}");
    }
}
