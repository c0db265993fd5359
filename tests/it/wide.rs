//! Issue 51, in part: a step costs what it writes. The content hashes of a
//! run's artifact fingerprint are remembered across processes
//! (`.git/steps/blob-sha256`), and so are the bytes it hashed
//! (`.git/steps/artifact/stream`, spliced per step), so one `apply` per
//! step does not read every blob and tree of a large tree again; the
//! caches can only cost time, never a wrong fingerprint.

use crate::harness::*;
use serde_json::json;
use std::os::unix::fs::FileTypeExt;

/// `apply` killed at `point` (step id `artifact`), then run again.
fn killed_then_rerun(t: &TestRepo, plan: &str, point: &str) -> Run {
    let crash = format!("{point}@artifact");
    let k = t.steps_env(&["apply", plan], &[("GIT_STEPS_CRASH", crash.as_str())]);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&k.out.status),
        Some(9),
        "{}",
        k.explain()
    );
    t.steps(&["--json", "apply", plan]).ok()
}

fn wide(t: &TestRepo, dirs: usize, files: usize) {
    for d in 0..dirs {
        for f in 0..files {
            t.write(&format!("d{d}/f{f}.txt"), &format!("{d} {f}\n"));
        }
    }
    t.commit_all("base");
}

/// The artifact a run reports is the one plain git and sha256 give,
/// whatever the cache holds: after a kill right after it was appended,
/// with its tail torn, with a record damaged, and with a record planted
/// that names a blob with another hash.
#[test]
fn the_remembered_hashes_never_change_a_fingerprint() {
    let t = TestRepo::new();
    wide(&t, 10, 20);
    let cache = t.path(".git/steps/blob-sha256");
    let stream = t.path(".git/steps/artifact/stream");
    let mut plan = Vec::new();
    for i in 0..8 {
        plan.push(line(json!({"id": format!("s{i}"), "files": {format!("d{i}/f{i}.txt"): format!("step {i}\n")}})));
        let p = t.plan("p.jsonl", &plan);
        let p = p.to_str().unwrap();
        if i == 0 {
            // A dry run (no lock, its objects in memory) reports the
            // fingerprint and keeps nothing.
            let r = t.steps(&["--json", "apply", "--dry-run", p]).ok();
            assert!(r.json()["data"]["artifact"].is_string(), "{}", r.explain());
            assert!(
                !stream.exists() && !cache.exists(),
                "a dry run kept a cache"
            );
        }
        let r = match i {
            // Killed once the new hashes are appended (before the report).
            1 => killed_then_rerun(&t, p, "fingerprint-cached"),
            // A torn tail: half a record.
            2 => {
                let mut bytes = std::fs::read(&cache).unwrap();
                bytes.extend_from_slice(&[7u8; 30]);
                std::fs::write(&cache, bytes).unwrap();
                t.steps(&["--json", "apply", p]).ok()
            }
            // A record whose hash was damaged (its check no longer holds).
            3 => {
                let mut bytes = std::fs::read(&cache).unwrap();
                bytes[25] ^= 0xff;
                std::fs::write(&cache, bytes).unwrap();
                t.steps(&["--json", "apply", p]).ok()
            }
            // Every record's hash replaced by another blob's, with the
            // checks a careless tool would not recompute: all skipped.
            4 => {
                let mut bytes = std::fs::read(&cache).unwrap();
                for r in bytes.chunks_exact_mut(60) {
                    r[20..52].copy_from_slice(&[1u8; 32]);
                }
                std::fs::write(&cache, bytes).unwrap();
                t.steps(&["--json", "apply", p]).ok()
            }
            // Killed once the stream of the fingerprint's bytes is in
            // place (the next process splices from it).
            5 => killed_then_rerun(&t, p, "fingerprint-streamed"),
            // The stream torn mid-way; then, for the same head, a content
            // hash in it damaged: neither is trusted.
            6 => {
                let bytes = std::fs::read(&stream).unwrap();
                std::fs::write(&stream, &bytes[..bytes.len() / 2]).unwrap();
                let r = t.steps(&["--json", "apply", p]).ok();
                assert_eq!(
                    r.json()["data"]["artifact"].as_str().unwrap(),
                    independent_fingerprint(&t, "HEAD")
                );
                let mut bytes = std::fs::read(&stream).unwrap();
                let at = bytes.len() - 44 - 5;
                bytes[at] ^= 0xff;
                std::fs::write(&stream, bytes).unwrap();
                t.steps(&["--json", "apply", p]).ok()
            }
            _ => t.steps(&["--json", "apply", p]).ok(),
        };
        let reported = r.json()["data"]["artifact"].as_str().unwrap().to_string();
        assert_eq!(
            reported,
            independent_fingerprint(&t, "HEAD"),
            "step {i}: {}",
            r.explain()
        );
        assert!(cache.exists(), "step {i}: the run remembers its hashes");
        assert!(stream.exists(), "step {i}: and the bytes it hashed");
    }
    // What the cache holds is whole records of every blob the runs hashed.
    let len = std::fs::metadata(&cache).unwrap().len();
    assert_eq!(len % 60, 0, "{len}");
}

