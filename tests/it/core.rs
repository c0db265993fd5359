//! Issue 2: every step becomes one commit whose trailer is its receipt,
//! audited with plain git.

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
        assert_eq!(lines.len(), 3, "{parsed}");
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
fn mixed_thirty_step_plan_applies_verifies_and_reruns_to_nothing() {
    let t = TestRepo::new();
    let plan = fixture("mixed-30.jsonl");
    let plan_s = plan.to_str().unwrap();
    let first = t.steps(&["--json", "apply", plan_s]).ok();
    let doc = first.json();
    assert_eq!(doc["type"], "apply");
    assert_eq!(doc["data"]["steps"].as_array().unwrap().len(), 30);
    assert_eq!(t.step_ids(), plan_ids(&plan));
    assert_eq!(
        t.git_out(&["status", "--porcelain", "--untracked-files=all"]),
        ""
    );
    // The index matches HEAD exactly, stat data included (no refresh needed).
    assert_eq!(t.git_out(&["diff-index", "--cached", "HEAD"]), "");
    assert_eq!(t.git_out(&["diff-files"]), "");
    let fp = doc["data"]["artifact"].as_str().unwrap().to_string();
    assert_eq!(fp, independent_fingerprint(&t, "HEAD"));
    assert_eq!(
        doc["data"]["history"].as_str().unwrap(),
        independent_history(&t)
    );
    // The worktree holds what the commits say: symlink, modes, CRLF, no final newline.
    assert_eq!(
        std::fs::read_link(t.path("READ-ME")).unwrap().to_str(),
        Some("docs/café.md")
    );
    assert_eq!(t.read("win.txt"), "one\r\nTWO\r\nthree\r\n");
    assert_eq!(t.read("gen/file3.txt"), "generated 3");
    assert_eq!(
        t.git_out(&["ls-files", "-s", "run.sh"]).split(' ').next(),
        Some("100644")
    );
    let head = t.head();
    let again = t.steps(&["--json", "apply", plan_s]).ok().json();
    assert!(again["data"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["action"] == "skip"));
    assert_eq!(t.head(), head);
    t.steps(&["verify", plan_s]).ok();
}

