//! Issue 18: the shared hunk cache. Every `steps.cacheEvery` steps the run's
//! live hunks go to the remote beside it (`refs/steps/cache/<run hash>`), and
//! a fresh box takes them instead of replaying every step's diff — checked
//! against the receipts it scanned, so that a damaged or forged cache costs
//! a replay, and `verify` never reads one.

use std::process::Command;

use serde_json::json;

use crate::harness::*;
use crate::servers::Kind;

const APP: &str = "fn a() {}\n\nfn b() {}\n\nfn c() {}\n";

/// The step whose change the tests redeliver.
fn inline_b(id: &str) -> String {
    line(
        json!({"id": id, "edits": [{"path": "app.rs", "old_str": "fn b() {}", "new_str": "#[inline]\nfn b() {}"}]}),
    )
}

/// Ten steps: s2 makes the change the tests redeliver, the rest each
/// write a file of their own.
fn plan() -> Vec<String> {
    (1..=10)
        .map(|k| match k {
            2 => inline_b("s2"),
            k => line(
                json!({"id": format!("s{k}"), "files": {format!("f{k}.txt"): format!("v{k}\n")}}),
            ),
        })
        .collect()
}

/// A bare remote whose `main` holds app.rs, and a first box on it.
fn setup() -> (TestRepo, String) {
    let seed = TestRepo::new();
    seed.write("app.rs", APP);
    seed.commit_all("base");
    let bare = seed.tmp.path().join("remote.git");
    let bare_s = bare.to_str().unwrap().to_string();
    seed.git(&["clone", "-q", "--bare", ".", &bare_s]).ok();
    let first = seed.sibling("box1", Some(&bare_s));
    first.steps(&["init", "--remote", "origin"]).ok();
    (first, bare_s)
}

fn git_in(t: &TestRepo, dir: &str, args: &[&str]) -> String {
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(dir).args(args);
    hermetic(&mut cmd, &t.home());
    let r = t.run_cmd(cmd, format!("git -C {dir} {}", args.join(" ")), None);
    assert!(r.out.status.success(), "{}", r.explain());
    r.stdout()
}

/// The remote's cache refs: (name, commit).
fn cache_refs(t: &TestRepo, bare: &str) -> Vec<(String, String)> {
    git_in(
        t,
        bare,
        &[
            "for-each-ref",
            "--format=%(refname) %(objectname)",
            "refs/steps/cache/",
        ],
    )
    .lines()
    .map(|l| {
        let (n, o) = l.split_once(' ').unwrap();
        (n.to_string(), o.to_string())
    })
    .collect()
}

/// A fresh box on `bare` with `steps.cacheEvery` = `every`.
fn fresh(t: &TestRepo, bare: &str, name: &str, every: &str) -> TestRepo {
    let b = t.sibling(name, Some(bare));
    b.steps(&["init", "--remote", "origin"]).ok();
    b.git(&["config", "steps.cacheEvery", every]).ok();
    b
}

