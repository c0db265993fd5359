//! One transport trait: reading a remote ref, fetching it, and pushing a
//! compare-and-swap update of it, whichever way the remote is reached, and
//! the one place where that way is chosen.
//!
//! Owns the choice of transport per remote and direction and one push
//! attempt: the push and this box's flush run together, and a failed or
//! ambiguous attempt is settled by asking the remote ([`crate::settle`]).
//! Invariant: whatever the transport, a push is a compare-and-swap on the
//! expected id, never a force, and an attempt is reported as landed only
//! when the remote holds the new id.

use git2::{Oid, Repository};

use crate::error::{Error, Result};
use crate::git::short;
use crate::{PushError, RefUpdate, Remote, Transport};

/// A way of reaching a remote: git's own CLI ([`GitCli`]), libgit2
/// ([`Libgit2`]), this crate's smart-HTTP client ([`Smart`], which stands
/// aside for libgit2 or git when it does not serve a request), or a bare
/// repository on this machine ([`Local`]). [`Remote::transport_for`]
/// chooses one.
pub(crate) trait Wire {
    /// The remote's `refname`, read without fetching anything.
    fn head(&self, remote: &Remote, repo: &Repository, refname: &str) -> Result<Option<Oid>>;
    /// The remote's `refname` fetched into the local ref `into`: its value,
    /// or None when the remote has no such ref.
    fn fetch(
        &self,
        remote: &Remote,
        repo: &Repository,
        refname: &str,
        into: &str,
    ) -> Result<Option<Oid>>;
    /// One attempt at `update`, unsettled: the caller settles a failure.
    fn push(
        &self,
        remote: &Remote,
        repo: &Repository,
        update: &RefUpdate<'_>,
    ) -> std::result::Result<(), PushError>;
    /// Whether [`Wire::push`] flushes this box's objects itself before the
    /// remote's ref moves (a bare repository on this machine does, in one
    /// commit point with the remote's).
    fn flushes_box(&self) -> bool {
        false
    }
}

/// What a transport is chosen for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// A ref read ([`Remote::head`]).
    Head,
    /// A fetch ([`Remote::fetch`]).
    Fetch,
    /// A push ([`Remote::push`]).
    Push,
}

/// The user's `git`: its credential helpers, ssh config and proxies.
pub(crate) struct GitCli;
/// libgit2's transports (file, git://, http(s) without a proxy).
pub(crate) struct Libgit2;
/// The smart-HTTP client: one kept connection for a run's reads and
/// pushes. Where it does not serve a request (another URL for fetches, a
/// pack too large for one body, a server it cannot read) it stands aside
/// for libgit2, or for git where git would go through a proxy (decided
/// only then: it reads the proxy configuration).
pub(crate) struct Smart {
    push: bool,
}
/// A bare repository on this machine: objects copied loose and the ref
/// moved by a real compare-and-swap ([`Remote::push_local`]).
pub(crate) struct Local {
    path: std::path::PathBuf,
}

impl Remote {
    /// The transport for `op` on this remote, chosen here only. With
    /// `--transport git` (and for every ssh remote), git. With libgit2: a
    /// push into a bare repository on this machine is [`Local`]; a fetch
    /// into a shallow clone is git's (libgit2's fetch rewrites a shallow
    /// clone's boundary from what the transport reports, and its local
    /// transport reports none: the clone would lose its `shallow` file);
    /// an http(s) remote with nothing configured that the smart client
    /// does not do as git does is [`Smart`]; a remote git would reach
    /// through a proxy is git's (libgit2's HTTP takes no proxy here);
    /// every other is libgit2's. (The shared hunk cache's bounded fetch,
    /// [`Remote::fetch_bounded`], reads object sizes first and picks its
    /// own way: it must not fetch through a transport it cannot bound.)
    pub(crate) fn transport_for(&self, repo: &Repository, op: Op) -> Box<dyn Wire> {
        if self.transport == Transport::Git || (op == Op::Fetch && repo.is_shallow()) {
            return Box::new(GitCli);
        }
        if op == Op::Push {
            if let Some(path) = self.local_path(repo) {
                return Box::new(Local { path });
            }
        }
        let push = op == Op::Push;
        if self.smart_url(repo).is_some() {
            return Box::new(Smart { push });
        }
        self.libgit2_or_git(repo, push)
    }

    /// libgit2, or git where git would go through a proxy.
    fn libgit2_or_git(&self, repo: &Repository, push: bool) -> Box<dyn Wire> {
        if self.proxied(repo, push) {
            Box::new(GitCli)
        } else {
            Box::new(Libgit2)
        }
    }

