//! Issue 12: a hostile remote, a careless user and a crash at the wrong
//! moment must not get past the invariant. Each test is named after the
//! promise it keeps and drives the real binary against real repositories.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};

use crate::harness::*;
use crate::servers::{Kind, Server};

/// A user's project on `main`, pushed, and a run of it on the branch
/// `steps` (run id `steps`) with one step applied.
fn project_with_a_run() -> (TestRepo, Server) {
    let (t, server) = TestRepo::with_server(Kind::Path, "libgit2");
    t.write("README", "the user's project\n");
    t.commit_all("base");
    t.git(&["push", "-q", server.url(), "main"]).ok();
    t.steps(&[
        "init",
        "--remote",
        server.url(),
        "--branch",
        "steps",
        "--run",
        "steps",
    ])
    .ok();
    t.steps_stdin(
        &["apply", "-"],
        &line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}})),
    )
    .ok();
    (t, server)
}

/// Another writer on the remote: a live `git update-ref --stdin`
/// transaction that holds `refs/heads/main.lock` until it is told to commit.
struct RefHolder {
    child: Child,
    stdin: ChildStdin,
    out: BufReader<std::process::ChildStdout>,
}

impl RefHolder {
    fn hold(server: &Server, at: &str) -> RefHolder {
        let mut cmd = Command::new("git");
        cmd.arg("-C")
            .arg(&server.bare)
            .args(["update-ref", "--stdin"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        hermetic(&mut cmd, &server.root);
        let mut child = cmd.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        writeln!(stdin, "start\nupdate refs/heads/main {at} {at}\nprepare").unwrap();
        stdin.flush().unwrap();
        let mut l = String::new();
        for want in ["start: ok", "prepare: ok"] {
            l.clear();
            out.read_line(&mut l).unwrap();
            assert_eq!(l.trim(), want);
        }
        assert!(server.bare.join("refs/heads/main.lock").exists());
        RefHolder { child, stdin, out }
    }

    /// Commit the transaction: it succeeds only if its lock is still its own.
    fn commit(mut self) {
        writeln!(self.stdin, "commit").unwrap();
        self.stdin.flush().unwrap();
        let mut l = String::new();
        self.out.read_line(&mut l).unwrap();
        assert_eq!(l.trim(), "commit: ok", "the other writer's transaction");
        drop(self.stdin);
        assert!(self.child.wait().unwrap().success());
    }
}

/// Issue 12, first item and item 6: a branch lock that another writer holds
/// on the remote is contention. git-steps waits for it within a bound, never
/// deletes it, and when it stays held exits 4 naming it (never "the hooks
/// said no"); the other writer's transaction still commits.
#[test]
fn a_branch_lock_another_writer_holds_on_the_remote_is_waited_for_never_deleted() {
    for (kind, transport) in [
        (Kind::Path, "libgit2"),
        (Kind::Daemon, "libgit2"),
        (Kind::Daemon, "git"),
        (Kind::Http, "libgit2"),
    ] {
        let ctx = format!("{kind:?}/{transport}");
        let (t, server) = TestRepo::with_server(kind, transport);
        let s1 = line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}}));
        let s2 = line(serde_json::json!({"id": "s2", "files": {"f": "2\n"}}));
        t.steps_stdin(&["apply", "-"], &s1).ok();
        let at = server.head().unwrap();
        let lock = server.bare.join("refs/heads/main.lock");

        // Held for longer than git-steps waits: exit 4, the lock named, kept.
        let holder = RefHolder::hold(&server, &at);
        // Nothing local moves.
        let r = t.refuses(&ctx, 4, &["locked by another writer"], || {
            t.steps_env_stdin(&["apply", "-"], &[("GIT_STEPS_LOCK_WAIT", "1")], Some(&s2))
        });
        assert!(
            !r.stderr().contains("hooks or permissions"),
            "{ctx}\n{}",
            r.explain()
        );
        assert!(lock.exists(), "{ctx}: the other writer's lock was deleted");
        assert_eq!(server.head().as_deref(), Some(at.as_str()), "{ctx}");
        holder.commit();

        // Held for a moment: waited for, then the step lands once.
        let holder = RefHolder::hold(&server, &at);
        let release = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(700));
            holder.commit();
        });
        t.steps_env_stdin(&["apply", "-"], &[("GIT_STEPS_LOCK_WAIT", "20")], Some(&s2))
            .ok();
        release.join().unwrap();
        assert_eq!(server.step_ids(), ["s1", "s2"], "{ctx}");
        assert_eq!(t.head(), server.head(), "{ctx}");
    }
}