#[test]
fn a_long_run_leaves_its_hunks_beside_it_and_a_fresh_box_uses_them() {
    let (t, bare) = setup();
    t.git(&["config", "steps.cacheEvery", "4"]).ok();
    let p = t.plan("plan.jsonl", &plan());
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    // Published after steps 4 and 8: one ref, replaced the second time (no
    // history kept), naming the eighth receipt; plain git reads it.
    let refs = cache_refs(&t, &bare);
    assert_eq!(refs.len(), 1, "{refs:?}");
    let (name, commit) = &refs[0];
    let s8 = git_in(&t, &bare, &["rev-parse", "main~2"]);
    let subject = git_in(&t, &bare, &["log", "-1", "--format=%s%n%P", commit]);
    assert_eq!(
        subject,
        format!(
            "git-steps: hunk cache of run main after 8 steps (at {})\n\n",
            s8.trim()
        ),
        "a commit with no parent"
    );
    let blob = git_in(&t, &bare, &["cat-file", "-p", &format!("{commit}:hunks")]);
    assert!(blob.starts_with("git-steps-shared-hunks 2 5\n"), "{blob:?}");
    // The branch's history holds no cache commit.
    assert!(!git_in(&t, &bare, &["log", "--format=%s", "main"]).contains("hunk cache"));

    // A fresh box fetches it and still refuses s2's change made again.
    let b = fresh(&t, &bare, "box2", "4");
    let r = b.refuses(
        "a redelivery on a fresh box",
        3,
        &["repeats a change step s2 made"],
        || b.steps_stdin(&["apply", "-"], &inline_b("s2-again")),
    );
    drop(r);
    assert_eq!(
        b.git_out(&[
            "rev-parse",
            &name.replace("refs/steps/cache/", "refs/steps/remote-cache/")
        ]),
        *commit,
        "the fresh box holds the remote's cache"
    );
    // It goes on from there: two more steps, and a cache again after 12.
    let more = [
        line(json!({"id": "s11", "files": {"f11.txt": "v11\n"}})),
        line(json!({"id": "s12", "files": {"f12.txt": "v12\n"}})),
    ];
    b.steps_stdin(&["apply", "-"], &more.join("\n")).ok();
    let (_, newer) = &cache_refs(&t, &bare)[0];
    assert_ne!(newer, commit);
    assert!(git_in(&t, &bare, &["log", "-1", "--format=%s", newer]).contains("after 12 steps"));
    // A third box catches up from step 12 and refuses the redelivery too.
    let c = fresh(&t, &bare, "box3", "4");
    c.refuses(
        "a redelivery after the second cache",
        3,
        &["repeats a change step s2 made"],
        || c.steps_stdin(&["apply", "-"], &inline_b("s2-again")),
    );
}

/// Replace the remote's cache by one whose blob is the `genuine` cache's,
/// `edit`ed (CRC fixed).
fn forge(t: &TestRepo, bare: &str, genuine: &str, edit: impl Fn(&mut Vec<u8>)) {
    let (name, _) = cache_refs(t, bare).remove(0);
    let commit = genuine;
    let mut cmd = Command::new("git");
    cmd.arg("-C")
        .arg(bare)
        .args(["cat-file", "blob", &format!("{commit}:hunks")]);
    hermetic(&mut cmd, &t.home());
    let mut data = t.run_cmd(cmd, "cat-file".into(), None).out.stdout;
    data.truncate(data.len() - 4);
    edit(&mut data);
    let sum = crc32fast::hash(&data).to_le_bytes();
    data.extend_from_slice(&sum);
    let path = t.tmp.path().join("forged");
    std::fs::write(&path, &data).unwrap();
    let blob = git_in(t, bare, &["hash-object", "-w", path.to_str().unwrap()]);
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(bare).arg("mktree");
    hermetic(&mut cmd, &t.home());
    let tree = t.run_cmd(
        cmd,
        "mktree".into(),
        Some(format!("100644 blob {}\thunks\n", blob.trim()).as_bytes()),
    );
    let forged = git_in(
        t,
        bare,
        &["commit-tree", "-m", "forged", tree.stdout().trim()],
    );
    git_in(t, bare, &["update-ref", &name, forged.trim()]);
}

/// Where the live hunks start in a cache blob of run `main`: magic, run,
/// base, head, step count, digest.
const HEADER: usize = 27 + 4 + 4 + 20 + 20 + 8 + 32;

