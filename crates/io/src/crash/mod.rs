//! Named crash points at every write boundary of the apply path.
//!
//! Owns `GIT_STEPS_CRASH=<point>@<step id>`: when the process reaches that
//! point for that step it kills itself with SIGKILL — no destructors, no
//! buffered output flushed, exactly like a box that vanishes. Invariant: every
//! write of durable or local state in the apply path sits between two points
//! listed in [`POINTS`], so the crash matrix can stop the run on either side
//! of it. The matrix that uses them is the `git-steps-matrix` crate, above
//! the engine.

use std::sync::OnceLock;

/// The environment variable that arms a crash point.
pub const ENV: &str = crate::keys::CRASH.name;

/// A crash point: a name, and the state the disk is in when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    pub name: &'static str,
    pub state: &'static str,
    /// When the point is reached.
    pub scope: Scope,
}

/// Which runs pass a crash point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every applied step.
    Step,
    /// Every applied step, when the durable domain is a remote.
    RemoteStep,
    /// A resume that finds work to do (repair, fast-forward, push).
    Resume,
    /// A flush after which the shared hunk cache is due (`steps.cacheEvery`),
    /// when the durable domain is a remote. The matrix's `apply` boxes set
    /// the interval to 1, so every step of theirs passes these points.
    Cache,
    /// Every decision the decider gives in `run --decider`.
    Decide,
    /// A worktree update that finds a file changed under it (an edit made
    /// while the step was being made durable): off the happy path, so no
    /// matrix cell passes it; the worktree tests arm it.
    Race,
    /// A decision `run --decider` writes to its journal: refused, or kept
    /// because its step could not be built yet (off the happy path: the
    /// matrix's replaying decider never gives one; the agent tests do).
    Journal,
    /// An effect of a durable step (SPEC "Effects"): its delivery and the
    /// record of its outcome. Only steps with effects pass these points.
    Effect,
    /// A finished `run --decider` keeping its run under
    /// refs/steps/runs/<run> (also `archive` and `merge-message`); the
    /// step id is the run head's step.
    Archive,
    /// A run's artifact fingerprint, computed with blobs no earlier process
    /// hashed: their content hashes are appended to `.git/steps/blob-sha256`
    /// (a cache: never flushed, a torn record skipped), and the bytes it
    /// hashed kept for the next process to splice from. Off the matrix's
    /// cells (a box's cache holds what earlier boxes left); its own test
    /// arms it. The step id is `artifact`.
    Fingerprint,
    /// Local state a power cut tore, mended when a run opens (off the happy
    /// path: the power-loss tests tear it and arm these points). The step
    /// id is what was torn: `index` or `branch`.
    Torn,
}