/// Patches taken from real `git diff` output of a history made with the git
/// CLI (renames, deletions, mode changes, binary-free) reproduce its trees
/// exactly: the same tree ids, not just the same fingerprints.
#[test]
fn real_git_diffs_reproduce_the_real_trees() {
    let src = TestRepo::new();
    src.write(
        "a.txt",
        &(1..=50).map(|i| format!("a{i}\n")).collect::<String>(),
    );
    src.write("dir/b.txt", "b\n");
    src.write("tool.sh", "#!/bin/sh\n");
    src.commit_all("base");
    let base = src.head().unwrap();
    type Edit = Box<dyn Fn(&TestRepo)>;
    let edits: Vec<Edit> = vec![
        Box::new(|r| {
            r.write(
                "a.txt",
                &r.read("a.txt")
                    .replace("a3\n", "A3\n")
                    .replace("a40\n", "a40\nnew\n"),
            )
        }),
        Box::new(|r| {
            r.git(&["mv", "dir/b.txt", "dir/c.txt"]).ok();
        }),
        Box::new(|r| {
            r.git(&["update-index", "--chmod=+x", "tool.sh"]).ok();
            std::fs::set_permissions(
                r.path("tool.sh"),
                std::os::unix::fs::PermissionsExt::from_mode(0o755),
            )
            .unwrap();
        }),
        Box::new(|r| {
            r.git(&["rm", "-q", "a.txt"]).ok();
            r.write("z/new.txt", "z\n");
        }),
        Box::new(|r| {
            r.git(&["mv", "dir/c.txt", "moved.txt"]).ok();
            r.write("moved.txt", "b\nmore\n");
        }),
    ];
    let mut plan = Vec::new();
    for (i, edit) in edits.iter().enumerate() {
        edit(&src);
        src.commit_all(&format!("change {i}"));
        let diff = src.git_out(&["diff", "-M", "HEAD~1", "HEAD"]) + "\n";
        plan.push(line(
            serde_json::json!({"id": format!("r{i}"), "patch": diff}),
        ));
    }
    // Replay on a clone of the base commit.
    let dst = TestRepo::new();
    dst.git(&["fetch", "-q", src.work.to_str().unwrap(), "main"])
        .ok();
    dst.git(&["reset", "-q", "--hard", &base]).ok();
    let p = dst.plan("real.jsonl", &plan);
    dst.steps(&["apply", p.to_str().unwrap()]).ok();
    assert_eq!(
        dst.git_out(&["rev-parse", "HEAD^{tree}"]),
        src.git_out(&["rev-parse", "HEAD^{tree}"])
    );
    for n in 0..edits.len() {
        let rev = format!("HEAD~{n}^{{tree}}");
        assert_eq!(
            dst.git_out(&["rev-parse", &rev]),
            src.git_out(&["rev-parse", &rev]),
            "tree {rev}"
        );
    }
    assert_eq!(
        dst.git_out(&["status", "--porcelain", "--untracked-files=all"]),
        ""
    );
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

use sha2::Digest as _;

#[test]
fn redelivered_step_is_skipped_and_a_different_decision_is_refused() {
    let t = TestRepo::new();
    let s1 = line(serde_json::json!({"id": "s1", "files": {"a.txt": "one\n"}}));
    t.steps_stdin(&["apply", "-"], &s1).ok();
    let again = t.steps_stdin(&["apply", "-"], &s1).ok();
    assert!(again.stdout().contains("skipped s1"), "{}", again.explain());
    assert_eq!(t.step_ids(), ["s1"]);
    let other = line(serde_json::json!({"id": "s1", "files": {"a.txt": "two\n"}}));
    let r = t.refuses("", 3, &["already has a receipt", "Hint:"], || {
        t.steps_stdin(&["--json", "apply", "-"], &other)
    });
    assert_eq!(r.json()["data"]["kind"], "digest-mismatch");
}

#[test]
fn a_duplicated_hunk_is_refused_unless_allowed() {
    let t = TestRepo::new();
    let s1 = line(serde_json::json!({"id": "s1", "files": {"log.txt": "line-1\n"}}));
    let s2 = line(
        serde_json::json!({"id": "s2", "patch": "--- a/log.txt\n+++ b/log.txt\n@@ -1 +1,2 @@\n line-1\n+line-2\n"}),
    );
    t.steps_stdin(&["apply", "-"], &format!("{s1}\n{s2}\n"))
        .ok();
    // The same append again, under a new id and with other context.
    let replay = line(
        serde_json::json!({"id": "s2-again", "patch": "--- a/log.txt\n+++ b/log.txt\n@@ -2 +2,2 @@\n line-2\n+line-2\n"}),
    );
    t.refuses(
        "",
        3,
        &["repeats a change step s2 made", "--allow-duplicate-hunks"],
        || t.steps_stdin(&["apply", "-"], &replay),
    );
    // Allowed explicitly: applied, and `log` and `verify` report the pair.
    t.steps_stdin(&["apply", "--allow-duplicate-hunks", "-"], &replay)
        .ok();
    assert_eq!(t.read("log.txt"), "line-1\nline-2\nline-2\n");
    let log = t.steps(&["log"]).ok().stdout();
    assert!(log.contains("DUPLICATE of step s2"), "{log}");
    let v = t.steps(&["--json", "verify"]).code_is(3).json();
    assert_eq!(v["type"], "verify");
    assert!(v["data"]["problems"][0]
        .as_str()
        .unwrap()
        .contains("s2-again repeats a change of step s2"));
}

#[test]
fn a_reverted_change_may_be_made_again() {
    let t = TestRepo::new();
    let plan = [
        line(serde_json::json!({"id": "a", "files": {"f": "x\n"}})),
        line(serde_json::json!({"id": "b", "files": {"f": ""}})),
        line(serde_json::json!({"id": "c", "files": {"f": "x\n"}})),
    ];
    t.steps_stdin(&["apply", "-"], &plan.join("\n")).ok();
    assert_eq!(t.step_ids(), ["a", "b", "c"]);
    t.steps(&["verify"]).ok();
}

#[test]
fn a_patch_that_does_not_apply_names_step_file_and_hunk_and_changes_nothing() {
    let t = TestRepo::new();
    t.steps_stdin(
        &["apply", "-"],
        &line(serde_json::json!({"id": "s1", "files": {"f.txt": "a\nb\n"}})),
    )
    .ok();
    t.write("untracked.txt", "mine\n");
    let bad = line(
        serde_json::json!({"id": "s2", "patch": "--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n a\n-nope\n+c\n"}),
    );
    let r = t.refuses("", 1, &[], || {
        t.steps_stdin(&["--json", "apply", "-"], &bad)
    });
    let msg = r.json()["data"]["message"].as_str().unwrap().to_string();
    assert!(
        msg.contains("step s2") && msg.contains("f.txt") && msg.contains("hunk #1"),
        "{msg}"
    );
    assert_eq!(t.step_ids(), ["s1"]);
}

#[test]
fn bad_plans_fail_before_anything_is_applied() {
    let t = TestRepo::new();
    let good = line(serde_json::json!({"id": "s1", "files": {"a": "1\n"}}));
    for (plan, needle) in [
        (format!("{good}\n{{\"id\":\"s2\",\"files\""), "plan line 2"),
        (
            format!("{good}\n{{\"id\":\"s2\",\"files\":{{\"a\":\"2\\n\"}},\"extra\":true}}"),
            "unknown field `extra`",
        ),
        (format!("{good}\n{good}"), "used twice"),
        (
            format!("{good}\n{{\"id\":\"s2\",\"files\":{{\".git/config\":\"x\"}}}}"),
            ".git",
        ),
        ("\n\n".to_string(), "holds no steps"),
    ] {
        t.refuses(&plan, 1, &[needle], || {
            t.steps_stdin(&["apply", "-"], &plan)
        });
        assert_eq!(t.head(), None);
    }
}

#[test]
fn uncommitted_work_is_never_overwritten() {
    let t = TestRepo::new();
    t.steps_stdin(
        &["apply", "-"],
        &line(serde_json::json!({"id": "s1", "files": {"f.txt": "a\n"}})),
    )
    .ok();
    // A tracked file edited by the user: refused.
    t.write("f.txt", "my edit\n");
    t.refuses("", 3, &["no step of the run explains"], || {
        t.steps_stdin(
            &["apply", "-"],
            &line(serde_json::json!({"id": "s2", "files": {"g.txt": "g\n"}})),
        )
    });
    t.git(&["checkout", "f.txt"]).ok();
    // An untracked file where a step would create one: refused, kept.
    t.write("g.txt", "mine\n");
    t.refuses("", 3, &["untracked"], || {
        t.steps_stdin(
            &["apply", "-"],
            &line(serde_json::json!({"id": "s2", "files": {"g.txt": "g\n"}})),
        )
    });
    assert_eq!(t.read("g.txt"), "mine\n");
}

#[test]
fn a_commit_without_receipt_inside_the_run_is_refused() {
    let t = TestRepo::new();
    t.steps_stdin(
        &["apply", "-"],
        &line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}})),
    )
    .ok();
    t.write("other", "x\n");
    t.commit_all("a hand-made commit");
    t.refuses("", 3, &["no receipt"], || {
        t.steps_stdin(
            &["apply", "-"],
            &line(serde_json::json!({"id": "s2", "files": {"f": "2\n"}})),
        )
    });
    t.steps(&["verify"]).code_is(3);
}

