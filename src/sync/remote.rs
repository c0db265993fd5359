//! Remote sync: reading, fetching and compare-and-swap pushing the durable
//! branch, through libgit2 or the user's `git`.
//!
//! Owns the commit point when the durable domain is a remote: a step is
//! durable exactly when the remote accepted the branch update. Invariant: a
//! push is a compare-and-swap on the branch's expected id, never a force, and
//! a rejected update is never reported as success — libgit2 reports
//! rejections through the push-update-reference callback while `push`
//! itself returns Ok, so that callback is always checked; the remote's
//! advertised value is checked against the expected id before anything is
//! sent (push negotiation); and an ambiguous failure is settled by reading
//! the remote again.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::Command;

use git2::{Cred, CredentialType, FetchOptions, Oid, PushOptions, RemoteCallbacks, Repository};

use crate::error::{Error, Result};
use crate::git::short;

/// How to talk to the remote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// libgit2: file paths, file://, git://, http(s)://, ssh:// (ssh-agent,
    /// credential helpers).
    Libgit2,
    /// The user's `git` executable, for its credential helpers and ssh config.
    Git,
}

impl Transport {
    pub fn parse(s: &str) -> Result<Transport> {
        match s {
            "libgit2" => Ok(Transport::Libgit2),
            "git" => Ok(Transport::Git),
            other => Err(Error::input(format!(
                "unknown transport {other:?}; use `libgit2` or `git`"
            ))),
        }
    }
}

/// The durable remote of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    /// A configured remote name, or a URL or path.
    pub spec: String,
    pub transport: Transport,
}

/// The outcome of a push that did not land.
#[derive(Debug)]
pub enum PushError {
    /// Another writer won the race: the branch is no longer at the expected id.
    Moved { found: Option<Oid> },
    /// The remote refused the update (a hook, permissions, ...).
    Rejected(String),
    /// The branch's lock on the remote is held by another writer (a push
    /// in flight, a `git` on the server), or was left there by one that
    /// died; the branch is still at the expected id. The text says which
    /// lock and what the server said.
    Locked(String),
    /// Transport or local failure; the remote state is unknown.
    Failed(Error),
}

impl PushError {
    /// This failure as the SPEC's error: `branch` on `spec` was expected at
    /// `expected`.
    pub fn into_error(self, branch: &str, spec: &str, expected: Option<Oid>) -> Error {
        match self {
        PushError::Moved { found } => Error::RemoteMoved {
            message: format!(
                "{branch} on {spec} is no longer at {} (now {}): another writer won the race; nothing of this step was accepted",
                expected.map(short).unwrap_or_else(|| "nothing".into()),
                found.map(short).unwrap_or_else(|| "unknown".into())
            ),
            hint: "rerun the same command: it reconciles with the new durable head and applies what is still missing".into(),
        },
        PushError::Rejected(msg) => Error::other(format!(
            "{spec} refused the update of {branch}: {msg}"
        ))
        .with_hint("the remote's hooks or permissions said no; nothing of this step became durable"),
        PushError::Locked(why) => Error::RemoteMoved {
            message: format!(
                "{branch} on {spec} is locked by another writer and stayed locked while git-steps waited: {why}; {branch} is still at {}, and nothing of this step was accepted",
                expected.map(short).unwrap_or_else(|| "nothing".into()),
            ),
            hint: "rerun the same command once the other push is done; if nothing else writes to the remote, the lock was left by a process that died: remove the lock file it names on the remote, as git would tell you".into(),
        },
        PushError::Failed(e) => e,
    }
    }
}

/// How long a push waits for a branch lock that another writer holds on the
/// remote before it gives up with [`PushError::Locked`] (exit 4): 8 seconds,
/// or `GIT_STEPS_LOCK_WAIT` seconds.
fn lock_patience() -> std::time::Duration {
    let secs = std::env::var("GIT_STEPS_LOCK_WAIT")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .unwrap_or(8.0);
    std::time::Duration::from_secs_f64(secs.min(3600.0))
}

