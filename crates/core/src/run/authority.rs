//! Who may make an effect happen from this box, and where a secret may go:
//! git's own rule (hooks, filters and credentials come from the user's
//! local config, never from repository content) applied to effects.
//!
//! Owns the record of the decisions this box made itself
//! (`<git dir>/steps/decided/<run>`: the digests of its own steps that
//! carry a command, written when it stages them), the command allow-list
//! (`steps.effectCommand`) and the secret bindings
//! (`steps.effectSecret.<NAME>.url`). Invariant: a command effect runs
//! only if this box decided its step (its plan, its decider, its MCP
//! client, an undo of steps it decided) or local config names its
//! program; an `{"env": NAME}` value is read only for a request to a URL
//! that local config binds NAME to. Anything else is refused before a step
//! of this box is pushed, and held pending (named, nothing lost) when it
//! came from the history.

use std::io::Write;
use std::path::PathBuf;

use git2::Repository;
use sha2::Digest;

use crate::plan::effect::{Action, Effect, HeaderValue};
use crate::settings::Settings;

/// The file recording the digests of this box's own decisions with a
/// command effect, for `run`.
fn decided_file(repo: &Repository, run: &str) -> PathBuf {
    let name = crate::git::hex(&sha2::Sha256::digest(run.as_bytes())[..8]);
    repo.commondir().join("steps").join("decided").join(name)
}

fn has_command(effects: &[Effect]) -> bool {
    effects.iter().any(|e| {
        matches!(e.action, Action::Command(_)) || matches!(e.compensate, Some(Action::Command(_)))
    })
}

/// The digest of a step's effects as a commit carries them (each one's
/// object, in canonical JSON, in order): what this box decided is the
/// step's decision *and* these effects. The decision digest alone is in
/// every receipt on the remote, and anyone who can push could copy it
/// onto a commit carrying other effects.
fn effects_digest(effects: &[Effect]) -> String {
    let mut h = sha2::Sha256::new();
    for e in effects {
        let mut buf = Vec::new();
        let _ = crate::plan::canonical::write(&e.value, &mut buf);
        h.update((buf.len() as u64).to_be_bytes());
        h.update(&buf);
    }
    crate::git::hex(&h.finalize())
}

/// Note that this box decided the step `digest` with `effects` (call
/// before it is committed). Only steps with a command effect are noted. A
/// note lost (a full disk, a cut before it reached the disk) only holds
/// the command back, named, for the allow-list.
pub fn note_decided(repo: &Repository, run: &str, digest: &str, effects: &[Effect]) -> bool {
    if !has_command(effects) || decided(repo, run, digest, effects) {
        return false;
    }
    let file = decided_file(repo, run);
    if let Some(dir) = file.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&file)
    {
        let _ = writeln!(f, "{digest} {}", effects_digest(effects));
        let _ = crate::git::shared::created_under(repo.path(), repo.commondir(), &file);
    }
    true
}

/// Whether this box decided the step `digest` with exactly `effects` (as
/// its commit carries them: the receipt's decision digest is no evidence
/// of the effects beside it).
pub fn decided(repo: &Repository, run: &str, digest: &str, effects: &[Effect]) -> bool {
    let want = format!("{digest} {}", effects_digest(effects));
    std::fs::read_to_string(decided_file(repo, run)).is_ok_and(|t| t.lines().any(|l| l == want))
}

/// The programs local config lets run from any step (`*`: any).
fn allowed_programs(repo: &Repository) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(config) = repo.config() {
        if let Ok(mut entries) = config.multivar(crate::keys::EFFECT_COMMAND.name, None) {
            while let Some(Ok(e)) = entries.next() {
                if let Ok(v) = e.value() {
                    out.push(v.trim().to_string());
                }
            }
        }
    }
    out
}

/// The URL prefix local config binds the variable `name` to.
fn secret_url(repo: &Repository, name: &str) -> Option<String> {
    let config = repo.config().ok()?;
    config
        .get_string(&crate::keys::effect_secret_url(name))
        .ok()
        .filter(|u| !u.trim().is_empty())
}

