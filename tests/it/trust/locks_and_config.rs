//! Locks and config: a lock another writer holds, on the remote or in the
//! box's own repository, is waited for or reported, never removed; a lock a
//! killed run left is cleared; `init` writes a run's settings all or
//! nothing and keeps the config private and effective.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};

use crate::harness::*;
use crate::servers::{Kind, Server};

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
    // Kill inits at random instants until 20 kills have landed mid-init.
    // The window is one init's time, measured once; on a loaded machine
    // that can be far off, so it shrinks whenever an init finished before
    // its kill (a kill that lands is what the test is about; one that does
    // not tests nothing).
    let (mut killed, mut attempts, mut window) = (0, 0, span);
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    while killed < 20 {
        attempts += 1;
        assert!(
            attempts <= 400,
            "only {killed} of {attempts} kills landed mid-init"
        );
        t.steps(&[
            "init", "--branch", "old", "--run", "old-run", "--remote", "",
        ])
        .ok();
        assert_eq!(settings(&t), old);
        let mut child = t.spawn_steps(&args);
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(std::time::Duration::from_micros(seed % (window + 1)));
        let _ = child.kill();
        if child.wait().unwrap().code().is_none() {
            killed += 1;
        } else {
            window = window * 3 / 4 + 1;
        }
        let now = settings(&t);
        assert!(now == old || now == new, "a killed init left:\n{now}");
        t.steps(&args).ok();
        assert_eq!(settings(&t), new);
        assert!(!t.path(".git/config.lock").exists());
    }

    // Someone else's config.lock is never removed: init says so and stops.
    t.steps(&args).ok();
    std::fs::write(t.path(".git/config.lock"), "another writer\n").unwrap();
    t.steps(&["init", "--branch", "other", "--run", "other"])
        .code_is(4)
        .stderr_has("config.lock exists");
    assert_eq!(
        std::fs::read_to_string(t.path(".git/config.lock")).unwrap(),
        "another writer\n"
    );
    assert_eq!(settings(&t), new);
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
    wait_for(&lock, "the user's git's index.lock");
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

/// One mapping of a local ref that would not move: the run's branch
/// locked by another writer is that writer's (exit 4, the lock named,
/// git's advice on a lock), with nothing of the step written; the same
/// for a side ref (the effects' outcomes); once the lock is gone the same
/// command finishes.
#[test]
fn a_local_ref_another_writer_holds_is_busy_and_names_its_lock() {
    let t = TestRepo::new();
    let s1 = line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}}));
    let s2 = line(serde_json::json!({"id": "s2", "files": {"f": "2\n"}}));
    let plan = format!("{s1}\n{s2}\n");
    t.steps_stdin(&["apply", "-"], &s1).ok();
    let head = t.head();
    let lock = t.path(".git/refs/heads/main.lock");
    std::fs::write(&lock, "held by another writer\n").unwrap();
    let r = t
        .steps_stdin(&["--json", "apply", "-"], &plan)
        .code_is(4)
        .stderr_has("main.lock exists")
        .stderr_has("remove the lock file named above");
    assert_eq!(r.json()["data"]["kind"], "busy", "{}", r.explain());
    // A runner reads that the same command is the way on once the lock is
    // gone, not at once (a lock no live process holds stays), without
    // reading the words.
    assert_eq!(r.json()["data"]["rerun"], "after", "{}", r.explain());
    assert_eq!(t.head(), head, "the step moved the branch: {}", r.explain());
    assert_eq!(t.step_ids(), ["s1"]);
    assert_eq!(
        std::fs::read_to_string(&lock).unwrap(),
        "held by another writer\n",
        "the other writer's lock was touched"
    );
    std::fs::remove_file(&lock).unwrap();
    t.steps_stdin(&["apply", "-"], &plan).ok();
    assert_eq!(t.step_ids(), ["s1", "s2"]);
    assert_eq!(t.read("f"), "2\n");

    // A side ref: the kept run (`git steps archive`).
    let kept = t.path(".git/refs/steps/runs/main.lock");
    std::fs::create_dir_all(kept.parent().unwrap()).unwrap();
    std::fs::write(&kept, "held\n").unwrap();
    let r = t
        .steps(&["--json", "archive"])
        .code_is(4)
        .stderr_has("refs/steps/runs/main is locked by another process");
    assert_eq!(r.json()["data"]["kind"], "busy", "{}", r.explain());
    assert!(
        t.git(&["rev-parse", "-q", "--verify", "refs/steps/runs/main"])
            .code()
            != Some(0)
    );
    std::fs::remove_file(&kept).unwrap();
    t.steps(&["archive"]).ok();
    t.git(&["rev-parse", "-q", "--verify", "refs/steps/runs/main"])
        .ok();
}

/// A repair touches only what git-steps can prove it wrote. A worktree
/// file a killed step was removing sits in `.git/steps-tmp/` under
/// `.git-steps-gone-<pid>`: its content was the user's worktree's (their
/// edit, if they made one meanwhile), so the next run keeps it in
/// `.git/steps/kept/` and says where; a staged copy of git-steps' own
/// there is removed, as before.
#[test]
fn a_file_a_killed_removal_moved_aside_is_kept_not_deleted() {
    let t = TestRepo::new();
    let s1 = line(serde_json::json!({"id": "s1", "files": {"f.txt": "1\n"}}));
    let s2 = line(serde_json::json!({"id": "s2", "files": {"g.txt": "2\n"}}));
    t.steps_stdin(&["apply", "-"], &s1).ok();
    // What a kill between the move aside and the delete leaves.
    t.write(".git/steps-tmp/.git-steps-gone-4242", "my edit\n");
    t.write(".git/steps-tmp/.git-steps-Ab12Cd", "a staged copy\n");
    let r = t.steps_stdin(&["apply", "-"], &format!("{s1}\n{s2}")).ok();
    assert!(
        !t.path(".git/steps-tmp/.git-steps-gone-4242").exists(),
        "{}",
        r.explain()
    );
    assert!(!t.path(".git/steps-tmp/.git-steps-Ab12Cd").exists());
    let kept: Vec<_> = std::fs::read_dir(t.path(".git/steps/kept"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(std::fs::read_to_string(&kept[0]).unwrap(), "my edit\n");
    let name = kept[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with(".git-steps-gone-4242."), "{name}");
    assert!(
        r.stderr().contains(&format!("kept {}", kept[0].display())) || r.stderr().contains(&name),
        "{}",
        r.explain()
    );
    assert!(
        r.stderr().contains("your edit, if you made one meanwhile"),
        "{}",
        r.explain()
    );
    assert!(
        r.stderr()
            .contains(".git-steps-Ab12Cd, left by a git-steps"),
        "{}",
        r.explain()
    );
    assert_eq!(t.step_ids(), ["s1", "s2"]);
}
