//! Settings: the run's durable domain, branch and id, from flags and git config.
//!
//! Owns the `steps.*` git config keys (`branch`, `run`, `remote`,
//! `transport`, `allowDuplicateHunks`) and their defaults. Invariant: the
//! defaults are deterministic (the run id defaults to the branch name), so a
//! fresh box that runs `git steps init` with the same flags resumes the same
//! run instead of starting another.

use git2::Repository;

use crate::error::{Error, Result};
use crate::git::head_branch;

/// A remote's spelling and transport, as plain data (`git-steps-remote`'s
/// `spec`).
pub use git_steps_remote::spec as remote;
mod store;

pub use remote::{Remote, Transport};
pub use store::{clear_config_leftover, store};

/// What the flags say (None: use git config, then the default).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub branch: Option<String>,
    pub run: Option<String>,
    pub remote: Option<String>,
    pub transport: Option<Transport>,
    /// A read-only audit: the run is the checked-out run branch's, and
    /// `--run X` alone names run X's own branch (`steps/X`), unless X is
    /// the run set up here. A command that writes keeps the run `init`
    /// set up.
    pub follow: bool,
}

/// The resolved settings of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub branch: String,
    pub run: String,
    /// None: the durable domain is the local repository.
    pub remote: Option<Remote>,
    /// How the run applies (`steps.batch`, `steps.hooks`, …).
    pub config: RunConfig,
}

impl Settings {
    pub fn refname(&self) -> String {
        format!("refs/heads/{}", self.branch)
    }

    /// A sentence that says where steps become durable.
    pub fn durable_domain(&self) -> String {
        match &self.remote {
            None => format!(
                "durable domain: this local repository (branch {}; no remote: a step is durable once its ref update is fsynced here)",
                self.branch
            ),
            Some(r) => format!(
                "durable domain: remote {} (branch {}, transport {}{}): a step is durable once the remote accepts its branch update",
                r.spec,
                self.branch,
                r.transport.as_str(),
                if r.transport == Transport::Git && remote::ssh_url(&r.spec) {
                    ": git's own ssh, with your keys, ~/.ssh/config and known_hosts"
                } else {
                    ""
                }
            ),
        }
    }

    /// `"local"` or `"remote"`, for `--json`.
    pub fn durable_kind(&self) -> &'static str {
        if self.remote.is_some() {
            "remote"
        } else {
            "local"
        }
    }
}

