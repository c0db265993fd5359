//! Delivering one effect: an HTTP request or a command, tried until it
//! succeeds or the tries run out (SPEC "Effects").
//!
//! Owns the wire side of an effect: the `Idempotency-Key` header (or the
//! `GIT_STEPS_IDEMPOTENCY_KEY` variable of a command), header values read
//! from the environment, the timeout of a try, which answers are worth
//! another try (5xx, 408, 429, a timeout, a broken connection, a command
//! that fails) and the backoff between tries ([`crate::backoff`]: 0.5 s
//! doubling to 30 s, jittered, or the server's `Retry-After`, at most a
//! minute). Invariant: every try of an
//! effect carries the same key, and a definite answer (2xx, or another 4xx)
//! ends the tries; nothing here records anything (that is
//! [`super::outcomes`]'s, after the caller's crash point).

use std::io::{Read, Seek, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::plan::effect::{Action, Body, HeaderValue, Http};
use crate::run::outcomes::EffectStatus;
use crate::run::supervisor;
use crate::sync::remote::http::{Client, Endpoint, Failure};

/// How an effect is tried.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Tries in all (at least 1).
    pub tries: usize,
    /// One try's limit.
    pub timeout: Duration,
    /// Where the box's CA certificates are, for https.
    pub ca: (Option<std::path::PathBuf>, Option<std::path::PathBuf>),
    /// The proxies local config names (with the environment's, read as
    /// each request is made): a request goes where git's would.
    pub proxies: crate::sync::remote::proxy::Rules,
    /// Where this box counts the tries it started for this effect since
    /// its last recorded outcome ([`tries_file`]), and the step's id (the
    /// crash point's): a try a kill cut short still counts.
    pub counted: Option<(std::path::PathBuf, String)>,
}

/// The file in which this box counts the tries of effect `key` it started
/// (flushed before each try is sent): a run killed mid-delivery and
/// resumed here records every try the receiver may have seen, not only
/// the last run's. Removed once an outcome is recorded. A fresh box does
/// not know of another box's tries.
pub fn tries_file(git_dir: &Path, key: &str) -> std::path::PathBuf {
    git_dir
        .join("steps")
        .join("effect-tries")
        .join(crate::git::hex(key.as_bytes()))
}