#[test]
fn plan_order_disagreeing_with_the_log_is_refused() {
    let t = TestRepo::new();
    let s = |id: &str| line(serde_json::json!({"id": id, "files": {format!("{id}.txt"): "x\n"}}));
    t.steps_stdin(&["apply", "-"], &format!("{}\n{}", s("a"), s("c")))
        .ok();
    // The plan now says b comes between a and c, but c is already applied.
    t.refuses("", 3, &["the history holds step c"], || {
        t.steps_stdin(
            &["apply", "-"],
            &format!("{}\n{}\n{}", s("a"), s("b"), s("c")),
        )
    });
}

#[test]
fn dry_run_reports_and_changes_nothing() {
    let t = TestRepo::new();
    let plan = fixture("eight-steps.jsonl");
    let lines: Vec<String> = std::fs::read_to_string(&plan)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let first = t.plan("first.jsonl", &lines[..3]);
    t.steps(&["apply", first.to_str().unwrap()]).ok();
    let before = t.snapshot();
    let r = t
        .steps(&["--json", "apply", "--dry-run", plan.to_str().unwrap()])
        .ok();
    assert_eq!(t.snapshot(), before);
    let steps = r.json()["data"]["steps"].as_array().unwrap().clone();
    let actions: Vec<&str> = steps
        .iter()
        .map(|s| s["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "skip",
            "skip",
            "skip",
            "would-apply",
            "would-apply",
            "would-apply",
            "would-apply",
            "would-apply"
        ]
    );
    assert!(steps[0]["commit"].as_str().unwrap().len() == 40);
    // The objects a dry run built were not written.
    let objects = t.git_out(&["count-objects"]);
    t.steps(&["apply", "--dry-run", plan.to_str().unwrap()])
        .ok();
    assert_eq!(t.git_out(&["count-objects"]), objects);
}