/// Every point, in the order a step passes them.
pub const POINTS: &[Point] = &[
    Point {
        name: "decided",
        state: "run: the decider answered; nothing of the decision is written (it becomes durable with its step's push)",
        scope: Scope::Decide,
    },
    Point {
        name: "ahead-kept",
        state: "run: the decider's answer for the next step, asked while this step's push is in flight, is kept on this box (`.git/steps/ahead/`); nothing of it is applied, and this step may or may not be durable yet",
        scope: Scope::Decide,
    },
    Point {
        name: "journal-objects",
        state: "run, journaling a refused or kept decision: the entry's objects are written; the journal ref has not moved",
        scope: Scope::Journal,
    },
    Point {
        name: "journal-pushed",
        state: "run, journaling with a remote: the remote accepted the journal entry (durable); the local journal ref has not moved",
        scope: Scope::Journal,
    },
    Point {
        name: "journaled",
        state: "run: a decision whose step could not be built yet (an untracked file in its way) is recorded on the durable domain; nothing of the step is written",
        scope: Scope::Journal,
    },
    Point {
        name: "before-write",
        state: "the step is validated; nothing for it is written yet",
        scope: Scope::Step,
    },
    Point {
        name: "objects-written",
        state: "blobs, trees and the step commit are in the object database; no ref moved",
        scope: Scope::Step,
    },
    Point {
        name: "update-noted",
        state: "the worktree update that will follow the branch's move is noted (`.git/steps/updating`: from the previous head to the step commit), for the repair of one a crash cuts short; nothing is pushed and no ref moved",
        scope: Scope::Step,
    },
    Point {
        name: "push-sent",
        state: "with a remote: the step's push is out and not answered: over smart HTTP its request (the compare-and-swap command and the pack) is sent in full, and the server may or may not have moved the branch; to a bare repository on this machine its objects are copied there and the branch's lock is taken, the branch not moved",
        scope: Scope::RemoteStep,
    },
    Point {
        name: "pushed",
        state: "with a remote: the remote accepted the step commit (durable); the local branch has not moved (in `run`, for a step with a parent: branch, worktree and index show the step already, moved before its push)",
        scope: Scope::RemoteStep,
    },
    Point {
        name: "tracking-updated",
        state: "with a remote: the remote accepted the step commit; the remote-tracking ref (refs/remotes/<remote>/<branch>, for a configured remote) shows it; the local branch has not moved",
        scope: Scope::RemoteStep,
    },
    Point {
        name: "worktree-staged",
        state: "the step's new worktree files are staged in `.git/steps-tmp`, not flushed; the local branch has not moved (with a remote, the step is durable there; in `run`, for a step with a parent, its push comes after the worktree update and the decider's next answer is asked for while it is in flight)",
        scope: Scope::Step,
    },
    Point {
        name: "ref-updated",
        state: "the local branch points at the step commit (flushed with the step's files staged in `.git`; without a remote, the commit point); worktree and index still show the previous step",
        scope: Scope::Step,
    },
    Point {
        name: "worktree-partial",
        state: "the first changed file of the step is written to the worktree; the rest and the index are not",
        scope: Scope::Step,
    },
    Point {
        name: "worktree-files",
        state: "every changed file is written to the worktree; the index is not",
        scope: Scope::Step,
    },
    Point {
        name: "fingerprint-cached",
        state: "a run's artifact fingerprint is computed; the content hashes of blobs no earlier process hashed are appended to `.git/steps/blob-sha256`, unflushed (a cache: a lost or torn record costs only time)",
        scope: Scope::Fingerprint,
    },
    Point {
        name: "fingerprint-streamed",
        state: "a run's artifact fingerprint is computed; the bytes it hashed are in place as `steps/artifact/stream` in the worktree's git directory (a cache, unflushed, with a CRC-32: the next process splices its fingerprint from it)",
        scope: Scope::Fingerprint,
    },
    Point {
        name: "effect-start",
        state: "the step is durable; one of its effects has no recorded outcome and nothing of it is sent yet",
        scope: Scope::Effect,
    },
    Point {
        name: "effect-try-noted",
        state: "a try of the effect is counted on this box (`.git/steps/effect-tries/`, so that its outcome counts a try a kill cut short); nothing of the try is sent yet",
        scope: Scope::Effect,
    },
    Point {
        name: "effect-delivered",
        state: "the effect's receiver answered 2xx (or its command exited 0); its outcome is not recorded",
        scope: Scope::Effect,
    },
    Point {
        name: "effect-recorded",
        state: "the effect's outcome is durable on refs/steps/effects/<run> (the remote accepted it, or the local ref is fsynced); the next effect is not started",
        scope: Scope::Effect,
    },
    Point {
        name: "reconcile-ref",
        state: "on resume: the local branch was fast-forwarded to the durable head; worktree and index still show the old head",
        scope: Scope::Resume,
    },
    Point {
        name: "reconcile-pushed",
        state: "on resume: the remote accepted local receipted commits it lacked (and the remote-tracking ref shows them); nothing else written yet",
        scope: Scope::Resume,
    },
    Point {
        name: "torn-kept",
        state: "a torn index or run branch (a power cut) is copied under .git/steps/torn/; nothing is rebuilt yet",
        scope: Scope::Torn,
    },
    Point {
        name: "torn-restored",
        state: "the torn run branch is set back to the last value recorded (its reflog, HEAD's, the remote's durable head); worktree and index not yet checked",
        scope: Scope::Torn,
    },
    Point {
        name: "torn-rescued",
        state: "after a torn index: the worktree files that differ from the head are saved under refs/steps/rescue/; the index is not rebuilt yet",
        scope: Scope::Torn,
    },
    Point {
        name: "torn-rebuilt",
        state: "after a torn index: the index is rebuilt from the head; the saved files are not put back yet",
        scope: Scope::Torn,
    },
    Point {
        name: "repair-saved",
        state: "on resume: what a crashed step left in the worktree is saved under refs/steps/rescue/; the worktree is not restored yet",
        scope: Scope::Resume,
    },
    Point {
        name: "rescue-saved",
        state: "a worktree update found a file changed under it: that file is kept and saved under refs/steps/rescue/; the update stops",
        scope: Scope::Race,
    },
    Point {
        name: "worktree-done",
        state: "worktree and index match the step commit; the step is not reported yet",
        scope: Scope::Step,
    },
    Point {
        name: "cache-written",
        state: "the step is done here; the shared hunk cache's commit for it is in the object database, not pushed",
        scope: Scope::Cache,
    },
    Point {
        name: "cache-pushed",
        state: "the remote accepted the shared hunk cache for the step; this box's copy of its ref has not moved",
        scope: Scope::Cache,
    },
    Point {
        name: "archive-read",
        state: "the run is finished: the kept ref refs/steps/runs/<run> was read from the durable domain; nothing of it is written",
        scope: Scope::Archive,
    },
    Point {
        name: "archive-pushed",
        state: "with a remote: the remote accepted refs/steps/runs/<run> at the run's head; this box's copy of it has not moved",
        scope: Scope::Archive,
    },
];