/// Sort a ref update the remote did not make, by what it said: a hook or
/// policy saying no is a refusal; a lock that another writer holds is
/// contention; a branch that is no longer where we expected it has moved
/// (the caller reads it); a write that failed on the server (its disk, its
/// permissions) is a failure, reported with the server's own words.
fn classify_rejection(status: &str, remote_said: &str) -> PushError {
    let said = remote_said.trim();
    let both = format!("{status}\n{said}");
    let lower = both.to_lowercase();
    let detail = if said.is_empty() {
        status.to_string()
    } else {
        format!("{status} (the remote said: {})", one_paragraph(said))
    };
    if lower.contains("hook declined") || lower.contains("denied") {
        PushError::Rejected(detail)
    } else if lower.contains("file exists") || lower.contains("another git process") {
        PushError::Locked(detail)
    } else if lower.contains("but expected") || lower.contains("stale info") {
        PushError::Moved { found: None }
    } else if said.is_empty()
        && (lower.contains("failed to update ref") || lower.contains("failed to lock"))
    {
        // receive-pack's status for a ref transaction that failed, without
        // the reason (an old server, or no side band): most often another
        // push holding the lock, so wait and retry before saying so.
        PushError::Locked(detail)
    } else if lower.contains("failed to update ref") || lower.contains("unable to") {
        PushError::Failed(Error::other(format!(
            "the remote could not record the branch update: {detail}"
        )).with_hint("nothing of this step became durable; fix the remote (its disk, its permissions), then rerun"))
    } else {
        PushError::Rejected(detail)
    }
}

/// Text folded onto one line, for an error message.
fn one_paragraph(text: &str) -> String {
    text.lines()
        .map(|l| l.trim().trim_start_matches("remote:").trim())
        .filter(|l| !l.is_empty() && !l.starts_with("hint:"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The private ref a fetch of `branch` lands in.
pub fn tracking_ref(branch: &str) -> String {
    format!("refs/steps/remote/{branch}")
}

fn callbacks<'a>(repo: &'a Repository) -> RemoteCallbacks<'a> {
    let mut cb = RemoteCallbacks::new();
    let tried = RefCell::new(CredentialType::empty());
    let config = repo.config().ok();
    cb.credentials(move |url, username, allowed| {
        // Try each kind of credential once, like git: ssh-agent, then the
        // credential helpers, then a plain user name.
        let mut tried = tried.borrow_mut();
        if allowed.contains(CredentialType::SSH_KEY) && !tried.contains(CredentialType::SSH_KEY) {
            tried.insert(CredentialType::SSH_KEY);
            let user = username.unwrap_or("git");
            return Cred::ssh_key_from_agent(user);
        }
        if allowed.contains(CredentialType::USER_PASS_PLAINTEXT)
            && !tried.contains(CredentialType::USER_PASS_PLAINTEXT)
        {
            tried.insert(CredentialType::USER_PASS_PLAINTEXT);
            if let Some(cfg) = &config {
                return Cred::credential_helper(cfg, url, username);
            }
        }
        if allowed.contains(CredentialType::USERNAME) && !tried.contains(CredentialType::USERNAME) {
            tried.insert(CredentialType::USERNAME);
            return Cred::username(username.unwrap_or("git"));
        }
        Err(git2::Error::from_str(&format!(
            "no credentials for {url}: ssh-agent and git's credential helpers gave none that the server accepted (try --transport git)"
        )))
    });
    cb
}

/// An anonymous remote for `spec` (a named remote's URL, or its push URL
/// when pushing). Anonymous, so that libgit2 updates no remote-tracking
/// refs of its own: every ref git-steps writes is one it knows about.
fn libgit2_remote<'r>(repo: &'r Repository, spec: &str, push: bool) -> Result<git2::Remote<'r>> {
    let url = match repo.find_remote(spec) {
        Ok(r) => {
            let push_url = if push {
                r.pushurl_bytes().map(|b| b.to_vec())
            } else {
                None
            };
            String::from_utf8_lossy(&push_url.unwrap_or_else(|| r.url_bytes().to_vec()))
                .into_owned()
        }
        Err(_) => spec.to_string(),
    };
    if url.contains("http") {
        crate::git::load_system_certs();
    }
    // A relative path is relative to the repository, not to our cwd.
    let url = if !url.contains("://") && !url.contains(':') && Path::new(&url).is_relative() {
        repo.workdir()
            .unwrap_or_else(|| repo.path())
            .join(&url)
            .to_string_lossy()
            .into_owned()
    } else {
        url
    };
    repo.remote_anonymous(&url).map_err(|e| {
        Error::other(format!(
            "{spec:?} is neither a configured remote nor a URL: {}",
            e.message()
        ))
    })
}

