//! Local state a power cut tore: the index, the run's branch and the lock
//! files of writes the cut stopped, mended before anything reads them; and,
//! where writes are flushed file by file, the object fan-out directories,
//! made durable so that a cut cannot lose an object with its directory.
//!
//! A power cut (unlike SIGKILL) loses what was written and not yet fsynced:
//! git's index, rewritten by a rename whose data may not have reached the
//! disk, can come back empty or cut short, and so can a ref file whose
//! writer did not fsync (git's own, with `core.fsync` unset). libgit2 and
//! git then refuse to read them, and the box could not resume.
//!
//! Owns that check and its mend. Invariant: only what neither libgit2 nor
//! git can read is touched; a copy is kept
//! under `.git/steps/torn/` first, and it is rebuilt from what is durable.
//! The branch is set back to the last value its reflog or HEAD's reflog
//! recorded, else to the remote's durable head — reconcile then brings it
//! up to the durable head — and is refused when none is known. The index
//! is rebuilt from HEAD; the worktree files that differ from it (a cut
//! tears those too, and without an index they can no longer be told from
//! the user's edits) are saved under `refs/steps/rescue/` first, then put
//! back to HEAD's versions — except where the worktree holds the step
//! (`record`): there only the index is rebuilt. A kill before the rebuilt
//! index is in place is mended the same way by the next run; a kill after
//! it and before the files are put back leaves them as edits, already
//! saved in the rescue.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use git2::{Oid, Repository};

use crate::crash;
use crate::error::{Error, Result};
use crate::git::{BlobEntry, Change};
use crate::settings::Settings;
use crate::workdir::worktree;

mod index;
use index::{index_state, IndexState};

/// What a mend did, for the user to be told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mended {
    /// The index could not be read (a copy is kept at `kept`); it is
    /// rebuilt from the head, and the worktree files that differed from the
    /// head are saved under `rescue` and put back.
    Index {
        kept: PathBuf,
        rescue: Option<(String, Vec<String>)>,
    },
    /// A lock file written before this machine booted, which no process
    /// can hold (a cut stopped its writer before the rename): moved to
    /// `kept`, so the write it guarded reads as not done, as it was not.
    Lock { path: PathBuf, kept: PathBuf },
    /// Loose objects or refs a boot that ended unflushed left torn, moved
    /// aside (the sentence says which and where).
    Scrubbed(String),
    /// The run's branch could not be read; it is kept at `kept`, and set
    /// back to `restored`, the last value `from` recorded.
    Branch {
        refname: String,
        kept: PathBuf,
        restored: Oid,
        from: &'static str,
    },
}

impl Mended {
    /// The sentence that says what was done.
    pub fn note(&self) -> String {
        match self {
            Mended::Index { kept, rescue } => format!(
                "the index could not be read (torn by a power cut?): kept as {}, and rebuilt from HEAD{}",
                kept.display(),
                match rescue {
                    None => String::new(),
                    Some((name, paths)) => format!(
                        "; the files that differed from it ({}) are saved as {name} (`git show {name} --stat`) and put back to HEAD's versions",
                        paths.join(", ")
                    ),
                }
            ),
            Mended::Lock { path, kept } => format!(
                "{} was left by a write a power cut or reset stopped (it predates this boot): moved to {}",
                path.display(),
                kept.display()
            ),
            Mended::Scrubbed(note) => note.clone(),
            Mended::Branch {
                refname,
                kept,
                restored,
                from,
            } => format!(
                "{refname} could not be read (torn by a power cut?): kept as {}, and set back to {} from {from}",
                kept.display(),
                crate::git::short(*restored)
            ),
        }
    }
}

