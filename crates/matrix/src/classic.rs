//! The classic runner: the common broken design, built in for contrast.
//!
//! A cursor checkpointed every 3 steps to the durable domain, receipts kept
//! on the box in a file apart from the artifact, and no look at the log's
//! trailers on resume. Its switch `log` says whether the artifact (the step
//! commits) is pushed after every step (`durable`) or only when the run
//! ends (`volatile`). It exists so that `crashtest --runner classic` can
//! show the rows where this design double-applies or loses hunks — proof
//! that the harness can fail. It shares the step format, patch application
//! and commit format with git-steps, so only the resume logic differs.

use std::fs;
use std::io::Write;
use std::path::Path;

use git2::{Oid, Repository, Signature};

use crate::crash::{self, Point, Scope};
use crate::error::{Error, Result};
use crate::history::receipt;
use crate::plan::reader::Plan;
use crate::sync::remote::Remote;
use crate::tree::build;
use crate::workdir::worktree;

/// Where the classic runner keeps its cursor on the remote.
pub const CURSOR_REF: &str = "refs/classic/cursor";
/// Steps between cursor checkpoints.
pub const CHECKPOINT_EVERY: usize = 3;

/// The classic runner's write boundaries, in the order a step passes them.
pub const POINTS: &[Point] = &[
    Point {
        name: "before-write",
        state: "nothing for the step written",
        scope: Scope::Step,
    },
    Point {
        name: "objects-written",
        state: "the step commit is in the object database",
        scope: Scope::Step,
    },
    Point {
        name: "ref-updated",
        state: "the local branch points at the step commit",
        scope: Scope::Step,
    },
    Point {
        name: "pushed",
        state: "durable log: the remote has the step commit; no receipt yet",
        scope: Scope::RemoteStep,
    },
    Point {
        name: "worktree-done",
        state: "the worktree shows the step; no receipt yet",
        scope: Scope::Step,
    },
    Point {
        name: "receipt-written",
        state: "the step's receipt is in the box's receipt file",
        scope: Scope::Step,
    },
    Point {
        name: "checkpointed",
        state: "every 3 steps: the cursor is saved on the remote",
        scope: Scope::Resume,
    },
];

/// Whether the classic runner pushes the artifact after every step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Log {
    Durable,
    Volatile,
}

fn receipts_path(repo: &Repository) -> std::path::PathBuf {
    repo.path().join("classic-receipts")
}

fn fire(name: &'static str, step: &str) {
    // The classic points share the environment variable; names are checked
    // against the classic list by the matrix, not git-steps' list.
    if let Ok(spec) = std::env::var(crash::ENV) {
        if spec == format!("{name}@{step}") {
            let _ = rustix::process::kill_process(
                rustix::process::getpid(),
                rustix::process::Signal::KILL,
            );
        }
    }
}

fn read_cursor(repo: &Repository, remote: &Remote) -> Result<usize> {
    // The cursor is a blob on the remote: fetch it by ref.
    let mut r = repo.remote_anonymous(&remote.spec)?;
    let spec = format!("+{CURSOR_REF}:{CURSOR_REF}");
    let _ = r.fetch(&[spec.as_str()], None, None);
    let found = r
        .list()?
        .iter()
        .find(|h| h.name() == CURSOR_REF)
        .map(|h| h.oid());
    match found {
        Some(oid) => {
            let blob = repo.find_blob(oid)?;
            Ok(String::from_utf8_lossy(blob.content())
                .trim()
                .parse()
                .unwrap_or(0))
        }
        None => Ok(0),
    }
}

fn write_cursor(repo: &Repository, remote: &Remote, cursor: usize) -> Result<()> {
    let blob = repo.blob(cursor.to_string().as_bytes())?;
    repo.reference(CURSOR_REF, blob, true, "classic: checkpoint")?;
    let mut r = repo.remote_anonymous(&remote.spec)?;
    r.push(&[format!("+{CURSOR_REF}:{CURSOR_REF}").as_str()], None)?;
    Ok(())
}

fn push_branch(repo: &Repository, remote: &Remote, branch: &str) -> Result<()> {
    let mut r = repo.remote_anonymous(&remote.spec)?;
    r.push(
        &[format!("+refs/heads/{branch}:refs/heads/{branch}").as_str()],
        None,
    )?;
    Ok(())
}

/// Run (or resume) `plan` the classic way in the repository at `dir`.
pub fn run(
    dir: &Path,
    plan: &Plan,
    remote: &Remote,
    branch: &str,
    run_id: &str,
    log: Log,
) -> Result<()> {
    crate::git::setup()?;
    let repo = Repository::open(dir)?;
    let refname = format!("refs/heads/{branch}");
    // Catch up with the remote's artifact if the box is new (no trailer check:
    // whatever the remote has is taken as it is).
    if repo.refname_to_id(&refname).is_err() {
        let mut r = repo.remote_anonymous(&remote.spec)?;
        let spec = format!("+{refname}:{refname}");
        let _ = r.fetch(&[spec.as_str()], None, None);
        if repo.refname_to_id(&refname).is_ok() {
            repo.set_head(&refname)?;
            repo.checkout_head(Some(git2::build::CheckoutBuilder::new().force()))?;
        }
    }
    let cursor = read_cursor(&repo, remote)?;
    let done: Vec<String> = fs::read_to_string(receipts_path(&repo))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    let sig = Signature::now("classic", "classic@localhost")?;
    for (i, step) in plan.steps()?.enumerate() {
        let step = step?;
        if i < cursor || done.contains(&step.id) {
            continue;
        }
        fire("before-write", &step.id);
        let head = repo.refname_to_id(&refname).ok();
        let parent = head.map(|h| repo.find_commit(h)).transpose()?;
        let base = parent.as_ref().map(|c| c.tree()).transpose()?;
        let applied = build::apply(&repo, base, &step)?;
        let tree = repo.find_tree(applied.tree)?;
        let msg = receipt::message(&step, run_id, i + 1, &applied.summary(), None);
        let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
        let commit: Oid = repo.commit(None, &sig, &sig, &msg, &tree, &parents)?;
        fire("objects-written", &step.id);
        repo.reference(&refname, commit, true, "classic: step")?;
        if repo.head().ok().and_then(|h| h.target()).is_none() || head.is_none() {
            repo.set_head(&refname)?;
        }
        fire("ref-updated", &step.id);
        if log == Log::Durable {
            push_branch(&repo, remote, branch)?;
            fire("pushed", &step.id);
        }
        // As a naive runner does: the files written over whatever is there
        // (git-steps' own update compares each file first), then the index.
        worktree::write_in_place(&repo, &applied.changes)?;
        let mut index = crate::git::index(&repo)?;
        for c in &applied.changes {
            match c.new {
                Some(_) => index.add_path(std::path::Path::new(&c.path))?,
                None => index.remove_path(std::path::Path::new(&c.path))?,
            }
        }
        index.write()?;
        fire("worktree-done", &step.id);
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(receipts_path(&repo))?;
        writeln!(f, "{}", step.id)?;
        fire("receipt-written", &step.id);
        if (i + 1) % CHECKPOINT_EVERY == 0 {
            write_cursor(&repo, remote, i + 1)?;
            fire("checkpointed", &step.id);
        }
    }
    push_branch(&repo, remote, branch)
        .map_err(|e| Error::remote(format!("classic: final push failed: {e}"), false))?;
    Ok(())
}