/// Whether `url` is under `prefix` as a URL (scheme, host and port equal,
/// and the path starting with the prefix's, at a `/`).
fn under(url: &str, prefix: &str) -> bool {
    let (Ok(u), Ok(p)) = (url::Url::parse(url), url::Url::parse(prefix)) else {
        return false;
    };
    if u.scheme() != p.scheme()
        || u.host_str() != p.host_str()
        || u.port_or_known_default() != p.port_or_known_default()
    {
        return false;
    }
    let (up, pp) = (u.path(), p.path());
    up.starts_with(pp)
        && (pp.ends_with('/') || up.len() == pp.len() || up[pp.len()..].starts_with('/'))
}

/// Why an effect's secrets may not go where it sends them, if so: each
/// `{"env": NAME}` header must be bound to a URL prefix of the request's
/// URL by local config.
fn secrets(repo: &Repository, action: &Action) -> Option<String> {
    let Action::Http(h) = action else {
        return None;
    };
    for (header, v) in &h.headers {
        let HeaderValue::Env(name) = v else { continue };
        let key = crate::keys::effect_secret_url(name);
        match secret_url(repo, name) {
            None => {
                return Some(format!(
                    "its header `{header}` sends the variable {name}, which local config binds to no URL: `git config {key} <url prefix>` (for {}) allows it",
                    h.url
                ))
            }
            Some(prefix) if !under(&h.url, &prefix) => {
                return Some(format!(
                    "its header `{header}` sends the variable {name} to {}, but local config binds it to {prefix} ({key})",
                    h.url
                ))
            }
            Some(_) => {}
        }
    }
    None
}

/// Whether `ip` is one a request from this box must not reach unasked:
/// loopback, link-local (a cloud's metadata service), private, shared
/// (carrier-grade NAT), unspecified, or such an IPv4 address inside IPv6.
fn private_ip(ip: std::net::IpAddr) -> bool {
    use std::net::IpAddr;
    match ip {
        IpAddr::V4(v) => {
            let o = v.octets();
            v.is_loopback()
                || v.is_link_local()
                || v.is_private()
                || v.is_unspecified()
                || v.is_broadcast()
                || (o[0] == 100 && (64..128).contains(&o[1]))
                || o[0] == 0
        }
        IpAddr::V6(v) => {
            let s = v.segments();
            let o = v.octets();
            let v4 = |a: &[u8]| IpAddr::V4(std::net::Ipv4Addr::new(a[0], a[1], a[2], a[3]));
            // An IPv4 address inside IPv6, however it is put there:
            // mapped (::ffff:a.b.c.d), compatible (::a.b.c.d), SIIT
            // (::ffff:0:a.b.c.d), NAT64 (64:ff9b::a.b.c.d), 6to4
            // (2002:aabb:ccdd::).
            let low32 = (s[..5] == [0; 5] && (s[5] == 0 || s[5] == 0xffff))
                || (s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0)
                || (s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0; 4]);
            let embedded = if low32 {
                Some(v4(&o[12..]))
            } else if s[0] == 0x2002 {
                Some(v4(&o[2..6]))
            } else {
                None
            };
            v.is_loopback()
                || v.is_unspecified()
                || (s[0] & 0xffc0) == 0xfe80
                || (s[0] & 0xfe00) == 0xfc00
                || embedded.is_some_and(private_ip)
        }
    }
}

/// Whether `ip` is one of this machine's own addresses (a public one on
/// an interface reaches services listening on every address): binding a
/// socket to it succeeds only there.
fn own_address(ip: std::net::IpAddr) -> bool {
    std::net::UdpSocket::bind((ip, 0)).is_ok()
}

/// Why a request to `url` needs the opt-in, if it does: its host is, or
/// resolves to, an address [`private_ip`] names. (Resolved here, not where
/// it connects: a name that resolves elsewhere later is not caught.)
fn private_destination(repo: &Repository, url: &str) -> Option<String> {
    let allowed = repo
        .config()
        .ok()
        .and_then(|c| c.get_bool(crate::keys::EFFECT_PRIVATE_HOSTS.name).ok())
        .unwrap_or(false);
    if allowed {
        return None;
    }
    let u = url::Url::parse(url).ok()?;
    let port = u.port_or_known_default().unwrap_or(80);
    let addrs: Vec<std::net::IpAddr> = match u.host()? {
        url::Host::Ipv4(a) => vec![a.into()],
        url::Host::Ipv6(a) => vec![a.into()],
        url::Host::Domain(d) => std::net::ToSocketAddrs::to_socket_addrs(&(d, port))
            .map(|a| a.map(|s| s.ip()).collect())
            .unwrap_or_default(),
    };
    let ip = addrs
        .into_iter()
        .find(|ip| private_ip(*ip) || own_address(*ip))?;
    Some(format!(
        "it sends a request to {url}, at {ip}: a loopback, link-local or private address, which an effect reaches only where local config allows it (`git config {} true`)",
        crate::keys::EFFECT_PRIVATE_HOSTS.name
    ))
}

