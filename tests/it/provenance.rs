//! Issue 36: provenance after the merge. A run squash-merged with the
//! message `merge-message` writes, its branch deleted, audited from a fresh
//! clone with plain `git log` and `verify --merged`; a rebase merge; a true
//! merge; a merge that differs from the run (a reviewer's fix) reported
//! path by path.

use serde_json::json;

use crate::harness::*;

/// A repository with a commit on `main`, pushed to a bare `origin`, and a
/// run `fix-parser` of three steps applied on its branch `steps/fix-parser`.
fn run_applied() -> (TestRepo, std::path::PathBuf) {
    let t = TestRepo::fresh();
    t.write("README", "base\n");
    t.write("src/parse.c", "int parse(void) { return 1; }\n");
    t.commit_all("base");
    let bare = t.tmp.path().join("remote.git");
    t.git(&["init", "-q", "--bare", "-b", "main", bare.to_str().unwrap()])
        .ok();
    t.git(&["remote", "add", "origin", bare.to_str().unwrap()])
        .ok();
    t.git(&["push", "-q", "origin", "main"]).ok();
    t.steps(&["init", "--run", "fix-parser"]).ok();
    let plan = t.plan(
        "plan.jsonl",
        &[
            line(json!({"id": "s1", "files": {"src/parse.c": "int parse(void) { return 0; }\n"}, "message": "fix the parser"})),
            line(json!({"id": "s2", "files": {"tests/parse.t": "ok\n"}, "message": "test it"})),
            line(json!({"id": "s3", "files": {"NEWS": "parser fixed\n"}, "message": "say so"})),
        ],
    );
    t.steps(&["apply", plan.to_str().unwrap()]).ok();
    (t, bare)
}

fn trailers_of(t: &TestRepo, rev: &str) -> String {
    t.git_out(&["log", "-1", "--format=%(trailers:only,unfold)", rev])
}

/// What a forge's default squash message copies for the commits of
/// `range`: each commit's whole message behind "* ", oldest first.
fn forge_body(t: &TestRepo, range: &str) -> Vec<String> {
    t.git_out(&["log", "--reverse", "--format=* %B%x00", range])
        .split('\0')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .map(str::to_string)
        .collect()
}

/// `verify --merged <rev> --json [more]`: (kind, ok, steps).
fn verdict(t: &TestRepo, rev: &str, more: &[&str]) -> (String, bool, u64) {
    let mut args = vec!["--json", "verify", "--merged", rev];
    args.extend(more);
    let v = t.steps(&args).ok().json();
    (
        v["data"]["kind"].as_str().unwrap_or_default().to_string(),
        v["data"]["ok"].as_bool().unwrap_or_default(),
        v["data"]["steps"].as_u64().unwrap_or_default(),
    )
}

/// Squash-merge the run with `message` on main, push, delete the branch.
fn squash(t: &TestRepo, message: &str) {
    let msg = t.tmp.path().join("squash.msg");
    std::fs::write(&msg, message).unwrap();
    t.git(&["checkout", "-q", "main"]).ok();
    t.git(&["merge", "-q", "--squash", "steps/fix-parser"]).ok();
    t.git(&["commit", "-q", "-F", msg.to_str().unwrap()]).ok();
    t.git(&["push", "-q", "origin", "main"]).ok();
    t.git(&["push", "-q", "origin", "--delete", "steps/fix-parser"])
        .ok();
    t.git(&["branch", "-q", "-D", "steps/fix-parser"]).ok();
}

