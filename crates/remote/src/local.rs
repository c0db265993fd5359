//! The local push: a bare repository on this machine, written directly.
//!
//! Owns copying objects into the remote (hard links of loose objects,
//! children after their parents and entries) and moving its ref with git's
//! lock-file protocol. Invariant: the remote never holds a ref to an object
//! it lacks, a ref is moved only by compare-and-swap under `<ref>.lock`, and
//! a lock that anyone but a killed git-steps pusher holds is never removed
//! (one written before this machine booted is held by no one).

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use git2::{Oid, Repository};
use sha2::Digest;

use super::{PushError, RefUpdate, Remote};
use crate::error::{Error, Result};

impl Remote {
    /// A path or file:// URL this remote resolves to, if it is local.
    pub(super) fn local_path(&self, repo: &Repository) -> Option<PathBuf> {
        let key = (repo.path().to_path_buf(), self.spec.clone());
        if let Some(hit) = LOCAL_PATHS.with(|c| {
            c.borrow()
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.clone())
        }) {
            return hit;
        }
        let found = self.resolve_local_path(repo);
        LOCAL_PATHS.with(|c| c.borrow_mut().push((key, found.clone())));
        found
    }

    fn resolve_local_path(&self, repo: &Repository) -> Option<PathBuf> {
        let url = match repo.find_remote(&self.spec) {
            Ok(r) => String::from_utf8_lossy(r.url_bytes()).into_owned(),
            Err(_) => self.spec.clone(),
        };
        let path = match url.strip_prefix("file://") {
            Some(p) => p.to_string(),
            None if url.contains("://") => return None,
            // scp-like `host:path`
            None if url
                .split('/')
                .next()
                .is_some_and(|first| first.contains(':')) =>
            {
                return None
            }
            None => url,
        };
        let p = Path::new(&path);
        let p = if p.is_relative() {
            repo.workdir().unwrap_or_else(|| repo.path()).join(p)
        } else {
            p.to_path_buf()
        };
        p.exists().then_some(p)
    }

    /// Push into a bare repository on this machine. libgit2's local
    /// transport forces the ref without checking its current value, so two
    /// writers could both pass negotiation and one overwrite the other; here
    /// the new objects are copied as loose objects (children before parents,
    /// so the remote never holds a tree whose entries are missing — what
    /// `git receive-pack` does for small pushes) and the ref is moved with a
    /// real compare-and-swap ([`swap_local_ref`]), under a flock that every
    /// git-steps pusher takes; a ref lock held by anyone else is waited for,
    /// never removed. The remote repository stays open for the next
    /// step of the same process, so a push costs O(new objects), not
    /// O(objects the remote holds).
    pub(super) fn push_local(
        &self,
        repo: &Repository,
        path: &Path,
        update: &RefUpdate<'_>,
    ) -> Result<(), PushError> {
        let RefUpdate {
            refname,
            expected,
            new,
            ..
        } = *update;
        // A branch taken as absent is created over whatever file is there:
        // a torn one is named instead. (One expected at a value and found
        // torn fails the compare-and-swap.)
        if expected.is_none() {
            self.refuse_torn(repo, refname).map_err(PushError::Failed)?;
        }
        let fail = |what: &str, e: git2::Error| {
            let err = Error::local(format!(
                "cannot push to {}: {what}: {}",
                path.display(),
                e.message()
            ));
            PushError::Failed(
                if crate::error::is_damaged_object(&e) || e.message().contains("is damaged") {
                    err.with_hint(crate::error::hints::damaged_object())
                } else if crate::error::is_local_failure(&e) {
                    err.with_hint(
                        crate::error::hints::local_failure_of(crate::error::os_error_kind(&e))
                            .because(NOT_DURABLE),
                    )
                } else {
                    err
                },
            )
        };
        OPEN_REMOTE.with(|cell| {
            let mut cached = cell.borrow_mut();
            if cached.as_ref().is_none_or(|(p, _)| p != path) {
                // Judged before libgit2 opens it (its ref fsync is decided then).
                crate::git::fsync::note_file_system(path);
                let remote = Repository::open(path).map_err(|e| fail("open", e))?;
                *cached = Some((path.to_path_buf(), remote));
            }
            let remote = &cached.as_ref().expect("opened above").1;
            let _guard =
                crate::lock::wait(remote.path(), "steps-push.lock").map_err(PushError::Failed)?;
            let lock = local_ref_lock(remote, refname, expected)?;
            let mut copier = Copier::new(repo, remote).map_err(|e| fail("odb", e))?;
            // The commits the remote lacks: everything it has is complete
            // (objects are copied parents and entries first), so the search
            // stops at the first commit it holds. (A revwalk hiding the
            // remote head would read the whole history to mark it.)
            let mut missing = std::collections::HashSet::new();
            let mut present = std::collections::HashSet::new();
            let mut todo = vec![new];
            while let Some(id) = todo.pop() {
                if missing.contains(&id) || present.contains(&id) {
                    continue;
                }
                if crate::git::has_object_known(&copier.dst, id) {
                    present.insert(id);
                    continue;
                }
                missing.insert(id);
                todo.extend(commit_links(repo, id).map_err(|e| fail("read", e))?.1);
            }
            for commit in parents_first(repo, new, &missing).map_err(|e| fail("walk", e))? {
                let (tree, parents) = commit_links(repo, commit).map_err(|e| fail("read", e))?;
                // The first parent's tree is complete in the remote if the
                // parent is there.
                let known = parents
                    .first()
                    .filter(|p| {
                        present.contains(p) || crate::git::has_object_known(&copier.dst, **p)
                    })
                    .and_then(|p| commit_links(repo, *p).ok())
                    .and_then(|(t, _)| repo.find_tree(t).ok());
                copier
                    .tree(tree, known.as_ref())
                    .map_err(|e| fail("copy objects", e))?;
                copier.object(commit).map_err(|e| fail("copy objects", e))?;
            }
            // One flush for everything this step wrote before its commit
            // point: its objects in the box and here, the ref's new value
            // (each objects/ too, where it is another file system).
            let box_dir = repo.commondir().to_path_buf();
            let (box_objects, objects) = (box_dir.join("objects"), remote.path().join("objects"));
            let flush =
                || crate::flush::file_systems(&[&box_dir, &box_objects, remote.path(), &objects]);
            if let Some(id) = update.step {
                crate::crash::point("push-sent", id);
            }
            swap_local_ref(remote, &lock, refname, expected, new, &flush)
        })
    }
}