#[test]
fn init_stores_settings_in_git_config_and_commands_use_them() {
    let t = TestRepo::new();
    t.write("base.txt", "base\n");
    t.commit_all("base");
    t.steps(&["init", "--branch", "agent/run-7", "--run", "run-7"])
        .ok();
    assert_eq!(t.git_out(&["config", "steps.branch"]), "agent/run-7");
    assert_eq!(t.git_out(&["config", "steps.run"]), "run-7");
    t.steps_stdin(
        &["apply", "-"],
        &line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}})),
    )
    .ok();
    assert_eq!(
        t.git_out(&["symbolic-ref", "HEAD"]),
        "refs/heads/agent/run-7"
    );
    assert_eq!(
        t.git_out(&["log", "-1", "--format=%(trailers:key=Step-Run,valueonly)"]),
        "run-7"
    );
    // The base commit before the run is not part of it.
    let st = t.steps(&["--json", "status"]).ok().json();
    assert_eq!(st["data"]["steps_applied"], 1);
    assert_eq!(st["data"]["problems"].as_array().unwrap().len(), 0);
}

#[test]
fn runs_as_a_git_subcommand() {
    let t = TestRepo::new();
    let bin_dir = std::path::Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = std::process::Command::new("git");
    cmd.args(["steps", "status"]).current_dir(&t.work);
    hermetic(&mut cmd, &t.home());
    cmd.env("PATH", path);
    let r = t.run_cmd(cmd, "git steps status".into(), None).ok();
    assert!(r.stdout().contains("steps applied: 0"), "{}", r.explain());
}