#[test]
fn a_forged_cache_is_checked_against_the_log_and_verify_never_reads_it() {
    let (t, bare) = setup();
    t.git(&["config", "steps.cacheEvery", "4"]).ok();
    let p = t.plan("plan.jsonl", &plan());
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    let genuine = cache_refs(&t, &bare).remove(0).1;

    // Receipts that disagree with the log (one bit of the digest): the cache
    // is ignored, the hunks are replayed, the redelivery is refused.
    forge(&t, &bare, &genuine, |d| d[HEADER - 1] ^= 1);
    let b = fresh(&t, &bare, "box2", "4");
    b.refuses(
        "a cache whose receipts disagree",
        3,
        &["repeats a change step s2 made"],
        || b.steps_stdin(&["apply", "-"], &inline_b("s2-again")),
    );
    // Not a cache of this run's receipts at all (another step count).
    forge(&t, &bare, &genuine, |d| d[HEADER - 40] ^= 1);
    let b = fresh(&t, &bare, "box3", "4");
    b.refuses(
        "a cache of another step",
        3,
        &["repeats a change step s2 made"],
        || b.steps_stdin(&["apply", "-"], &inline_b("s2-again")),
    );

    // A ref that names no commit (a blob, a tree): ignored.
    for what in ["blob", "tree"] {
        let (name, _) = cache_refs(&t, &bare).remove(0);
        let rev = format!("{genuine}:hunks");
        let target = match what {
            "blob" => git_in(&t, &bare, &["rev-parse", &rev]),
            _ => git_in(&t, &bare, &["rev-parse", &format!("{genuine}^{{tree}}")]),
        };
        git_in(&t, &bare, &["update-ref", &name, target.trim()]);
        let b = fresh(&t, &bare, &format!("box-{what}"), "4");
        b.refuses(
            &format!("a cache ref naming a {what}"),
            3,
            &["repeats a change step s2 made"],
            || b.steps_stdin(&["apply", "-"], &inline_b("s2-again")),
        );
    }

    // Receipts that agree and hunks that lie (a remote that knows the
    // format drops them all): apply trusts the hunks as it trusts the
    // remote's commits, and lets the redelivery through; a box that reads
    // no cache refuses it; verify, which never reads a cache, reports it.
    forge(&t, &bare, &genuine, |d| {
        d.truncate(HEADER);
        d.extend_from_slice(&0u64.to_le_bytes());
    });
    let honest = fresh(&t, &bare, "box4", "0");
    honest.refuses(
        "a box that reads no cache",
        3,
        &["repeats a change step s2 made"],
        || honest.steps_stdin(&["apply", "-"], &inline_b("s2-again")),
    );
    let fooled = fresh(&t, &bare, "box5", "4");
    fooled
        .steps_stdin(&["apply", "-"], &inline_b("s2-again"))
        .ok();
    let v = fooled.steps(&["verify"]);
    assert_ne!(v.code(), Some(0), "{}", v.explain());
    assert!(v.stderr().contains("s2-again"), "{}", v.explain());
}

#[test]
fn the_cache_is_replaced_over_every_transport() {
    for kind in [Kind::Daemon, Kind::Http] {
        for transport in ["libgit2", "git"] {
            let (t, server) = TestRepo::with_server(kind, transport);
            t.git(&["config", "steps.cacheEvery", "3"]).ok();
            let files: Vec<String> = (1..=10)
                .map(|k| line(json!({"id": format!("s{k}"), "files": {format!("f{k}.txt"): format!("v{k}\n")}})))
                .collect();
            let p = t.plan("plan.jsonl", &files);
            let r = t.steps(&["apply", p.to_str().unwrap()]).ok();
            let bare = server.bare().to_str().unwrap().to_string();
            let refs = cache_refs(&t, &bare);
            assert_eq!(
                refs.len(),
                1,
                "{kind:?}/{transport}: {refs:?}\n{}",
                r.explain()
            );
            let subject = git_in(&t, &bare, &["log", "-1", "--format=%s", &refs[0].1]);
            assert!(
                subject.contains("after 9 steps"),
                "{kind:?}/{transport}: replaced at 6 and 9: {subject}"
            );
            assert_eq!(
                t.git_out(&["rev-parse", &refs[0].0.replace("/cache/", "/remote-cache/")]),
                refs[0].1,
                "{kind:?}/{transport}: this box's copy"
            );
        }
    }
}