/// `git` in `t` with `input` on stdin; its trimmed stdout.
fn git_in(t: &TestRepo, args: &[&str], input: &str) -> String {
    let mut cmd = Command::new("git");
    cmd.args(args).current_dir(&t.work);
    hermetic(&mut cmd, &t.home());
    let r = t.run_cmd(
        cmd,
        format!("git {}", args.join(" ")),
        Some(input.as_bytes()),
    );
    assert!(r.out.status.success(), "{}", r.explain());
    r.stdout().trim().to_string()
}

/// An attacker who can push to the run branch: a commit on top of `parent`
/// whose tree is `parent`'s plus `entries` (`ls-tree` lines, written with
/// `git mktree`, which checks no names), with a well-formed receipt of run
/// `run`, pushed to the remote. Returns the commit id.
fn push_hostile(
    attacker: &TestRepo,
    branch: &str,
    run: &str,
    id: &str,
    entries: &[String],
) -> String {
    attacker.git(&["fetch", "-q", "origin"]).ok();
    let parent = attacker.git_out(&["rev-parse", &format!("origin/{branch}")]);
    let mut listing = attacker.git_out(&["ls-tree", &parent]);
    for e in entries {
        listing.push('\n');
        listing.push_str(e);
    }
    listing.push('\n');
    let tree = git_in(attacker, &["mktree"], &listing);
    let msg = format!(
        "step {id}: harmless, honest\n\nStep-Id: {id}\nStep-Run: {run}\nStep-Decision: sha256:{}\n",
        "0".repeat(64)
    );
    let commit = git_in(
        attacker,
        &["commit-tree", &tree, "-p", &parent, "-F", "-"],
        &msg,
    );
    attacker
        .git(&[
            "push",
            "-q",
            "origin",
            &format!("{commit}:refs/heads/{branch}"),
        ])
        .ok();
    commit
}

fn blob(t: &TestRepo, content: &str) -> String {
    git_in(t, &["hash-object", "-w", "--stdin"], content)
}

fn tree_of(t: &TestRepo, listing: &str) -> String {
    git_in(t, &["mktree"], &format!("{listing}\n"))
}

/// Issue 12 item 1: a tree from the remote is checked before one byte of
/// it reaches the worktree, on a fresh box (the switch to the run branch)
/// and on a box behind the remote (the fast-forward): a `.git` entry, a
/// `..` entry, a case-folded `.GIT`, and a symlink out are each refused
/// with exit 3 naming the commit and the entry, and nothing is written.
#[test]
fn a_hostile_tree_on_the_remote_never_reaches_the_worktree() {
    // The user's branch `main` on the remote; the run lives on `steps`.
    let (t, server) = project_with_a_run();
    let s1 = line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}}));
    let attacker = t.sibling("attacker", Some(server.url()));
    let hook = blob(&attacker, "#!/bin/sh\ntouch /tmp/pwned\n");
    let hooks = tree_of(&attacker, &format!("100755 blob {hook}\tpost-commit"));
    let dotgit = tree_of(&attacker, &format!("040000 tree {hooks}\thooks"));
    let escaped = tree_of(&attacker, &format!("100644 blob {hook}\tescaped.txt"));
    let cases: Vec<(&str, Vec<String>, &str)> = vec![
        (
            ".git/hooks",
            vec![format!("040000 tree {dotgit}\t.git")],
            ".git",
        ),
        (
            ".GIT/hooks",
            vec![format!("040000 tree {dotgit}\t.GIT")],
            ".GIT",
        ),
        (
            "sub/.git/hooks",
            vec![format!(
                "040000 tree {}\tsub",
                tree_of(&attacker, &format!("040000 tree {dotgit}\t.git"))
            )],
            "sub/.git",
        ),
        ("..", vec![format!("040000 tree {escaped}\t..")], ".."),
        (
            "symlink out",
            vec![format!(
                "120000 blob {}\tetc",
                blob(&attacker, "../../../../etc")
            )],
            "etc",
        ),
        (
            "a chain of symlinks out",
            vec![
                format!("120000 blob {}\tdot", blob(&attacker, ".")),
                format!("120000 blob {}\tup", blob(&attacker, "dot/..")),
            ],
            "up",
        ),
    ];
    let base = server.git(&["rev-parse", "steps"]);
    for (name, entries, entry) in cases {
        // Reset the remote to the honest head, then push the hostile commit.
        server.git(&["update-ref", "refs/heads/steps", base.trim()]);
        let bad = push_hostile(&attacker, "steps", "steps", "evil", &entries);

        // A box behind the remote: the fast-forward is refused.
        t.refuses(name, 3, &[&bad, entry, "nothing was written"], || {
            t.steps_stdin(&["apply", "-"], &s1)
        });

        // A fresh box: the clone is on `main`; the switch to `steps` is refused.
        let fresh = t.sibling(
            &format!("fresh-{}", name.replace(['/', ' ', '.'], "_")),
            Some(server.url()),
        );
        fresh
            .steps(&[
                "init", "--remote", "origin", "--branch", "steps", "--run", "steps",
            ])
            .ok();
        fresh.refuses(&format!("{name} (fresh box)"), 3, &[&bad], || {
            fresh.steps_stdin(&["apply", "-"], &s1)
        });
        assert_eq!(fresh.git_out(&["branch", "--show-current"]), "main");
        for b in [&t, &fresh] {
            assert!(
                !b.path(".git/hooks/post-commit").exists(),
                "{name}: hook planted"
            );
            assert!(
                !b.path(".GIT").exists() && !b.path("sub").exists(),
                "{name}"
            );
            assert!(!b.path("etc").exists() && !b.path("up").exists(), "{name}");
        }
        assert!(
            !t.tmp.path().join("escaped.txt").exists(),
            "{name}: wrote outside"
        );
        // git itself refuses such a tree, too.
        if entry != "etc" && entry != "up" {
            let r = fresh.git(&["switch", "-q", "steps"]);
            assert_ne!(r.code(), Some(0), "{name}: git switched\n{}", r.explain());
        }
    }
}

