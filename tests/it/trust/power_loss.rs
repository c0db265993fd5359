//! Issue 32: `crashtest --power-loss` — resume equivalence after a power
//! cut, from the states strace's record of an uninterrupted run says a cut
//! may leave (ext4 `data=ordered`, and the POSIX worst case that reorders).
//! Short sweeps here (a seeded sample of cut points); the full sweep over
//! every cut point is `scripts/soak.sh`'s.

use crate::harness::*;

/// A sweep's JSON document and exit code (`TestRepo::new()` is an empty
/// repository: every box starts from an empty one).
fn sweep(args: &[&str]) -> (serde_json::Value, Option<i32>) {
    let t = TestRepo::new();
    let mut all = vec!["--json", "crashtest", "--power-loss"];
    all.extend_from_slice(args);
    let r = t.steps(&all);
    let mut doc = r.json();
    if doc["data"]["rows"].is_null() {
        doc["stderr"] = r.stderr().into();
    }
    (doc, r.code())
}

/// What every sweep must show: states under both models and both box
/// modes, each row naming its cut and model, the counts adding up, and no
/// row DIVERGED or REFUSED.
fn all_same(doc: &serde_json::Value, code: Option<i32>) {
    all_same_under(doc, code, &["ext4", "posix"]);
}

/// [`all_same`] for a sweep of `models`.
fn all_same_under(doc: &serde_json::Value, code: Option<i32>, models: &[&str]) {
    let data = &doc["data"];
    let Some(rows) = data["rows"].as_array() else {
        panic!("no rows (exit {code:?}): {doc}");
    };
    let power = &data["power"];
    assert_eq!(
        code,
        Some(0),
        "{}",
        serde_json::to_string_pretty(&data["summary"]).unwrap()
    );
    assert_eq!(data["summary"]["diverged"], 0);
    let bad: Vec<_> = rows.iter().filter(|r| r["verdict"] != "SAME").collect();
    assert!(bad.is_empty(), "{bad:#?}");
    let ops = power["operations"].as_u64().unwrap();
    assert!(
        ops > 100 && power["syncs"].as_u64().unwrap() > 10,
        "{power}"
    );
    let states: u64 = power["states"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[1].as_u64().unwrap())
        .sum();
    assert_eq!(states as usize, rows.len());
    for model in models {
        assert!(rows.iter().any(|r| r["model"] == *model), "no {model} row");
    }
    for b in ["survive", "vanish"] {
        assert!(rows.iter().any(|r| r["box"] == b), "no {b} row");
    }
    for r in rows {
        let op = r["op"].as_u64().unwrap();
        assert!(op <= ops);
        assert_eq!(r["point"], format!("op {op}/{ops}"));
    }
    // Cuts inside the run, not only at its ends.
    let inside = rows
        .iter()
        .filter(|r| r["op"].as_u64().unwrap() < ops && r["step"] != "s1")
        .count();
    assert!(inside > 0);
}

#[test]
fn apply_survives_power_cuts_under_both_models() {
    let plan = fixture("eight-steps.jsonl");
    let (doc, code) = sweep(&[
        "--cuts",
        "16",
        "--states",
        "2",
        "--seed",
        "7",
        plan.to_str().unwrap(),
    ]);
    all_same(&doc, code);
}

#[test]
fn group_commit_survives_power_cuts() {
    let plan = fixture("eight-steps.jsonl");
    let (doc, code) = sweep(&[
        "--batch",
        "3",
        "--cuts",
        "10",
        "--seed",
        "11",
        plan.to_str().unwrap(),
    ]);
    all_same(&doc, code);
}

#[test]
fn the_agent_loop_survives_power_cuts() {
    let plan = fixture("eight-steps.jsonl");
    let (doc, code) = sweep(&[
        "--runner",
        "run",
        "--cuts",
        "10",
        "--seed",
        "3",
        plan.to_str().unwrap(),
    ]);
    all_same(&doc, code);
}

/// Modes, symlinks, a file that becomes a directory: what the record must
/// model beyond bytes (chmod, symlink, rmdir).
#[test]
fn type_changes_survive_power_cuts() {
    let plan = fixture("type-changes.jsonl");
    let (doc, code) = sweep(&["--cuts", "12", "--seed", "5", plan.to_str().unwrap()]);
    all_same(&doc, code);
}

