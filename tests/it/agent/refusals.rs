//! What `run` refuses: a decider that fails in any way (nothing recorded), a
//! decision that reuses an applied id or repeats a change (journaled as
//! refused, asked again), and a journal that disagrees with the log.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::*;

use super::{decider, journal, replay};

/// Every way a decider can fail: exit 1, its stderr quoted, the step
/// index named, nothing recorded or written.
#[test]
fn a_failing_decider_is_reported_with_its_stderr_and_nothing_is_recorded() {
    let cases: &[(&str, &str, &[&str], &str)] = &[
        (
            "non-zero exit",
            "echo 'model overloaded, try later' >&2; exit 7",
            &[],
            "exited with status 7",
        ),
        (
            "not JSON",
            "echo 'model says: sure!'; echo 'half a thought' >&2",
            &[],
            "not one JSON value",
        ),
        ("nothing printed", "true", &[], "printed nothing"),
        (
            "two objects",
            r#"echo '{"id":"a","files":{"a":"1"}} {"id":"b","files":{"b":"1"}}'"#,
            &[],
            "not one JSON value",
        ),
        (
            "unknown field",
            r#"echo '{"id":"a","files":{"a":"1"},"confidence":0.9}'"#,
            &[],
            "confidence",
        ),
        (
            "bad path",
            r#"echo '{"id":"a","files":{"../escape":"1"}}'"#,
            &[],
            "..",
        ),
        (
            "timeout",
            "echo 'thinking' >&2; sleep 30",
            &["--decider-timeout", "0.5"],
            "did not answer within 0.5 s",
        ),
    ];
    for (what, body, extra, needle) in cases {
        let t = TestRepo::new();
        t.write("keep.txt", "user file\n");
        t.commit_all("base");
        let cmd = decider(&t, "d.sh", body);
        let mut args = vec!["run", "--decider", cmd.as_str()];
        args.extend_from_slice(extra);
        let mut started = Instant::now();
        let r = t.refuses(
            what,
            1,
            &[needle, "step index 0", "nothing was recorded"],
            || {
                started = Instant::now();
                t.steps(&args)
            },
        );
        if *what == "non-zero exit" {
            assert!(
                r.stderr().contains("model overloaded, try later"),
                "{}",
                r.explain()
            );
        }
        if *what == "timeout" {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the decider was not killed"
            );
            assert!(r.stderr().contains("thinking"), "{}", r.explain());
        }
        assert!(
            t.git(&["rev-parse", "--verify", "-q", "refs/steps/journal/main"])
                .code()
                != Some(0),
            "{what}: a journal entry was written"
        );
    }
}

