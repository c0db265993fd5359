//! Remote sync: reading, fetching and compare-and-swap pushing the durable
//! branch, through libgit2 (`libgit2.rs`), the user's `git` (`cli.rs`), or
//! directly into a bare repository on this machine (`local.rs`); a failed
//! push is settled by asking the remote (`settle.rs`).
//!
//! Owns the commit point when the durable domain is a remote: a step is
//! durable exactly when the remote accepted the branch update. Invariant: a
//! push is a compare-and-swap ([`RefUpdate`]) on the branch's expected id,
//! never a force, and a rejected or ambiguous update is never reported as
//! success.

pub use crate::settings::remote::{check_spec, is_ssh, ssh_url, tracking_ref, Remote, Transport};
use git2::{Oid, Repository};

use crate::error::{Error, Result};
use crate::git::short;

mod cli;
mod framing;
pub mod http;
mod libgit2;
mod local;
mod pace;
pub mod proxy;
pub mod relay;
mod settle;
mod smart;
#[doc(hidden)]
pub use smart::wire_fuzzing;
mod ssh_share;

pub use smart::counts as http_counts;
pub use ssh_share::close as close_shared_ssh;

/// A compare-and-swap of one remote ref: move `refname` from `expected`
/// (None: it must not exist) to `new`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefUpdate<'a> {
    pub refname: &'a str,
    pub expected: Option<Oid>,
    pub new: Oid,
    /// `new` need not descend from `expected` (still only from `expected`):
    /// for the shared hunk cache, never for a branch or a journal.
    pub replace: bool,
    /// The step whose commit point this push is, if it is one: the push's
    /// crash point (`push-sent`) is armed for it.
    pub step: Option<&'a str>,
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
        PushError::Rejected(msg) => Error::remote(format!(
            "{spec} refused the update of {branch}: {msg}"
        ), false)
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

/// The size of a commit with no parent and its tree's entries (what the
/// shared cache holds), read from object headers; None for anything else
/// or more than a few entries.
fn objects_size(repo: &Repository, commit: Oid) -> Option<usize> {
    let odb = repo.odb().ok()?;
    let (commit_size, kind) = odb.read_header(commit).ok()?;
    if kind != git2::ObjectType::Commit {
        return None;
    }
    let c = repo.find_commit(commit).ok()?;
    let tree = c.tree().ok()?;
    if tree.len() > 16 {
        return None;
    }
    let mut total = commit_size + odb.read_header(tree.id()).ok()?.0;
    for e in tree.iter() {
        total = total.checked_add(odb.read_header(e.id()).ok()?.0)?;
    }
    Some(total)
}

/// The error for a ref git cannot read in the repository at `dir`: the
/// file, what it holds, and what to do (move it out of `refs/`: git can
/// neither read nor delete a broken ref).
fn torn_ref_error(message: &str, name: &str, dir: Option<&std::path::Path>) -> Error {
    let Some(dir) = dir else {
        return Error::local(format!("{message}: the ref {name} cannot be read")).with_hint(
            "`git show-ref` names it as broken too: move its file out of the repository's refs/, then rerun",
        );
    };
    let file = dir.join(name);
    let bytes = std::fs::read(&file).unwrap_or_default();
    let held = if bytes.is_empty() {
        "is empty".to_string()
    } else {
        format!(
            "holds {:?}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(80)])
        )
    };
    let what = if name.starts_with("refs/steps/remote/") {
        "it is git-steps' copy of the remote's branch, which the next fetch writes again"
    } else {
        "its last good value is the last whole line of its reflog (logs/ beside refs/) if it has one, else the branch in a clone that fetched it"
    };
    let aside = dir.join(format!("{}.torn", name.replace('/', "_")));
    Error::local(format!(
        "{message}: {} {held}, which is not a ref (a write cut short by a power cut, or made by another tool)",
        file.display()
    ))
    .with_hint(format!(
        "git cannot read it either, nor delete it with update-ref; {what}. Move it out of refs/ (`mv -n {} {}`), then rerun the same command",
        crate::git::shell_word(&file.to_string_lossy()),
        crate::git::shell_word(&aside.to_string_lossy()),
    ))
}