    /// One attempt at `update` through `wire`, settled: the push and this box's flush of
    /// what it sends run together; a failure is settled by what the remote
    /// holds now ([`Remote::settle`]).
    pub(crate) fn push_once(
        &self,
        repo: &Repository,
        wire: &dyn Wire,
        update: &RefUpdate<'_>,
    ) -> std::result::Result<(), PushError> {
        let first = if wire.flushes_box() {
            wire.push(self, repo, update)
        } else {
            // What the push sends is read from this box: flushed before
            // the local branch, moved after the push, names it, so that the
            // branch never names a torn object. The flush runs while the
            // push waits for the network: only the branch's move waits for
            // it. Its objects/ too, where that is another file system.
            let dir = repo.commondir().to_path_buf();
            let objects = dir.join("objects");
            let (pushed, flushed) = std::thread::scope(|sc| {
                let flushing = sc.spawn(move || crate::flush::file_systems(&[&dir, &objects]));
                let pushed = wire.push(self, repo, update);
                let flushed = flushing
                    .join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("the flush panicked")));
                (pushed, flushed)
            });
            match (pushed, flushed) {
                (pushed, Ok(())) => pushed,
                // Landed, so not for settling: the box is at fault.
                (Ok(()), Err(e)) => return Err(self.box_unflushed(repo, update, e)),
                // Settled as any failed push; if it landed after all, the
                // box's failed flush is still the error.
                (Err(p), Err(e)) => {
                    return match self.settle(repo, update, p) {
                        Ok(()) => Err(self.box_unflushed(repo, update, e)),
                        other => other,
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

    /// The remote accepted `update`, but this box could not flush what it
    /// sent.
    fn box_unflushed(
        &self,
        repo: &Repository,
        update: &RefUpdate<'_>,
        e: std::io::Error,
    ) -> PushError {
        PushError::Failed(
            Error::local(format!(
                "{} accepted {}, but this box could not flush {}: {e}; the step is durable on the remote, and this box's copy of it may not survive a power cut",
                self.spec,
                short(update.new),
                repo.commondir().display()
            ))
            .with_hint(crate::error::Hint::rerun_after("fix this box's disk").because("it brings this box up to the durable head and applies nothing twice")),
        )
    }
}

impl Wire for GitCli {
    fn head(&self, remote: &Remote, repo: &Repository, refname: &str) -> Result<Option<Oid>> {
        remote.head_git(repo, refname)
    }
    fn fetch(
        &self,
        remote: &Remote,
        repo: &Repository,
        refname: &str,
        into: &str,
    ) -> Result<Option<Oid>> {
        remote.fetch_git(repo, refname, into)
    }
    fn push(
        &self,
        remote: &Remote,
        repo: &Repository,
        update: &RefUpdate<'_>,
    ) -> std::result::Result<(), PushError> {
        remote.push_git(repo, update)
    }
}

impl Wire for Libgit2 {
    fn head(&self, remote: &Remote, repo: &Repository, refname: &str) -> Result<Option<Oid>> {
        remote.head_libgit2(repo, refname)
    }
    fn fetch(
        &self,
        remote: &Remote,
        repo: &Repository,
        refname: &str,
        into: &str,
    ) -> Result<Option<Oid>> {
        remote.fetch_libgit2(repo, refname, into, None)
    }
    fn push(
        &self,
        remote: &Remote,
        repo: &Repository,
        update: &RefUpdate<'_>,
    ) -> std::result::Result<(), PushError> {
        remote.push_libgit2(repo, update)
    }
}

impl Wire for Smart {
    fn head(&self, remote: &Remote, repo: &Repository, refname: &str) -> Result<Option<Oid>> {
        match remote.head_smart(repo, refname) {
            Some(r) => r,
            None => remote
                .libgit2_or_git(repo, self.push)
                .head(remote, repo, refname),
        }
    }
    fn fetch(
        &self,
        remote: &Remote,
        repo: &Repository,
        refname: &str,
        into: &str,
    ) -> Result<Option<Oid>> {
        match remote.fetch_smart(repo, refname, into) {
            Some(r) => r,
            None => remote
                .libgit2_or_git(repo, self.push)
                .fetch(remote, repo, refname, into),
        }
    }
    fn push(
        &self,
        remote: &Remote,
        repo: &Repository,
        update: &RefUpdate<'_>,
    ) -> std::result::Result<(), PushError> {
        match remote.push_smart(repo, update) {
            Some(r) => r,
            None => remote
                .libgit2_or_git(repo, self.push)
                .push(remote, repo, update),
        }
    }
}

impl Wire for Local {
    // Chosen for pushes only (reads of a bare repository here go through
    // libgit2's local transport, as [`Remote::transport_for`] picks); as
    // reads they are libgit2's too, so a caller that keeps one wire for
    // both gets the same answer.
    fn head(&self, remote: &Remote, repo: &Repository, refname: &str) -> Result<Option<Oid>> {
        Libgit2.head(remote, repo, refname)
    }
    fn fetch(
        &self,
        remote: &Remote,
        repo: &Repository,
        refname: &str,
        into: &str,
    ) -> Result<Option<Oid>> {
        Libgit2.fetch(remote, repo, refname, into)
    }
    fn push(
        &self,
        remote: &Remote,
        repo: &Repository,
        update: &RefUpdate<'_>,
    ) -> std::result::Result<(), PushError> {
        remote.push_local(repo, &self.path, update)
    }
    fn flushes_box(&self) -> bool {
        true
    }
}
