//! Signing (issue 14, item 6): with `commit.gpgSign` every commit git-steps
//! makes is signed as git would sign it — ssh keys through `ssh-keygen`,
//! OpenPGP through `gpg` — with keys the tests generate; a remote that
//! accepts only signed commits accepts the run; a signer that fails stops
//! the step before anything of it is written.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::{line, TestRepo};
use crate::servers::Kind;

fn step(n: u32) -> String {
    line(
        serde_json::json!({"id": format!("s{n}"), "files": {format!("f{n}.txt"): format!("{n}\n")}}),
    )
}

/// A fresh ed25519 key (no passphrase) and an allowed-signers file naming
/// the test identity, in the scratch dir.
fn ssh_key(t: &TestRepo) -> (PathBuf, PathBuf) {
    let key = t.tmp.path().join("signing-key");
    let ok = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "tester", "-f"])
        .arg(&key)
        .status()
        .expect("ssh-keygen runs (scripts/test.sh installs openssh-client)");
    assert!(ok.success());
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let allowed = t.tmp.path().join("allowed-signers");
    std::fs::write(&allowed, format!("tester@example.invalid {public}")).unwrap();
    (key, allowed)
}

fn use_ssh_key(t: &TestRepo, key: &Path) {
    for (k, v) in [
        ("commit.gpgSign", "true"),
        ("gpg.format", "ssh"),
        ("user.signingKey", key.to_str().unwrap()),
    ] {
        t.git(&["config", k, v]).ok();
    }
}

/// Every commit of `rev` after `base` verifies with git's own
/// `verify-commit`, in the repository at `dir` (`git -C`).
#[track_caller]
fn all_verify(t: &TestRepo, allowed: &Path, range: &str) -> usize {
    let commits = t.git_out(&["rev-list", range]);
    let mut n = 0;
    for c in commits.lines() {
        let r = t.git(&[
            "-c",
            &format!("gpg.ssh.allowedSignersFile={}", allowed.display()),
            "verify-commit",
            c,
        ]);
        assert_eq!(
            r.code(),
            Some(0),
            "commit {c} does not verify\n{}",
            r.explain()
        );
        n += 1;
    }
    n
}

/// ssh signing, against a remote whose pre-receive hook refuses any commit
/// that does not verify (as a host that requires signed commits does).
#[test]
fn ssh_signed_steps_pass_a_remote_that_requires_signatures() {
    let t = TestRepo::new();
    t.pin_policy();
    t.write("README", "project\n");
    t.commit_all("base");
    let (key, allowed) = ssh_key(&t);
    let server = t.start_server(Kind::Daemon);
    t.git(&["push", "-q", server.url(), "main"]).ok();
    server.hook(
        "pre-receive",
        &format!(
            "#!/bin/sh\nwhile read old new ref; do\n  case $old in 0000000000000000000000000000000000000000) range=\"$new --not --all\";; *) range=\"$old..$new\";; esac\n  for c in $(git rev-list $range); do\n    git -c gpg.ssh.allowedSignersFile={} verify-commit $c >/dev/null 2>&1 || {{ echo \"unsigned commit $c\" >&2; exit 1; }}\n  done\ndone\n",
            allowed.display()
        ),
    );
    // Without signing, the remote refuses the step: the hook is real.
    t.steps(&["init", "--branch", "agent/x", "--remote", server.url()])
        .ok();
    let one = t.plan("one.jsonl", &[step(1)]);
    let r = t.steps(&["apply", one.to_str().unwrap()]);
    assert_ne!(r.code(), Some(0), "{}", r.explain());
    assert!(r.stderr().contains("unsigned commit"), "{}", r.explain());
    // Take the refused commit off the local branch (it never became durable).
    t.git(&["checkout", "-q", "main"]).ok();
    t.git(&["branch", "-q", "-D", "agent/x"]).ok();

    use_ssh_key(&t, &key);
    let plan = t.plan("p.jsonl", &[step(1), step(2), step(3)]);
    t.steps(&["apply", plan.to_str().unwrap()]).ok();
    assert_eq!(all_verify(&t, &allowed, "main..agent/x"), 3);
    assert_eq!(
        server.git(&["rev-parse", "agent/x"]),
        t.git_out(&["rev-parse", "agent/x"])
    );
    t.steps(&["verify"]).ok();
}

