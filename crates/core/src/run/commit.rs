//! A step's writes: staged (objects: blobs, trees, the commit), then
//! flushed with the steps staged before it in the committer's order: the
//! branch on the remote (compare-and-swap: the commit point) → the local
//! branch (compare-and-swap, fsynced) → worktree and index.
//!
//! A step is first *staged* ([`Session::stage`]: checked, its objects and
//! commit written, the session's head moved in memory) and then made
//! durable with the steps staged before it in one *flush*
//! ([`Session::flush`]: one compare-and-swap push of the last staged
//! commit, the local branch, one worktree update, in the committer's
//! order, [`super::committer`]). `apply` flushes after every step;
//! `apply --batch N` after N (group commit).
//!
//! Invariant: a step is reported done only after its receipt is durable; a
//! step that is refused or fails before the commit point leaves HEAD, index
//! and worktree as they were and writes no receipt; after it, a failure is
//! this box's only and says that the step is durable. Every write sits
//! between two named crash points: `before-write` and `objects-written`
//! fire for each staged step, the flush's points for its last step.

use git2::{Oid, Repository};

use crate::crash;
use crate::error::{Error, Refusal, RefusalKind, Result};
use crate::git::short;
use crate::git::Change;
use crate::history::ledger::AppliedStep;
use crate::history::receipt;
use crate::history::replay;
use crate::plan::step::Step;
use crate::sync::reconcile::Worktree;
use crate::sync::share;
use crate::tree::build;
use crate::workdir::worktree;

use super::committer::{Committer, Move, Order, Stopped};
use super::session::{Session, Source, StepOutcome};
use super::staging::Staged;

