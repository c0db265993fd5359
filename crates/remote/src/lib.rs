//! git-steps' durable remote: reading, fetching and compare-and-swap
//! pushing the run's branch (and its side refs) on the remote that makes a
//! step durable.
//!
//! Owns the commit point when the durable domain is a remote: a step is
//! durable exactly when the remote accepted the branch update. Invariant: a
//! push is a compare-and-swap ([`RefUpdate`]) on the branch's expected id,
//! never a force, and a rejected or ambiguous update is never reported as
//! success.
//!
//! A push, from the loop to the wire, reads in five files: [`retry`]'s
//! loop (a branch lock waited for, a transient failure tried again),
//! `transport.rs` (the transport chosen, one attempt, this box flushed
//! while it runs), `settle.rs` (a failed attempt settled by asking the
//! remote), and `git-steps-io`'s `backoff.rs` (the waits, jittered) and
//! `keys.rs` (how many tries and how long: `Environment::DEFAULT` and the
//! `GIT_STEPS_NET_*` variables over it). The
//! transports behind the one trait: `git_cli.rs` (the user's `git`),
//! `libgit2.rs`, `smart/` (the smart-HTTP client, over `http.rs`,
//! `framing.rs`, `pace.rs` and `proxy.rs`) and `local.rs` (a bare
//! repository on this machine). [`spec`] is a remote's spelling and
//! transport as plain data, `errors.rs` the wording of failures.
//!
//! Below it: `git-steps-error` and `git-steps-io`; above it, the engine
//! (`git-steps-core`, where this crate is `sync::remote` and [`spec`] is
//! `settings::remote`).
#![forbid(unsafe_code)]

use git_steps_error as error;
use git_steps_io::{backoff, crash, flush, git, keys, lock, os};

pub use crate::spec::{check_spec, is_ssh, ssh_url, tracking_ref, Remote, Transport};
use git2::{Oid, Repository};

use crate::error::{Error, Result};
use crate::git::short;
use errors::torn_ref_error;
use retry::retrying;
use transport::Op;

mod errors;
mod framing;
mod git_cli;
pub mod http;
mod libgit2;
mod local;
mod pace;
pub mod proxy;
pub mod relay;
pub mod retry;
mod settle;
mod smart;
pub mod spec;
mod transport;
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
            hint: crate::error::Hint::rerun().because("it reconciles with the new durable head and applies what is still missing"),
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
            hint: crate::error::Hint::rerun_when("let the other push finish (if nothing else writes to the remote, the lock was left by a process that died: remove the lock file it names on the remote, as git would tell you)"),
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
        let wire = self.transport_for(repo, Op::Head);
        retrying(|| wire.head(self, repo, refname))
    }

    /// Fetch a remote ref into the local ref `into` (for a branch,
    /// [`tracking_ref`]); returns its value, or None when the remote has no
    /// such ref.
    /// The remote-tracking ref (see [`Remote::note_tracking`]) follows.
    pub fn fetch(&self, repo: &Repository, refname: &str, into: &str) -> Result<Option<Oid>> {
        self.refuse_torn(repo, refname)?;
        let wire = self.transport_for(repo, Op::Fetch);
        let got = retrying(|| wire.fetch(self, repo, refname, into))?;
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
    pub(crate) fn refuse_torn(&self, repo: &Repository, refname: &str) -> Result<()> {
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