/// A pusher killed while it held the cache ref's lock on a local remote
/// (its pending file hard-linked as `<ref>.lock`) leaves a pair that the
/// next publish recognises as its own and clears, even when branch pushes
/// came in between; anyone else's lock is waited for, never removed.
#[test]
fn a_cache_lock_a_killed_pusher_left_is_cleared_by_the_next_publish() {
    use sha2::{Digest, Sha256};
    let (t, bare) = setup();
    t.git(&["config", "steps.cacheEvery", "2"]).ok();
    let first: Vec<String> = plan()[..2].to_vec();
    t.steps_stdin(&["apply", "-"], &first.join("\n")).ok();
    let (name, at2) = cache_refs(&t, &bare).remove(0);
    // What a kill between the link and the rename leaves.
    let hash: String = Sha256::digest(name.as_bytes())[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let pending = std::path::Path::new(&bare).join(format!("steps-push-{hash}.pending"));
    std::fs::write(&pending, "0000000000000000000000000000000000000000\n").unwrap();
    let lock = std::path::Path::new(&bare).join(format!("{name}.lock"));
    std::fs::hard_link(&pending, &lock).unwrap();
    // Step 3 pushes the branch only; step 4 publishes again.
    t.steps_stdin(&["apply", "-"], &plan()[2..4].join("\n"))
        .ok();
    let (_, at4) = cache_refs(&t, &bare).remove(0);
    assert_ne!(at4, at2, "the cache moved past the leftover lock");
    assert!(git_in(&t, &bare, &["log", "-1", "--format=%s", &at4]).contains("after 4 steps"));
    assert!(!lock.exists() && !pending.exists());
    // Another writer's lock (no pending file of ours): left alone; the
    // publish gives up after waiting, and the steps are done regardless.
    std::fs::write(&lock, "held by someone else\n").unwrap();
    let r = t.steps_env_stdin(
        &["apply", "-"],
        &[("GIT_STEPS_LOCK_WAIT", "1")],
        Some(&plan()[4..6].join("\n")),
    );
    assert_eq!(r.code(), Some(0), "{}", r.explain());
    assert_eq!(t.step_ids().len(), 6);
    assert_eq!(cache_refs(&t, &bare).remove(0).1, at4, "the cache stays");
    assert_eq!(
        std::fs::read_to_string(&lock).unwrap(),
        "held by someone else\n"
    );
}

/// A box that stalls between its step's push and its publish (held at
/// `cache-written` by `GIT_STEPS_PAUSE`) while another box takes the run
/// further and publishes a newer cache: when the stalled box goes on, its
/// older cache does not replace the newer one, and its copy of the ref
/// becomes what the remote holds.
#[test]
fn a_stalled_box_never_puts_an_older_cache_over_a_newer_one() {
    let (a, bare) = setup();
    a.git(&["config", "steps.cacheEvery", "2"]).ok();
    let p2 = a.plan("a.jsonl", &plan()[..2]);
    let gate = tempfile::tempdir().unwrap();
    let mut cmd = a.steps_command(&["-q", "apply", p2.to_str().unwrap()]);
    cmd.env(
        "GIT_STEPS_PAUSE",
        format!("cache-written@s2:{}", gate.path().display()),
    )
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let stalled = cmd.spawn().unwrap();
    wait_for(&gate.path().join("reached"), "box a at cache-written");
    // Box b takes the run to step 4 and publishes the cache of 4 steps.
    let b = fresh(&a, &bare, "box-b", "2");
    b.steps_stdin(&["apply", "-"], &plan()[..4].join("\n")).ok();
    let (name, newer) = cache_refs(&a, &bare).remove(0);
    assert!(git_in(&a, &bare, &["log", "-1", "--format=%s", &newer]).contains("after 4 steps"));
    // Box a goes on with its cache of 2 steps.
    std::fs::write(gate.path().join("go"), b"").unwrap();
    let out = stalled.wait_with_output().unwrap();
    assert!(out.status.success(), "box a: {out:?}");
    assert_eq!(
        cache_refs(&a, &bare),
        vec![(name.clone(), newer.clone())],
        "the newer cache stays"
    );
    assert_eq!(
        a.git_out(&["rev-parse", &name.replace("/cache/", "/remote-cache/")]),
        newer,
        "box a's copy is what the remote holds"
    );
    // And box a's next due step replaces it, being newer still.
    a.steps_stdin(&["apply", "-"], &plan()[..6].join("\n")).ok();
    let (_, now) = cache_refs(&a, &bare).remove(0);
    assert!(git_in(&a, &bare, &["log", "-1", "--format=%s", &now]).contains("after 6 steps"));
}

/// Issue 28 item 9: the shared cache was fetched whole before its size was
/// checked, so a remote's 150 MB cache blob cost a fresh box 300 MB of
/// memory and stayed on its disk. A cache over the bound is not fetched
/// from a bare repository on this machine (its size is read first), and
/// its download stops at the bound over smart HTTP; either way the fresh
/// box replays instead and still refuses the redelivery.
#[test]
fn an_oversized_cache_is_never_fetched() {
    let plant = |t: &TestRepo, bare: &str| -> String {
        let big = t.tmp.path().join("big");
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("head -c 80000000 /dev/urandom > {}", big.display()));
        t.run_cmd(cmd, "make 80 MB".into(), None).ok();
        let blob = git_in(t, bare, &["hash-object", "-w", big.to_str().unwrap()]);
        let blob = blob.trim().to_string();
        let mut mk = Command::new("git");
        mk.arg("-C").arg(bare).arg("mktree");
        hermetic(&mut mk, &t.home());
        let tree = t
            .run_cmd(
                mk,
                "git mktree".into(),
                Some(format!("100644 blob {blob}\thunks\n").as_bytes()),
            )
            .ok()
            .stdout();
        let commit = git_in(
            t,
            bare,
            &[
                "commit-tree",
                "-m",
                "git-steps: hunk cache of run main after 8 steps (at x)",
                tree.trim(),
            ],
        );
        let (name, _) = cache_refs(t, bare).remove(0);
        git_in(t, bare, &["update-ref", &name, commit.trim()]);
        blob
    };
    // A bare repository on this machine.
    let (t, bare) = setup();
    t.git(&["config", "steps.cacheEvery", "4"]).ok();
    t.steps(&["apply", t.plan("plan.jsonl", &plan()).to_str().unwrap()])
        .ok();
    let blob = plant(&t, &bare);
    // (--no-local: a local clone would hard-link every object of the bare
    // repository, the planted one too.)
    let b = t.clone_with("box-path", &["--no-local", &bare]);
    b.steps(&["init", "--remote", "origin"]).ok();
    b.git(&["config", "steps.cacheEvery", "4"]).ok();
    assert!(b.git(&["cat-file", "-e", &blob]).code() != Some(0));
    b.refuses(
        "a redelivery",
        3,
        &["repeats a change step s2 made"],
        || b.steps_stdin(&["apply", "-"], &inline_b("s2-again")),
    );
    assert!(
        b.git(&["cat-file", "-e", &blob]).code() != Some(0),
        "the oversized cache was fetched from the path remote"
    );
    // Smart HTTP: the download stops at the bound.
    let (h, server) = TestRepo::with_server(Kind::Http, "libgit2");
    h.write("app.rs", APP);
    h.commit_all("base");
    h.git(&["config", "steps.cacheEvery", "4"]).ok();
    h.steps(&["apply", h.plan("plan.jsonl", &plan()).to_str().unwrap()])
        .ok();
    let bare = server.bare().to_str().unwrap().to_string();
    let blob = plant(&h, &bare);
    let c = h.sibling("box-http", Some(server.url()));
    c.steps(&["init", "--remote", "origin"]).ok();
    c.git(&["config", "steps.cacheEvery", "4"]).ok();
    c.refuses(
        "a redelivery over http",
        3,
        &["repeats a change step s2 made"],
        || c.steps_stdin(&["apply", "-"], &inline_b("s2-again")),
    );
    assert!(
        c.git(&["cat-file", "-e", &blob]).code() != Some(0),
        "the oversized cache was fetched over http"
    );
    let packs = std::fs::read_dir(c.path(".git/objects/pack"))
        .map(|d| {
            d.flatten()
                .map(|e| e.metadata().unwrap().len())
                .sum::<u64>()
        })
        .unwrap_or(0);
    assert!(packs < 20_000_000, "{packs} bytes of packs stayed on disk");
}
