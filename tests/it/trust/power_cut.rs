//! Issue 32: after a power cut, the same command on the same box resumes.
//! A cut loses what was not fsynced: git's index (rewritten by a rename
//! whose data may not have reached the disk) comes back empty or cut short,
//! and so can a ref file. These tests tear them as a cut would, then rerun.

use crate::harness::*;
use crate::servers::Kind;

fn plan(t: &TestRepo) -> std::path::PathBuf {
    t.plan(
        "plan.jsonl",
        &[
            line(serde_json::json!({"id": "s1", "files": {"a.txt": "one\ntwo\n"}})),
            line(serde_json::json!({"id": "s2", "patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n"})),
            line(serde_json::json!({"id": "s3", "files": {"b.txt": "b\n"}})),
        ],
    )
}

/// A box with a run set up: on a bare remote, or local (its branch the
/// durable domain).
fn a_box(remote: bool) -> (TestRepo, Option<crate::servers::Server>) {
    if remote {
        let (t, s) = TestRepo::with_server(Kind::Path, "libgit2");
        return (t, Some(s));
    }
    let t = TestRepo::new();
    t.write("base.txt", "base\n");
    t.commit_all("base");
    t.steps(&["init", "--branch", "agent/run"]).ok();
    (t, None)
}

/// The run's branch, as a loose ref file (never packed here).
fn branch_file(t: &TestRepo) -> std::path::PathBuf {
    let branch = t.git_out(&["config", "steps.branch"]);
    t.path(&format!(".git/refs/heads/{branch}"))
}

