//! For unit tests: the git CLI, run as a user would run it, with no
//! global or system config and a fixed identity.

use std::path::Path;
use std::process::Command;

/// Run `git args` in `dir`; its stdout. Panics, naming the command, when
/// git fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A tree `depth` directories named `a` deep around one file (git would
/// never write it; a crafted remote could).
pub fn nested_tree(repo: &git2::Repository, depth: usize) -> git2::Oid {
    let blob = repo.blob(b"x").unwrap();
    let mut b = repo.treebuilder(None).unwrap();
    b.insert("f", blob, 0o100644).unwrap();
    let mut id = b.write().unwrap();
    for _ in 0..depth {
        let mut b = repo.treebuilder(None).unwrap();
        b.insert("a", id, 0o040000).unwrap();
        id = b.write().unwrap();
    }
    id
}
