//! The command line: `init` stores settings in git config, `git steps` runs
//! as a git subcommand, usage errors exit 2, and git's errors keep their
//! class as the cause.

use crate::harness::*;

#[test]
fn init_stores_settings_in_git_config_and_commands_use_them() {
    let t = TestRepo::new();
    t.write("base.txt", "base\n");
    t.commit_all("base");
    t.steps(&["init", "--branch", "agent/run-7", "--run", "run-7"])
        .ok();
    assert_eq!(t.git_out(&["config", "steps.branch"]), "agent/run-7");
    assert_eq!(t.git_out(&["config", "steps.run"]), "run-7");
    t.steps_stdin(
        &["apply", "-"],
        &line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}})),
    )
    .ok();
    assert_eq!(
        t.git_out(&["symbolic-ref", "HEAD"]),
        "refs/heads/agent/run-7"
    );
    assert_eq!(
        t.git_out(&["log", "-1", "--format=%(trailers:key=Step-Run,valueonly)"]),
        "run-7"
    );
    // The base commit before the run is not part of it.
    let st = t.steps(&["--json", "status"]).ok().json();
    assert_eq!(st["data"]["steps_applied"], 1);
    assert_eq!(st["data"]["problems"].as_array().unwrap().len(), 0);
}

/// A tuning variable set to something that is not a number is said, with
/// its value, and its default used: the command still does its work, and a
/// `--json` document stays the only thing on stdout.
#[test]
fn a_malformed_tuning_variable_is_warned_about_and_its_default_used() {
    let t = TestRepo::new();
    t.write("base.txt", "base\n");
    t.commit_all("base");
    t.steps(&["init", "--branch", "agent/run"]).ok();
    let r = t
        .steps_env(
            &["--json", "status"],
            &[
                ("GIT_STEPS_NET_RETRIES", "three"),
                ("GIT_STEPS_LOCK_WAIT", "2"),
            ],
        )
        .ok();
    assert_eq!(r.json()["type"], "status");
    assert!(
        r.stderr()
            .contains("warning: GIT_STEPS_NET_RETRIES=\"three\": expected a whole number of 0 or more; the default is used"),
        "{}",
        r.explain()
    );
    assert!(
        !r.stderr().contains("GIT_STEPS_LOCK_WAIT"),
        "{}",
        r.explain()
    );
}

#[test]
fn runs_as_a_git_subcommand() {
    let t = TestRepo::new();
    let bin_dir = std::path::Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = std::process::Command::new("git");
    cmd.args(["steps", "status"]).current_dir(&t.work);
    hermetic(&mut cmd, &t.home());
    cmd.env("PATH", path);
    let r = t.run_cmd(cmd, "git steps status".into(), None).ok();
    assert!(r.stdout().contains("steps applied: 0"), "{}", r.explain());
}