/// Tries counted so far in `path` (0: none, or a file a power cut tore).
fn counted_tries(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

/// Count `n` tries in `path`: a new file, fsynced, renamed over the old,
/// its directory fsynced, before the try is sent.
fn count_tries(path: &Path, n: usize) -> std::io::Result<()> {
    let dir = path.parent().expect("a file in a directory");
    std::fs::create_dir_all(dir)?;
    let mut f = tempfile::NamedTempFile::new_in(dir)?;
    write!(f, "{n}")?;
    f.as_file().sync_all()?;
    f.persist(path).map_err(|e| e.error)?;
    // `.git/steps/effect-tries/<key>`: as git makes files in a shared
    // repository.
    if let Some(git_dir) = dir.parent().and_then(|steps| steps.parent()) {
        crate::git::shared::created_under(git_dir, git_dir, path)?;
    }
    crate::lock::sync_dir(dir)
}

/// What the tries came to.
#[derive(Debug, Clone)]
pub struct Tried {
    pub status: EffectStatus,
    /// `HTTP 201`, `exit 0`, `timeout`, `not sent`…
    pub result: String,
    pub tries: usize,
    /// Why it failed, as recorded on the durable domain: never an
    /// answer's body or a command's output (a 401 body can echo a token).
    pub reason: Option<String>,
    /// What the receiver answered or the command printed last, for this
    /// box's own report only: never recorded.
    pub detail: Option<String>,
}

/// Between a try's reason and its detail (the answer's body, the
/// command's output), which [`deliver`] keeps apart.
const DETAIL: char = '\u{1f}';

/// A try's reason split from its detail.
fn split_detail(reason: String) -> (Option<String>, Option<String>) {
    match reason.split_once(DETAIL) {
        Some((r, d)) if d.trim().is_empty() => (Some(r.to_string()), None),
        Some((r, d)) => (Some(r.to_string()), Some(d.trim().to_string())),
        None => (Some(reason), None),
    }
}

/// One try's answer.
enum Try {
    Done(String),
    /// Worth another try, after at least this long (Retry-After).
    Again {
        result: String,
        reason: String,
        after: Option<Duration>,
    },
    /// A definite failure: no other try would differ.
    Final {
        result: String,
        reason: String,
    },
}

/// Deliver `action` with `key` in `dir` (a command's working directory).
/// The crash matrix's trace file, when set, gets the key of every try that
/// was answered 2xx (or whose command exited 0).
pub fn deliver(action: &Action, key: &str, dir: &Path, policy: &Policy) -> Tried {
    // Tries an earlier run on this box started (and a kill cut short).
    let before = policy
        .counted
        .as_ref()
        .map_or(0, |(path, _)| counted_tries(path));
    let mut tries = 0;
    let clock = crate::backoff::RealClock;
    let mut backoff =
        crate::backoff::Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
    loop {
        tries += 1;
        if let Some((path, step)) = &policy.counted {
            // Best effort: a count that cannot be written undercounts.
            if count_tries(path, before + tries).is_ok() {
                crate::crash::point("effect-try-noted", step);
            }
        }
        let t = match action {
            Action::Http(h) => http_try(h, key, policy),
            Action::Command(argv) => command_try(argv, key, dir, policy.timeout),
        };
        match t {
            Try::Done(result) => {
                trace(key);
                return Tried {
                    status: EffectStatus::Delivered,
                    result,
                    tries: before + tries,
                    reason: None,
                    detail: None,
                };
            }
            Try::Final { result, reason } => {
                let (reason, detail) = split_detail(reason);
                return Tried {
                    status: EffectStatus::Failed,
                    result,
                    tries: before + tries,
                    reason,
                    detail,
                };
            }
            Try::Again {
                result,
                reason,
                after,
            } => {
                if tries >= policy.tries.max(1) {
                    let (reason, detail) = split_detail(reason);
                    return Tried {
                        status: EffectStatus::Failed,
                        result,
                        tries: before + tries,
                        reason,
                        detail,
                    };
                }
                match after {
                    Some(asked) => backoff.wait_as_asked(&clock, asked, Duration::from_secs(60)),
                    None => backoff.wait(&clock, None),
                };
            }
        }
    }
}

/// The crash matrix's count of deliveries per key (`GIT_STEPS_EFFECT_TRACE`).
fn trace(key: &str) {
    let Some(path) = std::env::var_os(crate::keys::EFFECT_TRACE.name) else {
        return;
    };
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = std::io::Write::write_all(&mut f, format!("{key}\n").as_bytes());
    }
}