#[test]
fn a_squash_merged_run_is_audited_from_a_fresh_clone_after_its_branch_is_deleted() {
    let (t, bare) = run_applied();
    let head = t
        .git_out(&["rev-parse", "steps/fix-parser"])
        .trim()
        .to_string();
    let doc = t.steps(&["--json", "merge-message"]).ok().json();
    let m = &doc["data"];
    let text = m["message"].as_str().unwrap().to_string();
    assert_eq!(m["count"], 3);
    assert_eq!(m["head"], head.as_str());
    assert_eq!(
        doc["data"]["archived"]["refname"],
        "refs/steps/runs/fix-parser"
    );
    assert!(text.starts_with("fix-parser: 3 steps by git-steps\n\n- s1: fix the parser\n- s2: test it\n- s3: say so\n\n"), "{text}");
    // git reads the trailers: exactly ours, the last paragraph.
    let parsed = interpret_trailers(&t, &text);
    let fp = t
        .steps(&["--json", "fingerprint", "steps/fix-parser"])
        .ok()
        .json();
    assert_eq!(
        parsed,
        format!(
            "Steps-Run: fix-parser\nSteps-Head: {head}\nSteps-Count: 3\nSteps-History: {}\nSteps-Artifact: {}\n",
            fp["data"]["history"].as_str().unwrap(),
            fp["data"]["artifact"].as_str().unwrap()
        )
    );
    // The human form is the same message, paste-ready.
    assert_eq!(t.steps(&["merge-message"]).ok().stdout(), text);
    // Kept on the remote where branch deletion cannot reach it.
    let kept = t.git_out(&[
        "--git-dir",
        bare.to_str().unwrap(),
        "rev-parse",
        "refs/steps/runs/fix-parser",
    ]);
    assert_eq!(kept.trim(), head);

    squash(&t, &text);
    assert_eq!(trailers_of(&t, "main").trim_end(), parsed.trim_end());
    assert!(
        t.git(&[
            "--git-dir",
            bare.to_str().unwrap(),
            "rev-parse",
            "-q",
            "--verify",
            "refs/heads/steps/fix-parser"
        ])
        .code()
            == Some(1)
    );

    // A fresh clone: plain git reads the squash's trailers, and the run
    // itself once its ref is fetched.
    let fresh = t.clone_with("auditor", &[bare.to_str().unwrap()]);
    let on_main = fresh.git_out(&["log", "-1", "--format=%(trailers:key=Steps-Run,valueonly,separator=)|%(trailers:key=Steps-Count,valueonly,separator=)", "main"]);
    assert_eq!(on_main.trim(), "fix-parser|3");
    fresh
        .git(&[
            "fetch",
            "-q",
            "origin",
            "refs/steps/runs/*:refs/steps/runs/*",
        ])
        .ok();
    let ids = fresh.git_out(&[
        "log",
        "--reverse",
        "--format=%(trailers:key=Step-Id,valueonly,separator=)",
        "refs/steps/runs/fix-parser",
    ]);
    assert_eq!(
        ids.split_whitespace().collect::<Vec<_>>(),
        ["s1", "s2", "s3"]
    );
    // verify --merged, in a clone with no run set up: it fetches the kept run.
    let fresh2 = t.clone_with("auditor2", &[bare.to_str().unwrap()]);
    let v = fresh2
        .steps(&["--json", "verify", "--merged", "main"])
        .ok()
        .json();
    assert_eq!(v["data"]["ok"], true, "{v}");
    assert_eq!(v["data"]["kind"], "squash");
    assert_eq!(v["data"]["run"], "fix-parser");
    assert_eq!(v["data"]["head"], head.as_str());
    assert_eq!(v["data"]["steps"], 3);
    let human = fresh2.steps(&["verify", "--merged", "main"]).ok();
    assert!(
        human.stdout().starts_with("ok: squash "),
        "{}",
        human.explain()
    );
    assert!(
        human
            .stderr()
            .contains("its tree is exactly the run's artifact"),
        "{}",
        human.explain()
    );
}

