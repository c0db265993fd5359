//! git primitives every layer shares: libgit2 set up once (its TCP stream
//! registered), opening a repository, the deferred CA bundle,
//! the receipt signature, HEAD's branch, short ids, hex, tree entry modes
//! and the net changes between two trees; a step's small objects written
//! without libgit2 ([`loose`]).
//!
//! Owns nothing of git-steps' own meaning: the bottom layer, it imports only
//! [`crate::error`]. Invariant: every repository git-steps opens is opened
//! here, after libgit2 was set up. libgit2 flushes nothing itself: what
//! must survive a power cut is flushed at its commit point ([`crate::flush`]
//! names the order).

pub mod cmdline;
pub mod fsync;
mod open;
mod refs;
pub use open::{follow_git_config_env, open};
pub use refs::loose_ref_parses;
pub mod attributes;
mod changes;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub use changes::tree_changes;
pub mod index_file;
pub mod loose;
pub mod shared;
mod stream;

use std::path::Path;

use git2::{Oid, Repository, Signature};

use crate::error::{Error, Result};

/// libgit2's global options, set once before any repository is opened.
/// Its own fsync of every object and ref (`GIT_OPT_ENABLE_FSYNC_GITDIR`) is
/// left off: two flushes per object, where one flush of the file system at
/// the commit point makes the same writes durable in the same order
/// ([`crate::flush`]).
pub fn setup() -> Result<()> {
    static ONCE: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    let rc = *ONCE.get_or_init(|| {
        init_libgit2();
        // libgit2 maps packs in windows of 1 GiB and keeps up to 8 GiB
        // mapped; every page a long scan touches stays in the process's
        // memory. Smaller windows, fewer kept: a scan of 100,000 commits
        // holds what it is reading, not the whole pack.
        let mut nodelay = stream::registration();
        let ms =
            i32::try_from(crate::keys::environment().net_timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: libgit2's global options, set once before any repository
        // is opened, from one thread; libgit2 copies the stream
        // registration, whose callbacks live as long as the process.
        unsafe {
            // Our TCP stream (TCP_NODELAY) under every http:// and git://
            // connection, and under TLS for https://.
            stream::git_stream_register(stream::GIT_STREAM_STANDARD, &mut nodelay);
            let _ = git2::opts::set_mwindow_size(16 << 20);
            let _ = git2::opts::set_mwindow_mapped_limit(48 << 20);
            // Blobs are read several times a step (the build, the checks,
            // the worktree update); libgit2 caches none by default.
            let _ = git2::opts::set_cache_object_limit(git2::ObjectType::Blob, 256 << 10);
            // A server that accepts and never answers must not hold a run
            // (libgit2's default is to wait forever): a read or connect that
            // waits this long is a timeout, which the remote's retries
            // treat as transient. `GIT_STEPS_NET_TIMEOUT_SECS` overrides.
            let _ = git2::opts::set_server_connect_timeout_in_milliseconds(ms);
            let _ = git2::opts::set_server_timeout_in_milliseconds(ms);
        }
        0
    });
    if rc < 0 {
        return Err(Error::other("cannot set up libgit2"));
    }
    Ok(())
}

/// Whether `odb` has `id`, looked up in the loose objects and the packs it
/// knows, without rescanning the pack directory on a miss (libgit2 does on
/// every miss). For a push's "does the remote have it": a pack that
/// appeared since is missed, and the object is copied once more, harmless.
pub fn has_object_known(odb: &git2::Odb<'_>, id: Oid) -> bool {
    use git2::Binding;
    // SAFETY: both pointers come from live git2 objects borrowed for the
    // call; git_odb_exists_ext only reads them.
    unsafe {
        libgit2_sys::git_odb_exists_ext(
            odb.raw(),
            id.raw(),
            libgit2_sys::GIT_ODB_LOOKUP_NO_REFRESH as libc::c_uint,
        ) == 1
    }
}

/// The CA locations to hand libgit2 when an https remote is first used:
/// the user's `SSL_CERT_FILE`/`SSL_CERT_DIR` if set, else what
/// openssl-probe finds. None once loaded (or if libgit2 was initialised
/// before we could defer).
static DEFERRED_CERTS: std::sync::Mutex<
    Option<(Option<std::ffi::OsString>, Option<std::ffi::OsString>)>,
> = std::sync::Mutex::new(None);

/// Initialise libgit2 without loading a CA bundle: libgit2 (built against
/// OpenSSL) parses every certificate at start-up — about 30 ms per process,
/// more than a whole local step — which most commands never need. The
/// bundle is loaded by [`load_system_certs`] when an http(s) remote is first
/// used, from the same places OpenSSL would have used.
fn init_libgit2() {
    let file = std::env::var_os("SSL_CERT_FILE");
    let dir = std::env::var_os("SSL_CERT_DIR");
    // Called once, before any thread of ours exists.
    std::env::set_var("SSL_CERT_FILE", "/dev/null");
    std::env::set_var("SSL_CERT_DIR", "/dev/null");
    // (The first call into git2 initialises libgit2, under the values above.)
    // Strict object creation off: libgit2 would read back every object a
    // new commit, tree entry or index entry names (ten system calls a
    // step). What git-steps writes names objects it just wrote or read, and
    // a step checks that its commit and tree exist before it is pushed
    // (`run::commit`).
    git2::opts::strict_object_creation(false);
    for (k, v) in [("SSL_CERT_FILE", &file), ("SSL_CERT_DIR", &dir)] {
        match v {
            Some(v) => std::env::set_var(k, v),
            None => std::env::remove_var(k),
        }
    }
    *DEFERRED_CERTS.lock().expect("cert lock") = Some((file, dir));
}

/// Load the CA bundle into libgit2 (once), before an https connection: as
/// git chooses it — `GIT_SSL_CAINFO`/`GIT_SSL_CAPATH`, else `repo`'s
/// `http.sslCAInfo`/`http.sslCAPath`, else OpenSSL's (`SSL_CERT_FILE`,
/// `SSL_CERT_DIR`, the system's).
pub fn load_system_certs(repo: &Repository) {
    let Some((file, dir)) = DEFERRED_CERTS.lock().expect("cert lock").take() else {
        return;
    };
    let (file, dir) = ca_locations_from(repo, file, dir);
    // SAFETY: libgit2 is initialised; these only hand paths to OpenSSL.
    unsafe {
        if let Some(f) = file {
            let _ = git2::opts::set_ssl_cert_file(f);
        }
        if let Some(d) = dir {
            let _ = git2::opts::set_ssl_cert_dir(d);
        }
    }
}

/// Where the CA certificates are, as git chooses them (see
/// [`load_system_certs`]): a file and a directory.
pub fn ca_locations(repo: &Repository) -> (Option<std::path::PathBuf>, Option<std::path::PathBuf>) {
    ca_locations_from(
        repo,
        std::env::var_os("SSL_CERT_FILE"),
        std::env::var_os("SSL_CERT_DIR"),
    )
}

fn ca_locations_from(
    repo: &Repository,
    file: Option<std::ffi::OsString>,
    dir: Option<std::ffi::OsString>,
) -> (Option<std::path::PathBuf>, Option<std::path::PathBuf>) {
    let git_says = |env: &str, key: &str| -> Option<std::path::PathBuf> {
        std::env::var_os(env)
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
            .or_else(|| {
                repo.config()
                    .ok()?
                    .get_path(key)
                    .ok()
                    .filter(|p| !p.as_os_str().is_empty())
            })
    };
    let (git_file, git_dir) = (
        git_says("GIT_SSL_CAINFO", "http.sslCAInfo"),
        git_says("GIT_SSL_CAPATH", "http.sslCAPath"),
    );
    if git_file.is_some() || git_dir.is_some() {
        return (git_file, git_dir);
    }
    let probe = openssl_probe::probe();
    (
        file.map(std::path::PathBuf::from).or(probe.cert_file),
        dir.map(std::path::PathBuf::from).or(probe.cert_dir),
    )
}

/// `w` as one word a shell reads back as itself (for commands in hints
/// and for `sh -c`): as it is when plain, else single-quoted.
pub fn shell_word(w: &str) -> String {
    if !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+@%:,=".contains(c))
    {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

/// The remotes this repository configures (`git remote`), in git's order.
pub fn remote_names(repo: &Repository) -> Vec<String> {
    repo.remotes()
        .map(|r| {
            r.iter()
                .filter_map(|n| n.ok().flatten().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The branch HEAD names (even if unborn), if HEAD is symbolic.
pub fn head_branch(repo: &Repository) -> Option<String> {
    let head = repo.find_reference("HEAD").ok()?;
    let target = head.symbolic_target().ok()??;
    target.strip_prefix("refs/heads/").map(str::to_string)
}

/// Where git looks for hooks: `core.hooksPath` (relative to the worktree),
/// else `hooks` in the common git directory.
pub fn hooks_dir(repo: &Repository) -> std::path::PathBuf {
    match repo
        .config()
        .ok()
        .and_then(|c| c.get_path("core.hooksPath").ok())
    {
        Some(p) if p.is_relative() => repo.workdir().unwrap_or_else(|| repo.path()).join(p),
        Some(p) => p,
        None => repo.commondir().join("hooks"),
    }
}

/// The worktree other than this one whose HEAD is on `branch`, if any (as
/// `git switch` refuses: two checkouts of one branch would each move it
/// under the other). Reads each worktree's HEAD file: the main worktree's
/// in the common git directory (unless it is bare), a linked one's under
/// `worktrees/<name>/`.
pub fn checked_out_elsewhere(repo: &Repository, branch: &str) -> Option<std::path::PathBuf> {
    let want = format!("ref: refs/heads/{branch}");
    let common = repo.commondir().to_path_buf();
    let here = std::fs::canonicalize(repo.path()).ok()?;
    let on_branch = |gitdir: &Path| {
        std::fs::read_to_string(gitdir.join("HEAD"))
            .map(|h| h.trim_end() == want)
            .unwrap_or(false)
    };
    let is_here = |gitdir: &Path| std::fs::canonicalize(gitdir).ok().as_ref() == Some(&here);
    let bare = git2::Config::open(&common.join("config"))
        .and_then(|c| c.get_bool("core.bare"))
        .unwrap_or(false);
    if !bare && !is_here(&common) && on_branch(&common) {
        let main = if common.file_name().is_some_and(|n| n == ".git") {
            common
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or(common.clone())
        } else {
            common.clone()
        };
        return Some(main);
    }
    let linked = std::fs::read_dir(common.join("worktrees")).ok()?;
    for entry in linked.flatten() {
        let gitdir = entry.path();
        if is_here(&gitdir) || !on_branch(&gitdir) {
            continue;
        }
        // `gitdir` names the worktree's `.git` file.
        let path = std::fs::read_to_string(gitdir.join("gitdir"))
            .ok()
            .and_then(|p| Path::new(p.trim_end()).parent().map(Path::to_path_buf))
            .unwrap_or(gitdir);
        return Some(path);
    }
    None
}

/// Refuse a run whose branch another worktree has checked out.
pub fn ensure_branch_is_ours(repo: &Repository, branch: &str) -> crate::error::Result<()> {
    match checked_out_elsewhere(repo, branch) {
        None => Ok(()),
        Some(there) => Err(crate::error::Error::other(format!(
            "the run's branch {branch} is checked out in another worktree ({}): two runners on one branch would each move it under the other",
            there.display()
        ))
        .with_hint(format!(
            "run it in {}, or give this worktree a run of its own: `git steps init --branch <name>` (a run's settings belong to its worktree)",
            there.display()
        ))),
    }
}

/// Who a commit is by, as git resolves it.
#[derive(Clone)]
pub struct Identity {
    pub author: Signature<'static>,
    pub committer: Signature<'static>,
    /// git has no identity here: both are git-steps' own.
    pub defaulted: bool,
}

/// git-steps' own identity, for a repository where git has none.
pub const DEFAULT_NAME: &str = "git-steps";
pub const DEFAULT_EMAIL: &str = "git-steps@localhost";

/// The author and committer of a commit made now, as git makes them:
/// `GIT_AUTHOR_NAME`/`_EMAIL`/`_DATE` and `GIT_COMMITTER_*` first, then
/// `user.name`/`user.email` (and `EMAIL`). Where git would have no
/// identity, git-steps' own, with `defaulted` set so the caller can say so.
pub fn identity(repo: &Repository) -> Result<Identity> {
    match (repo.author_from_env(), repo.committer_from_env()) {
        (Ok(author), Ok(committer)) => Ok(Identity {
            author,
            committer,
            defaulted: false,
        }),
        // A bad GIT_AUTHOR_DATE, a name git refuses: git stops there too.
        (Err(e), _) | (_, Err(e)) if e.code() != git2::ErrorCode::NotFound => {
            // libgit2 sets no message of its own for a date it cannot
            // parse (what it shows is left over from an earlier call).
            let dated = ["GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE"]
                .iter()
                .any(|k| std::env::var_os(k).is_some());
            let why = if e.message().contains("signature") || !dated {
                e.message().to_string()
            } else {
                "a GIT_AUTHOR_DATE or GIT_COMMITTER_DATE git cannot read".to_string()
            };
            Err(Error::config(format!("git's identity for a commit here is not usable: {why}"))
                .with_hint("fix GIT_AUTHOR_*/GIT_COMMITTER_* (names, emails, dates) or user.name/user.email, as git commit would ask"))
        }
        _ => {
            let own = Signature::now(DEFAULT_NAME, DEFAULT_EMAIL)?;
            Ok(Identity {
                author: own.clone(),
                committer: own,
                defaulted: true,
            })
        }
    }
}

/// The note a command prints once when [`identity`] fell back.
pub fn default_identity_note() -> String {
    format!(
        "git has no identity here (user.name and user.email, or GIT_AUTHOR_NAME/GIT_COMMITTER_NAME and their _EMAIL): receipts are committed as {DEFAULT_NAME} <{DEFAULT_EMAIL}>; set one with `git config user.name \"Your Name\"` and `git config user.email you@example.com`"
    )
}

/// `text` with the password of every URL in it replaced, as git shows a
/// URL with credentials (`https://alice:<redacted>@host/repo.git`): CI
/// systems write tokens into remote URLs, and what git-steps prints goes
/// into CI logs.
pub fn redact(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("://") {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        // The authority: up to the path, query, fragment, or the end of
        // the URL in the text around it.
        let end = tail
            .find(|c: char| {
                matches!(c, '/' | '?' | '#' | '\'' | '"' | '`' | '<' | '>') || c.is_whitespace()
            })
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) => {
                let userinfo = &authority[..at];
                match userinfo.find(':') {
                    Some(colon) => {
                        out.push_str(&userinfo[..colon]);
                        out.push_str(":<redacted>");
                    }
                    None => out.push_str(userinfo),
                }
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

/// The 12-digit short form of an object id, as messages show it.
pub fn short(oid: Oid) -> String {
    oid.to_string()[..12].to_string()
}

/// The repository's index as the file holds it now: libgit2 keeps the
/// index it read first for the life of the repository object, and
/// git-steps rewrites the file itself ([`index_file`]), so it is read
/// again when the file changed (a stat comparison otherwise).
pub fn index(repo: &Repository) -> Result<git2::Index> {
    let mut index = repo.index()?;
    index.read(false)?;
    Ok(index)
}

/// Tree entry modes, as git writes them, and lower-case hex: the plan
/// crate's, which needs them without libgit2.
pub use git_steps_plan::modes::{
    hex, MODE_EXEC, MODE_FILE, MODE_FILE_GROUP_WRITABLE, MODE_GITLINK, MODE_LINK, MODE_TREE,
};

/// A blob at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobEntry {
    pub oid: Oid,
    pub mode: u32,
}

/// Deeper than any path Linux takes (`PATH_MAX` is 4,096 bytes, two per
/// level at least): a tree nested deeper is refused, never walked.
pub const MAX_TREE_DEPTH: usize = 2048;

/// The net change at one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub path: String,
    pub old: Option<BlobEntry>,
    pub new: Option<BlobEntry>,
}

/// The git2 file mode for a numeric mode.
pub fn filemode(mode: u32) -> git2::FileMode {
    match mode {
        MODE_EXEC => git2::FileMode::BlobExecutable,
        MODE_LINK => git2::FileMode::Link,
        _ => git2::FileMode::Blob,
    }
}

/// The client hooks the repository has installed: executable files in its
/// hooks directory (`core.hooksPath`, else `hooks/` in the common git
/// dir), not the `.sample` files `git init` leaves. git-steps runs none of
/// them (see README, "Using git-steps in your repository"); it says so.
pub fn installed_hooks(repo: &Repository) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let Ok(entries) = std::fs::read_dir(hooks_dir(repo)) else {
        return Vec::new();
    };
    let mut hooks: Vec<String> = entries
        .flatten()
        .filter(|e| {
            e.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| !n.ends_with(".sample") && !n.starts_with('.'))
        .collect();
    hooks.sort();
    hooks
}

/// A loose object file larger than this may hold a blob too large to read
/// whole (zlib compresses at most about 1032:1, so one this small holds
/// under 8 MiB): read as a stream.
const STREAM_LOOSE_BYTES: u64 = 8 << 10;

/// Feed blob `oid`'s content to `f`, a chunk at a time: a loose blob that
/// may be large is inflated as it is read (never held whole); a small or
/// packed one is read in one piece. Every new step's blobs are loose.
pub fn blob_chunks(repo: &Repository, oid: Oid, f: &mut dyn FnMut(&[u8])) -> Result<()> {
    use std::io::Read;
    if let Some(data) = loose::recent(oid) {
        f(&data);
        return Ok(());
    }
    let hex = oid.to_string();
    let loose = repo
        .commondir()
        .join("objects")
        .join(&hex[..2])
        .join(&hex[2..]);
    let large = std::fs::metadata(&loose).is_ok_and(|m| m.len() > STREAM_LOOSE_BYTES);
    if large {
        if let Ok((mut reader, size, git2::ObjectType::Blob)) = repo.odb()?.reader(oid) {
            use sha1::Digest;
            // Checked as git checks an object: its id is the SHA-1 of its
            // header and content (a damaged object fails here, as whole).
            let mut id = sha1::Sha1::new();
            id.update(format!("blob {size}\0").as_bytes());
            let mut buf = vec![0u8; 1 << 16];
            let mut seen = 0usize;
            loop {
                let n = reader.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                seen += n;
                id.update(&buf[..n]);
                f(&buf[..n]);
            }
            if seen != size || id.finalize()[..] != *oid.as_bytes() {
                return Err(Error::corrupt(format!(
                    "the object {oid} is damaged: its content does not hash to its id"
                ))
                .with_hint(
                    "`git fsck` names what is damaged; fetch the run again from its remote",
                ));
            }
            return Ok(());
        }
    }
    f(repo.find_blob(oid)?.content());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_urls_are_redacted_as_git_does() {
        assert_eq!(
            redact("cannot fetch from https://alice:s3cr3t@host/r.git: 401"),
            "cannot fetch from https://alice:<redacted>@host/r.git: 401"
        );
        assert_eq!(redact("https://tok@host/r"), "https://tok@host/r");
        assert_eq!(
            redact("a \"http://u:p@h\" and ssh://g:x@h:22/p"),
            "a \"http://u:<redacted>@h\" and ssh://g:<redacted>@h:22/p"
        );
        assert_eq!(redact("no url: a:b@c"), "no url: a:b@c");
        assert_eq!(redact("https://u:p@h"), "https://u:<redacted>@h");
        assert_eq!(redact("https://h/p?x=a:b@c"), "https://h/p?x=a:b@c");
    }
}
