//! Which HTTP proxy a request goes through, chosen as git (and the curl
//! under it) chooses: `remote.<name>.proxy`, then the most specific
//! `http.<url>.proxy`, then `http.proxy`; without any of them the
//! environment (`http_proxy` for http, lower case only as curl reads it;
//! `https_proxy` or `HTTPS_PROXY` for https; then `all_proxy` or
//! `ALL_PROXY`). An empty setting means no proxy; `no_proxy` (or
//! `NO_PROXY`) names the hosts that are reached directly.
//!
//! Owns that choice and the proxy's URL. Invariant: a request that git
//! would send through a proxy never goes direct. A proxy this client cannot
//! speak (`socks5://`, `https://`) is named as such: pushes hand the remote
//! to git's own transport, an effect is refused, nothing is sent around it.

use git2::Repository;

/// A proxy this client speaks: plain HTTP, absolute-form requests and
/// `CONNECT` tunnels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proxy {
    pub host: String,
    pub port: u16,
    /// `Basic <base64(user:password)>` when the proxy URL carries them.
    pub authorization: Option<String>,
    /// The proxy's URL with its password redacted, for messages.
    pub shown: String,
}

/// How a URL is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Direct,
    Via(Proxy),
    /// A proxy of a kind this client does not speak (its redacted URL).
    Unsupported(String),
}

/// The proxy settings of local config, read once: `http.proxy` and every
/// `http.<url>.proxy`.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    general: Option<String>,
    by_url: Vec<(String, String)>,
}

impl Rules {
    /// Local config's (with what `git -c` gave the process: see
    /// [`crate::git::cmdline`]).
    pub fn read(repo: &Repository) -> Rules {
        let mut rules = Rules::default();
        if let Ok(cfg) = repo.config() {
            if let Ok(mut entries) = cfg.entries(Some(r"^http\..*proxy$")) {
                while let Some(Ok(e)) = entries.next() {
                    if let (Ok(name), Ok(value)) = (e.name(), e.value()) {
                        rules.take(name, value);
                    }
                }
            }
        }
        rules
    }

    fn take(&mut self, name: &str, value: &str) {
        let lower = name.to_ascii_lowercase();
        if lower == "http.proxy" {
            self.general = Some(value.to_string());
        } else if let Some(u) = name
            .strip_prefix("http.")
            .filter(|_| lower.ends_with(".proxy"))
            .map(|r| &r[..r.len() - ".proxy".len()])
        {
            // Later settings win, as git reads them.
            self.by_url.push((u.to_string(), value.to_string()));
        }
    }

    /// The route to `url`; `own` is the value of `remote.<name>.proxy`
    /// when the request is a configured remote's and it is set.
    pub fn route(&self, url: &url::Url, own: Option<&str>) -> Route {
        let configured = own
            .map(str::to_string)
            .or_else(|| self.for_url(url))
            .or_else(|| self.general.clone());
        let chosen = match configured {
            Some(v) => v,
            None => match from_environment(url.scheme()) {
                Some(v) => v,
                None => return Route::Direct,
            },
        };
        if chosen.trim().is_empty() || bypassed(url) {
            return Route::Direct;
        }
        parse(&chosen)
    }

    /// The value of the `http.<pattern>.proxy` that matches `url` best, as
    /// git's urlmatch: same scheme, host (a `*` label matches one label),
    /// port and user if given; the longest matching path wins.
    fn for_url(&self, url: &url::Url) -> Option<String> {
        let mut best: Option<(usize, &str)> = None;
        for (pattern, value) in &self.by_url {
            let Some(len) = url_matches(pattern, url) else {
                continue;
            };
            if best.is_none_or(|(b, _)| len >= b) {
                best = Some((len, value));
            }
        }
        best.map(|(_, v)| v.to_string())
    }
}

