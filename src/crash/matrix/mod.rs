//! The crash matrix: resume equivalence checked for every step × every
//! crash point × box mode.
//!
//! Owns the acceptance rule shipped as a command: run the plan once
//! uninterrupted for the reference fingerprints; then, in scratch space, for
//! each row crash the run at that point of that step (SIGKILL, through
//! `GIT_STEPS_CRASH`), keep the disk (`survive`) or keep only the remote
//! (`vanish`: resume on a fresh clone), rerun the same command, and compare.
//! Invariant: a row is SAME only when the resumed artifact and history
//! fingerprints equal the reference and the local branch equals the durable
//! one; REFUSED only when the resume exited 3; anything else is DIVERGED.
//! Every run is a real process of this binary against a real bare remote.
//! Every box starts from the same base: the tree of the repository's HEAD
//! when `crashtest` runs inside one ([`Base`]), else an empty repository.

pub mod classic;
pub mod in_place;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use git2::Repository;
use serde::Serialize;

use crate::crash::{self, Scope};
use crate::error::{Error, Result};
use crate::plan::reader::Plan;

/// Which implementation the matrix runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runner {
    GitSteps,
    /// `git-steps run --decider`, the decider replaying the plan.
    GitStepsRun,
    /// `git-steps record`: each step made in the worktree first, by an
    /// agent's own tools, then recorded (see [`in_place`]).
    GitStepsRecord,
    /// `git-steps undo`: the plan applied, its second half undone by one
    /// step, then made again (see [`in_place::replay_undo`]).
    GitStepsUndo,
    /// The classic design with the artifact pushed every step.
    ClassicDurableLog,
    /// The classic design with the artifact pushed only at the end.
    ClassicVolatileLog,
}

