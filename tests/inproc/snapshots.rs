//! Snapshots of the human output: the real binary in a scratch repository
//! with fixed identities and dates (so commit ids and fingerprints are
//! stable), stdout and stderr of `status`, `log`, `apply`, and of one
//! command per refusal kind. A change to what a person reads shows up as
//! a snapshot diff to review (`cargo insta review`).

use std::path::Path;
use std::process::{Command, Stdio};

use crate::common::*;

const BIN: &str = env!("CARGO_BIN_EXE_git-steps");

/// `git-steps args` in `dir` (stdin: `stdin`), rendered for a snapshot:
/// the command, its exit code, stdout and stderr.
fn steps(dir: &Path, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write;
    env();
    let mut child = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env("COLUMNS", "100")
        .env_remove("GIT_STEPS_NET_TIMEOUT_SECS")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    format!(
        "$ git steps {}\nexit: {}\n--- stdout ---\n{}--- stderr ---\n{}",
        args.join(" "),
        out.status
            .code()
            .map_or("killed".to_string(), |c| c.to_string()),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let special = "\\.+*?()|[]{}^$".contains(c);
            special.then_some('\\').into_iter().chain([c])
        })
        .collect()
}

/// Assert the snapshot `name` of `text`, with the scratch dir's path
/// (whatever the temp dir is) shown as `[TMP]`.
#[track_caller]
fn snap(r: &Repo, name: &str, text: &str) {
    let tmp = r.tmp.path().to_str().unwrap().to_string();
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(&escape(&tmp), "[TMP]");
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    settings.bind(|| insta::assert_snapshot!(name, text));
}

/// A box on `main` with a base commit and a run `r1` on `main`, its
/// durable domain a bare repository in the scratch dir.
fn box_with_run() -> Repo {
    let r = Repo::new();
    r.write("README.md", "# project\n");
    r.write("log.txt", "one\ntwo\n");
    r.commit_all("project start");
    r.with_origin();
    r
}

fn plan_text(steps: &[serde_json::Value]) -> String {
    steps
        .iter()
        .map(|s| serde_json::to_string(s).unwrap() + "\n")
        .collect()
}

fn three_steps() -> Vec<serde_json::Value> {
    vec![
        serde_json::json!({"id": "s1", "message": "add the greeting", "files": {"hello.txt": "hello\n"}}),
        serde_json::json!({"id": "s2", "patch": "--- a/log.txt\n+++ b/log.txt\n@@ -2 +2,2 @@\n two\n+three\n"}),
        serde_json::json!({"id": "s3", "edits": [{"path": "hello.txt", "old_str": "hello", "new_str": "hello, world"}]}),
    ]
}

/// init, apply (then the same apply again), status, log: a run's life as
/// a person reads it.
#[test]
fn init_apply_status_log() {
    let r = box_with_run();
    let w = &r.work;
    snap(&r, "init", &steps(w, &["init", "--run", "r1"], None));
    let plan = plan_text(&three_steps());
    snap(&r, "apply", &steps(w, &["apply", "-"], Some(&plan)));
    snap(&r, "apply_again", &steps(w, &["apply", "-"], Some(&plan)));
    snap(&r, "status", &steps(w, &["status"], None));
    snap(&r, "log", &steps(w, &["log"], None));
    // The snapshots are of a real run: git agrees.
    assert_eq!(r.step_ids("steps/r1"), ["s1", "s2", "s3"]);
}

/// A step id already used, with another decision: digest-mismatch.
#[test]
fn refusal_digest_mismatch() {
    let r = box_with_run();
    let w = &r.work;
    steps(w, &["init", "--run", "r1"], None);
    steps(w, &["apply", "-"], Some(&plan_text(&three_steps())));
    let changed = plan_text(&[
        serde_json::json!({"id": "s1", "message": "add the greeting", "files": {"hello.txt": "bonjour\n"}}),
    ]);
    snap(
        &r,
        "refusal_digest_mismatch",
        &steps(w, &["apply", "-"], Some(&changed)),
    );
}

