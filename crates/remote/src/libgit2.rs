//! The libgit2 transport: file paths, file://, git://, http(s)://. No ssh:
//! libgit2 is built without it (`settings::remote::refuse_libgit2_ssh`).
//!
//! Owns credentials (git's credential helpers) and the traps of
//! libgit2's push: `push` returns Ok even when the server refused the ref,
//! so the push-update-reference status is always read; the advertised
//! value is checked against the expected one before anything is sent (push
//! negotiation). Invariant: no libgit2 remote-tracking ref is ever written;
//! every ref git-steps writes is one it names.

use std::cell::RefCell;
use std::path::Path;

use git2::{Cred, CredentialType, FetchOptions, Oid, PushOptions, RemoteCallbacks, Repository};

use super::settle::classify_rejection;
use super::{PushError, RefUpdate, Remote};
use crate::error::{Error, Result};
use crate::git::short;

impl Remote {
    pub(super) fn head_libgit2(&self, repo: &Repository, refname: &str) -> Result<Option<Oid>> {
        let mut remote = libgit2_remote(repo, &self.spec, false)?;
        let conn = remote
            .connect_auth(git2::Direction::Fetch, Some(callbacks(repo)), None)
            .map_err(|e| self.net_error(repo, "read", e))?;
        Ok(advertised(conn.list()?, refname))
    }

    pub(super) fn fetch_libgit2(
        &self,
        repo: &Repository,
        refname: &str,
        into: &str,
        max_bytes: Option<usize>,
    ) -> Result<Option<Oid>> {
        let refspec = format!("+{refname}:{into}");
        let mut remote = libgit2_remote(repo, &self.spec, false)?;
        let mut opts = FetchOptions::new();
        let mut cb = callbacks(repo);
        if let Some(max) = max_bytes {
            // Stop a download that outgrows the bound while it runs: the
            // pack is dropped, nothing of it stays.
            cb.transfer_progress(move |stats| stats.received_bytes() <= max);
        }
        opts.remote_callbacks(cb)
            .download_tags(git2::AutotagOption::None)
            .update_fetchhead(false);
        crate::lock::intending(repo, crate::lock::ref_locks(repo, into), || {
            remote.fetch(
                &[refspec.as_str()],
                Some(&mut opts),
                Some("git-steps: fetch"),
            )
        })
        .map_err(|e| self.net_error(repo, "fetch from", e))?;
        Ok(advertised(remote.list()?, refname))
    }

    /// Push through libgit2's network transports.
    pub(super) fn push_libgit2(
        &self,
        repo: &Repository,
        update: &RefUpdate<'_>,
    ) -> Result<(), PushError> {
        let RefUpdate {
            refname,
            expected,
            new,
            replace,
            ..
        } = *update;
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
            // A replacing update is forced past libgit2's fast-forward
            // check; the negotiation above still makes it a compare-and-swap.
            let refspec = format!("{}{new}:{refname}", if replace { "+" } else { "" });
            let res = remote.push(&[refspec.as_str()], Some(&mut opts));
            if let Some(found) = moved.borrow_mut().take() {
                return Err(PushError::Moved { found });
            }
            if let Err(e) = res {
                if e.code() == git2::ErrorCode::NotFastForward {
                    return Err(PushError::Moved { found: None });
                }
                return Err(PushError::Failed(self.net_error(repo, "push to", e)));
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
}

pub(super) fn callbacks<'a>(repo: &'a Repository) -> RemoteCallbacks<'a> {
    let mut cb = RemoteCallbacks::new();
    let tried = RefCell::new(CredentialType::empty());
    let config = repo.config().ok();
    cb.credentials(move |url, username, allowed| {
        // Try each kind of credential once, like git: the credential
        // helpers, then a plain user name.
        let mut tried = tried.borrow_mut();
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
            "no credentials for {url}: git's credential helpers gave none that the server accepted (try --transport git)"
        )))
    });
    cb
}

/// An anonymous remote for `spec` (a named remote's URL, or its push URL
/// when pushing). Anonymous, so that libgit2 updates no remote-tracking
/// refs of its own: every ref git-steps writes is one it knows about.
pub(super) fn libgit2_remote<'r>(
    repo: &'r Repository,
    spec: &str,
    push: bool,
) -> Result<git2::Remote<'r>> {
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
        crate::git::load_system_certs(repo);
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
        Error::config(format!(
            "{spec:?} is neither a configured remote nor a URL: {}",
            e.message()
        ))
    })
}

impl Remote {
    /// Whether git would reach this remote (its push URL with `push`)
    /// through a proxy ([`super::proxy`]): libgit2's own HTTP, which takes
    /// no proxy here, is then never used; git's transport is, as git
    /// itself would go.
    pub(super) fn proxied(&self, repo: &Repository, push: bool) -> bool {
        let Ok(remote) = libgit2_remote(repo, &self.spec, push) else {
            return false;
        };
        let Some(url) = remote.url().ok().and_then(|u| url::Url::parse(u).ok()) else {
            return false;
        };
        matches!(url.scheme(), "http" | "https")
            && super::proxy::for_remote(repo, &self.spec, &url) != super::proxy::Route::Direct
    }
}

/// The id a remote advertised for `refname`.
fn advertised(heads: &[git2::RemoteHead<'_>], refname: &str) -> Option<Oid> {
    heads.iter().find(|h| h.name() == refname).map(|h| h.oid())
}