/// Issue 53: a FUSE file system (LazyFS) keeps names at once and drops
/// every byte not fsynced, and never sees a syncfs. There git-steps
/// flushes file by file, and no cut loses a step it reported applied,
/// for `apply`, group commit and the agent loop.
#[test]
fn on_a_fuse_file_system_no_cut_loses_a_step_reported_applied() {
    let plan = fixture("eight-steps.jsonl");
    let plan = plan.to_str().unwrap();
    for extra in [&[][..], &["--batch", "3"], &["--runner", "run"]] {
        let mut args = vec!["--model", "fuse", "--cuts", "10", "--states", "2"];
        args.extend_from_slice(extra);
        args.push(plan);
        let (doc, code) = sweep(&args);
        all_same_under(&doc, code, &["fuse"]);
    }
}

/// On a file system git-steps does not know (NFS, 9p, …) it flushes file
/// by file and takes no lock from before the boot as stale
/// (`GIT_STEPS_FLUSH=files`): under the POSIX worst case, which reorders
/// what no fsync ordered, every cut resumes too — the order of file,
/// rename and directory flushes is enough on its own.
#[test]
fn flushed_file_by_file_a_posix_file_system_loses_nothing_either() {
    let t = TestRepo::new();
    let plan = fixture("eight-steps.jsonl");
    for extra in [&[][..], &["--runner", "run"]] {
        let mut args = vec![
            "--json",
            "crashtest",
            "--power-loss",
            "--model",
            "posix",
            "--cuts",
            "12",
            "--states",
            "2",
            "--seed",
            "53",
        ];
        args.extend_from_slice(extra);
        args.push(plan.to_str().unwrap());
        let r = t.steps_env(&args, &[("GIT_STEPS_FLUSH", "files")]);
        all_same_under(&r.json(), r.code(), &["posix"]);
    }
}

/// The fuse model can fail: a run that trusts syncfs there
/// (`GIT_STEPS_FLUSH=syncfs`, what git-steps did everywhere before) loses
/// steps it had reported applied, and the row says which and how.
#[test]
fn the_fuse_model_catches_a_run_that_trusts_syncfs() {
    if linux_only("a run that trusts syncfs (the portable set has no syncfs to trust)") {
        return;
    }
    let t = TestRepo::new();
    let plan = fixture("eight-steps.jsonl");
    let r = t.steps_env(
        &[
            "--json",
            "crashtest",
            "--power-loss",
            "--model",
            "fuse",
            "--cuts",
            "8",
            "--states",
            "1",
            plan.to_str().unwrap(),
        ],
        &[("GIT_STEPS_FLUSH", "syncfs")],
    );
    assert_eq!(r.code(), Some(3), "{}", r.stderr());
    let doc = r.json();
    let rows = doc["data"]["rows"].as_array().unwrap();
    let lost: Vec<_> = rows
        .iter()
        .filter(|r| {
            r["verdict"] == "DIVERGED"
                && r["reason"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("a step reported applied was lost"))
        })
        .collect();
    assert!(!lost.is_empty(), "{rows:#?}");
}

/// The sweep can fail: the classic runner, whose cursor is not its log,
/// diverges after a power cut as after SIGKILL, and a DIVERGED row names
/// the operations its cut dropped.
#[test]
fn the_sweep_catches_the_classic_runner() {
    let plan = fixture("eight-steps.jsonl");
    let (doc, code) = sweep(&[
        "--runner",
        "classic",
        "--classic-log",
        "volatile",
        "--cuts",
        "12",
        plan.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(3), "{}", doc["data"]["summary"]);
    let rows = doc["data"]["rows"].as_array().unwrap();
    let diverged: Vec<_> = rows.iter().filter(|r| r["verdict"] == "DIVERGED").collect();
    assert!(!diverged.is_empty());
    assert!(
        diverged
            .iter()
            .any(|r| r["dropped"].as_array().is_some_and(|d| !d.is_empty())),
        "{diverged:#?}"
    );
}

/// Without strace the sweep says what it needs, exits 1 and makes no
/// scratch space.
#[test]
fn without_strace_the_sweep_says_so() {
    let t = TestRepo::new();
    let bin = t.tmp.path().join("bin-without-strace");
    std::fs::create_dir(&bin).unwrap();
    let git = std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|d| d.join("git"))
        .find(|p| p.is_file())
        .unwrap();
    std::os::unix::fs::symlink(&git, bin.join("git")).unwrap();
    let plan = fixture("eight-steps.jsonl");
    let scratch = t.tmp.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let r = t.steps_env(
        &["crashtest", "--power-loss", plan.to_str().unwrap()],
        &[
            ("PATH", bin.to_str().unwrap()),
            ("GIT_STEPS_SCRATCH", scratch.to_str().unwrap()),
        ],
    );
    assert_eq!(r.code(), Some(1), "{}", r.stderr());
    assert!(r.stderr().contains("strace"), "{}", r.stderr());
    assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0);
}