/// `git -c key=value steps …` reaches git-steps as it reaches git's own
/// commands (GIT_CONFIG_PARAMETERS, which libgit2 does not read), above
/// every config file; so do GIT_CONFIG_COUNT/KEY/VALUE. Nothing of it is
/// written to the repository's config.
#[test]
fn git_dash_c_settings_reach_git_steps() {
    let t = TestRepo::new();
    t.git(&["config", "steps.effects", "all"]).ok();
    let bin_dir = std::path::Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let p = t.plan(
        "p.jsonl",
        &[line(serde_json::json!({"id": "s1", "files": {"f": "1\n"},
            "effects": [{"command": ["sh", "-c", "touch ../ran"]}]}))],
    );
    // A value that is not UTF-8 beside it does not lose it; and `git -c`
    // wins over GIT_CONFIG_COUNT, as git applies them.
    let mut cmd = std::process::Command::new("git");
    cmd.args([
        "-c",
        "steps.effects=none",
        "-c",
        "test.quoted=Q 'R' S!",
        "-c",
    ])
    .arg(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"test.bytes=Ren\xe9"))
    .args(["steps", "apply", p.to_str().unwrap()])
    .current_dir(&t.work);
    hermetic(&mut cmd, &t.home());
    cmd.env("PATH", &path)
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "steps.effects")
        .env("GIT_CONFIG_VALUE_0", "all");
    let r = t.run_cmd(cmd, "git -c … steps apply".into(), None).ok();
    assert!(r.stderr().contains("steps.effects=none"), "{}", r.explain());
    assert!(
        !t.tmp.path().join("ran").exists(),
        "the effect was held back"
    );
    let local = std::fs::read_to_string(t.work.join(".git/config")).unwrap();
    assert!(
        local.contains("effects = all") && !local.contains("none") && !local.contains("quoted"),
        "the file's value, overridden, not rewritten: {local}"
    );
    // The variables git reads too.
    let p2 = t.plan(
        "p2.jsonl",
        &[line(serde_json::json!({"id": "s2", "files": {"g": "2\n"},
            "effects": [{"command": ["sh", "-c", "touch ../ran2"]}]}))],
    );
    let mut cmd = t.steps_command(&["apply", p2.to_str().unwrap()]);
    cmd.env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "steps.effects")
        .env("GIT_CONFIG_VALUE_0", "none");
    let r = t
        .run_cmd(cmd, "GIT_CONFIG_COUNT=1 … git-steps apply".into(), None)
        .ok();
    assert!(r.stderr().contains("steps.effects=none"), "{}", r.explain());
    assert!(!t.tmp.path().join("ran2").exists());
    // `git -c key` alone is true: a pre-commit hook that rejects refuses
    // the step under `-c steps.hooks`, over this repository's
    // `steps.hooks=false` (hooks in a folder of the test's own, whatever
    // the machine's global config says).
    t.git(&["config", "steps.hooks", "false"]).ok();
    let hooks = t.tmp.path().join("own-hooks");
    t.git(&["config", "core.hooksPath", hooks.to_str().unwrap()])
        .ok();
    let hook = hooks.join("pre-commit");
    crate::harness::script(&hook, "#!/bin/sh\necho rejected >&2\nexit 1\n");
    let p3 = t.plan(
        "p3.jsonl",
        &[line(serde_json::json!({"id": "s3", "files": {"h": "3\n"}}))],
    );
    let git = |args: &[&str]| {
        let mut cmd = std::process::Command::new("git");
        cmd.args(args).current_dir(&t.work);
        hermetic(&mut cmd, &t.home());
        cmd.env("PATH", &path);
        t.run_cmd(cmd, format!("git {}", args.join(" ")), None)
    };
    let r = git(&["-c", "steps.hooks", "steps", "apply", p3.to_str().unwrap()]);
    assert_eq!(r.code(), Some(3), "{}", r.explain());
    assert!(r.stderr().contains("rejected"), "{}", r.explain());
    // init stores settings: `git -c steps.…` is refused there, not stored
    // as if some other file held it.
    let r = git(&["-c", "steps.branch=feat", "steps", "init"]);
    assert_eq!(r.code(), Some(2), "{}", r.explain());
    assert!(
        r.stderr().contains("steps.branch") && r.stderr().contains("--branch"),
        "{}",
        r.explain()
    );
}

#[test]
fn usage_errors_exit_2() {
    let t = TestRepo::new();
    t.steps(&["apply", "--no-such-flag"]).code_is(2);
    t.steps(&["frobnicate"]).code_is(2);
    // A value outside a flag's set is a usage error too, named by clap,
    // and nothing is read or written.
    let s1 = line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}}));
    let p = t.plan("s1.jsonl", &[s1]);
    for cmd in ["apply", "resume", "status", "init"] {
        let mut args = vec![cmd, "--transport", "ssh"];
        if cmd == "apply" {
            args.push(p.to_str().unwrap());
        }
        t.refuses(cmd, 2, &["invalid value 'ssh'", "libgit2, git"], || {
            t.steps(&args)
        });
    }
    // A bad steps.transport in config is not a usage error: exit 1, named.
    t.git(&["config", "steps.transport", "ssh"]).ok();
    t.git(&["config", "steps.remote", "."]).ok();
    t.refuses("config", 1, &["unknown transport \"ssh\""], || {
        t.steps(&["apply", p.to_str().unwrap()])
    });
}

/// A git failure keeps git's own error as its cause: with `-v`,
/// `Caused by:` shows libgit2's class and code; without, the message alone.
#[test]
fn git_errors_show_their_class_with_verbose() {
    let t = TestRepo::new();
    let s1 = line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}}));
    t.steps_stdin(&["apply", "-"], &s1).ok();
    // The branch names a commit the object database lacks (a damaged or
    // hand-edited repository).
    std::fs::write(
        t.path(".git/refs/heads/main"),
        "0123456789abcdef0123456789abcdef01234567\n",
    )
    .unwrap();
    let r = t.steps(&["status"]);
    assert_eq!(r.code(), Some(1), "{}", r.explain());
    assert!(r.stderr().contains("Error: git: "), "{}", r.explain());
    assert!(!r.stderr().contains("class="), "{}", r.explain());
    let r = t.steps(&["-v", "status"]);
    assert_eq!(r.code(), Some(1), "{}", r.explain());
    assert!(r.stderr().contains("Caused by:"), "{}", r.explain());
    assert!(r.stderr().contains("class="), "{}", r.explain());
}

