//! The git CLI transport (`--transport git`): the user's own `git`, for its
//! credential helpers, ssh config and proxies.
//!
//! Owns running `git ls-remote`, `git fetch` and `git push --porcelain
//! --force-with-lease` and reading their answers. Invariant: a push is
//! always leased on the expected id; `GIT_STEPS_CRASH` never reaches the
//! child `git`.

use std::process::Command;

use git2::{Oid, Repository};

use super::settle::classify_rejection;
use super::{PushError, RefUpdate, Remote};
use crate::error::{Error, Result};

impl Remote {
    pub(super) fn head_git(&self, repo: &Repository, refname: &str) -> Result<Option<Oid>> {
        let mut cmd = git_cli(repo)?;
        cmd.args(["ls-remote", "--", &self.spec, refname]);
        let out = run_git_ok(cmd, "ls-remote", &self.spec)?;
        parse_ls_remote(&out, refname)
    }

    pub(super) fn fetch_git(
        &self,
        repo: &Repository,
        refname: &str,
        into: &str,
    ) -> Result<Option<Oid>> {
        let Some(oid) = self.head_git(repo, refname)? else {
            return Ok(None);
        };
        if repo.find_commit(oid).is_err() {
            let refspec = format!("+{refname}:{into}");
            let mut cmd = git_cli(repo)?;
            cmd.args([
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                "--",
                &self.spec,
                &refspec,
            ]);
            run_git_ok(cmd, "fetch", &self.spec)?;
        }
        crate::lock::intending(repo, crate::lock::ref_locks(repo, into), || {
            repo.reference(into, oid, true, "git-steps: fetch")
        })?;
        Ok(Some(oid))
    }

    /// Deepen this shallow clone by `by` commits below its boundary along
    /// the remote's `refname` (fetched into `into`): `git fetch --deepen`,
    /// which keeps the `shallow` file right (libgit2's fetch does not).
    /// (`by` None: `--unshallow`, the whole history.)
    pub fn deepen(
        &self,
        repo: &Repository,
        refname: &str,
        into: &str,
        by: Option<u64>,
    ) -> Result<()> {
        let mut cmd = git_cli(repo)?;
        let how = match by {
            Some(n) => format!("--deepen={n}"),
            None => "--unshallow".to_string(),
        };
        cmd.args([
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            &how,
            "--",
            &self.spec,
            &format!("+{refname}:{into}"),
        ]);
        run_git_ok(cmd, "fetch --deepen", &self.spec).map(|_| ())
    }

    /// Push with `git push --force-with-lease=<ref>:<expected>`: git's own
    /// compare-and-swap.
    pub(super) fn push_git(
        &self,
        repo: &Repository,
        update: &RefUpdate<'_>,
    ) -> Result<(), PushError> {
        let RefUpdate {
            refname,
            expected,
            new,
            ..
        } = *update;
        let lease = format!(
            "--force-with-lease={refname}:{}",
            expected.map(|o| o.to_string()).unwrap_or_default()
        );
        let mut cmd = git_cli(repo).map_err(PushError::Failed)?;
        cmd.args([
            "push",
            "--porcelain",
            "--no-verify",
            &lease,
            "--",
            &self.spec,
            &format!("{new}:{refname}"),
        ]);
        let (ok, out, err) = run_git(cmd, "push").map_err(PushError::Failed)?;
        if ok {
            return Ok(());
        }
        let line = out
            .lines()
            .find(|l| l.contains(refname) && l.starts_with('!'))
            .unwrap_or("");
        if line.contains("stale info")
            || line.contains("fetch first")
            || line.contains("non-fast-forward")
        {
            return Err(PushError::Moved { found: None });
        }
        if !line.is_empty() {
            // `!<tab>src:dst<tab>[remote rejected] (reason)`
            let status = line.rsplit('\t').next().unwrap_or(line).trim();
            return Err(classify_rejection(status, &err));
        }
        Err(PushError::Failed(Error::remote(
            format!("git push {} failed: {}", self.spec, err.trim()),
            crate::error::spurious_text(&err),
        )))
    }
}

fn git_cli(repo: &Repository) -> Result<Command> {
    let dir = repo.workdir().unwrap_or_else(|| repo.path()).to_path_buf();
    let mut cmd = Command::new("git");
    cmd.current_dir(&dir).env_remove(crate::keys::CRASH.name);
    Ok(cmd)
}

fn run_git(mut cmd: Command, what: &str) -> Result<(bool, String, String)> {
    let out = cmd.output().map_err(|e| {
        Error::program(format!("cannot run git for {what}: {e}"))
            .with_hint("--transport git needs `git` on PATH")
    })?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// Run git and return its stdout, or an error with its stderr.
fn run_git_ok(cmd: Command, what: &str, spec: &str) -> Result<String> {
    let (ok, out, err) = run_git(cmd, what)?;
    if !ok {
        return Err(Error::remote(
            format!("git {what} {spec} failed: {}", err.trim()),
            crate::error::spurious_text(&err),
        ));
    }
    Ok(out)
}

/// The id `git ls-remote` printed for `refname`, if any.
pub(super) fn parse_ls_remote(out: &str, refname: &str) -> Result<Option<Oid>> {
    for l in out.lines() {
        if let Some((oid, name)) = l.split_once('\t') {
            if name == refname {
                return Ok(Some(Oid::from_str(oid)?));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ls_remote_output_is_read_by_exact_ref_name() {
        let a = "1111111111111111111111111111111111111111";
        let b = "2222222222222222222222222222222222222222";
        let out =
            format!("{a}\trefs/heads/main-old\n{b}\trefs/heads/main\n{a}\trefs/heads/main^{{}}\n");
        assert_eq!(
            parse_ls_remote(&out, "refs/heads/main").unwrap(),
            Some(Oid::from_str(b).unwrap())
        );
        assert_eq!(parse_ls_remote(&out, "refs/heads/mai").unwrap(), None);
        assert_eq!(parse_ls_remote("", "refs/heads/main").unwrap(), None);
        // A line that is not `<oid>\t<ref>` for the ref asked is skipped; a
        // bad id for it is an error, not "no such ref".
        assert_eq!(
            parse_ls_remote("garbage\n", "refs/heads/main").unwrap(),
            None
        );
        assert!(parse_ls_remote("xyz\trefs/heads/main\n", "refs/heads/main").is_err());
    }
}