/// `--model`, `--cuts` and the rest belong to `--power-loss`: a usage error
/// without it.
#[test]
fn power_loss_options_need_power_loss() {
    let t = TestRepo::new();
    let plan = fixture("eight-steps.jsonl");
    t.steps(&["crashtest", "--model", "posix", plan.to_str().unwrap()])
        .code_is(2);
}

/// The order a power cut needs, read from the system calls themselves: a
/// worktree file's bytes are flushed before its rename into place, and its
/// directory before the index that names the new version; for `record`,
/// the agent's own file is flushed before the index says it is clean.
/// (Without it the sweep finds a box holding an empty file under an index
/// that names the step's version: refused as the user's edit.)
/// A line of `strace -f -o` (`PID  call(…`) that is this call.
trait Call {
    fn starts_with_call(&self, call: &str) -> bool;
}

impl Call for str {
    fn starts_with_call(&self, call: &str) -> bool {
        self.split_once(char::is_whitespace)
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(call))
    }
}

#[test]
fn worktree_bytes_and_names_are_durable_before_the_index_names_them() {
    if linux_only("the order of syncfs calls (the portable set flushes file by file; the sweeps above check that)") {
        return;
    }
    use std::process::Command;
    let calls = |t: &TestRepo, args: &[&str], stdin: Option<&str>| -> Vec<String> {
        let log = t.tmp.path().join("strace.log");
        let mut cmd = Command::new("strace");
        cmd.args(["-f", "-qq", "-y", "-o"])
            .arg(&log)
            .args([
                "-e",
                "trace=fsync,fdatasync,syncfs,rename,renameat,renameat2,link,openat",
            ])
            .arg(env!("CARGO_BIN_EXE_git-steps"))
            .args(args)
            .current_dir(&t.work);
        hermetic(&mut cmd, &t.home());
        t.run_cmd(
            cmd,
            format!("strace git-steps {args:?}"),
            stdin.map(str::as_bytes),
        )
        .ok();
        std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    };
    // The first call after `from` that `pred` matches.
    let first = |calls: &[String], from: usize, pred: &dyn Fn(&str) -> bool, what: &str| -> usize {
        calls
            .iter()
            .skip(from)
            .position(|l| pred(l))
            .map(|i| i + from)
            .unwrap_or_else(|| panic!("no {what} in:\n{}", calls.join("\n")))
    };
    let work = |t: &TestRepo| t.work.canonicalize().unwrap().display().to_string();

    // apply (issue 33's order): the file staged in `.git`, the branch
    // moved, one flush of the file system (the branch and the staged
    // bytes), the swap into place, the worktree directory's flush, then
    // the index.
    let t = TestRepo::new();
    let calls_apply = calls(
        &t,
        &["apply", "-"],
        Some(&line(
            serde_json::json!({"id": "s1", "files": {"f.txt": "one\n"}}),
        )),
    );
    let w = work(&t);
    let staged = first(
        &calls_apply,
        0,
        // (Made: a first try before `steps-tmp` exists fails.)
        &|l| {
            l.contains("openat(")
                && l.contains("O_CREAT")
                && l.contains("steps-tmp/.git-steps-")
                && !l.contains("= -1")
        },
        "the staged file",
    );
    let branch = first(
        &calls_apply,
        staged,
        &|l| l.contains("refs/heads/main.lock\", ") && l.contains("= 0"),
        "the branch's move",
    );
    let data = first(
        &calls_apply,
        branch,
        &|l| l.starts_with_call("syncfs("),
        "flush of the branch and the staged file",
    );
    // The file renamed into place is the one staged before the flush.
    let staged_name = calls_apply[staged]
        .split('"')
        .nth(1)
        .expect("the staged file's name")
        .to_string();
    let swap = first(
        &calls_apply,
        data,
        &|l| {
            l.contains("renameat2(")
                && l.contains(&staged_name)
                && l.contains(&format!("{w}/f.txt"))
        },
        "swap of the staged file into place",
    );
    let dir = first(
        &calls_apply,
        swap,
        &|l| l.starts_with_call("fsync(") && l.contains(&format!("<{w}>")),
        "flush of the worktree directory",
    );
    let index = first(
        &calls_apply,
        swap,
        &|l| (l.contains("rename(") || l.contains("link(")) && l.contains("index.lock"),
        "index write",
    );
    // The index written after the swap comes after the directory's flush.
    assert!(dir < index, "{data} {swap} {dir} {index}");

    // record: the agent's file, written without a flush, is flushed (and
    // its directory) before the index names it.
    let t = TestRepo::new();
    t.write("g.txt", "the agent's\n");
    let calls_record = calls(&t, &["record", "--id", "r1"], None);
    let w = work(&t);
    let file = first(
        &calls_record,
        0,
        &|l| l.starts_with_call("fsync(") && l.contains(&format!("{w}/g.txt")),
        "flush of the agent's file",
    );
    let dir = first(
        &calls_record,
        file,
        &|l| l.starts_with_call("fsync(") && l.contains(&format!("<{w}>")),
        "flush of the worktree directory",
    );
    let index = first(
        &calls_record,
        file,
        &|l| (l.contains("rename(") || l.contains("link(")) && l.contains("index.lock"),
        "index write",
    );
    assert!(dir < index, "{file} {dir} {index}");
}

