//! Every `steps.*` git config key and `GIT_STEPS_*` variable git-steps
//! reads: one table.
//!
//! Owns their names and what each does, and the network variables
//! resolved once per process ([`Environment`]; the `steps.*` keys are
//! resolved once per run into the engine's `settings::RunConfig`); the code
//! that reads one names it through a constant here, and the man page's
//! ENVIRONMENT and CONFIGURATION sections are these tables. Invariant: no
//! other source file of the workspace spells a key or a variable (a test
//! of the top package scans every crate), so a key cannot be read under
//! one name and documented under another.

use std::time::Duration;

/// A config key or an environment variable, and what it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    pub name: &'static str,
    pub doc: &'static str,
}

const fn key(name: &'static str, doc: &'static str) -> Key {
    Key { name, doc }
}

// git config: the run (written by `init`).
pub const BRANCH: Key = key(
    "steps.branch",
    "The run's branch (init; default steps/<run>).",
);
pub const RUN: Key = key(
    "steps.run",
    "The run id written in every receipt (init; default: the checked-out branch's name).",
);
pub const REMOTE: Key = key(
    "steps.remote",
    "The durable remote: a remote name, URL or path (init; none: the local repository).",
);
pub const TRANSPORT: Key = key(
    "steps.transport",
    "libgit2 or git (the user's git, its credential helpers and ssh config; default git for ssh remotes).",
);
// git config: how a run applies (settings::RunConfig).
pub const BATCH: Key = key(
    "steps.batch",
    "Steps made durable per push by apply (default 1).",
);
pub const RETRIES: Key = key(
    "steps.retries",
    "Refused answers sent back to the decider per step in run (default 2).",
);
pub const ALLOW_DUPLICATE_HUNKS: Key = key(
    "steps.allowDuplicateHunks",
    "true: do not refuse duplicated hunks (as --allow-duplicate-hunks).",
);
pub const HOOKS: Key = key(
    "steps.hooks",
    "true: run the repository's pre-commit and commit-msg hooks as checks on each step.",
);
pub const CACHE_EVERY: Key = key(
    "steps.cacheEvery",
    "Publish the shared hunk cache every N steps (0: never; default 1000).",
);
pub const MAX_FILE_SIZE: Key = key(
    "steps.maxFileSize",
    "The largest file a step may write, in git's size syntax (200m, 1g).",
);
pub const EFFECT_RETRIES: Key = key(
    "steps.effectRetries",
    "Tries of an effect (a 5xx, 408 or 429 answer, a timeout, a broken connection, a command that fails) before its failure is recorded and the run stops (default 5; backoff 0.5 s doubling to 30 s, jittered, or the server's Retry-After up to a minute).",
);
pub const EFFECT_TIMEOUT: Key = key(
    "steps.effectTimeout",
    "Seconds one try of an effect may take (an HTTP request, a command, killed with what it started; default 30).",
);
pub const EFFECTS: Key = key(
    "steps.effects",
    "Which effects this box delivers: `all` (default), `http` (no command runs here), or `none` (a reviewer's or an auditor's box). Those held back stay pending, named, for a box that allows them.",
);
pub const EFFECT_COMMAND: Key = key(
    "steps.effectCommand",
    "A program (argv[0], as the effect names it) whose command effects this box runs even when it did not decide them itself (steps from the remote's history, another box's plan); `*` for any. Multi-valued. Without it, only command effects this box decided (its own plan, decider, MCP client) run; the others stay pending, named.",
);
pub const EFFECT_PRIVATE_HOSTS: Key = key(
    "steps.effectPrivateHosts",
    "true: effect requests may go to loopback, link-local and private addresses (127.0.0.1, 169.254.169.254, 10.x, fd00::…), which are refused without it (an agent's step must not reach this box's own services or its cloud's metadata).",
);
pub const EFFECT_SECRET_URL: Key = key(
    "steps.effectSecret.<NAME>.url",
    "The URL prefix an effect's {\"env\": \"NAME\"} header may be sent to (https://api.github.com/, say). A variable no key binds, or a request to another URL, is refused before the step is pushed (and held, if it came from the history).",
);