/// Issue 12 item 2: symlink containment is resolved, not counted: a chain
/// `dot -> .`, `up1 -> dot/..`, … that reads as inside but leads to the
/// host's files is refused, in one step or built up over several, and a
/// link a later step makes escape (by replacing what it goes through) too.
#[test]
fn a_chain_of_symlinks_cannot_reach_outside_the_repository() {
    let t = TestRepo::new();
    let link = |path: &str, target: &str| {
        format!("diff --git a/{path} b/{path}\nnew file mode 120000\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n")
    };
    let patch_step = |id: &str, patch: String| line(serde_json::json!({"id": id, "patch": patch}));
    let mut chain = link("dot", ".");
    chain += &link("up1", "dot/..");
    chain += &link("up2", "up1/..");
    chain += &link("passwd", "up2/etc/passwd");
    t.refuses("", 1, &["step c", "outside the repository"], || {
        t.steps_stdin(
            &["apply", "-"],
            &line(serde_json::json!({"id": "c", "patch": chain})),
        )
    });
    // Over several steps: each link alone reads as inside.
    t.steps_stdin(&["apply", "-"], &patch_step("d", link("dot", ".")))
        .ok();
    t.refuses("", 1, &["through the symlink(s) dot"], || {
        t.steps_stdin(&["apply", "-"], &patch_step("u", link("up1", "dot/..")))
    });
    // A link that is inside now, made to escape by a later link it goes through.
    t.steps_stdin(
        &["apply", "-"],
        &line(serde_json::json!({"id": "m", "files": {"sub/deep/x": "x\n"}})),
    )
    .ok();
    t.steps_stdin(&["apply", "-"], &patch_step("v", link("via", "hop/..")))
        .ok();
    t.refuses("", 1, &["the symlink via"], || {
        t.steps_stdin(&["apply", "-"], &patch_step("h", link("hop", "dot")))
    });
    // Links that stay inside, through each other, are fine.
    t.steps_stdin(
        &["apply", "-"],
        &patch_step("ok", link("in", "dot/sub/deep/x")),
    )
    .ok();
    assert_eq!(t.read("in"), "x\n");
}