impl Remote {
    /// A name for messages (the URL of a named remote, where known).
    pub fn describe(&self, repo: &Repository) -> String {
        match repo.find_remote(&self.spec) {
            Ok(r) => format!(
                "{} ({})",
                crate::git::redact(&self.spec),
                crate::git::redact(&String::from_utf8_lossy(r.url_bytes()))
            ),
            Err(_) => crate::git::redact(&self.spec).into_owned(),
        }
    }

    /// The remote's URL (a configured remote's), or the URL or path given,
    /// with credentials redacted.
    pub fn url(&self, repo: &Repository) -> String {
        match repo.find_remote(&self.spec) {
            Ok(r) => crate::git::redact(&String::from_utf8_lossy(r.url_bytes())).into_owned(),
            Err(_) => crate::git::redact(&self.spec).into_owned(),
        }
    }

    /// Read a remote ref (`refs/heads/<branch>`, a journal) without
    /// fetching anything.
    pub fn head(&self, repo: &Repository, refname: &str) -> Result<Option<Oid>> {
        self.refuse_torn(repo, refname)?;
        retrying(|| match self.transport {
            Transport::Libgit2 => match self.head_smart(repo, refname) {
                Some(r) => r,
                None if self.proxied(repo, false) => self.head_git(repo, refname),
                None => self.head_libgit2(repo, refname),
            },
            Transport::Git => self.head_git(repo, refname),
        })
    }

    /// Fetch a remote ref into the local ref `into` (for a branch,
    /// [`tracking_ref`]); returns its value, or None when the remote has no
    /// such ref.
    /// The remote-tracking ref (see [`Remote::note_tracking`]) follows.
    pub fn fetch(&self, repo: &Repository, refname: &str, into: &str) -> Result<Option<Oid>> {
        self.refuse_torn(repo, refname)?;
        let got = retrying(|| match self.transport {
            // libgit2's fetch rewrites a shallow clone's boundary from what
            // the transport reports, and its local transport reports none:
            // the clone would lose its `shallow` file and git could no
            // longer read its own history. git's fetch keeps it.
            Transport::Libgit2 if !repo.is_shallow() => match self.fetch_smart(repo, refname, into)
            {
                Some(r) => r,
                None if self.proxied(repo, false) => self.fetch_git(repo, refname, into),
                None => self.fetch_libgit2(repo, refname, into, None),
            },
            Transport::Libgit2 | Transport::Git => self.fetch_git(repo, refname, into),
        })?;
        if let Some(id) = got {
            // What was fetched (a pack, written unflushed) reaches the disk
            // before any local ref names it.
            crate::flush::repository(repo)?;
            self.note_tracking(repo, refname, id);
        }
        Ok(got)
    }

    /// As [`Remote::fetch`], for derived data a hostile remote could make
    /// huge (the shared hunk cache): nothing is fetched when its objects
    /// would pass `max_bytes`. From a bare repository on this machine the
    /// sizes are read from its object headers before anything moves; over
    /// libgit2's network transports the download stops once it passes the
    /// bound. (With `--transport git`, or in a shallow clone, git fetches
    /// it whole; the reader's own bound still applies.) Ok(None) when the
    /// remote has no such ref or it is too large.
    pub fn fetch_bounded(
        &self,
        repo: &Repository,
        refname: &str,
        into: &str,
        max_bytes: usize,
    ) -> Result<Option<Oid>> {
        if let Some(path) = self.local_path(repo) {
            let theirs = Repository::open_bare(&path)
                .or_else(|_| Repository::open(&path))
                .map_err(|e| self.net_error(repo, "fetch from", e))?;
            let Ok(id) = theirs.refname_to_id(refname) else {
                return Ok(None);
            };
            if objects_size(&theirs, id).is_none_or(|n| n > max_bytes) {
                return Ok(None);
            }
            return self.fetch(repo, refname, into);
        }
        if self.transport == Transport::Libgit2 && !repo.is_shallow() && !self.proxied(repo, false)
        {
            let got = match self.fetch_libgit2(repo, refname, into, Some(max_bytes)) {
                Ok(got) => got,
                // Stopped by the bound (or failed): no cache.
                Err(_) => return Ok(None),
            };
            if let Some(id) = got {
                crate::flush::repository(repo)?;
                self.note_tracking(repo, refname, id);
            }
            return Ok(got);
        }
        self.fetch(repo, refname, into)
    }