/// Why a rerun after a failed push to a remote on this disk is safe.
const NOT_DURABLE: &str = "nothing of this step became durable on the remote";

/// `what` failed on the remote's disk: the fix its kind asks for, then
/// the rerun. Only the last, the sync after the ref's rename (the commit
/// point), comes after the remote may hold the step.
fn io_failed(what: &str, path: &Path, e: std::io::Error) -> PushError {
    let kind = e.kind();
    let because = match what {
        crate::lock::SYNC_AFTER_RENAME => "the remote may hold the step already (its branch was moved before the sync failed), and the rerun asks it first, so nothing is applied twice",
        _ => NOT_DURABLE,
    };
    PushError::Failed(
        Error::io(format!("cannot {what} {}", path.display()), e)
            .with_hint(crate::error::hints::local_failure_of(kind).because(because)),
    )
}

fn lock_held(p: &Path) -> PushError {
    PushError::Locked(format!(
        "{} exists (another git process is updating the branch, or one died holding it)",
        p.display()
    ))
}

/// The lock for `refname` in a bare repository on this machine, through
/// which [`swap_local_ref`] moves it with git's own protocol (`<ref>.lock`,
/// checked, renamed): a lock that a killed git-steps pusher left is
/// removed, anyone else's is contention and never touched. Fails early when
/// the lock is held; where the branch is, is read once, under the lock
/// (objects copied for a push that then finds it moved are harmless: they
/// are named by nothing, and `git gc` prunes them).
fn local_ref_lock(
    remote: &Repository,
    refname: &str,
    expected: Option<Oid>,
) -> std::result::Result<crate::lock::OwnLock, PushError> {
    // One pending file per ref: a pusher killed while it held another ref's
    // lock (a journal, the shared hunk cache) leaves a pair that only a
    // push of that ref can recognise and clear.
    let pending = if refname.starts_with("refs/heads/") {
        "steps-push.pending".to_string()
    } else {
        format!(
            "steps-push-{}.pending",
            crate::git::hex(&sha2::Sha256::digest(refname.as_bytes())[..8])
        )
    };
    let lock =
        crate::lock::OwnLock::new(&remote.path().join(refname), &remote.path().join(pending));
    lock.clear_own_leftover();
    scrub_once(remote)?;
    // A lock written before this machine booted is held by nobody: a power
    // cut stopped its writer before the rename (what it guarded did not
    // happen).
    if lock.held()
        && crate::flush::rebooted(remote.path())
        && crate::lock::from_before_boot(lock.lock_path())
    {
        // Kept, out of git's ref namespace (its content is the value the
        // stopped write was setting).
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let aside = remote.path().join(format!("steps-stale-{stamp}.lock"));
        let _ = std::fs::rename(lock.lock_path(), aside);
    }
    if lock.held() {
        return Err(lock_held(lock.lock_path()));
    }
    // What receive-pack refuses by default (receive.denyCurrentBranch): the
    // branch a non-bare remote has checked out, whose worktree would then
    // read as a staged revert of every step.
    if !remote.is_bare()
        && crate::git::head_branch(remote).is_some_and(|b| format!("refs/heads/{b}") == refname)
    {
        return Err(PushError::Rejected(format!(
            "{refname} is checked out in the worktree of {}, which git refuses to update (receive.denyCurrentBranch); push to a bare repository, or to a branch that is not checked out there",
            remote.workdir().unwrap_or(remote.path()).display()
        )));
    }
    // (A ref that exists has no such neighbour: git refused it when it
    // was created.)
    if let Some(other) = expected
        .is_none()
        .then(|| name_conflict(remote, refname))
        .flatten()
    {
        return Err(PushError::Failed(
            Error::remote(format!(
                "{refname} cannot be created on {}: the ref {other} is there, and git refuses a ref whose name is a directory of another (a clone of the remote would fail)",
                remote.path().display()
            ), false)
            .with_hint("give the run another branch: `git steps init --branch <name>`"),
        ));
    }
    // (The ref's value is checked under its lock, `swap_local_ref`.)
    Ok(lock)
}