#[test]
fn a_merge_that_differs_from_the_run_is_reported_path_by_path() {
    let (t, bare) = run_applied();
    let text = t.steps(&["merge-message"]).ok().stdout();
    squash(&t, &text);
    // A reviewer's fix on a path the run changed, and a file of their own.
    t.write(
        "src/parse.c",
        "int parse(void) { return 0; /* reviewed */ }\n",
    );
    t.write("CONTRIBUTORS", "the reviewer\n");
    t.git(&["add", "-A"]).ok();
    t.git(&["commit", "-q", "--amend", "--no-edit"]).ok();
    let r = t.steps(&["verify", "--merged", "HEAD"]);
    assert_eq!(r.code(), Some(3), "{}", r.explain());
    let out = r.stdout();
    assert!(out.contains("problem: src/parse.c: the merge holds other content than the run's head (+1 -1 lines against the run's head)"), "{out}");
    assert!(
        out.contains("problem: CONTRIBUTORS: changed by the merge, and by no step of the run"),
        "{out}"
    );
    assert!(!out.contains("NEWS"), "{out}");
    assert!(
        r.stderr().contains("2 problem(s) with squash"),
        "{}",
        r.explain()
    );
    // A trailer edited by hand.
    t.git(&["reset", "-q", "--hard", "HEAD@{1}"]).ok();
    let forged = text.replace("Steps-Count: 3", "Steps-Count: 2");
    t.git(&["commit", "-q", "--amend", "-m", &forged]).ok();
    let r = t.steps(&["verify", "--merged", "HEAD"]);
    assert_eq!(r.code(), Some(3), "{}", r.explain());
    assert!(
        r.stdout()
            .contains("its Steps-Count trailer says \"2\", but the run's history"),
        "{}",
        r.explain()
    );
    // A run that was never kept: nothing to audit it against.
    let _ = bare;
    t.git(&["update-ref", "-d", "refs/steps/runs/fix-parser"])
        .ok();
    t.git(&["push", "-q", "origin", ":refs/steps/runs/fix-parser"])
        .ok();
    let r = t.steps(&["verify", "--merged", "HEAD", "--remote", "origin"]);
    assert_eq!(r.code(), Some(3), "{}", r.explain());
    assert!(
        r.stdout()
            .contains("refs/steps/runs/fix-parser does not exist on origin"),
        "{}",
        r.explain()
    );
}

#[test]
fn a_rebase_merge_and_a_true_merge_verify() {
    let (t, _bare) = run_applied();
    t.steps(&["archive"]).ok();
    // main moves on meanwhile (another change), then the run is rebased
    // onto it and fast-forwarded: each step keeps its receipt.
    t.git(&["checkout", "-q", "main"]).ok();
    t.write("OTHER", "someone else's change\n");
    t.commit_all("unrelated");
    t.git(&["checkout", "-q", "steps/fix-parser"]).ok();
    t.git(&["rebase", "-q", "main"]).ok();
    t.git(&["checkout", "-q", "main"]).ok();
    t.git(&["merge", "-q", "--ff-only", "steps/fix-parser"])
        .ok();
    // Plain git sees the copied receipts on main.
    let ids = t.git_out(&[
        "log",
        "--reverse",
        "--format=%(trailers:key=Step-Id,valueonly,separator=)",
        "main~3..main",
    ]);
    assert_eq!(
        ids.split_whitespace().collect::<Vec<_>>(),
        ["s1", "s2", "s3"]
    );
    let v = t
        .steps(&["--json", "verify", "--merged", "main"])
        .ok()
        .json();
    assert_eq!(v["data"]["kind"], "rebase", "{v}");
    assert_eq!(v["data"]["ok"], true, "{v}");
    assert_eq!(v["data"]["steps"], 3);
    // A copied receipt whose step differs from the run's: named.
    t.git(&["checkout", "-q", "-b", "tampered", "main~1"]).ok();
    let msg = t.git_out(&["log", "-1", "--format=%B", "main"]);
    t.write("NEWS", "parser fixed\n");
    t.git(&["add", "-A"]).ok();
    t.git(&[
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        &msg.replace("Step-Id: s3", "Step-Id: s9"),
    ])
    .ok();
    let r = t.steps(&["verify", "--merged", "tampered", "--run", "fix-parser"]);
    assert_eq!(r.code(), Some(3), "{}", r.explain());
    assert!(r.stdout().contains("copies step s9"), "{}", r.explain());

    // A true merge of the (kept) run into a branch from before the rebase.
    t.git(&["checkout", "-q", "-b", "merged", "main~3"]).ok();
    t.git(&[
        "merge",
        "-q",
        "--no-ff",
        "--no-edit",
        "refs/steps/runs/fix-parser",
    ])
    .ok();
    let v = t
        .steps(&["--json", "verify", "--merged", "merged"])
        .ok()
        .json();
    assert_eq!(v["data"]["kind"], "merge", "{v}");
    assert_eq!(v["data"]["ok"], true, "{v}");
}

