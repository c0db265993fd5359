//! Moving a branch as git does, without libgit2's ref backend: the run
//! branch's update on every step.
//!
//! libgit2's update of one loose ref re-reads HEAD and the branch several
//! times, re-stats its configuration and appends the reflogs: about fifty
//! system calls. This writes the same bytes in about fifteen:
//! `<ref>.lock` created exclusively, the current value (loose, else
//! packed) checked under it, the branch's reflog and HEAD's (when HEAD
//! names the branch) appended with the lines libgit2 writes (and when git
//! appends them: an existing reflog even with `core.logAllRefUpdates`
//! false), the lock renamed
//! over the ref. Invariant: the ref moves only from the value the caller
//! expects; a process killed at any instant leaves the old value or the
//! new one, plus at most the lock, which the intent file names
//! ([`super::note_intent_of`]). Anything unusual — a symbolic ref, a
//! name outside `refs/heads/` — is left to libgit2 ([`Moved::Unsupported`]).
//! Every writer of a local ref (this one, libgit2's for the side refs) says
//! why a ref did not move through [`Moved`]: one mapping to an error.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use git2::{Oid, Repository};

use crate::error::Error;
use crate::git::short;

/// Why the ref did not move.
#[derive(Debug)]
pub enum Moved {
    /// Not a case this writer takes (the caller uses libgit2).
    Unsupported,
    /// `<ref>.lock` exists: another writer holds it.
    Locked(PathBuf),
    /// The ref holds something else than expected.
    Elsewhere(Option<Oid>),
    /// Writing failed (the lock is removed; `left` when that failed too):
    /// what failed, in words, and the kind of the OS's error.
    Io {
        what: String,
        left: bool,
        kind: std::io::ErrorKind,
    },
}

impl Moved {
    /// libgit2's failure `e` to move `refname` of `repo` to `new`, read
    /// as this writer's reasons, so that one mapping says them: its lock
    /// held; the ref found elsewhere than `expected` (when the write
    /// compared it, `compared`), or another writer won libgit2's own
    /// compare; else the write itself failed (a ref that cannot be read
    /// now, or one that holds `new` after all, is this disk's failure,
    /// not another writer's). libgit2's words go into the error
    /// ([`Moved::error`]'s `said`).
    pub fn from_git2(
        repo: &Repository,
        refname: &str,
        expected: Option<Oid>,
        new: Oid,
        compared: bool,
        e: &git2::Error,
    ) -> Moved {
        let io = |what: String| Moved::Io {
            what,
            left: false,
            kind: crate::error::os_error_kind(e),
        };
        if e.code() == git2::ErrorCode::Locked {
            let mut lock = repo.commondir().join(refname).into_os_string();
            lock.push(".lock");
            return Moved::Locked(PathBuf::from(lock));
        }
        let now = match repo.refname_to_id(refname) {
            Ok(id) => Some(id),
            Err(n) if n.code() == git2::ErrorCode::NotFound => None,
            Err(n) => return io(format!("{}; reading it back: {}", e.message(), n.message())),
        };
        if now == Some(new) {
            return io(format!("{} (the ref holds the new value)", e.message()));
        }
        if (compared && now != expected)
            || matches!(
                e.code(),
                git2::ErrorCode::Modified | git2::ErrorCode::Exists
            )
        {
            return Moved::Elsewhere(now);
        }
        io(e.message().to_string())
    }