#[test]
fn usage_errors_exit_2() {
    let t = TestRepo::new();
    t.steps(&["apply", "--no-such-flag"]).code_is(2);
    t.steps(&["frobnicate"]).code_is(2);
    // A value outside a flag's set is a usage error too, named by clap,
    // and nothing is read or written.
    let s1 = line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}}));
    let p = t.plan("s1.jsonl", &[s1]);
    for cmd in ["apply", "resume", "status", "init"] {
        let mut args = vec![cmd, "--transport", "ssh"];
        if cmd == "apply" {
            args.push(p.to_str().unwrap());
        }
        t.refuses(cmd, 2, &["invalid value 'ssh'", "libgit2, git"], || {
            t.steps(&args)
        });
    }
    // A bad steps.transport in config is not a usage error: exit 1, named.
    t.git(&["config", "steps.transport", "ssh"]).ok();
    t.git(&["config", "steps.remote", "."]).ok();
    t.refuses("config", 1, &["unknown transport \"ssh\""], || {
        t.steps(&["apply", p.to_str().unwrap()])
    });
}

/// A git failure keeps git's own error as its cause: `Caused by:` shows
/// its class and code.
#[test]
fn git_errors_show_their_class() {
    let t = TestRepo::new();
    let s1 = line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}}));
    t.steps_stdin(&["apply", "-"], &s1).ok();
    // The branch names a commit the object database lacks (a damaged or
    // hand-edited repository).
    std::fs::write(
        t.path(".git/refs/heads/main"),
        "0123456789abcdef0123456789abcdef01234567\n",
    )
    .unwrap();
    let r = t.steps(&["status"]);
    assert_eq!(r.code(), Some(1), "{}", r.explain());
    assert!(r.stderr().contains("Caused by:"), "{}", r.explain());
    assert!(r.stderr().contains("class="), "{}", r.explain());
}

#[test]
fn crash_points_kill_the_process_where_they_say() {
    use std::os::unix::process::ExitStatusExt;
    let t = TestRepo::new();
    let s1 = line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}}));
    t.steps_stdin(&["apply", "-"], &s1).ok();
    let s2 = line(serde_json::json!({"id": "s2", "files": {"f": "2\n", "g": "g\n"}}));
    let p = t.plan("s2.jsonl", &[s2]);
    let head = t.head();
    // Objects written, no ref moved: HEAD and worktree unchanged.
    let r = t.steps_env(
        &["apply", p.to_str().unwrap()],
        &[("GIT_STEPS_CRASH", "objects-written@s2")],
    );
    assert_eq!(r.out.status.signal(), Some(9), "{}", r.explain());
    assert_eq!(t.head(), head);
    assert_eq!(t.read("f"), "1\n");
    // A typo in the crash point is refused, not ignored.
    t.steps_env(
        &["apply", p.to_str().unwrap()],
        &[("GIT_STEPS_CRASH", "no-such-point@s2")],
    )
    .code_is(1)
    .stderr_has("unknown crash point");
    // The ref moved but the worktree did not.
    let r = t.steps_env(
        &["apply", p.to_str().unwrap()],
        &[("GIT_STEPS_CRASH", "ref-updated@s2")],
    );
    assert_eq!(r.out.status.signal(), Some(9), "{}", r.explain());
    assert_eq!(t.step_ids(), ["s1", "s2"]);
    assert_eq!(t.read("f"), "1\n");
}

/// A local crash matrix: every step × every crash point, same box. The rerun
/// of the same command must give the uninterrupted run's fingerprints.
#[test]
fn every_crash_point_resumes_to_the_same_fingerprints_locally() {
    use std::os::unix::process::ExitStatusExt;
    let plan = fixture("mixed-30.jsonl");
    let plan_s = plan.to_str().unwrap();
    let reference = TestRepo::new();
    let doc = reference.steps(&["--json", "apply", plan_s]).ok().json();
    let (artifact, history) = (
        doc["data"]["artifact"].clone(),
        doc["data"]["history"].clone(),
    );
    let points: Vec<&str> = git_steps::crash::POINTS
        .iter()
        .filter(|p| p.scope == git_steps::crash::Scope::Step)
        .map(|p| p.name)
        .collect();
    assert!(points.len() >= 6, "{points:?}");
    let ids = plan_ids(&plan);
    // Every point for a few steps of different shapes (rename, symlink, mode
    // change, deletion of several files), each point once for every step.
    let mut runs = 0;
    for (k, point) in points.iter().enumerate() {
        for step in [&ids[6], &ids[12], &ids[19], &ids[28], &ids[k % ids.len()]] {
            let t = TestRepo::new();
            let crash = format!("{point}@{step}");
            let r = t.steps_env(&["apply", plan_s], &[("GIT_STEPS_CRASH", &crash)]);
            {
                assert_eq!(
                    r.out.status.signal(),
                    Some(9),
                    "{crash} did not fire\n{}",
                    r.explain()
                );
            }
            let resumed = t.steps(&["--json", "apply", plan_s]).ok().json();
            assert_eq!(resumed["data"]["artifact"], artifact, "{crash}");
            assert_eq!(resumed["data"]["history"], history, "{crash}");
            assert_eq!(
                t.git_out(&["status", "--porcelain", "--untracked-files=all"]),
                "",
                "{crash}"
            );
            assert_eq!(t.step_ids(), ids, "{crash}");
            runs += 1;
        }
    }
    assert!(runs >= 30);
}