    /// The remote-tracking ref git keeps for the remote's `refname`
    /// (`refs/remotes/origin/<branch>`), when this remote is a configured
    /// one whose fetch refspecs map it; None for a URL or a path, as git.
    /// Only a ref under `refs/remotes/` counts: a refspec that maps into
    /// `refs/heads/` (a mirror) would otherwise let a push move a local
    /// branch, the run's own among them.
    pub fn tracking_name(&self, repo: &Repository, refname: &str) -> Option<String> {
        let remote = repo.find_remote(&self.spec).ok()?;
        let name = remote
            .refspecs()
            .filter(|r| r.direction() == git2::Direction::Fetch && r.src_matches(refname))
            .find_map(|r| {
                let buf = r.transform(refname).ok()?;
                buf.as_str().ok().map(str::to_string)
            });
        name.filter(|n| n.starts_with("refs/remotes/") && git2::Reference::is_valid_name(n))
    }

    /// Record that the remote's `refname` is at `id` in its remote-tracking
    /// ref, as `git push` and `git fetch` do, so that `git log
    /// origin/<branch>` audits what the remote holds. It is a note of what
    /// the remote said, not state git-steps reads: failing to write it is
    /// not an error (the next push or fetch writes it again).
    pub fn note_tracking(&self, repo: &Repository, refname: &str, id: Oid) {
        if let Some(name) = self.tracking_name(repo, refname) {
            let log = format!("git-steps: {} {refname}", self.spec);
            let _ = crate::lock::intending(repo, crate::lock::ref_locks(repo, &name), || {
                repo.reference(&name, id, true, &log)
            });
        }
    }

    /// A remote on this disk whose `refname` is a file git cannot read (a
    /// power cut tore it, or another tool wrote it): named, never taken
    /// for a branch that is not there (a push would then write over what
    /// it held).
    pub(super) fn refuse_torn(&self, repo: &Repository, refname: &str) -> Result<()> {
        let Some(dir) = self.local_path(repo) else {
            return Ok(());
        };
        let dir = if dir.join("refs").is_dir() {
            dir
        } else {
            dir.join(".git")
        };
        let torn =
            || std::fs::read(dir.join(refname)).is_ok_and(|b| !crate::git::loose_ref_parses(&b));
        if !torn() {
            return Ok(());
        }
        // What an earlier boot of git-steps left torn there is mended
        // first, on the evidence of its own boot record ([`crate::flush`]).
        if let Ok(remote) = Repository::open_bare(&dir) {
            local::scrub_once(&remote).map_err(|e| match e {
                PushError::Failed(e) => e,
                other => Error::local(format!("cannot check {}: {other:?}", dir.display())),
            })?;
        }
        if torn() {
            return Err(torn_ref_error(
                &format!("cannot read {refname} on {}", self.spec),
                refname,
                Some(&dir),
            ));
        }
        Ok(())
    }

    /// An object file git cannot read, here or in a remote on this disk:
    /// each damaged loose object named (not repaired: git-steps did not
    /// write it, or the scrub would have moved it), with what to do.
    fn damaged_error(&self, repo: &Repository, message: String) -> Error {
        let dirs: Vec<std::path::PathBuf> =
            [Some(repo.commondir().to_path_buf()), self.local_path(repo)]
                .into_iter()
                .flatten()
                .collect();
        let found: Vec<String> = dirs
            .iter()
            .flat_map(|d| crate::git::loose::damaged(&d.join("objects"), 5))
            .map(|p| {
                let size = std::fs::metadata(&p).map_or(0, |m| m.len());
                format!("{} ({size} bytes)", p.display())
            })
            .collect();
        let fsck: Vec<String> = dirs
            .iter()
            .map(|d| {
                format!(
                    "`git --git-dir {} fsck`",
                    crate::git::shell_word(&d.to_string_lossy())
                )
            })
            .collect();
        let named = if found.is_empty() {
            format!("; {} names the damaged file", fsck.join(" and "))
        } else {
            format!(
                "; not whole: {}{}",
                found.join(", "),
                if found.len() >= 5 { ", …" } else { "" }
            )
        };
        Error::local(format!(
            "{message}: an object file on this disk is damaged{named}"
        ))
        .with_hint(crate::error::DAMAGED_OBJECT_HINT)
    }