fn git_cli(repo: &Repository) -> Result<Command> {
    let dir = repo.workdir().unwrap_or_else(|| repo.path()).to_path_buf();
    let mut cmd = Command::new("git");
    cmd.current_dir(&dir).env_remove("GIT_STEPS_CRASH");
    Ok(cmd)
}

fn run_git(mut cmd: Command, what: &str) -> Result<(bool, String, String)> {
    let out = cmd.output().map_err(|e| {
        Error::other(format!("cannot run git for {what}: {e}"))
            .with_hint("--transport git needs `git` on PATH")
    })?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// Run git and return its stdout, or an error with its stderr.
fn run_git_ok(cmd: Command, what: &str, spec: &str) -> Result<String> {
    let (ok, out, err) = run_git(cmd, what)?;
    if !ok {
        return Err(Error::other(format!(
            "git {what} {spec} failed: {}",
            err.trim()
        )));
    }
    Ok(out)
}

impl Remote {
    /// A name for messages (the URL of a named remote, where known).
    pub fn describe(&self, repo: &Repository) -> String {
        match repo.find_remote(&self.spec) {
            Ok(r) => format!("{} ({})", self.spec, String::from_utf8_lossy(r.url_bytes())),
            Err(_) => self.spec.clone(),
        }
    }

    /// Read a remote ref (`refs/heads/<branch>`, a journal) without
    /// fetching anything.
    pub fn head(&self, repo: &Repository, refname: &str) -> Result<Option<Oid>> {
        match self.transport {
            Transport::Libgit2 => {
                let mut remote = libgit2_remote(repo, &self.spec, false)?;
                let conn = remote
                    .connect_auth(git2::Direction::Fetch, Some(callbacks(repo)), None)
                    .map_err(|e| self.net_error("read", e))?;
                Ok(advertised(conn.list()?, refname))
            }
            Transport::Git => {
                let mut cmd = git_cli(repo)?;
                cmd.args(["ls-remote", "--", &self.spec, refname]);
                let out = run_git_ok(cmd, "ls-remote", &self.spec)?;
                parse_ls_remote(&out, refname)
            }
        }
    }

    /// Fetch a remote ref into the local ref `into` (for a branch,
    /// [`tracking_ref`]); returns its value, or None when the remote has no
    /// such ref.
    pub fn fetch(&self, repo: &Repository, refname: &str, into: &str) -> Result<Option<Oid>> {
        let refspec = format!("+{refname}:{into}");
        match self.transport {
            Transport::Libgit2 => {
                let mut remote = libgit2_remote(repo, &self.spec, false)?;
                let mut opts = FetchOptions::new();
                opts.remote_callbacks(callbacks(repo))
                    .download_tags(git2::AutotagOption::None)
                    .update_fetchhead(false);
                crate::workdir::lock::intending(
                    repo,
                    crate::workdir::lock::ref_locks(repo, into),
                    || {
                        remote.fetch(
                            &[refspec.as_str()],
                            Some(&mut opts),
                            Some("git-steps: fetch"),
                        )
                    },
                )
                .map_err(|e| self.net_error("fetch from", e))?;
                Ok(advertised(remote.list()?, refname))
            }
            Transport::Git => {
                let Some(oid) = self.head(repo, refname)? else {
                    return Ok(None);
                };
                if repo.find_commit(oid).is_err() {
                    let mut cmd = git_cli(repo)?;
                    cmd.args([
                        "fetch",
                        "--quiet",
                        "--no-tags",
                        "--no-write-fetch-head",
                        "--",
                        &self.spec,
                        &refspec,
                    ]);
                    run_git_ok(cmd, "fetch", &self.spec)?;
                }
                crate::workdir::lock::intending(
                    repo,
                    crate::workdir::lock::ref_locks(repo, into),
                    || repo.reference(into, oid, true, "git-steps: fetch"),
                )?;
                Ok(Some(oid))
            }
        }
    }

    fn net_error(&self, verb: &str, e: git2::Error) -> Error {
        Error::other(format!("cannot {verb} {}: {}", self.spec, e.message())).with_hint(
            "check the remote's URL (`git remote -v`) and your credentials; `--transport git` uses your git's credential helpers and ssh config",
        )
    }

    /// Move the remote ref `refname` from `expected` (None: it must not
    /// exist) to `new`, or fail without changing it. A lock held by another
    /// writer is contention, not a refusal: the push is retried for a few
    /// seconds, then reported as [`PushError::Locked`].
    pub fn push(
        &self,
        repo: &Repository,
        refname: &str,
        expected: Option<Oid>,
        new: Oid,
    ) -> std::result::Result<(), PushError> {
        let mut wait = std::time::Duration::from_millis(20);
        let deadline = std::time::Instant::now() + lock_patience();
        loop {
            match self.push_once(repo, refname, expected, new) {
                Err(PushError::Locked(_)) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(std::time::Duration::from_millis(500));
                }
                other => return other,
            }
        }
    }

    fn push_once(
        &self,
        repo: &Repository,
        refname: &str,
        expected: Option<Oid>,
        new: Oid,
    ) -> std::result::Result<(), PushError> {
        let first = match self.transport {
            Transport::Libgit2 => self.push_libgit2(repo, refname, expected, new),
            Transport::Git => self.push_git(repo, refname, expected, new),
        };
        // What the remote holds now settles every failure: the update may
        // have landed before the connection broke, or another writer may
        // have moved the branch while we waited for its lock.
        let settle = |e: PushError| {
            match self.head(repo, refname) {
            Ok(Some(h)) if h == new => Ok(()),
            Ok(found) if found != expected => Err(PushError::Moved { found }),
            // Said to have moved, yet where we expected it: the update was
            // refused for another reason, most likely a lock; try again.
            Ok(_) if matches!(e, PushError::Moved { .. }) => Err(PushError::Locked(format!(
                "{refname} on {} refused the update although it is still at the expected commit",
                self.spec
            ))),
            Ok(_) => Err(e),
            Err(unreachable) => match e {
                // The connection broke and the remote cannot be asked: the
                // update may or may not have landed. Say exactly that.
                PushError::Failed(first) => Err(PushError::Failed(
                    Error::other(format!(
                        "the push to {} broke off ({first}) and the remote cannot be asked now ({unreachable}): whether it accepted {} is unknown",
                        self.spec,
                        short(new)
                    ))
                    .with_hint("rerun the same command when the remote answers: it asks the remote first, so a step it accepted is finished, not applied again"),
                )),
                other => Err(other),
            },
        }
        };
        match first {
            Ok(()) => Ok(()),
            Err(moved @ PushError::Moved { found: Some(_) }) => Err(moved),
            Err(e) => settle(e),
        }
    }

    /// A path or file:// URL this remote resolves to, if it is local.
    fn local_path(&self, repo: &Repository) -> Option<PathBuf> {
        let key = (repo.path().to_path_buf(), self.spec.clone());
        if let Some(hit) = LOCAL_PATHS.with(|c| {
            c.borrow()
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.clone())
        }) {
            return hit;
        }
        let found = self.resolve_local_path(repo);
        LOCAL_PATHS.with(|c| c.borrow_mut().push((key, found.clone())));
        found
    }

    fn resolve_local_path(&self, repo: &Repository) -> Option<PathBuf> {
        let url = match repo.find_remote(&self.spec) {
            Ok(r) => String::from_utf8_lossy(r.url_bytes()).into_owned(),
            Err(_) => self.spec.clone(),
        };
        let path = match url.strip_prefix("file://") {
            Some(p) => p.to_string(),
            None if url.contains("://") => return None,
            // scp-like `host:path`
            None if url
                .split('/')
                .next()
                .is_some_and(|first| first.contains(':')) =>
            {
                return None
            }
            None => url,
        };
        let p = Path::new(&path);
        let p = if p.is_relative() {
            repo.workdir().unwrap_or_else(|| repo.path()).join(p)
        } else {
            p.to_path_buf()
        };
        p.exists().then_some(p)
    }

    /// Push into a bare repository on this machine. libgit2's local
    /// transport forces the ref without checking its current value, so two
    /// writers could both pass negotiation and one overwrite the other; here
    /// the new objects are copied as loose objects (children before parents,
    /// so the remote never holds a tree whose entries are missing — what
    /// `git receive-pack` does for small pushes) and the ref is moved with a
    /// real compare-and-swap ([`swap_local_ref`]), under a flock that every
    /// git-steps pusher takes; a ref lock held by anyone else is waited for,
    /// never removed. The remote repository stays open for the next
    /// step of the same process, so a push costs O(new objects), not
    /// O(objects the remote holds).
    fn push_local(
        &self,
        repo: &Repository,
        path: &Path,
        refname: &str,
        expected: Option<Oid>,
        new: Oid,
    ) -> std::result::Result<(), PushError> {
        let fail = |what: &str, e: git2::Error| {
            PushError::Failed(Error::other(format!(
                "cannot push to {}: {what}: {}",
                path.display(),
                e.message()
            )))
        };
        OPEN_REMOTE.with(|cell| {
            let mut cached = cell.borrow_mut();
            if cached.as_ref().is_none_or(|(p, _)| p != path) {
                let remote = Repository::open(path).map_err(|e| fail("open", e))?;
                *cached = Some((path.to_path_buf(), remote));
            }
            let remote = &cached.as_ref().expect("opened above").1;
            let _guard = crate::workdir::lock::wait(remote.path(), "steps-push.lock")
                .map_err(PushError::Failed)?;
            let lock = local_ref_lock(remote, refname, expected)?;
            let mut copier = Copier::new(repo, remote).map_err(|e| fail("odb", e))?;
            // The commits the remote lacks: everything it has is complete
            // (objects are copied parents and entries first), so the search
            // stops at the first commit it holds. (A revwalk hiding the
            // remote head would read the whole history to mark it.)
            let mut missing = std::collections::HashSet::new();
            let mut todo = vec![new];
            while let Some(id) = todo.pop() {
                if missing.contains(&id) || copier.dst.exists(id) {
                    continue;
                }
                missing.insert(id);
                let c = repo.find_commit(id).map_err(|e| fail("read", e))?;
                todo.extend(c.parent_ids());
            }
            for commit in parents_first(repo, new, &missing).map_err(|e| fail("walk", e))? {
                let c = repo.find_commit(commit).map_err(|e| fail("read", e))?;
                // The first parent's tree is complete in the remote if the
                // parent is there.
                let known = c
                    .parents()
                    .next()
                    .filter(|p| copier.dst.exists(p.id()))
                    .and_then(|p| p.tree().ok());
                copier
                    .tree(c.tree_id(), known.as_ref())
                    .map_err(|e| fail("copy objects", e))?;
                copier.object(commit).map_err(|e| fail("copy objects", e))?;
            }
            swap_local_ref(remote, &lock, refname, expected, new)
        })
    }

    fn push_libgit2(
        &self,
        repo: &Repository,
        refname: &str,
        expected: Option<Oid>,
        new: Oid,
    ) -> std::result::Result<(), PushError> {
        if let Some(path) = self.local_path(repo) {
            return self.push_local(repo, &path, refname, expected, new);
        }
        let mut remote = libgit2_remote(repo, &self.spec, true).map_err(PushError::Failed)?;
        let moved: RefCell<Option<Option<Oid>>> = RefCell::new(None);
        let statuses: RefCell<Vec<(String, Option<String>)>> = RefCell::new(Vec::new());
        let said: RefCell<Vec<u8>> = RefCell::new(Vec::new());
        {
            let mut cb = callbacks(repo);
            cb.sideband_progress(|data| {
                said.borrow_mut().extend_from_slice(data);
                true
            });
            cb.push_negotiation(|updates| {
                for u in updates {
                    if u.dst_refname() == Ok(refname) {
                        let found = (!u.src().is_zero()).then(|| u.src());
                        if found != expected {
                            *moved.borrow_mut() = Some(found);
                            return Err(git2::Error::from_str("the remote branch moved"));
                        }
                    }
                }
                Ok(())
            });
            cb.push_update_reference(|name, status| {
                statuses
                    .borrow_mut()
                    .push((name.to_string(), status.map(str::to_string)));
                Ok(())
            });
            let mut opts = PushOptions::new();
            opts.remote_callbacks(cb);
            let refspec = format!("{new}:{refname}");
            let res = remote.push(&[refspec.as_str()], Some(&mut opts));
            if let Some(found) = moved.borrow_mut().take() {
                return Err(PushError::Moved { found });
            }
            if let Err(e) = res {
                if e.code() == git2::ErrorCode::NotFastForward {
                    return Err(PushError::Moved { found: None });
                }
                return Err(PushError::Failed(self.net_error("push to", e)));
            }
        }
        // libgit2's trap: push() is Ok even when the server refused the ref.
        let statuses = statuses.into_inner();
        match statuses.iter().find(|(n, _)| *n == refname) {
            Some((_, None)) => Ok(()),
            Some((_, Some(msg))) => Err(classify_rejection(
                msg,
                &String::from_utf8_lossy(&said.into_inner()),
            )),
            // No status for our ref: nothing was sent because the remote is
            // already there (or the server said nothing): check.
            None => match self.head(repo, refname) {
                Ok(Some(h)) if h == new => Ok(()),
                Ok(found) => Err(PushError::Rejected(format!(
                    "the remote reported no status for {refname} and it is at {}",
                    found.map(short).unwrap_or_else(|| "nothing".into())
                ))),
                Err(e) => Err(PushError::Failed(e)),
            },
        }
    }

    fn push_git(
        &self,
        repo: &Repository,
        refname: &str,
        expected: Option<Oid>,
        new: Oid,
    ) -> std::result::Result<(), PushError> {
        let lease = format!(
            "--force-with-lease={refname}:{}",
            expected.map(|o| o.to_string()).unwrap_or_default()
        );
        let mut cmd = git_cli(repo).map_err(PushError::Failed)?;
        cmd.args([
            "push",
            "--porcelain",
            "--no-verify",
            &lease,
            "--",
            &self.spec,
            &format!("{new}:{refname}"),
        ]);
        let (ok, out, err) = run_git(cmd, "push").map_err(PushError::Failed)?;
        if ok {
            return Ok(());
        }
        let line = out
            .lines()
            .find(|l| l.contains(refname) && l.starts_with('!'))
            .unwrap_or("");
        if line.contains("stale info")
            || line.contains("fetch first")
            || line.contains("non-fast-forward")
        {
            return Err(PushError::Moved { found: None });
        }
        if !line.is_empty() {
            // `!<tab>src:dst<tab>[remote rejected] (reason)`
            let status = line.rsplit('\t').next().unwrap_or(line).trim();
            return Err(classify_rejection(status, &err));
        }
        Err(PushError::Failed(Error::other(format!(
            "git push {} failed: {}",
            self.spec,
            err.trim()
        ))))
    }
}

