//! The git CLI transport (`--transport git`): the user's own `git`, for its
//! credential helpers, ssh config and proxies.
//!
//! Owns running `git ls-remote`, `git fetch` and `git push --porcelain
//! --force-with-lease` and reading their answers. Invariant: a push is
//! always leased on the expected id; `GIT_STEPS_CRASH` never reaches the
//! child `git`.

use std::process::Command;

use git2::{Oid, Repository};

use super::settle::classify_rejection;
use super::{PushError, RefUpdate, Remote};
use crate::error::{Error, Result};

impl Remote {
    pub(super) fn head_git(&self, repo: &Repository, refname: &str) -> Result<Option<Oid>> {
        let mut cmd = git_cli(repo, &self.spec)?;
        cmd.args(["ls-remote", "--", &self.spec, refname]);
        let out = run_git_ok(cmd, "ls-remote", &self.spec)?;
        parse_ls_remote(&out, refname)
    }

    /// The remote's refs matching `patterns` (`refs/heads/steps/*`), as
    /// `git ls-remote` lists them, whatever the transport: a read of names
    /// only (`git steps runs`).
    pub fn list(&self, repo: &Repository, patterns: &[&str]) -> Result<Vec<(String, Oid)>> {
        let mut cmd = git_cli(repo, &self.spec)?;
        cmd.args(["ls-remote", "--", &self.spec]).args(patterns);
        let out = run_git_ok(cmd, "ls-remote", &self.spec)?;
        let mut refs = Vec::new();
        for l in out.lines() {
            if let Some((oid, name)) = l.split_once('\t') {
                refs.push((name.to_string(), Oid::from_str(oid)?));
            }
        }
        Ok(refs)
    }

    pub(super) fn fetch_git(
        &self,
        repo: &Repository,
        refname: &str,
        into: &str,
    ) -> Result<Option<Oid>> {
        let Some(oid) = self.head_git(repo, refname)? else {
            return Ok(None);
        };
        if repo.find_commit(oid).is_err() {
            self.git_fetch(repo, &[], Some(&format!("+{refname}:{into}")))?;
        }
        crate::lock::intending(repo, crate::lock::ref_locks(repo, into), || {
            repo.reference(into, oid, true, "git-steps: fetch")
        })?;
        Ok(Some(oid))
    }

    /// Deepen this shallow clone by `by` commits below its boundary along
    /// the remote's `refname` (fetched into `into`): `git fetch --deepen`,
    /// which keeps the `shallow` file right (libgit2's fetch does not).
    /// (`by` None: `--unshallow`, the whole history.)
    pub fn deepen(
        &self,
        repo: &Repository,
        refname: &str,
        into: &str,
        by: Option<u64>,
    ) -> Result<()> {
        let how = match by {
            Some(n) => format!("--deepen={n}"),
            None => "--unshallow".to_string(),
        };
        self.git_fetch(repo, &[&how], Some(&format!("+{refname}:{into}")))
    }

    /// Make this shallow clone whole along what it fetches from this remote
    /// (`git fetch --unshallow <remote>`, with its configured refspecs, or
    /// its HEAD for a URL).
    pub fn unshallow(&self, repo: &Repository) -> Result<()> {
        self.git_fetch(repo, &["--unshallow"], None)
    }

    /// `git fetch <how> -- <remote> [<refspec>]`, quiet about tags and
    /// FETCH_HEAD.
    fn git_fetch(&self, repo: &Repository, how: &[&str], refspec: Option<&str>) -> Result<()> {
        let mut cmd = git_cli(repo, &self.spec)?;
        cmd.args(["fetch", "--progress", "--no-tags", "--no-write-fetch-head"])
            .args(how)
            .args(["--", &self.spec])
            .args(refspec);
        let what = match how.first() {
            Some(h) => format!("fetch {}", h.split('=').next().unwrap_or(h)),
            None => "fetch".to_string(),
        };
        run_git_ok(cmd, &what, &self.spec).map(|_| ())
    }