/// A decision that reuses an applied id, or repeats a change still in
/// effect, is refused (exit 3), journaled as refused, not applied; the next
/// run asks again and tells the decider why.
#[test]
fn refused_decisions_are_journaled_not_applied_and_asked_again() {
    let t = TestRepo::new();
    let state = t.home().join("answers");
    // Answers come from files the test fills in, one per call.
    let cmd = decider(
        &t,
        "d.sh",
        &format!(
            r#"ctx=$(cat); printf '%s\n' "$ctx" >> '{dir}/contexts'
n=$(ls '{dir}' | grep -c '^used-' || true)
f='{dir}'/answer-$n
if [ -f "$f" ]; then cat "$f"; mv "$f" '{dir}'/used-$n; else echo '{{"done":true}}'; fi
"#,
            dir = state.display()
        ),
    );
    std::fs::create_dir(&state).unwrap();
    let answer = |n: usize, v: Value| {
        std::fs::write(state.join(format!("answer-{n}")), v.to_string()).unwrap()
    };
    answer(
        0,
        json!({"id": "a", "patch": "--- /dev/null\n+++ b/f.txt\n@@ -0,0 +1 @@\n+one\n"}),
    );
    answer(
        1,
        json!({"id": "b", "patch": "--- a/f.txt\n+++ b/f.txt\n@@ -1 +1,2 @@\n one\n+two\n"}),
    );
    t.steps(&["run", "--max-steps", "2", "--decider", &cmd])
        .ok();
    let head = t.head();

    // Same id as an applied step, another decision.
    answer(2, json!({"id": "a", "files": {"g.txt": "x\n"}}));
    let before = t.snapshot();
    let r = t
        .steps(&["--json", "run", "--retries", "0", "--decider", &cmd])
        .code_is(3)
        .stderr_has("step a already has a receipt");
    assert_eq!(r.json()["data"]["kind"], "digest-mismatch");
    assert_eq!(t.head(), head);
    let mut after = t.snapshot();
    assert_ne!(after.refs, before.refs, "the refusal is journaled");
    after.refs = before.refs.clone();
    assert_eq!(after, before, "nothing else changed");
    let j = journal(&[], &t);
    assert_eq!(
        j.last().unwrap(),
        &(2, "a".to_string(), "refused".to_string())
    );

    // A duplicated hunk: appending `two` again after `one`.
    answer(
        3,
        json!({"id": "c", "patch": "--- a/f.txt\n+++ b/f.txt\n@@ -2 +2,2 @@\n two\n+two\n"}),
    );
    let r = t
        .steps(&["--json", "run", "--retries", "0", "--decider", &cmd])
        .code_is(3)
        .stderr_has("repeats a change step b made");
    assert_eq!(r.json()["data"]["kind"], "duplicate-hunk");
    assert_eq!(t.head(), head);
    assert_eq!(t.git_out(&["status", "--porcelain"]), "");
    let j = journal(&[], &t);
    assert_eq!(
        j[j.len() - 2..],
        [
            (2, "a".to_string(), "refused".to_string()),
            (2, "c".to_string(), "refused".to_string())
        ]
    );
    // `status` says so.
    let st = t.steps(&["status"]).ok().stdout();
    assert!(
        st.contains("the last answer for step index 2 (c) was refused"),
        "{st}"
    );

    // A patch that does not apply: exit 1, journaled as refused.
    answer(
        4,
        json!({"id": "d", "patch": "--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n-nope\n+yes\n"}),
    );
    t.steps(&["run", "--retries", "0", "--decider", &cmd])
        .code_is(1);
    assert_eq!(journal(&[], &t).last().unwrap().2, "refused");

    // The next run asks again for index 2, telling the decider why.
    answer(5, json!({"id": "e", "files": {"g.txt": "fine\n"}}));
    t.steps(&["run", "--decider", &cmd]).ok();
    assert_eq!(t.step_ids(), ["a", "b", "e"]);
    let contexts = std::fs::read_to_string(state.join("contexts")).unwrap();
    let last_asks: Vec<Value> = contexts
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|c: &Value| c["step_index"] == 2)
        .collect();
    let told = &last_asks[last_asks.len() - 1]["refused"];
    assert_eq!(told["step_id"], "d", "{contexts}");
    assert!(
        told["reason"].as_str().unwrap().contains("does not apply"),
        "{told}"
    );
}

/// A journal that disagrees with the log is refused: another decision
/// recorded where a step was applied.
#[test]
fn a_journal_that_disagrees_with_the_log_is_refused() {
    let t = TestRepo::new();
    let plan = t.plan(
        "ab.jsonl",
        &[
            r#"{"id":"s1","files":{"a.txt":"a\n"}}"#.to_string(),
            r#"{"id":"s2","files":{"b.txt":"b\n"}}"#.to_string(),
        ],
    );
    // s2 cannot be built yet (an untracked b.txt in its way): the answer is
    // kept in the journal for index 1.
    t.write("b.txt", "mine\n");
    t.steps(&["run", "--decider", &replay(&plan)]).code_is(3);
    assert_eq!(
        journal(&[], &t),
        [(1, "s2".to_string(), "recorded".to_string())]
    );
    std::fs::remove_file(t.work.join("b.txt")).unwrap();
    // Another s2 is applied there by hand.
    let other = t.plan(
        "o.jsonl",
        &[
            r#"{"id":"s1","files":{"a.txt":"a\n"}}"#.to_string(),
            r#"{"id":"s2","files":{"x":"y\n"}}"#.to_string(),
        ],
    );
    t.steps(&["apply", other.to_str().unwrap()]).ok();
    let r = t.refuses("", 3, &["the journal recorded step s2"], || {
        t.steps(&["--json", "run", "--decider", &replay(&plan)])
    });
    assert_eq!(r.json()["data"]["kind"], "journal-mismatch");
    // `verify` reports it too.
    let v = t.steps(&["verify"]).code_is(3).stdout();
    assert!(
        v.contains("problem: journal refs/steps/journal/main: the journal recorded step s2"),
        "{v}"
    );
}

