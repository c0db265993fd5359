//! The smart-HTTP push: a step's push as one receive-pack POST on a
//! connection kept for the whole run.
//!
//! libgit2 asks for the ref advertisement (`GET info/refs`) before every
//! push and opens a connection for each: two round trips a step, and a TLS
//! handshake. Here the advertisement is read once per process and URL (it
//! gives the server's capabilities and the ids it holds); after it, each
//! push is one POST whose command names the expected old id, so the
//! server's own ref transaction is the compare-and-swap (a branch that
//! moved is answered `ng`), with a pack of the objects the new commit adds
//! to the expected one, which the server holds. Owns the session per URL
//! (connection, credentials, capabilities) and the receive-pack protocol
//! (pkt-lines, side band, report-status).
//!
//! Invariant: an update is reported as made only when the server's report
//! says `ok` for the ref; everything else goes to the caller's settling,
//! which asks the server afresh. Where this client would not do what git
//! does (a proxy, client certificates, extra headers, cookies, redirects,
//! a server that is not smart, SHA-256), the push goes through libgit2, as
//! before.

use std::sync::Mutex;

use git2::{Oid, Repository};

use super::http::{Client, Endpoint, Failure, Response};
use super::settle::classify_rejection;
use super::{PushError, RefUpdate, Remote};
use wire::{pack, parse_advertisement, pkt_line, read_report, Report};

mod wire;
use crate::error::{Error, Result};
#[doc(hidden)]
pub use wire::fuzzing as wire_fuzzing;

/// A server, as the last advertisement showed it.
struct SmartSession {
    url: String,
    client: Client,
    /// `Authorization` header value, once the server asked.
    auth: Option<String>,
    /// A user name and password the URL holds.
    url_credentials: Option<(String, String)>,
    /// The URL git's credential helpers are asked about: without a
    /// password, with the user name the URL gives.
    helper_url: String,
    caps: Vec<String>,
    /// The refs it advertised, and every ref this session moved since.
    refs: Vec<(String, Oid)>,
    /// No request went out since the advertisement: reads may share it
    /// (a run's first reads of its branch and journal are one snapshot).
    fresh: bool,
}

/// One session per URL in this process; a URL this client gave up on
/// (a redirect, a server that is not smart) is remembered as None.
static SESSIONS: Mutex<Vec<(String, Option<SmartSession>)>> = Mutex::new(Vec::new());

const RECEIVE_PACK_ADVERTISEMENT: &str = "application/x-git-receive-pack-advertisement";

/// Why this client stepped aside for libgit2.
struct Aside;

impl Remote {
    /// Push `update` as one receive-pack POST; None when this client does
    /// not serve the remote (the caller uses libgit2).
    pub(super) fn push_smart(
        &self,
        repo: &Repository,
        update: &RefUpdate<'_>,
    ) -> Option<Result<(), PushError>> {
        let url = self.smart_url(repo)?;
        let mut sessions = SESSIONS.lock().unwrap_or_else(|p| p.into_inner());
        let session = match session_for(&mut sessions, repo, &url, &self.spec) {
            Ok(Some(s)) => s,
            Ok(None) => return None,
            Err(e) => return Some(Err(PushError::Failed(self.smart_error(e)))),
        };
        match session.push(repo, update) {
            Ok(r) => Some(r.map_err(|e| match e {
                PushError::Failed(e) => PushError::Failed(self.smart_error(e)),
                other => other,
            })),
            // This step's pack is too large to send in one body: libgit2
            // streams it; the session stays for the steps after it.
            Err(Aside) => None,
        }
    }