/// Check the index and the run's branch; mend what neither libgit2 nor git
/// can read. Takes the run's lock as given (the caller holds it).
/// `durable` fetches the durable head when the box recorded the branch
/// nowhere (None without a remote).
pub fn mend(
    repo: &Repository,
    s: &Settings,
    worktree_holds: bool,
    durable: &dyn Fn() -> Result<Option<Oid>>,
) -> Result<Vec<Mended>> {
    crate::flush::fan_out(repo)?;
    let mut done = mend_locks(repo, s)?;
    // Objects and refs an earlier boot wrote and never flushed.
    let refname = s.refname();
    let scrubbed = crate::flush::scrub(
        repo.commondir(),
        "steps-epoch",
        &repo.commondir().join("steps").join("torn"),
        &[refname.as_str()],
    )
    .map_err(|e| {
        Error::io(
            format!(
                "cannot record this boot in {} (or check what an earlier one left unflushed there)",
                repo.commondir().display()
            ),
            e,
        )
    })?;
    if let Some(note) = scrubbed.note(repo.commondir()) {
        done.push(Mended::Scrubbed(note));
    }
    if let Some(m) = mend_branch(repo, s, durable)? {
        done.push(m);
    }
    if let Some(m) = mend_index(repo, s, worktree_holds)? {
        done.push(m);
    }
    Ok(done)
}

/// Move aside the lock files of what a run writes (its branch, HEAD, the
/// index, packed refs, config, git-steps' own refs) that predate this boot.
fn mend_locks(repo: &Repository, s: &Settings) -> Result<Vec<Mended>> {
    let common = repo.commondir();
    let mut candidates = vec![
        common.join(format!("{}.lock", s.refname())),
        repo.path().join("HEAD.lock"),
        repo.path().join("index.lock"),
        common.join("packed-refs.lock"),
        common.join("config.lock"),
    ];
    let mut dirs = vec![common.join("refs").join("steps")];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "lock") {
                candidates.push(p);
            }
        }
    }
    let mut done = Vec::new();
    for path in candidates {
        if !(crate::flush::rebooted(common) && crate::lock::from_before_boot(&path)) {
            continue;
        }
        let name = path
            .strip_prefix(common)
            .unwrap_or(&path)
            .to_string_lossy()
            .replace('/', "_");
        let dir = repo.path().join("steps").join("torn");
        std::fs::create_dir_all(&dir)
            .and_then(|()| crate::git::shared::created_under(repo.path(), repo.path(), &dir))
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
        let kept = dir.join(format!("{name}.{}", stamp()));
        match std::fs::rename(&path, &kept) {
            Ok(()) => {}
            // Another run (a linked worktree sharing the common dir) moved
            // it first.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(Error::io(
                    format!("cannot move the stale {} aside", path.display()),
                    e,
                ))
            }
        }
        crash::point("torn-kept", "lock");
        done.push(Mended::Lock { path, kept });
    }
    Ok(done)
}

fn stamp() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn mend_index(repo: &Repository, s: &Settings, worktree_holds: bool) -> Result<Option<Mended>> {
    if repo.workdir().is_none() {
        return Ok(None);
    }
    // A missing index is no tear (a cut cannot undo a rename over an
    // existing file): the repair finishes what a killed first step left.
    let path = repo.path().join("index");
    if !path.exists() {
        return Ok(None);
    }
    // Only a git told to (`index.skipHash`, which `feature.manyFiles`
    // sets) leaves the trailer zero; in any other repository a zero trailer
    // is what a cut left.
    let cfg = |key: &str| repo.config().and_then(|c| c.get_bool(key)).ok();
    let skip_hash = cfg("index.skipHash")
        .or_else(|| cfg("feature.manyFiles"))
        .unwrap_or(false);
    match index_state(&path, repo.workdir().unwrap_or(repo.path()), skip_hash) {
        IndexState::Whole => return Ok(None),
        IndexState::Unreadable => {
            let on = |key: &str| repo.config().and_then(|c| c.get_bool(key)).unwrap_or(false);
            let (what, how) = if on("index.sparse") {
                ("a sparse index (`index.sparse=true`)", "`git sparse-checkout init --no-sparse-index` writes it in full (the sparse checkout itself stays)")
            } else if on("core.splitIndex") {
                ("a split index (`core.splitIndex=true`)", "`git config core.splitIndex false && git update-index --no-split-index` writes it whole")
            } else {
                (
                    "in a format or with an extension libgit2 does not know",
                    "`git update-index --index-version 3` rewrites it in a format both read",
                )
            };
            return Err(Error::config(format!(
                "the index {} is {what}, which git reads and libgit2 (under git-steps) cannot; it is not torn, and nothing was changed",
                path.display()
            ))
            .with_hint(crate::error::Hint::rerun_after(how)));
        }
        IndexState::Torn => {}
    }
    let kept = keep(repo, &path, "index")?;
    crash::point("torn-kept", "index");
    let rescue = rebuild_index(repo, s, &path, worktree_holds)?;
    Ok(Some(Mended::Index { kept, rescue }))
}