/// A `steps.*` value as git reads it — except that in a linked worktree the
/// repository's shared `.git/config` does not count: the `steps.*` keys
/// there are the main worktree's run (written before worktrees existed),
/// not this worktree's.
pub fn config_str(repo: &Repository, key: &str) -> Result<Option<String>> {
    let cfg = repo.config()?;
    let get = |cfg: &git2::Config| match cfg.get_string(key) {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    };
    if !repo.is_worktree() {
        return get(&cfg);
    }
    use git2::ConfigLevel::*;
    // `git -c` (the App level) above every file, as git applies it.
    for level in [App, Worktree, Global, XDG, System, ProgramData] {
        match cfg.open_level(level) {
            Ok(one) => {
                if let Some(v) = get(&one)? {
                    return Ok(Some(v));
                }
            }
            Err(e) if e.code() == git2::ErrorCode::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(None)
}

/// In a linked worktree, refuse `steps.*` keys that only the shared
/// `.git/config` sets (and no flag overrides): they are the main worktree's
/// run, or were set with a plain `git config` that reached every worktree.
/// Ignoring them silently would run another run, or drop the remote;
/// following them would take another worktree's run.
pub fn refuse_shared_settings_in_linked_worktree(repo: &Repository, o: &Overrides) -> Result<()> {
    if !repo.is_worktree() {
        return Ok(());
    }
    let shared = match repo.config()?.open_level(git2::ConfigLevel::Local) {
        Ok(c) => c,
        Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let given = [
        (crate::keys::BRANCH.name, o.branch.is_some()),
        (crate::keys::RUN.name, o.run.is_some()),
        (crate::keys::REMOTE.name, o.remote.is_some()),
    ];
    let mut found = Vec::new();
    for (key, flag) in given {
        if flag || config_str(repo, key)?.is_some() {
            continue;
        }
        if let Ok(v) = shared.get_string(key) {
            found.push(format!("{key}={v}"));
        }
    }
    if found.is_empty() {
        return Ok(());
    }
    Err(Error::config(format!(
        "this is a linked worktree, and the repository's shared config sets {} for every worktree: a run's settings belong to its worktree",
        found.join(", ")
    ))
    .with_hint("set up this worktree's own run: `git steps init --branch <branch> [--remote <remote>]` (or pass --branch, --run and --remote); nothing was changed"))
}

/// The branches a run never lands on unless `--branch` names it: each
/// remote's HEAD as this clone knows it (`refs/remotes/<remote>/HEAD`),
/// `init.defaultBranch`, `main` and `master`.
pub fn default_branches(repo: &Repository) -> Vec<String> {
    let mut out = Vec::new();
    for name in crate::git::remote_names(repo) {
        let head = format!("refs/remotes/{name}/HEAD");
        let target = repo
            .find_reference(&head)
            .ok()
            .and_then(|r| r.symbolic_target().ok().flatten().map(str::to_string));
        if let Some(b) = target.and_then(|t| {
            t.strip_prefix(&format!("refs/remotes/{name}/"))
                .map(str::to_string)
        }) {
            out.push(b);
        }
    }
    if let Ok(b) = repo
        .config()
        .and_then(|c| c.get_string("init.defaultBranch"))
    {
        out.push(b);
    }
    out.extend(["main".to_string(), "master".to_string()]);
    out
}

/// The run a `git steps init` without `--run` names: the checked-out
/// branch's (a run branch's own, see [`run_of_branch`]), so that the same
/// `init` on a fresh clone resumes the same run.
pub fn default_run(repo: &Repository) -> Result<String> {
    let branch = head_branch(repo).ok_or_else(|| Error::Usage {
        message: "HEAD is detached and no run is named, so there is no name for the run".into(),
        hint: "name it: `git steps init --run <id>` (its branch is steps/<id>)".into(),
    })?;
    Ok(run_of_branch(repo, &branch))
}

/// The run id a branch holds: the `Step-Run` of the receipt at its head
/// (here, or on a remote as this clone knows it), so that a branch's
/// receipts always count for the run that goes on there; otherwise the
/// branch's name without a `steps/` prefix (`steps/foo` is run `foo`).
/// The run the receipt at the head of local branch `branch` names, if its
/// head is a receipt.
fn head_receipt_run(repo: &Repository, branch: &str) -> Option<String> {
    let commit = repo
        .find_reference(&format!("refs/heads/{branch}"))
        .ok()?
        .peel_to_commit()
        .ok()?;
    let message = String::from_utf8_lossy(commit.message_bytes()).into_owned();
    crate::history::receipt::parse(&message).ok().map(|r| r.run)
}

pub fn run_of_branch(repo: &Repository, branch: &str) -> String {
    let mut refs = vec![format!("refs/heads/{branch}")];
    refs.extend(
        crate::git::remote_names(repo)
            .iter()
            .map(|r| format!("refs/remotes/{r}/{branch}")),
    );
    let receipted = refs.iter().find_map(|r| {
        let commit = repo.find_reference(r).ok()?.peel_to_commit().ok()?;
        let message = String::from_utf8_lossy(commit.message_bytes()).into_owned();
        crate::history::receipt::parse(&message)
            .ok()
            .map(|rc| rc.run)
    });
    receipted.unwrap_or_else(|| {
        branch
            .strip_prefix("steps/")
            .filter(|r| !r.is_empty())
            .unwrap_or(branch)
            .to_string()
    })
}

/// Refuse a run branch that git cannot create beside the branches there
/// are: `steps/main` while a branch `steps` exists (a ref cannot be both a
/// file and a folder), or `steps` while `steps/…` branches exist.
pub fn refuse_branch_clash(repo: &Repository, branch: &str) -> Result<()> {
    let mut prefix = String::new();
    for part in branch.split('/') {
        if !prefix.is_empty() {
            if repo.find_reference(&format!("refs/heads/{prefix}")).is_ok() {
                return Err(Error::Usage {
                    message: format!(
                        "the run's branch would be {branch}, but a branch {prefix} exists, and git cannot have both (a ref cannot be a file and a folder)"
                    ),
                    hint: format!(
                        "rename that branch (`git branch -m {prefix} <other name>`), or name the run's branch: `git steps init --branch <name>`; nothing was changed"
                    ).into(),
                });
            }
            prefix.push('/');
        }
        prefix.push_str(part);
    }
    if let Some(r) = repo
        .references_glob(&format!("refs/heads/{branch}/*"))?
        .flatten()
        .next()
    {
        return Err(Error::Usage {
            message: format!(
                "the run's branch would be {branch}, but the branch {} exists, and git cannot have both (a ref cannot be a file and a folder)",
                r.name().unwrap_or_default().trim_start_matches("refs/heads/")
            ),
            hint: "name the run's branch: `git steps init --branch <name>` (or `--run <id>`); nothing was changed".into(),
        });
    }
    Ok(())
}

/// A command that writes the run refuses to, without `init` (no
/// `steps.branch`) and without `--branch`, when HEAD is on the default
/// branch: an agent's steps never land there by accident (SPEC, `init`).
pub fn refuse_unset_default_branch(repo: &Repository, o: &Overrides) -> Result<()> {
    if o.branch.is_some() || config_str(repo, crate::keys::BRANCH.name)?.is_some() {
        return Ok(());
    }
    let Some(branch) = head_branch(repo) else {
        return Ok(());
    };
    if !default_branches(repo).contains(&branch) {
        return Ok(());
    }
    let remotes = crate::git::remote_names(repo);
    let run = o
        .run
        .clone()
        .unwrap_or_else(|| run_of_branch(repo, &branch));
    let (init, durable) = match (o.remote.as_deref(), remotes.as_slice()) {
        (Some(r), _) => (
            format!("git steps init --remote {r}"),
            format!(", durable on {r}"),
        ),
        (None, [only]) => ("git steps init".to_string(), format!(", durable on {only}")),
        (None, []) => (
            "git steps init".to_string(),
            ", durable in this repository".to_string(),
        ),
        (None, [first, ..]) => (
            format!("git steps init --remote {first}"),
            format!(", durable on {first}"),
        ),
    };
    let init = match &o.run {
        Some(r) => format!("{init} --run {r}"),
        None => init,
    };
    Err(Error::Usage {
        message: format!(
            "no run is set up here and HEAD is on {branch}, the repository's default branch: git-steps does not commit an agent's steps on it unless told to"
        ),
        hint: crate::error::Hint::rerun_after(format!(
            "set up a run first: `{init}` (run {run} on its own branch steps/{run}{durable})"
        ))
        .because(format!(
            "nothing was changed; to commit on {branch} on purpose instead, pass `--branch {branch}`"
        )),
    })
}

/// A command that writes the run, with no durable domain asked for (no
/// `--remote`, no `steps.remote`), in a clone that has remotes: the steps
/// would be durable on this box alone, which the box dying loses. A local
/// domain is chosen by name (`--remote ''`, stored by `init --remote ''`);
/// otherwise this refuses (exit 2) and lists the remotes.
pub fn refuse_silently_local(repo: &Repository, o: &Overrides) -> Result<()> {
    if o.remote.is_some() || config_str(repo, crate::keys::REMOTE.name)?.is_some() {
        return Ok(());
    }
    let remotes = crate::git::remote_names(repo);
    let Some(first) = remotes.first() else {
        return Ok(());
    };
    Err(Error::Usage {
        message: format!(
            "no durable domain is set up here, and this clone has {} ({}): the steps would be durable on this box alone, which a restart of the box loses",
            if remotes.len() == 1 { "a remote".to_string() } else { format!("{} remotes", remotes.len()) },
            remotes.join(", ")
        ),
        hint: format!(
            "name the remote: `git steps init --remote {first}` (or pass `--remote {first}`); to keep the steps on this box on purpose, `git steps init --remote ''` (or pass `--remote ''`); nothing was changed"
        ).into(),
    })
}

pub fn resolve(repo: &Repository, o: &Overrides) -> Result<Settings> {
    let config = RunConfig::read(repo)?;
    crate::tree::build::set_max_file_bytes(config.max_file_bytes);
    let configured_run = config_str(repo, crate::keys::RUN.name)?;
    let configured = config_str(repo, crate::keys::BRANCH.name)?;
    let here = head_branch(repo);
    let branch = match (&o.branch, &o.run) {
        (Some(b), _) => b.clone(),
        // `--run X` names run X: its own branch, unless X is the run set
        // up here.
        (None, Some(r)) if o.follow && configured_run.as_deref() != Some(r.as_str()) => {
            format!("steps/{r}")
        }
        // The run follows the checked-out branch: on another run's branch
        // (`steps/<run>`, or any branch whose head receipt names a run),
        // that run is the run.
        (None, None) if o.follow && here.as_deref().is_some_and(|h| {
            configured.as_deref().is_some_and(|c| c != h)
                && (h.starts_with("steps/") || head_receipt_run(repo, h).is_some())
        }) =>
        {
            here.clone().expect("checked above")
        }
        _ => match configured.clone() {
            Some(b) => b,
            None => here.clone().ok_or_else(|| {
                // A detached HEAD names no branch to run on; making one
                // up (it used to be `main`) would surprise.
                Error::Usage {
                    message: "HEAD is detached and no run is set up here, so there is no branch for the run".into(),
                    hint: "set up a run: `git steps init --run <id>` (its branch is steps/<id>), or name a branch: `git steps init --branch <name>` (or pass --branch)".into(),
                }
            })?,
        },
    };
    if !git2::Reference::is_valid_name(&format!("refs/heads/{branch}")) {
        return Err(Error::input(format!(
            "{branch:?} is not a valid branch name"
        )));
    }
    let run = match &o.run {
        Some(r) => r.clone(),
        // Another run's branch, followed from HEAD: its own run.
        None if o.follow
            && o.branch.is_none()
            && configured.as_deref().is_some_and(|c| c != branch.as_str()) =>
        {
            run_of_branch(repo, &branch)
        }
        None => match configured_run {
            Some(r) => r,
            None => run_of_branch(repo, &branch),
        },
    };
    if run.is_empty() || run.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::input(format!(
            "run id {run:?} must be non-empty and contain no whitespace"
        )));
    }
    let remote = match &o.remote {
        Some(r) => Some(r.clone()),
        None => config_str(repo, crate::keys::REMOTE.name)?,
    }
    .filter(|r| !r.is_empty());
    let transport = match &o.transport {
        Some(t) => *t,
        None => match config_str(repo, crate::keys::TRANSPORT.name)? {
            Some(t) => Transport::parse(&t)?,
            // ssh as git does it (keys, ~/.ssh/config, known_hosts): through
            // git. libgit2 is built without ssh.
            None => remote
                .as_deref()
                .map_or(Transport::Libgit2, |r| remote::default_transport(repo, r)),
        },
    };
    let remote = remote.map(|spec| Remote { spec, transport });
    if let Some(r) = &remote {
        remote::refuse_libgit2_ssh(repo, r)?;
    }
    Ok(Settings {
        branch,
        run,
        remote,
        config,
    })
}

/// The `steps.*` keys that shape how a run applies, each read once, here,
/// when the run's [`Settings`] are resolved: flags then override what they
/// name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunConfig {
    /// `steps.batch`: steps made durable per push by `apply` (at least 1).
    pub batch: usize,
    /// `steps.retries`: refused answers sent back to the decider per step.
    pub retries: usize,
    /// `steps.allowDuplicateHunks`.
    pub allow_duplicate_hunks: bool,
    /// `steps.hooks`: run `pre-commit` and `commit-msg` as checks.
    pub hooks: bool,
    /// `steps.cacheEvery`: publish the shared hunk cache every this many
    /// steps (0: never).
    pub cache_every: usize,
    /// `steps.maxFileSize`: the largest file a step may write, in bytes
    /// (git's integer syntax: 200m, 1g).
    pub max_file_bytes: usize,
    /// `steps.effectRetries`: tries of an effect before its failure is
    /// recorded (at least 1).
    pub effect_retries: usize,
    /// `steps.effectTimeout`: seconds one try of an effect may take.
    pub effect_timeout_secs: usize,
    /// `steps.effects`: which effects this box delivers.
    pub effects: Deliver,
}