/// The same change again under a new id: duplicate-hunk.
#[test]
fn refusal_duplicate_hunk() {
    let r = box_with_run();
    let w = &r.work;
    steps(w, &["init", "--run", "r1"], None);
    steps(w, &["apply", "-"], Some(&plan_text(&three_steps())));
    let mut plan = three_steps();
    plan.push(serde_json::json!({"id": "s4", "patch": "--- a/log.txt\n+++ b/log.txt\n@@ -2 +2,2 @@\n two\n+three\n"}));
    snap(
        &r,
        "refusal_duplicate_hunk",
        &steps(w, &["apply", "-"], Some(&plan_text(&plan))),
    );
}

/// A commit made by hand on the run's branch: foreign-commit.
#[test]
fn refusal_foreign_commit() {
    let r = box_with_run();
    let w = &r.work;
    steps(w, &["init", "--run", "r1"], None);
    steps(w, &["apply", "-"], Some(&plan_text(&three_steps()[..2])));
    r.write("hand.txt", "by hand\n");
    r.commit_all("a fix made by hand");
    snap(
        &r,
        "refusal_foreign_commit",
        &steps(w, &["apply", "-"], Some(&plan_text(&three_steps()))),
    );
}

/// An uncommitted edit to a file the next step writes: dirty-worktree.
#[test]
fn refusal_dirty_worktree() {
    let r = box_with_run();
    let w = &r.work;
    steps(w, &["init", "--run", "r1"], None);
    steps(w, &["apply", "-"], Some(&plan_text(&three_steps()[..2])));
    r.write("hello.txt", "my own edit\n");
    snap(
        &r,
        "refusal_dirty_worktree",
        &steps(w, &["apply", "-"], Some(&plan_text(&three_steps()))),
    );
    assert_eq!(r.read("hello.txt"), "my own edit\n");
}

/// A plan that leaves out a step the history holds: plan-mismatch.
#[test]
fn refusal_plan_mismatch() {
    let r = box_with_run();
    let w = &r.work;
    steps(w, &["init", "--run", "r1"], None);
    steps(w, &["apply", "-"], Some(&plan_text(&three_steps())));
    let plan = three_steps();
    let without_s2 = plan_text(&[plan[0].clone(), plan[2].clone()]);
    snap(
        &r,
        "refusal_plan_mismatch",
        &steps(w, &["apply", "-"], Some(&without_s2)),
    );
}

/// The box's branch and the durable one each hold a step the other lacks:
/// diverged.
#[test]
fn refusal_diverged() {
    let r = box_with_run();
    let w = &r.work;
    steps(w, &["init", "--run", "r1"], None);
    steps(w, &["apply", "-"], Some(&plan_text(&three_steps()[..1])));
    // Another box goes on with s2.
    let other = r.tmp.path().join("other");
    run_git(
        r.tmp.path(),
        &[
            "clone",
            "-q",
            r.tmp.path().join("remote.git").to_str().unwrap(),
            other.to_str().unwrap(),
        ],
    );
    steps(&other, &["init", "--run", "r1"], None);
    let out = steps(
        &other,
        &["apply", "-"],
        Some(&plan_text(&three_steps()[..2])),
    );
    assert!(out.contains("exit: 0"), "{out}");
    // This box, cut off from the remote, made its own s2.
    let mine = plan_text(&[
        three_steps()[0].clone(),
        serde_json::json!({"id": "s2b", "files": {"mine.txt": "mine\n"}}),
    ]);
    let local = steps(w, &["apply", "--remote", "", "-"], Some(&mine));
    assert!(local.contains("exit: 0"), "{local}");
    snap(
        &r,
        "refusal_diverged",
        &steps(w, &["apply", "-"], Some(&mine)),
    );
}