fn io_failed(what: &str, path: &Path, e: std::io::Error) -> PushError {
    PushError::Failed(Error::other(format!("cannot {what} {}: {e}", path.display())).with_hint(
        "nothing of this step became durable on the remote; fix the remote's disk or permissions, then rerun",
    ))
}

fn lock_held(p: &Path) -> PushError {
    PushError::Locked(format!(
        "{} exists (another git process is updating the branch, or one died holding it)",
        p.display()
    ))
}

/// The lock for `refname` in a bare repository on this machine, through
/// which [`swap_local_ref`] moves it with git's own protocol (`<ref>.lock`,
/// checked, renamed): a lock that a killed git-steps pusher left is
/// removed, anyone else's is contention and never touched. Fails early when
/// the lock is held or the branch is no longer at `expected`.
fn local_ref_lock(
    remote: &Repository,
    refname: &str,
    expected: Option<Oid>,
) -> std::result::Result<crate::workdir::lock::OwnLock, PushError> {
    let lock = crate::workdir::lock::OwnLock::new(
        &remote.path().join(refname),
        &remote.path().join("steps-push.pending"),
    );
    lock.clear_own_leftover();
    if lock.held() {
        return Err(lock_held(lock.lock_path()));
    }
    // What receive-pack refuses by default (receive.denyCurrentBranch): the
    // branch a non-bare remote has checked out, whose worktree would then
    // read as a staged revert of every step.
    if !remote.is_bare()
        && crate::git::head_branch(remote).is_some_and(|b| format!("refs/heads/{b}") == refname)
    {
        return Err(PushError::Rejected(format!(
            "{refname} is checked out in the worktree of {}, which git refuses to update (receive.denyCurrentBranch); push to a bare repository, or to a branch that is not checked out there",
            remote.workdir().unwrap_or(remote.path()).display()
        )));
    }
    if let Some(other) = name_conflict(remote, refname) {
        return Err(PushError::Failed(
            Error::other(format!(
                "{refname} cannot be created on {}: the ref {other} is there, and git refuses a ref whose name is a directory of another (a clone of the remote would fail)",
                remote.path().display()
            ))
            .with_hint("give the run another branch: `git steps init --branch <name>`"),
        ));
    }
    let current = remote.refname_to_id(refname).ok();
    if current != expected {
        return Err(PushError::Moved { found: current });
    }
    Ok(lock)
}