    /// Why `refname` (the run's branch, a side ref) did not move from
    /// `expected`, as one error for every writer of a local ref: another
    /// writer holds its lock or moved it (exit 4, as when the remote moved:
    /// nothing is lost; a lock no live process holds needs its file
    /// removed first, so its rerun is "after", not "now"), or the write
    /// failed here (exit 1). `during` names the step; `said` is the
    /// writer's own words (libgit2's message), if any.
    pub fn error(
        self,
        during: Option<&str>,
        refname: &str,
        expected: Option<Oid>,
        said: Option<&str>,
    ) -> Error {
        let at = during.map(|s| format!("{s}: ")).unwrap_or_default();
        let said = said.map(|s| format!(" ({s})")).unwrap_or_default();
        let shown = |o: Option<Oid>| o.map(short).unwrap_or_else(|| "no ref".into());
        match self {
            Moved::Locked(lock) => Error::Busy {
                message: format!(
                    "{at}{refname} is locked by another process: {} exists{said}",
                    lock.display()
                ),
                hint: crate::error::hints::locked(),
            },
            Moved::Elsewhere(now) => Error::Busy {
                message: format!(
                    "{at}{refname} moved while git-steps wrote it (expected {}, found {}){said}",
                    shown(expected),
                    shown(now),
                ),
                hint: crate::error::Hint::rerun_when(
                    "another process wrote it (a second git-steps on this run, `git steps effects --abandon` for the effects' outcomes, a `git` command); nothing is lost: let it finish, or stop it",
                ),
            },
            Moved::Io { what, kind, .. } => Error::local(format!(
                "{at}cannot update {refname} from {}: {what}",
                shown(expected),
            ))
            .with_hint(crate::error::hints::local_failure_of(kind)),
            Moved::Unsupported => Error::internal(format!("{refname}: no writer took the update")),
        }
    }
}

/// Who the reflog names, as libgit2 names it (its default signature from
/// the configuration, else "unknown"), found once per repository, as bytes.
fn identity(repo: &Repository) -> (Vec<u8>, Vec<u8>) {
    /// A repository's git dir, and the name and email its reflog uses.
    type Who = Option<(PathBuf, Vec<u8>, Vec<u8>)>;
    thread_local! {
        static WHO: std::cell::RefCell<Who> = const { std::cell::RefCell::new(None) };
    }
    WHO.with(|c| {
        let mut c = c.borrow_mut();
        if let Some((_, n, e)) = c.as_ref().filter(|(p, _, _)| p == repo.path()) {
            return (n.clone(), e.clone());
        }
        let (n, e) = match repo.signature() {
            Ok(s) => (s.name_bytes().to_vec(), s.email_bytes().to_vec()),
            Err(_) => (b"unknown".to_vec(), b"unknown".to_vec()),
        };
        *c = Some((repo.path().to_path_buf(), n.clone(), e.clone()));
        (n, e)
    })
}

/// The local time zone's offset now, in minutes (as libgit2 finds it).
fn offset_now() -> i32 {
    git2::Signature::now("unknown", "unknown").map_or(0, |s| s.when().offset_minutes())
}

/// Whether a missing reflog is created (`core.logAllRefUpdates`: git's
/// default, true outside a bare repository), read once per repository. A
/// reflog that exists is appended to whatever the setting says, as git
/// does (libgit2 writes none when it is false).
fn autocreate(repo: &Repository) -> bool {
    thread_local! {
        static SEEN: std::cell::RefCell<Option<(PathBuf, bool)>> = const { std::cell::RefCell::new(None) };
    }
    SEEN.with(|c| {
        let mut c = c.borrow_mut();
        if let Some((_, v)) = c.as_ref().filter(|(p, _)| p == repo.path()) {
            return *v;
        }
        let v = match repo
            .config()
            .and_then(|c| c.get_string("core.logAllRefUpdates"))
        {
            Ok(s) => {
                let s = s.to_ascii_lowercase();
                s == "always" || git2::Config::parse_bool(s.as_str()).unwrap_or(false)
            }
            Err(_) => !repo.is_bare(),
        };
        *c = Some((repo.path().to_path_buf(), v));
        v
    })
}

