//! Which remote a run is durable on, and how it is reached: plain data read
//! from flags and git config.
//!
//! Owns the spelling rules of a remote (`ssh://`, git's scp-like
//! `host:path`, a configured name, a path) and the transport choice. The
//! network work on a [`Remote`] is the rest of this crate's. Invariant:
//! nothing here opens a connection.

use std::path::Path;

use git2::Repository;

use crate::error::{Error, Result};

/// How to talk to the remote. An ssh remote goes through git (its ssh:
/// your keys, `~/.ssh/config`, `known_hosts`), every other through libgit2
/// unless `--transport` or `steps.transport` says git. libgit2 is built
/// without ssh: `libgit2` with an ssh remote is refused before anything is
/// written ([`refuse_libgit2_ssh`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// File paths, file://, git://, http(s)://, through libgit2 (no ssh).
    Libgit2,
    /// The user's `git` executable, for its credential helpers and ssh config.
    Git,
}

impl Transport {
    /// The name `steps.transport` and `--transport` use.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Libgit2 => "libgit2",
            Transport::Git => "git",
        }
    }

    /// Parse a `steps.transport` value.
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

/// The private ref a fetch of `branch` lands in.
pub fn tracking_ref(branch: &str) -> String {
    format!("refs/steps/remote/{branch}")
}

/// Whether `spec` (a configured remote's name, a URL or a path) reaches its
/// remote over ssh, to fetch or to push: a configured remote's URL or push
/// URL, a URL as given, each also after git's `insteadOf` and
/// `pushInsteadOf` rewrites (as libgit2 and git apply them); `ssh://`,
/// `git+ssh://`, `ssh+git://`, or git's scp-like `[user@]host:path` (a
/// colon before any slash, and not a local path).
pub fn is_ssh(repo: &Repository, spec: &str) -> bool {
    let urls_of = |r: git2::Remote<'_>| -> Vec<String> {
        [Some(r.url_bytes()), r.pushurl_bytes()]
            .into_iter()
            .flatten()
            .map(|u| String::from_utf8_lossy(u).into_owned())
            .collect()
    };
    let urls = match repo.find_remote(spec) {
        Ok(r) => urls_of(r),
        Err(_) => {
            let mut urls = vec![spec.to_string()];
            urls.extend(repo.remote_anonymous(spec).map(urls_of).unwrap_or_default());
            urls
        }
    };
    urls.iter()
        .any(|url| !Path::new(url).exists() && ssh_url(url))
}

/// The transport for `spec` when nothing names one: git for a remote
/// reached over ssh, else libgit2.
pub fn default_transport(repo: &Repository, spec: &str) -> Transport {
    if is_ssh(repo, spec) {
        Transport::Git
    } else {
        Transport::Libgit2
    }
}

/// libgit2 is built without ssh: `--transport libgit2` (or
/// `steps.transport = libgit2`) with a remote reached over ssh is a
/// setting that cannot work, refused before anything is written.
pub fn refuse_libgit2_ssh(repo: &Repository, remote: &Remote) -> Result<()> {
    if remote.transport == Transport::Libgit2 && is_ssh(repo, &remote.spec) {
        return Err(Error::Usage {
            message: format!(
                "remote {:?} is reached over ssh, and the libgit2 transport has no ssh",
                remote.spec
            ),
            hint: "use `--transport git` (git's own ssh, with your keys, ~/.ssh/config and known_hosts: the default for ssh remotes), or unset steps.transport".into(),
        });
    }
    Ok(())
}

/// Whether a URL is an ssh one (see [`is_ssh`]), by its spelling alone.
pub fn ssh_url(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    if ["ssh://", "git+ssh://", "ssh+git://"]
        .iter()
        .any(|p| lower.starts_with(p))
    {
        return true;
    }
    if url.contains("://") {
        return false;
    }
    match (url.find(':'), url.find('/')) {
        (Some(c), Some(sl)) => c > 0 && c < sl,
        (Some(c), None) => c > 0,
        _ => false,
    }
}

/// Whether `spec` names something that exists (a configured remote, or a
/// local path); URLs are taken on trust until the first connection.
pub fn check_spec(repo: &Repository, spec: &str) -> Result<()> {
    if repo.find_remote(spec).is_ok()
        || spec.contains("://")
        || spec.contains('@')
        || is_ssh(repo, spec)
    {
        return Ok(());
    }
    if Path::new(spec).exists() {
        return Ok(());
    }
    let names = crate::git::remote_names(repo);
    let near = names
        .iter()
        .filter(|n| strsim::jaro(spec, n) > 0.7)
        .max_by(|a, b| strsim::jaro(spec, a).total_cmp(&strsim::jaro(spec, b)));
    let have = if names.is_empty() {
        "this repository has no remote".to_string()
    } else {
        format!("`git remote` lists: {}", names.join(", "))
    };
    Err(Error::Usage {
        message: format!(
            "--remote {spec}: not a configured remote, nor a URL, nor an existing path ({have})"
        ),
        hint: match near {
            Some(n) => format!("did you mean `--remote {n}`? nothing was changed").into(),
            None => "name a remote from `git remote -v`, a URL (https://, ssh://, host:path) or the path of a repository; nothing was changed".into(),
        },
    })
}