/// A decision kept for an index (its step was blocked by an untracked
/// file) that is later refused (replayed without `--allow-duplicate-hunks`,
/// it repeats a change) is superseded: the decider's next answer, applied
/// with its receipt as the record, is what the log holds there, and
/// neither `run` nor `verify` calls that a disagreement.
#[test]
fn a_kept_decision_refused_later_is_superseded_by_the_next_answer() {
    let t = TestRepo::new();
    let cmd = decider(
        &t,
        "d.sh",
        r#"ctx=$(cat)
case "$ctx" in
  *'"step_index":0'*) printf '%s\n' '{"id":"s1","patch":"--- /dev/null\n+++ b/f.txt\n@@ -0,0 +1 @@\n+x\n"}' ;;
  *'"refused"'*) printf '%s\n' '{"id":"b","files":{"other.txt":"b\n"}}' ;;
  *'"step_index":1'*) printf '%s\n' '{"id":"a","files":{"f.txt":"x\nx\n","c.txt":"c\n"}}' ;;
  *) printf '%s\n' '{"done":true}' ;;
esac
"#,
    );
    t.write("c.txt", "mine\n");
    t.steps(&["run", "--allow-duplicate-hunks", "--decider", &cmd])
        .code_is(3)
        .stderr_has("c.txt is in the worktree");
    assert_eq!(
        journal(&[], &t),
        [(1, "a".to_string(), "recorded".to_string())]
    );
    std::fs::remove_file(t.work.join("c.txt")).unwrap();
    // Replayed without the flag: a duplicated hunk, refused and journaled.
    t.steps(&["run", "--retries", "0", "--decider", &cmd])
        .code_is(3)
        .stderr_has("repeats a change step s1 made");
    assert_eq!(journal(&[], &t).last().unwrap().2, "refused");
    // Asked again: b is applied, with no journal entry of its own.
    t.steps(&["run", "--decider", &cmd]).ok();
    assert_eq!(t.step_ids(), ["s1", "b"]);
    t.steps(&["run", "--decider", &cmd]).ok();
    t.steps(&["verify"]).ok();
}

/// A hook's rejection is the decision's fault: journaled as refused, and
/// the decider is asked again with the hook's reason (not replayed into the
/// same rejection forever).
#[test]
fn an_answer_a_hook_rejects_is_refused_and_asked_again() {
    let t = TestRepo::new();
    // Its own hooks directory, named in the repository's config (a global
    // core.hooksPath, as under the CI's policy, would hide .git/hooks).
    let hooks = t.home().join("hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    t.git(&["config", "core.hooksPath", hooks.to_str().unwrap()])
        .ok();
    let hook = hooks.join("pre-commit");
    crate::harness::script(
        &hook,
        "#!/bin/sh\nif git diff --cached --name-only | grep -q bad.txt; then echo 'no bad files' >&2; exit 1; fi\n",
    );
    t.git(&["config", "steps.hooks", "true"]).ok();
    let log = t.home().join("contexts");
    let cmd = decider(
        &t,
        "d.sh",
        &format!(
            r#"ctx=$(cat); printf '%s\n' "$ctx" >> '{}'
case "$ctx" in
  *'"refused"'*) printf '%s\n' '{{"id":"good","files":{{"good.txt":"g\n"}}}}' ;;
  *'"step_index":0'*) printf '%s\n' '{{"id":"bad","files":{{"bad.txt":"b\n"}}}}' ;;
  *) printf '%s\n' '{{"done":true}}' ;;
esac
"#,
            log.display()
        ),
    );
    let r = t
        .steps(&["--json", "run", "--retries", "0", "--decider", &cmd])
        .code_is(3);
    assert_eq!(r.json()["data"]["kind"], "hook-rejected", "{}", r.explain());
    assert_eq!(
        journal(&[], &t),
        [(0, "bad".to_string(), "refused".to_string())]
    );
    t.steps(&["run", "--decider", &cmd]).ok();
    assert_eq!(t.step_ids(), ["good"]);
    let contexts = std::fs::read_to_string(&log).unwrap();
    assert!(
        contexts.contains("no bad files"),
        "the decider is told why: {contexts}"
    );
}