    /// [`Remote::fetch`] read from the receive-pack advertisement, when the
    /// remote's `refname` is absent or a commit this repository already
    /// has: then nothing needs downloading, and a run's first read and its
    /// pushes share one connection. None when this client does not serve
    /// the remote or objects must come down (libgit2 fetches them).
    pub(super) fn fetch_smart(
        &self,
        repo: &Repository,
        refname: &str,
        into: &str,
    ) -> Option<Result<Option<Oid>>> {
        let url = self.smart_url(repo)?;
        // Reads come from the push URL's advertisement only where fetches
        // go to the same URL (no `pushurl`, no `pushInsteadOf`).
        let fetch_url = super::libgit2::libgit2_remote(repo, &self.spec, false).ok()?;
        if fetch_url.url_bytes() != url.as_bytes() {
            return None;
        }
        let mut sessions = SESSIONS.lock().unwrap_or_else(|p| p.into_inner());
        let known = sessions.iter().any(|(u, _)| *u == url);
        // A server this client cannot reach or read is libgit2's to report.
        let session = session_for(&mut sessions, repo, &url, &self.spec).ok()??;
        if known && !session.fresh {
            match session.advertise(repo) {
                Ok(()) => {}
                Err(AdvertiseError::Aside) => {
                    forget(&mut sessions, &url);
                    return None;
                }
                Err(AdvertiseError::Failed(_)) => return None,
            }
        }
        let Some(id) = session.value(refname) else {
            return Some(Ok(None));
        };
        let has = repo.odb().ok()?.exists(id) && repo.find_commit(id).is_ok();
        if !has {
            return None;
        }
        if repo.refname_to_id(into).ok() != Some(id) {
            let wrote = crate::lock::intending(repo, crate::lock::ref_locks(repo, into), || {
                repo.reference(into, id, true, "git-steps: fetch")
            });
            if let Err(e) = wrote {
                return Some(Err(Error::from(e)));
            }
        }
        Some(Ok(Some(id)))
    }

    /// The value of `refname` on the server, read from a fresh
    /// advertisement over the session's connection; None when this process
    /// has no session with the remote (the caller asks libgit2).
    pub(super) fn head_smart(
        &self,
        repo: &Repository,
        refname: &str,
    ) -> Option<Result<Option<Oid>>> {
        let url = self.smart_url(repo)?;
        let mut sessions = SESSIONS.lock().unwrap_or_else(|p| p.into_inner());
        let session = sessions
            .iter_mut()
            .find(|(u, _)| *u == url)
            .and_then(|(_, s)| s.as_mut())?;
        match session.advertise(repo) {
            Ok(()) => Some(Ok(session.value(refname))),
            Err(AdvertiseError::Aside) => {
                forget(&mut sessions, &url);
                None
            }
            Err(AdvertiseError::Failed(e)) => Some(Err(self.smart_error(e))),
        }
    }

    /// The push URL when this client serves it: http(s), with nothing
    /// configured that it does not do as git does.
    pub(crate) fn smart_url(&self, repo: &Repository) -> Option<String> {
        if std::env::var(crate::keys::HTTP_CLIENT.name).as_deref() == Ok("libgit2") {
            return None;
        }
        // Decided once per repository and remote in a process: the
        // config's walk is not repeated for every step.
        static DECIDED: Mutex<Vec<(std::path::PathBuf, String, Option<String>)>> =
            Mutex::new(Vec::new());
        let key = (repo.path().to_path_buf(), self.spec.clone());
        let mut decided = DECIDED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, _, url)) = decided.iter().find(|(p, s, _)| (p, s) == (&key.0, &key.1)) {
            return url.clone();
        }
        let url = (|| {
            let remote = super::libgit2::libgit2_remote(repo, &self.spec, true).ok()?;
            let url = remote
                .pushurl_bytes()
                .or_else(|| Some(remote.url_bytes()))
                .map(|b| String::from_utf8_lossy(b).into_owned())?;
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return None;
            }
            plain_http_config(repo).then_some(url)
        })();
        decided.push((key.0, key.1, url.clone()));
        url
    }

    fn smart_error(&self, e: Error) -> Error {
        if e.hint().is_some() {
            return e;
        }
        e.with_hint("check the remote's URL (`git remote -v`) and your credentials; `--transport git` uses your git's credential helpers and proxy settings")
    }
}

