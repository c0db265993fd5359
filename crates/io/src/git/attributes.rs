//! Whether any gitattributes file could speak for a path, answered without
//! libgit2: its attribute lookup loads the whole index first (with SHA-1DC
//! over every byte), which in a tree of 100,000 files costs more than the
//! rest of a step.
//!
//! Owns that shortcut. Invariant: "none" only when no source libgit2's
//! `git_attr_get` (`GIT_ATTR_CHECK_FILE_THEN_INDEX`) reads exists: the
//! system file, the global one (`core.attributesFile`, else the XDG
//! default), `info/attributes`, and a `.gitattributes` in the worktree or
//! in the index in the path's directory or any above it. Any doubt (an
//! index this module cannot read) is "maybe", and libgit2 answers.

use std::path::{Path, PathBuf};

use git2::Repository;

use super::index_file::{self, IndexFile};

/// The attribute files that speak for every path: system, global, and the
/// repository's `info/attributes`.
fn repository_wide(repo: &Repository) -> Vec<PathBuf> {
    let mut out = vec![repo.commondir().join("info").join("attributes")];
    let cfg = repo.config().ok();
    match cfg
        .as_ref()
        .and_then(|c| c.get_path("core.attributesFile").ok())
    {
        Some(p) => out.push(p),
        None => {
            let xdg = std::env::var_os("XDG_CONFIG_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
            if let Some(x) = xdg {
                out.push(x.join("git").join("attributes"));
            }
        }
    }
    // libgit2's system directory is where it finds the system config.
    for dir in git2::Config::find_system()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .into_iter()
        .chain([PathBuf::from("/etc")])
    {
        out.push(dir.join("gitattributes"));
    }
    out
}

thread_local! {
    /// Per git dir: whether a repository-wide attribute file exists.
    static WIDE: std::cell::RefCell<Option<(PathBuf, bool)>> = const { std::cell::RefCell::new(None) };
    /// The last path asked about, and the answer: the attributes of one
    /// path are asked for one after another (`text`, `eol`, `filter`…).
    static LAST: std::cell::RefCell<Option<(PathBuf, String, bool)>> = const { std::cell::RefCell::new(None) };
}

/// True when no gitattributes file can give `path` (relative to the
/// worktree) any attribute: then every attribute of it is unspecified.
pub fn none_for(repo: &Repository, path: &str) -> bool {
    let git_dir = repo.path().to_path_buf();
    let last = LAST.with(|l| {
        l.borrow()
            .as_ref()
            .filter(|(d, p, _)| *d == git_dir && p == path)
            .map(|(_, _, none)| *none)
    });
    if let Some(none) = last {
        return none;
    }
    let none = looked_up(repo, &git_dir, path);
    LAST.with(|l| *l.borrow_mut() = Some((git_dir, path.to_string(), none)));
    none
}

fn looked_up(repo: &Repository, git_dir: &Path, path: &str) -> bool {
    let git_dir = git_dir.to_path_buf();
    let wide = WIDE.with(|w| {
        w.borrow()
            .as_ref()
            .filter(|(d, _)| *d == git_dir)
            .map(|(_, any)| *any)
    });
    let wide = wide.unwrap_or_else(|| {
        let any = repository_wide(repo).iter().any(|p| p.exists());
        WIDE.with(|w| *w.borrow_mut() = Some((git_dir.clone(), any)));
        any
    });
    if wide {
        return false;
    }
    let Some(workdir) = repo.workdir() else {
        return false;
    };
    let Some(index) = own_index(repo) else {
        return false;
    };
    let mut dir = String::new();
    let mut rest = path;
    loop {
        let file = format!("{dir}.gitattributes");
        if std::fs::symlink_metadata(workdir.join(&file)).is_ok()
            || index.get(file.as_bytes(), 0).is_some()
        {
            return false;
        }
        match rest.split_once('/') {
            Some((first, after)) => {
                dir.push_str(first);
                dir.push('/');
                rest = after;
            }
            None => return true,
        }
    }
}

/// The index as git wrote it, when it is plainly git's and whole; an
/// absent index holds no attributes file either.
fn own_index(repo: &Repository) -> Option<std::rc::Rc<IndexFile>> {
    let path = repo.path().join("index");
    if !path.exists() {
        return Some(std::rc::Rc::new(IndexFile::empty()));
    }
    IndexFile::cached(&path, index_file::skip_hash(repo))
}

/// Forget what [`none_for`] learnt of the repository-wide files.
pub fn forget() {
    WIDE.with(|w| *w.borrow_mut() = None);
    LAST.with(|l| *l.borrow_mut() = None);
}

#[cfg(test)]
mod tests {
    use super::{forget, none_for};
    use crate::git::testing::git;

    /// "None" exactly where libgit2 finds no attributes file: every
    /// source (a directory's `.gitattributes` on disk or only in the
    /// index, `info/attributes`, `core.attributesFile`) makes it "maybe",
    /// and libgit2 then sees the attribute.
    #[test]
    fn none_only_where_libgit2_finds_no_attributes_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        git(p, &["init", "-q"]);
        let global = p.join("global-attributes");
        git(
            p,
            &["config", "core.attributesFile", global.to_str().unwrap()],
        );
        std::fs::create_dir_all(p.join("a/b")).unwrap();
        std::fs::write(p.join("a/b/c.txt"), "c\n").unwrap();
        git(p, &["add", "-A"]);
        let system = super::repository_wide(&git2::Repository::open(p).unwrap())
            .into_iter()
            .skip(2)
            .any(|f| f.exists());
        let check = |path: &str, none: bool| {
            forget();
            let repo = git2::Repository::open(p).unwrap();
            assert_eq!(none_for(&repo, path), none && !system, "{path}");
            let text = repo
                .get_attr(
                    std::path::Path::new(path),
                    "text",
                    git2::AttrCheckFlags::FILE_THEN_INDEX,
                )
                .unwrap();
            if none_for(&repo, path) {
                assert!(text.is_none(), "{path}: libgit2 sees {text:?}");
            }
            text.map(|t| t.to_string())
        };
        assert!(check("a/b/c.txt", true).is_none());
        // In a directory above the path, on disk.
        std::fs::write(p.join("a/.gitattributes"), "*.txt text\n").unwrap();
        assert!(check("a/b/c.txt", false).is_some());
        assert!(check("x.txt", true).is_none());
        // Only in the index (gone from the worktree).
        git(p, &["add", "a/.gitattributes"]);
        std::fs::remove_file(p.join("a/.gitattributes")).unwrap();
        assert!(check("a/b/c.txt", false).is_some());
        git(p, &["rm", "-q", "--cached", "a/.gitattributes"]);
        assert!(check("a/b/c.txt", true).is_none());
        // Repository-wide: info/attributes, then the global file.
        std::fs::create_dir_all(p.join(".git/info")).unwrap();
        std::fs::write(p.join(".git/info/attributes"), "*.txt text\n").unwrap();
        assert!(check("x.txt", false).is_some());
        std::fs::remove_file(p.join(".git/info/attributes")).unwrap();
        std::fs::write(&global, "*.txt text\n").unwrap();
        assert!(check("x.txt", false).is_some());
    }
}
