//! What may reach the worktree: the path rules, applied to whole trees.
//!
//! Owns the check that every entry a tree brings into the worktree — from a
//! step, from the remote (a fast-forward, the switch to the run's branch) or
//! from a repair — has a name git itself would check out, and that every
//! symlink it holds resolves inside the repository. A name is refused when it
//! is empty, holds `/` or NUL, is `.` or `..`, or names `.git` in any
//! spelling git rejects; `.gitmodules`, `.gitattributes` and `.gitignore`
//! may not be symlinks (git's fsck rules). A symlink's target is resolved
//! against the tree as the kernel would resolve it on disk: `..` climbs,
//! links the tree itself holds are followed (at most 40 hops), and a target
//! that leaves the repository or enters `.git` is refused. Invariant: the
//! check runs on the tree before the first byte of it is written, so a tree
//! that fails it changes nothing.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fmt;
use std::path::Path;

use git2::{ObjectType, Oid, Repository, Tree};

use crate::error::{Error, Refusal, RefusalKind, Result};
use crate::git::{
    BlobEntry, Change, MODE_EXEC, MODE_FILE, MODE_FILE_GROUP_WRITABLE, MODE_GITLINK, MODE_LINK,
    MODE_TREE,
};
use crate::plan::path::is_dotgit_alias;

/// How many symlinks one resolution may follow (Linux's `MAXSYMLINKS`).
const MAX_HOPS: usize = 40;

/// An entry that must not reach the worktree, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub path: String,
    pub why: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.path, self.why)
    }
}

/// The refusal for a tree from somewhere other than a step (the remote, a
/// switch, a repair): exit 3, naming the commit and the entry.
pub fn refusal(commit: Oid, source: &str, v: &Violation) -> Error {
    Error::from(Refusal {
        kind: RefusalKind::UnsafeTree,
        step: None,
        saw: format!(
            "the tree of commit {commit} ({source}) holds the entry {v}"
        ),
        would: "write that entry into the worktree, where git itself refuses to (it could plant a hook in .git or a file outside the repository)".into(),
        hint: format!(
            "nothing was written; look at it with `git ls-tree -r {commit}` and remove the commit from the branch on the remote (whoever can push there made it)"
        ).into(),
    })
}

/// Check one tree entry name.
pub fn check_name(name: &[u8]) -> std::result::Result<(), String> {
    if name.is_empty() {
        return Err("an empty name".into());
    }
    if name.contains(&b'/') {
        return Err("a name containing `/`".into());
    }
    if name.contains(&0) {
        return Err("a name containing NUL".into());
    }
    let Ok(name) = std::str::from_utf8(name) else {
        return Err("a name that is not UTF-8".into());
    };
    match name {
        "." | ".." => Err(format!("a `{name}` entry")),
        n if is_dotgit_alias(n) => Err(format!("a `.git` entry (as {n:?})")),
        _ => Ok(()),
    }
}

/// Check every component of a repository-relative path.
pub fn check_path(path: &str) -> std::result::Result<(), Violation> {
    for c in path.split('/') {
        check_name(c.as_bytes()).map_err(|why| Violation {
            path: path.to_string(),
            why,
        })?;
    }
    Ok(())
}

/// Names git refuses as symlinks (fsck's gitmodulesSymlink and friends).
fn must_not_be_link(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let lower = lower.trim_end_matches(['.', ' ']);
    matches!(
        lower,
        ".gitmodules" | ".gitattributes" | ".gitignore" | ".mailmap"
    )
}

/// What stops a tree walk: an unsafe entry, or git failing.
enum Stop {
    Unsafe(Violation),
    Git(Error),
}

impl From<git2::Error> for Stop {
    fn from(e: git2::Error) -> Self {
        Stop::Git(e.into())
    }
}

type Walk<T> = std::result::Result<T, Stop>;

/// The entries of a tree by name, checking names and modes on the way.
fn entries(tree: Option<&Tree<'_>>, prefix: &str) -> Walk<BTreeMap<Vec<u8>, (Oid, u32)>> {
    let mut out = BTreeMap::new();
    let Some(tree) = tree else { return Ok(out) };
    for e in tree.iter() {
        let name = e.name_bytes().to_vec();
        let shown = format!("{prefix}{}", String::from_utf8_lossy(&name));
        let bad = |why: String| {
            Stop::Unsafe(Violation {
                path: shown.clone(),
                why,
            })
        };
        check_name(&name).map_err(bad)?;
        let mode = e.filemode() as u32;
        if !matches!(
            mode,
            MODE_FILE | MODE_EXEC | MODE_FILE_GROUP_WRITABLE | MODE_LINK | MODE_TREE | MODE_GITLINK
        ) {
            return Err(bad(format!("an entry of unknown mode {mode:o}")));
        }
        if mode == MODE_LINK && must_not_be_link(std::str::from_utf8(&name).unwrap_or_default()) {
            return Err(bad("a symlink where git allows only a file".into()));
        }
        if out.insert(name, (e.id(), mode)).is_some() {
            return Err(bad("an entry that appears twice in its tree".into()));
        }
    }
    Ok(out)
}

