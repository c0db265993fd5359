//! Issue 12: a hostile remote, a careless user and a crash at the wrong
//! moment must not get past the invariant. Each test is named after the
//! promise it keeps and drives the real binary against real repositories.
//!
//! Grouped by what is attacked: `hostile_trees` (a remote's tree or a
//! step's symlinks that would reach outside the repository), `worktree`
//! (the user's untracked files and directories in the way),
//! `locks_and_config` (other writers' locks, a killed run's own, and the
//! run's settings in git config), `type_changes` (a path that changes
//! type), `plan_and_history` (the plan and the log must agree) and
//! `remote_writes` (what is written to a remote, and how a failure after
//! the push is reported). The fixture they share lives here.

mod edits_during_a_step;
mod evidence;
mod hostile_trees;
mod large_files;
mod locks_and_config;
mod plan_and_history;
mod power_cut;
mod power_loss;
mod remote_writes;
mod shared_repos;
mod type_changes;
mod worktree;

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
