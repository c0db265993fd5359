//! What a failed read or push of a remote means, told: a ref file git
//! cannot read, a damaged object, a path that moved, a URL or credentials
//! that do not serve.
//!
//! Owns the wording of libgit2's failures for the user. Invariant: a
//! failure on this disk is never reported as the remote's, and nothing here
//! guesses or writes a value for a ref git cannot read.

use git2::Repository;

use crate::error::Error;
use crate::Remote;

/// The error for a ref git cannot read in the repository at `dir`: the
/// file, what it holds, and what to do (move it out of `refs/`: git can
/// neither read nor delete a broken ref).
pub(crate) fn torn_ref_error(message: &str, name: &str, dir: Option<&std::path::Path>) -> Error {
    let Some(dir) = dir else {
        return Error::local(format!("{message}: the ref {name} cannot be read"))
            .with_hint(crate::error::Hint::rerun_after(
            "`git show-ref` names it as broken too: move its file out of the repository's refs/",
        ));
    };
    let file = dir.join(name);
    let bytes = std::fs::read(&file).unwrap_or_default();
    let held = if bytes.is_empty() {
        "is empty".to_string()
    } else {
        format!(
            "holds {:?}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(80)])
        )
    };
    let what = if name.starts_with("refs/steps/remote/") {
        "it is git-steps' copy of the remote's branch, which the next fetch writes again"
    } else {
        "its last good value is the last whole line of its reflog (logs/ beside refs/) if it has one, else the branch in a clone that fetched it"
    };
    let aside = dir.join(format!("{}.torn", name.replace('/', "_")));
    Error::local(format!(
        "{message}: {} {held}, which is not a ref (a write cut short by a power cut, or made by another tool)",
        file.display()
    ))
    .with_hint(crate::error::Hint::rerun_after(format!(
        "git cannot read it either, nor delete it with update-ref; {what}. Move it out of refs/ (`mv -n {} {}`)",
        crate::git::shell_word(&file.to_string_lossy()),
        crate::git::shell_word(&aside.to_string_lossy()),
    )))
}

impl Remote {
    /// An object file git cannot read, here or in a remote on this disk:
    /// each damaged loose object named (not repaired: git-steps did not
    /// write it, or the scrub would have moved it), with what to do.
    pub(crate) fn damaged_error(&self, repo: &Repository, message: String) -> Error {
        let dirs: Vec<std::path::PathBuf> =
            [Some(repo.commondir().to_path_buf()), self.local_path(repo)]
                .into_iter()
                .flatten()
                .collect();
        let found: Vec<String> = dirs
            .iter()
            .flat_map(|d| crate::git::loose::damaged(&d.join("objects"), 5))
            .map(|p| {
                let size = std::fs::metadata(&p).map_or(0, |m| m.len());
                format!("{} ({size} bytes)", p.display())
            })
            .collect();
        let fsck: Vec<String> = dirs
            .iter()
            .map(|d| {
                format!(
                    "`git --git-dir {} fsck`",
                    crate::git::shell_word(&d.to_string_lossy())
                )
            })
            .collect();
        let named = if found.is_empty() {
            format!("; {} names the damaged file", fsck.join(" and "))
        } else {
            format!(
                "; not whole: {}{}",
                found.join(", "),
                if found.len() >= 5 { ", …" } else { "" }
            )
        };
        Error::local(format!(
            "{message}: an object file on this disk is damaged{named}"
        ))
        .with_hint(crate::error::hints::damaged_object())
    }

    pub(crate) fn net_error(&self, repo: &Repository, verb: &str, e: git2::Error) -> Error {
        let message = format!("cannot {verb} {}: {}", self.spec, e.message());
        if let Some(name) = crate::error::unreadable_ref(&e) {
            // A ref file here (or in a remote on this disk) that git cannot
            // read either: not the URL's fault, and not for git-steps to
            // guess a value for.
            // The repository where that file is there and unreadable.
            let dirs = [Some(repo.commondir().to_path_buf()), self.local_path(repo)];
            let dir = dirs.into_iter().flatten().find(|d| {
                std::fs::read(d.join(&name)).is_ok_and(|b| !crate::git::loose_ref_parses(&b))
            });
            return torn_ref_error(&message, &name, dir.as_deref());
        }
        if crate::error::is_local_failure(&e) {
            // A file that could not be written or read here (or, for a
            // remote that is a path, on its disk): not the URL's fault.
            return Error::local(message).with_hint(crate::error::hints::local_failure_of(
                crate::error::os_error_kind(&e),
            ));
        }
        if crate::error::is_damaged_object(&e) {
            return self.damaged_error(repo, message);
        }
        // A remote on this disk that is not there (moved, deleted, a
        // typo in `git remote set-url`): libgit2 reads a path it cannot
        // find as a URL whose protocol it does not know.
        let url = match repo.find_remote(&self.spec) {
            Ok(r) => String::from_utf8_lossy(r.url_bytes()).into_owned(),
            Err(_) => self.spec.clone(),
        };
        let path = url.strip_prefix("file://").unwrap_or(&url);
        if !url.contains("://") || url.starts_with("file://") {
            // A relative path is the worktree's, as git reads it.
            let at = repo.workdir().unwrap_or(repo.path()).join(path);
            if !crate::spec::ssh_url(&url) && !at.exists() {
                return Error::remote(
                    format!(
                        "cannot {verb} {}: its path {path} does not exist (moved or deleted?)",
                        self.spec
                    ),
                    false,
                )
                .with_hint(crate::error::Hint::rerun_after(format!(
                    "point the remote at where the repository is now: `git remote set-url {} <path>` (or `git steps init --remote <path>`)",
                    self.spec
                )));
            }
        }
        if crate::error::spurious_git2(&e) {
            // The server said it is unavailable, or the connection broke,
            // after the retries: nobody needs to fix anything here (the
            // error's own hint says so).
            return Error::remote(message, true);
        }
        Error::remote(message, false).with_hint(
            "check the remote's URL (`git remote -v`) and your credentials; `--transport git` uses your git's credential helpers and ssh config",
        )
    }
}
