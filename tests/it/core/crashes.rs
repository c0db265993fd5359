//! Crash points: each kills the process where it says, every one resumes to
//! the uninterrupted run's fingerprints, a crash during repair resumes too,
//! and user edits on top of a crashed step are refused and kept.

use crate::harness::*;

#[test]
fn crash_points_kill_the_process_where_they_say() {
    use std::os::unix::process::ExitStatusExt;
    let t = TestRepo::new();
    let s1 = line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}}));
    t.steps_stdin(&["apply", "-"], &s1).ok();
    let s2 = line(serde_json::json!({"id": "s2", "files": {"f": "2\n", "g": "g\n"}}));
    let p = t.plan("s2.jsonl", &[s2]);
    let head = t.head();
    // Objects written, no ref moved: HEAD and worktree unchanged.
    let r = t.steps_env(
        &["apply", p.to_str().unwrap()],
        &[("GIT_STEPS_CRASH", "objects-written@s2")],
    );
    assert_eq!(r.out.status.signal(), Some(9), "{}", r.explain());
    assert_eq!(t.head(), head);
    assert_eq!(t.read("f"), "1\n");
    // A typo in the crash point is refused, not ignored.
    t.steps_env(
        &["apply", p.to_str().unwrap()],
        &[("GIT_STEPS_CRASH", "no-such-point@s2")],
    )
    .code_is(1)
    .stderr_has("unknown crash point");
    // The ref moved but the worktree did not.
    let r = t.steps_env(
        &["apply", p.to_str().unwrap()],
        &[("GIT_STEPS_CRASH", "ref-updated@s2")],
    );
    assert_eq!(r.out.status.signal(), Some(9), "{}", r.explain());
    assert_eq!(t.step_ids(), ["s1", "s2"]);
    assert_eq!(t.read("f"), "1\n");
}

/// A local crash matrix: every step × every crash point, same box. The rerun
/// of the same command must give the uninterrupted run's fingerprints.
#[test]
fn every_crash_point_resumes_to_the_same_fingerprints_locally() {
    use std::os::unix::process::ExitStatusExt;
    let plan = fixture("mixed-30.jsonl");
    let plan_s = plan.to_str().unwrap();
    let reference = TestRepo::new();
    let doc = reference.steps(&["--json", "apply", plan_s]).ok().json();
    let (artifact, history) = (
        doc["data"]["artifact"].clone(),
        doc["data"]["history"].clone(),
    );
    let points: Vec<&str> = git_steps::crash::POINTS
        .iter()
        .filter(|p| p.scope == git_steps::crash::Scope::Step)
        .map(|p| p.name)
        .collect();
    assert!(points.len() >= 6, "{points:?}");
    let ids = plan_ids(&plan);
    // Every point for a few steps of different shapes (rename, symlink, mode
    // change, deletion of several files), each point once for every step.
    let mut runs = 0;
    for (k, point) in points.iter().enumerate() {
        for step in [&ids[6], &ids[12], &ids[19], &ids[28], &ids[k % ids.len()]] {
            let t = TestRepo::new();
            let crash = format!("{point}@{step}");
            let r = t.steps_env(&["apply", plan_s], &[("GIT_STEPS_CRASH", &crash)]);
            {
                assert_eq!(
                    r.out.status.signal(),
                    Some(9),
                    "{crash} did not fire\n{}",
                    r.explain()
                );
            }
            let resumed = t.steps(&["--json", "apply", plan_s]).ok().json();
            assert_eq!(resumed["data"]["artifact"], artifact, "{crash}");
            assert_eq!(resumed["data"]["history"], history, "{crash}");
            assert_eq!(
                t.git_out(&["status", "--porcelain", "--untracked-files=all"]),
                "",
                "{crash}"
            );
            assert_eq!(t.step_ids(), ids, "{crash}");
            runs += 1;
        }
    }
    assert!(runs >= 30);
}

#[test]
fn a_crash_during_repair_resumes_too() {
    use std::os::unix::process::ExitStatusExt;
    let t = TestRepo::new();
    let plan = fixture("eight-steps.jsonl");
    let plan_s = plan.to_str().unwrap();
    let r = t.steps_env(
        &["apply", plan_s],
        &[("GIT_STEPS_CRASH", "worktree-partial@s4")],
    );
    assert_eq!(r.out.status.signal(), Some(9));
    let r = t.steps_env(
        &["apply", plan_s],
        &[("GIT_STEPS_CRASH", "repair-saved@s4")],
    );
    assert_eq!(r.out.status.signal(), Some(9), "{}", r.explain());
    t.steps(&["apply", plan_s])
        .ok()
        .stderr_has("repaired the worktree");
    assert_eq!(t.step_ids(), plan_ids(&plan));
    // Both interrupted repairs saved what they found.
    let rescues = t.git_out(&["for-each-ref", "--format=%(refname)", "refs/steps/rescue/"]);
    assert_eq!(rescues.lines().count(), 2, "{rescues}");
}

#[test]
fn user_edits_on_top_of_a_crashed_step_are_refused_and_kept() {
    use std::os::unix::process::ExitStatusExt;
    let t = TestRepo::new();
    let plan = fixture("eight-steps.jsonl");
    let plan_s = plan.to_str().unwrap();
    let r = t.steps_env(&["apply", plan_s], &[("GIT_STEPS_CRASH", "ref-updated@s3")]);
    assert_eq!(r.out.status.signal(), Some(9));
    t.write("log.txt", "line-1\nline-2\nmy own line\n");
    t.refuses("", 3, &["no step of the run explains"], || {
        t.steps(&["apply", plan_s])
    });
    assert_eq!(t.read("log.txt"), "line-1\nline-2\nmy own line\n");
}