/// Objects and refs a boot that ended unflushed left torn in the bare
/// repository at `remote` are moved aside before any is taken as present
/// (the next push links them again). Once per remote and process: a
/// boot's epoch, once written, stays.
pub(super) fn scrub_once(remote: &Repository) -> std::result::Result<(), PushError> {
    let first = SCRUBBED.with(|c| {
        let mut c = c.borrow_mut();
        let new = !c.iter().any(|p| p == remote.path());
        if new {
            c.push(remote.path().to_path_buf());
        }
        new
    });
    if first {
        let keep = remote.path().join("steps-torn");
        if let Err(e) = crate::flush::scrub(remote.path(), "steps-epoch", &keep, &[]) {
            SCRUBBED.with(|c| c.borrow_mut().retain(|p| p != remote.path()));
            return Err(io_failed("check the objects of", remote.path(), e));
        }
        // Its 256 fan-out directories made once where it is flushed file by
        // file (as the box's are), not one by one as pushes need them.
        crate::flush::fan_out(remote).map_err(PushError::Failed)?;
    }
    Ok(())
}

/// A ref of `repo` that `refname` cannot live beside: one named like a
/// parent directory of it (`refs/heads/feat` for `refs/heads/feat/run`),
/// or one under it, packed or loose (what receive-pack checks too).
fn name_conflict(repo: &Repository, refname: &str) -> Option<String> {
    let mut prefix = refname;
    while let Some((parent, _)) = prefix.rsplit_once('/') {
        if parent.matches('/').count() < 2 {
            break;
        }
        if repo.find_reference(parent).is_ok() {
            return Some(parent.to_string());
        }
        prefix = parent;
    }
    let mut under = repo.references_glob(&format!("{refname}/*")).ok()?;
    under
        .next()
        .and_then(|r| r.ok())
        .and_then(|r| r.name().ok().map(str::to_string))
}

