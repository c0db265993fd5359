//! Client hooks as checks: with `steps.hooks=true`, each step's
//! `pre-commit` and `commit-msg` hooks run before its commit exists.
//!
//! Owns running them and judging what they did. By default no hook runs
//! (`init` and `status` say which the repository has). Invariant: a step's
//! content is its recorded decision, so a hook can stop a step but never
//! change it — a hook that fails, or that changes what would be committed,
//! the message, the index or the worktree, refuses the step (exit 3, its
//! output quoted) before its commit exists; nothing of the step is durable.
//!
//! The hooks see the step as `git commit` shows a commit to them: the
//! step's tree in the index (`GIT_INDEX_FILE`, a private index under
//! `.git/steps/hook/`, cleared at each check, since the real index and the worktree hold the
//! previous step until the step is durable), the message in a file for
//! `commit-msg`, the worktree's top as the working directory. The
//! worktree itself still holds the previous step: a hook that reads files
//! from disk instead of from the index (`git diff --cached`, `git show
//! :path`) checks the previous step's content.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use git2::{Oid, Repository, Status, StatusOptions};

use crate::error::{Error, Refusal, RefusalKind, Result};

/// The hooks a run executes as checks.
#[derive(Debug, Clone)]
pub struct Hooks {
    pre_commit: Option<PathBuf>,
    commit_msg: Option<PathBuf>,
}

/// The hooks git-steps runs on each step: None unless `steps.hooks` is
/// true and the repository has `pre-commit` or `commit-msg`.
pub fn enabled(repo: &Repository, config: &crate::settings::RunConfig) -> Result<Option<Hooks>> {
    if !config.hooks {
        return Ok(None);
    }
    let dir = crate::git::hooks_dir(repo);
    let find = |name: &str| {
        let p = dir.join(name);
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .then_some(p)
    };
    let hooks = Hooks {
        pre_commit: find("pre-commit"),
        commit_msg: find("commit-msg"),
    };
    Ok((hooks.pre_commit.is_some() || hooks.commit_msg.is_some()).then_some(hooks))
}

/// One path a hook must leave as it found it: how it differs from HEAD,
/// and what is on disk there (so a hook that edits a file that was
/// modified already — `record`'s case — is caught too).
type Seen = (String, Status, Option<(Oid, bool)>);

/// Every path of the worktree and index that differs from HEAD or is
/// untracked, with how and with its content on disk.
fn snapshot(repo: &Repository) -> Result<Vec<Seen>> {
    let mut opts = StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false)
        .exclude_submodules(true);
    let workdir = crate::workdir::worktree::workdir(repo)?;
    let mut out = Vec::new();
    for e in repo.statuses(Some(&mut opts))?.iter() {
        let path = String::from_utf8_lossy(e.path_bytes()).into_owned();
        let disk = crate::workdir::worktree::on_disk(&workdir, &path)?
            .map(|(bytes, mode)| -> Result<(Oid, bool)> {
                Ok((
                    Oid::hash_object(git2::ObjectType::Blob, &bytes)?,
                    mode == crate::git::MODE_EXEC,
                ))
            })
            .transpose()?;
        out.push((path, e.status(), disk));
    }
    Ok(out)
}

fn refusal(step: &str, saw: String) -> Error {
    Error::from(Refusal {
        kind: RefusalKind::HookRejected,
        step: Some(step.to_string()),
        saw,
        would: "commit a step its hooks reject, or one they changed (a step's content is its recorded decision)".into(),
        hint: "fix what the hook reports in the plan or decider and give the step a new id, or turn the checks off for this repository (`git config steps.hooks false`); nothing of this step was written".into(),
    })
}

/// A hook's output as a refusal quotes it: the last lines, bounded.
fn quoted(out: &[u8]) -> String {
    let text = String::from_utf8_lossy(out);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = &lines[lines.len().saturating_sub(20)..];
    if tail.is_empty() {
        return "(no output)".into();
    }
    tail.iter()
        .map(|l| format!("\n  | {}", l.chars().take(300).collect::<String>()))
        .collect()
}

/// Ok if the hook `name` exited 0; else its refusal, quoting its output.
fn passed(step: &str, name: &str, out: std::process::Output) -> Result<()> {
    if out.status.success() {
        return Ok(());
    }
    Err(refusal(
        step,
        format!(
            "the {name} hook failed ({}):{}",
            out.status,
            quoted(&[out.stdout, out.stderr].concat())
        ),
    ))
}