/// Issue 51: a step checks only the paths it writes, and a process no
/// longer walks the worktree or parses the index twice. On a tree of 2,000
/// files, one process per step, under three configurations (plain;
/// `core.fsmonitor` set to a hook that says nothing ever changed, after
/// git wrote its fsmonitor data into the index; and `feature.manyFiles`,
/// an index of version 4 without a trailing hash, with
/// `core.checkStat=minimal` and `core.trustctime=false`, where a same-size
/// edit in the same second looks clean by stat alone): an edit made in the
/// same second as the step that wrote the file, of the same size and with
/// the same mtime, is still refused; an untracked file in a step's way is
/// refused; edits elsewhere are carried along, untouched; and every step
/// that lands leaves `git status` clean of its own paths.
#[test]
fn a_step_never_misses_an_edit_or_an_untracked_file_on_a_large_tree() {
    for config in ["plain", "fsmonitor that lies", "manyFiles, minimal stat"] {
        let t = TestRepo::new();
        wide(&t, 40, 50);
        match config {
            "fsmonitor that lies" => {
                let hook = t.path(".git/lying-fsmonitor");
                // Protocol 2: the token, a NUL, and no changed path.
                script(&hook, "printf 'token\\0'\n");
                t.git(&["config", "core.fsmonitor", hook.to_str().unwrap()])
                    .ok();
                t.git(&["config", "core.fsmonitorHookVersion", "2"]).ok();
            }
            "manyFiles, minimal stat" => {
                for (k, v) in [
                    ("feature.manyFiles", "true"),
                    ("core.checkStat", "minimal"),
                    ("core.trustctime", "false"),
                ] {
                    t.git(&["config", k, v]).ok();
                }
                t.git(&["update-index", "--index-version", "4"]).ok();
            }
            _ => {}
        }
        // git itself writes the index as this configuration has it.
        t.git(&["status", "--porcelain"]).ok();
        // The plan so far and one more step, in a process of its own.
        let s1 = line(json!({"id": "s1", "files": {"d1/f1.txt": "step 1\n"}}));
        let plan = |name: &str, step: serde_json::Value| {
            t.plan(name, &[s1.clone(), line(step)])
                .to_str()
                .unwrap()
                .to_string()
        };
        let apply = |plan: &str| t.steps(&["apply", plan]);
        // Refused, naming the path, with nothing written: the head, the
        // steps and the file as they were (the whole-repository snapshot
        // of `TestRepo::refuses` cannot be used here: under fsmonitor,
        // git's own status rewrites the index each time it runs).
        let refused = |plan: &str, path: &str| {
            let (head, before) = (t.head(), t.read(path));
            let r = apply(plan);
            assert_eq!(r.code(), Some(3), "{config}: {}", r.explain());
            assert!(r.stderr().contains(path), "{config}: {}", r.explain());
            assert_eq!((t.head(), t.read(path)), (head, before), "{config}");
            assert_eq!(t.step_ids(), ["s1"], "{config}");
        };
        let p = t.plan("p.jsonl", std::slice::from_ref(&s1));
        t.steps(&["apply", p.to_str().unwrap()]).ok();
        // git writes its index (with fsmonitor's data, where it is on).
        t.git(&["status", "--porcelain"]).ok();
        // The same second, the same size, the same inode: an mtime a
        // microsecond off the step's (git, comparing whole seconds under
        // `core.checkStat=minimal` or a build without nanoseconds, and
        // ignoring ctime under `core.trustctime=false`, may take it for
        // clean; git-steps compares nanoseconds).
        let f = t.path("d1/f1.txt");
        let mtime = std::fs::metadata(&f).unwrap().modified().unwrap();
        let ns = mtime
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let micro = std::time::Duration::from_micros(1);
        let same_second = if ns >= 1_000 {
            mtime - micro
        } else {
            mtime + micro
        };
        t.write("d1/f1.txt", "user 1\n");
        std::fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(same_second)
            .unwrap();
        // The trap is real: git trusting the lying hook sees no edit.
        if config == "fsmonitor that lies" {
            let seen = t.git_out(&["status", "--porcelain"]).contains("d1/f1.txt");
            assert!(!seen, "{config}");
        }
        t.write("d5/f5.txt", "carried\n");
        let p = plan(
            "edit.jsonl",
            json!({"id": "s2", "files": {"d1/f1.txt": "step 2\n", "d9/f9.txt": "s2\n"}}),
        );
        refused(&p, "d1/f1.txt");
        assert_eq!(t.read("d1/f1.txt"), "user 1\n", "{config}");
        // Put back as the step left it: the next step may write it.
        t.write("d1/f1.txt", "step 1\n");
        t.write("d3/new.txt", "untracked\n");
        let p = plan(
            "untracked.jsonl",
            json!({"id": "s2", "files": {"d3/new.txt": "step 2\n"}}),
        );
        refused(&p, "d3/new.txt");
        assert_eq!(t.read("d3/new.txt"), "untracked\n", "{config}");
        std::fs::remove_file(t.path("d3/new.txt")).unwrap();
        apply(&plan(
            "ok.jsonl",
            json!({"id": "s2", "files": {"d2/f2.txt": "step 2\n", "d3/new.txt": "new\n"}}),
        ))
        .ok();
        assert_eq!(t.read("d5/f5.txt"), "carried\n", "{config}");
        assert_eq!(t.read("d3/new.txt"), "new\n", "{config}");
        assert_eq!(
            t.git_out(&["status", "--porcelain", "--untracked-files=all"]),
            " M d5/f5.txt",
            "{config}"
        );
        assert_eq!(t.step_ids(), ["s1", "s2"], "{config}");
    }
}