/// A ref lock a cut left (dated before this boot) is moved aside and the
/// run goes on; the same lock dated now is another writer's and is never
/// touched.
#[test]
fn a_lock_from_before_this_boot_is_moved_aside_and_one_from_now_is_not() {
    let t = TestRepo::new();
    t.steps_stdin(
        &["apply", "-"],
        &line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}})),
    )
    .ok();
    let lock = t.work.join(".git/refs/heads/main.lock");
    let step2 = line(serde_json::json!({"id": "s2", "files": {"f": "2\n"}}));
    // Now: another writer's.
    std::fs::write(&lock, "0000000000000000000000000000000000000000\n").unwrap();
    let r = t.steps_stdin(&["apply", "-"], &step2);
    assert_ne!(r.code(), Some(0), "{}", r.stderr());
    assert!(lock.exists());
    // Before the boot (as every file is after a power cut).
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let btime: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let before = std::time::UNIX_EPOCH + std::time::Duration::from_secs(btime - 60);
    std::fs::File::options()
        .write(true)
        .open(&lock)
        .unwrap()
        .set_modified(before)
        .unwrap();
    // Its date alone is no evidence (issue 49: btime can be shifted): in
    // the boot that last wrote the repository, it is another writer's.
    let r = t.steps_stdin(&["apply", "-"], &step2);
    assert_ne!(r.code(), Some(0), "{}", r.stderr());
    assert!(lock.exists());
    if portable() {
        // No boot time in the portable set: the lock is never judged
        // stale. The run stops naming it, changes nothing, and goes on
        // once the user removes it.
        let r = t.steps_env_stdin(
            &["apply", "-"],
            &[("GIT_STEPS_BOOT_ID", "another-boot")],
            Some(&step2),
        );
        assert_ne!(r.code(), Some(0), "{}", r.stderr());
        assert!(r.stderr().contains("main.lock"), "{}", r.stderr());
        assert!(lock.exists());
        assert_eq!(t.step_ids(), ["s1"]);
        std::fs::remove_file(&lock).unwrap();
        t.steps_stdin(&["apply", "-"], &step2).ok();
        assert_eq!(t.step_ids(), ["s1", "s2"]);
        return;
    }
    // In another boot (the repository's epoch names this one no more).
    let r = t
        .steps_env_stdin(
            &["apply", "-"],
            &[("GIT_STEPS_BOOT_ID", "another-boot")],
            Some(&step2),
        )
        .ok();
    assert!(r.stderr().contains("predates this boot"), "{}", r.stderr());
    assert!(!lock.exists());
    assert_eq!(t.step_ids(), ["s1", "s2"]);
    let kept: Vec<_> = std::fs::read_dir(t.work.join(".git/steps/torn"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        kept.iter().any(|k| k.starts_with("refs_heads_main.lock.")),
        "{kept:?}"
    );
}

