//! What the in-process tests share: one hermetic environment for the whole
//! test process (the library reads git's identity and config variables
//! from it), scratch repositories driven with the real `git` CLI, plans,
//! and a `Reporter` that records what a session reports.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Once, OnceLock};

use git_steps::plan::reader::Plan;
use git_steps::run::engine::{self, ApplyReport};
use git_steps::run::session::{ApplyOptions, Origin, Reporter, StepOutcome};
use git_steps::settings::{self, Overrides, Settings};
use git_steps::sync::reconcile::Reconciled;
use git_steps::workdir::repair::Repair;
use git_steps::Error;

static ENV: Once = Once::new();
static HOME: OnceLock<PathBuf> = OnceLock::new();

/// Set the process's environment once, before anything reads it: no user
/// or system git config, a scratch HOME, a fixed identity and dates (as
/// the binary's harness, `tests/it/harness.rs`, gives each command). Every
/// test calls this first; the values never change afterwards, so no
/// thread reads the environment while it is written.
pub fn env() {
    ENV.call_once(|| {
        // In cargo's scratch dir for tests: kept empty (no config is read
        // from it), and not left behind in /tmp by every run.
        let home = HOME.get_or_init(|| {
            let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("inproc-home");
            std::fs::create_dir_all(&home).unwrap();
            home
        });
        let vars: [(&str, &std::ffi::OsStr); 12] = [
            ("HOME", home.as_os_str()),
            ("XDG_CONFIG_HOME", home.as_os_str()),
            ("GIT_CONFIG_GLOBAL", "/dev/null".as_ref()),
            ("GIT_CONFIG_NOSYSTEM", "1".as_ref()),
            ("GIT_AUTHOR_NAME", "Tester".as_ref()),
            ("GIT_AUTHOR_EMAIL", "tester@example.invalid".as_ref()),
            ("GIT_COMMITTER_NAME", "Tester".as_ref()),
            ("GIT_COMMITTER_EMAIL", "tester@example.invalid".as_ref()),
            ("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z".as_ref()),
            ("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z".as_ref()),
            ("LC_ALL", "C".as_ref()),
            ("GIT_TERMINAL_PROMPT", "0".as_ref()),
        ];
        for (k, v) in vars {
            std::env::set_var(k, v);
        }
        for k in [
            "GIT_DIR",
            "GIT_WORK_TREE",
            "GIT_INDEX_FILE",
            "GIT_OBJECT_DIRECTORY",
            "GIT_STEPS_CRASH",
            "GIT_STEPS_CRASH_PAUSE",
        ] {
            std::env::remove_var(k);
        }
    });
}

/// A scratch directory with a work repository on `main`.
pub struct Repo {
    pub tmp: tempfile::TempDir,
    pub work: PathBuf,
}

impl Repo {
    /// `git init -b main` in a new scratch dir, with git's default policy
    /// pinned (no line-ending conversion, no signing, no hooks).
    pub fn new() -> Repo {
        env();
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("work");
        std::fs::create_dir(&work).unwrap();
        let r = Repo { tmp, work };
        r.git(&["init", "-q", "-b", "main"]);
        for (k, v) in [
            ("core.autocrlf", "false"),
            ("commit.gpgSign", "false"),
            ("steps.hooks", "false"),
        ] {
            r.git(&["config", k, v]);
        }
        r
    }

    /// As [`Repo::new`], with one commit (`base.txt`) and a run `r1` on
    /// `main` (what `git steps init --branch main --run r1` stores).
    pub fn with_run() -> Repo {
        let r = Repo::new();
        r.write("base.txt", "base\n");
        r.commit_all("base");
        r.git(&["config", "steps.branch", "main"]);
        r.git(&["config", "steps.run", "r1"]);
        r
    }

    /// A bare repository `remote.git` in the scratch dir, holding this
    /// repository's `main`, named `origin` and set as the run's durable
    /// domain (`steps.remote`).
    pub fn with_remote(&self) -> PathBuf {
        let bare = self.with_origin();
        self.git(&["config", "steps.remote", "origin"]);
        bare
    }

    /// A bare repository `remote.git` in the scratch dir, holding this
    /// repository's `main` and named `origin`; no run is set up on it.
    pub fn with_origin(&self) -> PathBuf {
        let bare = self.tmp.path().join("remote.git");
        run_git(
            self.tmp.path(),
            &["init", "-q", "--bare", "-b", "main", bare.to_str().unwrap()],
        );
        self.git(&["remote", "add", "origin", bare.to_str().unwrap()]);
        self.git(&["push", "-q", "origin", "main"]);
        bare
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.work.join(rel)
    }