/// The session for `url`, made (with its first advertisement) if this
/// process has none; None when the URL is served by libgit2.
fn session_for<'a>(
    sessions: &'a mut Vec<(String, Option<SmartSession>)>,
    repo: &Repository,
    url: &str,
    spec: &str,
) -> Result<Option<&'a mut SmartSession>> {
    if let Some(i) = sessions.iter().position(|(u, _)| u == url) {
        return Ok(sessions[i].1.as_mut());
    }
    let parsed = url::Url::parse(url).map_err(|e| Error::config(format!("{url}: {e}")))?;
    let Some(endpoint) = Endpoint::parse(&parsed) else {
        sessions.push((url.to_string(), None));
        return Ok(None);
    };
    // Through the proxy git would use; one this client does not speak is
    // git's own transport's (see `Remote::proxied`).
    let proxy = match super::proxy::for_remote(repo, spec, &parsed) {
        super::proxy::Route::Direct => None,
        super::proxy::Route::Via(p) => Some(p),
        super::proxy::Route::Unsupported(_) => {
            sessions.push((url.to_string(), None));
            return Ok(None);
        }
    };
    crate::git::load_system_certs(repo);
    let client = Client::new(
        endpoint,
        crate::git::ca_locations(repo),
        crate::keys::environment().net_timeout,
    )
    .map_err(Error::local)?
    .via(proxy);
    // Credentials in the URL are sent when the server asks, as git sends
    // them: a user name alone goes to the credential helpers.
    let url_credentials = match (parsed.username(), parsed.password()) {
        (user, Some(pass)) => Some((percent_decode(user), percent_decode(pass))),
        _ => None,
    };
    let mut helper_url = parsed.clone();
    let _ = helper_url.set_password(None);
    let mut session = SmartSession {
        url: crate::git::redact(url).into_owned(),
        client,
        auth: None,
        url_credentials,
        helper_url: helper_url.to_string(),
        caps: Vec::new(),
        refs: Vec::new(),
        fresh: false,
    };
    match session.advertise(repo) {
        Ok(()) => {
            sessions.push((url.to_string(), Some(session)));
            Ok(sessions.last_mut().and_then(|(_, s)| s.as_mut()))
        }
        Err(AdvertiseError::Aside) => {
            sessions.push((url.to_string(), None));
            Ok(None)
        }
        Err(AdvertiseError::Failed(e)) => Err(e),
    }
}

fn forget(sessions: &mut [(String, Option<SmartSession>)], url: &str) {
    for (u, s) in sessions.iter_mut() {
        if u == url {
            *s = None;
        }
    }
}

/// How many connections and requests this process's smart-HTTP sessions
/// made (for `-v` and the benchmarks).
pub fn counts() -> (usize, usize) {
    use std::sync::atomic::Ordering;
    (
        super::http::CONNECTIONS.load(Ordering::Relaxed),
        super::http::REQUESTS.load(Ordering::Relaxed),
    )
}

enum AdvertiseError {
    Aside,
    Failed(Error),
}