/// A ref of `repo` that `refname` cannot live beside: one named like a
/// parent directory of it (`refs/heads/feat` for `refs/heads/feat/run`),
/// or one under it, packed or loose (what receive-pack checks too).
fn name_conflict(repo: &Repository, refname: &str) -> Option<String> {
    let mut prefix = refname;
    while let Some((parent, _)) = prefix.rsplit_once('/') {
        if parent.matches('/').count() < 2 {
            break;
        }
        if repo.find_reference(parent).is_ok() {
            return Some(parent.to_string());
        }
        prefix = parent;
    }
    let mut under = repo.references_glob(&format!("{refname}/*")).ok()?;
    under
        .next()
        .and_then(|r| r.ok())
        .and_then(|r| r.name().ok().map(str::to_string))
}

/// Compare-and-swap `refname` from `expected` to `new` under `lock`.
fn swap_local_ref(
    remote: &Repository,
    lock: &crate::workdir::lock::OwnLock,
    refname: &str,
    expected: Option<Oid>,
    new: Oid,
) -> std::result::Result<(), PushError> {
    use crate::workdir::lock::ReplaceError;
    let check = || {
        let current = remote.refname_to_id(refname).ok();
        if current == expected {
            Ok(())
        } else {
            Err(current)
        }
    };
    lock.replace(format!("{new}\n").as_bytes(), check)
        .map_err(|e| match e {
            ReplaceError::Held(p) => lock_held(&p),
            ReplaceError::Io(what, path, e) => io_failed(&what, &path, e),
            ReplaceError::Check(found) => PushError::Moved { found },
        })
}