#[test]
fn archive_moves_forward_only_and_a_finished_agent_run_is_kept() {
    let (t, bare) = run_applied();
    let r = t.steps(&["archive"]).ok();
    assert!(
        r.stdout().starts_with("kept run fix-parser at "),
        "{}",
        r.explain()
    );
    let r = t.steps(&["archive"]).ok();
    assert!(r.stdout().starts_with("already kept:"), "{}", r.explain());
    // Another history under the same id is refused, not overwritten.
    let tree = t.git_out(&["hash-object", "-w", "-t", "tree", "/dev/null"]);
    let orphan = t.run_cmd(
        {
            let mut c = std::process::Command::new("git");
            c.args(["commit-tree", tree.trim(), "-m", "another run"])
                .current_dir(&t.work);
            hermetic(&mut c, &t.home());
            c
        },
        "git commit-tree".into(),
        None,
    );
    let orphan = orphan.stdout().trim().to_string();
    t.git(&[
        "push",
        "-q",
        "-f",
        "origin",
        &format!("{orphan}:refs/steps/runs/fix-parser"),
    ])
    .ok();
    let r = t.steps(&["archive"]);
    assert_eq!(r.code(), Some(3), "{}", r.explain());
    assert!(
        r.stderr().contains("does not descend from it"),
        "{}",
        r.explain()
    );
    let kept = t.git_out(&[
        "--git-dir",
        bare.to_str().unwrap(),
        "rev-parse",
        "refs/steps/runs/fix-parser",
    ]);
    assert_eq!(kept.trim(), orphan, "left as it was");

    // run --decider: when the decider says done, the run is kept.
    let t2 = TestRepo::new();
    let bare2 = t2.with_local_bare();
    let plan = t2.plan(
        "p.jsonl",
        &[line(json!({"id": "d1", "files": {"a": "1\n"}}))],
    );
    let doc = t2
        .steps(&[
            "--json",
            "run",
            "--decider",
            &format!("'{BIN}' replay-decider '{}'", plan.display()),
        ])
        .ok()
        .json();
    assert_eq!(
        doc["data"]["archived"]["refname"], "refs/steps/runs/main",
        "{doc}"
    );
    let kept = t2.git_out(&[
        "--git-dir",
        bare2.to_str().unwrap(),
        "rev-parse",
        "refs/steps/runs/main",
    ]);
    assert_eq!(kept.trim(), t2.git_out(&["rev-parse", "main"]).trim());
}