impl SmartSession {
    /// Send a request, answering the server's request for credentials
    /// once with git's credential helpers.
    fn send(
        &mut self,
        repo: &Repository,
        method: &str,
        target: &str,
        mut headers: Vec<(&'static str, String)>,
        body: &[u8],
        sent: &mut dyn FnMut(),
    ) -> Result<Response> {
        let base = headers.len();
        for attempt in 0..2 {
            headers.truncate(base);
            if let Some(a) = &self.auth {
                headers.push(("Authorization", a.clone()));
            }
            let resp = self
                .client
                .request(method, target, &headers, body, sent)
                .map_err(|f| failure(&self.url, f))?;
            if resp.status != 401 || attempt == 1 {
                return Ok(resp);
            }
            let Some(cred) = self
                .url_credentials
                .clone()
                .or_else(|| helper_credentials(repo, &self.helper_url))
            else {
                return Ok(resp);
            };
            self.auth = Some(basic(&cred.0, &cred.1));
        }
        unreachable!("two attempts at most")
    }

    /// Read the ref advertisement (`GET info/refs?service=git-receive-pack`).
    fn advertise(&mut self, repo: &Repository) -> std::result::Result<(), AdvertiseError> {
        let target = format!(
            "{}/info/refs?service=git-receive-pack",
            self.client.endpoint.path
        );
        let resp = self
            .send(
                repo,
                "GET",
                &target,
                vec![("Pragma", "no-cache".into())],
                &[],
                &mut || {},
            )
            .map_err(AdvertiseError::Failed)?;
        if (300..400).contains(&resp.status) {
            return Err(AdvertiseError::Aside);
        }
        status_ok(&self.url, &resp).map_err(AdvertiseError::Failed)?;
        if resp.header("Content-Type") != Some(RECEIVE_PACK_ADVERTISEMENT) {
            // A dumb server, or something else: libgit2 says what.
            return Err(AdvertiseError::Aside);
        }
        let (caps, refs) = parse_advertisement(&resp.body).map_err(|m| {
            AdvertiseError::Failed(Error::remote(
                format!("{}: the ref advertisement is malformed: {m}", self.url),
                false,
            ))
        })?;
        let sha1 = caps
            .iter()
            .all(|c| !c.starts_with("object-format=") || c == "object-format=sha1");
        if !sha1 || !caps.iter().any(|c| c == "report-status") {
            return Err(AdvertiseError::Aside);
        }
        self.caps = caps;
        self.refs = refs;
        self.fresh = true;
        Ok(())
    }

    fn value(&self, refname: &str) -> Option<Oid> {
        self.refs
            .iter()
            .find(|(n, _)| n == refname)
            .map(|(_, id)| *id)
    }

    fn push(
        &mut self,
        repo: &Repository,
        update: &RefUpdate<'_>,
    ) -> std::result::Result<Result<(), PushError>, Aside> {
        let RefUpdate {
            refname,
            expected,
            new,
            ..
        } = *update;
        let hide: Vec<Oid> = match expected {
            Some(e) => vec![e],
            None => self.refs.iter().map(|(_, id)| *id).collect(),
        };
        let pack = match pack(repo, new, &hide) {
            Ok(Some(p)) => p,
            Ok(None) => return Err(Aside),
            Err(e) => return Ok(Err(PushError::Failed(e))),
        };
        let side_band = self.caps.iter().any(|c| c == "side-band-64k");
        let old = expected.unwrap_or(Oid::ZERO_SHA1);
        let mut body = Vec::with_capacity(pack.len() + 200);
        pkt_line(
            &mut body,
            format!(
                "{old} {new} {refname}\0report-status{} agent=git/2.0(git-steps-{})\n",
                if side_band { " side-band-64k" } else { "" },
                env!("CARGO_PKG_VERSION")
            )
            .as_bytes(),
        );
        body.extend_from_slice(b"0000");
        body.extend_from_slice(&pack);
        let target = format!("{}/git-receive-pack", self.client.endpoint.path);
        let headers = vec![
            (
                "Content-Type",
                "application/x-git-receive-pack-request".to_string(),
            ),
            (
                "Accept",
                "application/x-git-receive-pack-result".to_string(),
            ),
        ];
        let step = update.step;
        self.fresh = false;
        let resp = match self.send(repo, "POST", &target, headers, &body, &mut || {
            if let Some(id) = step {
                crate::crash::point("push-sent", id);
            }
        }) {
            Ok(r) => r,
            Err(e) => return Ok(Err(PushError::Failed(e))),
        };
        if let Err(e) = status_ok(&self.url, &resp) {
            return Ok(Err(PushError::Failed(e)));
        }
        let report = match read_report(&resp.body, side_band) {
            Ok(r) => r,
            Err(m) => {
                return Ok(Err(PushError::Failed(Error::remote(
                    format!("{}: the push's report is malformed: {m}", self.url),
                    false,
                ))))
            }
        };
        let Report { unpack, refs, said } = report;
        if unpack != "ok" {
            return Ok(Err(PushError::Rejected(format!(
                "the server could not unpack the step's objects: {unpack}{}",
                if said.trim().is_empty() {
                    String::new()
                } else {
                    format!(" ({})", said.trim())
                }
            ))));
        }
        match refs.iter().find(|(n, _)| n == refname) {
            Some((_, None)) => {
                self.refs.retain(|(n, _)| n != refname);
                self.refs.push((refname.to_string(), new));
                Ok(Ok(()))
            }
            Some((_, Some(reason))) => Ok(Err(classify_rejection(reason, &said))),
            None => Ok(Err(PushError::Rejected(format!(
                "the server's report names no status for {refname}"
            )))),
        }
    }
}

/// A non-2xx answer as an error: 5xx and 429 are transient (retried).
fn status_ok(url: &str, resp: &Response) -> Result<()> {
    if (200..300).contains(&resp.status) {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&resp.body[..resp.body.len().min(300)])
        .trim()
        .to_string();
    let transient = matches!(resp.status, 429 | 500 | 502 | 503 | 504);
    let mut e = Error::remote(
        format!(
            "{url}: unexpected http status code: {} {}{}",
            resp.status,
            resp.reason,
            if text.is_empty() {
                String::new()
            } else {
                format!(" ({text})")
            }
        ),
        transient,
    );
    if resp.status == 401 || resp.status == 403 {
        e = e.with_hint("the server wants credentials that git's credential helpers did not give (`git credential fill` shows what they give); `--transport git` asks as git does");
    }
    Err(e)
}

fn failure(url: &str, f: Failure) -> Error {
    match f {
        Failure::Connect { message, transient } => {
            Error::remote(format!("{url}: {message}"), transient)
        }
        Failure::Broken(m) => Error::remote(format!("{url}: {m}"), true),
    }
}

/// `Basic` credentials.
fn basic(user: &str, pass: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
    )
}