/// Issue 12 item 3: the fast-forward and the switch to the run branch
/// never overwrite an untracked file; they are refused (exit 3) as a step
/// in the same place is, and the file keeps its content.
#[test]
fn an_untracked_file_is_never_overwritten_by_a_fast_forward_or_a_switch() {
    let (t, server) = project_with_a_run();
    let s1 = line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}}));
    let s2 = line(serde_json::json!({"id": "s2", "files": {"notes.txt": "the step's notes\n"}}));
    let both = format!("{s1}\n{s2}\n");
    // Another box of the same run applies s2, which creates notes.txt.
    let other = t.sibling("other", Some(server.url()));
    other
        .steps(&[
            "init", "--remote", "origin", "--branch", "steps", "--run", "steps",
        ])
        .ok();
    other.steps_stdin(&["apply", "-"], &both).ok();
    // This box, behind, has an untracked notes.txt of its own.
    t.write("notes.txt", "my own notes\n");
    t.refuses("", 3, &["notes.txt"], || {
        t.steps_stdin(&["apply", "-"], &both)
    });
    assert_eq!(t.read("notes.txt"), "my own notes\n");
    // A fresh box on `main` with its own notes.txt: the switch is refused.
    let fresh = t.sibling("fresh", Some(server.url()));
    fresh.write("notes.txt", "fresh notes\n");
    fresh
        .steps(&[
            "init", "--remote", "origin", "--branch", "steps", "--run", "steps",
        ])
        .ok();
    fresh.refuses("fresh box", 3, &["notes.txt"], || {
        fresh.steps_stdin(&["apply", "-"], &both)
    });
    assert_eq!(fresh.read("notes.txt"), "fresh notes\n");
    assert_eq!(fresh.git_out(&["branch", "--show-current"]), "main");
    // Moved out of the way, both finish.
    for b in [&t, &fresh] {
        std::fs::remove_file(b.path("notes.txt")).unwrap();
        b.steps_stdin(&["apply", "-"], &both).ok();
        assert_eq!(b.read("notes.txt"), "the step's notes\n");
        assert_eq!(
            b.head().unwrap(),
            server.git(&["rev-parse", "steps"]).trim()
        );
    }
}

/// Issue 12 item 5: plan and history must agree both ways. A plan edited
/// mid-run (`[s1, s3]` resumed after `s1, s2`) is refused naming the step
/// and the receipt, and `verify` of it reports the same; runners with
/// different plans on one run are refused after the first; the whole plan,
/// the plan from a later step on, one step at a time and an old step
/// redelivered alone all still work.
#[test]
fn the_plan_and_the_history_agree_both_ways() {
    let t = TestRepo::new();
    let s = |id: &str| {
        line(serde_json::json!({"id": id, "files": {format!("{id}.txt"): format!("{id}\n")}}))
    };
    let plan = t.plan("plan.jsonl", &[s("s1"), s("s2"), s("s3")]);
    // Crashed before s3.
    t.steps_env(
        &["apply", plan.to_str().unwrap()],
        &[("GIT_STEPS_CRASH", "before-write@s3")],
    );
    assert_eq!(t.step_ids(), ["s1", "s2"]);
    let s2_commit = t.git_out(&["rev-parse", "--short=12", "HEAD"]);
    let edited = t.plan("edited.jsonl", &[s("s1"), s("s3")]);
    let r = t.refuses("", 3, &["step s3", "step s2", &s2_commit], || {
        t.steps(&["--json", "apply", edited.to_str().unwrap()])
    });
    assert_eq!(r.json()["data"]["kind"], "plan-mismatch", "{}", r.explain());
    let v = t.steps(&["verify", edited.to_str().unwrap()]).code_is(3);
    assert!(
        v.stdout().contains("step s2") || v.stderr().contains("step s2"),
        "{}",
        v.explain()
    );
    t.steps(&["verify", plan.to_str().unwrap()]).ok();
    // The real plan finishes the run; then one step at a time continues it,
    // and an old step redelivered alone is skipped.
    t.steps(&["apply", plan.to_str().unwrap()]).ok();
    t.steps_stdin(&["apply", "-"], &s("s4")).ok();
    t.steps_stdin(&["apply", "-"], &s("s2")).ok();
    t.steps_stdin(&["apply", "-"], &format!("{}\n{}\n", s("s4"), s("s5")))
        .ok();
    assert_eq!(t.step_ids(), ["s1", "s2", "s3", "s4", "s5"]);
    t.steps(&["verify"]).ok();
    // A step both out of place and with another decision: the decision is
    // what is reported first.
    let other = line(serde_json::json!({"id": "s3", "files": {"s3.txt": "other\n"}}));
    let r = t
        .steps_stdin(
            &["--json", "apply", "-"],
            &format!("{}\n{other}\n", s("s1")),
        )
        .code_is(3);
    assert_eq!(
        r.json()["data"]["kind"],
        "digest-mismatch",
        "{}",
        r.explain()
    );

    // Three runners, three plans, one run: the first continues it, the
    // others are refused once their plans would interleave.
    let u = TestRepo::new();
    let plans: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|p| {
            let lines: Vec<String> = (1..=3).map(|i| s(&format!("{p}{i}"))).collect();
            u.plan(&format!("{p}.jsonl"), &lines)
        })
        .collect();
    u.steps(&["apply", plans[0].to_str().unwrap()]).ok();
    for p in &plans[1..] {
        // Each is a continuation the first time (it holds no receipt)...
        u.steps(&["apply", p.to_str().unwrap()]).ok();
    }
    assert_eq!(u.step_ids().len(), 9);
    // ...but none of them can go on once another plan's steps follow its own.
    for p in ["a", "b"] {
        let lines: Vec<String> = (1..=4).map(|i| s(&format!("{p}{i}"))).collect();
        let extended = u.plan(&format!("{p}-extended.jsonl"), &lines);
        u.refuses(
            p,
            3,
            &["a receipt the plan does not hold at that position"],
            || u.steps(&["apply", extended.to_str().unwrap()]),
        );
    }
}