fn sub_tree<'r>(repo: &'r Repository, e: Option<&(Oid, u32)>) -> Walk<Option<Tree<'r>>> {
    match e {
        Some((id, MODE_TREE)) => Ok(Some(repo.find_tree(*id)?)),
        _ => Ok(None),
    }
}

fn blob(e: Option<&(Oid, u32)>) -> Option<BlobEntry> {
    match e {
        Some((oid, mode)) if *mode != MODE_TREE && *mode != MODE_GITLINK => Some(BlobEntry {
            oid: *oid,
            mode: if *mode == MODE_FILE_GROUP_WRITABLE {
                MODE_FILE
            } else {
                *mode
            },
        }),
        _ => None,
    }
}

/// Compare two trees, descending only where they differ; every entry of
/// `new` that is visited has its name and mode checked.
fn walk(
    repo: &Repository,
    prefix: &str,
    old: Option<&Tree<'_>>,
    new: Option<&Tree<'_>>,
    out: &mut Vec<Change>,
) -> Walk<()> {
    // The old tree is what the worktree holds now: it was checked when it
    // got there (or is the user's own), so only `new` is judged.
    let old_entries = match old {
        Some(t) => t
            .iter()
            .map(|e| (e.name_bytes().to_vec(), (e.id(), e.filemode() as u32)))
            .collect(),
        None => BTreeMap::new(),
    };
    let new_entries = entries(new, prefix)?;
    let names: std::collections::BTreeSet<&Vec<u8>> =
        old_entries.keys().chain(new_entries.keys()).collect();
    for name in names {
        let (o, n) = (old_entries.get(name), new_entries.get(name));
        if o == n {
            continue;
        }
        let path = format!("{prefix}{}", String::from_utf8_lossy(name));
        let sub = format!("{path}/");
        let (old_sub, new_sub) = (sub_tree(repo, o)?, sub_tree(repo, n)?);
        if old_sub.is_some() || new_sub.is_some() {
            walk(repo, &sub, old_sub.as_ref(), new_sub.as_ref(), out)?;
        }
        let (old_blob, new_blob) = (blob(o), blob(n));
        if old_blob != new_blob {
            out.push(Change {
                path,
                old: old_blob,
                new: new_blob,
            });
        }
    }
    Ok(())
}

/// The net changes, path by path, from tree `old` (what the worktree holds)
/// to tree `new` (None: the empty tree), sorted by path, after checking that
/// every entry `new` brings may reach the worktree and that its symlinks
/// stay inside. A violation is refused naming `commit` (`source` says where
/// it came from); nothing has been written when it is.
pub fn checked_changes(
    repo: &Repository,
    old: Option<&Tree<'_>>,
    new: Option<&Tree<'_>>,
    commit: Oid,
    source: &str,
) -> Result<Vec<Change>> {
    let mut out = Vec::new();
    match walk(repo, "", old, new, &mut out) {
        Ok(()) => {}
        Err(Stop::Unsafe(v)) => return Err(refusal(commit, source, &v)),
        Err(Stop::Git(e)) => return Err(e),
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    if let Some(new) = new {
        check_links(repo, old, new, &out)?.map_err(|v| refusal(commit, source, &v))?;
    }
    Ok(out)
}

/// Every symlink of `tree` as (path, target).
fn links(repo: &Repository, tree: &Tree<'_>) -> Result<Vec<(String, Vec<u8>)>> {
    let mut found = Vec::new();
    let mut failed = None;
    tree.walk(git2::TreeWalkMode::PreOrder, |root, e| {
        if e.filemode() as u32 == MODE_LINK {
            let path = format!("{root}{}", String::from_utf8_lossy(e.name_bytes()));
            match repo.find_blob(e.id()) {
                Ok(b) => found.push((path, b.content().to_vec())),
                Err(err) => {
                    failed = Some(err);
                    return git2::TreeWalkResult::Abort;
                }
            }
        }
        git2::TreeWalkResult::Ok
    })
    .or_else(|e| if failed.is_some() { Ok(()) } else { Err(e) })?;
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(found),
    }
}

/// What a tree holds at a path, for resolving links against it.
enum At {
    Link(Vec<u8>),
    Other,
}

fn at(repo: &Repository, tree: &Tree<'_>, path: &str) -> Result<At> {
    match tree.get_path(Path::new(path)) {
        Ok(e) if e.filemode() as u32 == MODE_LINK => {
            Ok(At::Link(repo.find_blob(e.id())?.content().to_vec()))
        }
        Ok(e) if e.kind() == Some(ObjectType::Blob) => Ok(At::Other),
        Ok(_) => Ok(At::Other),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(At::Other),
        Err(e) => Err(e.into()),
    }
}