/// The index from the head's tree; the files that differ from the head
/// are saved under `refs/steps/rescue/` first, then put back. On an unborn
/// branch (a cut can lose the branch's creation too) the index is empty:
/// the worktree's files are untracked, and reconcile takes each that holds
/// the durable head's version.
fn rebuild_index(
    repo: &Repository,
    s: &Settings,
    path: &Path,
    worktree_holds: bool,
) -> Result<Option<(String, Vec<String>)>> {
    let Ok(head) = repo.head().and_then(|h| h.peel_to_commit()) else {
        let fresh = repo.path().join("steps").join("torn").join("index.rebuilt");
        let _ = std::fs::remove_file(&fresh);
        git2::Index::open(&fresh)?.write()?;
        std::fs::rename(&fresh, path)
            .map_err(|e| Error::io("cannot put the rebuilt index in place", e))?;
        return Ok(None);
    };
    let tree = head.tree()?;
    let workdir = worktree::workdir(repo)?;
    // In a sparse checkout a file outside the cone is absent on purpose:
    // it stays so (skip-worktree), and is no difference.
    let sparse = repo
        .config()?
        .get_bool("core.sparseCheckout")
        .unwrap_or(false);
    let mut files = Vec::new();
    blobs(repo, &tree, "", &mut files)?;
    let mut differ = Vec::new();
    let mut skipped = Vec::new();
    for (path, want) in files {
        if sparse && std::fs::symlink_metadata(workdir.join(&path)).is_err() {
            skipped.push(path);
            continue;
        }
        if worktree_holds {
            // The files are the agent's work: only the index is rebuilt.
            continue;
        }
        let disk = worktree::on_disk(&workdir, &path)?;
        let want = Some(want);
        if worktree::same(repo, &path, &disk, &want)? {
            continue;
        }
        let old = disk.and_then(|(bytes, mode)| {
            git2::Oid::hash_object(git2::ObjectType::Blob, &bytes)
                .ok()
                .map(|oid| BlobEntry { oid, mode })
        });
        differ.push(Change {
            path,
            old,
            new: want,
        });
    }
    if !worktree_holds {
        differ.extend(worktree::left_behind(repo, &head, &workdir)?);
    }
    let paths: Vec<String> = differ.iter().map(|c| c.path.clone()).collect();
    let rescue = if paths.is_empty() {
        None
    } else {
        let found: Vec<&str> = paths.iter().map(String::as_str).collect();
        let msg = format!(
            "git-steps rescue: the worktree of run {} after a torn index\n\nThe index could not be read (a power cut tears what was not fsynced),\nso these files, which differ from the run's head, can no longer be told\napart from your own edits: they are saved here before the worktree is\nput back to the head.\n",
            s.run
        );
        let name = worktree::save_rescue(repo, &s.run, head.id(), &found, &msg)?;
        crash::point("torn-rescued", "index");
        Some((name, paths))
    };
    // Written beside the torn one, then over it in one rename: a kill at
    // any instant leaves the torn index (mended again) or the whole one.
    let fresh = repo.path().join("steps").join("torn").join("index.rebuilt");
    let _ = std::fs::remove_file(&fresh);
    let mut index = git2::Index::open(&fresh)?;
    index.read_tree(&tree)?;
    for path in &skipped {
        if let Some(mut e) = index.get_path(Path::new(path), 0) {
            // GIT_INDEX_ENTRY_EXTENDED, GIT_INDEX_ENTRY_SKIP_WORKTREE.
            e.flags |= 0x4000;
            e.flags_extended |= 0x4000;
            index.add(&e)?;
        }
    }
    index.write()?;
    drop(index);
    std::fs::rename(&fresh, path)
        .and_then(|()| std::fs::File::open(repo.path())?.sync_all())
        .map_err(|e| Error::io("cannot put the rebuilt index in place", e))?;
    crash::point("torn-rebuilt", "index");
    if !differ.is_empty() {
        let dest = worktree::Dest {
            run: &s.run,
            commit: head.id(),
        };
        worktree::update(repo, dest, &differ, "index")?;
    }
    Ok(rescue)
}