fn http_try(h: &Http, key: &str, policy: &Policy) -> Try {
    let fail = |reason: String| Try::Final {
        result: "not sent".into(),
        reason,
    };
    let Ok(url) = url::Url::parse(&h.url) else {
        return fail(format!("the URL {:?} does not parse", h.url));
    };
    let Some(endpoint) = Endpoint::parse(&url) else {
        return fail(format!("the URL {:?} is not http or https", h.url));
    };
    let target = &url[url::Position::BeforePath..url::Position::AfterQuery];
    let target = if target.is_empty() { "/" } else { target };
    let mut headers: Vec<(&str, String)> = Vec::with_capacity(h.headers.len() + 2);
    let mut typed = false;
    for (name, v) in &h.headers {
        let value = match v {
            HeaderValue::Text(t) => t.clone(),
            HeaderValue::Env(var) => match std::env::var(var) {
                Ok(v) if !v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) => v,
                Ok(_) => {
                    return fail(format!(
                        "header `{name}`: the environment variable {var} holds a line break"
                    ))
                }
                Err(_) => {
                    return fail(format!(
                        "header `{name}`: the environment variable {var} is not set on this box"
                    ))
                }
            },
        };
        typed |= name.eq_ignore_ascii_case("content-type");
        headers.push((name.as_str(), value));
    }
    headers.push(("Idempotency-Key", key.to_string()));
    let body: Vec<u8> = match &h.body {
        None => Vec::new(),
        Some(Body::Text(t)) => {
            if !typed {
                headers.push(("Content-Type", "text/plain; charset=utf-8".into()));
            }
            t.clone().into_bytes()
        }
        Some(Body::Json(v)) => {
            if !typed {
                headers.push(("Content-Type", "application/json".into()));
            }
            serde_json::to_vec(v).expect("a JSON value serialises")
        }
    };
    use crate::sync::remote::proxy::Route;
    let proxy = match policy.proxies.route(&url, None) {
        Route::Direct => None,
        Route::Via(p) => Some(p),
        Route::Unsupported(p) => {
            return fail(format!(
                "requests to {} go through the proxy {p}, which this client does not speak (it speaks http:// proxies): not sent around it",
                h.url
            ))
        }
    };
    let mut client = match Client::new(endpoint, policy.ca.clone(), policy.timeout) {
        Ok(c) => c.via(proxy),
        Err(e) => return fail(e),
    };
    // The whole try within the timeout (the client's own bounds each wait
    // for a byte): a receiver that drips its answer is cut off too. A try
    // cut off this way finishes on its own thread, which nothing waits for.
    let (method, target) = (h.method.clone(), target.to_string());
    let headers: Vec<(String, String)> = headers
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let headers: Vec<(&str, String)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        let _ = tx.send(client.request(&method, &target, &headers, &body, &mut || {}));
    });
    let Ok(answer) = rx.recv_timeout(policy.timeout + Duration::from_secs(1)) else {
        return Try::Again {
            result: "timeout".into(),
            reason: format!(
                "{}: no whole answer within {} s",
                h.url,
                policy.timeout.as_secs_f64()
            ),
            after: None,
        };
    };
    match answer {
        Ok(r) if (200..300).contains(&r.status) => Try::Done(format!("HTTP {}", r.status)),
        Ok(r) => {
            let result = format!("HTTP {}", r.status);
            let snippet = String::from_utf8_lossy(&r.body[..r.body.len().min(200)]).to_string();
            // The status line's words and the Location (a signed URL can
            // carry a token) are the server's too: detail, never recorded.
            let (redirect, location) = match r.header("Location") {
                Some(l) => (
                    " (an effect does not follow redirects)",
                    format!(" (Location: {l})"),
                ),
                None => ("", String::new()),
            };
            let reason = format!(
                "{} answered {}{redirect}{DETAIL}{}{location} {snippet}",
                h.url, r.status, r.reason
            );
            if r.status >= 500 || r.status == 408 || r.status == 429 {
                let after = r
                    .header("Retry-After")
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs);
                Try::Again {
                    result,
                    reason,
                    after,
                }
            } else {
                Try::Final { result, reason }
            }
        }
        Err(Failure::Connect { message, transient }) if transient => Try::Again {
            result: "not connected".into(),
            reason: message,
            after: None,
        },
        Err(Failure::Connect { message, .. }) => Try::Final {
            result: "not connected".into(),
            reason: message,
        },
        Err(Failure::Broken(m)) => Try::Again {
            result: if m.contains("timed out")
                || m.contains("WouldBlock")
                || m.contains("temporarily unavailable")
            {
                "timeout".into()
            } else {
                "no answer".into()
            },
            reason: format!("{}: {m}", h.url),
            after: None,
        },
    }
}

