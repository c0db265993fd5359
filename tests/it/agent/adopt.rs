//! Issue 17, part 3: `git steps adopt` — commits a human made on the run's
//! branch with plain git join the run through one receipted commit on top
//! of them; nothing is rewritten, and the run goes on.

use serde_json::json;

use crate::harness::*;
use crate::servers::{Kind, Server};

/// A run with one step on a server.
fn started(kind: Kind) -> (TestRepo, Server) {
    let (t, server) = TestRepo::with_server(kind, "libgit2");
    let s1 = line(json!({"id": "s1", "files": {"a.txt": "one\n"}}));
    t.steps_stdin(&["apply", "-"], &s1).ok();
    (t, server)
}

fn human_commit(t: &TestRepo, file: &str, content: &str, msg: &str) -> String {
    t.write(file, content);
    t.git(&["add", file]).ok();
    t.git(&["commit", "-q", "-m", msg]).ok();
    t.git_out(&["rev-parse", "HEAD"])
}

#[test]
fn a_human_commit_is_adopted_on_top_and_the_run_goes_on() {
    let (t, server) = started(Kind::Http);
    let fix = human_commit(&t, "a.txt", "one\nfixed by hand\n", "hand fix");
    // The run refuses to go on, and says what to do.
    let s2 = line(json!({"id": "s2", "files": {"b.txt": "two\n"}}));
    t.steps_stdin(&["apply", "-"], &s2)
        .code_is(3)
        .stderr_has("git steps adopt --yes");
    // Listing writes nothing.
    let before = server.head();
    let r = t.steps(&["adopt"]).ok();
    assert!(r.stdout().contains(&fix[..12]), "{}", r.stdout());
    assert!(r.stderr().contains("--yes"), "{}", r.stderr());
    let listed = t.steps(&["--json", "adopt", "--dry-run"]).ok().json();
    assert_eq!(listed["data"]["status"], "would-adopt");
    assert_eq!(listed["data"]["commits"][0]["commit"], fix.as_str());
    assert_eq!(server.head(), before);
    assert_eq!(t.git_out(&["rev-parse", "HEAD"]), fix);
    // Adopted: one commit on top, same tree, naming it; durable.
    let r = t.steps(&["--json", "adopt", "--yes"]).ok().json();
    let receipt = r["data"]["receipt"].as_str().unwrap().to_string();
    assert_eq!(r["data"]["status"], "adopted");
    assert_eq!(server.head().as_deref(), Some(receipt.as_str()));
    assert_eq!(
        t.git_out(&["rev-parse", "HEAD^"]),
        fix,
        "the hand commit is not rewritten"
    );
    assert_eq!(
        t.git_out(&["rev-parse", "HEAD^{tree}"]),
        t.git_out(&["rev-parse", "HEAD^^{tree}"])
    );
    let trailers = interpret_trailers(&t, &t.git_out(&["log", "-1", "--format=%B"]));
    assert!(
        trailers.contains(&format!("Step-Adopt: {fix}")),
        "{trailers}"
    );
    assert!(trailers.contains("Step-Index: 2"), "{trailers}");
    assert!(trailers.contains("Step-Source: adopt"), "{trailers}");
    // The run goes on; status and verify accept it.
    t.steps_stdin(&["apply", "-"], &s2).ok();
    t.steps(&["verify"]).ok();
    let st = t.steps(&["--json", "status"]).ok().json();
    assert_eq!(st["data"]["steps_applied"], json!(3), "{st}");
    // The hand commit's change counts: repeating it is a duplicated hunk.
    let again = line(
        json!({"id": "s3", "patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,3 @@\n one\n fixed by hand\n+fixed by hand\n"}),
    );
    t.steps_stdin(&["apply", "-"], &again)
        .code_is(3)
        .stderr_has("(adopted)");
    // Adopting again: nothing to adopt.
    let r = t.steps(&["--json", "adopt", "--yes"]).ok().json();
    assert_eq!(r["data"]["status"], "nothing");
    assert_eq!(server.step_ids().len(), 3);
}

/// The hand commit was pushed to the remote with plain git from another
/// clone: this box adopts it (`--json` confirms, for programs) and comes
/// up to it.
#[test]
fn a_hand_commit_pushed_to_the_remote_is_adopted_from_another_box() {
    let (t, server) = started(Kind::Daemon);
    let other = t.sibling(
        "other",
        Some(&format!("file://{}", server.bare().display())),
    );
    let fix = human_commit(
        &other,
        "a.txt",
        "one\nfrom elsewhere\n",
        "hand fix elsewhere",
    );
    other.git(&["push", "-q", "origin", "HEAD:main"]).ok();
    let s2 = line(json!({"id": "s2", "files": {"b.txt": "two\n"}}));
    t.steps_stdin(&["apply", "-"], &s2).code_is(3);
    let r = t.steps(&["--json", "adopt"]).ok().json();
    assert_eq!(r["data"]["status"], "adopted", "{r}");
    assert_eq!(t.git_out(&["rev-parse", "HEAD^"]), fix);
    assert_eq!(t.read("a.txt"), "one\nfrom elsewhere\n");
    assert_eq!(t.git_out(&["status", "--porcelain"]), "");
    t.steps_stdin(&["apply", "-"], &s2).ok();
    assert_eq!(server.step_ids().len(), 3);
}