/// A signer that fails refuses the step (exit 1) before its commit exists:
/// the steps before it stay durable, nothing of it is written, and the
/// rerun with a working signer lands it once.
#[test]
fn a_failing_signer_stops_the_step_before_anything_is_written() {
    let t = TestRepo::new();
    t.pin_policy();
    let (key, allowed) = ssh_key(&t);
    use_ssh_key(&t, &key);

    // No key at all: refused before anything. (Under a CI policy the
    // global config names a key, which a repository cannot unset.)
    let plan = t.plan("p.jsonl", &[step(1), step(2), step(3)]);
    let p = plan.to_str().unwrap();
    if !crate::harness::under_policy() {
        t.git(&["config", "--unset", "user.signingKey"]).ok();
        t.refuses("no signing key", 1, &["user.signingKey"], || {
            t.steps(&["apply", p])
        });
    }

    // A key file that is not there: ssh-keygen fails, nothing is written.
    t.git(&["config", "user.signingKey", "/nonexistent/key"])
        .ok();
    t.refuses(
        "missing key file",
        1,
        &["signing the commit failed", "step s1:"],
        || t.steps(&["apply", p]),
    );
    // Issue 28 item 13: the error names the step, and `--json` says which.
    let r = t.refuses("missing key file (--json)", 1, &["step s1:"], || {
        t.steps(&["--json", "apply", p])
    });
    let doc = r.json();
    assert_eq!(doc["type"], "error", "{doc}");
    assert_eq!(doc["data"]["step"], "s1", "{doc}");
    assert_eq!(doc["data"]["code"], 1, "{doc}");

    // A signer that works once, then fails: s1 lands, s2 does not.
    let wrapper = t.tmp.path().join("flaky-ssh-keygen");
    let count = t.tmp.path().join("sign-count");
    crate::harness::script(
        &wrapper,
        &format!(
            "#!/bin/sh\nn=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}\n[ $n -ge 2 ] && {{ echo 'card removed' >&2; exit 1; }}\nexec ssh-keygen \"$@\"\n",
            c = count.display()
        ),
    );
    t.git(&["config", "user.signingKey", key.to_str().unwrap()])
        .ok();
    t.git(&["config", "gpg.ssh.program", wrapper.to_str().unwrap()])
        .ok();
    let r = t.steps(&["apply", p]).code_is(1);
    assert!(r.stderr().contains("card removed"), "{}", r.explain());
    assert_eq!(t.step_ids(), vec!["s1".to_string()]);
    assert_eq!(t.git_out(&["status", "--porcelain"]), "");
    assert!(!t.path("f2.txt").exists());

    t.git(&["config", "--unset", "gpg.ssh.program"]).ok();
    t.steps(&["apply", p]).ok();
    assert_eq!(t.step_ids(), ["s1", "s2", "s3"].map(String::from).to_vec());
    assert_eq!(all_verify(&t, &allowed, "HEAD"), 3);
}

/// OpenPGP: `gpg` with a key generated in a private GNUPGHOME.
#[test]
fn openpgp_signed_steps_verify_with_gpg() {
    let t = TestRepo::new();
    t.pin_policy();
    let home = t.tmp.path().join("gnupg");
    std::fs::create_dir(&home).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let gpg = |args: &[&str]| {
        let out = Command::new("gpg")
            .env("GNUPGHOME", &home)
            .args(["--batch", "--quiet", "--passphrase", ""])
            .args(args)
            .output()
            .expect("gpg runs (scripts/test.sh installs gnupg)");
        assert!(
            out.status.success(),
            "gpg {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    gpg(&[
        "--quick-gen-key",
        "Tester <tester@example.invalid>",
        "ed25519",
        "sign",
        "never",
    ]);
    t.git(&["config", "commit.gpgSign", "true"]).ok();
    t.git(&[
        "config",
        "user.signingKey",
        "Tester <tester@example.invalid>",
    ])
    .ok();
    let plan = t.plan("p.jsonl", &[step(1), step(2)]);
    let home_s = home.to_str().unwrap();
    t.steps_env(&["apply", plan.to_str().unwrap()], &[("GNUPGHOME", home_s)])
        .ok();
    let commits = t.git_out(&["rev-list", "HEAD"]);
    for c in commits.lines() {
        let mut cmd = Command::new("git");
        cmd.args(["verify-commit", c]).current_dir(&t.work);
        crate::harness::hermetic(&mut cmd, &t.home());
        cmd.env("GNUPGHOME", &home);
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{c}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = Command::new("gpgconf")
        .env("GNUPGHOME", &home)
        .args(["--kill", "gpg-agent"])
        .status();
}