/// A repository's git dir and a remote spec.
type LocalPathKey = (PathBuf, String);

thread_local! {
    /// The local bare remote this process pushes to, kept open between steps.
    static OPEN_REMOTE: RefCell<Option<(PathBuf, Repository)>> = const { RefCell::new(None) };
    /// `Remote::local_path` answers, keyed by repository and spec.
    static LOCAL_PATHS: RefCell<Vec<(LocalPathKey, Option<PathBuf>)>> = const { RefCell::new(Vec::new()) };
}

/// The commits of `missing` (all reachable from `tip`) in an order where
/// every parent comes before its children.
fn parents_first(
    repo: &Repository,
    tip: Oid,
    missing: &std::collections::HashSet<Oid>,
) -> std::result::Result<Vec<Oid>, git2::Error> {
    let mut order = Vec::with_capacity(missing.len());
    let mut done = std::collections::HashSet::new();
    let mut stack = vec![(tip, false)];
    while let Some((id, expanded)) = stack.pop() {
        if !missing.contains(&id) || done.contains(&id) {
            continue;
        }
        if expanded {
            done.insert(id);
            order.push(id);
            continue;
        }
        stack.push((id, true));
        for p in repo.find_commit(id)?.parent_ids() {
            stack.push((p, false));
        }
    }
    Ok(order)
}