/// Every file of `tree` (blobs and links) with its path, walked by bytes:
/// a name that is not UTF-8 is left out (no path of this crate can name it;
/// the update would write another file), and so left as it is on disk.
fn blobs(
    repo: &Repository,
    tree: &git2::Tree<'_>,
    prefix: &str,
    out: &mut Vec<(String, BlobEntry)>,
) -> Result<()> {
    for e in tree.iter() {
        let Ok(name) = std::str::from_utf8(e.name_bytes()) else {
            continue;
        };
        let path = format!("{prefix}{name}");
        match e.kind() {
            Some(git2::ObjectType::Blob) => out.push((
                path,
                BlobEntry {
                    oid: e.id(),
                    mode: e.filemode() as u32,
                },
            )),
            Some(git2::ObjectType::Tree) => {
                blobs(repo, &repo.find_tree(e.id())?, &format!("{path}/"), out)?
            }
            _ => {}
        }
    }
    Ok(())
}

fn mend_branch(
    repo: &Repository,
    s: &Settings,
    durable: &dyn Fn() -> Result<Option<Oid>>,
) -> Result<Option<Mended>> {
    let refname = s.refname();
    let path = repo.commondir().join(&refname);
    if !path.is_file() || repo.find_reference(&refname).is_ok() {
        return Ok(None);
    }
    let dir = repo.workdir().unwrap_or_else(|| repo.path());
    if git_reads(dir, &["rev-parse", "--verify", "-q", &refname]) {
        return Ok(None);
    }
    // The last value recorded: the branch's reflog (the value the torn
    // write was writing, or the one before it: a commit whose objects were
    // fsynced first), HEAD's reflog when HEAD is on it; else the durable
    // head itself, fetched.
    let on_it = repo
        .find_reference("HEAD")
        .ok()
        .and_then(|h| h.symbolic_target().ok().flatten().map(str::to_string))
        .is_some_and(|t| t == refname);
    let mut restored = last_logged(repo, &refname)
        .map(|o| (o, "its reflog"))
        .or_else(|| {
            on_it
                .then(|| last_logged(repo, "HEAD"))
                .flatten()
                .map(|o| (o, "HEAD's reflog"))
        });
    if restored.is_none() {
        restored = durable()?.map(|o| (o, "the remote's durable head"));
    }
    let Some((restored, from)) = restored else {
        return Err(Error::corrupt(format!(
            "{refname} cannot be read ({} is torn), and neither its reflog, HEAD's nor the remote records where it was",
            path.display()
        ))
        .with_hint(match &s.remote {
            None => format!(
                "this repository is the run's durable domain: restore {} from a backup, or point it at the run's last step (`git update-ref {refname} <commit>`, found with `git fsck --lost-found`); nothing was changed",
                path.display()
            ),
            Some(r) => format!(
                "take it from the remote: `git fetch {} {}` then `git update-ref {refname} FETCH_HEAD`, and rerun; nothing was changed",
                r.spec, s.branch
            ),
        }));
    };
    let kept = keep(repo, &path, &refname.replace('/', "_"))?;
    crash::point("torn-kept", "branch");
    // Over the torn file in one rename, as git writes a ref (libgit2
    // will not update a ref whose old value it cannot read).
    let lock = path.with_file_name(format!(
        "{}.lock",
        path.file_name().unwrap_or_default().to_string_lossy()
    ));
    let written = crate::lock::intending(repo, vec![lock.clone()], || {
        let mut f = match std::fs::File::create_new(&lock) {
            Ok(f) => f,
            // Another writer's (git in another worktree): theirs to finish.
            Err(e) => return Err((e, false)),
        };
        let mut ours = || -> std::io::Result<()> {
            std::io::Write::write_all(&mut f, format!("{restored}\n").as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&lock, &path)?;
            std::fs::File::open(path.parent().unwrap_or(Path::new(".")))?.sync_all()
        };
        ours().map_err(|e| (e, true))
    });
    written.map_err(|(e, ours)| {
        if ours {
            let _ = std::fs::remove_file(&lock);
            Error::io(format!("cannot set {refname} back"), e)
        } else {
            Error::local(format!(
                "cannot set {refname} back: {} is held by another writer ({e})",
                lock.display()
            ))
            .with_hint(crate::error::Hint::rerun_after(
                "let the other git finish (or remove its lock if it died)",
            ))
        }
    })?;
    crash::point("torn-restored", "branch");
    Ok(Some(Mended::Branch {
        refname,
        kept,
        restored,
        from,
    }))
}

