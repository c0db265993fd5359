//! One ssh connection per remote for the git CLI transport: OpenSSH's
//! connection sharing (ControlMaster), so that a run's pushes are sessions
//! on one connection instead of a TCP connection, a key exchange and an
//! authentication each.
//!
//! Owns the ssh command git runs (`GIT_SSH_COMMAND`) when it is OpenSSH's
//! `ssh`: the user's own command (`GIT_SSH_COMMAND`, `core.sshCommand`) with
//! three options after it. Invariant: a command that is not `ssh`, or
//! that already shares connections, or a socket directory that is not this
//! user's alone, is left exactly as it was; nothing else about ssh changes
//! (keys, config, known_hosts stay the user's). A shared connection is this
//! process's alone (its socket's name holds a token of the process): a
//! later git-steps makes its own, so it checks the host key afresh, and
//! [`close`] ends this process's connections when it exits (a killed one's
//! end by themselves, `ControlPersist`).

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::PathBuf;

/// The ssh command for git, sharing connections; None to leave git's as it
/// is.
pub(super) fn command(config: &git2::Config, remote: &str) -> Option<String> {
    if std::env::var(crate::keys::SSH_SHARE.name).as_deref() == Ok("0") {
        return None;
    }
    // An ssh command or variant given on git's command line (`git -c`,
    // which libgit2 does not read) is the user's: left alone.
    let given = |key: &str| {
        std::env::var("GIT_CONFIG_PARAMETERS").is_ok_and(|p| p.to_ascii_lowercase().contains(key))
            || std::env::vars()
                .any(|(k, v)| k.starts_with("GIT_CONFIG_KEY_") && v.to_ascii_lowercase() == key)
    };
    if given("core.sshcommand") || given("ssh.variant") {
        return None;
    }
    let variant = std::env::var("GIT_SSH_VARIANT")
        .ok()
        .or_else(|| config.get_string("ssh.variant").ok());
    if variant.is_some_and(|v| v != "ssh" && v != "auto") {
        return None;
    }
    let base = match std::env::var("GIT_SSH_COMMAND")
        .ok()
        .filter(|c| !c.trim().is_empty())
    {
        Some(c) => c,
        None => match config.get_string("core.sshCommand") {
            Ok(c) if !c.trim().is_empty() => c,
            // GIT_SSH names a program run without a shell: not extended.
            _ if std::env::var_os("GIT_SSH").is_some_and(|v| !v.is_empty()) => return None,
            _ => "ssh".to_string(),
        },
    };
    let program = base.split_whitespace().next()?.trim_matches(['\'', '"']);
    if std::path::Path::new(program).file_name()? != "ssh" {
        return None;
    }
    let lower = base.to_ascii_lowercase();
    if lower.contains("controlmaster") || lower.contains("controlpath") || base.contains(" -S") {
        return None;
    }
    let dir = socket_dir()?;
    let dir = dir.to_str()?;
    // A unix socket's path is at most 107 bytes; `%C` is 40, the token 13,
    // the remote's mark 6.
    if dir.len() + 62 > 104 || dir.contains(['\'', '%', ' ']) {
        return None;
    }
    let _ = TOKEN_USED.set(token().to_string());
    // The remote in the socket's name too: two host aliases that reach
    // one server with different keys must not share a connection (`%C`
    // hashes the host name, not the alias).
    let which = {
        use sha2::Digest;
        crate::git::hex(&sha2::Sha256::digest(remote.as_bytes())[..3])
    };
    Some(format!(
        "{base} -o ControlMaster=auto -o 'ControlPath={dir}/{}-{which}-%C' -o ControlPersist=120",
        token()
    ))
}

/// This process's token in its sockets' names.
fn token() -> &'static str {
    static TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TOKEN.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        format!("{:x}{:05x}", std::process::id(), nanos & 0xfffff)
    })
}

/// End the ssh connections this process shared (`ssh -O exit` on each of
/// its sockets); nothing when it shared none.
pub fn close() {
    let Some(t) = TOKEN_USED.get() else { return };
    let Some(dir) = socket_dir() else { return };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name()
            .to_string_lossy()
            .starts_with(&format!("{t}-"))
        {
            let _ = std::process::Command::new("ssh")
                .arg("-o")
                .arg(format!("ControlPath={}", e.path().display()))
                .args(["-O", "exit", "git-steps-shared"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// Set once a command that shares connections was handed to git.
static TOKEN_USED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// `<tmp>/git-steps-ssh-<uid>`, made if missing; None unless it is a
/// directory this user owns that no one else may enter.
fn socket_dir() -> Option<PathBuf> {
    let uid = rustix::process::getuid().as_raw();
    let dir = std::env::temp_dir().join(format!("git-steps-ssh-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(_) => return None,
    }
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    (meta.is_dir() && meta.uid() == uid && meta.mode() & 0o077 == 0).then_some(dir)
}