/// Found by the outside review of the index reader: a FIFO where a step
/// writes a tracked file was opened to be hashed, and the dirty check
/// blocked on it. It is now a change of type (refused, exit 3, named),
/// decided without opening it.
#[test]
fn a_fifo_where_a_step_writes_is_refused_without_hanging() {
    let t = TestRepo::new();
    wide(&t, 3, 3);
    let s1 = line(json!({"id": "s1", "files": {"d1/f1.txt": "one\n"}}));
    let p = t.plan("p1.jsonl", std::slice::from_ref(&s1));
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    std::fs::remove_file(t.path("d1/f1.txt")).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(t.path("d1/f1.txt"))
        .status()
        .unwrap();
    assert!(made.success());
    let s2 = line(json!({"id": "s2", "files": {"d1/f1.txt": "two\n"}}));
    let p = t.plan("p2.jsonl", &[s1, s2]);
    let mut child = t.spawn_steps(&["apply", p.to_str().unwrap()]);
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > std::time::Duration::from_secs(30) {
            child.kill().unwrap();
            panic!("apply hung on the FIFO");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(3));
    assert!(std::fs::symlink_metadata(t.path("d1/f1.txt"))
        .unwrap()
        .file_type()
        .is_fifo());
    assert_eq!(t.step_ids(), ["s1"]);
}