/// Copies objects from the local repository into a local bare remote.
///
/// A loose object is hard-linked, as `git clone --local` does: loose
/// objects are immutable, so once the file is fsynced only the remote's
/// directory entry needs an fsync, done right after the link so that an
/// object never becomes durable before the objects it names. Creating files
/// is what a step spends most on, and this avoids three per step.
/// Anything else (a packed object, another filesystem) is read and written
/// through libgit2, which fsyncs it the same way.
struct Copier<'a> {
    repo: &'a Repository,
    src: git2::Odb<'a>,
    dst: git2::Odb<'a>,
    src_dir: PathBuf,
    dst_dir: PathBuf,
    link: bool,
}

impl<'a> Copier<'a> {
    fn new(repo: &'a Repository, remote: &'a Repository) -> std::result::Result<Self, git2::Error> {
        Ok(Copier {
            repo,
            src: repo.odb()?,
            dst: remote.odb()?,
            src_dir: repo.path().join("objects"),
            dst_dir: remote.path().join("objects"),
            link: true,
        })
    }

    fn object(&mut self, id: Oid) -> std::result::Result<(), git2::Error> {
        if self.link && self.link_loose(id).is_ok() {
            return Ok(());
        }
        let obj = self.src.read(id)?;
        let written = self.dst.write(obj.kind(), obj.data())?;
        debug_assert_eq!(written, id);
        Ok(())
    }

