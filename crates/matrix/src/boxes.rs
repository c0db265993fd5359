//! The matrix's boxes: scratch repositories and bare remotes made for each
//! row, and one run of the binary in a box.
//!
//! Owns the scratch space (on /dev/shm where it exists), the base a box
//! starts from (the user's repository policy copied: attributes, filters,
//! hooks) and the process a row runs. Invariant: every row starts from a
//! box that is the same as the reference run's, and its scratch space is
//! removed when the row ends.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use git2::Repository;

use super::{late_file, Phase, Runner, CACHE_EVERY, ENV_LATE, ENV_REMOTE};
use crate::crash::{self};
use crate::error::{Error, Result};

/// How to run the binary against a scratch box.
#[derive(Debug, Clone)]
pub struct Env {
    /// This binary.
    pub exe: PathBuf,
    pub plan: PathBuf,
    pub runner: Runner,
    /// What every box starts from (None: an empty repository).
    pub base: Option<Base>,
    /// `apply --batch N` (1: a push per step; only for the git-steps runner).
    pub batch: usize,
    /// Every run flushes file by file (`GIT_STEPS_FLUSH=files`), as on a
    /// file system whose syncfs is not known to flush (the power-loss
    /// sweep's `fuse` model).
    pub flush_files: bool,
}

/// The tree every box starts from: the HEAD tree of the repository
/// `crashtest` runs in, as the one commit of a seed repository in scratch
/// space (only the tree's objects are copied: the matrix's cost does not
/// grow with the repository's history, and nothing is written to it).
#[derive(Debug, Clone)]
pub struct Base {
    pub(super) seed: std::sync::Arc<tempfile::TempDir>,
    /// The commit in the repository whose tree this is.
    pub from: git2::Oid,
    /// Files in the tree.
    pub files: usize,
    /// The repository's policy, set in every box: line endings, filter
    /// drivers, signing, hooks (see [`POLICY`]).
    pub policy: Vec<(String, String)>,
}

/// Config that decides what a step stores and how it is committed; a box
/// gets the values the repository has. (The boxes' global config is empty.)
pub(super) const POLICY: &[&str] = &[
    "core.autocrlf",
    "core.eol",
    "commit.gpgsign",
    "gpg.format",
    "gpg.program",
    "gpg.openpgp.program",
    "gpg.x509.program",
    "gpg.ssh.program",
    "gpg.ssh.defaultkeycommand",
    "user.signingkey",
    crate::keys::HOOKS.name,
];

/// The repository's policy config, for the boxes: [`POLICY`], filter
/// drivers, and where its hooks are (as an absolute `core.hooksPath`).
pub(super) fn policy(repo: &Repository) -> Result<Vec<(String, String)>> {
    let cfg = repo.config()?.snapshot()?;
    let mut out = Vec::new();
    let mut entries = cfg.entries(None)?;
    while let Some(e) = entries.next() {
        let e = e?;
        let (Ok(name), Ok(value)) = (e.name(), e.value()) else {
            continue;
        };
        let name = name.to_ascii_lowercase();
        let filter = name.starts_with("filter.")
            && [".clean", ".smudge", ".required", ".process"]
                .iter()
                .any(|k| name.ends_with(k));
        if (POLICY.contains(&name.as_str()) || filter)
            && !out.iter().any(|(k, _): &(String, String)| *k == name)
        {
            out.push((name, value.to_string()));
        }
    }
    // Later entries of one key win in git config: keep the effective value.
    for (k, v) in out.iter_mut() {
        if let Ok(now) = cfg.get_string(k) {
            *v = now;
        }
    }
    if !crate::git::installed_hooks(repo).is_empty() {
        let dir = crate::git::hooks_dir(repo);
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        out.push(("core.hookspath".into(), dir.to_string_lossy().into_owned()));
    }
    Ok(out)
}