impl Session<'_> {
    /// Apply `step`, whose id has no receipt, on the session's head and
    /// make it durable: [`Session::stage`] then [`Session::flush`]. In a
    /// dry run the head moves to a commit that exists only in memory.
    pub fn apply(&mut self, step: &Step, source: Option<Source>) -> Result<StepOutcome> {
        if let Some(would) = self.stage(step, source)? {
            return Ok(would);
        }
        self.flush()?
            .pop()
            .ok_or_else(|| Error::internal("a staged step was not flushed"))
    }

    /// How many steps are staged and not durable yet.
    pub fn staged(&self) -> usize {
        self.staging.len()
    }

    /// Check `step`, whose id has no receipt, against the session's head,
    /// write its objects and its commit, and move the session's head to it
    /// in memory: the step is staged, not durable, until [`Session::flush`].
    /// A dry run returns what it would apply instead (nothing to flush).
    /// `source` (the agent loop's) goes into the receipt. Uncommitted
    /// changes to the paths the step writes are refused; others are carried
    /// along.
    pub fn stage(&mut self, step: &Step, source: Option<Source>) -> Result<Option<StepOutcome>> {
        let (repo, s, head) = (self.context.repo, self.context.settings, self.receipts.head);
        // The step's position in the run, from 1 (its Step-Index).
        let index = self.len() + 1;
        // The live hunks are read when a step is first applied: a rerun
        // that skips everything does not need them.
        let live = match &mut self.receipts.live {
            Some(c) => c,
            None => {
                let live = self.load_indexed()?.live;
                self.receipts.live.insert(live)
            }
        };
        // Authority (SPEC "Effects"): what a step of this box's own would
        // send is checked before anything of it is written; a step this box
        // decides (not one replayed from the journal or made by `undo`,
        // whose effects came from the history) is noted as its own.
        let own = !matches!(source, Some(Source::Journal) | Some(Source::Undo));
        if own && !step.effects.is_empty() {
            super::authority::check_own(repo, &step.effects)
                .map_err(|m| Error::input(format!("step {}: {m}", step.id)))?;
        }
        if !self.context.opts.dry_run {
            if own && step.undo.is_empty() {
                super::authority::note_decided(repo, &s.run, &step.digest, &step.effects);
            }
            crash::point("before-write", &step.id);
        }
        let parent = head.map(|h| repo.find_commit(h)).transpose()?;
        let base = parent.as_ref().map(|c| c.tree()).transpose()?;
        let applied = build::apply(repo, base.clone(), step)?;
        // SPEC: a step that changes nothing is refused, as `git am` refuses
        // an empty patch (a receipt for nothing would say a change was made).
        if applied.changes.is_empty() && step.undo.is_empty() {
            return Err(Error::apply(
                &step.id,
                "the step changes nothing: every file it writes already holds that content (a step that changes nothing is refused, as `git am` refuses an empty patch; if the change was made by an earlier step, leave this one out)",
            ));
        }
        let new_tree = repo.find_tree(applied.tree)?;
        let hunks =
            replay::tree_hunks_measured(repo, base.as_ref(), Some(&new_tree), &applied.measured)?;
        // An undo restores an earlier state: it is the inverse of what it
        // undoes, never a repetition.
        let allow = self.context.opts.allow_duplicate_hunks
            || step.allow_duplicate
            || !step.undo.is_empty();
        if let (Some(d), false) = (live.duplicates(&step.id, &hunks).first(), allow) {
            return Err(Error::from(Refusal {
                kind: RefusalKind::DuplicateHunk,
                step: Some(step.id.clone()),
                saw: format!(
                    "its hunk {} repeats a change step {} made at {}:{} (its line in the file before this step), which is still in effect there",
                    d.hunk, d.earlier_step, d.path, d.earlier_line
                ),
                would: "apply the same change twice in the same place (a duplicated hunk is still a valid patch, so nothing else would notice)".into(),
                hint: format!(
                    "if the repetition is intended, add \"allow_duplicate\": true to step {} (or rerun with --allow-duplicate-hunks for the whole run); `git steps log` shows step {}",
                    step.id, d.earlier_step
                ).into(),
            }));
        }
        let files: Vec<String> = applied.changes.iter().map(|c| c.path.clone()).collect();
        let (added, removed) = line_stats(repo, &applied)?;
        // A dry run checks the worktree too (it only reads it): it must reach
        // the real run's verdict on every check that needs no remote. The
        // worktree is the last flush's: a step staged after others is
        // checked against what is really on disk (a path an earlier staged
        // step created is still absent there, and is no blocker).
        if self.context.worktree == Worktree::Follows {
            let flushed = self
                .staging
                .durable()
                .map(|h| repo.find_commit(h)?.tree())
                .transpose()?;
            let differ = worktree::attributes_differ(repo, flushed.as_ref(), &applied.changes)?;
            if !differ.is_empty() {
                return Err(worktree::attributes_refusal(
                    &step.id,
                    &differ,
                    &applied.changes,
                ));
            }
        }
        if self.context.worktree == Worktree::Holds {
            // The step is what the worktree holds.
        } else if self.staging.is_empty() {
            worktree::ensure_clean(repo, Some(&step.id), &applied.changes)?;
        } else {
            // Staged after others: the worktree and index are still the last
            // flush's, so the changes checked are the ones the flush would
            // write, from there to this step's tree. (The tracked files were
            // checked for the batch's first step and are checked again
            // before the batch's push.)
            let from = self
                .staging
                .durable()
                .map(|h| repo.find_commit(h)?.tree())
                .transpose()?;
            let combined = crate::git::tree_changes(repo, from.as_ref(), Some(&new_tree))?;
            // The user's uncommitted changes to the paths this step writes
            // are refused here, naming this step (the flush checks the
            // batch's paths again before its push).
            let dirty = worktree::dirty_among(repo, &applied.changes)?;
            if !dirty.is_empty() {
                return Err(worktree::dirty_refusal(Some(&step.id), &dirty));
            }
            worktree::ensure_unblocked(repo, Some(&step.id), &combined)?;
        }
        let message = receipt::message(
            step,
            &s.run,
            index,
            &applied.summary(),
            source.map(Source::as_str),
        );
        let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
        let who = &self.context.who;
        // Every changed file must be writable to the worktree as `git
        // checkout` would write it (a required smudge filter that fails)
        // before the step can become durable: after it, a failure would
        // leave a receipt and a half-written worktree. (A dry run checks it
        // too: the filters' output goes nowhere.)
        {
            let convert = crate::tree::convert::Convert::new(repo);
            for c in &applied.changes {
                if let Some(new) = c.new.filter(|n| {
                    n.mode != crate::git::MODE_LINK && n.mode != crate::git::MODE_GITLINK
                }) {
                    // Nothing to run where no rule converts the file (a
                    // large file is not read back for nothing).
                    if !convert
                        .converts_to_worktree(&c.path)
                        .map_err(|m| Error::apply(&step.id, m))?
                    {
                        continue;
                    }
                    let blob = repo.find_blob(new.oid)?;
                    convert
                        .to_worktree(&c.path, blob.content())
                        .map_err(|m| Error::apply(&step.id, m))?;
                }
            }
        }
        // The hooks judge the step before its commit exists.
        if let (Some(h), false) = (&self.context.hooks, self.context.opts.dry_run) {
            h.check(repo, &step.id, applied.tree, &message)?;
        }
        // A dry run's commit exists only to be shown: it is not signed.
        let signer = self
            .context
            .signer
            .as_ref()
            .filter(|_| !self.context.opts.dry_run);
        let commit = crate::sign::commit(
            repo,
            signer,
            &who.author,
            &who.committer,
            &message,
            &new_tree,
            &parents,
            step.canonical.as_deref(),
        )
        .map_err(|e| e.at_step(&step.id))?;
        if self.context.opts.dry_run {
            live.record(&step.id, &hunks);
            live.forget(&step.undo);
            self.advance(step, commit);
            return Ok(Some(StepOutcome::WouldApply {
                step: step.id.clone(),
                files,
                added,
                removed,
                diff: resolved_diff(repo, base.as_ref(), &new_tree)?,
                effects: {
                    let mut out = Vec::new();
                    for (i, e) in step.effects.iter().enumerate() {
                        let why = super::effects::held_back(
                            self.context.settings,
                            &e.action,
                            &mut self.effects.held,
                        );
                        let k =
                            crate::plan::effect::key(&self.context.settings.run, &step.id, i + 1);
                        out.push(format!("{k}: {}{why}", e.action.describe()));
                    }
                    out
                },
            }));
        }
        // Refer to nothing that is not really written (a full disk must not
        // turn into a receipt for a missing object, nor a `git prune` run
        // meanwhile).
        let odb = repo.odb()?;
        for (what, id) in [("commit", commit), ("tree", applied.tree)] {
            if !odb.exists(id) {
                return Err(Error::corrupt(format!(
                    "step {}: the {what} {id} was written but is not in the object database",
                    step.id
                ))
                .with_hint(crate::error::Hint::rerun_after(
                    "check the disk this repository is on (space, errors)",
                )));
            }
        }
        crash::point("objects-written", &step.id);
        // Later steps staged in this session see this one's hunks; nothing
        // of them is saved unless the session finishes with every step
        // durable.
        live.record(&step.id, &hunks);
        live.forget(&step.undo);
        self.staging.push(Staged {
            step: step.id.clone(),
            commit,
            changes: applied.changes,
            added,
            removed,
            effects: step.effects.clone(),
            digest: step.digest.clone(),
        });
        self.advance(step, commit);
        Ok(None)
    }

    /// Make every staged step durable in one compare-and-swap push of the
    /// last one's commit (the commit point: each commit between carries its
    /// own receipt), then move the local branch and bring worktree and
    /// index to it in one update. Returns the steps applied, in order.
    pub fn flush(&mut self) -> Result<Vec<StepOutcome>> {
        let Some(last) = self.staging.last() else {
            return Ok(Vec::new());
        };
        let (repo, s) = (self.context.repo, self.context.settings);
        let (expected, commit, id) = (self.staging.durable(), last.commit, last.step.clone());
        let combined = if self.staging.len() > 1 {
            let old = expected.map(|h| repo.find_commit(h)?.tree()).transpose()?;
            let new = repo.find_commit(commit)?.tree()?;
            let combined = crate::git::tree_changes(repo, old.as_ref(), Some(&new))?;
            // Nothing may have appeared in the worktree since the batch's
            // steps were checked (the user's edits, an untracked file where
            // a step creates one): the update below would write over it.
            let checked = match worktree::dirty_among(repo, &combined) {
                Ok(dirty) if !dirty.is_empty() => Err(worktree::dirty_refusal(Some(&id), &dirty)),
                Ok(_) => worktree::ensure_unblocked(repo, Some(&id), &combined),
                Err(e) => Err(e),
            };
            if let Err(e) = checked {
                self.discard_staged();
                return Err(e);
            }
            Some(combined)
        } else {
            None
        };
        // Every file the flush replaces must still hold what the steps were
        // checked against: since then, hooks ran and the user's editor or
        // the agent's own tools may have written (a lone step staged by
        // `--batch` was checked before the next step's hooks). Found here,
        // nothing becomes durable; the update after the push looks again.
        let what_changes = if combined.is_some() {
            "the batch"
        } else {
            "the step"
        };
        // One worktree update from the last flush's tree to this one's.
        let changes = combined.unwrap_or_else(|| last.changes.clone());
        let first = self.staging.first().map_or(id.clone(), |f| f.step.clone());
        let (which, what) = if self.staging.len() == 1 {
            (format!("step {id} is"), format!("step {id}"))
        } else {
            (
                format!("steps {first} to {id} are"),
                format!("steps {first}..{id}"),
            )
        };
        if self.context.worktree == Worktree::Follows && !self.context.opts.dry_run {
            if let Err(e) = unchanged_since_checked(repo, &changes, &id, what_changes) {
                self.discard_staged();
                return Err(e);
            }
        }
        let m = Move {
            expected,
            commit,
            changes: &changes,
            id: &id,
            what: &what,
        };
        let written = Committer::new(&self.context).write(&m, Order::<fn()>::PushThenLand);
        let local = match written.err() {
            None => None,
            Some(Stopped::NotDurable { error, .. }) => {
                self.discard_staged();
                return Err(error);
            }
            // From here on the steps are durable: a failure is this box's
            // only.
            Some(Stopped::Durable(e)) => Some(e),
        };
        let staged = self.staging.flushed();
        let Some(e) = local else {
            return Ok(self.landed(staged, &id));
        };
        Err(match (&s.remote, e) {
            // A file changed under the update: kept, and said so; the
            // steps stay durable.
            (Some(remote), Error::Refused(mut r)) => {
                r.saw = format!(
                    "{which} durable on {} (commit {}), but {}",
                    remote.spec,
                    short(commit),
                    r.saw
                );
                Error::Refused(r)
            }
            // Another writer holds a ref or moved it: still its kind
            // (exit 4), said with what is durable.
            (Some(remote), Error::Busy { message, hint }) => Error::Busy {
                message: format!(
                    "{which} durable on {} (commit {}); updating this box failed: {message}",
                    remote.spec,
                    short(commit)
                ),
                hint,
            },
            // This box's failure: its fix as the failure said it (a full
            // disk, say), or in general words; then the rerun.
            (Some(remote), e) => {
                let fix = e
                    .hint()
                    .filter(|h| h.next() == crate::error::Rerun::After)
                    .cloned()
                    .unwrap_or_else(|| {
                        crate::error::Hint::rerun_after("fix what failed here (the disk, a lock)")
                    });
                Error::local(format!(
                    "{which} durable on {} (commit {}); updating this box failed: {e}",
                    remote.spec,
                    short(commit)
                ))
                .with_hint(fix.because(
                    "it brings this box up to the durable head and does not apply the step again",
                ))
            }
            (None, e) => e,
        })
    }

    /// The flushed steps `staged` (the last `id`) are durable and this box
    /// is up to them, by either flush: the shared cache is published when
    /// due, their effects are due, and they are reported, in order.
    pub(super) fn landed(&mut self, staged: Vec<Staged>, id: &str) -> Vec<StepOutcome> {
        self.after_flush(staged.len(), id);
        staged
            .into_iter()
            .map(|mut st| {
                self.effects.due(
                    &st.step,
                    st.commit,
                    &st.digest,
                    std::mem::take(&mut st.effects),
                );
                StepOutcome::Applied {
                    files: st.changes.iter().map(|c| c.path.clone()).collect(),
                    step: st.step,
                    commit: st.commit.to_string(),
                    added: st.added,
                    removed: st.removed,
                }
            })
            .collect()
    }

    /// After a flush of `flushed` steps, the last `id`: every
    /// `steps.cacheEvery` steps, the live hunks go beside the run for fresh
    /// boxes (best effort: the steps are done either way). (Not for a run
    /// with adopted commits: `shared::read` takes no cache of one, so the
    /// push would be for nothing.)
    pub(super) fn after_flush(&self, flushed: usize, id: &str) {
        let (repo, s) = (self.context.repo, self.context.settings);
        let after = self.len();
        let usable = self.ledger().adopted.is_empty() && self.ledger().problems.is_empty();
        if !self.context.opts.dry_run
            && usable
            && share::due(self.context.share_every, after - flushed, after)
        {
            if let Some(live) = &self.receipts.live {
                share::publish(
                    repo,
                    s,
                    self.ledger().base,
                    self.receipts(),
                    live,
                    self.context.signer.as_ref(),
                    id,
                );
            }
        }
    }

    /// The staged steps will not become durable (their push or a check
    /// before it failed): the session goes back to the last flush, so
    /// nothing of them is reported, cached or pushed later. The live hunks
    /// are read again if another step is staged.
    pub(super) fn discard_staged(&mut self) {
        let n = self.staging.discard();
        self.receipts
            .applied
            .truncate(self.receipts.applied.len() - n);
        let len = self.len();
        self.effects.applied.retain(|(at, _)| *at < len);
        self.receipts.head = self.staging.durable();
        self.receipts.live = None;
    }

    /// The step's receipt is durable (or, in a dry run, in memory): the
    /// session's head moves to it.
    fn advance(&mut self, step: &Step, commit: Oid) {
        if !step.effects.is_empty() {
            self.effects.applied.push((self.len(), step.effects.len()));
        }
        self.receipts.applied.push(AppliedStep {
            index: self.len(),
            id: step.id.clone(),
            decision: step.digest.clone(),
            commit,
        });
        self.receipts.head = Some(commit);
    }
}

