//! Issue 17, part 2: `git steps record` — what an agent changed in the
//! worktree with its own tools becomes one receipted step; a rerun after a
//! crash at any point is done, other changes under a used id are refused,
//! and nothing in the worktree is ever lost.

use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use crate::harness::*;
use crate::servers::Kind;

/// A box on a server, with a base commit holding a few files.
fn base(kind: Kind) -> (TestRepo, crate::servers::Server) {
    let (t, server) = TestRepo::with_server(kind, "libgit2");
    t.write("keep.txt", "keep\n");
    t.write("edit.txt", "one\ntwo\n");
    t.write("gone.txt", "bye\n");
    t.write("run.sh", "#!/bin/sh\necho hi\n");
    t.write(".gitignore", "*.log\n");
    t.commit_all("base");
    t.steps(&["resume"]).ok(); // pushes the base
    (t, server)
}

/// The agent's edits, made with plain file operations.
fn edit_in_place(t: &TestRepo) {
    t.write("edit.txt", "one\nTWO\nthree\n");
    t.write("new/dir/added.txt", "added\n");
    std::fs::remove_file(t.path("gone.txt")).unwrap();
    let sh = t.path("run.sh");
    std::fs::set_permissions(&sh, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("keep.txt", t.path("link")).unwrap();
    std::fs::write(t.path("logo.bin"), [0u8, 159, 146, 150, 0, 1]).unwrap();
    t.write("debug.log", "ignored\n");
}

#[test]
fn in_place_edits_become_one_receipted_step_on_the_remote() {
    let (t, server) = base(Kind::Http);
    let before = server.head();
    edit_in_place(&t);
    let r = t
        .steps(&[
            "--json",
            "record",
            "--id",
            "toolu_1",
            "-m",
            "agent edit",
            "--intent",
            r#"{"tool": "Edit"}"#,
        ])
        .ok();
    let data = r.json()["data"].clone();
    assert_eq!(data["status"], "recorded", "{data}");
    let commit = data["commit"].as_str().unwrap().to_string();
    // Durable: the remote holds it; the local branch and HEAD too.
    assert_eq!(server.head().as_deref(), Some(commit.as_str()));
    assert_ne!(server.head(), before);
    assert_eq!(t.git_out(&["rev-parse", "HEAD"]), commit);
    // One commit, on the base, with its receipt, audited with git.
    assert_eq!(
        t.git_out(&["rev-list", "--count", &format!("{}..HEAD", before.unwrap())]),
        "1"
    );
    let trailers = interpret_trailers(&t, &t.git_out(&["log", "-1", "--format=%B"]));
    for want in ["Step-Id: toolu_1", "Step-Source: record", "Step-Index: 1"] {
        assert!(trailers.contains(want), "{want} missing: {trailers}");
    }
    assert!(t
        .git_out(&["log", "-1", "--format=%s"])
        .ends_with("agent edit"));
    assert!(t
        .git_out(&["log", "-1", "--format=%b"])
        .contains(r#"{"tool":"Edit"}"#));
    // What git holds is what the agent left: modes, a symlink, binary bytes.
    let tree = t.git_out(&["ls-tree", "-r", "HEAD"]);
    assert!(
        tree.contains("100755 blob") && tree.contains("\trun.sh"),
        "{tree}"
    );
    assert!(
        tree.contains("120000 blob") && tree.contains("\tlink"),
        "{tree}"
    );
    assert!(tree.contains("\tnew/dir/added.txt"), "{tree}");
    assert!(
        !tree.contains("gone.txt") && !tree.contains("debug.log"),
        "{tree}"
    );
    assert_eq!(t.git_out(&["cat-file", "-p", "HEAD:link"]), "keep.txt");
    let bin = t.git(&["cat-file", "blob", "HEAD:logo.bin"]).ok();
    assert_eq!(bin.out.stdout, [0u8, 159, 146, 150, 0, 1]);
    // No file written, only the index caught up: status is clean but for
    // the ignored file, which stays.
    assert_eq!(t.git_out(&["status", "--porcelain"]), "");
    assert_eq!(t.read("debug.log"), "ignored\n");
    assert_eq!(t.read("edit.txt"), "one\nTWO\nthree\n");
    t.steps(&["verify"]).ok();
    let log = t.steps(&["--json", "log"]).ok().json();
    assert_eq!(log["data"]["steps"][0]["source"], "record", "{log}");
    assert_eq!(log["data"]["steps"][0]["decision"], data["decision"]);
}

#[test]
fn a_rerun_is_done_other_changes_under_the_id_are_refused_and_kept() {
    let (t, server) = base(Kind::Path);
    t.write("edit.txt", "one\nTWO\n");
    t.steps(&["record", "--id", "r1"]).ok();
    let head = server.head();
    // The same command again: done, nothing new.
    let r = t.steps(&["--json", "record", "--id", "r1"]).ok();
    assert_eq!(r.json()["data"]["status"], "already-recorded");
    assert_eq!(server.head(), head);
    // More edits under the same id: refused, the edit kept, nothing pushed.
    t.write("edit.txt", "one\nTWO\nmore\n");
    t.steps(&["record", "--id", "r1"])
        .code_is(3)
        .stderr_has("already has a receipt")
        .stderr_has("new id");
    assert_eq!(t.read("edit.txt"), "one\nTWO\nmore\n");
    assert_eq!(server.head(), head);
    // Under a new id: only the new change.
    let r = t.steps(&["--json", "record", "--id", "r2"]).ok();
    assert_eq!(r.json()["data"]["files"], json!(["edit.txt"]));
    assert_eq!(
        t.git_out(&["show", "--format=", "--stat", "HEAD"])
            .lines()
            .count(),
        2
    );
    assert_eq!(server.step_ids(), ["r1", "r2"]);
    // Nothing to record: exit 1, nothing written.
    let head = server.head();
    t.steps(&["record", "--id", "r3"])
        .code_is(1)
        .stderr_has("nothing to record");
    assert_eq!(server.head(), head);
    // Only ignored files changed: still nothing.
    t.write("more.log", "x\n");
    t.steps(&["record", "--id", "r3"]).code_is(1);
    // A bad id: exit 1, naming it.
    t.write("edit.txt", "x\n");
    t.steps(&["record", "--id=-bad"])
        .code_is(1)
        .stderr_has("--id");
    assert_eq!(server.head(), head);
}

/// A kill at every write of a record, then the same command: exactly one
/// receipt, the worktree as the agent left it, local equal to durable.
#[test]
fn a_record_killed_at_any_point_is_finished_by_the_same_command() {
    use std::os::unix::process::ExitStatusExt;
    for point in super::STEP_POINTS {
        let (t, server) = base(Kind::Path);
        edit_in_place(&t);
        let crash = format!("{point}@toolu_1");
        let r = t.steps_env(
            &["record", "--id", "toolu_1"],
            &[("GIT_STEPS_CRASH", &crash)],
        );
        assert_eq!(r.out.status.signal(), Some(9), "{point}: {}", r.explain());
        let r = t.steps(&["--json", "record", "--id", "toolu_1"]).ok();
        let status = r.json()["data"]["status"].clone();
        let durable_before = matches!(
            point,
            // At `push-sent` the bare remote's branch has not moved.
            "before-write" | "objects-written" | "update-noted" | "push-sent"
        );
        assert_eq!(
            status,
            if durable_before {
                "recorded"
            } else {
                "already-recorded"
            },
            "{point}"
        );
        assert_eq!(server.step_ids(), ["toolu_1"], "{point}");
        assert_eq!(
            t.git_out(&["rev-parse", "HEAD"]),
            server.head().unwrap(),
            "{point}"
        );
        assert_eq!(t.git_out(&["status", "--porcelain"]), "", "{point}");
        assert_eq!(t.read("edit.txt"), "one\nTWO\nthree\n", "{point}");
        assert_eq!(t.read("debug.log"), "ignored\n", "{point}");
        t.steps(&["verify"]).ok();
    }
}

/// After a crash that left the step durable but this box behind, the agent
/// edits another file before the rerun: the rerun refuses (the id's
/// decision is another), keeps the edit, and a new id records just it.
#[test]
fn an_edit_made_after_a_crash_is_never_lost() {
    let (t, server) = base(Kind::Path);
    t.write("edit.txt", "one\nTWO\n");
    let r = t.steps_env(
        &["record", "--id", "r1"],
        &[("GIT_STEPS_CRASH", "pushed@r1")],
    );
    assert!(r.code().is_none(), "{}", r.explain());
    t.write("keep.txt", "keep\nand more\n");
    t.steps(&["record", "--id", "r1"]).code_is(3);
    assert_eq!(t.read("keep.txt"), "keep\nand more\n");
    assert_eq!(t.read("edit.txt"), "one\nTWO\n");
    let r = t.steps(&["--json", "record", "--id", "r2"]).ok();
    assert_eq!(r.json()["data"]["files"], json!(["keep.txt"]));
    assert_eq!(server.step_ids(), ["r1", "r2"]);
    assert_eq!(t.git_out(&["status", "--porcelain"]), "");
}

/// Another box recorded on the same run: this box's agent edits are kept
/// while the remote's step is brought in (a file it changes that the agent
/// did not touch is written); an agent edit of a file the remote's step
/// changed too is refused, and kept.
#[test]
fn record_brings_in_the_remotes_steps_around_the_agents_edits() {
    let (t, server) = base(Kind::Path);
    let other = t.sibling("other", Some(server.url()));
    other.steps(&["init", "--remote", server.url()]).ok();
    other.write("keep.txt", "kept by the other box\n");
    other.steps(&["record", "--id", "other-1"]).ok();
    // This box is behind; its agent edited another file.
    t.write("edit.txt", "one\nmine\n");
    t.steps(&["record", "--id", "mine-1"]).ok();
    assert_eq!(server.step_ids(), ["other-1", "mine-1"]);
    assert_eq!(t.read("keep.txt"), "kept by the other box\n");
    assert_eq!(t.git_out(&["status", "--porcelain"]), "");
    assert_eq!(
        t.git_out(&["show", "--format=", "--name-only", "HEAD"]),
        "edit.txt"
    );
    // Both boxes edit the same file; the other records first.
    other.steps(&["resume"]).ok();
    other.write("edit.txt", "theirs\n");
    other.steps(&["record", "--id", "other-2"]).ok();
    t.write("edit.txt", "ours\n");
    t.steps(&["record", "--id", "mine-2"])
        .code_is(3)
        .stderr_has("edit.txt");
    assert_eq!(t.read("edit.txt"), "ours\n");
    assert_eq!(server.step_ids(), ["other-1", "mine-1", "other-2"]);
}

/// A partial `git add` (the index holds a version that is neither the
/// head's nor the worktree's) is refused before anything is written.
#[test]
fn record_refuses_an_index_that_disagrees_with_the_worktree() {
    let (t, server) = base(Kind::Path);
    let head = server.head();
    t.write("edit.txt", "staged\n");
    t.git(&["add", "edit.txt"]).ok();
    t.write("edit.txt", "edited after staging\n");
    t.steps(&["record", "--id", "r1"])
        .code_is(3)
        .stderr_has("index holds a version of edit.txt");
    assert_eq!(server.head(), head);
    assert_eq!(t.read("edit.txt"), "edited after staging\n");
    // `git add` what is to be recorded: it records.
    t.git(&["add", "edit.txt"]).ok();
    t.steps(&["record", "--id", "r1"]).ok();
    assert_eq!(
        t.git_out(&["show", "HEAD:edit.txt"]),
        "edited after staging"
    );
}

/// A step in the `files` object form, applied as a plan: modes, a symlink
/// and binary content land as given, and the SPEC's path rules still hold.
#[test]
fn files_object_values_apply_from_a_plan() {
    let t = TestRepo::new();
    let step = json!({"id": "s1", "files": {
        "tool.sh": {"text": "#!/bin/sh\n", "mode": "100755"},
        "data.bin": {"base64": "AP8A/w=="},
        "to-tool": {"symlink": "tool.sh"}
    }});
    let plan = t.plan("p.jsonl", &[line(step)]);
    t.steps(&["apply", plan.to_str().unwrap()]).ok();
    let tree = t.git_out(&["ls-tree", "-r", "HEAD"]);
    assert!(
        tree.contains("100755 blob") && tree.contains("\ttool.sh"),
        "{tree}"
    );
    assert!(
        tree.contains("120000 blob") && tree.contains("\tto-tool"),
        "{tree}"
    );
    let bin = t.git(&["cat-file", "blob", "HEAD:data.bin"]).ok();
    assert_eq!(bin.out.stdout, [0u8, 255, 0, 255]);
    assert_eq!(
        std::fs::read_link(t.path("to-tool")).unwrap().to_str(),
        Some("tool.sh")
    );
    let out_link = json!({"id": "s2", "files": {"esc": {"symlink": "../../etc/passwd"}}});
    let plan = t.plan("p2.jsonl", &[line(out_link)]);
    t.steps(&["apply", plan.to_str().unwrap()]).code_is(1);
    assert!(!t.path("esc").exists());
}

#[test]
fn the_record_crash_matrix_is_all_same() {
    let t = TestRepo::new();
    let r = t
        .steps(&[
            "--json",
            "crashtest",
            "--empty-base",
            "--runner",
            "record",
            fixture("type-changes.jsonl").to_str().unwrap(),
        ])
        .ok();
    let m = r.json()["data"].clone();
    let rows = m["rows"].as_array().unwrap();
    assert!(rows.len() > 100, "{}", rows.len());
    for row in rows {
        assert_eq!(row["verdict"], "SAME", "{row}");
        // Every armed crash fired (the reason says so when one did not).
        assert_eq!(row["reason"], "", "{row}");
    }
    // It is the artifact `apply` reaches on the same plan.
    let applied = TestRepo::new();
    applied
        .steps(&["apply", fixture("type-changes.jsonl").to_str().unwrap()])
        .ok();
    let fp = applied.steps(&["--json", "fingerprint"]).ok();
    assert_eq!(m["reference"]["artifact"], fp.json()["data"]["artifact"]);
}

/// README's post-edit hook for Claude Code, run as README shows it (the
/// command is read from README), with the payload a hook gets on stdin:
/// the edit is recorded once however often the same call is reported.
#[test]
fn the_readme_hook_records_each_tool_call_once() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let start = readme
        .find("```json\n{\n  \"hooks\"")
        .expect("README shows the hook");
    let end = readme[start + 7..].find("```").unwrap() + start + 7;
    let cfg: serde_json::Value = serde_json::from_str(&readme[start + 7..end]).unwrap();
    let hook = cfg["hooks"]["PostToolUse"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .to_string();
    let (t, server) = base(Kind::Path);
    let bin_dir = std::path::Path::new(BIN).parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // `git steps` finds git-steps on PATH, as for a user.
    let run_hook = |payload: &serde_json::Value| {
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", &hook]);
        hermetic(&mut cmd, &t.home());
        cmd.current_dir(t.path("")).env("PATH", &path);
        t.run_cmd(
            cmd,
            "the README hook".into(),
            Some(payload.to_string().as_bytes()),
        )
    };
    t.write("edit.txt", "one\nhooked\n");
    let with_id = json!({"session_id": "s", "tool_use_id": "toolu_01ABC", "tool_name": "Edit",
        "tool_input": {"file_path": "edit.txt", "old_string": "two", "new_string": "hooked"}});
    run_hook(&with_id).ok();
    run_hook(&with_id).ok();
    assert_eq!(server.step_ids(), ["edit-toolu_01ABC"]);
    let body = t.git_out(&["log", "-1", "--format=%b"]);
    assert!(body.contains(r#""new_string":"hooked""#), "{body}");
    // No tool_use_id in the payload: the id is derived from the call.
    t.write("keep.txt", "keep\nwritten\n");
    let without = json!({"session_id": "s", "tool_name": "Write",
        "tool_input": {"file_path": "keep.txt", "content": "keep\nwritten\n"}});
    run_hook(&without).ok();
    run_hook(&without).ok();
    let ids = server.step_ids();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(
        ids[1].starts_with("edit-") && ids[1].len() == 5 + 24,
        "{ids:?}"
    );
    assert_eq!(t.git_out(&["status", "--porcelain"]), "");
}

/// A symlink out of the repository is never recorded (nor written
/// anywhere): exit 1 naming it, the link left where it is.
#[test]
fn record_refuses_a_symlink_out_of_the_repository() {
    let (t, server) = base(Kind::Path);
    let head = server.head();
    for (name, target) in [("evil", "/etc/passwd"), ("sub/up", "../../..")] {
        std::fs::create_dir_all(t.path(name).parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, t.path(name)).unwrap();
        t.steps(&["record", "--id", "h1"])
            .code_is(1)
            .stderr_has(&format!("the symlink {name} points to"));
        assert_eq!(server.head(), head);
        assert_eq!(
            std::fs::read_link(t.path(name)).unwrap().to_str(),
            Some(target)
        );
        std::fs::remove_file(t.path(name)).unwrap();
    }
}

/// Review finding: an `apply` killed after its branch moved leaves the
/// worktree and index behind the head; `record` must not take the missing
/// part for the agent's edit (that would record the step's reverse).
#[test]
fn record_finishes_an_interrupted_update_around_the_agents_edits() {
    use std::os::unix::process::ExitStatusExt;
    let (t, server) = base(Kind::Path);
    let s1 = line(json!({"id": "s1", "files": {"edit.txt": "one\ntwo\nthree\n"}}));
    let p = t.plan("p.jsonl", &[s1]);
    let r = t.steps_env(
        &["apply", p.to_str().unwrap()],
        &[("GIT_STEPS_CRASH", "ref-updated@s1")],
    );
    assert_eq!(r.out.status.signal(), Some(9), "{}", r.explain());
    // An edit where the update brings a new version: refused, kept.
    t.write("edit.txt", "the agent's own\n");
    let head = server.head();
    t.steps(&["record", "--id", "r1"])
        .code_is(3)
        .stderr_has("interrupted");
    assert_eq!(server.head(), head);
    assert_eq!(t.read("edit.txt"), "the agent's own\n");
    // An edit elsewhere: the update is finished around it, then recorded.
    t.write("edit.txt", "one\ntwo\n");
    t.write("keep.txt", "keep\nagent\n");
    let r = t.steps(&["--json", "record", "--id", "r1"]).ok();
    assert!(
        r.stderr().contains("finished a worktree update"),
        "{}",
        r.stderr()
    );
    assert_eq!(r.json()["data"]["files"], json!(["keep.txt"]));
    assert_eq!(t.read("edit.txt"), "one\ntwo\nthree\n");
    assert_eq!(t.read("keep.txt"), "keep\nagent\n");
    assert_eq!(server.step_ids(), ["s1", "r1"]);
    assert_eq!(t.git_out(&["status", "--porcelain"]), "");
}

/// Review finding: `record`'s in-place fast-forward killed after the
/// branch moved must not make the rerun record the other box's step in
/// reverse.
#[test]
fn a_record_killed_while_catching_up_never_takes_back_the_remotes_step() {
    let (t, server) = base(Kind::Path);
    let other = t.sibling("other", Some(server.url()));
    other.steps(&["init", "--remote", server.url()]).ok();
    other.write("edit.txt", "theirs\n");
    other.steps(&["record", "--id", "other-1"]).ok();
    t.write("keep.txt", "keep\nmine\n");
    for point in ["worktree-partial", "worktree-done", "reconcile-ref"] {
        let r = t.steps_env(
            &["record", "--id", "mine-1"],
            &[("GIT_STEPS_CRASH", &format!("{point}@other-1"))],
        );
        assert!(r.code().is_none(), "{point}: {}", r.explain());
    }
    t.steps(&["record", "--id", "mine-1"]).ok();
    assert_eq!(server.step_ids(), ["other-1", "mine-1"]);
    assert_eq!(
        t.git_out(&["show", "--format=", "--name-only", "HEAD"]),
        "keep.txt"
    );
    assert_eq!(t.read("edit.txt"), "theirs\n");
    assert_eq!(t.git_out(&["status", "--porcelain"]), "");
}

/// Review finding: with `steps.hooks`, a hook that edits a file the agent
/// had modified already is caught (the check compares content, not only
/// the file's status).
#[test]
fn a_hook_that_edits_a_recorded_file_is_refused() {
    let (t, server) = base(Kind::Path);
    let hooks = t.home().join("hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    crate::harness::script(
        &hooks.join("pre-commit"),
        "#!/bin/sh\necho 'hook was here' >> edit.txt\n",
    );
    t.git(&["config", "core.hooksPath", hooks.to_str().unwrap()])
        .ok();
    t.git(&["config", "steps.hooks", "true"]).ok();
    let head = server.head();
    t.write("edit.txt", "one\nagent\n");
    t.steps(&["record", "--id", "r1"])
        .code_is(3)
        .stderr_has("a hook changed the worktree");
    assert_eq!(server.head(), head);
}