/// Issue 33: libgit2 writes objects unflushed, and a cut can keep their
/// names over lost bytes (git's "object file is empty"), in the box and,
/// hard-linked, in a local remote. A run in the next boot checks every
/// loose object of both (the epoch names another boot), moves the torn
/// ones and a tree naming a missing object aside, and finishes the run:
/// both repositories pass `git fsck`, each step lands once. In the same
/// boot nothing is checked (one read of the epoch).
#[test]
fn objects_a_cut_tore_are_moved_aside_in_the_next_boot() {
    let t = TestRepo::new();
    let bare = t.with_local_bare();
    let plan = t.plan(
        "p.jsonl",
        &[line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}}))],
    );
    let loose = |git_dir: &std::path::Path| -> std::collections::BTreeSet<std::path::PathBuf> {
        let mut out = std::collections::BTreeSet::new();
        for fan in std::fs::read_dir(git_dir.join("objects"))
            .unwrap()
            .flatten()
        {
            if fan.file_name().len() == 2 {
                for f in std::fs::read_dir(fan.path()).unwrap().flatten() {
                    out.insert(f.path());
                }
            }
        }
        out
    };
    t.steps(&["apply", plan.to_str().unwrap()]).ok();
    let git_dir = t.work.join(".git");
    let before = loose(&git_dir);
    // s2 killed with its objects written, nothing pushed: then the cut
    // took their bytes (names kept), and one was already linked into the
    // remote beside a tree whose entry's name the cut lost there.
    let plan2 = t.plan(
        "p2.jsonl",
        &[
            line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}})),
            line(serde_json::json!({"id": "s2", "files": {"f": "2\n", "d/g": "new\n"}})),
            line(serde_json::json!({"id": "s3", "files": {"f": "3\n"}})),
        ],
    );
    let r = t.steps_env(
        &["apply", plan2.to_str().unwrap()],
        &[("GIT_STEPS_CRASH", "objects-written@s2")],
    );
    assert_ne!(r.code(), Some(0));
    let new: Vec<_> = loose(&git_dir).difference(&before).cloned().collect();
    assert!(new.len() >= 4, "blobs, trees, the commit: {new:?}");
    let rel = |p: &std::path::Path| p.strip_prefix(&git_dir).unwrap().to_path_buf();
    let kinds: Vec<(std::path::PathBuf, String)> = new
        .iter()
        .map(|p| {
            let name = rel(p);
            let id = name
                .to_string_lossy()
                .replace("objects/", "")
                .replace('/', "");
            (p.clone(), t.git_out(&["cat-file", "-t", &id]))
        })
        .collect();
    let (tree, _) = kinds.iter().find(|(_, k)| k == "tree").unwrap();
    let (blob, _) = kinds.iter().find(|(_, k)| k == "blob").unwrap();
    // The tree whole in the remote, its entry missing there.
    for (p, kind) in &kinds {
        let there = bare.join(rel(p));
        std::fs::create_dir_all(there.parent().unwrap()).unwrap();
        if p == tree || kind == "commit" {
            std::fs::hard_link(p, &there).unwrap();
        }
    }
    // Every new object torn in the box (the remote's links share them,
    // but the tree: copied whole first).
    let tree_there = bare.join(rel(tree));
    let whole = std::fs::read(&tree_there).unwrap();
    std::fs::remove_file(&tree_there).unwrap();
    std::fs::write(&tree_there, whole).unwrap();
    for p in &new {
        std::fs::write(p, b"").unwrap();
    }
    assert!(std::fs::read(blob).unwrap().is_empty());
    // The next boot: both epochs name another one.
    for epoch in [git_dir.join("steps-epoch"), bare.join("steps-epoch")] {
        assert!(epoch.exists(), "no epoch at {}", epoch.display());
        std::fs::write(&epoch, "an earlier boot").unwrap();
    }
    let r = t.steps(&["apply", plan2.to_str().unwrap()]).ok();
    assert!(
        r.stderr().contains("were torn") && r.stderr().contains("moved to"),
        "{}",
        r.stderr()
    );
    assert_eq!(t.step_ids(), ["s1", "s2", "s3"]);
    t.git(&["fsck", "--no-dangling"]).ok();
    t.git(&["--git-dir", bare.to_str().unwrap(), "fsck", "--no-dangling"])
        .ok();
    assert_eq!(
        t.git_out(&["--git-dir", bare.to_str().unwrap(), "show", "main:d/g"]),
        "new"
    );
    // Checked once: the epoch now names this boot.
    let r = t.steps(&["apply", plan2.to_str().unwrap()]).ok();
    assert!(!r.stderr().contains("were torn"), "{}", r.stderr());
}