/// Issue 12 item 4: a step that changes a path's type (file <-> directory
/// <-> symlink, nested) resumes after a crash at any point: the crash
/// matrix over fixtures/type-changes.jsonl is all SAME.
#[test]
fn a_crash_in_a_step_that_changes_a_paths_type_resumes() {
    let t = TestRepo::new();
    let plan = fixture("type-changes.jsonl");
    for runner in ["git-steps", "run"] {
        let r = t
            .steps(&[
                "--json",
                "crashtest",
                "--runner",
                runner,
                plan.to_str().unwrap(),
            ])
            .ok();
        let doc = r.json();
        let rows = doc["data"]["rows"].as_array().unwrap();
        assert!(rows.len() > 200, "{runner}: {} rows", rows.len());
        assert_eq!(
            doc["data"]["summary"]["same"],
            rows.len(),
            "{runner}: {}",
            r.stdout()
        );
    }
}

/// Issue 12 item 10: git's own diff of a file replaced by a symlink (a
/// deletion and an addition of one path) applies, as `git apply` takes it;
/// a path changed twice otherwise is still refused.
#[test]
fn gits_diff_of_a_file_replaced_by_a_symlink_applies() {
    let t = TestRepo::new();
    t.steps_stdin(
        &["apply", "-"],
        &line(serde_json::json!({"id": "f", "files": {"d": "a file\n", "t": "target\n"}})),
    )
    .ok();
    let swap = "diff --git a/d b/d\ndeleted file mode 100644\nindex 0000000..0000000\n--- a/d\n+++ /dev/null\n@@ -1 +0,0 @@\n-a file\ndiff --git a/d b/d\nnew file mode 120000\n--- /dev/null\n+++ b/d\n@@ -0,0 +1 @@\n+t\n\\ No newline at end of file\n";
    t.steps_stdin(
        &["apply", "-"],
        &line(serde_json::json!({"id": "l", "patch": swap})),
    )
    .ok();
    assert_eq!(std::fs::read_link(t.path("d")).unwrap().to_str(), Some("t"));
    assert_eq!(
        t.git_out(&["ls-tree", "HEAD", "d"]).split(' ').next(),
        Some("120000")
    );
    let twice =
        "--- a/t\n+++ b/t\n@@ -1 +1 @@\n-target\n+one\n--- a/t\n+++ b/t\n@@ -1 +1 @@\n-one\n+two\n";
    t.steps_stdin(
        &["apply", "-"],
        &line(serde_json::json!({"id": "x", "patch": twice})),
    )
    .code_is(1)
    .stderr_has("changed twice");
}

