//! Issue 51, in part: a step costs what it writes. The content hashes of a
//! run's artifact fingerprint are remembered across processes
//! (`.git/steps/blob-sha256`), so one `apply` per step does not read every
//! blob of a large tree again; the cache can only cost time, never a wrong
//! fingerprint.

use crate::harness::*;
use serde_json::json;

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
    let mut plan = Vec::new();
    for i in 0..6 {
        plan.push(line(json!({"id": format!("s{i}"), "files": {format!("d{i}/f{i}.txt"): format!("step {i}\n")}})));
        let p = t.plan("p.jsonl", &plan);
        let p = p.to_str().unwrap();
        let r = match i {
            // Killed once the new hashes are appended (before the report).
            1 => {
                let k = t.steps_env(
                    &["apply", p],
                    &[("GIT_STEPS_CRASH", "fingerprint-cached@artifact")],
                );
                assert_eq!(
                    std::os::unix::process::ExitStatusExt::signal(&k.out.status),
                    Some(9),
                    "{}",
                    k.explain()
                );
                t.steps(&["--json", "apply", p]).ok()
            }
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
    }
    // What the cache holds is whole records of every blob the runs hashed.
    let len = std::fs::metadata(&cache).unwrap().len();
    assert_eq!(len % 60, 0, "{len}");
}