/// Issue 53, the order the fuse model relies on, read from the system
/// calls: flushed file by file, every file renamed or linked into the
/// remote (its branch's new value, its objects) had its bytes flushed
/// first; and a push through the user's `git` to a repository on this
/// machine has its receive-pack flush them too (git's local transport
/// drops `-c`), in either way of flushing.
#[test]
fn flushed_file_by_file_nothing_is_named_in_the_remote_before_its_bytes() {
    use std::process::Command;
    for (transport, flush) in [("libgit2", "files"), ("git", "files"), ("git", "syncfs")] {
        let (t, s) = TestRepo::with_server(crate::servers::Kind::Path, transport);
        let plan = t.plan(
            "plan.jsonl",
            &[
                line(serde_json::json!({"id": "s1", "files": {"a.txt": "one\n"}})),
                line(serde_json::json!({"id": "s2", "files": {"b/c.txt": "two\n"}})),
            ],
        );
        let log = t.tmp.path().join("strace.log");
        let mut cmd = Command::new("strace");
        cmd.args(["-f", "-qq", "-y", "-o"])
            .arg(&log)
            .args([
                "-e",
                "trace=fsync,fdatasync,rename,renameat,renameat2,link,linkat",
            ])
            .arg(env!("CARGO_BIN_EXE_git-steps"))
            .args(["apply", plan.to_str().unwrap()])
            .env("GIT_STEPS_FLUSH", flush)
            .current_dir(&t.work);
        hermetic(&mut cmd, &t.home());
        t.run_cmd(
            cmd,
            format!("strace git-steps apply ({transport}, {flush})"),
            None,
        )
        .ok();
        let calls = std::fs::read_to_string(&log).unwrap();
        let bare = s.bare.canonicalize().unwrap().display().to_string();
        // The second path a rename or link names, and the first.
        let quoted = |l: &str| -> Vec<String> {
            l.split('"')
                .skip(1)
                .step_by(2)
                .map(|p| p.replace("/./", "/"))
                .collect()
        };
        let lines: Vec<&str> = calls.lines().collect();
        let mut checked = 0;
        for (i, l) in lines.iter().enumerate() {
            let is_name = ["rename(", "renameat", "link(", "linkat("]
                .iter()
                .any(|c| l.contains(c));
            let paths = quoted(l);
            let (Some(from), Some(to)) = (paths.first(), paths.last()) else {
                continue;
            };
            if !is_name || !to.contains(&bare) || to.contains("steps-torn") {
                continue;
            }
            // The file's own name (its descriptor's path, as strace shows
            // it), or the name it was linked from (the branch's lock is a
            // link of the pending file), in an fsync or fdatasync before.
            let mut names = vec![from.clone()];
            for p in lines[..i].iter().rev() {
                let q = quoted(p);
                if (p.contains("link(") || p.contains("linkat(")) && q.last() == names.last() {
                    names.push(q[0].clone());
                }
            }
            let flushed = lines[..i].iter().any(|p| {
                (p.contains("fsync(") || p.contains("fdatasync("))
                    && names.iter().any(|n| p.contains(&format!("<{n}>")))
            });
            // A hard link of the box's own object: its bytes were flushed
            // under the box's name, the same inode.
            let box_object = from.contains("/.git/objects/") && !from.contains(&bare);
            let box_flushed = box_object
                && lines[..i].iter().any(|p| {
                    (p.contains("fdatasync(") || p.contains("fsync("))
                        && p.contains(&from[..from.rfind('/').unwrap()])
                });
            assert!(
                flushed || box_flushed,
                "{transport}, {flush}: {l}\nnamed before its bytes were flushed:\n{calls}"
            );
            checked += 1;
        }
        assert!(
            checked >= 2,
            "{transport}, {flush}: nothing checked:\n{calls}"
        );
    }
}