    /// Push with `git push --force-with-lease=<ref>:<expected>`: git's own
    /// compare-and-swap.
    pub(super) fn push_git(
        &self,
        repo: &Repository,
        update: &RefUpdate<'_>,
    ) -> Result<(), PushError> {
        let RefUpdate {
            refname,
            expected,
            new,
            ..
        } = *update;
        let lease = format!(
            "--force-with-lease={refname}:{}",
            expected.map(|o| o.to_string()).unwrap_or_default()
        );
        let mut cmd = git_cli(repo, &self.spec).map_err(PushError::Failed)?;
        cmd.arg("push");
        if self.local_path(repo).is_some() {
            // A repository on this machine is written by the receive-pack
            // git starts here, with the `-c` settings above cleared (git's
            // local transport drops GIT_CONFIG_PARAMETERS): it flushes its
            // objects and the ref's new value before the rename that is
            // the step's commit point only when told on its own line.
            cmd.arg(
                "--receive-pack=git -c core.fsync=committed -c core.fsyncMethod=fsync receive-pack",
            );
        }
        cmd.args([
            "--porcelain",
            "--progress",
            "--no-verify",
            &lease,
            "--",
            &self.spec,
            &format!("{new}:{refname}"),
        ]);
        let (ok, out, err) = run_git(cmd, "push").map_err(PushError::Failed)?;
        if ok {
            return Ok(());
        }
        let line = out
            .lines()
            .find(|l| l.contains(refname) && l.starts_with('!'))
            .unwrap_or("");
        if line.contains("stale info")
            || line.contains("fetch first")
            || line.contains("non-fast-forward")
        {
            return Err(PushError::Moved { found: None });
        }
        if !line.is_empty() {
            // `!<tab>src:dst<tab>[remote rejected] (reason)`
            let status = line.rsplit('\t').next().unwrap_or(line).trim();
            return Err(classify_rejection(status, &err));
        }
        Err(PushError::Failed(Error::remote(
            format!("git push {} failed: {}", self.spec, err.trim()),
            crate::error::spurious_text(&err),
        )))
    }
}

/// `git` for a network command, with git-steps' network bound
/// (`GIT_STEPS_NET_TIMEOUT_SECS`) where git has none by default: over
/// http(s), a transfer that moves no byte for the timeout is aborted (as
/// libgit2's read timeout does); over `git://`, the connection goes through
/// git-steps' relay ([`super::relay`]), which gives up the same way. A
/// user's own `http.lowSpeed*` settings or `git://` proxy command win.
fn git_cli(repo: &Repository, remote: &str) -> Result<Command> {
    let dir = repo.workdir().unwrap_or_else(|| repo.path()).to_path_buf();
    let mut cmd = Command::new("git");
    // Its messages are read (`spurious_text`, progress): in git's own words.
    cmd.current_dir(&dir)
        .env_remove(crate::keys::CRASH.name)
        .env("LC_ALL", "C");
    let secs = crate::keys::environment().net_timeout.as_secs().max(1);
    let config = repo.config()?;
    // The user's setting, from config files, `git -c` (which libgit2 does
    // not read: `GIT_CONFIG_PARAMETERS`, `GIT_CONFIG_COUNT`) or git's own
    // variable.
    let given = |key: &str| {
        let key = key.to_lowercase();
        std::env::var("GIT_CONFIG_PARAMETERS").is_ok_and(|p| p.to_lowercase().contains(&key))
            || std::env::vars()
                .any(|(k, v)| k.starts_with("GIT_CONFIG_KEY_") && v.to_lowercase() == key)
    };
    let set = |key: &str, env: &str| {
        config.get_entry(key).is_ok() || given(key) || std::env::var_os(env).is_some()
    };
    if !set("http.lowSpeedLimit", "GIT_HTTP_LOW_SPEED_LIMIT")
        && !set("http.lowSpeedTime", "GIT_HTTP_LOW_SPEED_TIME")
    {
        cmd.args(["-c", "http.lowSpeedLimit=1", "-c"])
            .arg(format!("http.lowSpeedTime={secs}"));
    }
    if crate::git::fsync::per_file()
        && config.get_entry("core.fsync").is_err()
        && !given("core.fsync")
    {
        // A file system whose syncfs is not known to flush: git fsyncs
        // what it writes (objects, packs, refs) before naming it, as this
        // process does ([`crate::git::fsync`]).
        cmd.args([
            "-c",
            "core.fsync=committed,index",
            "-c",
            "core.fsyncMethod=fsync",
        ]);
    }
    if let Some(ssh) = super::ssh_share::command(&config, remote) {
        cmd.env("GIT_SSH_COMMAND", ssh);
    }
    if !set("core.gitProxy", "GIT_PROXY_COMMAND") {
        // Only from the git-steps binary (a library user's process is no
        // relay), and one still there (not replaced by an upgrade).
        let exe = std::env::current_exe().ok().filter(|e| {
            e.is_file()
                && e.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("git-steps"))
        });
        if let Some(exe) = exe {
            // git runs it as `<command> <host> <port>`, without a shell;
            // the variable names the binary, so that a git-steps started
            // by something git runs (a hook) is not taken for the relay.
            cmd.env(crate::keys::NET_RELAY.name, &exe)
                .env("GIT_PROXY_COMMAND", exe);
        }
    }
    Ok(cmd)
}