/// Issue 12 item 7: `init` writes all of a run's settings in one
/// replacement of the config file. Killed at any instant, it leaves the old
/// settings or the new ones, never some of each; the rerun finishes (a
/// `config.lock` it left is its own and is cleared), and anyone else's
/// `config.lock` is reported, never removed.
#[test]
fn init_is_all_or_nothing() {
    let t = TestRepo::new();
    let bare = t.tmp.path().join("remote.git");
    t.git(&["init", "-q", "--bare", bare.to_str().unwrap()])
        .ok();
    t.steps(&["init", "--branch", "old", "--run", "old-run"])
        .ok();
    let settings = |t: &TestRepo| {
        let r = t.git(&["config", "--get-regexp", "^steps\\."]);
        let mut lines: Vec<String> = r.stdout().lines().map(str::to_string).collect();
        lines.sort();
        lines.join("\n")
    };
    let old = settings(&t);
    let args = [
        "init",
        "--remote",
        bare.to_str().unwrap(),
        "--branch",
        "new",
        "--run",
        "new-run",
    ];
    let start = std::time::Instant::now();
    t.steps(&args).ok();
    let span = start.elapsed().as_micros() as u64;
    let new = settings(&t);
    assert!(
        new.contains("steps.run new-run") && new.contains("steps.remote"),
        "{new}"
    );
    let (mut killed, mut seed) = (0, 0x2545_f491_4f6c_dd1d_u64);
    for _ in 0..60 {
        t.steps(&[
            "init", "--branch", "old", "--run", "old-run", "--remote", "",
        ])
        .ok();
        assert_eq!(settings(&t), old);
        let mut child = t.spawn_steps(&args);
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(std::time::Duration::from_micros(seed % (span + 1)));
        let _ = child.kill();
        if child.wait().unwrap().code().is_none() {
            killed += 1;
        }
        let now = settings(&t);
        assert!(now == old || now == new, "a killed init left:\n{now}");
        t.steps(&args).ok();
        assert_eq!(settings(&t), new);
        assert!(!t.path(".git/config.lock").exists());
    }
    assert!(killed > 10, "only {killed} of 60 kills landed mid-init");

    // Someone else's config.lock is never removed: init says so and stops.
    t.steps(&args).ok();
    std::fs::write(t.path(".git/config.lock"), "another writer\n").unwrap();
    t.steps(&["init", "--branch", "other", "--run", "other"])
        .code_is(1)
        .stderr_has("config.lock exists");
    assert_eq!(
        std::fs::read_to_string(t.path(".git/config.lock")).unwrap(),
        "another writer\n"
    );
    assert_eq!(settings(&t), new);
}

/// Issue 12 item 11: the refusal of a hand-made commit inside the run only
/// gives hints that work. Followed word for word: the commit that is only
/// on this box goes to a side branch and the run goes on; one the remote
/// holds leads to a new run from here, which goes on.
#[test]
fn the_hints_for_a_hand_commit_in_the_run_work_when_followed() {
    let (t, server) = TestRepo::with_server(Kind::Path, "libgit2");
    let s = |id: &str, v: &str| line(serde_json::json!({"id": id, "files": {"f": v}}));
    t.steps_stdin(&["apply", "-"], &s("s1", "1\n")).ok();
    t.write("hand.txt", "a fix by hand\n");
    t.commit_all("hand fix");
    let hand = t.git_out(&["rev-parse", "--short=12", "HEAD"]);
    let r = t.steps_stdin(&["apply", "-"], &s("s2", "2\n")).code_is(3);
    let err = r.stderr();
    assert!(!err.contains("revert them with a step"), "{err}");
    let cmd = format!("git branch keep-{hand} {hand} && git reset --keep {hand}^");
    assert!(err.contains(&cmd), "lacks {cmd:?}\n{err}");
    for c in [
        vec!["branch".to_string(), format!("keep-{hand}"), hand.clone()],
        vec![
            "reset".to_string(),
            "--keep".to_string(),
            format!("{hand}^"),
        ],
    ] {
        t.git(&c.iter().map(String::as_str).collect::<Vec<_>>())
            .ok();
    }
    t.steps_stdin(&["apply", "-"], &s("s2", "2\n")).ok();
    assert_eq!(server.step_ids(), ["s1", "s2"]);
    assert!(t
        .git_out(&["log", "--format=%s", &format!("keep-{hand}")])
        .contains("hand fix"));

    // The same commit pushed to the durable branch by hand: a new run.
    t.write("hand.txt", "pushed by hand\n");
    t.commit_all("hand fix, pushed");
    t.git(&["push", "-q", server.url(), "main"]).ok();
    let r = t.steps_stdin(&["apply", "-"], &s("s3", "3\n")).code_is(3);
    assert!(
        r.stderr()
            .contains("git steps init --branch <new branch> --run <new id>"),
        "{}",
        r.explain()
    );
    t.steps(&[
        "init",
        "--remote",
        server.url(),
        "--branch",
        "run-2",
        "--run",
        "run-2",
    ])
    .ok();
    t.steps_stdin(&["apply", "-"], &s("s3", "3\n")).ok();
    assert_eq!(t.read("f"), "3\n");
    assert_eq!(t.read("hand.txt"), "pushed by hand\n");
    assert_eq!(
        t.git_out(&[
            "log",
            "-1",
            "--format=%(trailers:key=Step-Id,valueonly)",
            "run-2"
        ]),
        "s3"
    );
}