/// The last value the reflog of `refname` records whose commit is here.
/// Read line by line, not through libgit2 (which refuses the whole log):
/// a cut can leave the last line cut short or zeroed, and the line before
/// it is then the last value that reached the disk.
fn last_logged(repo: &Repository, refname: &str) -> Option<Oid> {
    // HEAD's log is the worktree's own (a linked worktree has one each).
    let dir = if refname == "HEAD" {
        repo.path()
    } else {
        repo.commondir()
    };
    let text = std::fs::read(dir.join("logs").join(refname)).ok()?;
    let found = crate::flush::reflog_values(&text).find(|id| repo.find_commit(*id).is_ok());
    found
}

/// Whether git itself reads what `args` ask (exit 0).
fn git_reads(dir: &Path, args: &[&str]) -> bool {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .env_remove("GIT_INDEX_FILE")
        .status()
        .is_ok_and(|s| s.success())
}

/// Copy `path` under `.git/steps/torn/`, named `<what>.<nanoseconds>`,
/// durably: the torn file itself is then replaced in one rename by its
/// rebuilt version, so a kill at any instant leaves it torn (mended again)
/// or whole, never missing.
fn keep(repo: &Repository, path: &Path, what: &str) -> Result<PathBuf> {
    let dir = repo.path().join("steps").join("torn");
    std::fs::create_dir_all(&dir)
        .and_then(|()| crate::git::shared::created_under(repo.path(), repo.path(), &dir))
        .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    let kept = dir.join(format!("{what}.{}", stamp()));
    let copied = std::fs::read(path).and_then(|bytes| {
        let mut f = std::fs::File::create_new(&kept)?;
        std::io::Write::write_all(&mut f, &bytes)?;
        f.sync_all()?;
        std::fs::File::open(&dir)?.sync_all()
    });
    copied.map_err(|e| {
        Error::io(
            format!(
                "cannot keep a copy of the torn {} in {}",
                path.display(),
                dir.display()
            ),
            e,
        )
    })?;
    Ok(kept)
}