impl Runner {
    pub fn name(self) -> &'static str {
        match self {
            Runner::GitSteps => "git-steps",
            Runner::GitStepsRun => "git-steps run --decider",
            Runner::GitStepsRecord => "git-steps record",
            Runner::GitStepsUndo => "git-steps undo",
            Runner::ClassicDurableLog => "classic (durable log)",
            Runner::ClassicVolatileLog => "classic (volatile log)",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BoxMode {
    /// The process dies, the disk is kept.
    Survive,
    /// Only the remote survives: resume starts from a fresh clone.
    Vanish,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    Same,
    Refused,
    Diverged,
}

#[derive(Debug, Clone, Serialize)]
pub struct Fingerprints {
    pub artifact: String,
    pub history: String,
}

/// One row of the matrix.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub step: String,
    pub point: String,
    #[serde(rename = "box")]
    pub box_mode: BoxMode,
    pub verdict: Verdict,
    pub artifact: Option<String>,
    pub history: Option<String>,
    /// Why (refusal message, divergence details), or empty.
    pub reason: String,
    /// Step ids on the durable branch after the resume, oldest first.
    pub receipts: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub same: usize,
    pub refused: usize,
    pub diverged: usize,
}

/// The whole matrix.
#[derive(Debug, Clone, Serialize)]
pub struct Matrix {
    pub runner: Runner,
    pub reference: Fingerprints,
    pub rows: Vec<Row>,
    pub summary: Summary,
}

/// One crash of a row's scenario: arm this point at this step, with these
/// extra arguments (a local-only phase runs with `--remote ""`).
#[derive(Debug, Clone)]
struct Phase {
    crash: Option<String>,
    local_only: bool,
}

/// What to run: a scenario of crashes, then the final resume.
#[derive(Debug, Clone)]
pub struct Cell {
    pub step: String,
    pub point: String,
    pub box_mode: BoxMode,
    phases: Vec<Phase>,
}

/// The final, uninterrupted resume.
const UNARMED: Phase = Phase {
    crash: None,
    local_only: false,
};

fn crash_at(point: &str, step: &str) -> Phase {
    Phase {
        crash: Some(format!("{point}@{step}")),
        local_only: false,
    }
}

/// The points a step passes while it is staged (see `run::commit`): with
/// `--batch N` every step passes them; the rest (push, local branch,
/// worktree, and the resume points that need their work) only the last
/// step of each batch, whose id the batch's flush carries.
pub const STAGING_POINTS: &[&str] = &["before-write", "objects-written"];

/// How often the `apply` runner's boxes publish the shared hunk cache
/// (`steps.cacheEvery`): often enough that every fixture kills at its
/// points and resumes fresh boxes from it, seldom enough that the matrix
/// does not pay a second push at every step.
pub const CACHE_EVERY: usize = 3;

/// The cells of the matrix for `runner` over a plan with these step ids;
/// `batch` is `apply --batch N` (1: a push per step).
pub fn cells(runner: Runner, ids: &[String], batch: usize) -> Vec<Cell> {
    let mut out = Vec::new();
    let boxes = [BoxMode::Survive, BoxMode::Vanish];
    let batch = batch.max(1);
    match runner {
        Runner::GitSteps | Runner::GitStepsRun | Runner::GitStepsRecord | Runner::GitStepsUndo => {
            for (i, step) in ids.iter().enumerate() {
                let batch_end = (i + 1) % batch == 0 || i + 1 == ids.len();
                for p in crash::POINTS {
                    if !batch_end && !STAGING_POINTS.contains(&p.name) {
                        continue;
                    }
                    let phases = match (p.scope, p.name) {
                        (Scope::Step | Scope::RemoteStep, _) => vec![crash_at(p.name, step)],
                        (Scope::Decide, _) if runner == Runner::GitStepsRun => {
                            vec![crash_at(p.name, step)]
                        }
                        // Only the `apply` runner's boxes publish the
                        // shared cache, every [`CACHE_EVERY`] steps
                        // ([`new_box`]): at the flushes that pass a multiple.
                        (Scope::Cache, _)
                            if runner == Runner::GitSteps
                                && crate::sync::share::due(
                                    CACHE_EVERY,
                                    i / batch * batch,
                                    i + 1,
                                ) =>
                        {
                            vec![crash_at(p.name, step)]
                        }
                        // Resume points need something to resume: a first
                        // crash that leaves the work they guard.
                        // `record` writes no worktree file: nothing to repair.
                        (Scope::Resume, "repair-saved") if runner == Runner::GitStepsRecord => {
                            continue
                        }
                        (Scope::Resume, "repair-saved") => {
                            vec![crash_at("worktree-partial", step), crash_at(p.name, step)]
                        }
                        (Scope::Resume, "reconcile-ref") => {
                            vec![crash_at("pushed", step), crash_at(p.name, step)]
                        }
                        (Scope::Resume, "reconcile-pushed") => {
                            // Steps up to this one applied with no remote,
                            // then the run resumes with the remote.
                            let mut first = match ids.get(i + 1) {
                                Some(next) => crash_at("before-write", next),
                                None => Phase {
                                    crash: None,
                                    local_only: true,
                                },
                            };
                            first.local_only = true;
                            vec![first, crash_at(p.name, step)]
                        }
                        _ => continue,
                    };
                    let modes: &[BoxMode] = if p.scope == Scope::Resume {
                        // A fresh clone has no local work for these points.
                        &boxes[..1]
                    } else {
                        &boxes
                    };
                    for &b in modes {
                        out.push(Cell {
                            step: step.clone(),
                            point: p.name.to_string(),
                            box_mode: b,
                            phases: phases.clone(),
                        });
                    }
                }
            }
        }
        Runner::ClassicDurableLog | Runner::ClassicVolatileLog => {
            for (i, step) in ids.iter().enumerate() {
                for p in classic::POINTS {
                    if p.name == "pushed" && runner == Runner::ClassicVolatileLog {
                        continue;
                    }
                    if p.name == "checkpointed" && (i + 1) % classic::CHECKPOINT_EVERY != 0 {
                        continue;
                    }
                    for b in boxes {
                        out.push(Cell {
                            step: step.clone(),
                            point: p.name.to_string(),
                            box_mode: b,
                            phases: vec![crash_at(p.name, step)],
                        });
                    }
                }
            }
        }
    }
    out
}

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
}