/// Found attacking the fixes: a link that resolves inside while the path it
/// goes through is a deep link leaves the repository once that link is
/// replaced by a directory. Refused from the remote (exit 3) and from a
/// step (exit 1), though no link is added.
#[test]
fn replacing_a_link_by_a_directory_cannot_make_another_link_escape() {
    let (t, server) = TestRepo::with_server(Kind::Path, "libgit2");
    t.steps(&[
        "init",
        "--remote",
        server.url(),
        "--branch",
        "steps",
        "--run",
        "steps",
    ])
    .ok();
    let deep = "a/b/c/d/e/f/g/h/i/j";
    let up = format!("x/{}etc", "../".repeat(10));
    // The links arrive from the remote: they resolve inside, so they pass.
    t.steps_stdin(
        &["apply", "-"],
        &line(serde_json::json!({"id": "s1", "files": {"a/b/c/d/e/f/g/h/i/j/k": "k\n"}})),
    )
    .ok();
    let attacker = t.sibling("attacker", Some(server.url()));
    let pushed = |entries: &[String], drop: &str, id: &str| {
        attacker.git(&["fetch", "-q", "origin"]).ok();
        let parent = attacker.git_out(&["rev-parse", "origin/steps"]);
        let mut listing: String = attacker
            .git_out(&["ls-tree", &parent])
            .lines()
            .filter(|l| !l.ends_with(&format!("\t{drop}")))
            .map(|l| format!("{l}\n"))
            .collect();
        for e in entries {
            listing.push_str(e);
            listing.push('\n');
        }
        let tree = git_in(&attacker, &["mktree"], &listing);
        let msg = format!(
            "step {id}: x\n\nStep-Id: {id}\nStep-Run: steps\nStep-Decision: sha256:{}\n",
            "0".repeat(64)
        );
        let c = git_in(
            &attacker,
            &["commit-tree", &tree, "-p", &parent, "-F", "-"],
            &msg,
        );
        attacker
            .git(&["push", "-q", "origin", &format!("{c}:refs/heads/steps")])
            .ok();
    };
    pushed(
        &[
            format!("120000 blob {}\tx", blob(&attacker, deep)),
            format!("120000 blob {}\tl", blob(&attacker, &up)),
        ],
        "-",
        "s2",
    );
    t.steps(&["resume"]).ok();
    assert!(std::fs::symlink_metadata(t.path("l"))
        .unwrap()
        .file_type()
        .is_symlink());
    // A step: x becomes a directory.
    t.refuses("from a step", 1, &["the symlink l"], || {
        t.steps_stdin(
            &["apply", "-"],
            &line(serde_json::json!({"id": "s3", "files": {"x": null, "x/k": "k\n"}})),
        )
    });
    // The remote: the same change, pushed by someone else.
    let x = tree_of(
        &attacker,
        &format!("100644 blob {}\tk", blob(&attacker, "k\n")),
    );
    pushed(&[format!("040000 tree {x}\tx")], "x", "s3");
    t.refuses("from the remote", 3, &["the symlink l"], || {
        t.steps(&["resume"])
    });
    assert!(std::fs::symlink_metadata(t.path("x"))
        .unwrap()
        .file_type()
        .is_symlink());
}

