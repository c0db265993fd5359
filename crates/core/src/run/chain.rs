//! The run's side refs on the durable domain: the decision journal, the
//! effects' outcomes, the kept run. Each is written only by git-steps and
//! moved only by compare-and-swap.
//!
//! Owns the way one of them is read (fetched from the remote, or the local
//! ref) and moved: a commit of git-steps' own (signed as the user signs),
//! then the remote's compare-and-swap (the commit point), then the local
//! copy under its lock; without a remote the local ref is the commit point,
//! its objects flushed before it moves and its move after. Invariant: a
//! side ref reported as moved is durable, and two writers never both move
//! it from the same value.

use git2::{Oid, Repository};

use crate::error::{Error, Result};
use crate::settings::Settings;
use crate::sync::remote::RefUpdate;

/// What to do with a local side ref the remote does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// It is a stale copy: delete it (the remote is the truth).
    Forget,
    /// It was recorded while the local repository was durable: push it as
    /// it is.
    Push,
}

/// The durable value of the side ref `name`: fetched from the remote into
/// the local ref, or the local ref itself.
pub fn load(repo: &Repository, s: &Settings, name: &str, missing: Missing) -> Result<Option<Oid>> {
    let Some(remote) = &s.remote else {
        return Ok(repo.refname_to_id(name).ok());
    };
    if let Some(h) = remote.fetch(repo, name, name)? {
        return Ok(Some(h));
    }
    let local = repo.refname_to_id(name).ok();
    match (missing, local) {
        (_, None) => Ok(None),
        (Missing::Forget, Some(_)) => {
            crate::lock::delete_ref(repo, name)?;
            Ok(None)
        }
        (Missing::Push, Some(l)) => {
            move_ref(repo, s, name, None, l, "", &|| {})?;
            Ok(Some(l))
        }
    }
}

/// The run branch's durable head: the remote's (fetched into the
/// remote-tracking ref), or the local branch's.
pub fn durable_head(repo: &Repository, s: &Settings) -> Result<Option<Oid>> {
    match &s.remote {
        Some(r) => r.fetch(
            repo,
            &s.refname(),
            &crate::settings::remote::tracking_ref(&s.branch),
        ),
        None => Ok(repo.refname_to_id(&s.refname()).ok()),
    }
}

/// A commit of git-steps' own on top of `parent`: `message`, `tree`, the
/// user's identity, signed as the user's commits are.
pub fn commit(
    repo: &Repository,
    message: &str,
    tree: &git2::Tree<'_>,
    parent: Option<Oid>,
) -> Result<Oid> {
    let who = crate::git::identity(repo)?;
    let parent = parent.map(|h| repo.find_commit(h)).transpose()?;
    let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
    let signer = crate::sign::signer(repo, &who.committer)?;
    crate::sign::commit(
        repo,
        signer.as_ref(),
        &who.author,
        &who.committer,
        message,
        tree,
        &parents,
        None,
    )
}

/// Move the side ref `name` from `expected` to `new` on the durable domain
/// (exit 4 if another writer moved it), then the local copy; `pushed` runs
/// between the remote's acceptance and the local move (a crash point).
/// `what` names the write in errors (`log` is the reflog message).
pub fn move_ref(
    repo: &Repository,
    s: &Settings,
    name: &str,
    expected: Option<Oid>,
    new: Oid,
    log: &str,
    pushed: &dyn Fn(),
) -> Result<()> {
    if let Some(remote) = &s.remote {
        remote
            .push(
                repo,
                &RefUpdate {
                    refname: name,
                    expected,
                    new,
                    replace: false,
                    step: None,
                },
            )
            .map_err(|e| e.into_error(name, &remote.spec, expected))?;
        pushed();
    } else {
        crate::flush::repository(repo)?;
    }
    let log = if log.is_empty() {
        format!("git-steps: {name}")
    } else {
        log.to_string()
    };
    crate::lock::intending(
        repo,
        crate::lock::ref_locks(repo, name),
        || match expected {
            Some(old) if s.remote.is_none() => repo.reference_matching(name, new, true, old, &log),
            // With a remote, the local ref is a copy of what the remote accepted.
            _ if s.remote.is_some() => repo.reference(name, new, true, &log),
            _ => repo.reference(name, new, false, &log),
        },
    )
    .map_err(|e| {
        // With a remote the local copy is forced: only the lock or the
        // disk can stop it.
        crate::lock::refwrite::Moved::from_git2(repo, name, expected, new, s.remote.is_none(), &e)
            .error(None, name, expected, Some(e.message()))
    })?;
    if s.remote.is_none() {
        crate::flush::repository(repo)?;
    }
    Ok(())
}

/// The trailers of a side ref's commit, as git reads them; `bad` turns a
/// missing or unreadable one into the caller's error.
pub struct Fields<'b> {
    trailers: Vec<(String, String)>,
    bad: &'b dyn Fn(&str) -> Error,
}

impl<'b> Fields<'b> {
    pub fn of(msg: &str, bad: &'b dyn Fn(&str) -> Error) -> Result<Fields<'b>> {
        let trailers = git2::message_trailers_strs(msg)
            .map_err(|_| bad("its trailers do not parse"))?
            .iter()
            .map(|(k, v)| (k.to_string(), v.trim().to_string()))
            .collect();
        Ok(Fields { trailers, bad })
    }

    /// The value of the trailer `key` (compared as git compares keys).
    pub fn get(&self, key: &str) -> Result<String> {
        self.trailers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.clone())
            .ok_or_else(|| (self.bad)(&format!("no {key} trailer")))
    }
}