/// `steps.effects`: which effects a box delivers; the others stay pending
/// for a box that allows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deliver {
    All,
    /// HTTP requests, no command.
    Http,
    None,
}

impl Deliver {
    /// Whether this box delivers `action`.
    pub fn allows(self, action: &crate::plan::effect::Action) -> bool {
        match self {
            Deliver::All => true,
            Deliver::Http => !matches!(action, crate::plan::effect::Action::Command(_)),
            Deliver::None => false,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Deliver::All => "all",
            Deliver::Http => "http",
            Deliver::None => "none",
        }
    }
}

impl RunConfig {
    /// The defaults when no key is set.
    pub const DEFAULT: RunConfig = RunConfig {
        batch: 1,
        retries: 2,
        allow_duplicate_hunks: false,
        hooks: false,
        cache_every: 1000,
        max_file_bytes: crate::tree::build::DEFAULT_MAX_FILE_BYTES,
        effect_retries: 5,
        effect_timeout_secs: 30,
        effects: Deliver::All,
    };

    /// The keys as git config holds them for `repo` (a bad value is an
    /// input error naming its key).
    pub fn read(repo: &Repository) -> Result<RunConfig> {
        let d = RunConfig::DEFAULT;
        Ok(RunConfig {
            batch: config_count(repo, crate::keys::BATCH.name, 1)?.unwrap_or(d.batch),
            retries: config_count(repo, crate::keys::RETRIES.name, 0)?.unwrap_or(d.retries),
            allow_duplicate_hunks: config_bool(repo, crate::keys::ALLOW_DUPLICATE_HUNKS.name)?,
            hooks: config_bool(repo, crate::keys::HOOKS.name)?,
            cache_every: config_count(repo, crate::keys::CACHE_EVERY.name, 0)?
                .unwrap_or(d.cache_every),
            max_file_bytes: config_count(repo, crate::keys::MAX_FILE_SIZE.name, 1)?
                .unwrap_or(d.max_file_bytes),
            effect_retries: config_count(repo, crate::keys::EFFECT_RETRIES.name, 1)?
                .unwrap_or(d.effect_retries),
            effect_timeout_secs: config_count(repo, crate::keys::EFFECT_TIMEOUT.name, 1)?
                .unwrap_or(d.effect_timeout_secs),
            effects: match config_string(repo, crate::keys::EFFECTS.name)?
                .map(|v| v.trim().to_ascii_lowercase())
                .as_deref()
            {
                None | Some("all") => Deliver::All,
                Some("http") => Deliver::Http,
                Some("none") => Deliver::None,
                Some(v) => {
                    return Err(Error::input(format!(
                        "git config {} = {v:?}: expected all, http or none",
                        crate::keys::EFFECTS.name
                    )))
                }
            },
        })
    }
}