    pub fn write(&self, rel: &str, content: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap()
    }

    /// `git` in the work repository, asserting success; stdout.
    pub fn git(&self, args: &[&str]) -> String {
        run_git(&self.work, args)
    }

    /// `git` in the work repository, feeding `stdin`; stdout.
    pub fn git_stdin(&self, args: &[&str], stdin: &[u8]) -> String {
        git_with_stdin(&self.work, args, stdin)
    }

    pub fn commit_all(&self, msg: &str) {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", msg]);
    }

    pub fn rev(&self, rev: &str) -> String {
        self.git(&["rev-parse", rev]).trim().to_string()
    }

    /// `git status --porcelain`, untracked files included.
    pub fn status(&self) -> String {
        self.git(&["status", "--porcelain", "--untracked-files=all"])
    }

    /// The Step-Id trailers of `rev`'s history, oldest first, as git reads
    /// them.
    pub fn step_ids(&self, rev: &str) -> Vec<String> {
        let out = self.git(&[
            "log",
            "--reverse",
            "--first-parent",
            "--format=%(trailers:key=Step-Id,valueonly,separator=%x2C)",
            rev,
        ]);
        out.lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// The repository, opened as the CLI opens it.
    pub fn open(&self) -> git2::Repository {
        git_steps::git::open(&self.work).unwrap()
    }

    /// The run's settings, from git config as the CLI resolves them.
    pub fn settings(&self, repo: &git2::Repository) -> Settings {
        settings::resolve(repo, &Overrides::default()).unwrap()
    }

    /// A plan from JSON step objects, spooled in the git dir as the CLI
    /// spools stdin.
    pub fn plan(&self, repo: &git2::Repository, steps: &[serde_json::Value]) -> Plan {
        let text: String = steps
            .iter()
            .map(|s| serde_json::to_string(s).unwrap() + "\n")
            .collect();
        Plan::from_text(&text, repo.path(), "plan.jsonl").unwrap()
    }

    /// `apply` in process, as `git steps apply` calls the engine, with a
    /// recording Reporter.
    pub fn apply(
        &self,
        steps: &[serde_json::Value],
        opts: &ApplyOptions,
    ) -> (Result<ApplyReport, (Error, Vec<StepOutcome>)>, Recorder) {
        let repo = self.open();
        let s = self.settings(&repo);
        let plan = self.plan(&repo, steps);
        let mut ui = Recorder::default();
        let r = engine::apply_plan(&repo, &s, &plan, opts, &mut ui);
        (r, ui)
    }

    /// As [`Repo::apply`], which must succeed.
    #[track_caller]
    pub fn apply_ok(&self, steps: &[serde_json::Value]) -> (ApplyReport, Recorder) {
        match self.apply(steps, &ApplyOptions::default()) {
            (Ok(report), ui) => (report, ui),
            (Err((e, done)), ui) => panic!(
                "apply failed: {e:?}\noutcomes: {done:?}\nui: {:?}\nlog:\n{}",
                ui.events,
                self.git(&["log", "--all", "--oneline", "--graph"])
            ),
        }
    }
}

/// `git args` in `dir`, asserting success; stdout.
#[track_caller]
pub fn run_git(dir: &Path, args: &[&str]) -> String {
    git_with_stdin(dir, args, &[])
}

#[track_caller]
pub fn git_with_stdin(dir: &Path, args: &[&str], stdin: &[u8]) -> String {
    env();
    use std::io::Write;
    let mut child = Command::new("git")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    // Written from a thread: a large stream must not fill both pipes.
    let writer = std::thread::spawn(move || input.write_all(&data));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        out.status.success(),
        "git {} in {} failed: {}\n{}",
        args.join(" "),
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A `files` step writing `path` with `text`.
pub fn files_step(id: &str, path: &str, text: &str) -> serde_json::Value {
    serde_json::json!({"id": id, "files": {path: text}})
}

/// What a session reported, in order.
#[derive(Debug, Clone)]
pub enum Event {
    Note(String),
    Repaired(Repair),
    Reconciled(Reconciled),
    Step(StepOutcome, Option<Origin>),
}

/// A `Reporter` that records every call.
#[derive(Debug, Default)]
pub struct Recorder {
    pub events: Vec<Event>,
}

impl Reporter for Recorder {
    fn note(&mut self, note: &str) {
        self.events.push(Event::Note(note.to_string()));
    }
    fn repaired(&mut self, repair: &Repair) {
        self.events.push(Event::Repaired(repair.clone()));
    }
    fn reconciled(&mut self, reconciled: &Reconciled) {
        self.events.push(Event::Reconciled(reconciled.clone()));
    }
    fn step(&mut self, outcome: &StepOutcome, origin: Option<Origin>) {
        self.events.push(Event::Step(outcome.clone(), origin));
    }
}

impl Recorder {
    /// The steps reported, as (action, step id, commit or "").
    pub fn steps(&self) -> Vec<(&'static str, String, String)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Step(o, _) => Some(outcome(o)),
                _ => None,
            })
            .collect()
    }

