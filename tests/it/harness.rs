//! Test harness: temporary repositories driven through the real binary and
//! audited with the real `git` CLI, in a hermetic environment (no user or
//! system git config, fixed identities and dates). It also holds what the
//! test files share: plan lines, a box with a server, the refusal check
//! (exit code, message, nothing changed) and the knobs of randomized tests.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use sha2::{Digest, Sha256};

use crate::servers::{Kind, Server};

pub const BIN: &str = env!("CARGO_BIN_EXE_git-steps");

/// Wait at most `timeout` for `child` to exit: woken when it does (a
/// pidfd), not by polling. None if it is still running.
pub fn wait_exit(
    child: &mut std::process::Child,
    timeout: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    #[cfg(target_os = "linux")]
    wait_gone(child.id(), timeout);
    // Off Linux a child's zombie is reaped here, polled.
    #[cfg(not(target_os = "linux"))]
    {
        let until = std::time::Instant::now() + timeout;
        while child.try_wait().unwrap().is_none() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    child.try_wait().unwrap()
}

/// Wait at most `timeout` for the process `pid` (any process, not only a
/// child) to end: woken when it does (a pidfd). True if it has ended (a
/// zombie has).
#[cfg(target_os = "linux")]
pub fn wait_gone(pid: u32, timeout: std::time::Duration) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let Some(pid) = rustix::process::Pid::from_raw(pid as i32) else {
        return true;
    };
    match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
        Ok(fd) => {
            let until = Timespec::try_from(timeout).unwrap();
            let mut fds = [PollFd::new(&fd, PollFlags::IN)];
            matches!(poll(&mut fds, Some(&until)), Ok(n) if n > 0)
        }
        // No such process: it is gone (and reaped).
        Err(e) if e == rustix::io::Errno::SRCH => true,
        Err(e) => panic!("pidfd_open({pid:?}): {e}"),
    }
}

