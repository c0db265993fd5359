//! The agent loop's flush with the push hidden behind the decider: a
//! step's local writes (branch, worktree, index) first, then its push,
//! during which the decider is asked for the next step against the
//! worktree that holds this one.
//!
//! Owns when a step may overlap (alone, on a branch that exists, with a
//! remote, without effects, the worktree following the branch, not a dry
//! run) and what a failure does; the writes and their
//! order are the committer's ([`super::committer::Order::LandThenPush`]).
//! Invariant: a step is reported only once its push is accepted; a push
//! that fails sets branch, worktree and index back to the durable head (a
//! file changed meanwhile is kept and said); a crash in between leaves the
//! step as local receipted work that the next run pushes (SPEC, the agent
//! loop: a crash before step N is durable loses at most the answers not
//! durable yet). Every write sits between the same named crash points as
//! in `apply`'s order.

use crate::error::{Error, Result};
use crate::plan::step::Step;
use crate::sync::reconcile::Worktree;

use super::commit::unchanged_since_checked;
use super::committer::{Committer, Move, Order, Stopped};
use super::session::{Session, Source, StepOutcome};

/// What runs while a push is in flight, stopped when the push fails (before
/// the box is set back).
pub(super) trait Cancel {
    fn cancel(&self);
}

impl Session<'_> {
    /// As [`Session::apply`], for the agent loop, with the push hidden
    /// behind the decider: when the step is staged alone on a branch that
    /// exists, with a remote, the local branch, worktree and index move to
    /// it *before* its push, and `during` (which asks the decider for the
    /// next step against that worktree) runs while the push is in flight.
    /// The step is reported only once the push is accepted. A push that
    /// fails sets branch, worktree and index back, so nothing of the step
    /// stays; a crash in between leaves the step as local work that the
    /// next run pushes (a fresh box asks for it again). Otherwise this is
    /// [`Session::apply`], and `during` is not called. What `during`
    /// returned comes back whether the step landed or not, for the caller
    /// to collect.
    pub(super) fn apply_overlapped<P: Cancel>(
        &mut self,
        step: &Step,
        source: Option<Source>,
        during: impl FnOnce(&Self) -> P,
    ) -> (Result<StepOutcome>, Option<P>) {
        let staged = match self.stage(step, source) {
            Ok(Some(would)) => return (Ok(would), None),
            Ok(None) => self.staging.len(),
            Err(e) => return (Err(e), None),
        };
        let overlapped = staged == 1
            && self.context.worktree == Worktree::Follows
            && !self.context.opts.dry_run
            && self.context.settings.remote.is_some()
            && self.staging.durable().is_some()
            // Effects start only once their step is durable: nothing to
            // overlap with.
            && step.effects.is_empty();
        if !overlapped {
            let done = self.flush().and_then(|mut v| {
                v.pop()
                    .ok_or_else(|| Error::internal("a staged step was not flushed"))
            });
            return (done, None);
        }
        self.flush_overlapped(during)
    }

    /// The flush of one staged step with its local writes first (see
    /// [`Session::apply_overlapped`]).
    fn flush_overlapped<P: Cancel>(
        &mut self,
        during: impl FnOnce(&Self) -> P,
    ) -> (Result<StepOutcome>, Option<P>) {
        let repo = self.context.repo;
        if self.context.settings.remote.is_none() {
            return (
                Err(Error::internal("an overlapped flush without a remote")),
                None,
            );
        }
        let last = self.staging.last().expect("one staged step");
        let (expected, commit, id) = (self.staging.durable(), last.commit, last.step.clone());
        let changes = last.changes.clone();
        if let Err(e) = unchanged_since_checked(repo, &changes, &id, "the step") {
            self.discard_staged();
            return (Err(e), None);
        }
        let Some(before) = expected else {
            return (
                Err(Error::internal("an overlapped flush on an unborn branch")),
                None,
            );
        };
        // The local writes, as after a push, in the same order and under
        // the same crash points; the step is not durable yet, and its
        // objects are flushed before the local branch names them (in
        // `apply`'s order the push's flush does this).
        let what = format!("step {id}");
        let m = Move {
            expected,
            commit,
            changes: &changes,
            id: &id,
            what: &what,
        };
        let committer = Committer::new(&self.context);
        let written = committer.write(&m, Order::LandThenPush(|| during(self)));
        let (error, pending) = match written {
            Ok(pending) => {
                let staged = self.staging.flushed();
                let outcome = self
                    .landed(staged, &id)
                    .pop()
                    .ok_or_else(|| Error::internal("a staged step was not flushed"));
                return (outcome, pending);
            }
            Err(Stopped::NotDurable { error, pending }) => (error, pending),
            // Not in this order (its push is its last write), but if it
            // were: the step is durable and only this box is behind.
            Err(Stopped::Durable(e)) => {
                self.staging.flushed();
                return (Err(e), None);
            }
        };
        if let Some(p) = &pending {
            p.cancel();
        }
        let undone = committer.set_back(&m, before);
        self.discard_staged();
        (Err(with_set_back(error, undone)), pending)
    }
}

/// A failed overlapped step's error, with what setting the box back did.
fn with_set_back(e: Error, undone: Result<()>) -> Error {
    match undone {
        Ok(()) => e,
        Err(u) => {
            let e = e.with_note(format!(
                "the step's local writes could not all be set back ({u}): the local branch or the worktree may still show it"
            ));
            match e.hint() {
                Some(_) => e,
                None => e.with_hint(crate::error::Hint::rerun().because(
                    "it pushes the step if the remote still allows, or refuses and says why",
                )),
            }
        }
    }
}