#[test]
fn a_crash_during_repair_resumes_too() {
    use std::os::unix::process::ExitStatusExt;
    let t = TestRepo::new();
    let plan = fixture("eight-steps.jsonl");
    let plan_s = plan.to_str().unwrap();
    let r = t.steps_env(
        &["apply", plan_s],
        &[("GIT_STEPS_CRASH", "worktree-partial@s4")],
    );
    assert_eq!(r.out.status.signal(), Some(9));
    let r = t.steps_env(
        &["apply", plan_s],
        &[("GIT_STEPS_CRASH", "repair-saved@s4")],
    );
    assert_eq!(r.out.status.signal(), Some(9), "{}", r.explain());
    t.steps(&["apply", plan_s])
        .ok()
        .stderr_has("repaired the worktree");
    assert_eq!(t.step_ids(), plan_ids(&plan));
    // Both interrupted repairs saved what they found.
    let rescues = t.git_out(&["for-each-ref", "--format=%(refname)", "refs/steps/rescue/"]);
    assert_eq!(rescues.lines().count(), 2, "{rescues}");
}

#[test]
fn user_edits_on_top_of_a_crashed_step_are_refused_and_kept() {
    use std::os::unix::process::ExitStatusExt;
    let t = TestRepo::new();
    let plan = fixture("eight-steps.jsonl");
    let plan_s = plan.to_str().unwrap();
    let r = t.steps_env(&["apply", plan_s], &[("GIT_STEPS_CRASH", "ref-updated@s3")]);
    assert_eq!(r.out.status.signal(), Some(9));
    t.write("log.txt", "line-1\nline-2\nmy own line\n");
    t.refuses("", 3, &["no step of the run explains"], || {
        t.steps(&["apply", plan_s])
    });
    assert_eq!(t.read("log.txt"), "line-1\nline-2\nmy own line\n");
}

#[test]
fn a_directory_can_become_a_file_and_back() {
    let t = TestRepo::new();
    let plan = [
        line(serde_json::json!({"id": "a", "files": {"d/x": "x\n", "d/y": "y\n"}})),
        line(
            serde_json::json!({"id": "b", "files": {"d/x": null, "d/y": null, "d": "now a file\n"}}),
        ),
        line(serde_json::json!({"id": "c", "files": {"d": null, "d/z": "dir again\n"}})),
    ];
    let p = t.plan("p.jsonl", &plan);
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    assert_eq!(t.read("d/z"), "dir again\n");
    assert_eq!(t.git_out(&["ls-tree", "-r", "--name-only", "HEAD~1"]), "d");
    assert_eq!(
        t.git_out(&["status", "--porcelain", "--untracked-files=all"]),
        ""
    );
    assert_eq!(
        independent_fingerprint(&t, "HEAD"),
        t.steps(&["fingerprint"]).ok().stdout().trim()
    );
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
            ["Step-Id", "Step-Run", "Step-Decision"],
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
