//! Commit signing, as git signs: `commit.gpgSign`, `gpg.format` (openpgp,
//! x509 or ssh), `user.signingKey`, and the programs git would run
//! (`gpg.program`/`gpg.<format>.program`, `gpg.ssh.program`,
//! `gpg.ssh.defaultKeyCommand`).
//!
//! Owns turning a commit's bytes into a signed commit object. Invariant: a
//! repository that asks for signed commits gets only signed commits from
//! git-steps, or none — a signer that fails is an error before the commit
//! exists (so before anything is durable), never an unsigned commit.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use git2::{Oid, Repository, Signature};

use crate::error::{Error, Result};

/// How this repository signs commits.
#[derive(Debug, Clone)]
pub enum Signer {
    /// `gpg.format=openpgp` (gpg) or `x509` (gpgsm): `<program> --status-fd=2
    /// -bsau <key>`, the payload on stdin, the armored signature on stdout.
    Gpg { program: String, key: String },
    /// `gpg.format=ssh`: `ssh-keygen -Y sign -n git -f <key> <file>`.
    Ssh { program: String, key: SshKey },
}

/// An ssh signing key as `user.signingKey` gives it.
#[derive(Debug, Clone)]
pub enum SshKey {
    /// A path to a private key (or a public one whose private half an agent
    /// holds).
    File(PathBuf),
    /// A literal public key (`key::ssh-ed25519 AAAA…` or `ssh-ed25519
    /// AAAA…`): signed by the ssh-agent that holds it.
    Literal(String),
}