/// Why this box may not make `action` happen for the step `digest`, if
/// so (for a held effect's note: what it is and what would allow it).
/// `effects` are all the effects of the step (as its commit carries them),
/// `action` the one asked about.
pub fn refusal(
    repo: &Repository,
    s: &Settings,
    digest: &str,
    effects: &[Effect],
    action: &Action,
) -> Option<String> {
    if let Action::Command(argv) = action {
        let program = argv.first().map(String::as_str).unwrap_or_default();
        let allowed = allowed_programs(repo);
        if !decided(repo, &s.run, digest, effects)
            && !allowed.iter().any(|a| a == "*" || a == program)
        {
            return Some(format!(
                "it runs `{}`, and this box did not decide its step (it came from the history: another box's plan, or anyone who can push); local config allows it, for every step anyone pushes: `git config --add {} {}`",
                crate::plan::effect::shown(&argv.join(" ")),
                crate::keys::EFFECT_COMMAND.name,
                crate::plan::effect::shown(program)
            ));
        }
    }
    if let Action::Http(h) = action {
        if let Some(why) = private_destination(repo, &h.url) {
            return Some(why);
        }
    }
    secrets(repo, action)
}

/// Check a step of this box's own before it is staged: every secret it
/// would send is bound to its URL, and set in this environment (found
/// now, not after the step is durable). The error names the effect.
pub fn check_own(repo: &Repository, effects: &[Effect]) -> std::result::Result<(), String> {
    for (i, e) in effects.iter().enumerate() {
        for (what, action) in std::iter::once(("effect", &e.action))
            .chain(e.compensate.iter().map(|c| ("its compensation", c)))
        {
            if let Some(why) = secrets(repo, action) {
                return Err(format!("effect {} ({what}): {why}", i + 1));
            }
            if let Action::Http(h) = action {
                if let Some(why) = private_destination(repo, &h.url) {
                    return Err(format!("effect {} ({what}): {why}", i + 1));
                }
            }
            if let Action::Http(h) = action {
                for (header, v) in &h.headers {
                    if let HeaderValue::Env(name) = v {
                        if std::env::var_os(name).is_none() {
                            return Err(format!(
                                "effect {} ({what}): its header `{header}` reads the variable {name}, which is not set here (it would fail only once the step is durable)",
                                i + 1
                            ));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::under;

    #[test]
    fn private_addresses_are_named() {
        use super::private_ip;
        for p in [
            "127.0.0.1",
            "169.254.169.254",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::127.0.0.1",
            "::ffff:0:7f00:1",
            "64:ff9b::7f00:1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            "2002:a9fe:a9fe::1",
        ] {
            assert!(private_ip(p.parse().unwrap()), "{p}");
        }
        // This machine's own addresses (here its loopback, which every
        // machine has), and not an address it does not hold.
        assert!(super::own_address("127.0.0.1".parse().unwrap()));
        assert!(!super::own_address("198.51.100.77".parse().unwrap()));
        for p in ["140.82.112.3", "8.8.8.8", "2606:4700::1111", "172.32.0.1"] {
            assert!(!private_ip(p.parse().unwrap()), "{p}");
        }
    }

    #[test]
    fn a_secret_goes_only_under_its_prefix() {
        assert!(under(
            "https://api.github.com/repos/x",
            "https://api.github.com/"
        ));
        assert!(under(
            "https://api.github.com/repos/x",
            "https://api.github.com/repos"
        ));
        assert!(!under(
            "https://api.github.com/reposx",
            "https://api.github.com/repos"
        ));
        assert!(!under(
            "https://api.github.com.evil/x",
            "https://api.github.com/"
        ));
        assert!(!under("http://api.github.com/x", "https://api.github.com/"));
        assert!(!under(
            "https://api.github.com:444/x",
            "https://api.github.com/"
        ));
    }
}