fn kept(t: &TestRepo) -> Vec<String> {
    let dir = t.path(".git/steps/torn");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Every tear a cut can leave of the index and the run's branch, with and
/// without a remote, with and without the user's own edit in the worktree:
/// the rerun exits 0, applies nothing twice, ends on the uninterrupted
/// run's fingerprint with a clean worktree, keeps what it moved aside, and
/// saves the user's edit under refs/steps/rescue/.
#[test]
fn a_box_whose_index_or_branch_a_power_cut_tore_resumes() {
    type Tear = fn(&TestRepo);
    // (what, whether the index is torn, the tear)
    let tears: [(&str, bool, Tear); 5] = [
        ("an empty index", true, |t| {
            std::fs::write(t.path(".git/index"), b"").unwrap()
        }),
        ("an index cut short", true, |t| {
            let bytes = std::fs::read(t.path(".git/index")).unwrap();
            std::fs::write(t.path(".git/index"), &bytes[..bytes.len() / 2]).unwrap()
        }),
        ("an empty branch", false, |t| {
            std::fs::write(branch_file(t), b"").unwrap()
        }),
        ("a branch cut short", false, |t| {
            std::fs::write(branch_file(t), b"3f2a9").unwrap()
        }),
        ("both", true, |t| {
            std::fs::write(t.path(".git/index"), b"DIRC\0\0").unwrap();
            std::fs::write(branch_file(t), b"").unwrap();
        }),
    ];
    for remote in [true, false] {
        for (what, index_torn, tear) in tears {
            for edited in [false, true] {
                let ctx = format!("{what}, remote {remote}, user's edit {edited}");
                let (t, _server) = a_box(remote);
                let plan = plan(&t);
                let plan = plan.to_str().unwrap();
                t.steps(&["apply", plan]).ok();
                let want = t.steps(&["fingerprint"]).ok().stdout();
                let head = t.head().unwrap();
                if edited {
                    t.write("a.txt", "the user's edit\n");
                }
                tear(&t);
                let r = t.steps(&["apply", plan]);
                assert_eq!(r.code(), Some(0), "{ctx}\n{}", t.explain_with_log(&r));
                assert!(
                    r.stderr()
                        .contains("could not be read (torn by a power cut?)"),
                    "{ctx}\n{}",
                    r.explain()
                );
                assert!(!r.stdout().contains("applied s"), "{ctx}\n{}", r.explain());
                assert_eq!(t.head().as_deref(), Some(head.as_str()), "{ctx}");
                assert_eq!(t.step_ids(), ["s1", "s2", "s3"], "{ctx}");
                assert_eq!(t.steps(&["fingerprint"]).ok().stdout(), want, "{ctx}");
                t.git(&["fsck", "--no-dangling"]).ok();
                assert!(!kept(&t).is_empty(), "{ctx}: nothing kept");
                if edited && !index_torn {
                    // The index tells the edit apart: it stays, as any
                    // edit no step writes over.
                    assert_eq!(t.read("a.txt"), "the user's edit\n", "{ctx}");
                    assert_eq!(t.git_out(&["status", "--porcelain"]), " M a.txt", "{ctx}");
                } else {
                    assert_eq!(t.git_out(&["status", "--porcelain"]), "", "{ctx}");
                }
                if edited && index_torn {
                    let rescued =
                        t.git_out(&["for-each-ref", "--format=%(refname)", "refs/steps/rescue/"]);
                    let rescue = rescued
                        .lines()
                        .next()
                        .unwrap_or_else(|| panic!("{ctx}: no rescue ref"));
                    assert_eq!(
                        t.git_out(&["show", &format!("{rescue}:a.txt")]),
                        "the user's edit",
                        "{ctx}"
                    );
                }
                // And again: nothing left to mend.
                let again = t.steps(&["apply", plan]).ok();
                assert!(
                    !again.stderr().contains("torn"),
                    "{ctx}\n{}",
                    again.explain()
                );
            }
        }
    }
}

/// A torn branch whose own reflog is gone too: set back from HEAD's
/// reflog, else from the last fetch of the durable branch; with none of
/// them the rerun refuses (exit 1), names the file and how to restore it,
/// and changes nothing.
#[test]
fn a_torn_branch_without_its_reflog_is_set_back_from_what_else_recorded_it_or_refused() {
    for remote in [true, false] {
        for lose_head_log in [false, true] {
            let ctx = format!("remote {remote}, HEAD's reflog lost too: {lose_head_log}");
            let (t, _server) = a_box(remote);
            let plan = self::plan(&t);
            let plan = plan.to_str().unwrap();
            t.steps(&["apply", plan]).ok();
            let head = t.head().unwrap();
            let want = t.steps(&["fingerprint"]).ok().stdout();
            let file = branch_file(&t);
            std::fs::write(&file, b"").unwrap();
            let branch = t.git_out(&["config", "steps.branch"]);
            std::fs::remove_file(t.path(&format!(".git/logs/refs/heads/{branch}"))).unwrap();
            if lose_head_log {
                std::fs::remove_file(t.path(".git/logs/HEAD")).unwrap();
            }
            if !remote && lose_head_log {
                let r = t.refuses(
                    &ctx,
                    1,
                    &[
                        &format!("refs/heads/{branch} cannot be read"),
                        "the run's durable domain",
                        "git fsck --lost-found",
                    ],
                    || t.steps(&["apply", plan]),
                );
                assert_eq!(std::fs::read(&file).unwrap(), b"", "{ctx}\n{}", r.explain());
                assert!(kept(&t).is_empty(), "{ctx}: {:?}", kept(&t));
                continue;
            }
            let r = t.steps(&["apply", plan]);
            assert_eq!(r.code(), Some(0), "{ctx}\n{}", t.explain_with_log(&r));
            let from = if lose_head_log {
                "from the remote's durable head"
            } else {
                "from HEAD's reflog"
            };
            assert!(r.stderr().contains(from), "{ctx}\n{}", r.explain());
            assert_eq!(t.head().as_deref(), Some(head.as_str()), "{ctx}");
            assert_eq!(t.steps(&["fingerprint"]).ok().stdout(), want, "{ctx}");
            assert_eq!(t.git_out(&["status", "--porcelain"]), "", "{ctx}");
        }
    }
}

/// Killed at each of the mend's writes, the rerun finishes the mend and
/// the run, with the uninterrupted run's fingerprint.
#[test]
fn a_kill_inside_the_mend_resumes() {
    for (point, tear) in [
        ("torn-kept@index", "index"),
        ("torn-kept@branch", "branch"),
        ("torn-restored@branch", "branch"),
        ("torn-rescued@index", "index and an edit"),
        ("torn-rebuilt@index", "index and an edit"),
    ] {
        let (t, _server) = TestRepo::with_server(Kind::Path, "libgit2");
        let plan = plan(&t);
        let plan = plan.to_str().unwrap();
        t.steps(&["apply", plan]).ok();
        let want = t.steps(&["fingerprint"]).ok().stdout();
        match tear {
            "index" => std::fs::write(t.path(".git/index"), b"").unwrap(),
            "index and an edit" => {
                t.write("b.txt", "the user's edit\n");
                std::fs::write(t.path(".git/index"), b"").unwrap()
            }
            _ => std::fs::write(branch_file(&t), b"").unwrap(),
        }
        let r = t.steps_env(&["apply", plan], &[("GIT_STEPS_CRASH", point)]);
        assert_eq!(r.code(), None, "{point}: not killed\n{}", r.explain());
        let r = t.steps(&["apply", plan]);
        assert_eq!(r.code(), Some(0), "{point}\n{}", t.explain_with_log(&r));
        assert_eq!(t.steps(&["fingerprint"]).ok().stdout(), want, "{point}");
        assert_eq!(t.step_ids(), ["s1", "s2", "s3"], "{point}");
        if tear == "index and an edit" {
            // Saved before anything was put back, whichever write the kill
            // stopped at; kept in the worktree when the kill came first.
            let rescued = t.git_out(&["for-each-ref", "--format=%(refname)", "refs/steps/rescue/"]);
            let rescue = rescued
                .lines()
                .next()
                .unwrap_or_else(|| panic!("{point}: no rescue"));
            assert_eq!(
                t.git_out(&["show", &format!("{rescue}:b.txt")]),
                "the user's edit",
                "{point}"
            );
        } else {
            assert_eq!(t.git_out(&["status", "--porcelain"]), "", "{point}");
        }
    }
}

/// `record` after a torn index: the worktree holds the agent's step, so
/// only the index is rebuilt, and the edits are recorded as the step.
#[test]
fn record_after_a_torn_index_records_the_agents_edits() {
    let (t, _) = a_box(false);
    let plan = plan(&t);
    t.steps(&["apply", plan.to_str().unwrap()]).ok();
    t.write("a.txt", "the agent's edit\n");
    std::fs::write(t.path(".git/index"), b"DIRC").unwrap();
    let r = t.steps(&["record", "--id", "r1"]);
    assert_eq!(r.code(), Some(0), "{}", t.explain_with_log(&r));
    assert!(r.stderr().contains("rebuilt from HEAD"), "{}", r.explain());
    assert!(
        !r.stderr().contains("saved as refs/steps/rescue"),
        "{}",
        r.explain()
    );
    assert_eq!(t.step_ids(), ["s1", "s2", "s3", "r1"]);
    assert_eq!(t.git_out(&["show", "HEAD:a.txt"]), "the agent's edit");
    assert_eq!(t.git_out(&["status", "--porcelain"]), "");
}

/// The `git://` relay is git-steps itself, told so by a variable that git's
/// children inherit (a hook): a git-steps started there with a command of
/// its own runs that command.
#[test]
fn a_git_steps_a_hook_starts_under_the_relay_variable_is_no_relay() {
    let t = TestRepo::new();
    t.write("base.txt", "base\n");
    t.commit_all("base");
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_git-steps")).unwrap();
    let exe = exe.to_str().unwrap();
    // `undo 2` has the shape of `<host> <port>`: still the command.
    let r = t.steps_env(&["undo", "2"], &[("GIT_STEPS_NET_RELAY", exe)]);
    assert_ne!(r.code(), Some(0), "{}", r.explain());
    assert!(!r.stderr().contains("failed to connect"), "{}", r.explain());
    assert!(!r.stderr().contains("resolve address"), "{}", r.explain());
}

/// Issue 53: a ref file git cannot read — torn by a power cut on a file
/// system whose syncfs did not flush, or written by another tool — is
/// named with what it holds and what to do, never blamed on the remote's
/// URL or credentials; one on the remote is never taken for a missing
/// branch (a push would write over what it held).
#[test]
fn a_ref_git_cannot_read_is_named_not_blamed_on_the_url() {
    let (t, s) = TestRepo::with_server(Kind::Path, "libgit2");
    let plan = plan(&t);
    t.steps(&["apply", plan.to_str().unwrap()]).ok();
    let head = t.git_out(&["rev-parse", "main"]);
    // git-steps' copy of the remote's branch, torn in the box.
    t.git(&["update-ref", "refs/steps/remote/main", &head]).ok();
    let tracking = t.path(".git/refs/steps/remote/main");
    std::fs::write(&tracking, "").unwrap();
    let r = t.steps(&["apply", plan.to_str().unwrap()]).code_is(1);
    let err = r.stderr();
    assert!(err.contains(&tracking.display().to_string()), "{err}");
    assert!(err.contains("is empty, which is not a ref"), "{err}");
    assert!(err.contains("the next fetch writes again"), "{err}");
    assert!(!err.contains("URL"), "{err}");
    // Moved out of refs/ as the hint says, the rerun resumes.
    std::fs::rename(&tracking, t.path(".git/tracking.torn")).unwrap();
    t.steps(&["apply", plan.to_str().unwrap()]).ok();
    // The remote's branch, torn: refused, named, and left as it is.
    let remote_branch = s.bare.join("refs/heads/main");
    std::fs::write(&remote_branch, b"\0\0\0\0").unwrap();
    for args in [&["resume"][..], &["apply", plan.to_str().unwrap()]] {
        let r = t.steps(args).code_is(1);
        let err = r.stderr();
        assert!(err.contains("which is not a ref"), "{err}");
        assert!(err.contains("refs/heads/main"), "{err}");
        assert!(!err.contains("URL"), "{err}");
        assert_eq!(std::fs::read(&remote_branch).unwrap(), b"\0\0\0\0");
    }
    // A value git reads (`<id>\r\n`) is a ref, not a tear.
    std::fs::write(&remote_branch, format!("{head}\r\n")).unwrap();
    t.steps(&["resume"]).ok();
}