/// Issue 17 (retries with feedback): a refused or non-applying answer goes
/// back to the decider in the same invocation, with `refused: {step_id,
/// reason}` in its context; each refused answer is still journaled. A
/// decider that answers wrongly once, then right: one `run`, exit 0, one
/// receipt per index.
#[test]
fn a_refused_answer_is_sent_back_and_the_same_run_finishes() {
    let t = TestRepo::new();
    let log = t.home().join("contexts");
    let body = format!(
        r#"ctx=$(cat); printf '%s\n' "$ctx" >> '{}'
case "$ctx" in
  *'"step_index":0'*'"refused"'*) printf '%s\n' '{{"id":"a2","files":{{"f.txt":"one\n"}}}}' ;;
  *'"step_index":0'*) printf '%s\n' '{{"id":"a1","patch":"--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n-nope\n+yes\n"}}' ;;
  *'"step_index":1'*) printf '%s\n' '{{"id":"b","files":{{"g.txt":"two\n"}}}}' ;;
  *) printf '%s\n' '{{"done":true}}' ;;
esac
"#,
        log.display()
    );
    let cmd = decider(&t, "d.sh", &body);
    let r = t.steps(&["--json", "run", "--decider", &cmd]).ok();
    assert!(
        r.stderr().contains("the answer a1 was refused") && r.stderr().contains("retry 1 of 2"),
        "{}",
        r.explain()
    );
    let doc = r.json();
    assert_eq!(doc["data"]["decider_calls"], 4, "a1, a2, b, done");
    assert_eq!(t.step_ids(), ["a2", "b"]);
    assert_eq!(
        journal(&[], &t),
        [(0, "a1".to_string(), "refused".to_string())]
    );
    let contexts: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(contexts[1]["step_index"], 0);
    assert_eq!(contexts[1]["refused"]["step_id"], "a1");
    assert!(
        contexts[1]["refused"]["reason"]
            .as_str()
            .unwrap()
            .contains("does not apply"),
        "{}",
        contexts[1]
    );
    assert!(contexts[2].get("refused").is_none(), "{}", contexts[2]);
    t.steps(&["verify"]).ok();

    // Always wrong: --retries 1 asks twice, journals both, then stops (exit 1).
    let t = TestRepo::new();
    let cmd = decider(
        &t,
        "d.sh",
        r#"cat > /dev/null; printf '%s\n' '{"id":"x","patch":"--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n-nope\n+yes\n"}'
"#,
    );
    let r = t
        .steps(&["--json", "run", "--retries", "1", "--decider", &cmd])
        .code_is(1);
    assert_eq!(r.json()["data"]["step"], "x", "{}", r.explain());
    assert_eq!(journal(&[], &t).len(), 2);
    // steps.retries in git config: 0 asks once.
    t.git(&["config", "steps.retries", "0"]).ok();
    t.steps(&["run", "--decider", &cmd]).code_is(1);
    assert_eq!(journal(&[], &t).len(), 3);
    t.git(&["config", "steps.retries", "-1"]).ok();
    t.steps(&["run", "--decider", &cmd])
        .code_is(1)
        .stderr_has("steps.retries");
    assert_eq!(journal(&[], &t).len(), 3, "a bad setting asks nothing");
}