/// What real merges look like: the target branch moved (on the same file,
/// merged cleanly by git), a forge's squash text around the trailers, a
/// run merged in two rebase parts, a fork clone with two remotes, a shallow
/// CI clone, a box behind the remote, and trailers that are not what
/// merge-message writes.
#[test]
fn real_merges_verify_and_odd_ones_are_named() {
    let t = TestRepo::fresh();
    let ten: String = (1..=10).map(|i| format!("{i}\n")).collect();
    t.write("f.txt", &ten);
    t.commit_all("base");
    let bare = t.tmp.path().join("remote.git");
    t.git(&["init", "-q", "--bare", "-b", "main", bare.to_str().unwrap()])
        .ok();
    t.git(&["remote", "add", "origin", bare.to_str().unwrap()])
        .ok();
    t.git(&["push", "-q", "origin", "main"]).ok();
    t.steps(&["init", "--run", "r1"]).ok();
    let one = ten.replacen("1\n", "ONE\n", 1);
    let p = t.plan(
        "p.jsonl",
        &[line(
            json!({"id": "s1", "files": {"f.txt": one}, "message": "line one"}),
        )],
    );
    t.steps(&["apply", p.to_str().unwrap()]).ok();
    // Another box of the same run pushes s2; this box is behind.
    let other = t.clone_with("other", &[bare.to_str().unwrap()]);
    other.git(&["config", "--unset", "steps.branch"]).ok();
    other.steps(&["-q", "init", "--run", "r1"]).ok();
    let p2 = t.plan(
        "p2.jsonl",
        &[
            line(json!({"id": "s1", "files": {"f.txt": one}, "message": "line one"})),
            line(json!({"id": "s2", "files": {"g.txt": "g\n"}, "message": "add g"})),
        ],
    );
    other.steps(&["apply", p2.to_str().unwrap()]).ok();
    let r = t.steps(&["merge-message"]).ok();
    assert!(
        r.stderr()
            .contains("the message describes the durable head"),
        "{}",
        r.explain()
    );
    assert!(r.stdout().contains("Steps-Count: 2"), "{}", r.explain());
    let text = r.stdout();
    // main moves on: line 10 of the same file.
    t.git(&["checkout", "-q", "main"]).ok();
    t.write("f.txt", &ten.replace("10\n", "TEN\n"));
    t.commit_all("line ten");
    t.git(&["push", "-q", "origin", "main"]).ok();
    t.git(&["checkout", "-q", "steps/r1"]).ok();
    t.steps(&["resume"]).ok();
    t.git(&["checkout", "-q", "main"]).ok();
    // A forge's squash: its own title and list, our text, then its rule
    // and co-author paragraph.
    t.git(&["merge", "-q", "--squash", "steps/r1"]).ok();
    let forge = format!("Fix lines (#12)\n\n* step s1: line one\n\n{text}\n---------\n\nCo-authored-by: A Reviewer <r@example.com>\n");
    t.git(&["commit", "-q", "-m", &forge]).ok();
    assert_eq!(
        t.read("f.txt"),
        ten.replacen("1\n", "ONE\n", 1).replace("10\n", "TEN\n")
    );
    let v = t
        .steps(&["--json", "verify", "--merged", "HEAD"])
        .ok()
        .json();
    assert_eq!(
        (v["data"]["kind"].as_str(), v["data"]["ok"].as_bool()),
        (Some("squash"), Some(true)),
        "{v}"
    );
    // The same squash with the forge's own message only: named with --run,
    // held against the kept head.
    t.git(&[
        "commit",
        "-q",
        "--amend",
        "-m",
        "Fix lines (#12)\n\n* step s1: line one\n* step s2: add g\n",
    ])
    .ok();
    t.steps(&["verify", "--merged", "HEAD"]).code_is(1);
    let v = t
        .steps(&["--json", "verify", "--merged", "HEAD", "--run", "r1"])
        .ok()
        .json();
    assert_eq!(v["data"]["ok"], true, "{v}");
    // Trailers that are not merge-message's.
    t.git(&[
        "commit",
        "-q",
        "--amend",
        "-m",
        &text.replace("Steps-Run: r1", "Steps-Run: r*"),
    ])
    .ok();
    let r = t.steps(&["verify", "--merged", "HEAD"]);
    assert_eq!(r.code(), Some(1), "{}", r.explain());
    assert!(r.stderr().contains("is not a run id"), "{}", r.explain());
    let head = t.git_out(&["rev-parse", "steps/r1"]).trim().to_string();
    t.git(&[
        "commit",
        "-q",
        "--amend",
        "-m",
        &text.replace(&head, &head[..12]),
    ])
    .ok();
    let r = t.steps(&["verify", "--merged", "HEAD"]);
    assert_eq!(r.code(), Some(3), "{}", r.explain());
    assert!(
        r.stdout().contains("is not a full commit id"),
        "{}",
        r.explain()
    );

    // A fork: the run is kept on `upstream`; `origin` is the user's fork.
    let fork = t.clone_with("fork", &[bare.to_str().unwrap()]);
    fork.git(&["remote", "rename", "origin", "upstream"]).ok();
    let fork_bare = t.tmp.path().join("fork.git");
    t.git(&[
        "clone",
        "-q",
        "--bare",
        bare.to_str().unwrap(),
        fork_bare.to_str().unwrap(),
    ])
    .ok();
    t.git(&[
        "--git-dir",
        fork_bare.to_str().unwrap(),
        "update-ref",
        "-d",
        "refs/steps/runs/r1",
    ])
    .ok();
    fork.git(&["remote", "add", "origin", fork_bare.to_str().unwrap()])
        .ok();
    t.git(&["commit", "-q", "--amend", "-m", &text]).ok();
    t.git(&["push", "-q", "-f", "origin", "main"]).ok();
    fork.git(&["fetch", "-q", "upstream"]).ok();
    let r = fork.steps(&["verify", "--merged", "upstream/main"]).ok();
    assert!(
        r.stderr().contains("the run is kept on upstream"),
        "{}",
        r.explain()
    );

    // A shallow CI clone (actions/checkout's depth 1) is made whole from
    // its remote, said on stderr, then checked.
    let url = format!("file://{}", bare.display());
    let shallow = t.clone_with("ci", &["--depth", "1", &url]);
    assert_eq!(
        shallow
            .git_out(&["rev-parse", "--is-shallow-repository"])
            .trim(),
        "true"
    );
    let r = shallow.steps(&["verify", "--merged", "main"]);
    assert_eq!(r.code(), Some(0), "{}", r.explain());
    assert!(
        r.stderr()
            .contains("this clone was shallow: fetched its whole history from origin"),
        "{}",
        r.explain()
    );
    assert_eq!(
        shallow
            .git_out(&["rev-parse", "--is-shallow-repository"])
            .trim(),
        "false"
    );
    // One that no remote can make whole is refused with the fix, never
    // given a verdict on a cut history.
    let cut = t.clone_with("cut", &["--depth", "1", &url]);
    cut.git(&["remote", "remove", "origin"]).ok();
    let r = cut.steps(&["verify", "--merged", "main"]);
    assert_eq!(r.code(), Some(1), "{}", r.explain());
    assert!(
        r.stderr().contains("no remote made it whole")
            && r.stderr().contains("git fetch --unshallow"),
        "{}",
        r.explain()
    );
}