/// Lines added and removed by `changes`.
fn line_stats(repo: &Repository, applied: &build::Applied) -> Result<(usize, usize)> {
    let (mut add, mut rem) = (0, 0);
    for c in &applied.changes {
        // (Measured for exactly this change: a path written, then deleted
        // or written again, is counted from its blobs.)
        let measured = applied
            .measured
            .get(&c.path)
            .filter(|m| m.old == c.old && Some(m.new) == c.new);
        let (a, r) = match measured {
            Some(m) => (m.added, m.removed),
            None => {
                // Read in place, never copied.
                let blob = |e: &Option<crate::git::BlobEntry>| {
                    e.map(|e| repo.find_blob(e.oid)).transpose()
                };
                let (old, new) = (blob(&c.old)?, blob(&c.new)?);
                crate::tree::hunks::line_counts(
                    old.as_ref().map_or(&[][..], |b| b.content()),
                    new.as_ref().map_or(&[][..], |b| b.content()),
                )
            }
        };
        add += a;
        rem += r;
    }
    Ok((add, rem))
}

/// The unified diff from `old` to `new`, as `git diff` prints it.
pub(super) fn resolved_diff(
    repo: &Repository,
    old: Option<&git2::Tree<'_>>,
    new: &git2::Tree<'_>,
) -> Result<String> {
    let diff = repo.diff_tree_to_tree(old, Some(new), None)?;
    let mut out = Vec::new();
    diff.print(git2::DiffFormat::Patch, |_, _, line| {
        if matches!(line.origin(), '+' | '-' | ' ') {
            out.push(line.origin() as u8);
        }
        out.extend_from_slice(line.content());
        true
    })?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Refuse when a file the flush replaces no longer holds what the step was
/// checked against (a hook, the user's editor or the agent's own tool
/// wrote it since).
pub(super) fn unchanged_since_checked(
    repo: &Repository,
    changes: &[Change],
    id: &str,
    what_changes: &str,
) -> Result<()> {
    match worktree::first_changed(repo, changes)? {
        None => Ok(()),
        Some(path) => Err(Error::from(Refusal {
            kind: RefusalKind::DirtyWorktree,
            step: Some(id.to_string()),
            saw: format!(
                "{path} changed after {what_changes} was checked (a hook, your editor or the agent's own tool wrote it)"
            ),
            would: format!("overwrite your change to {path}"),
            hint: crate::error::Hint::rerun_after("nothing was made durable: commit or stash the change (`git stash -u`), or let the tool that writes it finish"),
        })),
    }
}