/// Compare-and-swap `refname` from `expected` to `new` under `lock`.
fn swap_local_ref(
    remote: &Repository,
    lock: &crate::lock::OwnLock,
    refname: &str,
    expected: Option<Oid>,
    new: Oid,
    flush: &dyn Fn() -> std::io::Result<()>,
) -> std::result::Result<(), PushError> {
    use crate::lock::ReplaceError;
    let check = || {
        let current = match crate::lock::refwrite::loose_value(remote.path(), refname) {
            Some(v) => v,
            None => remote.refname_to_id(refname).ok(),
        };
        if current == expected {
            Ok(())
        } else {
            Err(current)
        }
    };
    lock.replace_flushed(format!("{new}\n").as_bytes(), check, flush)
        .map_err(|e| match e {
            ReplaceError::Held(p) => lock_held(&p),
            ReplaceError::Io(what, path, e) => io_failed(&what, &path, e),
            ReplaceError::Check(found) => PushError::Moved { found },
        })
}

/// A repository's git dir and a remote spec.
type LocalPathKey = (PathBuf, String);

thread_local! {
    /// The local bare remote this process pushes to, kept open between steps.
    static OPEN_REMOTE: RefCell<Option<(PathBuf, Repository)>> = const { RefCell::new(None) };
    /// The local remotes whose boot epoch this process checked.
    static SCRUBBED: RefCell<Vec<PathBuf>> = const { RefCell::new(Vec::new()) };
    /// `Remote::local_path` answers, keyed by repository and spec.
    static LOCAL_PATHS: RefCell<Vec<(LocalPathKey, Option<PathBuf>)>> = const { RefCell::new(Vec::new()) };
}

/// The tree and parents of the commit `id`: from the bytes this process
/// wrote, or read.
fn commit_links(repo: &Repository, id: Oid) -> std::result::Result<(Oid, Vec<Oid>), git2::Error> {
    if let Some(links) = crate::git::loose::recent_commit(id) {
        return Ok(links);
    }
    let c = repo.find_commit(id)?;
    Ok((c.tree_id(), c.parent_ids().collect()))
}

/// The commits of `missing` (all reachable from `tip`) in an order where
/// every parent comes before its children.
fn parents_first(
    repo: &Repository,
    tip: Oid,
    missing: &std::collections::HashSet<Oid>,
) -> std::result::Result<Vec<Oid>, git2::Error> {
    let mut order = Vec::with_capacity(missing.len());
    let mut done = std::collections::HashSet::new();
    let mut stack = vec![(tip, false)];
    while let Some((id, expanded)) = stack.pop() {
        if !missing.contains(&id) || done.contains(&id) {
            continue;
        }
        if expanded {
            done.insert(id);
            order.push(id);
            continue;
        }
        stack.push((id, true));
        for p in commit_links(repo, id)?.1 {
            stack.push((p, false));
        }
    }
    Ok(order)
}

/// Copies objects from the local repository into a local bare remote.
///
/// A loose object is hard-linked, as `git clone --local` does (loose
/// objects are immutable). Creating files is what a step spends most on,
/// and this avoids three per step. Anything else (a packed object, another
/// file system) is read and written through libgit2. Nothing is flushed
/// here: the flush before the ref's rename makes every object durable
/// before the ref names it ([`crate::flush`]).
struct Copier<'a> {
    repo: &'a Repository,
    remote: &'a Repository,
    src: git2::Odb<'a>,
    dst: git2::Odb<'a>,
    src_dir: PathBuf,
    dst_dir: PathBuf,
    link: bool,
}

impl<'a> Copier<'a> {
    fn new(repo: &'a Repository, remote: &'a Repository) -> std::result::Result<Self, git2::Error> {
        Ok(Copier {
            repo,
            remote,
            src: repo.odb()?,
            dst: remote.odb()?,
            src_dir: repo.commondir().join("objects"),
            dst_dir: remote.commondir().join("objects"),
            link: true,
        })
    }

    /// The loose file of `id` under `objects`, if it is there and not
    /// whole (libgit2 takes any file at an object's name as the object,
    /// and its inflate of a truncated one never returns).
    fn damaged(objects: &Path, id: Oid) -> Option<PathBuf> {
        let hex = id.to_string();
        let path = objects.join(&hex[..2]).join(&hex[2..]);
        (std::fs::symlink_metadata(&path).is_ok()
            && !crate::git::loose::written_here(objects, id)
            && !crate::git::loose::is_whole(&path, &hex))
        .then_some(path)
    }

    /// Whether the remote holds `id` whole (a damaged loose file there is
    /// written again, never built on).
    fn dst_has(&self, id: Oid) -> bool {
        crate::git::has_object_known(&self.dst, id) && Self::damaged(&self.dst_dir, id).is_none()
    }