/// Off Linux (no pidfd): polled every 10 ms with a null signal. A zombie
/// that is not this process's child counts as running until its parent
/// reaps it.
#[cfg(not(target_os = "linux"))]
pub fn wait_gone(pid: u32, timeout: std::time::Duration) -> bool {
    let Some(pid) = rustix::process::Pid::from_raw(pid as i32) else {
        return true;
    };
    let until = std::time::Instant::now() + timeout;
    loop {
        if rustix::process::test_kill_process(pid) == Err(rustix::io::Errno::SRCH) {
            return true;
        }
        if std::time::Instant::now() >= until {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Wait until `path` exists: woken when it is made (inotify), failing
/// the test after a minute with `what`.
pub fn wait_for(path: &std::path::Path, what: &str) {
    assert!(
        git_steps::crash::wait_for_file(path, std::time::Duration::from_secs(60)),
        "{what}: {} never appeared within a minute",
        path.display()
    );
}

/// One plan line: a step as JSON on one line.
/// Write an executable script. The file is written by a child `sh`, not by
/// this process: a test thread that forks while this process holds the
/// file open for writing would hand that descriptor to its child, and
/// exec-ing the script then fails with ETXTBSY ("text file busy"), which
/// made hook tests fail now and then.
pub fn script(path: &Path, body: &str) {
    use std::io::Write;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    let mut sh = Command::new("sh")
        .args(["-c", "cat > \"$1\" && chmod 755 \"$1\"", "sh"])
        .arg(path)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    sh.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    assert!(
        sh.wait().unwrap().success(),
        "could not write {}",
        path.display()
    );
}

pub fn line(step: serde_json::Value) -> String {
    serde_json::to_string(&step).unwrap()
}

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// Environment shared by git and git-steps in tests.
pub fn hermetic(cmd: &mut Command, home: &Path) {
    // A proxy of the machine's is not the suite's: tests that use one set it.
    for k in [
        "http_proxy",
        "HTTP_PROXY",
        "https_proxy",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
        "no_proxy",
        "NO_PROXY",
    ] {
        cmd.env_remove(k);
    }
    cmd.env_remove("GIT_STEPS_CRASH")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("GIT_CONFIG_GLOBAL", global_config())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Tester")
        .env("GIT_AUTHOR_EMAIL", "tester@example.invalid")
        .env("GIT_COMMITTER_NAME", "Tester")
        .env("GIT_COMMITTER_EMAIL", "tester@example.invalid")
        .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z")
        .env("LC_ALL", "C")
        // The suite's receivers listen on 127.0.0.1: every box it runs
        // (crash-matrix boxes too, which inherit it) allows that, as a
        // user's `git -c` would; tests of the refusal set their own.
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "steps.effectPrivateHosts")
        .env("GIT_CONFIG_VALUE_0", "true");
}

/// The global git config every test command sees: none, unless
/// `GIT_STEPS_TEST_CONFIG` names one (CI runs the suite once more under a
/// repository policy: `core.autocrlf`, a signing key, hooks run as checks).
pub fn global_config() -> PathBuf {
    std::env::var_os("GIT_STEPS_TEST_CONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/dev/null"))
}

/// Whether the suite runs under such a policy.
pub fn under_policy() -> bool {
    std::env::var_os("GIT_STEPS_TEST_CONFIG").is_some()
}

/// Whether the suite runs through the portable system calls
/// (`GIT_STEPS_OS=portable`, inherited by every git-steps it starts).
pub fn portable() -> bool {
    std::env::var_os("GIT_STEPS_OS").is_some_and(|v| v == "portable")
}

/// For a test of what only Linux's own calls tell: true, and says what is
/// not tested, when the suite runs through the portable set (which answers
/// "unknown" there, and is tested for that by the tests that run).
pub fn linux_only(what: &str) -> bool {
    if portable() {
        eprintln!("not under GIT_STEPS_OS=portable: {what}");
    }
    portable()
}

/// The outcome of one command, printed in full when an assertion fails.
pub struct Run {
    pub what: String,
    pub cwd: PathBuf,
    pub out: Output,
}

impl Run {
    pub fn code(&self) -> Option<i32> {
        self.out.status.code()
    }
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    pub fn explain(&self) -> String {
        format!(
            "command: {}\ncwd: {}\nstatus: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.what,
            self.cwd.display(),
            self.out.status,
            self.stdout(),
            self.stderr()
        )
    }
    #[track_caller]
    pub fn ok(self) -> Self {
        assert!(
            self.out.status.success(),
            "expected success\n{}",
            self.explain()
        );
        self
    }
    #[track_caller]
    pub fn code_is(self, code: i32) -> Self {
        assert_eq!(
            self.code(),
            Some(code),
            "unexpected exit code\n{}",
            self.explain()
        );
        self
    }
    #[track_caller]
    pub fn stderr_has(self, needle: &str) -> Self {
        assert!(
            self.stderr().contains(needle),
            "stderr lacks {needle:?}\n{}",
            self.explain()
        );
        self
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.out.stdout)
            .unwrap_or_else(|e| panic!("stdout is not one JSON document: {e}\n{}", self.explain()))
    }
}

/// A scratch directory holding a work repository (and later, remotes).
pub struct TestRepo {
    pub tmp: std::sync::Arc<tempfile::TempDir>,
    pub work: PathBuf,
}

impl TestRepo {
    /// An empty repository on branch `main`, whose runs land on `main`
    /// (as after `git steps init --branch main`: the suite's boxes run on
    /// the branch they audit; the defaults a new user meets, a run branch
    /// `steps/<run>` and the refusal to write on the default branch, have
    /// their own tests, on [`TestRepo::fresh`]).
    pub fn new() -> Self {
        let t = TestRepo::fresh();
        t.run_on_main();
        t
    }

    /// Set `steps.branch=main` (what `init --branch main` stores first).
    pub fn run_on_main(&self) {
        self.git(&["config", "steps.branch", "main"]).ok();
    }

