//! Issue 17, part 5: `git steps undo` — rewinding is a step like any
//! other: never a reset or a force push, never a file no undone step
//! touched, idempotent by its id, and the undone change can be made again.

use std::os::unix::fs::MetadataExt;

use serde_json::json;

use crate::harness::*;
use crate::servers::{Kind, Server};

fn three_steps(kind: Kind) -> (TestRepo, Server) {
    let (t, server) = TestRepo::with_server(kind, "libgit2");
    let plan = [
        line(json!({"id": "s1", "files": {"a.txt": "one\n", "keep.txt": "keep\n"}})),
        line(json!({"id": "s2", "patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1,2 @@\n one\n+two\n"})),
        line(json!({"id": "s3", "files": {"b.txt": "bee\n", "gone.txt": null, "a.txt": null}})),
    ];
    // gone.txt exists in the base, so s3 can delete it.
    t.write("gone.txt", "old\n");
    t.commit_all("base");
    let p = t.plan("p.jsonl", &plan);
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    (t, server)
}

#[test]
fn undo_is_a_receipted_step_that_restores_only_what_the_undone_steps_touched() {
    let (t, server) = three_steps(Kind::Http);
    let before = server.head().unwrap();
    let keep_ino = std::fs::metadata(t.path("keep.txt")).unwrap().ino();
    t.write("notes.txt", "untracked, mine\n");
    let r = t.steps(&["--json", "undo", "--last", "2"]).ok().json();
    let d = &r["data"];
    assert_eq!(d["status"], "undone", "{d}");
    assert_eq!(d["step"], "undo:s1");
    assert_eq!(d["undone"], json!(["s2", "s3"]));
    // A new commit on top; nothing rewritten; durable.
    assert_eq!(t.git_out(&["rev-parse", "HEAD^"]), before);
    assert_eq!(server.head().as_deref(), d["commit"].as_str());
    let trailers = interpret_trailers(&t, &t.git_out(&["log", "-1", "--format=%B"]));
    for want in [
        "Step-Id: undo:s1",
        "Step-Undo: s2",
        "Step-Undo: s3",
        "Step-Source: undo",
    ] {
        assert!(trailers.contains(want), "{want}: {trailers}");
    }
    // The run's tree is s1's again for what s2 and s3 touched.
    assert_eq!(
        t.git_out(&["rev-parse", "HEAD^{tree}"]),
        t.git_out(&["rev-parse", "HEAD~3^{tree}"])
    );
    assert_eq!(t.read("a.txt"), "one\n");
    assert_eq!(t.read("gone.txt"), "old\n");
    assert!(!t.path("b.txt").exists());
    // Nothing else was touched: the untracked file, and keep.txt (only s1
    // wrote it) is the same file.
    assert_eq!(t.read("notes.txt"), "untracked, mine\n");
    assert_eq!(
        std::fs::metadata(t.path("keep.txt")).unwrap().ino(),
        keep_ino
    );
    assert_eq!(t.git_out(&["status", "--porcelain"]), "?? notes.txt");
    t.steps(&["verify"]).ok();
    // The same undo again, by either form: done, nothing new.
    for args in [&["undo", "--last", "2"][..], &["undo", "--to", "s1"][..]] {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let r = t.steps(&a).ok().json();
        assert_eq!(r["data"]["status"], "already-undone", "{args:?}");
    }
    assert_eq!(server.step_ids(), ["s1", "s2", "s3", "undo:s1"]);
    // The undone changes can be made again: no duplicated hunk.
    let again = [
        line(
            json!({"id": "s2-again", "patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1,2 @@\n one\n+two\n"}),
        ),
        line(
            json!({"id": "s3-again", "files": {"b.txt": "bee\n", "gone.txt": null, "a.txt": null}}),
        ),
    ];
    let p = t.plan("again.jsonl", &again);
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    assert_eq!(
        t.git_out(&["rev-parse", "HEAD^{tree}"]),
        t.git_out(&["rev-parse", &format!("{before}^{{tree}}")])
    );
    t.steps(&["verify"]).ok();
    // `log` marks it.
    let log = t.steps(&["--json", "log"]).ok().json();
    assert_eq!(log["data"]["steps"][3]["source"], "undo", "{log}");
}

#[test]
fn undo_refuses_what_it_cannot_do_and_writes_nothing() {
    let (t, server) = three_steps(Kind::Path);
    let head = server.head();
    t.steps(&["undo", "--to", "nope"])
        .code_is(1)
        .stderr_has("no step nope");
    t.steps(&["undo", "--to", "s3"])
        .code_is(1)
        .stderr_has("last step");
    t.steps(&["undo", "--last", "4"])
        .code_is(1)
        .stderr_has("3 step(s)");
    t.steps(&["undo", "--last", "0"]).code_is(2);
    t.steps(&["undo"]).code_is(2);
    t.steps(&["undo", "--last", "1", "--id=-x"])
        .code_is(1)
        .stderr_has("--id");
    // A file the undo would restore holds the user's edit: refused, kept.
    t.write("b.txt", "my edit\n");
    t.steps(&["undo", "--last", "1"]).code_is(3);
    assert_eq!(t.read("b.txt"), "my edit\n");
    assert_eq!(server.head(), head);
}