/// `steps.effectSecret.<name>.url` for the variable `name`.
pub fn effect_secret_url(name: &str) -> String {
    EFFECT_SECRET_URL.name.replace("<NAME>", name)
}

/// The CONFIGURATION section.
pub const CONFIG: &[Key] = &[
    BRANCH,
    RUN,
    REMOTE,
    TRANSPORT,
    BATCH,
    RETRIES,
    ALLOW_DUPLICATE_HUNKS,
    HOOKS,
    CACHE_EVERY,
    MAX_FILE_SIZE,
    EFFECT_RETRIES,
    EFFECT_TIMEOUT,
    EFFECTS,
    EFFECT_COMMAND,
    EFFECT_PRIVATE_HOSTS,
    EFFECT_SECRET_URL,
];

// The environment.
pub const CRASH: Key = key(
    "GIT_STEPS_CRASH",
    "Arm a crash point, POINT@STEP (the crash matrix and tests): the process kills itself with SIGKILL there.",
);
pub const PAUSE: Key = key(
    "GIT_STEPS_PAUSE",
    "POINT@STEP:DIR: at the point, create DIR/reached and wait (at most a minute) until DIR/go exists (race tests).",
);
pub const LOCK_WAIT: Key = key(
    "GIT_STEPS_LOCK_WAIT",
    "Seconds a push waits for a branch lock another writer holds on the remote before it exits 4 (default 8).",
);
pub const NET_RETRIES: Key = key(
    "GIT_STEPS_NET_RETRIES",
    "Tries after the first for a transient network failure (502/503/504, reset, timeout; default 3).",
);
pub const NET_RETRY_SECS: Key = key(
    "GIT_STEPS_NET_RETRY_SECS",
    "Never retry past this many seconds after the first try (default 30).",
);
pub const NET_TIMEOUT_SECS: Key = key(
    "GIT_STEPS_NET_TIMEOUT_SECS",
    "A connect, or a wait with no byte moving, this long is a timeout, retried as transient (both transports; default 60).",
);
pub const HTTP_CLIENT: Key = key(
    "GIT_STEPS_HTTP_CLIENT",
    "`libgit2`: push over http(s) through libgit2 (an advertisement and a connection per push) instead of git-steps' own smart-HTTP client (one request a step on a kept connection); for comparisons and as a way around a server the client does not suit.",
);
pub const SSH_SHARE: Key = key(
    "GIT_STEPS_SSH_SHARE",
    "`0`: with the git transport over ssh, one ssh connection per git command, as git makes them, instead of one shared connection per remote (OpenSSH's ControlMaster, a socket of the process's own in <tmp>/git-steps-ssh-<uid>, closed when it exits, ControlPersist=120 if it is killed).",
);
pub const SCRATCH: Key = key(
    "GIT_STEPS_SCRATCH",
    "Where crashtest and demo keep their scratch boxes (default /dev/shm, else the temp dir).",
);
pub const PROGRESS_DELAY: Key = key(
    "GIT_STEPS_PROGRESS_DELAY_MS",
    "Milliseconds long work lasts before its progress bar is drawn on a terminal (default 250; `0` draws it at once).",
);
pub const MATRIX_REMOTE: Key = key(
    "GIT_STEPS_MATRIX_REMOTE",
    "Internal: set by the crash matrix for its replaying decider.",
);
pub const NET_RELAY: Key = key(
    "GIT_STEPS_NET_RELAY",
    "Internal: set by --transport git for git's git:// proxy command, which is git-steps itself, run as <git-steps> <host> <port>.",
);
pub const IDEMPOTENCY_KEY: Key = key(
    "GIT_STEPS_IDEMPOTENCY_KEY",
    "Set for a command effect: its idempotency key, <run>/<step id>/<n> (an HTTP effect sends it as the Idempotency-Key header).",
);
pub const EFFECT_TRACE: Key = key(
    "GIT_STEPS_EFFECT_TRACE",
    "Internal: set by the crash matrix: a file where each effect delivered (answered 2xx, or a command that exited 0) appends its key, so the matrix counts deliveries per key.",
);
pub const MATRIX_LATE: Key = key(
    "GIT_STEPS_MATRIX_LATE",
    "Internal: set by the crash matrix for its replaying decider.",
);