/// Found by the outside review of issue 32: a decider that leaves a
/// process running in the background (`server &`), which holds its stdout
/// open, held the agent loop until that process ended. Its answer is taken
/// once it exits (after a moment's grace), and the run goes on.
#[test]
fn a_decider_that_leaves_a_process_behind_is_not_waited_for() {
    let t = TestRepo::new();
    t.write("keep.txt", "user file\n");
    t.commit_all("base");
    let cmd = decider(
        &t,
        "d.sh",
        r#"i=$(cat | sed -n 's/.*"step_index": *\([0-9]*\).*/\1/p')
sleep 30 &
if [ "$i" = 0 ]; then printf '%s\n' '{"id":"a","files":{"a.txt":"1\n"}}'; else echo '{"done": true}'; fi
"#,
    );
    let started = Instant::now();
    let r = t.steps(&["run", "--decider", cmd.as_str()]).ok();
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the run waited for the decider's background process: {:?}\n{}",
        started.elapsed(),
        r.explain()
    );
    assert_eq!(t.step_ids(), ["a"], "{}", r.explain());
    assert_eq!(t.read("a.txt"), "1\n");
}

/// The files a step wrote are vouched for by their stat data until the
/// next step of the same process looks at them (`worktree::settled`): an
/// edit made between two steps — by the agent's own tool, here the
/// decider — is seen even when it keeps the file's size and puts its
/// mtime back (its ctime moved), and a staged edit is seen too; a file
/// rewritten with the same bytes is no edit.
#[test]
fn an_edit_between_two_steps_of_one_run_is_seen_whatever_its_stat_data() {
    for (what, edit, dirty) in [
        (
            "same size, mtime put back",
            r#"m=$(stat -c %y "$F"); printf 'ONE\n' > "$F"; touch -d "$m" "$F""#,
            true,
        ),
        (
            "staged, worktree put back",
            r#"printf 'ONE\n' > "$F"; git -C "$W" add f.txt; printf 'one\n' > "$F""#,
            true,
        ),
        (
            "the same bytes written again",
            r#"printf 'one\n' > "$F""#,
            false,
        ),
    ] {
        let t = TestRepo::new();
        let state = t.home().join("answers");
        std::fs::create_dir(&state).unwrap();
        let a = json!({"id": "a", "patch": "--- /dev/null\n+++ b/f.txt\n@@ -0,0 +1 @@\n+one\n"});
        let b =
            json!({"id": "b", "patch": "--- a/f.txt\n+++ b/f.txt\n@@ -1 +1,2 @@\n one\n+two\n"});
        std::fs::write(state.join("a.json"), a.to_string()).unwrap();
        std::fs::write(state.join("b.json"), b.to_string()).unwrap();
        let cmd = decider(
            &t,
            "d.sh",
            &format!(
                r#"cat > /dev/null
F='{f}'; W='{w}'
if [ ! -f '{dir}/asked' ]; then
  touch '{dir}/asked'
  cat '{dir}/a.json'
elif [ ! -f '{dir}/edited' ]; then
  touch '{dir}/edited'
  {edit}
  cat '{dir}/b.json'
else
  echo '{{"done": true}}'
fi
"#,
                f = t.path("f.txt").display(),
                w = t.path("").display(),
                dir = state.display()
            ),
        );
        let r = t.steps(&["run", "--retries", "0", "--decider", &cmd]);
        if dirty {
            let r = r.code_is(3);
            assert!(r.stderr().contains("f.txt"), "{what}: {}", r.explain());
            assert_eq!(t.step_ids(), ["a"], "{what}");
            assert_eq!(t.git_out(&["show", "HEAD:f.txt"]), "one", "{what}");
        } else {
            r.ok();
            assert_eq!(t.step_ids(), ["a", "b"], "{what}");
            assert_eq!(t.read("f.txt"), "one\ntwo\n", "{what}");
            assert_eq!(t.git_out(&["status", "--porcelain"]), "", "{what}");
        }
    }
}