/// Issue 17, part 6: `git steps man` prints git-steps(1), generated from
/// the same definitions the binary parses with; it names every subcommand
/// `--help` lists (and no hidden one); `--dir` writes one page per command
/// where `man` finds them; `completions` knows every subcommand too.
#[test]
fn the_man_page_and_completions_name_every_subcommand() {
    let t = TestRepo::new();
    let help = t.steps(&["--help"]).ok().stdout();
    let subcommands: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    assert!(subcommands.len() >= 12, "{help}");
    for c in ["apply", "run", "crashtest", "man", "completions"] {
        assert!(subcommands.iter().any(|s| s == c), "{c} in --help: {help}");
    }
    let page = t.steps(&["man"]).ok().stdout();
    assert!(
        page.starts_with(".ie") || page.contains(".TH git-steps 1"),
        "{page}"
    );
    let named = page.replace("\\-", "-");
    for c in &subcommands {
        assert!(
            named.contains(&format!("git-steps-{c}(1)")),
            "{c} missing from the man page"
        );
    }
    for hidden in ["classic-apply", "replay-decider", "git-steps-help"] {
        assert!(!named.contains(hidden), "{hidden} is not a user's command");
    }
    let dir = t.home().join("man/man1");
    let listed = t
        .steps(&["man", "--dir", dir.to_str().unwrap()])
        .ok()
        .stdout();
    assert_eq!(listed.lines().count(), subcommands.len() + 1, "{listed}");
    let apply = std::fs::read_to_string(dir.join("git-steps-apply.1")).unwrap();
    assert!(apply.replace("\\-", "-").contains("--batch"), "{apply}");
    for shell in ["bash", "zsh", "fish"] {
        let script = t.steps(&["completions", shell]).ok().stdout();
        for c in &subcommands {
            assert!(script.contains(c.as_str()), "{shell}: {c}");
        }
    }
    t.steps(&["completions", "tcsh"]).code_is(2);
}

/// What a new user types first: a typo is told the public command only,
/// `apply --help` groups global and run options apart from its own, the
/// man page has a synopsis with values and the sections a man page has,
/// and `git steps <TAB>` completes through git's own bash completion.
#[test]
fn help_typos_man_sections_and_git_completion_serve_a_new_user() {
    let t = TestRepo::new();
    let typo = t.steps(&["aply"]).code_is(2);
    assert!(typo.stderr().contains("'apply'"), "{}", typo.explain());
    assert!(!typo.stderr().contains("replay"), "{}", typo.explain());
    let help = t.steps(&["apply", "--help"]).ok().stdout();
    let heading = |h: &str| {
        help.find(&format!("\n{h}:\n"))
            .unwrap_or_else(|| panic!("{h}: {help}"))
    };
    let (own, run, global) = (
        heading("Options"),
        heading("Run options"),
        heading("Global options"),
    );
    let at = |flag: &str| help.find(flag).unwrap_or_else(|| panic!("{flag}: {help}"));
    assert!(own < at("--dry-run") && at("--dry-run") < run, "{help}");
    assert!(run < at("--branch") && at("--branch") < global, "{help}");
    assert!(global < at("--json"), "{help}");

    let page = t.steps(&["man"]).ok().stdout().replace("\\-", "-");
    assert!(page.contains("[-C PATH] [--json]"), "{page}");
    for section in ["EXIT STATUS", "ENVIRONMENT", "CONFIGURATION", "EXAMPLES"] {
        assert!(page.contains(&format!(".SH \"{section}\"")), "{section}");
    }
    for name in ["GIT_STEPS_LOCK_WAIT", "steps.branch", "steps.maxFileSize"] {
        assert!(page.contains(name), "{name}");
    }

    t.git(&["remote", "add", "upstream", "/nonexistent/upstream.git"])
        .ok();
    t.write("base.txt", "a file --remote must not offer\n");
    let script = t.home().join("git-steps.bash");
    std::fs::write(&script, t.steps(&["completions", "bash"]).ok().stdout()).unwrap();
    let git_completion = [
        "/usr/share/bash-completion/completions/git",
        "/etc/bash_completion.d/git",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists());
    // With git's completion (Debian's git ships it), through git's own
    // entry point; without it, `_git_steps` as git would call it.
    let call = match git_completion {
        Some(g) => format!(
            "source {g}; source {}; __git_wrap__git_main",
            script.display()
        ),
        None => format!("source {}; _git_steps", script.display()),
    };
    for (words, want, not) in [
        ("git steps ap", "apply", "replay"),
        ("git steps ''", "status", "classic-apply"),
        ("git steps apply --b", "--batch", "--dry-run"),
        ("git -C . steps apply --transport ''", "libgit2", "apply"),
        // Issue 50: `--remote <TAB>` offers the remotes, not file names.
        ("git steps apply --remote ''", "upstream", "base.txt"),
    ] {
        let bash = format!(
            "COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); COMP_LINE=\"{words}\"; COMP_POINT=${{#COMP_LINE}}; {call}; echo \"${{COMPREPLY[*]}}\""
        );
        let mut cmd = std::process::Command::new("bash");
        cmd.args(["-c", &bash]).current_dir(t.path(""));
        let r = t.run_cmd(cmd, format!("bash completion of {words}"), None);
        let got = r.stdout();
        assert!(
            got.split_whitespace().any(|w| w == want) && !got.contains(not),
            "{words}: {got}\n{}",
            r.explain()
        );
    }
}