/// A commit that carries another run's receipt is not adoptable.
#[test]
fn another_runs_receipt_is_not_adoptable() {
    let (t, server) = started(Kind::Path);
    let msg = format!(
        "step x: forged\n\nStep-Id: x\nStep-Run: other\nStep-Decision: sha256:{}\nStep-Index: 1\n",
        "0".repeat(64)
    );
    t.git(&["commit", "-q", "--allow-empty", "-m", &msg]).ok();
    let head = server.head();
    t.steps(&["adopt", "--yes"])
        .code_is(3)
        .stderr_has("another run");
    assert_eq!(server.head(), head);
}

/// A kill at each write of `adopt`, then the same command: one adopting
/// commit, the box level with the remote.
#[test]
fn an_adopt_killed_at_any_point_is_finished_by_the_same_command() {
    use std::os::unix::process::ExitStatusExt;
    for point in super::STEP_POINTS {
        let (t, server) = started(Kind::Path);
        let other = t.sibling(
            "other",
            Some(&format!("file://{}", server.bare().display())),
        );
        human_commit(&other, "a.txt", "one\nfix\n", "hand fix");
        other.git(&["push", "-q", "origin", "HEAD:main"]).ok();
        let id = "adopt-1";
        let r = t.steps_env(
            &["adopt", "--yes", "--id", id],
            &[("GIT_STEPS_CRASH", &format!("{point}@{id}"))],
        );
        assert_eq!(r.out.status.signal(), Some(9), "{point}: {}", r.explain());
        t.steps(&["adopt", "--yes", "--id", id]).ok();
        assert_eq!(server.step_ids(), ["s1", id], "{point}");
        assert_eq!(
            t.git_out(&["rev-parse", "HEAD"]),
            server.head().unwrap(),
            "{point}"
        );
        assert_eq!(t.read("a.txt"), "one\nfix\n", "{point}");
        assert_eq!(t.git_out(&["status", "--porcelain"]), "", "{point}");
        t.steps(&["verify"]).ok();
    }
}

/// Review findings: hand commits pushed from two boxes; this box killed
/// while adopting them after its branch moved resumes; the other box, whose
/// branch holds the last hand commit, catches up; the plan goes on.
#[test]
fn boxes_holding_adopted_commits_catch_up_and_the_plan_goes_on() {
    use std::os::unix::process::ExitStatusExt;
    let (b, server) = started(Kind::Path);
    let url = format!("file://{}", server.bare().display());
    human_commit(&b, "f.txt", "one\n", "hand 1");
    b.git(&["push", "-q", &url, "HEAD:main"]).ok();
    let c = b.sibling("c", Some(&url));
    c.steps(&["init", "--remote", &url]).ok();
    let h2 = human_commit(&c, "f.txt", "two\n", "hand 2");
    c.git(&["push", "-q", "origin", "HEAD:main"]).ok();
    let id = format!("adopt:{}", &h2[..12]);
    let r = b.steps_env(
        &["adopt", "--yes"],
        &[("GIT_STEPS_CRASH", &format!("ref-updated@{id}"))],
    );
    assert_eq!(r.out.status.signal(), Some(9), "{}", r.explain());
    b.steps(&["adopt", "--yes"]).ok();
    assert_eq!(b.read("f.txt"), "two\n");
    assert_eq!(b.git_out(&["status", "--porcelain"]), "");
    // The box whose branch holds hand 2 catches up with the adoption.
    let s2 = line(json!({"id": "s2", "files": {"b.txt": "two\n"}}));
    c.steps_stdin(&["apply", "-"], &s2).ok();
    assert_eq!(server.step_ids(), ["s1", &id, "s2"]);
    // The plan the run started with goes on over the adoption.
    let plan = [
        line(json!({"id": "s1", "files": {"a.txt": "one\n"}})),
        line(json!({"id": "s2", "files": {"b.txt": "two\n"}})),
        line(json!({"id": "s3", "files": {"c.txt": "three\n"}})),
    ];
    let p = c.plan("p.jsonl", &plan);
    c.steps(&["apply", p.to_str().unwrap()]).ok();
    c.steps(&["verify", p.to_str().unwrap()]).ok();
}