    fn object(&mut self, id: Oid) -> std::result::Result<(), git2::Error> {
        if self.link && self.link_loose(id).is_ok() {
            return Ok(());
        }
        if let Some(path) = Self::damaged(&self.src_dir, id) {
            let size = std::fs::metadata(&path).map_or(0, |m| m.len());
            return Err(git2::Error::from_str(&format!(
                "the object file {} ({size} bytes) is damaged: it does not inflate to the object its name says",
                path.display()
            )));
        }
        let obj = self.src.read(id)?;
        // Written as the box writes its own: a file there that is not
        // whole is replaced, the shared mode given, renamed where the
        // file system has no hard links.
        let written = crate::git::loose::write(self.remote, obj.kind(), obj.data())
            .map_err(|e| git2::Error::from_str(&e.to_string()))?;
        debug_assert_eq!(written, id);
        Ok(())
    }

    fn link_loose(&mut self, id: Oid) -> std::io::Result<()> {
        let hex = id.to_string();
        let (fan, rest) = hex.split_at(2);
        let dir = self.dst_dir.join(fan);
        let from = self.src_dir.join(fan).join(rest);
        // Never a torn object into the remote (libgit2 takes one a cut left
        // as present): refused here, it is read through libgit2 below,
        // which fails on it, and the push with it.
        let ours = crate::git::loose::written_here(&self.src_dir, id);
        if !(ours || crate::flush::loose_is_whole(&from, &hex)) {
            return Err(std::io::Error::other(format!("{} is torn", from.display())));
        }
        let to = dir.join(rest);
        // A link shares the box's file and its mode: in a shared remote,
        // one whose mode is not what git gives there is copied instead.
        let shared = crate::git::shared::of(self.remote.path());
        if shared != crate::git::shared::Shared::Umask {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&from)?.permissions().mode() & 0o7777;
            if shared.mode_for(mode, false) != mode {
                return Err(std::io::Error::other("copied for its mode"));
            }
        }
        let linked = match std::fs::hard_link(&from, &to) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !dir.is_dir() => {
                match std::fs::create_dir(&dir) {
                    Ok(()) => crate::git::shared::created(self.remote.path(), &dir)?,
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
                std::fs::hard_link(&from, &to)
            }
            other => other,
        };
        match linked {
            Ok(()) => {
                // Flushed at the commit point where syncfs does not flush
                // (the bytes of one this process wrote were, before it
                // was named in the box).
                if !ours {
                    crate::git::fsync::wrote(&to);
                }
                crate::git::fsync::named(&dir);
            }
            // One there that is not whole is replaced by the write below.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if Self::damaged(&self.dst_dir, id).is_some() {
                    return Err(e);
                }
            }
            Err(e) => {
                // Another file system, or one without hard links (git
                // falls back to a rename there too): copied from now on.
                if e.kind() != std::io::ErrorKind::NotFound {
                    self.link = false;
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Copy a tree and everything under it that the remote lacks, entries
    /// first. The remote is complete for every object it has, so an entry
    /// equal to the one at the same place in `known` (a tree of a commit the
    /// remote already holds) or already there is skipped with its subtree.
    fn tree(
        &mut self,
        id: Oid,
        known: Option<&git2::Tree<'_>>,
    ) -> std::result::Result<(), git2::Error> {
        if self.dst_has(id) {
            return Ok(());
        }
        let tree = self.repo.find_tree(id)?;
        for entry in tree.iter() {
            let before = known.and_then(|k| k.get_name_bytes(entry.name_bytes()));
            if before.as_ref().is_some_and(|b| b.id() == entry.id()) {
                continue;
            }
            match entry.kind() {
                Some(git2::ObjectType::Tree) => {
                    let sub = before
                        .filter(|b| b.kind() == Some(git2::ObjectType::Tree))
                        .and_then(|b| self.repo.find_tree(b.id()).ok());
                    self.tree(entry.id(), sub.as_ref())?
                }
                Some(git2::ObjectType::Blob) if !self.dst_has(entry.id()) => {
                    self.object(entry.id())?
                }
                // Blobs it has; gitlinks name commits of other repositories.
                _ => {}
            }
        }
        self.object(id)
    }
}