/// How well `pattern` matches `url` (the length of its path), or None.
fn url_matches(pattern: &str, url: &url::Url) -> Option<usize> {
    let p = url::Url::parse(pattern).ok()?;
    if p.scheme() != url.scheme() || p.port_or_known_default() != url.port_or_known_default() {
        return None;
    }
    if !p.username().is_empty() && p.username() != url.username() {
        return None;
    }
    let (ph, uh) = (p.host_str()?, url.host_str()?);
    let (pl, ul): (Vec<&str>, Vec<&str>) = (ph.split('.').collect(), uh.split('.').collect());
    if pl.len() != ul.len()
        || !pl
            .iter()
            .zip(&ul)
            .all(|(a, b)| *a == "*" || a.eq_ignore_ascii_case(b))
    {
        return None;
    }
    let path = p.path().trim_end_matches('/');
    let target = url.path();
    let on_boundary = target == path
        || (target.starts_with(path) && target.as_bytes().get(path.len()) == Some(&b'/'));
    on_boundary.then_some(path.len() + 1)
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// curl's environment: `http_proxy` (never `HTTP_PROXY`, which a CGI
/// request can set), `https_proxy`/`HTTPS_PROXY`, then `all_proxy`.
fn from_environment(scheme: &str) -> Option<String> {
    let own = match scheme {
        "http" => env("http_proxy"),
        "https" => env("https_proxy").or_else(|| env("HTTPS_PROXY")),
        _ => None,
    };
    own.or_else(|| env("all_proxy"))
        .or_else(|| env("ALL_PROXY"))
}

/// Whether `no_proxy` (or `NO_PROXY`) names the URL's host: `*` names
/// every host, a name names itself and its subdomains (a leading `.` is
/// optional), an address or a CIDR range names the addresses in it.
fn bypassed(url: &url::Url) -> bool {
    env("no_proxy")
        .or_else(|| env("NO_PROXY"))
        .is_some_and(|list| listed(&list, url))
}

fn listed(list: &str, url: &url::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    list.split(',').map(str::trim).any(|entry| {
        let entry = entry.trim_start_matches('.').to_ascii_lowercase();
        if entry.is_empty() {
            return false;
        }
        if entry == "*" {
            return true;
        }
        if let Some((net, bits)) = entry.split_once('/') {
            return in_range(&host, net, bits);
        }
        let entry = entry.trim_start_matches('[').trim_end_matches(']');
        host == entry
            || (host.ends_with(entry) && host.as_bytes()[host.len() - entry.len() - 1] == b'.')
    })
}

fn in_range(host: &str, net: &str, bits: &str) -> bool {
    use std::net::IpAddr;
    let (Ok(h), Ok(n), Ok(bits)) = (
        host.parse::<IpAddr>(),
        net.trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>(),
        bits.parse::<u32>(),
    ) else {
        return false;
    };
    let (h, n, width) = match (h, n) {
        (IpAddr::V4(h), IpAddr::V4(n)) => (u32::from(h) as u128, u32::from(n) as u128, 32),
        (IpAddr::V6(h), IpAddr::V6(n)) => (u128::from(h), u128::from(n), 128),
        _ => return false,
    };
    if bits > width {
        return false;
    }
    let shift = width - bits;
    shift >= width || (h >> shift) == (n >> shift)
}

/// A proxy setting as curl reads it: `[scheme://][user[:password]@]host[:port]`,
/// http when no scheme is given, port 1080 when none is.
fn parse(value: &str) -> Route {
    let value = value.trim();
    let full = if value.contains("://") {
        value.to_string()
    } else {
        format!("http://{value}")
    };
    let shown = crate::git::redact(&full).into_owned();
    let Ok(u) = url::Url::parse(&full) else {
        return Route::Unsupported(shown);
    };
    if u.scheme() != "http" {
        return Route::Unsupported(shown);
    }
    let Some(host) = u.host_str() else {
        return Route::Unsupported(shown);
    };
    let authorization = (!u.username().is_empty()).then(|| {
        use base64::Engine;
        let pair = format!(
            "{}:{}",
            super::smart::percent_decode(u.username()),
            super::smart::percent_decode(u.password().unwrap_or_default())
        );
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(pair)
        )
    });
    Route::Via(Proxy {
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port: u.port().unwrap_or(1080),
        authorization,
        shown,
    })
}

/// The route to a configured remote's (or a URL's) `url`.
pub fn for_remote(repo: &Repository, spec: &str, url: &url::Url) -> Route {
    let own = repo.find_remote(spec).ok().and_then(|_| {
        repo.config()
            .ok()?
            .get_string(&format!("remote.{spec}.proxy"))
            .ok()
    });
    Rules::read(repo).route(url, own.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(general: Option<&str>, by_url: &[(&str, &str)]) -> Rules {
        Rules {
            general: general.map(str::to_string),
            by_url: by_url
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
        }
    }

    fn via(r: Route) -> (String, u16) {
        match r {
            Route::Via(p) => (p.host, p.port),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn config_comes_first_most_specific_url_wins_and_empty_means_direct() {
        let u = url::Url::parse("https://git.example.com/team/repo.git").unwrap();
        let r = rules(
            Some("general:3128"),
            &[
                ("https://git.example.com", "host:1"),
                ("https://git.example.com/team", "team:2"),
                ("https://*.example.com/other", "other:3"),
                ("http://git.example.com/team", "plain:4"),
            ],
        );
        assert_eq!(via(r.route(&u, None)), ("team".into(), 2));
        assert_eq!(via(r.route(&u, Some("own:5"))), ("own".into(), 5));
        assert_eq!(r.route(&u, Some("")), Route::Direct);
        let elsewhere = url::Url::parse("https://x.example.com/other/a").unwrap();
        assert_eq!(via(r.route(&elsewhere, None)), ("other".into(), 3));
        let none = url::Url::parse("https://example.org/").unwrap();
        assert_eq!(via(r.route(&none, None)), ("general".into(), 3128));
        // Not on a path boundary: /teamwork is not under /team.
        let work = url::Url::parse("https://git.example.com/teamwork").unwrap();
        assert_eq!(via(r.route(&work, None)), ("host".into(), 1));
    }

    #[test]
    fn a_proxy_url_is_read_as_curl_reads_it() {
        let Route::Via(p) = parse("alice:s%40cret@proxy.local") else {
            panic!()
        };
        assert_eq!((p.host.as_str(), p.port), ("proxy.local", 1080));
        assert_eq!(
            p.authorization.as_deref(),
            Some("Basic YWxpY2U6c0BjcmV0"),
            "alice:s@cret"
        );
        assert!(!p.shown.contains("cret"), "{}", p.shown);
        assert!(matches!(parse("socks5://h:1"), Route::Unsupported(_)));
        assert!(matches!(parse("https://h:1"), Route::Unsupported(_)));
    }

    #[test]
    fn no_proxy_names_hosts_domains_and_ranges() {
        let host = |h: &str| url::Url::parse(&format!("http://{h}/")).unwrap();
        let cases = [
            ("example.com", "example.com", true),
            ("example.com", "a.example.com", true),
            (".example.com", "a.example.com", true),
            ("example.com", "badexample.com", false),
            ("*", "anything", true),
            ("10.0.0.0/8", "10.1.2.3", true),
            ("10.0.0.0/8", "11.1.2.3", false),
            ("127.0.0.1", "127.0.0.1", true),
            ("::1", "[::1]", true),
        ];
        for (list, h, want) in cases {
            assert_eq!(listed(list, &host(h)), want, "{list} / {h}");
        }
    }
}