/// Resolve the symlink at `path` (target `target`) against `tree` as the
/// kernel would on disk; Err says how it leaves the repository.
pub fn resolve(
    repo: &Repository,
    tree: &Tree<'_>,
    path: &str,
    target: &[u8],
) -> Result<std::result::Result<(), String>> {
    let outside = |t: &str| Ok(Err(format!("points to {t:?}, outside the repository")));
    let Ok(t) = std::str::from_utf8(target) else {
        return Ok(Err("has a target that is not UTF-8".into()));
    };
    if t.is_empty() || t.contains('\0') {
        return Ok(Err("has an empty or NUL-containing target".into()));
    }
    if t.starts_with('/') {
        return outside(t);
    }
    let mut dir: Vec<String> = path.split('/').map(str::to_string).collect();
    dir.pop();
    let mut pending: VecDeque<String> = t.split('/').map(str::to_string).collect();
    let mut hops = 0;
    let mut via: Vec<String> = Vec::new();
    while let Some(c) = pending.pop_front() {
        match c.as_str() {
            "" | "." => {}
            ".." => {
                if dir.pop().is_none() {
                    return Ok(Err(if via.is_empty() {
                        format!("points to {t:?}, outside the repository")
                    } else {
                        format!(
                            "points to {t:?}, which through the symlink(s) {} leads outside the repository",
                            via.join(", ")
                        )
                    }));
                }
            }
            name if is_dotgit_alias(name) => {
                return Ok(Err(format!("points into .git ({t:?})")));
            }
            name => {
                dir.push(name.to_string());
                let here = dir.join("/");
                if let At::Link(next) = at(repo, tree, &here)? {
                    hops += 1;
                    if hops > MAX_HOPS {
                        return Ok(Err(format!(
                            "points to {t:?}, which goes through more than {MAX_HOPS} symlinks"
                        )));
                    }
                    let Ok(next) = String::from_utf8(next) else {
                        return Ok(Err(format!(
                            "goes through {here}, whose target is not UTF-8"
                        )));
                    };
                    if next.starts_with('/') {
                        return Ok(Err(format!(
                            "points to {t:?}, which through the symlink {here} leads to {next:?}, outside the repository"
                        )));
                    }
                    dir.pop();
                    via.push(here);
                    for part in next.split('/').rev() {
                        pending.push_front(part.to_string());
                    }
                }
            }
        }
    }
    Ok(Ok(()))
}

/// When `changes` (from `old` to `new`) add, change or remove a symlink,
/// check that no symlink of `new` leads outside the repository unless it
/// already did, identically, in `old` (the user's own link, already on
/// disk). Links are resolved through each other, so a new link can make an
/// old one escape, and so can a link replaced by a directory (`l ->
/// x/../..` reads as inside while `x` is a deep link, and leaves once `x`
/// is a directory); all are caught. Only links change how a path resolves
/// (a missing or non-directory component makes it fail, not escape), so
/// steps that touch no link skip the walk.
pub fn check_links(
    repo: &Repository,
    old: Option<&Tree<'_>>,
    new: &Tree<'_>,
    changes: &[Change],
) -> Result<std::result::Result<(), Violation>> {
    let is_link = |e: &Option<BlobEntry>| e.is_some_and(|e| e.mode == MODE_LINK);
    if !changes.iter().any(|c| is_link(&c.old) || is_link(&c.new)) {
        return Ok(Ok(()));
    }
    let before: HashSet<(String, Vec<u8>)> = match old {
        Some(o) => links(repo, o)?.into_iter().collect(),
        None => HashSet::new(),
    };
    for (path, target) in links(repo, new)? {
        if let Err(why) = resolve(repo, new, &path, &target)? {
            let pre_existing = before.contains(&(path.clone(), target.clone()))
                && old
                    .map(|o| resolve(repo, o, &path, &target).map(|r| r.is_err()))
                    .transpose()?
                    .unwrap_or(false);
            if !pre_existing {
                return Ok(Err(Violation {
                    path: path.clone(),
                    why: format!("the symlink {path} {why}"),
                }));
            }
        }
    }
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_git_would_refuse_are_refused() {
        for bad in [
            &b""[..],
            b".",
            b"..",
            b".git",
            b".GIT",
            b".git.",
            b"git~1",
            b"a/b",
            b"a\0b",
            b"\xff",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        for good in [&b"a"[..], b".gitignore", b"x.git", b"...", b"a b"] {
            assert_eq!(check_name(good), Ok(()), "{good:?}");
        }
    }

    #[test]
    fn special_files_may_not_be_links() {
        assert!(must_not_be_link(".gitmodules"));
        assert!(must_not_be_link(".GitAttributes"));
        assert!(must_not_be_link(".gitignore."));
        assert!(!must_not_be_link("gitignore"));
    }
}