fn run(hook: &Path, args: &[&Path], workdir: &Path, index: &Path) -> Result<std::process::Output> {
    // A hook of a step whose runner was killed dies with it, instead of
    // holding its private index while the next run starts: on Linux by
    // the kernel (PR_SET_PDEATHSIG); elsewhere under the supervisor that
    // command effects run under, which kills the hook's session once its
    // runner is gone.
    let supervised = crate::os::portable();
    let mut cmd = if supervised {
        super::supervisor::supervised(hook, args)
    } else {
        let mut cmd = Command::new(hook);
        cmd.args(args);
        crate::os::die_with_parent(&mut cmd);
        cmd
    };
    cmd.current_dir(workdir)
        .env("GIT_INDEX_FILE", index)
        .env("GIT_EDITOR", ":")
        .stdin(Stdio::null());
    // Its output goes to files, not pipes, and only the hook itself is
    // waited for: a hook that leaves a process behind (`sleep 30 &`, a
    // daemon) holds a pipe open until that process ends, and `git commit`
    // does not wait for it either.
    let fail =
        |e: std::io::Error| Error::program(format!("cannot run the hook {}: {e}", hook.display()));
    let (mut out, mut err) = (
        tempfile::tempfile().map_err(fail)?,
        tempfile::tempfile().map_err(fail)?,
    );
    cmd.stdout(out.try_clone().map_err(fail)?)
        .stderr(err.try_clone().map_err(fail)?);
    let status = cmd.spawn().and_then(|mut c| c.wait()).map_err(fail)?;
    let read = |f: &mut std::fs::File| -> std::io::Result<Vec<u8>> {
        use std::io::{Read, Seek};
        f.seek(std::io::SeekFrom::Start(0))?;
        let mut v = Vec::new();
        f.read_to_end(&mut v)?;
        Ok(v)
    };
    let output = std::process::Output {
        status,
        stdout: read(&mut out).map_err(fail)?,
        stderr: read(&mut err).map_err(fail)?,
    };
    // A hook the supervisor could not start is the same error as one
    // that cannot be started directly, not a hook that failed.
    if let Some(why) = supervised
        .then(|| super::supervisor::not_started(output.status, &output.stderr))
        .flatten()
    {
        return Err(fail(std::io::Error::other(why)));
    }
    Ok(output)
}

impl Hooks {
    /// Run the hooks on step `step` whose commit would hold `tree` with
    /// `message`; Ok only if they pass and change nothing.
    pub fn check(&self, repo: &Repository, step: &str, tree: Oid, message: &str) -> Result<()> {
        let workdir = crate::workdir::worktree::workdir(repo)?;
        // Private files for this check, under the runner's lock: what a
        // killed run left here (its index, the index's lock) is cleared
        // first, so it can never block the next step.
        let parent = repo.path().join("steps").join("hook");
        let _ = std::fs::remove_dir_all(&parent);
        std::fs::create_dir_all(&parent)
            .map_err(|e| Error::io(format!("cannot create {}", parent.display()), e))?;
        let dir = tempfile::Builder::new()
            .prefix("check-")
            .tempdir_in(&parent)
            .map_err(|e| Error::io(format!("cannot create a dir in {}", parent.display()), e))?;
        let index_path = dir.path().join("index");
        let msg_path = dir.path().join("COMMIT_EDITMSG");
        let mut index = git2::Index::open(&index_path)?;
        index.read_tree(&repo.find_tree(tree)?)?;
        index.write()?;
        drop(index);
        let before = snapshot(repo)?;
        let result = (|| {
            if let Some(hook) = &self.pre_commit {
                passed(step, "pre-commit", run(hook, &[], &workdir, &index_path)?)?;
            }
            if let Some(hook) = &self.commit_msg {
                std::fs::write(&msg_path, message)
                    .map_err(|e| Error::io(format!("cannot write {}", msg_path.display()), e))?;
                passed(
                    step,
                    "commit-msg",
                    run(hook, &[&msg_path], &workdir, &index_path)?,
                )?;
                if std::fs::read(&msg_path).ok().as_deref() != Some(message.as_bytes()) {
                    return Err(refusal(
                        step,
                        "the commit-msg hook changed the message (the receipt is committed as recorded)".into(),
                    ));
                }
            }
            let mut index = git2::Index::open(&index_path)?;
            if index.write_tree_to(repo)? != tree {
                return Err(refusal(
                    step,
                    "a hook changed what the step would commit (it staged something)".into(),
                ));
            }
            let after = snapshot(repo)?;
            if after != before {
                let changed: Vec<&str> = after
                    .iter()
                    .filter(|a| !before.contains(a))
                    .chain(before.iter().filter(|b| !after.contains(b)))
                    .map(|(p, _, _)| p.as_str())
                    .take(10)
                    .collect();
                return Err(refusal(
                    step,
                    format!(
                        "a hook changed the worktree or the index: {} (the hook's own changes are left there: look at them with `git status`, undo them with `git checkout -- <path>` or `git clean`, before rerunning)",
                        changed.join(", ")
                    ),
                ));
            }
            Ok(())
        })();
        drop(dir);
        let _ = std::fs::remove_dir(&parent);
        result
    }
}