/// Run git and return whether it succeeded, its stdout and its stderr
/// without progress lines. Fetches and pushes run with `--progress`, so a
/// transfer that moves says so. Unattended (stdin not a terminal: a
/// runner, CI), when git says nothing for `GIT_STEPS_NET_TIMEOUT_SECS` (a
/// server that stops answering, a TLS handshake that stalls: git and curl
/// wait minutes, or forever) it is stopped and the run told it timed out,
/// which is retried as any timeout; at a terminal a person may be typing a
/// passphrase, and Ctrl-C is theirs.
fn run_git(mut cmd: Command, what: &str) -> Result<(bool, String, String)> {
    use std::io::Read;
    use std::process::Stdio;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    let idle = crate::keys::environment().net_timeout;
    let unattended = !std::io::IsTerminal::is_terminal(&std::io::stdin());
    if unattended {
        // Nobody could answer a prompt: fail at once instead.
        cmd.env("GIT_TERMINAL_PROMPT", "0");
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            Error::program(format!("cannot run git for {what}: {e}"))
                .with_hint("--transport git needs `git` on PATH")
        })?;
    let start = std::time::Instant::now();
    let said = Arc::new(AtomicU64::new(0));
    // Read into buffers shared with this thread: a helper git started may
    // outlive it with the pipe open, and is not waited for.
    let read = |mut from: Box<dyn Read + Send>| {
        let (said, got) = (said.clone(), Arc::new(Mutex::new(Vec::new())));
        let into = got.clone();
        let done = std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n @ 1..) = from.read(&mut buf) {
                into.lock()
                    .expect("git output")
                    .extend_from_slice(&buf[..n]);
                said.store(start.elapsed().as_millis() as u64, Ordering::SeqCst);
            }
        });
        (got, done)
    };
    let (out, out_done) = read(Box::new(child.stdout.take().expect("piped")));
    let (err, err_done) = read(Box::new(child.stderr.take().expect("piped")));
    let exited = crate::os::ExitWatch::new(&child, std::time::Duration::from_millis(50));
    let wait = |left: std::time::Duration| exited.wait(left);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if !unattended {
            wait(std::time::Duration::from_secs(3600));
            continue;
        }
        let quiet = std::time::Duration::from_millis(
            (start.elapsed().as_millis() as u64).saturating_sub(said.load(Ordering::SeqCst)),
        );
        match idle.checked_sub(quiet).filter(|l| !l.is_zero()) {
            Some(left) => wait(left),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    // The pipes end with git, unless a helper it started holds them: then
    // what git wrote is taken after a moment, without the helper.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
    for done in [&out_done, &err_done] {
        while !done.is_finished() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    let take = |b: &Arc<Mutex<Vec<u8>>>| {
        String::from_utf8_lossy(&b.lock().expect("git output")).into_owned()
    };
    let (out, err) = (take(&out), without_progress(&take(&err)));
    match status {
        Some(status) => Ok((status.success(), out, err)),
        None => Ok((
            false,
            out,
            format!(
                "{err}timed out: git {what} said nothing for {} s (GIT_STEPS_NET_TIMEOUT_SECS) and was stopped",
                idle.as_secs()
            ),
        )),
    }
}

/// git's stderr without its progress meter (the lines `--progress` adds,
/// each redrawn after `\r`); what the server or git says otherwise stays.
fn without_progress(err: &str) -> String {
    const PROGRESS: [&str; 10] = [
        "Enumerating objects",
        "Counting objects",
        "Delta compression",
        "Compressing objects",
        "Writing objects",
        "Receiving objects",
        "Resolving deltas",
        "Unpacking objects",
        "Checking connectivity",
        "Total ",
    ];
    let mut kept = String::new();
    for line in err.split_inclusive('\n') {
        // (ssh ends its lines with "\r\n".)
        let last = line
            .trim_end_matches(['\n', '\r'])
            .rsplit('\r')
            .next()
            .unwrap_or("");
        let text = last.strip_prefix("remote: ").unwrap_or(last).trim_start();
        // ("Total 3 (delta 0), …", not "Total size exceeds the quota".)
        let progress = PROGRESS.iter().any(|p| {
            text.strip_prefix(p).is_some_and(|rest| {
                *p != "Total " || rest.starts_with(|c: char| c.is_ascii_digit())
            })
        });
        if last.trim().is_empty() || progress {
            continue;
        }
        kept.push_str(last);
        kept.push('\n');
    }
    kept
}

/// Run git and return its stdout, or an error with its stderr.
fn run_git_ok(cmd: Command, what: &str, spec: &str) -> Result<String> {
    let (ok, out, err) = run_git(cmd, what)?;
    if !ok {
        return Err(Error::remote(
            format!("git {what} {spec} failed: {}", err.trim()),
            crate::error::spurious_text(&err),
        ));
    }
    Ok(out)
}

/// The id `git ls-remote` printed for `refname`, if any.
pub(super) fn parse_ls_remote(out: &str, refname: &str) -> Result<Option<Oid>> {
    for l in out.lines() {
        if let Some((oid, name)) = l.split_once('\t') {
            if name == refname {
                return Ok(Some(Oid::from_str(oid)?));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_left_out_of_what_git_said() {
        let err = "Enumerating objects: 5, done.\nCounting objects:  20% (1/5)\rCounting objects: 100% (5/5), done.\nWriting objects: 100% (3/3), 250 bytes | 250.00 KiB/s, done.\nTotal 3 (delta 0), reused 0 (delta 0), pack-reused 0\nremote: Resolving deltas: 100% (1/1)\nremote: hook says no\nerror: failed to push some refs\n";
        assert_eq!(
            without_progress(err),
            "remote: hook says no\nerror: failed to push some refs\n"
        );
        assert_eq!(without_progress(""), "");
        assert_eq!(
            without_progress("remote: Total size exceeds the quota\n"),
            "remote: Total size exceeds the quota\n"
        );
        assert_eq!(
            without_progress("Host key verification failed.\r\nfatal: Could not read\n"),
            "Host key verification failed.\nfatal: Could not read\n"
        );
    }

    #[test]
    fn ls_remote_output_is_read_by_exact_ref_name() {
        let a = "1111111111111111111111111111111111111111";
        let b = "2222222222222222222222222222222222222222";
        let out =
            format!("{a}\trefs/heads/main-old\n{b}\trefs/heads/main\n{a}\trefs/heads/main^{{}}\n");
        assert_eq!(
            parse_ls_remote(&out, "refs/heads/main").unwrap(),
            Some(Oid::from_str(b).unwrap())
        );
        assert_eq!(parse_ls_remote(&out, "refs/heads/mai").unwrap(), None);
        assert_eq!(parse_ls_remote("", "refs/heads/main").unwrap(), None);
        // A line that is not `<oid>\t<ref>` for the ref asked is skipped; a
        // bad id for it is an error, not "no such ref".
        assert_eq!(
            parse_ls_remote("garbage\n", "refs/heads/main").unwrap(),
            None
        );
        assert!(parse_ls_remote("xyz\trefs/heads/main\n", "refs/heads/main").is_err());
    }
}