/// Look a point up by name.
pub fn find(name: &str) -> Option<&'static Point> {
    POINTS.iter().find(|p| p.name == name)
}

fn armed() -> Option<&'static (String, String)> {
    static ARMED: OnceLock<Option<(String, String)>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let spec = std::env::var(ENV).ok()?;
            let (point, step) = spec.split_once('@')?;
            Some((point.to_string(), step.to_string()))
        })
        .as_ref()
}

/// Check the arming syntax of `GIT_STEPS_CRASH`, so a typo fails loudly
/// instead of silently never firing.
pub fn validate_env() -> Result<(), String> {
    if let Ok(spec) = std::env::var(ENV_PAUSE) {
        let point = spec.split_once('@').map(|(p, _)| p);
        if spec.rsplit_once(':').is_none() || point.and_then(find).is_none() {
            return Err(format!(
                "{ENV_PAUSE}={spec:?}: expected <point>@<step id>:<dir> with a known point"
            ));
        }
    }
    let Ok(spec) = std::env::var(ENV) else {
        return Ok(());
    };
    let Some((point, step)) = spec.split_once('@') else {
        return Err(format!("{ENV}={spec:?}: expected <point>@<step id>"));
    };
    if find(point).is_none() {
        let names: Vec<&str> = POINTS.iter().map(|p| p.name).collect();
        return Err(format!(
            "{ENV}={spec:?}: unknown crash point {point:?}; known points: {}",
            names.join(", ")
        ));
    }
    if step.is_empty() {
        return Err(format!("{ENV}={spec:?}: empty step id"));
    }
    Ok(())
}

/// Where tests hold a process at a point instead of killing it, to make a
/// race happen in a known order: `<point>@<step id>:<dir>` (a `<dir>`
/// without ':'). At the point
/// the process creates `<dir>/reached`, then waits (at most a minute) until
/// `<dir>/go` exists.
pub const ENV_PAUSE: &str = crate::keys::PAUSE.name;

fn paused() -> Option<&'static (String, String, std::path::PathBuf)> {
    static PAUSED: OnceLock<Option<(String, String, std::path::PathBuf)>> = OnceLock::new();
    PAUSED
        .get_or_init(|| {
            let spec = std::env::var(ENV_PAUSE).ok()?;
            // Step ids may hold ':' (`undo:start`); the directory may not.
            let (at, dir) = spec.rsplit_once(':')?;
            let (point, step) = at.split_once('@')?;
            Some((point.to_string(), step.to_string(), dir.into()))
        })
        .as_ref()
}

/// Wait until `path` exists, at most `timeout`: woken by the kernel
/// (inotify on its folder, on Linux) when something is created, moved or
/// written there, not by polling. True if it exists. Tests wait with it
/// too, for a point's `reached` and for what a hook or a daemon writes.
pub fn wait_for_file(path: &std::path::Path, timeout: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    // The watch is set before the first look, so a file made in between
    // still wakes the wait; without one (its limit reached, or not Linux)
    // it looks again every 10 ms.
    let watch = crate::os::DirWatch::new(dir, std::time::Duration::from_millis(10));
    loop {
        if path.exists() {
            return true;
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        watch.wait(left);
    }
}

/// Kill the process here if `GIT_STEPS_CRASH` names this point and step
/// (or hold it, if `GIT_STEPS_PAUSE` does).
pub fn point(name: &'static str, step_id: &str) {
    debug_assert!(find(name).is_some(), "unlisted crash point {name}");
    if let Some((point, step, dir)) = paused() {
        if point == name && step == step_id {
            let _ = std::fs::write(dir.join("reached"), b"");
            wait_for_file(&dir.join("go"), std::time::Duration::from_secs(60));
        }
    }
    if let Some((point, step)) = armed() {
        if point == name && step == step_id {
            let _ = rustix::process::kill_process(
                rustix::process::getpid(),
                rustix::process::Signal::KILL,
            );
            // SIGKILL cannot be caught; this is never reached.
            std::process::abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_wait_for_a_file_wakes_when_it_is_made_and_gives_up_at_its_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let go = dir.path().join("go");
        let maker = {
            let go = go.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                std::fs::write(go, b"").unwrap();
            })
        };
        assert!(wait_for_file(&go, Duration::from_secs(30)));
        maker.join().unwrap();
        // Already there: at once, whatever the timeout.
        assert!(wait_for_file(&go, Duration::ZERO));
        let start = Instant::now();
        assert!(!wait_for_file(
            &dir.path().join("never"),
            Duration::from_millis(100)
        ));
        assert!(start.elapsed() >= Duration::from_millis(100));
    }
}
