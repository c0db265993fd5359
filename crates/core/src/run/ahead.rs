//! The decider's answer asked ahead, kept on this box as soon as it
//! arrives: `run --decider` asks for step N+1 while step N's push is in
//! flight, and a kill before N+1 is durable would otherwise cost one more
//! paid model call.
//!
//! Owns `<git dir>/steps/ahead/<run, hex>.json`: the index the answer is
//! for, the commit it was asked against (step N's) and the answer as the
//! decider printed it. Invariant: a kept answer is used only for its index
//! and only on top of the very commit it was asked against (the worktree
//! the decider saw), once — after it is used, the run's index moves past
//! it — and one that does not fit is discarded, never applied. It is not a
//! durable record (a fresh box asks again, as SPEC allows for a decision
//! lost before it was recorded); it only spares this box the second call.

use std::io::Write;
use std::path::{Path, PathBuf};

use git2::Oid;

/// Where the answer kept for `run` lives.
fn path(git_dir: &Path, run: &str) -> PathBuf {
    git_dir
        .join("steps")
        .join("ahead")
        .join(format!("{}.json", crate::git::hex(run.as_bytes())))
}

/// An answer kept for a later index.
#[derive(Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Kept {
    pub index: usize,
    /// The commit the decider was asked against (its context's `head`).
    pub after: String,
    /// The step object as the decider printed it.
    pub text: String,
}

/// Keep the answer `text` for `index`, asked against `after`: written to a
/// new file, fsynced, renamed over the last one, its directory fsynced.
/// Best effort: an answer that cannot be kept is asked again after a kill.
pub fn keep(
    git_dir: &Path,
    run: &str,
    index: usize,
    after: Oid,
    text: &str,
) -> std::io::Result<()> {
    let target = path(git_dir, run);
    let dir = target.parent().expect("a file in a directory");
    std::fs::create_dir_all(dir)?;
    let kept = Kept {
        index,
        after: after.to_string(),
        text: text.to_string(),
    };
    let mut f = tempfile::NamedTempFile::new_in(dir)?;
    f.write_all(&serde_json::to_vec(&kept).map_err(std::io::Error::other)?)?;
    f.as_file().sync_all()?;
    f.persist(&target).map_err(|e| e.error)?;
    crate::git::shared::created_under(git_dir, git_dir, &target)?;
    crate::lock::sync_dir(dir)
}

/// The answer kept for `index` on top of `head`, if there is one that
/// fits. One for another index or another head (step N never became
/// durable, or became another commit) is discarded; so is one a power cut
/// tore.
pub fn take(git_dir: &Path, run: &str, index: usize, head: Option<Oid>) -> Option<Kept> {
    let kept = read(git_dir, run)?;
    if kept.index == index && Some(kept.after.as_str()) == head.map(|h| h.to_string()).as_deref() {
        return Some(kept);
    }
    forget(git_dir, run);
    None
}

/// The answer kept for `run`, as it is (None: none, or not readable).
pub fn read(git_dir: &Path, run: &str) -> Option<Kept> {
    let bytes = std::fs::read(path(git_dir, run)).ok()?;
    match serde_json::from_slice(&bytes) {
        Ok(k) => Some(k),
        Err(_) => {
            // Torn by a power cut: it was this box's own, and nothing
            // else reads it.
            forget(git_dir, run);
            None
        }
    }
}

/// Drop the answer kept for `run` (the run is done, or it does not fit).
pub fn forget(git_dir: &Path, run: &str) {
    let _ = std::fs::remove_file(path(git_dir, run));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_taken_only_for_its_index_on_its_head_and_a_torn_one_never() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (
            Oid::from_bytes(&[1; 20]).unwrap(),
            Oid::from_bytes(&[2; 20]).unwrap(),
        );
        keep(dir.path(), "r/1", 3, a, "{\"id\":\"s4\"}").unwrap();
        assert_eq!(
            take(dir.path(), "r/1", 3, Some(a)).unwrap().text,
            "{\"id\":\"s4\"}"
        );
        // Another head: discarded, never applied.
        assert!(take(dir.path(), "r/1", 3, Some(b)).is_none());
        assert!(read(dir.path(), "r/1").is_none());
        keep(dir.path(), "r/1", 3, a, "{}").unwrap();
        assert!(take(dir.path(), "r/1", 4, Some(a)).is_none());
        keep(dir.path(), "r/1", 3, a, "{}").unwrap();
        std::fs::write(path(dir.path(), "r/1"), b"{\"index\": 3, \"af").unwrap();
        assert!(take(dir.path(), "r/1", 3, Some(a)).is_none());
        assert!(!path(dir.path(), "r/1").exists());
    }
}