    fn link_loose(&mut self, id: Oid) -> std::io::Result<()> {
        let hex = id.to_string();
        let (fan, rest) = hex.split_at(2);
        let dir = self.dst_dir.join(fan);
        if !dir.is_dir() {
            match std::fs::create_dir(&dir) {
                Ok(()) => sync_dir(&self.dst_dir)?,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        // Our own objects are fsynced when written, but one written by a
        // git that does not fsync loose objects (its default) may not be:
        // make sure (cheap when there is nothing left to flush).
        let from = self.src_dir.join(fan).join(rest);
        std::fs::File::open(&from)?.sync_all()?;
        match std::fs::hard_link(&from, dir.join(rest)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                if e.raw_os_error() == Some(libc::EXDEV) {
                    self.link = false;
                }
                return Err(e);
            }
        }
        sync_dir(&dir)
    }

    /// Copy a tree and everything under it that the remote lacks, entries
    /// first. The remote is complete for every object it has, so an entry
    /// equal to the one at the same place in `known` (a tree of a commit the
    /// remote already holds) or already there is skipped with its subtree.
    fn tree(
        &mut self,
        id: Oid,
        known: Option<&git2::Tree<'_>>,
    ) -> std::result::Result<(), git2::Error> {
        if self.dst.exists(id) {
            return Ok(());
        }
        let tree = self.repo.find_tree(id)?;
        for entry in tree.iter() {
            let before = known.and_then(|k| k.get_name_bytes(entry.name_bytes()));
            if before.as_ref().is_some_and(|b| b.id() == entry.id()) {
                continue;
            }
            match entry.kind() {
                Some(git2::ObjectType::Tree) => {
                    let sub = before
                        .filter(|b| b.kind() == Some(git2::ObjectType::Tree))
                        .and_then(|b| self.repo.find_tree(b.id()).ok());
                    self.tree(entry.id(), sub.as_ref())?
                }
                Some(git2::ObjectType::Blob) if !self.dst.exists(entry.id()) => {
                    self.object(entry.id())?
                }
                // Blobs it has; gitlinks name commits of other repositories.
                _ => {}
            }
        }
        self.object(id)
    }
}

use crate::workdir::lock::sync_dir;

/// The id a remote advertised for `refname`.
fn advertised(heads: &[git2::RemoteHead<'_>], refname: &str) -> Option<Oid> {
    heads.iter().find(|h| h.name() == refname).map(|h| h.oid())
}

fn parse_ls_remote(out: &str, refname: &str) -> Result<Option<Oid>> {
    for l in out.lines() {
        if let Some((oid, name)) = l.split_once('\t') {
            if name == refname {
                return Ok(Some(Oid::from_str(oid)?));
            }
        }
    }
    Ok(None)
}

/// Whether `spec` names something that exists (a configured remote, or a
/// local path); URLs are taken on trust until the first connection.
pub fn check_spec(repo: &Repository, spec: &str) -> Result<()> {
    if repo.find_remote(spec).is_ok() || spec.contains("://") || spec.contains('@') {
        return Ok(());
    }
    if Path::new(spec).exists() {
        return Ok(());
    }
    Err(Error::input(format!(
        "remote {spec:?} is not a configured remote, a URL, or an existing path"
    )))
}