/// Issue 18, part 5: long work draws a progress bar on stderr when it is a
/// terminal (a real pty, through `script`), and nothing when it is not, or
/// with `--quiet` or `--json`.
#[test]
fn a_progress_bar_only_on_a_terminal() {
    // The same work in each case, with the bar's delay set to nothing (a
    // machine fast enough to finish in a quarter of a second would
    // otherwise show none), so that a missing bar means none was drawn.
    let steps: Vec<String> = (0..80)
        .map(|i| line(serde_json::json!({"id": format!("p{i}"), "files": {format!("f{}.txt", i % 30): format!("{i}\n")}})))
        .collect();
    let fresh = || {
        let t = TestRepo::new();
        let plan = t.plan("long.jsonl", &steps);
        (t, plan.to_str().unwrap().to_string())
    };
    // Run under a pseudo-terminal: stdout and stderr both go to it.
    let on_tty = |t: &TestRepo, args: &[&str], delay_ms: &str| -> String {
        let mut cmd = t.steps_command(args);
        cmd.env("GIT_STEPS_PROGRESS_DELAY_MS", delay_ms);
        let quote =
            |s: &std::ffi::OsStr| format!("'{}'", s.to_string_lossy().replace('\'', "'\\''"));
        let line = std::iter::once(quote(cmd.get_program()))
            .chain(cmd.get_args().map(quote))
            .collect::<Vec<_>>()
            .join(" ");
        let mut s = std::process::Command::new("script");
        s.args(["-qec", &line, "/dev/null"]);
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => s.env(k, v),
                None => s.env_remove(k),
            };
        }
        if let Some(d) = cmd.get_current_dir() {
            s.current_dir(d);
        }
        let r = t.run_cmd(s, format!("script -qec {line}"), None);
        assert!(r.out.status.success(), "{}", r.explain());
        assert_eq!(t.step_ids().len(), 80);
        r.stdout()
    };
    let (t, plan) = fresh();
    let shown = on_tty(&t, &["apply", &plan], "0");
    assert!(shown.contains("applying the plan: ["), "a bar: {shown}");
    assert!(
        shown.contains("applied p79"),
        "and every step's line: {shown}"
    );
    let (t, plan) = fresh();
    let quiet = on_tty(&t, &["-q", "apply", &plan], "0");
    assert!(!quiet.contains("applying the plan"), "--quiet: {quiet}");
    let (t, plan) = fresh();
    let json = on_tty(&t, &["--json", "apply", &plan], "0");
    assert!(!json.contains("applying the plan"), "--json: {json}");
    // Work shorter than the delay draws nothing.
    let (t, plan) = fresh();
    let quick = on_tty(&t, &["apply", &plan], "600000");
    assert!(
        !quick.contains("applying the plan"),
        "before the delay: {quick}"
    );
    assert!(quick.contains("applied p79"), "{quick}");
    let (t, plan) = fresh();
    let mut cmd = t.steps_command(&["apply", &plan]);
    cmd.env("GIT_STEPS_PROGRESS_DELAY_MS", "0");
    let piped = t.run_cmd(cmd, "git-steps apply (piped)".into(), None).ok();
    assert!(
        !piped.stderr().contains("applying the plan"),
        "{}",
        piped.explain()
    );
    assert_eq!(t.step_ids().len(), 80);
}

/// A reader that goes away (`git steps log | head`) is not a failure: a
/// command whose output nobody reads any more ends with exit 0 and says
/// nothing on stderr. Here the pipe's reading end is closed before the
/// command starts, so its first write fails, every time.
#[test]
fn a_reader_that_goes_away_is_not_an_error() {
    let t = TestRepo::new();
    let s1 = line(serde_json::json!({"id": "s1", "files": {"f": "1\n"}}));
    t.steps_stdin(&["apply", "-"], &s1).ok();
    for args in [
        &["log"][..],
        &["--json", "log"],
        &["--json", "status"],
        &["man"],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut cmd = t.steps_command(args);
        cmd.stdin(std::process::Stdio::null())
            .stdout(writer)
            .stderr(std::process::Stdio::piped());
        let out = cmd.spawn().unwrap().wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "git-steps {args:?}: {stderr}");
        assert_eq!(stderr, "", "git-steps {args:?}");
    }
}