/// Whether a failed effect's error carries the answer's body or the
/// command's output (`-v`). Off by default: the error goes to whoever
/// called (an agent, an MCP client), and a body can echo a secret.
static SHOW_ANSWERS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Show answers in errors (the command line's `-v`).
pub fn show_answers(on: bool) {
    SHOW_ANSWERS.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether answers are shown (see [`show_answers`]).
pub fn answers_shown() -> bool {
    SHOW_ANSWERS.load(std::sync::atomic::Ordering::Relaxed)
}

fn command_try(argv: &[String], key: &str, dir: &Path, timeout: Duration) -> Try {
    let shown = crate::plan::effect::shown(&argv.join(" "));
    let Ok(mut out) = tempfile::tempfile() else {
        return Try::Again {
            result: "not started".into(),
            reason: "cannot make a file for the command's output".into(),
            after: None,
        };
    };
    let (Ok(o1), Ok(o2)) = (out.try_clone(), out.try_clone()) else {
        return Try::Again {
            result: "not started".into(),
            reason: "cannot make a file for the command's output".into(),
            after: None,
        };
    };
    let mut child = match supervisor::supervised(Path::new(&argv[0]), &argv[1..])
        .current_dir(dir)
        .env(crate::keys::IDEMPOTENCY_KEY.name, key)
        .stdin(Stdio::null())
        .stdout(o1)
        .stderr(o2)
        // Its own process group: a timeout kills what it started too.
        .process_group(0)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            return Try::Final {
                result: "not started".into(),
                reason: format!("`{shown}` cannot be started: {e}"),
            }
        }
    };
    let start = Instant::now();
    let pid = rustix::process::Pid::from_raw(child.id() as i32);
    let status = loop {
        // Seen exited, not yet reaped (WNOWAIT): while the leader is a
        // zombie its pid, so its group's id, cannot be reused, and a try
        // that did not succeed has what is left of its group killed before
        // it is reaped: never another process's group.
        let exited = pid.map(|p| {
            use rustix::process::{waitid, WaitId, WaitIdOptions};
            let how = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
            waitid(WaitId::Pid(p), how)
                .map(|st| st.map(|st| st.exited() && st.exit_status() == Some(0)))
        });
        match exited {
            Some(Ok(Some(success))) => {
                if !success {
                    if let Some(group) = pid {
                        let _ = rustix::process::kill_process_group(
                            group,
                            rustix::process::Signal::KILL,
                        );
                    }
                }
                match child.wait() {
                    Ok(st) => break Some(st),
                    Err(e) => {
                        return Try::Again {
                            result: "unknown".into(),
                            reason: format!("cannot wait for `{shown}`: {e}"),
                            after: None,
                        }
                    }
                }
            }
            Some(Ok(None)) if start.elapsed() >= timeout => {
                if let Some(group) = rustix::process::Pid::from_raw(child.id() as i32) {
                    let _ =
                        rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
                }
                let _ = child.wait();
                break None;
            }
            Some(Ok(None)) => std::thread::sleep(Duration::from_millis(5)),
            Some(Err(e)) => {
                return Try::Again {
                    result: "unknown".into(),
                    reason: format!("cannot wait for `{shown}`: {e}"),
                    after: None,
                }
            }
            None => {
                return Try::Again {
                    result: "unknown".into(),
                    reason: format!("`{shown}` has no process id"),
                    after: None,
                }
            }
        }
    };
    let mut text = Vec::new();
    let _ = out.rewind();
    let _ = out.read_to_end(&mut text);
    let tail = String::from_utf8_lossy(&text[text.len().saturating_sub(300)..])
        .trim()
        .to_string();
    if let (Some(st), Some(at)) = (
        status,
        String::from_utf8_lossy(&text).find(supervisor::NOT_STARTED),
    ) {
        if st.code() == Some(127) && supervisor::is_set() {
            let why = String::from_utf8_lossy(&text[at + supervisor::NOT_STARTED.len()..])
                .lines()
                .next()
                .unwrap_or_default()
                .to_string();
            return Try::Final {
                result: "not started".into(),
                reason: format!("`{shown}` cannot be started: {why}"),
            };
        }
    }
    match status {
        None => Try::Again {
            result: "timeout".into(),
            reason: format!(
                "`{shown}` did not finish within {} s and was killed{DETAIL}{tail}",
                timeout.as_secs_f64()
            ),
            after: None,
        },
        Some(st) if st.success() => Try::Done("exit 0".into()),
        // Its supervisor says a signal killed it.
        Some(_) if supervisor::is_set() && tail.contains(supervisor::KILLED) => Try::Again {
            result: "killed".into(),
            reason: format!("`{shown}` was killed{DETAIL}{tail}"),
            after: None,
        },
        Some(st) => Try::Again {
            result: match st.code() {
                Some(c) => format!("exit {c}"),
                None => "killed".into(),
            },
            reason: format!("`{shown}` failed ({st}){DETAIL}{tail}"),
            after: None,
        },
    }
}