pub const BOOT_ID: Key = key(
    "GIT_STEPS_BOOT_ID",
    "Internal: this boot's identity instead of the kernel's boot id; crashtest --power-loss resumes its states as after a reboot.",
);

pub const FLUSH: Key = key(
    "GIT_STEPS_FLUSH",
    "How writes are made durable: `syncfs` (one flush of the file system per commit point) or `files` (each file fsynced before it is renamed or linked, then its directory, as git's core.fsync does). Unset: `syncfs` on ext2/3/4, xfs, btrfs, f2fs, tmpfs and zfs (and an overlay whose upper layer is one of them), `files` everywhere else (FUSE, network and unknown file systems, and every file system off Linux).",
);

pub const OS: Key = key(
    "GIT_STEPS_OS",
    "`portable`: use the portable system calls, as on macOS, instead of Linux's own (no syncfs: every write flushed file by file; no boot id, /proc/locks or read leases: no lock judged stale and nothing repaired by date; polling instead of pidfds and inotify). For testing the portable build on Linux; ignored elsewhere, where the portable calls are the only ones.",
);

/// The ENVIRONMENT section.
pub const ENVIRONMENT: &[Key] = &[
    CRASH,
    PAUSE,
    LOCK_WAIT,
    NET_RETRIES,
    NET_RETRY_SECS,
    NET_TIMEOUT_SECS,
    HTTP_CLIENT,
    SSH_SHARE,
    SCRATCH,
    PROGRESS_DELAY,
    MATRIX_REMOTE,
    IDEMPOTENCY_KEY,
    EFFECT_TRACE,
    MATRIX_LATE,
    NET_RELAY,
    BOOT_ID,
    FLUSH,
    OS,
];

/// The variables that tune the network, resolved once per process from
/// the table above ([`environment`]); the crash points, the matrix and
/// the scratch folder read their own (they are test harness, not tuning).
#[derive(Debug, Clone, PartialEq)]
pub struct Environment {
    /// [`LOCK_WAIT`]: how long a push waits for a branch lock another
    /// writer holds on the remote before it exits 4.
    pub lock_wait: Duration,
    /// [`NET_RETRIES`]: tries after the first for a transient failure.
    pub net_retries: u32,
    /// [`NET_RETRY_SECS`]: no retry starts this long after the first try.
    pub net_retry_total: Duration,
    /// [`NET_TIMEOUT_SECS`]: a connect or read that waits this long is a
    /// timeout (libgit2 transport).
    pub net_timeout: Duration,
    /// Variables set to something that is not a value of theirs, kept at
    /// their defaults: `NAME=value` and what was expected, for the command
    /// line to warn about.
    pub ignored: Vec<String>,
}

impl Environment {
    pub const DEFAULT: Environment = Environment {
        lock_wait: Duration::from_secs(8),
        net_retries: 3,
        net_retry_total: Duration::from_secs(30),
        net_timeout: Duration::from_secs(60),
        ignored: Vec::new(),
    };