/// The value of `refname` in the loose file `path`, else in packed-refs;
/// Err(Unsupported) for a symbolic or unreadable ref.
fn current(common: &Path, path: &Path, refname: &str) -> Result<Option<Oid>, Moved> {
    use std::io::Read;
    match std::fs::File::open(path) {
        Ok(mut f) => {
            let mut buf = [0u8; 64];
            let n = f.read(&mut buf).map_err(|_| Moved::Unsupported)?;
            let text = std::str::from_utf8(&buf[..n]).map_err(|_| Moved::Unsupported)?;
            let hex = text.strip_suffix('\n').ok_or(Moved::Unsupported)?;
            if hex.len() != 40 {
                return Err(Moved::Unsupported);
            }
            Oid::from_str(hex).map(Some).map_err(|_| Moved::Unsupported)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let packed = match std::fs::read(common.join("packed-refs")) {
                Ok(p) => p,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(_) => return Err(Moved::Unsupported),
            };
            for line in packed.split(|b| *b == b'\n') {
                if line.len() > 41 && line[40] == b' ' && &line[41..] == refname.as_bytes() {
                    let hex = std::str::from_utf8(&line[..40]).map_err(|_| Moved::Unsupported)?;
                    return Oid::from_str(hex).map(Some).map_err(|_| Moved::Unsupported);
                }
            }
            Ok(None)
        }
        Err(_) => Err(Moved::Unsupported),
    }
}

/// The value of the loose ref `refname` under `git_dir`, read with one
/// open, read and close: Some(None) when neither it nor packed-refs
/// exists; None when libgit2 must say (a symbolic ref, a ref only in
/// packed-refs, anything unusual).
pub fn loose_value(git_dir: &Path, refname: &str) -> Option<Option<Oid>> {
    use std::io::Read;
    let path = git_dir.join(refname);
    match std::fs::File::open(&path) {
        Ok(mut f) => {
            let mut buf = [0u8; 64];
            let n = f.read(&mut buf).ok()?;
            let text = std::str::from_utf8(&buf[..n]).ok()?;
            let hex = text.strip_suffix('\n')?;
            (hex.len() == 40)
                .then(|| Oid::from_str(hex).ok())
                .flatten()
                .map(Some)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            match std::fs::symlink_metadata(git_dir.join("packed-refs")) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(None),
                _ => None,
            }
        }
        Err(_) => None,
    }
}

/// Append one reflog line to `log` (created with its directories when
/// `create`).
fn append_log(
    log: &Path,
    line: &[u8],
    create: bool,
    git_dir: Option<&Path>,
) -> std::io::Result<()> {
    let open = || {
        OpenOptions::new()
            .append(true)
            .create(create)
            .mode(0o666)
            .open(log)
    };
    let mut f = match open() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !create => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(log.parent().unwrap_or(Path::new(".")))?;
            open()?
        }
        r => r?,
    };
    // In a shared repository, the modes git gives (the file and any
    // directory made for it, from `logs/` down).
    if let Some(git_dir) = create.then_some(git_dir).flatten() {
        crate::git::shared::created_under(git_dir, &git_dir.join("logs"), log)?;
    }
    f.write_all(line)?;
    // The reflog is what a torn branch is set back from: where syncfs does
    // not flush, its line is flushed before the branch's rename.
    crate::git::fsync::before_naming(&f)
}

/// Compare-and-swap the branch `refname` of `repo` from `expected` to
/// `new`, with `message` in its reflog. Flushes nothing (the caller's
/// commit point does).
pub fn move_branch(
    repo: &Repository,
    refname: &str,
    expected: Option<Oid>,
    new: Oid,
    message: &str,
) -> Result<(), Moved> {
    if !refname.starts_with("refs/heads/") || refname.contains("..") {
        return Err(Moved::Unsupported);
    }
    let common = repo.commondir();
    let path = common.join(refname);
    let mut lock = path.clone().into_os_string();
    lock.push(".lock");
    let lock = PathBuf::from(lock);
    super::note_intent_of(repo.path(), std::slice::from_ref(&lock));
    let out = locked(repo, common, &path, &lock, refname, expected, new, message);
    if let Err(Moved::Io { left: true, .. }) = &out {
        super::note_leftover(repo.path(), std::slice::from_ref(&lock));
    }
    super::note_intent_of(repo.path(), &[]);
    out
}