    pub fn repairs(&self) -> Vec<&Repair> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Repaired(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    pub fn reconciles(&self) -> Vec<&Reconciled> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Reconciled(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    pub fn notes(&self) -> Vec<&str> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Note(n) => Some(n.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// An outcome as (action, step id, commit or "").
pub fn outcome(o: &StepOutcome) -> (&'static str, String, String) {
    match o {
        StepOutcome::Applied { step, commit, .. } => ("applied", step.clone(), commit.clone()),
        StepOutcome::WouldApply { step, .. } => ("would-apply", step.clone(), String::new()),
        StepOutcome::Skip { step, commit, .. } => ("skip", step.clone(), commit.clone()),
    }
}

/// The refusal inside `e` (through `AtStep`), or a panic naming `e`.
#[track_caller]
pub fn refusal(e: &Error) -> &git_steps::Refusal {
    match e {
        Error::Refused(r) => r,
        Error::AtStep { error, .. } => refusal(error),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// One commit of a history written with `git fast-import`.
pub struct Fake {
    pub message: String,
    /// Also merge a side commit made just before (a merge of two parents).
    pub merge_side: bool,
}

/// A receipt message of run `run` for step `id` at position `index`, as
/// git-steps writes one (subject, intent, trailers).
pub fn receipt_message(id: &str, run: &str, index: usize) -> String {
    format!(
        "step {id}: edit f.txt\n\n{{\"tool\":\"edit\",\"n\":{index}}}\n\nStep-Id: {id}\nStep-Run: {run}\nStep-Decision: sha256:{index:064x}\nStep-Index: {index}\n"
    )
}

/// Write `commits` on `main` (on top of its head, if any) with `git
/// fast-import`: commit i changes `f.txt`, each at its own fixed date.
/// Fast: a few hundred commits take a fraction of a second.
pub fn fast_import(r: &Repo, commits: &[Fake]) {
    use std::fmt::Write;
    let parent = {
        let out = std::process::Command::new("git")
            .args(["rev-parse", "-q", "--verify", "refs/heads/main"])
            .current_dir(&r.work)
            .output()
            .unwrap();
        out.status
            .success()
            .then(|| String::from_utf8(out.stdout).unwrap().trim().to_string())
    };
    let mut s = String::new();
    let data = |s: &mut String, text: &str| {
        writeln!(s, "data {}", text.len()).unwrap();
        s.push_str(text);
        s.push('\n');
    };
    let mut mark = 0usize;
    let mut last_main: Option<String> = parent;
    for (i, c) in commits.iter().enumerate() {
        let when = 1_767_225_600 + i;
        let who = format!("Tester <tester@example.invalid> {when} +0000");
        let side = if c.merge_side {
            mark += 1;
            writeln!(s, "commit refs/heads/side\nmark :{mark}").unwrap();
            writeln!(s, "author {who}\ncommitter {who}").unwrap();
            data(&mut s, &format!("side commit {i}\n"));
            if let Some(p) = &last_main {
                writeln!(s, "from {p}").unwrap();
            }
            writeln!(s, "M 100644 inline side-{i}.txt").unwrap();
            data(&mut s, &format!("side {i}\n"));
            s.push('\n');
            Some(format!(":{mark}"))
        } else {
            None
        };
        mark += 1;
        writeln!(s, "commit refs/heads/main\nmark :{mark}").unwrap();
        writeln!(s, "author {who}\ncommitter {who}").unwrap();
        data(&mut s, &c.message);
        if let Some(p) = &last_main {
            writeln!(s, "from {p}").unwrap();
        }
        if let Some(side) = side {
            writeln!(s, "merge {side}").unwrap();
        }
        writeln!(s, "M 100644 inline f.txt").unwrap();
        let content: String = (0..20 + i % 40)
            .map(|l| format!("line {l} of commit {i}\n"))
            .collect();
        data(&mut s, &content);
        s.push('\n');
        last_main = Some(format!(":{mark}"));
    }
    r.git_stdin(&["fast-import", "--quiet", "--force"], s.as_bytes());
    if std::process::Command::new("git")
        .args(["symbolic-ref", "HEAD"])
        .current_dir(&r.work)
        .output()
        .unwrap()
        .status
        .success()
    {
        r.git(&["reset", "-q", "--hard", "main"]);
    }
}