/// A user name and password from git's credential helpers for `url`.
fn helper_credentials(repo: &Repository, url: &str) -> Option<(String, String)> {
    let cfg = repo.config().ok()?;
    git2::CredentialHelper::new(url).config(&cfg).execute()
}

/// `%XX` escapes of a URL's user information decoded.
pub(super) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Some(v) = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether the repository's http settings are ones this client honours as
/// git does: CA locations given for every URL, and nothing that needs
/// libgit2 (or git) — a proxy, client certificates, verification off,
/// extra headers, cookies, low-speed limits — nor any setting for a
/// particular URL (`http.<url>.*`: which URLs git's matching would apply
/// it to is not guessed here), nor `http.*` given on git's command line
/// (`git -c`, which libgit2 does not read either). When in doubt, libgit2.
fn plain_http_config(repo: &Repository) -> bool {
    // Proxies are this client's too ([`super::proxy`]); how to
    // authenticate to one is not.
    let env = [
        "GIT_SSL_NO_VERIFY",
        "GIT_SSL_CERT",
        "GIT_SSL_KEY",
        "GIT_HTTP_PROXY_AUTHMETHOD",
        "GIT_HTTP_LOW_SPEED_LIMIT",
        "GIT_HTTP_LOW_SPEED_TIME",
    ];
    if env
        .iter()
        .any(|k| std::env::var_os(k).is_some_and(|v| !v.is_empty()))
    {
        return false;
    }
    let on_command_line = std::env::var("GIT_CONFIG_PARAMETERS")
        .is_ok_and(|p| p.to_ascii_lowercase().contains("http."))
        || std::env::vars().any(|(k, v)| {
            k.starts_with("GIT_CONFIG_KEY_") && v.to_ascii_lowercase().starts_with("http.")
        });
    if on_command_line {
        return false;
    }
    let Ok(cfg) = repo.config() else { return false };
    let Ok(mut entries) = cfg.entries(Some(r"^(http|remote)\..*")) else {
        return false;
    };
    let allowed = [
        "sslcainfo",
        "sslcapath",
        "postbuffer",
        "receivepack",
        "proxy",
    ];
    while let Some(entry) = entries.next() {
        let Ok(e) = entry else { return false };
        let Ok(name) = e.name() else { return false };
        let name = name.to_ascii_lowercase();
        if let Some(rest) = name.strip_prefix("http.") {
            let proxy_of_url = rest.contains('.') && rest.ends_with(".proxy");
            if !proxy_of_url && (rest.contains('.') || !allowed.contains(&rest)) {
                return false;
            }
        } else if name.ends_with(".proxyauthmethod") {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_information_is_decoded() {
        assert_eq!(percent_decode("a%40b%3Ac"), "a@b:c");
        assert_eq!(percent_decode("plain"), "plain");
        assert_eq!(percent_decode("50%"), "50%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