/// The tree every box starts from: the HEAD tree of the repository
/// `crashtest` runs in, as the one commit of a seed repository in scratch
/// space (only the tree's objects are copied: the matrix's cost does not
/// grow with the repository's history, and nothing is written to it).
#[derive(Debug, Clone)]
pub struct Base {
    seed: std::sync::Arc<tempfile::TempDir>,
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
const POLICY: &[&str] = &[
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
    "steps.hooks",
];

/// The repository's policy config, for the boxes: [`POLICY`], filter
/// drivers, and where its hooks are (as an absolute `core.hooksPath`).
fn policy(repo: &Repository) -> Result<Vec<(String, String)>> {
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
            .map_err(|e| Error::local(format!("cannot make a scratch dir: {e}")))?;
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

fn git_env(cmd: &mut Command) {
    // Scratch runs must not depend on the user's git config (signing,
    // hooks, templates).
    cmd.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE");
}

/// A scratch area: a bare remote and the first box.
struct Scratch {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    bare: PathBuf,
}

/// Where scratch runs live: `GIT_STEPS_SCRATCH`, else `/dev/shm` (memory:
/// the matrix kills processes, it does not cut power, so fsync buys nothing
/// there and costs most of the time), else the system temp dir.
pub fn scratch_root() -> PathBuf {
    if let Some(d) = std::env::var_os("GIT_STEPS_SCRATCH") {
        return PathBuf::from(d);
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() && tempfile::tempdir_in(shm).is_ok() {
        return shm.to_path_buf();
    }
    std::env::temp_dir()
}

fn scratch(env: &Env) -> Result<Scratch> {
    let tmp = tempfile::Builder::new()
        .prefix("git-steps-crashtest-")
        .tempdir_in(scratch_root())
        .map_err(|e| Error::local(format!("cannot make a scratch dir: {e}")))?;
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

fn new_box(s: &Scratch, env: &Env, n: usize, clone: bool) -> Result<PathBuf> {
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
    cfg.set_str("steps.remote", s.bare.to_str().unwrap_or_default())?;
    // As `git steps init --branch main` would: a clone of an empty remote
    // may name its unborn branch otherwise.
    cfg.set_str("steps.branch", "main")?;
    cfg.set_str("user.name", "crashtest")?;
    cfg.set_str("user.email", "crashtest@localhost")?;
    // The `apply` runner's boxes publish the shared hunk cache every
    // [`CACHE_EVERY`] steps and read it on every resume, so the matrix kills
    // at its points and checks that a fresh box resuming from it ends the
    // same.
    if env.runner == Runner::GitSteps {
        cfg.set_i64(crate::sync::share::CONFIG, CACHE_EVERY as i64)?;
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

struct Outcome {
    code: Option<i32>,
    killed: bool,
    stderr: String,
}

fn run_once(env: &Env, dir: &Path, bare: &Path, phase: &Phase) -> Result<Outcome> {
    use std::os::unix::process::ExitStatusExt;
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
    match &phase.crash {
        Some(c) => cmd.env(crash::ENV, c),
        None => cmd.env_remove(crash::ENV),
    };
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| Error::program(format!("cannot run {}: {e}", env.exe.display())))?;
    Ok(Outcome {
        code: out.status.code(),
        killed: out.status.signal() == Some(libc::SIGKILL),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// Where the matrix's replaying decider finds the durable domain of its box
/// (the scratch bare remote) and where it writes a call that came too late.
pub const ENV_REMOTE: &str = "GIT_STEPS_MATRIX_REMOTE";
pub const ENV_LATE: &str = "GIT_STEPS_MATRIX_LATE";

/// For `run`: the decider is asked for `index`, whose answer is step `id`;
/// why that is too late (its receipt, or a recorded journal entry for the
/// index, is already durable in `bare`: the remote, or the box itself in a
/// local-only phase), or None.
pub fn asked_late(bare: &Path, index: usize, id: &str) -> Result<Option<String>> {
    // libgit2 set up as everywhere else (no CA bundle parsed at start: it
    // would cost each decider call ~30 ms).
    crate::git::enable_fsync()?;
    let repo = Repository::open(bare)?;
    if let Ok(head) = repo.refname_to_id("refs/heads/main") {
        let mut walk = repo.revwalk()?;
        walk.push(head)?;
        walk.simplify_first_parent()?;
        for oid in walk {
            let c = repo.find_commit(oid?)?;
            let receipt = c
                .message()
                .ok()
                .and_then(|m| crate::history::receipt::parse(m).ok());
            if receipt.is_some_and(|r| r.id == id) {
                return Ok(Some(format!(
                    "the decider was asked for step index {index} ({id}) although its receipt {} was durable",
                    crate::git::short(c.id())
                )));
            }
        }
    }
    let head = repo.refname_to_id("refs/steps/journal/main").ok();
    let journal = crate::run::journal::read(&repo, head)?;
    Ok(journal.pending(index).map(|e| {
        format!(
            "the decider was asked for step index {index} although its decision {} was recorded in the journal",
            crate::git::short(e.commit)
        )
    }))
}

/// For `run`: an index whose decision the journal recorded twice means the
/// decider was asked again after its answer was durable.
fn recorded_twice(bare: &Path) -> Result<Option<String>> {
    let repo = Repository::open_bare(bare)?;
    let head = repo.refname_to_id("refs/steps/journal/main").ok();
    let journal = crate::run::journal::read(&repo, head)?;
    let mut seen = std::collections::BTreeMap::new();
    for e in &journal.entries {
        if e.status == crate::run::journal::Status::Recorded {
            *seen.entry(e.index).or_insert(0) += 1;
        }
    }
    Ok(seen.into_iter().find(|(_, n)| *n > 1).map(|(i, n)| {
        format!("the journal recorded {n} decisions for step index {i}: the decider was asked again after its answer was recorded")
    }))
}

/// Where a box's late decider calls are written: beside its remote.
fn late_file(bare: &Path) -> PathBuf {
    bare.with_file_name("late-asks")
}

/// Fingerprints of the durable branch (and every receipt on it, duplicates
/// included, oldest first).
fn durable_fingerprints(bare: &Path) -> Result<(Fingerprints, Vec<String>)> {
    crate::git::enable_fsync()?;
    let repo = Repository::open_bare(bare)?;
    let head = repo.refname_to_id("refs/heads/main").ok();
    let tree = head.map(|h| repo.find_commit(h)?.tree()).transpose()?;
    let artifact = crate::tree::fingerprint::artifact(&repo, tree.as_ref())?;
    let mut pairs: Vec<(String, String)> = Vec::new();
    if let Some(h) = head {
        let mut walk = repo.revwalk()?;
        walk.push(h)?;
        walk.simplify_first_parent()?;
        for oid in walk {
            let c = repo.find_commit(oid?)?;
            if let Ok(r) = c
                .message()
                .map_err(|_| ())
                .and_then(|m| crate::history::receipt::parse(m).map_err(|_| ()))
            {
                pairs.push((r.id, r.decision));
            }
        }
    }
    pairs.reverse();
    let history =
        crate::tree::fingerprint::history(pairs.iter().map(|(a, b)| (a.as_str(), b.as_str())));
    Ok((
        Fingerprints { artifact, history },
        pairs.into_iter().map(|(a, _)| a).collect(),
    ))
}

fn error_line(stderr: &str) -> String {
    stderr
        .lines()
        .find(|l| l.starts_with("Error:"))
        .unwrap_or_else(|| stderr.lines().last().unwrap_or(""))
        .trim_start_matches("Error: ")
        .to_string()
}

/// Run the plan uninterrupted in scratch space: the reference.
pub fn reference(env: &Env) -> Result<Fingerprints> {
    let s = scratch(env)?;
    let dir = new_box(&s, env, 0, env.base.is_some())?;
    let o = run_once(env, &dir, &s.bare, &UNARMED)?;
    if o.code != Some(0) {
        return Err(Error::other(format!(
            "the uninterrupted reference run failed: {}",
            error_line(&o.stderr)
        )));
    }
    Ok(durable_fingerprints(&s.bare)?.0)
}

/// Run one cell: crash, (fresh box), resume, compare.
pub fn run_cell(env: &Env, cell: &Cell, reference: &Fingerprints) -> Result<Row> {
    let s = scratch(env)?;
    let mut dir = new_box(&s, env, 0, env.base.is_some())?;
    let mut fired = 0;
    for (n, phase) in cell.phases.iter().enumerate() {
        let o = run_once(env, &dir, &s.bare, phase)?;
        if o.killed {
            fired += 1;
        }
        if cell.box_mode == BoxMode::Vanish {
            dir = new_box(&s, env, n + 1, true)?;
        }
    }
    let o = run_once(env, &dir, &s.bare, &UNARMED)?;
    let (fp, receipts) = durable_fingerprints(&s.bare)?;
    let mut row = Row {
        step: cell.step.clone(),
        point: cell.point.clone(),
        box_mode: cell.box_mode,
        verdict: Verdict::Same,
        artifact: Some(fp.artifact.clone()),
        history: Some(fp.history.clone()),
        reason: String::new(),
        receipts,
    };
    let armed = cell.phases.iter().filter(|p| p.crash.is_some()).count();
    if fired < armed {
        row.reason = format!("{fired} of {armed} crash(es) fired");
    }
    match o.code {
        Some(0) => {
            let local_agrees = match env.runner {
                Runner::GitSteps
                | Runner::GitStepsRun
                | Runner::GitStepsRecord
                | Runner::GitStepsUndo => {
                    let repo = Repository::open(&dir)?;
                    let local = repo.refname_to_id("refs/heads/main").ok();
                    let durable = Repository::open_bare(&s.bare)?
                        .refname_to_id("refs/heads/main")
                        .ok();
                    local == durable
                }
                _ => true,
            };
            let asked_twice = if env.runner == Runner::GitStepsRun {
                match std::fs::read_to_string(late_file(&s.bare)) {
                    Ok(late) if !late.trim().is_empty() => {
                        Some(late.lines().next().unwrap_or_default().to_string())
                    }
                    _ => recorded_twice(&s.bare)?,
                }
            } else {
                None
            };
            if let Some(why) = asked_twice {
                row.verdict = Verdict::Diverged;
                row.reason = why;
            } else if fp.artifact != reference.artifact
                || fp.history != reference.history
                || !local_agrees
            {
                row.verdict = Verdict::Diverged;
                row.reason = format!(
                    "artifact {} vs reference {}; history {} vs reference {}{}",
                    fp.artifact,
                    reference.artifact,
                    fp.history,
                    reference.history,
                    if local_agrees {
                        ""
                    } else {
                        "; local branch differs from durable"
                    }
                );
            }
        }
        Some(3) => {
            row.verdict = Verdict::Refused;
            row.reason = error_line(&o.stderr);
        }
        other => {
            row.verdict = Verdict::Diverged;
            row.reason = format!("the resume exited {other:?}: {}", error_line(&o.stderr));
        }
    }
    Ok(row)
}

/// Run the whole matrix on `jobs` threads; `progress(done, total)` after each row.
pub fn run(env: &Env, jobs: usize, progress: &(dyn Fn(usize, usize) + Sync)) -> Result<Matrix> {
    crate::git::enable_fsync()?;
    let plan = Plan::open(env.plan.to_str().unwrap_or_default(), &std::env::temp_dir())?;
    let mut ids = Vec::new();
    for s in plan.steps()? {
        ids.push(s?.id);
    }
    if ids.is_empty() {
        return Err(Error::input("the plan holds no steps"));
    }
    let reference = reference(env)?;
    if env.runner == Runner::GitStepsUndo {
        ids = in_place::undo_ids(&ids);
    }
    let cells = cells(env.runner, &ids, env.batch);
    let total = cells.len();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Row>>>> = Mutex::new((0..total).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= total {
                    break;
                }
                let r = run_cell(env, &cells[i], &reference);
                results.lock().expect("no worker panics while holding it")[i] = Some(r);
                progress(done.fetch_add(1, Ordering::SeqCst) + 1, total);
            });
        }
    });
    let mut rows = Vec::with_capacity(total);
    for r in results.into_inner().expect("workers are done") {
        rows.push(r.expect("every cell ran")?);
    }
    let mut summary = Summary::default();
    for r in &rows {
        match r.verdict {
            Verdict::Same => summary.same += 1,
            Verdict::Refused => summary.refused += 1,
            Verdict::Diverged => summary.diverged += 1,
        }
    }
    Ok(Matrix {
        runner: env.runner,
        reference,
        rows,
        summary,
    })
}