/// Found attacking the fixes: an empty directory the user left inside a
/// directory that a step or a fast-forward turns into a file does not stop
/// it half-way (git removes empty directories too); a file in it does,
/// before anything moves.
#[test]
fn an_empty_directory_in_the_way_is_removed_a_file_in_it_refuses_first() {
    let (t, server) = TestRepo::with_server(Kind::Path, "libgit2");
    let s1 = line(serde_json::json!({"id": "s1", "files": {"d/f": "f\n"}}));
    let s2 = line(serde_json::json!({"id": "s2", "files": {"d/f": null, "d": "now a file\n"}}));
    t.steps_stdin(&["apply", "-"], &s1).ok();
    // A box of the same run, soon behind the remote.
    let other = t.sibling("other", None);
    other.steps(&["init", "--remote", server.url()]).ok();
    let plan = format!("{s1}\n{s2}\n");
    other.steps_stdin(&["apply", "-"], &s1).ok();
    std::fs::create_dir_all(t.path("d/empty/deeper")).unwrap();
    t.steps_stdin(&["apply", "-"], &s2).ok();
    assert_eq!(t.read("d"), "now a file\n");
    // Behind, with an empty directory and a file in it.
    std::fs::create_dir_all(other.path("d/empty")).unwrap();
    std::fs::write(other.path("d/empty/mine.txt"), "mine\n").unwrap();
    other.refuses("", 3, &["d/empty/mine.txt"], || {
        other.steps_stdin(&["apply", "-"], &plan)
    });
    std::fs::remove_file(other.path("d/empty/mine.txt")).unwrap();
    other.steps_stdin(&["apply", "-"], &plan).ok();
    assert_eq!(other.read("d"), "now a file\n");
    assert_eq!(other.head(), server.head());
}

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
    let r = t.steps_stdin(&["apply", "-"], &plan).code_is(1);
    for needle in [
        "step s2 is durable on",
        "updating this box failed",
        "locked",
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

/// Found attacking the fixes: a lock a live `git` holds in the box's own
/// repository (here the index, held by `git update-index --index-info`
/// waiting for its input) is never removed; a lock that a git-steps killed
/// inside a write left (named in its `steps-intent`, made after it) is.
#[test]
fn a_live_local_lock_is_never_removed_a_killed_runs_own_lock_is() {
    let t = TestRepo::new();
    let s1 = line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}}));
    t.steps_stdin(&["apply", "-"], &s1).ok();
    let mut cmd = Command::new("git");
    cmd.args(["update-index", "--index-info"])
        .current_dir(&t.work)
        .stdin(Stdio::piped());
    hermetic(&mut cmd, &t.home());
    let mut user = cmd.spawn().unwrap();
    let lock = t.path(".git/index.lock");
    let start = std::time::Instant::now();
    while !lock.exists() && start.elapsed() < std::time::Duration::from_secs(5) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(lock.exists());
    t.steps_stdin(&["apply", "-"], &s1).ok();
    assert!(lock.exists(), "the user's live index.lock was removed");
    drop(user.stdin.take());
    assert!(user.wait().unwrap().success(), "the user's git failed");

    // What a git-steps killed inside a ref update leaves: the ref's lock,
    // named in its intent. The next run clears it, and only it.
    let intent = t.path(".git/steps-intent");
    let own = t.path(".git/refs/heads/main.lock");
    let other = t.path(".git/refs/heads/other.lock");
    std::fs::write(&intent, format!("{}\n", own.display())).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&own, "half-written\n").unwrap();
    std::fs::write(&other, "someone else's\n").unwrap();
    let s2 = line(serde_json::json!({"id": "s2", "files": {"f": "2\n"}}));
    t.steps_stdin(&["apply", "-"], &format!("{s1}\n{s2}\n"))
        .ok()
        .stderr_has("main.lock");
    assert!(!own.exists());
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "someone else's\n");
    assert_eq!(t.step_ids(), ["s1", "s2"]);
}

/// Found attacking the fixes: init keeps a private config private, refuses
/// (changing nothing) when another config file overrides what it writes,
/// and a `config.lock` a killed init left is cleared by the next run, so
/// the user's own `git config` works again.
#[test]
fn init_keeps_the_config_private_and_effective() {
    use std::os::unix::fs::PermissionsExt;
    let t = TestRepo::new();
    let config = t.path(".git/config");
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    t.git(&["config", "http.extraHeader", "Authorization: Bearer SECRET"])
        .ok();
    t.steps(&["init", "--branch", "b", "--run", "r"]).ok();
    let mode = std::fs::metadata(&config).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "init made the config readable by others");

    // Another file that sets steps.branch and wins over .git/config: an
    // include (libgit2 sees the key twice) and an includeIf for this
    // repository (seen only when the settings are read back).
    let inc = t.tmp.path().join("inc.cfg");
    std::fs::write(&inc, "[steps]\n\tbranch = fromfile\n").unwrap();
    let gitdir = format!("includeIf.gitdir:{}/.path", t.work.display());
    for (key, needle) in [
        ("include.path", "more than once"),
        (gitdir.as_str(), "another config file sets these keys"),
    ] {
        t.git(&["config", key, inc.to_str().unwrap()]).ok();
        let before = std::fs::read(&config).unwrap();
        t.steps(&["init", "--branch", "want", "--run", "want"])
            .code_is(1)
            .stderr_has(needle)
            .stderr_has("git config --show-origin");
        assert_eq!(
            std::fs::read(&config).unwrap(),
            before,
            "{key}: init changed the config"
        );
        t.git(&["config", "--unset", key]).ok();
    }

    // A killed init's own config.lock: the pending file and the lock are one
    // inode. The next run clears it; `git config` works again.
    let pending = t.path(".git/steps-config.pending");
    std::fs::write(&pending, "half\n").unwrap();
    std::fs::hard_link(&pending, t.path(".git/config.lock")).unwrap();
    assert_ne!(t.git(&["config", "user.probe", "x"]).code(), Some(0));
    t.steps_stdin(
        &["apply", "-"],
        &line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}})),
    )
    .ok()
    .stderr_has("config.lock");
    t.git(&["config", "user.probe", "x"]).ok();
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