#[allow(clippy::too_many_arguments)]
fn locked(
    repo: &Repository,
    common: &Path,
    path: &Path,
    lock: &Path,
    refname: &str,
    expected: Option<Oid>,
    new: Oid,
    message: &str,
) -> Result<(), Moved> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o666)
        .open(lock);
    let mut file = match file {
        // (Renamed to the branch: the mode git gives a ref it writes.)
        Ok(f) => match crate::git::shared::created(common, lock) {
            Ok(()) => f,
            Err(e) => {
                let _ = std::fs::remove_file(lock);
                return Err(Moved::Io {
                    what: format!("cannot set the mode of {}: {e}", lock.display()),
                    left: false,
                    kind: e.kind(),
                });
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(Moved::Locked(lock.to_path_buf()))
        }
        // A branch in a directory not made yet: libgit2 makes it.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Moved::Unsupported),
        Err(e) => {
            return Err(Moved::Io {
                what: format!("cannot create {}: {e}", lock.display()),
                left: false,
                kind: e.kind(),
            })
        }
    };
    let give_up = |m: Moved| {
        let left = std::fs::remove_file(lock).is_err();
        match m {
            Moved::Io { what, kind, .. } => Moved::Io { what, left, kind },
            _ if left => Moved::Io {
                what: format!("cannot remove {}", lock.display()),
                left,
                kind: std::io::ErrorKind::Other,
            },
            other => other,
        }
    };
    let old = match current(common, path, refname) {
        Ok(v) => v,
        Err(m) => return Err(give_up(m)),
    };
    if old != expected {
        return Err(give_up(Moved::Elsewhere(old)));
    }
    let io = |what: &str, e: std::io::Error| Moved::Io {
        what: format!("{what}: {e}"),
        left: false,
        kind: e.kind(),
    };
    if let Err(e) = file
        .write_all(format!("{new}\n").as_bytes())
        .and_then(|()| crate::git::fsync::before_naming(&file))
    {
        return Err(give_up(io(&format!("cannot write {}", lock.display()), e)));
    }
    drop(file);
    let (name, email) = identity(repo);
    let offset = offset_now();
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let sign = if offset < 0 { '-' } else { '+' };
    let mut line = format!("{} {new} ", old.unwrap_or(Oid::ZERO_SHA1)).into_bytes();
    line.extend_from_slice(&name);
    line.extend_from_slice(b" <");
    line.extend_from_slice(&email);
    line.extend_from_slice(
        format!(
            "> {secs} {sign}{:02}{:02}\t{}\n",
            offset.unsigned_abs() / 60,
            offset.unsigned_abs() % 60,
            message.replace('\n', " ")
        )
        .as_bytes(),
    );
    let create = autocreate(repo);
    let logs = common.join("logs").join(refname);
    if let Err(e) = append_log(&logs, &line, create, Some(common)) {
        return Err(give_up(io(
            &format!("cannot append to {}", logs.display()),
            e,
        )));
    }
    let head = std::fs::read(repo.path().join("HEAD")).unwrap_or_default();
    if head.strip_prefix(b"ref: ").map(|r| r.trim_ascii_end()) == Some(refname.as_bytes()) {
        let hl = repo.path().join("logs/HEAD");
        if let Err(e) = append_log(&hl, &line, create, Some(repo.path())) {
            return Err(give_up(io(
                &format!("cannot append to {}", hl.display()),
                e,
            )));
        }
    }
    if let Err(e) = std::fs::rename(lock, path) {
        return Err(give_up(io(&format!("cannot rename {}", lock.display()), e)));
    }
    if crate::git::fsync::per_file() {
        // Before the intent forgets the lock (see `lock::intending`).
        let _ = super::sync_dir(path.parent().unwrap_or(common));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository with one commit on `main` (HEAD names it), and the
    /// commit, plus a second commit to move to.
    fn repo() -> (tempfile::TempDir, Repository, Oid, Oid) {
        let d = tempfile::tempdir().unwrap();
        let r = Repository::init(d.path()).unwrap();
        r.set_head("refs/heads/main").unwrap();
        let sig = git2::Signature::now("t", "t@example.invalid").unwrap();
        let tree = r
            .find_tree(r.treebuilder(None).unwrap().write().unwrap())
            .unwrap();
        let one = r
            .commit(Some("refs/heads/main"), &sig, &sig, "one", &tree, &[])
            .unwrap();
        let parent = r.find_commit(one).unwrap();
        let two = r
            .commit(None, &sig, &sig, "two", &tree, &[&parent])
            .unwrap();
        drop((tree, parent));
        (d, r, one, two)
    }

    /// libgit2's failures read as this writer's reasons, and the one error
    /// each becomes: a held lock and another writer's move are busy (exit
    /// 4), the lock's rerun "after" and the move's "now"; a ref that
    /// cannot be read back, or that holds the new value after all, is this
    /// disk's failure (exit 1); libgit2's words are kept.
    #[test]
    fn libgit2s_failures_map_to_one_error_each() {
        use crate::error::Rerun;
        let (_d, r, one, two) = repo();
        let main = "refs/heads/main";
        let fail = |code| git2::Error::new(code, git2::ErrorClass::Reference, "libgit2 says");
        let locked = Moved::from_git2(
            &r,
            main,
            Some(one),
            two,
            true,
            &fail(git2::ErrorCode::Locked),
        );
        assert!(matches!(&locked, Moved::Locked(p) if p.ends_with("refs/heads/main.lock")));
        let e = locked.error(Some("s2"), main, Some(one), Some("libgit2 says"));
        assert_eq!((e.exit_code(), e.kind()), (4, "busy"));
        assert_eq!(e.hint().unwrap().next(), Rerun::After);
        assert!(
            e.to_string().starts_with("s2: refs/heads/main is locked"),
            "{e}"
        );
        assert!(e.to_string().contains("(libgit2 says)"), "{e}");

        // The ref holds the value it was to be moved to: the write landed
        // and failed after (its parent's sync, say), not another writer.
        let moved = Moved::from_git2(
            &r,
            main,
            Some(two),
            one,
            true,
            &fail(git2::ErrorCode::Modified),
        );
        assert!(
            matches!(moved, Moved::Io { .. }),
            "holds the new value: {moved:?}"
        );
        // Compared, and found elsewhere than expected.
        let moved = Moved::from_git2(
            &r,
            main,
            None,
            two,
            true,
            &fail(git2::ErrorCode::GenericError),
        );
        assert!(
            matches!(moved, Moved::Elsewhere(Some(o)) if o == one),
            "{moved:?}"
        );
        let e = moved.error(None, main, None, None);
        assert_eq!((e.exit_code(), e.hint().unwrap().next()), (4, Rerun::Now));
        // Not compared (a forced copy): only libgit2's own compare says
        // another writer won.
        let io = Moved::from_git2(
            &r,
            main,
            None,
            two,
            false,
            &fail(git2::ErrorCode::GenericError),
        );
        assert!(matches!(io, Moved::Io { .. }), "{io:?}");
        let e = io.error(Some("s2"), main, None, Some("libgit2 says"));
        assert_eq!((e.exit_code(), e.kind()), (1, "error"));
        assert_eq!(e.hint().unwrap().next(), Rerun::After);

        // A ref git cannot read back: not "moved", whatever was expected.
        std::fs::write(r.path().join(main), "not a ref\n").unwrap();
        let torn = Moved::from_git2(
            &r,
            main,
            Some(one),
            two,
            true,
            &fail(git2::ErrorCode::GenericError),
        );
        assert!(
            matches!(&torn, Moved::Io { what, .. } if what.contains("reading it back")),
            "{torn:?}"
        );
        // Gone: another writer deleted it.
        std::fs::remove_file(r.path().join(main)).unwrap();
        let gone = Moved::from_git2(
            &r,
            main,
            Some(one),
            two,
            true,
            &fail(git2::ErrorCode::GenericError),
        );
        assert!(matches!(gone, Moved::Elsewhere(None)), "{gone:?}");
    }

    /// The reflog lines without their time (the two writers ran apart).
    fn logs(r: &Repository, which: &str) -> Vec<String> {
        std::fs::read_to_string(r.path().join(which))
            .unwrap()
            .lines()
            .map(|l| {
                let (head, msg) = l.split_once('\t').unwrap();
                let mut f: Vec<&str> = head.split(' ').collect();
                let n = f.len();
                f.truncate(n - 2);
                format!("{} {msg}", f.join(" "))
            })
            .collect()
    }

    #[test]
    fn a_move_writes_what_libgit2_writes() {
        let (_a, ours, one, two) = repo();
        let (_b, theirs, one_b, two_b) = repo();
        assert_eq!((one, two), (one_b, two_b), "the same commits in both");
        move_branch(
            &ours,
            "refs/heads/main",
            Some(one),
            two,
            "git-steps: step s1",
        )
        .unwrap();
        theirs
            .reference_matching("refs/heads/main", two, true, one, "git-steps: step s1")
            .unwrap();
        for f in ["refs/heads/main", "logs/refs/heads/main", "logs/HEAD"] {
            match f.starts_with("logs") {
                true => assert_eq!(logs(&ours, f), logs(&theirs, f), "{f}"),
                false => assert_eq!(
                    std::fs::read(ours.path().join(f)).unwrap(),
                    std::fs::read(theirs.path().join(f)).unwrap()
                ),
            }
        }
        assert!(!ours.path().join("refs/heads/main.lock").exists());
    }

    #[test]
    fn a_held_lock_or_a_moved_branch_changes_nothing() {
        let (_d, r, one, two) = repo();
        let lock = r.path().join("refs/heads/main.lock");
        std::fs::write(&lock, "someone else's\n").unwrap();
        assert!(matches!(
            move_branch(&r, "refs/heads/main", Some(one), two, "m"),
            Err(Moved::Locked(p)) if p == lock
        ));
        assert_eq!(std::fs::read_to_string(&lock).unwrap(), "someone else's\n");
        std::fs::remove_file(&lock).unwrap();
        let before = std::fs::read(r.path().join("logs/HEAD")).unwrap();
        assert!(matches!(
            move_branch(&r, "refs/heads/main", Some(two), one, "m"),
            Err(Moved::Elsewhere(Some(o))) if o == one
        ));
        assert!(matches!(
            move_branch(&r, "refs/heads/main", None, two, "m"),
            Err(Moved::Elsewhere(Some(o))) if o == one
        ));
        assert!(!lock.exists(), "its own lock is removed");
        assert_eq!(r.refname_to_id("refs/heads/main").unwrap(), one);
        assert_eq!(std::fs::read(r.path().join("logs/HEAD")).unwrap(), before);
    }

    #[test]
    fn a_packed_branch_moves_and_a_symbolic_one_is_left_to_libgit2() {
        let (_d, r, one, two) = repo();
        std::fs::remove_file(r.path().join("refs/heads/main")).unwrap();
        std::fs::write(
            r.path().join("packed-refs"),
            format!("# pack-refs with: peeled fully-peeled sorted \n{one} refs/heads/main\n"),
        )
        .unwrap();
        move_branch(&r, "refs/heads/main", Some(one), two, "m").unwrap();
        assert_eq!(r.refname_to_id("refs/heads/main").unwrap(), two);
        r.reference_symbolic("refs/heads/alias", "refs/heads/main", true, "s")
            .unwrap();
        assert!(matches!(
            move_branch(&r, "refs/heads/alias", Some(two), one, "m"),
            Err(Moved::Unsupported)
        ));
        assert!(!r.path().join("refs/heads/alias.lock").exists());
        assert_eq!(loose_value(r.path(), "refs/heads/alias"), None);
        assert_eq!(loose_value(r.path(), "refs/heads/main"), Some(Some(two)));
    }
}