impl Base {
    /// The HEAD tree of `repo`; None when HEAD is unborn.
    pub fn of_head(repo: &Repository) -> Result<Option<Base>> {
        let Ok(head) = repo.head() else {
            return Ok(None);
        };
        let commit = head.peel_to_commit()?;
        let tmp = tempfile::Builder::new()
            .prefix("git-steps-crashtest-base-")
            .tempdir_in(scratch_root())
            .map_err(|e| Error::io("cannot make a scratch dir", e))?;
        let mut opts = git2::RepositoryInitOptions::new();
        opts.bare(true).initial_head("main");
        let seed = Repository::init_opts(tmp.path(), &opts)?;
        let (src, dst) = (repo.odb()?, seed.odb()?);
        let mut files = 0;
        let copy = |id: git2::Oid| -> Result<()> {
            if !dst.exists(id) {
                let o = src.read(id)?;
                dst.write(o.kind(), o.data())?;
            }
            Ok(())
        };
        let tree = commit.tree()?;
        copy(tree.id())?;
        let mut failed = None;
        tree.walk(git2::TreeWalkMode::PreOrder, |_, e| {
            // Submodules are commits of other repositories: not copied.
            if e.filemode() == crate::git::MODE_GITLINK as i32 {
                return git2::TreeWalkResult::Skip;
            }
            if e.kind() == Some(git2::ObjectType::Blob) {
                files += 1;
            }
            match copy(e.id()) {
                Ok(()) => git2::TreeWalkResult::Ok,
                Err(err) => {
                    failed = Some(err);
                    git2::TreeWalkResult::Abort
                }
            }
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        // A fixed signature and time: every box starts from the same commit.
        let sig = git2::Signature::new("crashtest", "crashtest@localhost", &git2::Time::new(0, 0))?;
        let base_tree = seed.find_tree(tree.id())?;
        seed.commit(
            Some("refs/heads/main"),
            &sig,
            &sig,
            &format!("crashtest base: the tree of {}", commit.id()),
            &base_tree,
            &[],
        )?;
        Ok(Some(Base {
            seed: std::sync::Arc::new(tmp),
            from: commit.id(),
            files,
            policy: policy(repo)?,
        }))
    }
}

pub(super) fn git_env(cmd: &mut Command) {
    // Scratch runs must not depend on the user's git config (signing,
    // hooks, templates).
    cmd.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE");
}

/// A scratch area: a bare remote and the first box.
pub(super) struct Scratch {
    pub(super) _tmp: tempfile::TempDir,
    pub(super) root: PathBuf,
    pub(super) bare: PathBuf,
}

/// Where scratch runs live: `GIT_STEPS_SCRATCH`, else `/dev/shm` (memory:
/// the matrix kills processes, it does not cut power, so fsync buys nothing
/// there and costs most of the time), else the system temp dir.
pub fn scratch_root() -> PathBuf {
    if let Some(d) = std::env::var_os(crate::keys::SCRATCH.name) {
        return PathBuf::from(d);
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() && tempfile::tempdir_in(shm).is_ok() {
        return shm.to_path_buf();
    }
    std::env::temp_dir()
}

/// A scratch directory; every one has a name of the same length (the
/// power-loss states replace the recorded root's path by their own).
pub(super) fn scratch_dir() -> Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix("git-steps-crashtest-")
        .rand_bytes(8)
        .tempdir_in(scratch_root())
        .map_err(|e| Error::io("cannot make a scratch dir", e))
}

pub(super) fn scratch(env: &Env) -> Result<Scratch> {
    let tmp = scratch_dir()?;
    let root = tmp.path().to_path_buf();
    let bare = root.join("remote.git");
    match &env.base {
        // The remote holds the base on `main`: every box, first or fresh,
        // is a clone of it.
        Some(b) => {
            git2::build::RepoBuilder::new()
                .bare(true)
                .clone(&b.seed.path().to_string_lossy(), &bare)?;
        }
        None => {
            let mut opts = git2::RepositoryInitOptions::new();
            opts.bare(true).initial_head("main");
            Repository::init_opts(&bare, &opts)?;
        }
    }
    Ok(Scratch {
        _tmp: tmp,
        root,
        bare,
    })
}

pub(super) fn new_box(s: &Scratch, env: &Env, n: usize, clone: bool) -> Result<PathBuf> {
    let dir = s.root.join(format!("box{n}"));
    let repo = if clone {
        // Cloned without a checkout: the box's policy (line endings,
        // filter drivers) is set first, then the worktree is written as
        // `git checkout` would write it under that policy.
        let mut co = git2::build::CheckoutBuilder::new();
        co.dry_run();
        git2::build::RepoBuilder::new()
            .with_checkout(co)
            .clone(s.bare.to_str().unwrap_or_default(), &dir)?
    } else {
        let mut opts = git2::RepositoryInitOptions::new();
        opts.initial_head("main");
        Repository::init_opts(&dir, &opts)?
    };
    let mut cfg = repo.config()?.open_level(git2::ConfigLevel::Local)?;
    cfg.set_str(
        crate::keys::REMOTE.name,
        s.bare.to_str().unwrap_or_default(),
    )?;
    // As `git steps init --branch main` would: a clone of an empty remote
    // may name its unborn branch otherwise.
    cfg.set_str(crate::keys::BRANCH.name, "main")?;
    cfg.set_str("user.name", "crashtest")?;
    cfg.set_str("user.email", "crashtest@localhost")?;
    // The `apply` runner's boxes publish the shared hunk cache every
    // [`CACHE_EVERY`] steps and read it on every resume, so the matrix kills
    // at its points and checks that a fresh box resuming from it ends the
    // same.
    if env.runner == Runner::GitSteps {
        cfg.set_i64(crate::keys::CACHE_EVERY.name, CACHE_EVERY as i64)?;
    }
    for (k, v) in env.base.iter().flat_map(|b| &b.policy) {
        cfg.set_str(k, v)?;
    }
    drop(cfg);
    if clone {
        let repo = Repository::open(&dir)?;
        // As the box's own processes see it (`git_env`): its local config only.
        let mut cfg = repo.config()?;
        for level in [
            git2::ConfigLevel::Global,
            git2::ConfigLevel::XDG,
            git2::ConfigLevel::System,
        ] {
            cfg.add_file(Path::new("/dev/null"), level, true)?;
        }
        let head = repo.head().and_then(|h| h.peel_to_commit()).ok();
        if let Some(head) = head {
            let changes = crate::git::tree_changes(&repo, None, Some(&head.tree()?))?;
            let dest = crate::workdir::worktree::Dest {
                run: "-",
                commit: head.id(),
            };
            crate::workdir::worktree::update(&repo, dest, &changes, "-")?;
        }
    }
    Ok(dir)
}

pub(super) struct Outcome {
    pub(super) code: Option<i32>,
    pub(super) killed: bool,
    pub(super) stderr: String,
}

pub(super) fn run_once(env: &Env, dir: &Path, bare: &Path, phase: &Phase) -> Result<Outcome> {
    output(command(env, dir, bare, phase), &env.exe)
}

/// Run `cmd` (this binary, or a recorder around it) to its end.
pub(super) fn output(mut cmd: Command, exe: &Path) -> Result<Outcome> {
    use std::os::unix::process::ExitStatusExt;
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| Error::program(format!("cannot run {}: {e}", exe.display())))?;
    Ok(Outcome {
        code: out.status.code(),
        killed: out.status.signal() == Some(rustix::process::Signal::KILL.as_raw()),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// The command a row runs in `dir` against `bare`, in this phase.
pub(super) fn command(env: &Env, dir: &Path, bare: &Path, phase: &Phase) -> Command {
    let mut cmd = Command::new(&env.exe);
    cmd.arg("-C").arg(dir).arg("-q");
    match env.runner {
        Runner::GitSteps => {
            cmd.arg("apply").arg(&env.plan);
            if env.batch > 1 {
                cmd.arg("--batch").arg(env.batch.to_string());
            }
            if phase.local_only {
                cmd.args(["--remote", ""]);
            }
        }
        Runner::GitStepsRun => {
            let decider = format!(
                "{} replay-decider {}",
                crate::git::shell_word(&env.exe.to_string_lossy()),
                crate::git::shell_word(&env.plan.to_string_lossy())
            );
            // Where the box's answers become durable: the remote, or in a
            // local-only phase the box itself.
            let durable = if phase.local_only { dir } else { bare };
            cmd.args(["run", "--decider", &decider])
                .env(ENV_REMOTE, durable)
                .env(ENV_LATE, late_file(bare));
            if phase.local_only {
                cmd.args(["--remote", ""]);
            }
        }
        Runner::GitStepsUndo => {
            cmd.arg("replay-undo").arg(&env.plan);
            if phase.local_only {
                cmd.args(["--remote", ""]);
            }
        }
        Runner::GitStepsRecord => {
            cmd.arg("replay-record").arg(&env.plan);
            if phase.local_only {
                cmd.args(["--remote", ""]);
            }
        }
        Runner::ClassicDurableLog | Runner::ClassicVolatileLog => {
            cmd.arg("classic-apply")
                .arg(&env.plan)
                .arg("--remote")
                .arg(bare)
                .arg("--log")
                .arg(if env.runner == Runner::ClassicDurableLog {
                    "durable"
                } else {
                    "volatile"
                });
        }
    }
    git_env(&mut cmd);
    cmd.env(
        crate::keys::EFFECT_TRACE.name,
        super::effects::trace_file(bare),
    );
    // (A `GIT_STEPS_FLUSH` the caller set wins: `=syncfs` shows what the
    // fuse model catches in a run that trusts syncfs.)
    if env.flush_files && std::env::var_os(crate::keys::FLUSH.name).is_none() {
        cmd.env(crate::keys::FLUSH.name, "files");
    }
    if phase.after_reboot {
        cmd.env(crate::keys::BOOT_ID.name, "after-a-power-cut");
    } else {
        cmd.env_remove(crate::keys::BOOT_ID.name);
    }
    match &phase.crash {
        Some(c) => cmd.env(crash::ENV, c),
        None => cmd.env_remove(crash::ENV),
    };
    cmd
}

/// The line of a box's stderr that says why it stopped: its `Error:`
/// line, else its last.
pub(super) fn error_line(stderr: &str) -> String {
    stderr
        .lines()
        .find(|l| l.starts_with("Error:"))
        .unwrap_or_else(|| stderr.lines().last().unwrap_or(""))
        .trim_start_matches("Error: ")
        .to_string()
}