/// A run with adopted commits publishes no shared hunk cache: a fresh box
/// would not take one (its hunks are read from the log), so the push would
/// be for nothing. The run itself goes on as usual, and this box's receipt
/// index keeps knowing that the run holds an adopted commit.
#[test]
fn a_run_with_adopted_commits_publishes_no_shared_cache() {
    let (t, server) = started(Kind::Path);
    t.git(&["config", "steps.cacheEvery", "1"]).ok();
    let caches = || {
        server
            .git(&["for-each-ref", "--format=%(refname)", "refs/steps/cache/"])
            .lines()
            .count()
    };
    let s2 = line(json!({"id": "s2", "files": {"b.txt": "two\n"}}));
    t.steps_stdin(&["apply", "-"], &s2).ok();
    assert_eq!(caches(), 1, "a plain run publishes at every step here");
    let cache = server.git(&["for-each-ref", "--format=%(refname)", "refs/steps/cache/"]);
    server.git(&["update-ref", "-d", cache.trim()]);
    human_commit(&t, "a.txt", "one\nby hand\n", "hand fix");
    t.steps(&["adopt", "--yes"]).ok();
    // Each apply its own process: the first after the adopt scans the log,
    // the later ones start from this box's receipt index, which must still
    // know that the run holds an adopted commit.
    for k in 3..=5 {
        let step = line(json!({"id": format!("s{k}"), "files": {format!("f{k}.txt"): "x\n"}}));
        t.steps_stdin(&["apply", "-"], &step).ok();
        assert_eq!(caches(), 0, "s{k}: no cache for a run with adopted commits");
    }
    assert_eq!(server.step_ids().len(), 6);
    // The human's change still counts, read from the receipt index.
    let again = line(
        json!({"id": "s6", "patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,3 @@\n one\n by hand\n+by hand\n"}),
    );
    t.steps_stdin(&["apply", "-"], &again)
        .code_is(3)
        .stderr_has("(adopted)");
}

/// Issue 28 item 5: a person resolves a diverged run with `git pull` (a
/// merge whose second parent holds s5..s7). Adopting the merge hid those
/// receipts from the first-parent ledger, and `apply` landed s6 and s7
/// again while `verify` said ok. Now `adopt` refuses the merge naming the
/// receipts it would hide, and `verify` finds them behind an adoption an
/// older git-steps wrote.
#[test]
fn a_merge_that_would_hide_receipts_is_not_adopted_and_verify_finds_them() {
    let (a, server) = TestRepo::with_server(Kind::Path, "libgit2");
    let steps: Vec<String> = (1..=7)
        .map(|i| {
            line(json!({"id": format!("s{i}"), "files": {format!("f{i}.txt"): format!("{i}\n")}}))
        })
        .collect();
    let plan = a.plan("plan.jsonl", &steps);
    let p = plan.to_str().unwrap();
    a.steps_stdin(&["apply", "-"], &steps[..4].join("\n")).ok();
    // Box b takes the run on to s7.
    let b = a.sibling("b", Some(server.url()));
    let run = a.git_out(&["config", "steps.run"]);
    b.steps(&[
        "init", "--remote", "origin", "--branch", "main", "--run", &run,
    ])
    .ok();
    b.steps_stdin(&["apply", "-"], &steps.join("\n")).ok();
    // Meanwhile a person on box a commits by hand, then pulls.
    human_commit(&a, "notes.txt", "by hand\n", "a note");
    a.git(&[
        "pull",
        "-q",
        "--no-rebase",
        "--no-edit",
        server.url(),
        "main",
    ])
    .ok();
    let merge = a.git_out(&["rev-parse", "HEAD"]);
    assert_eq!(
        a.git_out(&["rev-list", "--parents", "-n1", "HEAD"])
            .split(' ')
            .count(),
        3
    );
    let r = a.refuses(
        "adopt the merge",
        3,
        &["s5", "s6", "s7", &merge[..12]],
        || a.steps(&["adopt", "--yes"]),
    );
    assert!(r.stderr().contains("git reset --keep"), "{}", r.explain());
    a.refuses("adopt --dry-run", 3, &["s5"], || {
        a.steps(&["adopt", "--dry-run"])
    });
    // What an older git-steps wrote: the merge adopted.
    let index = 5;
    let msg = format!(
        "step adopt:x: adopt 2 commits\n\nStep-Id: adopt:x\nStep-Run: {run}\nStep-Decision: sha256:{z}\nStep-Index: {index}\nStep-Adopt: {hand}\nStep-Adopt: {merge}\nStep-Source: adopt\n",
        z = "0".repeat(64),
        hand = a.git_out(&["rev-parse", "HEAD^1"]),
    );
    a.git(&["commit", "-q", "--allow-empty", "-m", &msg]).ok();
    let v = a.steps(&["verify"]);
    assert_eq!(v.code(), Some(3), "{}", v.explain());
    for id in ["s5", "s6", "s7"] {
        let said = format!("other parent holds step {id}'s receipt");
        assert!(
            v.stdout().contains(&said) || v.stderr().contains(&said),
            "{id}: {}",
            v.explain()
        );
    }
    // Nor does `apply` of the whole plan land s5..s7 a second time.
    let r = a.steps(&["apply", p]);
    assert_eq!(r.code(), Some(3), "{}", r.explain());
    // And it says what works (not `adopt --yes`, which refuses the merge).
    assert!(r.stderr().contains("keep one side"), "{}", r.explain());
    assert!(!r.stderr().contains("adopt --yes"), "{}", r.explain());
    assert_eq!(
        server
            .git(&[
                "log",
                "--format=%(trailers:key=Step-Id,valueonly,separator=)",
                "main"
            ])
            .split_whitespace()
            .filter(|id| *id == "s6")
            .count(),
        1
    );
}