/// A run merged in two rebase merges, with another change landing on the
/// target between them: each part verifies.
#[test]
fn a_run_rebase_merged_in_two_parts_verifies() {
    let (t, _bare) = run_applied();
    t.steps(&["archive"]).ok();
    // Part one: s1 and s2.
    t.git(&["checkout", "-q", "main"]).ok();
    t.git(&["merge", "-q", "--ff-only", "steps/fix-parser~1"])
        .ok();
    let v = t
        .steps(&["--json", "verify", "--merged", "main"])
        .ok()
        .json();
    assert_eq!(
        (v["data"]["kind"].as_str(), v["data"]["steps"].as_u64()),
        (Some("rebase"), Some(2)),
        "{v}"
    );
    // Something else lands; then s3, rebased onto it.
    t.write("OTHER", "x\n");
    t.commit_all("unrelated");
    t.git(&["cherry-pick", "steps/fix-parser"]).ok();
    let v = t
        .steps(&["--json", "verify", "--merged", "main"])
        .ok()
        .json();
    assert_eq!(v["data"]["ok"], true, "{v}");
    assert_eq!(v["data"]["steps"], 3, "{v}");
}

/// GitHub's default squash message copies every commit's message, each
/// behind "* ", so the receipts of all the steps: `verify --merged` calls
/// it a squash (it called it a rebase copy of the last step), says why,
/// and checks it against the whole run.
#[test]
fn a_forges_default_squash_message_is_a_squash_of_the_whole_run() {
    let (t, _bare) = run_applied();
    t.steps(&["archive"]).ok();
    let body = forge_body(&t, "main..steps/fix-parser");
    assert_eq!(body.len(), 3, "{body:?}");
    let forge = format!(
        "Fix the parser (#7)\n\n{}\n\n---------\n\nCo-authored-by: A Reviewer <r@example.com>\n",
        body.join("\n\n")
    );
    squash(&t, &forge);
    assert_eq!(verdict(&t, "main", &[]), ("squash".to_string(), true, 3));
    let v = t
        .steps(&["--json", "verify", "--merged", "main"])
        .ok()
        .json();
    assert!(
        v["data"]["notes"]
            .to_string()
            .contains("copies the receipts of 3 steps"),
        "{v}"
    );
    // A reviewer's change on top is still named, path by path.
    t.write("NEWS", "parser fixed, reviewed\n");
    t.git(&["commit", "-q", "-a", "--amend", "--no-edit"]).ok();
    let r = t.steps(&["verify", "--merged", "main"]);
    assert_eq!(r.code(), Some(3), "{}", r.explain());
    assert!(r.stdout().contains("NEWS"), "{}", r.explain());
}

