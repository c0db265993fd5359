//! A flush's writes, in the one order both flushes use: the branch's move
//! noted (the evidence a repair reads), made durable by the remote (the
//! compare-and-swap push, the commit point), and landed on this box (the
//! local branch, then worktree and index). `apply`'s flush pushes, then
//! lands; the agent loop's lands, starts asking the decider, then pushes
//! ([`Order`]). [`Committer::write`] is that order, written once.
//!
//! Invariant: the note comes before anything it is evidence for; every
//! write sits between the same named crash points in either order
//! (`update-noted`, `pushed`, `tracking-updated`, `worktree-staged`,
//! `ref-updated`); a failure says on which side of the push it fell
//! ([`Stopped`]): before, nothing is durable (and the caller sets back
//! what was landed first, [`Committer::set_back`]); after, the steps are
//! durable and only this box is behind.

use git2::Oid;

use crate::crash;
use crate::error::{Error, Result};
use crate::git::Change;
use crate::sync::reconcile::Worktree;
use crate::workdir::worktree;

use super::branch::{move_ref, push_step};
use super::session::RunContext;

/// One flush's move of the run's branch: from `expected` (the durable
/// head) to `commit` (the last staged step's), with `changes` to the
/// worktree; `id` is the last step's (crash points, errors), `what` names
/// the steps (the reflog).
pub(super) struct Move<'m> {
    pub(super) expected: Option<Oid>,
    pub(super) commit: Oid,
    pub(super) changes: &'m [Change],
    pub(super) id: &'m str,
    pub(super) what: &'m str,
}

/// Which of the two orders a flush's writes take.
pub(super) enum Order<D> {
    /// `apply`'s: pushed, then landed (the push flushed the objects;
    /// without a remote, the local branch's move is the commit point).
    PushThenLand,
    /// The agent loop's: landed (the objects flushed first, as the push
    /// would have), then `D` started (it asks the decider for the next
    /// step against the landed worktree), then pushed.
    LandThenPush(D),
}

/// Where a flush's writes stopped, and on which side of the commit point.
pub(super) enum Stopped<P> {
    /// Before it: nothing is durable. With [`Order::LandThenPush`] this
    /// box may show the move (set it back); `pending` is what the order's
    /// `D` started, if it ran.
    NotDurable { error: Error, pending: Option<P> },
    /// After it: the steps are durable, and this box did not land them.
    /// (Without a remote the local branch's move is the commit point, and
    /// a failure while landing is this kind: the error says what it is.)
    Durable(Error),
}

/// The writes of a run's flushes, over the run's context.
pub(super) struct Committer<'c, 'r> {
    context: &'c RunContext<'r>,
}

impl<'c, 'r> Committer<'c, 'r> {
    pub(super) fn new(context: &'c RunContext<'r>) -> Self {
        Committer { context }
    }

    /// The move `m`'s writes, in `order`: noted (not in a dry run), then
    /// pushed (with a remote) and landed, or landed and pushed. Returns
    /// what the order's `D` started.
    pub(super) fn write<P>(
        &self,
        m: &Move,
        order: Order<impl FnOnce() -> P>,
    ) -> std::result::Result<Option<P>, Stopped<P>> {
        let not_durable = |error| Stopped::NotDurable {
            error,
            pending: None,
        };
        if !self.context.opts.dry_run {
            self.note(m).map_err(not_durable)?;
        }
        match order {
            Order::PushThenLand => {
                if self.context.settings.remote.is_some() {
                    self.push(m).map_err(not_durable)?;
                }
                self.land(m, true).map_err(Stopped::Durable)?;
                Ok(None)
            }
            Order::LandThenPush(during) => {
                self.land(m, false).map_err(not_durable)?;
                let pending = during();
                match self.push(m) {
                    Ok(()) => Ok(Some(pending)),
                    Err(error) => Err(Stopped::NotDurable {
                        error,
                        pending: Some(pending),
                    }),
                }
            }
        }
    }

    /// The evidence that an update of this box follows the branch's move
    /// (for the repair of one a crash cuts short), written before whatever
    /// makes the move durable; then the `update-noted` point. (In place,
    /// the worktree is not updated: nothing to note.)
    fn note(&self, m: &Move) -> Result<()> {
        if self.context.worktree == Worktree::Follows {
            worktree::note_update(self.context.repo, m.expected, m.commit)?;
        }
        crash::point("update-noted", m.id);
        Ok(())
    }

    /// The commit point: the remote accepts the branch's move (a
    /// compare-and-swap push), then the tracking ref follows; the `pushed`
    /// and `tracking-updated` points.
    fn push(&self, m: &Move) -> Result<()> {
        let (repo, s) = (self.context.repo, self.context.settings);
        let Some(remote) = &s.remote else {
            return Err(Error::internal("a push without a remote"));
        };
        push_step(repo, s, remote, m.expected, m.commit, m.id)?;
        crash::point("pushed", m.id);
        remote.note_tracking(repo, &s.refname(), m.commit);
        crash::point("tracking-updated", m.id);
        Ok(())
    }

    /// This box's writes for the move: the worktree's new files staged in
    /// `.git`, `worktree-staged`; the steps' objects flushed unless
    /// `objects_durable` (a push or `move_ref` flushes them); the local
    /// branch moved and, with a remote, flushed, so the branch and the
    /// staged bytes are durable before the worktree changes
    /// ([`crate::flush`]), `ref-updated`; then worktree and index brought
    /// to it (in place, only what still holds what was checked).
    fn land(&self, m: &Move, objects_durable: bool) -> Result<()> {
        let (repo, s) = (self.context.repo, self.context.settings);
        let _staged = match self.context.worktree {
            Worktree::Follows => Some(worktree::prestage(repo, m.changes)?),
            Worktree::Holds => None,
        };
        crash::point("worktree-staged", m.id);
        if !objects_durable {
            crate::flush::repository(repo)?;
        }
        move_ref(repo, s, m.expected, m.commit, m.what)?;
        if s.remote.is_some() {
            crate::flush::repository(repo)?;
        }
        crash::point("ref-updated", m.id);
        let dest = worktree::Dest {
            run: &s.run,
            commit: m.commit,
        };
        match self.context.worktree {
            Worktree::Holds => worktree::update_keeping(repo, dest, m.changes, m.id, &|_| true),
            Worktree::Follows => worktree::update(repo, dest, m.changes, m.id),
        }
    }

    /// The way back from a move landed first whose push failed: branch,
    /// worktree and index set from `m.commit` (not durable) back to
    /// `before`, where they were; a file changed since it was written is
    /// kept (and said). Nothing to do when the branch was not moved yet.
    pub(super) fn set_back(&self, m: &Move, before: Oid) -> Result<()> {
        let (repo, s) = (self.context.repo, self.context.settings);
        if repo.refname_to_id(&s.refname()).ok() != Some(m.commit) {
            return Ok(());
        }
        let new = repo.find_commit(m.commit)?.tree()?;
        let old = repo.find_commit(before)?.tree()?;
        let back = crate::git::tree_changes(repo, Some(&new), Some(&old))?;
        worktree::note_update(repo, Some(m.commit), before)?;
        let _staged = worktree::prestage(repo, &back)?;
        move_ref(
            repo,
            s,
            Some(m.commit),
            before,
            &format!("set back after step {}", m.id),
        )?;
        crate::flush::repository(repo)?;
        worktree::update(
            repo,
            worktree::Dest {
                run: &s.run,
                commit: before,
            },
            &back,
            m.id,
        )
    }
}
