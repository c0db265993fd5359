//! Commands that must not outlive a git-steps that was killed: command
//! effects and, off Linux, hooks run under `git-steps effect-exec`, which
//! leads their process group and kills all of it once its parent is gone.
//!
//! Owns the supervisor's command line and its loop. Invariant: within
//! 20 ms of the runner's death (a SIGKILL included, which nothing can
//! catch), nothing a supervised command started is left running.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The internal command that runs a command effect under a supervisor:
/// `git-steps effect-exec --parent <pid> -- <argv>` ([`supervise`]).
pub const EXEC: &str = "effect-exec";

/// What [`supervise`] prints when the command cannot be started.
pub(super) const NOT_STARTED: &str = "git-steps effect-exec: cannot start: ";

/// What [`supervise`] prints when a signal killed the command.
pub(super) const KILLED: &str = "git-steps effect-exec: killed by signal ";

static SUPERVISOR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Whether a supervisor is set ([`set_supervisor`]).
pub fn is_set() -> bool {
    SUPERVISOR.get().is_some()
}

/// Run command effects through `exe effect-exec` (the git-steps binary:
/// the command line sets it), so that a command never outlives a
/// git-steps that was killed. Without it (the library alone) commands are
/// started directly, and a SIGKILLed caller leaves them running.
pub fn set_supervisor(exe: std::path::PathBuf) {
    let _ = SUPERVISOR.set(exe);
}

/// `program` with `args`, run under the supervisor where one is set (see
/// [`set_supervisor`]); the caller makes it a process group's leader
/// (`process_group(0)`), so that the supervisor's kill takes the group.
pub fn supervised<S: AsRef<std::ffi::OsStr>>(program: &Path, args: &[S]) -> Command {
    match SUPERVISOR.get() {
        Some(exe) => {
            let mut c = Command::new(exe);
            c.args([EXEC, "--parent", &std::process::id().to_string(), "--"])
                .arg(program)
                .args(args);
            c
        }
        None => {
            let mut c = Command::new(program);
            c.args(args);
            c
        }
    }
}

/// Why a command run under the supervisor did not start, when its exit
/// (127) and its output (`output`, where the supervisor's stderr went)
/// say so; None for a command that ran.
pub fn not_started(status: std::process::ExitStatus, output: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(output);
    let at = text.find(NOT_STARTED)?;
    (status.code() == Some(127) && is_set()).then(|| {
        text[at + NOT_STARTED.len()..]
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    })
}

/// `git-steps effect-exec`: start `argv` and wait for it, as the leader of
/// the process group the command runs in. When `parent` (the git-steps
/// delivering it) is gone, SIGKILLed with no chance to clean up, the whole
/// group is killed within 20 ms: no command of a dead run is left running
/// while its resume starts the same effect again. Exits as the command
/// did (128 + the signal that killed it, said on stderr; 127 when it
/// could not start).
pub fn supervise(parent: u32, argv: &[String]) -> ! {
    use rustix::process::{getpgrp, getpid, getppid, kill_process_group, Pid, Signal};
    // Started outside a group of its own (a hook, off Linux): its own
    // session, so that it leads a group to kill and the command has no
    // terminal (one that opens /dev/tty fails at once instead of being
    // stopped in a background group, which would wait forever).
    if getpgrp() != getpid() {
        let _ = rustix::process::setsid();
    }
    let orphaned = || Pid::as_raw(getppid()) as u32 != parent;
    let kill_group = || {
        // The group is this process's own (spawned as its leader): this
        // kills the command, what it started, and this process.
        let _ = kill_process_group(getpid(), Signal::KILL);
        std::process::exit(137)
    };
    if orphaned() {
        kill_group();
    }
    // Its stderr is the effect's output file, which the delivering
    // git-steps reads.
    let not_started = |why: &dyn std::fmt::Display| -> ! {
        let _ = writeln!(std::io::stderr(), "{NOT_STARTED}{why}");
        std::process::exit(127)
    };
    let Some((program, args)) = argv.split_first() else {
        not_started(&"no command")
    };
    let mut child = match Command::new(program).args(args).spawn() {
        Ok(c) => c,
        Err(e) => not_started(&e),
    };
    // Looked at after 1 ms, then twice as long each time up to 20 ms: a
    // short command (a hook) is seen done at once, a dead parent within
    // 20 ms.
    let mut nap = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(st)) => {
                use std::os::unix::process::ExitStatusExt;
                // A signal that killed the command is said in the output
                // (not raised here: no core of this process, and Rust
                // ignores SIGPIPE), and the exit code is the shell's.
                if let Some(sig) = st.signal() {
                    let _ = writeln!(std::io::stderr(), "{KILLED}{sig}");
                }
                std::process::exit(st.code().unwrap_or(128 + st.signal().unwrap_or(0)))
            }
            Ok(None) if orphaned() => kill_group(),
            Ok(None) => {
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(20));
            }
            Err(_) => kill_group(),
        }
    }
}