    fn net_error(&self, repo: &Repository, verb: &str, e: git2::Error) -> Error {
        let message = format!("cannot {verb} {}: {}", self.spec, e.message());
        if let Some(name) = crate::error::unreadable_ref(&e) {
            // A ref file here (or in a remote on this disk) that git cannot
            // read either: not the URL's fault, and not for git-steps to
            // guess a value for.
            // The repository where that file is there and unreadable.
            let dirs = [Some(repo.commondir().to_path_buf()), self.local_path(repo)];
            let dir = dirs.into_iter().flatten().find(|d| {
                std::fs::read(d.join(&name)).is_ok_and(|b| !crate::git::loose_ref_parses(&b))
            });
            return torn_ref_error(&message, &name, dir.as_deref());
        }
        if crate::error::local_failure(&e) {
            // A file that could not be written or read here (or, for a
            // remote that is a path, on its disk): not the URL's fault.
            return Error::local(message).with_hint(crate::error::LOCAL_FAILURE_HINT);
        }
        if crate::error::damaged_object(&e) {
            return self.damaged_error(repo, message);
        }
        // A remote on this disk that is not there (moved, deleted, a
        // typo in `git remote set-url`): libgit2 reads a path it cannot
        // find as a URL whose protocol it does not know.
        let url = match repo.find_remote(&self.spec) {
            Ok(r) => String::from_utf8_lossy(r.url_bytes()).into_owned(),
            Err(_) => self.spec.clone(),
        };
        let path = url.strip_prefix("file://").unwrap_or(&url);
        if !url.contains("://") || url.starts_with("file://") {
            // A relative path is the worktree's, as git reads it.
            let at = repo.workdir().unwrap_or(repo.path()).join(path);
            if !crate::settings::remote::ssh_url(&url) && !at.exists() {
                return Error::remote(
                    format!(
                        "cannot {verb} {}: its path {path} does not exist (moved or deleted?)",
                        self.spec
                    ),
                    false,
                )
                .with_hint(format!(
                    "point the remote at where the repository is now: `git remote set-url {} <path>` (or `git steps init --remote <path>`), then rerun the same command",
                    self.spec
                ));
            }
        }
        Error::remote(message, crate::error::spurious_git2(&e)).with_hint(
            "check the remote's URL (`git remote -v`) and your credentials; `--transport git` uses your git's credential helpers and ssh config",
        )
    }

    /// Make `update` on the remote, or fail without changing it. A lock held
    /// by another writer is contention, not a refusal: the push is retried
    /// for a few seconds, then reported as [`PushError::Locked`].
    ///
    /// A transient failure (the server answered 502/503/504, the connection
    /// was reset or timed out) whose settling found the branch still at the
    /// expected commit is retried with backoff too, within
    /// [`settle::RetryPolicy`]: the update did not land, and the push is a
    /// compare-and-swap, so trying again cannot apply anything twice. A
    /// retry that finds the branch already at the new commit (an earlier
    /// attempt landed before its connection died) is a success.
    pub fn push(&self, repo: &Repository, update: &RefUpdate<'_>) -> Result<(), PushError> {
        let clock = crate::backoff::RealClock;
        let deadline = crate::backoff::Clock::now(&clock) + settle::lock_patience();
        let mut locked = crate::backoff::Backoff::new(
            std::time::Duration::from_millis(20),
            std::time::Duration::from_millis(500),
        );
        let mut tries = settle::Tries::new(&clock, settle::RetryPolicy::from_env());
        loop {
            match self.push_once(repo, update) {
                Err(PushError::Moved { found: Some(h) }) if h == update.new => return Ok(()),
                Err(PushError::Locked(_)) if std::time::Instant::now() < deadline => {
                    locked.wait(&clock, Some(deadline));
                }
                Err(PushError::Failed(e)) => tries.after(e).map_err(PushError::Failed)?,
                other => return other,
            }
        }
    }