    /// An empty repository on branch `main`, as `git init` leaves it.
    pub fn fresh() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("work");
        fs::create_dir(&work).unwrap();
        fs::create_dir(tmp.path().join("home")).unwrap();
        let t = TestRepo {
            tmp: std::sync::Arc::new(tmp),
            work,
        };
        t.git(&["init", "-q", "-b", "main"]).ok();
        t
    }

    /// Another box in the same scratch dir: a clone of `url` (a fresh box
    /// after the first one vanished), or an empty repository when None.
    pub fn sibling(&self, name: &str, url: Option<&str>) -> TestRepo {
        let work = self.tmp.path().join(name);
        let t = TestRepo {
            tmp: self.tmp.clone(),
            work: work.clone(),
        };
        match url {
            Some(u) => {
                let mut cmd = Command::new("git");
                cmd.args(["clone", "-q", u])
                    .arg(&work)
                    .current_dir(self.tmp.path());
                hermetic(&mut cmd, &self.home());
                let r = t.run_cmd(cmd, format!("git clone {u}"), None);
                assert!(r.out.status.success(), "{}", r.explain());
            }
            None => {
                fs::create_dir(&work).unwrap();
                t.git(&["init", "-q", "-b", "main"]).ok();
            }
        }
        t.run_on_main();
        t
    }

    /// Another box: `git clone <args> <name>` run in the scratch dir (a
    /// shallow CI checkout: `["--depth", "1", url]`).
    pub fn clone_with(&self, name: &str, args: &[&str]) -> TestRepo {
        let work = self.tmp.path().join(name);
        let t = TestRepo {
            tmp: self.tmp.clone(),
            work: work.clone(),
        };
        let mut cmd = Command::new("git");
        cmd.args(["clone", "-q"])
            .args(args)
            .arg(&work)
            .current_dir(self.tmp.path());
        hermetic(&mut cmd, &self.home());
        let r = t.run_cmd(cmd, format!("git clone {}", args.join(" ")), None);
        assert!(r.out.status.success(), "{}", r.explain());
        t.run_on_main();
        t
    }

    /// A scratch dir with a server of `kind` and a first box initialised
    /// for it with `transport`.
    pub fn with_server(kind: Kind, transport: &str) -> (TestRepo, Server) {
        let t = TestRepo::new();
        let server = t.start_server(kind);
        t.steps(&["init", "--remote", server.url(), "--transport", transport])
            .ok();
        (t, server)
    }

    /// Start a server of `kind` in this scratch dir, serving from
    /// `remote-root` (which [`TestRepo::snapshot`] leaves out).
    pub fn start_server(&self, kind: Kind) -> Server {
        self.start_server_with(kind, &crate::servers::HttpOptions::default())
    }

    /// As [`TestRepo::start_server`], an http(s) server set up as `http` says.
    pub fn start_server_with(&self, kind: Kind, http: &crate::servers::HttpOptions) -> Server {
        let root = self.tmp.path().join("remote-root");
        fs::create_dir(&root).unwrap();
        Server::start_with(kind, &root, http)
    }

    pub fn home(&self) -> PathBuf {
        self.tmp.path().join("home")
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.work.join(rel)
    }

    fn command(&self, program: &str, args: &[&str]) -> (Command, String) {
        let mut cmd = Command::new(program);
        cmd.args(args).current_dir(&self.work);
        hermetic(&mut cmd, &self.home());
        (cmd, format!("{program} {}", args.join(" ")))
    }

    pub fn run_cmd(&self, mut cmd: Command, what: String, stdin: Option<&[u8]>) -> Run {
        use std::io::Write;
        let cwd = self.work.clone();
        if !cwd.exists() {
            cmd.current_dir(self.tmp.path());
        }
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
        if let Some(input) = stdin {
            child.stdin.take().unwrap().write_all(input).unwrap();
        }
        let out = child.wait_with_output().unwrap();
        Run { what, cwd, out }
    }

    pub fn git(&self, args: &[&str]) -> Run {
        let (cmd, what) = self.command("git", args);
        self.run_cmd(cmd, what, None)
    }

    /// `git` output, trimmed, asserting success.
    pub fn git_out(&self, args: &[&str]) -> String {
        self.git(args).ok().stdout().trim_end().to_string()
    }

    pub fn steps(&self, args: &[&str]) -> Run {
        let (cmd, what) = self.command(BIN, args);
        self.run_cmd(cmd, what, None)
    }

    /// A `git-steps` command in this repository's hermetic environment, to
    /// spawn with pipes of the caller's choosing.
    pub fn steps_command(&self, args: &[&str]) -> Command {
        self.command(BIN, args).0
    }

    /// Start `git-steps` without waiting (to kill it at a random instant).
    pub fn spawn_steps(&self, args: &[&str]) -> std::process::Child {
        let (mut cmd, _) = self.command(BIN, args);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd.spawn().unwrap()
    }

    pub fn steps_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        self.steps_env_stdin(args, env, None)
    }

    pub fn steps_env_stdin(&self, args: &[&str], env: &[(&str, &str)], stdin: Option<&str>) -> Run {
        let (mut cmd, what) = self.command(BIN, args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let shown = env
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        self.run_cmd(cmd, format!("{shown} {what}"), stdin.map(str::as_bytes))
    }

    /// `git-steps` with the variables `unset` removed from the hermetic
    /// environment and `env` set.
    pub fn steps_without(&self, args: &[&str], unset: &[&str], env: &[(&str, &str)]) -> Run {
        let (mut cmd, what) = self.command(BIN, args);
        for k in unset {
            cmd.env_remove(k);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        self.run_cmd(cmd, format!("(without {}) {what}", unset.join(" ")), None)
    }

    pub fn steps_stdin(&self, args: &[&str], stdin: &str) -> Run {
        let (cmd, what) = self.command(BIN, args);
        self.run_cmd(cmd, format!("{what} <<< {stdin:?}"), Some(stdin.as_bytes()))
    }

    pub fn write(&self, rel: &str, content: &str) {
        let p = self.path(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }

    /// Pin this repository's policy to git's defaults, whatever global
    /// config the suite runs under (`GIT_STEPS_TEST_CONFIG`): no line-ending
    /// conversion, no signing, hooks in `.git/hooks`, not run. For tests of
    /// one policy (which set their own after this) or of exact bytes.
    pub fn pin_policy(&self) -> &Self {
        let hooks = self.path(".git/hooks");
        for (k, v) in [
            ("core.autocrlf", "false"),
            ("commit.gpgSign", "false"),
            ("gpg.format", "openpgp"),
            ("steps.hooks", "false"),
            ("core.hooksPath", hooks.to_str().unwrap()),
        ] {
            self.git(&["config", k, v]).ok();
        }
        self
    }

    /// A worktree file's text. Under a CI policy with `core.autocrlf`
    /// (`GIT_STEPS_TEST_CONFIG`) text files are checked out with CRLF, as
    /// git checks them out: read back with LF, as git reads them.
    pub fn read(&self, rel: &str) -> String {
        let text = fs::read_to_string(self.path(rel)).unwrap();
        if under_policy()
            && self
                .git(&["config", "--get", "core.autocrlf"])
                .stdout()
                .trim()
                == "true"
        {
            text.replace("\r\n", "\n")
        } else {
            text
        }
    }

    /// A bare repository `remote.git` beside the box, set up as the run's
    /// remote (`git steps init --remote <path>`); its path.
    pub fn with_local_bare(&self) -> PathBuf {
        let bare = self.tmp.path().join("remote.git");
        self.git(&["init", "-q", "--bare", "-b", "main", bare.to_str().unwrap()])
            .ok();
        self.steps(&["init", "--remote", bare.to_str().unwrap()])
            .ok();
        bare
    }

    /// Write a plan file outside the work tree (in the scratch dir).
    pub fn plan(&self, name: &str, lines: &[String]) -> PathBuf {
        let p = self.tmp.path().join(name);
        fs::write(&p, lines.join("\n") + "\n").unwrap();
        p
    }

    pub fn commit_all(&self, msg: &str) {
        self.git(&["add", "-A"]).ok();
        self.git(&["commit", "-q", "-m", msg]).ok();
    }

    pub fn head(&self) -> Option<String> {
        let r = self.git(&["rev-parse", "-q", "--verify", "HEAD"]);
        r.out
            .status
            .success()
            .then(|| r.stdout().trim().to_string())
    }

    /// `git log` of every ref, for failure messages; it never fails itself
    /// (an empty or vanished repository says so instead).
    pub fn log_all(&self) -> String {
        let r = self.git(&["log", "--all", "--graph", "--decorate", "--format=%h%d %s"]);
        format!("{}{}", r.stdout(), r.stderr())
    }

    /// What `r` did, and this repository's `git log` after it.
    pub fn explain_with_log(&self, r: &Run) -> String {
        format!(
            "{}\n--- git log --all in {} ---\n{}",
            r.explain(),
            self.work.display(),
            self.log_all()
        )
    }

    /// A refusal: `run` exits `code` with every needle in its stderr, and
    /// leaves this repository as it was (everything [`TestRepo::snapshot`]
    /// sees). `what` names the case in failure messages, which print the
    /// command, its stdout and stderr, and this repository's `git log`.
    /// Returns the run for checks of the caller's own.
    #[track_caller]
    pub fn refuses(
        &self,
        what: &str,
        code: i32,
        needles: &[&str],
        run: impl FnOnce() -> Run,
    ) -> Run {
        let what = if what.is_empty() {
            String::new()
        } else {
            format!("{what}: ")
        };
        let before = self.snapshot();
        let r = run();
        assert_eq!(
            r.code(),
            Some(code),
            "{what}unexpected exit code\n{}",
            self.explain_with_log(&r)
        );
        let err = r.stderr();
        for n in needles {
            assert!(
                err.contains(n),
                "{what}stderr lacks {n:?}\n{}",
                self.explain_with_log(&r)
            );
        }
        assert_eq!(
            self.snapshot(),
            before,
            "{what}something changed\n{}",
            self.explain_with_log(&r)
        );
        r
    }

    /// Step ids in history order, as an auditor reads them with plain git.
    pub fn step_ids(&self) -> Vec<String> {
        if self.head().is_none() {
            return Vec::new();
        }
        let out = self.git_out(&[
            "log",
            "--reverse",
            "--format=%(trailers:key=Step-Id,valueonly)",
        ]);
        out.lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// Everything a refusal must leave alone: HEAD, refs, index, worktree
    /// (tracked and untracked), and the scratch dir outside the repository.
    pub fn snapshot(&self) -> Snapshot {
        // Fetch caches (remote-tracking refs) may move; nothing else may.
        let refs = self
            .git_out(&["for-each-ref", "--format=%(refname) %(objectname)"])
            .lines()
            .filter(|l| {
                !l.starts_with("refs/remotes/")
                    && !l.starts_with("refs/steps/remote/")
                    && !l.starts_with("refs/steps/remote-cache/")
            })
            .collect::<Vec<_>>()
            .join("\n");
        let status = self.git_out(&[
            "status",
            "--porcelain=v2",
            "--untracked-files=all",
            "--ignored",
        ]);
        let index = fs::read(self.work.join(".git/index")).unwrap_or_default();
        let mut files = BTreeMap::new();
        walk(&self.work, &self.work, &mut files);
        let mut outside = BTreeMap::new();
        walk(self.tmp.path(), self.tmp.path(), &mut outside);
        // Outside the repository: the scratch dir, less other boxes (git
        // repositories of their own), the servers and the test's home.
        let root = self.tmp.path();
        outside.retain(|k, _| {
            let first = k.split('/').next().unwrap_or("");
            first != "home" && first != "remote-root" && !root.join(first).join(".git").exists()
        });
        Snapshot {
            head: self.head(),
            refs,
            status,
            index_sha: hex(&Sha256::digest(&index)),
            files,
            outside,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub head: Option<String>,
    pub refs: String,
    pub status: String,
    pub index_sha: String,
    pub files: BTreeMap<String, String>,
    pub outside: BTreeMap<String, String>,
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd {
        let e = e.unwrap();
        let p = e.path();
        let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        if rel == ".git" {
            continue;
        }
        let meta = fs::symlink_metadata(&p).unwrap();
        if meta.is_dir() {
            walk(root, &p, out);
        } else if meta.file_type().is_symlink() {
            out.insert(rel, format!("-> {}", fs::read_link(&p).unwrap().display()));
        } else {
            out.insert(rel, hex(&Sha256::digest(fs::read(&p).unwrap())));
        }
    }
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The SPEC's artifact fingerprint, computed independently of the library:
/// `git ls-tree -r` for entries, `git cat-file` for contents.
pub fn independent_fingerprint(t: &TestRepo, rev: &str) -> String {
    let listing = t.git(&["ls-tree", "-r", "-z", rev]).ok();
    let mut entries: Vec<(Vec<u8>, String, String, String)> = Vec::new();
    for rec in listing
        .out
        .stdout
        .split(|b| *b == 0)
        .filter(|r| !r.is_empty())
    {
        let tab = rec.iter().position(|b| *b == b'\t').unwrap();
        let meta = String::from_utf8(rec[..tab].to_vec()).unwrap();
        let path = rec[tab + 1..].to_vec();
        let mut parts = meta.split(' ');
        let (mode, kind, oid) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        entries.push((path, mode.to_string(), kind.to_string(), oid.to_string()));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut h = Sha256::new();
    for (path, mode, kind, oid) in entries {
        let content_hash: [u8; 32] = if kind == "commit" {
            Sha256::digest(oid.as_bytes()).into()
        } else {
            let blob = t.git(&["cat-file", "blob", &oid]).ok();
            Sha256::digest(&blob.out.stdout).into()
        };
        h.update(mode.as_bytes());
        h.update(b" ");
        h.update(&path);
        h.update([0]);
        h.update(content_hash);
    }
    format!("sha256:{}", hex(&h.finalize()))
}

/// The history fingerprint from receipts read with plain git.
pub fn independent_history(t: &TestRepo) -> String {
    let out = t.git_out(&[
        "log",
        "--reverse",
        "--format=%(trailers:key=Step-Id,valueonly,separator=)%x09%(trailers:key=Step-Decision,valueonly,separator=)",
    ]);
    let mut h = Sha256::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let (id, d) = line.split_once('\t').unwrap();
        h.update(format!("{id} {d}\n").as_bytes());
    }
    format!("sha256:{}", hex(&h.finalize()))
}

pub fn plan_ids(plan: &Path) -> Vec<String> {
    fs::read_to_string(plan)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["id"].as_str().unwrap().to_string()
        })
        .collect()
}

/// What `git interpret-trailers --parse` reads from `message`.
pub fn interpret_trailers(t: &TestRepo, message: &str) -> String {
    let mut cmd = Command::new("git");
    cmd.args(["interpret-trailers", "--parse"])
        .current_dir(&t.work);
    hermetic(&mut cmd, &t.home());
    t.run_cmd(
        cmd,
        "git interpret-trailers --parse".into(),
        Some(message.as_bytes()),
    )
    .ok()
    .stdout()
}

pub fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// How many trials a randomized test runs and from which seed:
/// `GIT_STEPS_TRIALS` and `GIT_STEPS_SEED` when they hold a number, the
/// test's own defaults otherwise.
pub fn trials_and_seed(default_trials: u64, default_seed: u64) -> (u64, u64) {
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    (
        var("GIT_STEPS_TRIALS", default_trials),
        var("GIT_STEPS_SEED", default_seed),
    )
}

/// A tiny deterministic generator (xorshift64), so a failing trial can be
/// replayed from its seed. The state must not be 0.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