/// Start `git steps archive` in `t`, held after it read the kept ref
/// (`archive-read@<step>`), and wait until it is there.
fn archive_held(t: &TestRepo, step: &str, gate: &std::path::Path) -> std::process::Child {
    std::fs::create_dir_all(gate).unwrap();
    let mut cmd = t.steps_command(&["archive"]);
    cmd.env(
        "GIT_STEPS_PAUSE",
        format!("archive-read@{step}:{}", gate.display()),
    )
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    wait_for(&gate.join("reached"), "archive at archive-read");
    child
}

/// Two boxes keep the same run at once, one at a later head: the one held
/// after its read loses the compare-and-swap, reads again and finds the
/// later head kept: exit 0, "already kept", and the ref never moves back
/// (before: exit 4, and exit 3 "does not descend" when rerun).
#[test]
fn two_boxes_keeping_a_run_at_once_both_succeed_and_it_never_moves_back() {
    let (t, bare) = run_applied();
    let kept = || {
        t.git_out(&[
            "--git-dir",
            bare.to_str().unwrap(),
            "rev-parse",
            "refs/steps/runs/fix-parser",
        ])
        .trim()
        .to_string()
    };
    let other = t.clone_with("other", &[bare.to_str().unwrap()]);
    other.git(&["config", "--unset", "steps.branch"]).ok();
    other.steps(&["-q", "init", "--run", "fix-parser"]).ok();
    let head = t
        .git_out(&["rev-parse", "steps/fix-parser"])
        .trim()
        .to_string();
    // This box keeps the run's head (s3), held after its read found
    // nothing kept; meanwhile the other box goes on with the run (s4) and
    // keeps its later head.
    let gate = t.tmp.path().join("gate");
    let held = archive_held(&t, "s3", &gate);
    let p4 = other.plan(
        "p4.jsonl",
        &[line(
            json!({"id": "s4", "files": {"LATER": "4\n"}, "message": "later"}),
        )],
    );
    other.steps(&["apply", p4.to_str().unwrap()]).ok();
    let later = other
        .git_out(&["rev-parse", "steps/fix-parser"])
        .trim()
        .to_string();
    assert_ne!(later, head);
    let won = other.steps(&["archive"]).ok();
    assert!(won.stdout().starts_with("kept run"), "{}", won.explain());
    assert_eq!(kept(), later);
    std::fs::write(gate.join("go"), b"").unwrap();
    let lost = held.wait_with_output().unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&lost.stdout),
        String::from_utf8_lossy(&lost.stderr),
    );
    assert_eq!(lost.status.code(), Some(0), "{out}{err}");
    assert!(
        out.starts_with(&format!("already kept: run fix-parser at {}", &later[..12])),
        "{out}{err}"
    );
    assert_eq!(kept(), later, "never moved back");
}