    /// The variables as `var` gives them (the process's environment, or a
    /// test's). A value out of range is clamped (a wait of at most an
    /// hour, at most 100 retries); one that is not a number (for a count,
    /// a whole one) is ignored and listed in [`Environment::ignored`].
    pub fn read(var: impl Fn(&str) -> Option<String>) -> Environment {
        let mut env = Environment::DEFAULT;
        let seconds = |key: Key, min: f64, max: f64, ignored: &mut Vec<String>| {
            let v = var(key.name)?;
            match v.trim().parse::<f64>() {
                Ok(n) if n.is_finite() && n >= min => Some(n.min(max)),
                _ => {
                    ignored.push(format!(
                        "{}={v:?}: expected a number of {min} or more",
                        key.name
                    ));
                    None
                }
            }
        };
        let count = |key: Key, max: u32, ignored: &mut Vec<String>| {
            let v = var(key.name)?;
            match v.trim().parse::<u64>() {
                Ok(n) => Some(n.min(u64::from(max)) as u32),
                Err(_) => {
                    ignored.push(format!(
                        "{}={v:?}: expected a whole number of 0 or more",
                        key.name
                    ));
                    None
                }
            }
        };
        let mut ignored = Vec::new();
        if let Some(n) = seconds(LOCK_WAIT, 0.0, 3600.0, &mut ignored) {
            env.lock_wait = Duration::from_secs_f64(n);
        }
        if let Some(n) = count(NET_RETRIES, 100, &mut ignored) {
            env.net_retries = n;
        }
        if let Some(n) = seconds(NET_RETRY_SECS, 0.0, 3600.0, &mut ignored) {
            env.net_retry_total = Duration::from_secs_f64(n);
        }
        if let Some(n) = seconds(NET_TIMEOUT_SECS, 1.0, 86400.0, &mut ignored) {
            env.net_timeout = Duration::from_secs(n as u64);
        }
        env.ignored = ignored;
        env
    }
}

/// The process's [`Environment`], read on first use.
pub fn environment() -> &'static Environment {
    static ENV: std::sync::OnceLock<Environment> = std::sync::OnceLock::new();
    ENV.get_or_init(|| Environment::read(|name| std::env::var(name).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_is_read_with_defaults_clamps_and_warnings() {
        let read = |pairs: &[(&str, &str)]| {
            let pairs: Vec<(String, String)> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            Environment::read(move |name| {
                pairs
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
            })
        };
        assert_eq!(read(&[]), Environment::DEFAULT);
        let env = read(&[
            ("GIT_STEPS_LOCK_WAIT", "0.5"),
            ("GIT_STEPS_NET_RETRIES", "1000"),
            ("GIT_STEPS_NET_RETRY_SECS", "five"),
            ("GIT_STEPS_NET_TIMEOUT_SECS", "0"),
        ]);
        assert_eq!(env.lock_wait, Duration::from_millis(500));
        assert_eq!(env.net_retries, 100);
        assert_eq!(env.net_retry_total, Duration::from_secs(30));
        assert_eq!(env.net_timeout, Duration::from_secs(60));
        assert_eq!(env.ignored.len(), 2, "{:?}", env.ignored);
        assert!(env.ignored[0].starts_with("GIT_STEPS_NET_RETRY_SECS=\"five\""));
        assert!(env.ignored[1].starts_with("GIT_STEPS_NET_TIMEOUT_SECS=\"0\""));

        // A count is a whole number: 2.7 tries is no count, not 2.
        let env = read(&[("GIT_STEPS_NET_RETRIES", "2.7")]);
        assert_eq!(env.net_retries, 3);
        assert_eq!(env.ignored.len(), 1, "{:?}", env.ignored);
        assert!(
            env.ignored[0].starts_with("GIT_STEPS_NET_RETRIES=\"2.7\": expected a whole number")
        );
    }

    #[test]
    fn every_key_is_listed_once() {
        let mut names: Vec<&str> = CONFIG.iter().chain(ENVIRONMENT).map(|k| k.name).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n);
        assert!(CONFIG.iter().all(|k| k.name.starts_with("steps.")));
        assert!(ENVIRONMENT.iter().all(|k| k.name.starts_with("GIT_STEPS_")));
        // Every key defined above is in one of the two tables.
        let defined = include_str!("keys.rs")
            .lines()
            .filter(|l| l.starts_with("pub const ") && l.contains(": Key = key("))
            .count();
        assert_eq!(defined, n, "a key is defined but in neither table");
    }
}