/// A kill at every write of an undo, then the same command: one undo step.
#[test]
fn an_undo_killed_at_any_point_is_finished_by_the_same_command() {
    use std::os::unix::process::ExitStatusExt;
    for point in super::STEP_POINTS {
        let (t, server) = three_steps(Kind::Path);
        let r = t.steps_env(
            &["undo", "--last", "2"],
            &[("GIT_STEPS_CRASH", &format!("{point}@undo:s1"))],
        );
        assert_eq!(r.out.status.signal(), Some(9), "{point}: {}", r.explain());
        t.steps(&["undo", "--last", "2"]).ok();
        assert_eq!(server.step_ids(), ["s1", "s2", "s3", "undo:s1"], "{point}");
        assert_eq!(
            t.git_out(&["rev-parse", "HEAD"]),
            server.head().unwrap(),
            "{point}"
        );
        assert_eq!(t.git_out(&["status", "--porcelain"]), "", "{point}");
        assert_eq!(t.read("a.txt"), "one\n", "{point}");
        t.steps(&["verify"]).ok();
    }
}

#[test]
fn the_undo_crash_matrix_is_all_same() {
    let t = TestRepo::new();
    let r = t
        .steps(&[
            "--json",
            "crashtest",
            "--empty-base",
            "--runner",
            "undo",
            fixture("apply-patch.jsonl").to_str().unwrap(),
        ])
        .ok();
    let m = r.json()["data"].clone();
    let rows = m["rows"].as_array().unwrap();
    // The plan's steps, the undo, and the undone steps made again.
    assert!(rows.iter().any(|r| r["step"] == "undo-replay"));
    assert!(rows
        .iter()
        .any(|r| r["step"].as_str().unwrap().starts_with("again-")));
    for row in rows {
        assert_eq!(row["verdict"], "SAME", "{row}");
        assert_eq!(row["reason"], "", "{row}");
    }
}

/// Review finding: `undo` is a field no plan (and no MCP client) may set:
/// it would let a step pass the duplicated-hunk check.
#[test]
fn a_plan_cannot_claim_to_undo() {
    let (t, server) = three_steps(Kind::Path);
    let head = server.head();
    let forged = line(json!({"id": "s4", "files": {"a.txt": "x\n"}, "undo": ["s2"]}));
    t.steps_stdin(&["apply", "-"], &forged)
        .code_is(1)
        .stderr_has("unknown field `undo`");
    assert_eq!(server.head(), head);
}

/// An undo's id after later steps: the same command is a rerun (done, and
/// it says the undo is not made again); a new rewind needs its own id. The
/// plan goes on after an undo.
#[test]
fn an_undo_id_is_not_reused_for_a_new_rewind() {
    let (t, server) = three_steps(Kind::Path);
    t.steps(&["undo", "--to", "s1"]).ok();
    let s4 = line(json!({"id": "s4", "files": {"c.txt": "sea\n"}}));
    t.steps_stdin(&["apply", "-"], &s4).ok();
    let r = t.steps(&["--json", "undo", "--to", "s1"]).ok();
    assert_eq!(r.json()["data"]["status"], "already-undone");
    assert!(r.stderr().contains("--id"), "{}", r.stderr());
    assert!(t.path("c.txt").exists());
    t.steps(&["undo", "--to", "s1", "--id", "undo-2"]).ok();
    assert!(!t.path("c.txt").exists());
    assert_eq!(
        server.step_ids(),
        ["s1", "s2", "s3", "undo:s1", "s4", "undo-2"]
    );
    // The original plan, extended, goes on over the undo steps.
    let plan = [
        line(json!({"id": "s1", "files": {"a.txt": "one\n", "keep.txt": "keep\n"}})),
        line(json!({"id": "s2", "patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1,2 @@\n one\n+two\n"})),
        line(json!({"id": "s3", "files": {"b.txt": "bee\n", "gone.txt": null, "a.txt": null}})),
        line(json!({"id": "s4", "files": {"c.txt": "sea\n"}})),
        line(json!({"id": "s5", "files": {"d.txt": "dee\n"}})),
    ];
    let p = t.plan("p2.jsonl", &plan);
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    t.steps(&["verify", p.to_str().unwrap()]).ok();
}

/// Issue 28 item 6: `undo` across an adopted commit said it undid the
/// adoption but left the hand commit's files (the adopting step's own tree
/// is its parent's). It restores every path the undone commits changed,
/// adopted ones included, and nothing else.
#[test]
fn undo_across_an_adopted_commit_restores_its_files_too() {
    let (t, server) = three_steps(Kind::Path);
    t.write("hand.txt", "by hand\n");
    t.write("b.txt", "bee, fixed by hand\n");
    t.git(&["add", "hand.txt", "b.txt"]).ok();
    t.git(&["commit", "-q", "-m", "a hand fix"]).ok();
    t.steps(&["adopt", "--yes"]).ok();
    let s4 = line(json!({"id": "s4", "files": {"c.txt": "see\n"}}));
    t.steps_stdin(&["apply", "-"], &s4).ok();
    let r = t.steps(&["--json", "undo", "--to", "s3"]).ok().json();
    let undone: Vec<&str> = r["data"]["undone"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(undone.len(), 2, "{r}");
    assert!(undone[0].starts_with("adopt:"), "{r}");
    assert_eq!(undone[1], "s4");
    // The tree is s3's again: the hand commit's files are undone too.
    assert_eq!(
        t.git_out(&["rev-parse", "HEAD^{tree}"]),
        t.git_out(&["log", "-1", "--format=%T", "--grep=^step s3:"])
    );
    assert!(!t.path("hand.txt").exists());
    assert_eq!(t.read("b.txt"), "bee\n");
    assert!(!t.path("c.txt").exists());
    assert_eq!(t.git_out(&["status", "--porcelain"]), "");
    assert_eq!(server.head(), Some(t.git_out(&["rev-parse", "HEAD"])));
    t.steps(&["verify"]).ok();
}