/// From an outside review. (a) A run merged in two parts, the second a
/// forge's default squash (several copied receipts) on top of the first:
/// the squash stands for its steps alone, not a chain with the part below
/// it. (b) A squash message a person edited, keeping one step's receipt
/// above their own prose, named with --run: held against the kept run,
/// not taken for a copy of that one step.
#[test]
fn a_default_squash_after_an_earlier_part_and_an_edited_message_verify() {
    let (t, _bare) = run_applied();
    t.steps(&["archive"]).ok();
    let s1 = t
        .git_out(&["rev-parse", "steps/fix-parser~2"])
        .trim()
        .to_string();
    // Part one: main fast-forwards to s1.
    t.git(&["checkout", "-q", "main"]).ok();
    t.git(&["merge", "-q", "--ff-only", &s1]).ok();
    // Part two: s2 and s3 squashed with the forge's default message.
    let body = forge_body(&t, "main..steps/fix-parser");
    assert_eq!(body.len(), 2, "{body:?}");
    let forge = format!(
        "Test and news (#8)\n\n{}\n\n---------\n\nCo-authored-by: A Reviewer <r@example.com>\n",
        body.join("\n\n")
    );
    t.git(&["merge", "-q", "--squash", "steps/fix-parser"]).ok();
    t.git(&["commit", "-q", "-m", &forge]).ok();
    assert_eq!(verdict(&t, "main", &[]), ("squash".to_string(), true, 3));
    // (b) The whole run squashed, its message edited down to s1's receipt
    // and a sentence of the reviewer's.
    t.git(&["reset", "-q", "--hard", "HEAD~2"]).ok();
    t.git(&["merge", "-q", "--squash", "steps/fix-parser"]).ok();
    let s1_message = t.git_out(&["log", "-1", "--format=%B", &s1]);
    let edited = format!(
        "Fix the parser (#9)\n\n{}\n\nThe tests and the NEWS entry came later in the same run.\n",
        s1_message.trim()
    );
    t.git(&["commit", "-q", "-m", &edited]).ok();
    assert_eq!(
        verdict(&t, "main", &["--run", "fix-parser"]),
        ("squash".to_string(), true, 3)
    );
}

/// From a second outside review: a run merged in three parts. s1 is
/// fast-forwarded and a person then edits the same file on main; s2 and
/// s3 go in a forge's default squash; s4, made later, goes in a squash of
/// its own whose message ends with GitLab's `See merge request` line.
/// Each part is checked from the step before it (not from the run's base,
/// which made the person's edit "resolved by hand"), a part below a squash
/// of several is an earlier part (not a copy of its last step), and the
/// GitLab line is a forge's, not prose.
#[test]
fn a_run_merged_in_three_parts_each_part_verifies() {
    let (t, _bare) = run_applied();
    let s1 = t
        .git_out(&["rev-parse", "steps/fix-parser~2"])
        .trim()
        .to_string();
    t.git(&["checkout", "-q", "main"]).ok();
    t.git(&["merge", "-q", "--ff-only", &s1]).ok();
    t.write(
        "src/parse.c",
        "int parse(void) { return 0; } /* reviewed */\n",
    );
    t.commit_all("a reviewer's note on the parser");
    // Part two: s2 and s3, the forge's default message.
    let body = forge_body(&t, "main..steps/fix-parser");
    assert_eq!(body.len(), 2, "{body:?}");
    t.git(&["merge", "-q", "--squash", "steps/fix-parser"]).ok();
    t.git(&[
        "commit",
        "-q",
        "-m",
        &format!("Tests and news (#8)\n\n{}\n", body.join("\n\n")),
    ])
    .ok();
    // The run goes on: s4.
    let plan = std::fs::read_to_string(t.tmp.path().join("plan.jsonl")).unwrap();
    let p4 = t.plan(
        "plan4.jsonl",
        &[
            plan.trim_end().to_string(),
            line(json!({"id": "s4", "files": {"CHANGES": "4\n"}, "message": "and a changelog"})),
        ],
    );
    t.git(&["checkout", "-q", "steps/fix-parser"]).ok();
    t.steps(&["apply", p4.to_str().unwrap()]).ok();
    t.steps(&["archive"]).ok();
    let s4_message = t.git_out(&["log", "-1", "--format=%B", "steps/fix-parser"]);
    t.git(&["checkout", "-q", "main"]).ok();
    t.git(&["merge", "-q", "--squash", "steps/fix-parser"]).ok();
    t.git(&[
        "commit",
        "-q",
        "-m",
        &format!("{}\n\nSee merge request acme/app!12\n", s4_message.trim()),
    ])
    .ok();
    for (rev, steps) in [("HEAD~1", 3), ("HEAD", 4)] {
        let v = t.steps(&["--json", "verify", "--merged", rev]).ok().json();
        assert_eq!(
            (v["data"]["ok"].as_bool(), v["data"]["steps"].as_u64()),
            (Some(true), Some(steps)),
            "{rev}: {v}"
        );
    }
}
