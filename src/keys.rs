//! Every `steps.*` git config key and `GIT_STEPS_*` variable git-steps
//! reads: one table.
//!
//! Owns their names and what each does; the code that reads one names it
//! through a constant here, and the man page's ENVIRONMENT and
//! CONFIGURATION sections are these tables. Invariant: no other file of
//! the engine spells a key or a variable (a test scans the source), so a
//! key cannot be read under one name and documented under another.

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
    "A connect or read that waits this long is a timeout, retried as transient (libgit2 transport).",
);
pub const SCRATCH: Key = key(
    "GIT_STEPS_SCRATCH",
    "Where crashtest and demo keep their scratch boxes (default /dev/shm, else the temp dir).",
);
pub const MATRIX_REMOTE: Key = key(
    "GIT_STEPS_MATRIX_REMOTE",
    "Internal: set by the crash matrix for its replaying decider.",
);
pub const MATRIX_LATE: Key = key(
    "GIT_STEPS_MATRIX_LATE",
    "Internal: set by the crash matrix for its replaying decider.",
);

/// The ENVIRONMENT section.
pub const ENVIRONMENT: &[Key] = &[
    CRASH,
    PAUSE,
    LOCK_WAIT,
    NET_RETRIES,
    NET_RETRY_SECS,
    NET_TIMEOUT_SECS,
    SCRATCH,
    MATRIX_REMOTE,
    MATRIX_LATE,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Outside this file, the engine's code (tests aside) spells no
    /// `steps.*` key and no `GIT_STEPS_*` variable: it names a constant.
    #[test]
    fn no_key_is_spelled_outside_the_table() {
        let mut found = Vec::new();
        let mut stack = vec![std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src"
        ))];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                    continue;
                }
                if p.ends_with("keys.rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&p).unwrap();
                let code = text.split("#[cfg(test)]").next().unwrap();
                for (n, line) in code.lines().enumerate() {
                    if line.trim_start().starts_with("//") {
                        continue;
                    }
                    for prefix in ["\"GIT_STEPS_", "\"steps."] {
                        for (i, _) in line.match_indices(prefix) {
                            let name: String =
                                line[i + 1..].chars().take_while(|c| *c != '"').collect();
                            // The lock file's name, not a key.
                            if name != "steps.lock" {
                                found.push(format!("{}:{}: {name}", p.display(), n + 1));
                            }
                        }
                    }
                }
            }
        }
        assert!(found.is_empty(), "spelled outside src/keys.rs: {found:#?}");
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