fn get_string(cfg: &git2::Config, key: &str) -> Result<Option<String>> {
    match cfg.get_string(key) {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn no_key(what: &str) -> Error {
    Error::config(format!(
        "commit.gpgSign is on but {what}: git-steps would not make a commit git could not sign"
    ))
    .with_hint("set the key (`git config user.signingKey <key>`), or turn signing off for this repository (`git config commit.gpgSign false`); nothing was written")
}

/// The signer git would use for a commit in `repo` by `committer`; None
/// when `commit.gpgSign` is off.
pub fn signer(repo: &Repository, committer: &Signature<'_>) -> Result<Option<Signer>> {
    let cfg = repo.config()?.snapshot()?;
    match cfg.get_bool("commit.gpgsign") {
        Ok(true) => {}
        Ok(false) => return Ok(None),
        Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let format = get_string(&cfg, "gpg.format")?.unwrap_or_else(|| "openpgp".into());
    let key = get_string(&cfg, "user.signingkey")?;
    match format.as_str() {
        "openpgp" | "x509" => {
            let program = get_string(&cfg, &format!("gpg.{format}.program"))?
                .or(if format == "openpgp" {
                    get_string(&cfg, "gpg.program")?
                } else {
                    None
                })
                .unwrap_or_else(|| if format == "x509" { "gpgsm" } else { "gpg" }.into());
            // As git: without a key, the committer's identity names it.
            let key = key.unwrap_or_else(|| {
                format!(
                    "{} <{}>",
                    committer.name().unwrap_or_default(),
                    committer.email().unwrap_or_default()
                )
            });
            Ok(Some(Signer::Gpg { program, key }))
        }
        "ssh" => {
            let program =
                get_string(&cfg, "gpg.ssh.program")?.unwrap_or_else(|| "ssh-keygen".into());
            let key = match key {
                Some(k) => k,
                None => match get_string(&cfg, "gpg.ssh.defaultkeycommand")? {
                    Some(cmd) => default_key(&cmd)?,
                    None => {
                        return Err(no_key(
                            "gpg.format is ssh and neither user.signingKey nor gpg.ssh.defaultKeyCommand names a key",
                        ))
                    }
                },
            };
            let key = if let Some(lit) = key.strip_prefix("key::") {
                SshKey::Literal(lit.to_string())
            } else if key.starts_with("ssh-") || key.starts_with("ecdsa-") || key.starts_with("sk-")
            {
                SshKey::Literal(key)
            } else {
                SshKey::File(expand_home(&key))
            };
            Ok(Some(Signer::Ssh { program, key }))
        }
        other => Err(Error::config(format!(
            "gpg.format is {other:?}, which git does not know (openpgp, x509 or ssh)"
        ))
        .with_hint("fix gpg.format (`git config gpg.format ssh`); nothing was written")),
    }
}

/// The key `gpg.ssh.defaultKeyCommand` prints (its first line), as git uses it.
fn default_key(cmd: &str) -> Result<String> {
    let out = Command::new("sh")
        .args(["-c", cmd])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            Error::program(format!("cannot run gpg.ssh.defaultKeyCommand {cmd:?}: {e}"))
        })?;
    let first = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    if !out.status.success() || first.is_empty() {
        return Err(no_key(&format!(
            "gpg.ssh.defaultKeyCommand {cmd:?} gave no key ({})",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(first)
}

fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}

fn failed(program: &str, why: impl std::fmt::Display) -> Error {
    Error::program(format!("signing the commit failed: {program}: {why}")).with_hint(
        "check the signing setup with `git commit --allow-empty -S -m test` in this repository; nothing of this step was written",
    )
}

impl Signer {
    /// The signature of `payload` (a commit's bytes), as git would put it in
    /// the commit's `gpgsig` header.
    pub fn sign(&self, payload: &[u8]) -> Result<String> {
        match self {
            Signer::Gpg { program, key } => {
                let mut child = Command::new(program)
                    .args(["--status-fd=2", "-bsau", key])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| failed(program, e))?;
                // A signer that exits without reading its input is a
                // failure reported by its status below.
                let _ = child.stdin.take().expect("piped stdin").write_all(payload);
                let out = child.wait_with_output().map_err(|e| failed(program, e))?;
                let status = String::from_utf8_lossy(&out.stderr);
                // As git: only a SIG_CREATED status line counts.
                if !out.status.success()
                    || !format!("\n{status}").contains("\n[GNUPG:] SIG_CREATED ")
                {
                    return Err(failed(program, status.trim()));
                }
                String::from_utf8(out.stdout)
                    .map_err(|_| failed(program, "the signature is not text"))
            }
            Signer::Ssh { program, key } => {
                let dir = tempfile::Builder::new()
                    .prefix("git-steps-sign-")
                    .tempdir()
                    .map_err(|e| failed(program, e))?;
                let buffer = dir.path().join("commit");
                std::fs::write(&buffer, payload).map_err(|e| failed(program, e))?;
                let mut cmd = Command::new(program);
                cmd.args(["-Y", "sign", "-n", "git", "-f"]);
                match key {
                    SshKey::File(p) => {
                        cmd.arg(p);
                    }
                    SshKey::Literal(k) => {
                        let pubkey = dir.path().join("key.pub");
                        std::fs::write(&pubkey, format!("{k}\n"))
                            .map_err(|e| failed(program, e))?;
                        cmd.arg(pubkey).arg("-U");
                    }
                }
                let out = cmd
                    .arg(&buffer)
                    .stdin(Stdio::null())
                    .output()
                    .map_err(|e| failed(program, e))?;
                if !out.status.success() {
                    return Err(failed(program, String::from_utf8_lossy(&out.stderr).trim()));
                }
                std::fs::read_to_string(dir.path().join("commit.sig"))
                    .map_err(|e| failed(program, format!("no signature written: {e}")))
            }
        }
    }
}

/// The commit header that keeps a step's decision (its canonical JSON, one
/// line), beside the commit's own headers as `gpgsig` is: `git cat-file -p`
/// shows it, `git log` does not, and it travels with the commit.
pub const DECISION_HEADER: &str = "steps-decision";

/// `buf` (a commit object as libgit2 builds it) with the decision header
/// added after its own headers.
fn with_decision(buf: &[u8], decision: &str) -> Option<Vec<u8>> {
    // A header value is one line; the canonical form escapes every newline.
    if decision.contains('\n') {
        return None;
    }
    let end = buf.windows(2).position(|w| w == b"\n\n")? + 1;
    let mut out = Vec::with_capacity(buf.len() + decision.len() + 20);
    out.extend_from_slice(&buf[..end]);
    out.extend_from_slice(DECISION_HEADER.as_bytes());
    out.push(b' ');
    out.extend_from_slice(decision.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(&buf[end..]);
    Some(out)
}

/// Make a commit object as `repo.commit(None, …)` does, signed when
/// `signer` says so, keeping `decision` (a step's canonical JSON) in its
/// own header (covered by the signature).
#[allow(clippy::too_many_arguments)]
pub fn commit(
    repo: &Repository,
    signer: Option<&Signer>,
    author: &Signature<'_>,
    committer: &Signature<'_>,
    message: &str,
    tree: &git2::Tree<'_>,
    parents: &[&git2::Commit<'_>],
    decision: Option<&str>,
) -> Result<Oid> {
    let built = repo.commit_create_buffer(author, committer, message, tree, parents)?;
    let buf = match decision {
        Some(d) => with_decision(&built, d)
            .ok_or_else(|| Error::internal("a decision is one line of canonical JSON"))?,
        None => built.to_vec(),
    };
    let Some(signer) = signer else {
        return crate::git::loose::write(repo, git2::ObjectType::Commit, &buf);
    };
    let content =
        std::str::from_utf8(&buf).map_err(|_| Error::corrupt("the commit to sign is not UTF-8"))?;
    let signature = signer.sign(content.as_bytes())?;
    Ok(repo.commit_signed(content, &signature, None)?)
}