    fn push_once(&self, repo: &Repository, update: &RefUpdate<'_>) -> Result<(), PushError> {
        let first = match (self.transport, self.local_path(repo)) {
            // A bare repository on this machine gets a real compare-and-swap
            // (it flushes box and remote together, before its rename).
            (Transport::Libgit2, Some(path)) => self.push_local(repo, &path, update),
            _ => {
                // What the push sends is read from this box: flushed before
                // the local branch, moved after the push, names it, so that
                // the branch never names a torn object. The flush runs while
                // the push waits for the network: only the branch's move
                // waits for it.
                // Its objects/ too, where that is another file system.
                let dir = repo.commondir().to_path_buf();
                let objects = dir.join("objects");
                let (pushed, flushed) = std::thread::scope(|sc| {
                    let flushing = sc.spawn(move || crate::flush::file_systems(&[&dir, &objects]));
                    let pushed = match self.transport {
                        Transport::Libgit2 => match self.push_smart(repo, update) {
                            Some(r) => r,
                            None if self.proxied(repo, true) => self.push_git(repo, update),
                            None => self.push_libgit2(repo, update),
                        },
                        Transport::Git => self.push_git(repo, update),
                    };
                    let flushed = flushing
                        .join()
                        .unwrap_or_else(|_| Err(std::io::Error::other("the flush panicked")));
                    (pushed, flushed)
                });
                let box_failed = |e: std::io::Error| {
                    PushError::Failed(
                            Error::local(format!(
                                "{} accepted {}, but this box could not flush {}: {e}; the step is durable on the remote, and this box's copy of it may not survive a power cut",
                                self.spec,
                                short(update.new),
                                repo.commondir().display()
                            ))
                            .with_hint("fix this box's disk, then rerun the same command: it brings this box up to the durable head and applies nothing twice"),
                        )
                };
                match (pushed, flushed) {
                    (pushed, Ok(())) => pushed,
                    // Landed, so not for settling: the box is at fault.
                    (Ok(()), Err(e)) => return Err(box_failed(e)),
                    // Settled as any failed push; if it landed after all,
                    // the box's failed flush is still the error.
                    (Err(p), Err(e)) => {
                        return match self.settle(repo, update, p) {
                            Ok(()) => Err(box_failed(e)),
                            other => other,
                        }
                    }
                }
            }
        };
        match first {
            Ok(()) => Ok(()),
            Err(moved @ PushError::Moved { found: Some(_) }) => Err(moved),
            Err(e) => self.settle(repo, update, e),
        }
    }
}

/// Run a read of the remote (a ref, a fetch), retrying a transient failure
/// (see [`Error::is_spurious`]) with backoff within [`settle::RetryPolicy`],
/// as a push is: a read changes nothing, so trying again is always safe.
fn retrying<T>(mut read: impl FnMut() -> Result<T>) -> Result<T> {
    let mut tries = settle::Tries::new(&crate::backoff::RealClock, settle::RetryPolicy::from_env());
    loop {
        match read() {
            Err(e) => tries.after(e)?,
            ok => return ok,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ssh_url;

    #[test]
    fn ssh_urls_are_told_from_the_others() {
        for yes in [
            "ssh://git@github.com/a/b.git",
            "git+ssh://host/x",
            "git@github.com:a/b.git",
            "host:repo.git",
            "steps-ssh:/srv/remote.git",
        ] {
            assert!(ssh_url(yes), "{yes}");
        }
        for no in [
            "https://github.com/a/b.git",
            "file:///srv/x.git",
            "git://host/x",
            "/srv/x.git",
            "../x.git",
            "origin",
            "./a:b",
        ] {
            assert!(!ssh_url(no), "{no}");
        }
    }
}
