//! The steps staged and not durable yet: what one flush makes durable
//! (`apply --batch N` stages up to N).
//!
//! Owns the staged steps and the durable head they go on. Invariant: the
//! steps are a chain on that head, oldest first (each commit's parent is
//! the one before it, the first's is the head), and they leave only all
//! together: made durable by a flush ([`Staging::flushed`], which moves the
//! durable head to the last of them) or dropped ([`Staging::discard`],
//! which leaves it where it was). A session never finishes with steps
//! staged ([`Staging::close`]).

use git2::Oid;

use crate::error::{Error, Result};

/// A step whose commit is written and whose receipt is not durable yet
/// (see [`super::commit`]).
#[derive(Debug)]
pub struct Staged {
    pub(super) step: String,
    pub(super) commit: Oid,
    /// The changes from the previous step's tree.
    pub(super) changes: Vec<crate::git::Change>,
    pub(super) added: usize,
    pub(super) removed: usize,
    /// What the step does beyond the artifact, once it is durable.
    pub(super) effects: Vec<crate::plan::effect::Effect>,
    /// The step's decision digest (who may deliver its effects).
    pub(super) digest: String,
}

/// The staged steps and the durable head they go on.
#[derive(Debug)]
pub struct Staging {
    /// The durable head: the last flush's, or the session's start.
    durable: Option<Oid>,
    steps: Vec<Staged>,
}

impl Staging {
    /// Nothing staged, on `durable`.
    pub fn on(durable: Option<Oid>) -> Staging {
        Staging {
            durable,
            steps: Vec::new(),
        }
    }

    /// The durable head the staged steps go on: what the worktree and the
    /// branch hold until the next flush.
    pub fn durable(&self) -> Option<Oid> {
        self.durable
    }

    pub fn len(&self) -> usize {
        self.steps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The oldest staged step.
    pub fn first(&self) -> Option<&Staged> {
        self.steps.first()
    }

    /// The newest staged step: its commit is the one a flush pushes.
    pub fn last(&self) -> Option<&Staged> {
        self.steps.last()
    }

    /// Stage `step`, whose commit's parent is the newest staged step's
    /// (or the durable head).
    pub fn push(&mut self, step: Staged) {
        self.steps.push(step);
    }

    /// The flush made the staged steps durable: the durable head moves to
    /// the newest, and the steps are handed back, oldest first.
    pub fn flushed(&mut self) -> Vec<Staged> {
        if let Some(last) = self.steps.last() {
            self.durable = Some(last.commit);
        }
        std::mem::take(&mut self.steps)
    }

    /// The staged steps will not become durable: dropped, the durable head
    /// unchanged. Returns how many there were.
    pub fn discard(&mut self) -> usize {
        std::mem::take(&mut self.steps).len()
    }

    /// The session is over: every staged step must have been flushed or
    /// discarded (a step left here would be neither reported nor undone).
    pub fn close(self) -> Result<()> {
        match self.steps.first() {
            None => Ok(()),
            Some(s) => Err(Error::internal(format!(
                "a session finished with {} staged step(s), from {}, that were never made durable",
                self.steps.len(),
                s.step
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staged(step: &str, commit: Oid) -> Staged {
        Staged {
            step: step.into(),
            commit,
            changes: Vec::new(),
            added: 0,
            removed: 0,
            effects: Vec::new(),
            digest: String::new(),
        }
    }

    #[test]
    fn a_flush_moves_the_durable_head_to_the_newest_and_a_discard_does_not() {
        let (a, b, c) = (
            Oid::from_bytes(&[1; 20]).unwrap(),
            Oid::from_bytes(&[2; 20]).unwrap(),
            Oid::from_bytes(&[3; 20]).unwrap(),
        );
        let mut s = Staging::on(Some(a));
        s.push(staged("s1", b));
        s.push(staged("s2", c));
        assert_eq!((s.len(), s.first().unwrap().step.as_str()), (2, "s1"));
        let out = s.flushed();
        assert_eq!(out.iter().map(|s| s.commit).collect::<Vec<_>>(), [b, c]);
        assert_eq!(s.durable(), Some(c));
        assert!(s.is_empty());
        s.push(staged("s3", a));
        assert_eq!(s.discard(), 1);
        assert_eq!(s.durable(), Some(c));
        assert!(Staging::on(None).flushed().is_empty());
    }

    #[test]
    fn a_session_closed_with_a_staged_step_is_an_internal_error() {
        assert!(Staging::on(None).close().is_ok());
        let mut s = Staging::on(None);
        s.push(staged("s1", Oid::from_bytes(&[1; 20]).unwrap()));
        let e = s.close().unwrap_err();
        assert!(e.to_string().contains("1 staged step(s), from s1"), "{e}");
    }
}