/// A text `steps.*` setting (None when unset).
fn config_string(repo: &Repository, key: &str) -> Result<Option<String>> {
    match repo.config()?.get_string(key) {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
        Err(e) => Err(Error::input(format!("git config {key}: {}", e.message()))),
    }
}

/// A boolean `steps.*` setting.
fn config_bool(repo: &Repository, key: &str) -> Result<bool> {
    match repo.config()?.get_bool(key) {
        Ok(v) => Ok(v),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// A count from git config (`key`) of at least `min` (0 or 1), None when
/// unset; anything else (negative, too small, not a number — git's
/// `k`/`m` suffixes are read as git reads them) is an input error naming
/// the key.
fn config_count(repo: &Repository, key: &str, min: i64) -> Result<Option<usize>> {
    match repo.config()?.get_i64(key) {
        Ok(v) if v >= min => Ok(Some(usize::try_from(v).unwrap_or(usize::MAX))),
        Ok(v) => Err(Error::input(format!(
            "git config {key} = {v}: expected a number, {min} or more"
        ))),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
        Err(e) => Err(Error::input(format!("git config {key}: {}", e.message()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> (tempfile::TempDir, Repository) {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        repo.set_head("refs/heads/work").unwrap();
        (dir, repo)
    }

    fn set(repo: &Repository, key: &str, value: &str) {
        repo.config()
            .unwrap()
            .open_level(git2::ConfigLevel::Local)
            .unwrap()
            .set_str(key, value)
            .unwrap();
    }

    #[test]
    fn defaults_follow_head_and_the_branch() {
        let (_d, repo) = repo();
        let s = resolve(&repo, &Overrides::default()).unwrap();
        assert_eq!((s.branch.as_str(), s.run.as_str()), ("work", "work"));
        assert_eq!(s.remote, None);
        assert_eq!(s.refname(), "refs/heads/work");
        assert_eq!(s.durable_kind(), "local");
    }

    #[test]
    fn config_then_flags() {
        let (_d, repo) = repo();
        set(&repo, "steps.branch", "agent/b");
        set(&repo, "steps.run", "r-1");
        set(&repo, "steps.remote", "origin");
        set(&repo, "steps.transport", "git");
        let s = resolve(&repo, &Overrides::default()).unwrap();
        assert_eq!((s.branch.as_str(), s.run.as_str()), ("agent/b", "r-1"));
        assert_eq!(
            s.remote,
            Some(Remote {
                spec: "origin".into(),
                transport: Transport::Git
            })
        );
        let flags = Overrides {
            branch: Some("other".into()),
            run: Some("r-2".into()),
            remote: Some("/srv/remote.git".into()),
            transport: Some(Transport::Libgit2),
            follow: false,
        };
        let s = resolve(&repo, &flags).unwrap();
        assert_eq!((s.branch.as_str(), s.run.as_str()), ("other", "r-2"));
        let r = s.remote.unwrap();
        assert_eq!(
            (r.spec.as_str(), r.transport),
            ("/srv/remote.git", Transport::Libgit2)
        );
        // An empty remote is no remote; the run id defaults to the branch.
        set(&repo, "steps.remote", "");
        let s = resolve(
            &repo,
            &Overrides {
                branch: Some("x".into()),
                ..Overrides::default()
            },
        )
        .unwrap();
        assert_eq!((s.run.as_str(), s.remote), ("r-1", None));
    }

    #[test]
    fn the_run_config_is_read_once_with_its_defaults() {
        let (_d, repo) = repo();
        assert_eq!(RunConfig::read(&repo).unwrap(), RunConfig::DEFAULT);
        set(&repo, "steps.batch", "10");
        set(&repo, "steps.retries", "0");
        set(&repo, "steps.allowDuplicateHunks", "true");
        set(&repo, "steps.hooks", "yes");
        set(&repo, "steps.cacheEvery", "1k");
        set(&repo, "steps.maxFileSize", "2m");
        assert_eq!(
            RunConfig::read(&repo).unwrap(),
            RunConfig {
                batch: 10,
                retries: 0,
                allow_duplicate_hunks: true,
                hooks: true,
                cache_every: 1024,
                max_file_bytes: 2 << 20,
                ..RunConfig::DEFAULT
            }
        );
        set(&repo, "steps.batch", "0");
        let e = RunConfig::read(&repo).unwrap_err().to_string();
        assert!(e.contains("steps.batch") && e.contains("1 or more"), "{e}");
    }

    #[test]
    fn bad_values_are_input_errors() {
        let (_d, repo) = repo();
        let with = |o: Overrides| resolve(&repo, &o).unwrap_err();
        let e = with(Overrides {
            branch: Some("a..b".into()),
            ..Overrides::default()
        });
        assert!(
            matches!(e, Error::Input { .. }) && e.to_string().contains("not a valid branch name"),
            "{e}"
        );
        for run in ["", "a b", "a\tb"] {
            let e = with(Overrides {
                run: Some(run.into()),
                ..Overrides::default()
            });
            assert!(e.to_string().contains("no whitespace"), "{run:?}: {e}");
        }
        set(&repo, "steps.transport", "ssh");
        set(&repo, "steps.remote", "origin");
        let e = resolve(&repo, &Overrides::default()).unwrap_err();
        assert!(e.to_string().contains("unknown transport \"ssh\""), "{e}");
    }
}
