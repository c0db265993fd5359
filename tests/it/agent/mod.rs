//! Issue 7: the agent loop. `run --decider` against real repositories and
//! remotes, deciders that fail in every way, refusals, and random kills
//! with a decider that answers differently on every call, like a model.
//!
//! Grouped by topic: `asking` (the loop, the context a decider sees, the
//! example decider), `refusals` (failing deciders, refused decisions, a
//! journal that disagrees with the log) and `recorded_decisions` (a decision
//! with a receipt or kept in the journal is applied, never asked again: on
//! resume, on a fresh clone of every kind of server, under random kills). The decider helpers
//! they share live here.

mod adopt;
mod asking;
mod mcp;
mod record;
mod recorded_decisions;
mod refusals;
mod undo;

use crate::harness::*;

/// The crash points every write of a step passes, in order (with a remote).
const STEP_POINTS: [&str; 11] = [
    "before-write",
    "objects-written",
    "update-noted",
    "push-sent",
    "pushed",
    "tracking-updated",
    "worktree-staged",
    "ref-updated",
    "worktree-partial",
    "worktree-files",
    "worktree-done",
];

/// Write an executable decider script into the test's home (outside the
/// snapshot) and return the command that runs it.
fn decider(t: &TestRepo, name: &str, body: &str) -> String {
    let path = t.home().join(name);
    std::fs::write(&path, body).unwrap();
    format!("sh '{}'", path.display())
}

fn replay(plan: &std::path::Path) -> String {
    format!("'{BIN}' replay-decider '{}'", plan.display())
}

/// Journal entries on a repository, oldest first: (index, step id, status).
fn journal(git_dir_args: &[&str], t: &TestRepo) -> Vec<(usize, String, String)> {
    let mut exists: Vec<&str> = git_dir_args.to_vec();
    exists.extend(["rev-parse", "--verify", "-q", "refs/steps/journal/main"]);
    if t.git(&exists).out.status.code() == Some(1) {
        return Vec::new();
    }
    let mut args: Vec<&str> = git_dir_args.to_vec();
    args.extend([
        "log",
        "--reverse",
        "--format=%(trailers:key=Journal-Index,valueonly,separator=)|%(trailers:key=Journal-Step-Id,valueonly,separator=)|%(trailers:key=Journal-Status,valueonly,separator=)",
        "refs/steps/journal/main",
    ]);
    t.git_out(&args)
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            (f[0].parse().unwrap(), f[1].to_string(), f[2].to_string())
        })
        .collect()
}
