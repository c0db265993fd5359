//! Reconcile: bring the local branch and the durable branch together before
//! any step runs.
//!
//! Owns the resume decision between local head L and durable head R: equal
//! → nothing; L behind R → fast-forward L (and the worktree); L ahead of R
//! with receipted commits → push them (compare-and-swap); diverged, or a
//! commit without a receipt in the run → refuse, showing both heads.
//! Invariant: reconcile only ever moves a branch forward along history that
//! is all receipts of this run; it never discards a commit and never forces.

use git2::{Oid, Repository};
use serde::Serialize;

use crate::crash;
use crate::error::{Error, Refusal, RefusalKind, Result};
use crate::git::short;
use crate::history::{cache, ledger};
use crate::lock;
use crate::settings::Settings;
use crate::sync::remote::RefUpdate;
use crate::workdir::worktree;

/// What reconcile did (or, in a dry run, would do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Action {
    /// No remote: the local branch is the durable one.
    LocalOnly,
    /// Local and durable heads agree.
    InSync,
    /// The local branch was behind and moved forward to the durable head:
    /// `steps` receipts of this run, in `commits` commits (more when the
    /// history the run started from came along).
    FastForward {
        from: Option<String>,
        to: String,
        steps: usize,
        commits: usize,
    },
    /// The local branch was ahead: `steps` receipts of this run the remote
    /// lacked were pushed, in `commits` commits (more when the history the
    /// run started from went along, as on a run's first push).
    Push {
        from: Option<String>,
        to: String,
        steps: usize,
        commits: usize,
    },
    /// Dry run: the durable head could not be fetched; apply will fetch it
    /// and fast-forward if it descends from the local head.
    Fetch { durable: String },
}

/// The heads after reconciling.
#[derive(Debug, Clone, Serialize)]
pub struct Reconciled {
    pub local: Option<String>,
    pub durable: Option<String>,
    #[serde(flatten)]
    pub action: Action,
    /// The switch of HEAD to the run's branch, when HEAD was elsewhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub switched: Option<Switch>,
}

/// HEAD moved (or, in a dry run, would move) to the run's branch, as `git
/// switch` moves it, carrying uncommitted changes along.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Switch {
    /// The branch HEAD was on (None: a detached HEAD).
    pub from: Option<String>,
    /// The commit HEAD was at (None: an unborn branch).
    pub from_commit: Option<String>,
    /// The run's branch.
    pub to: String,
}

fn hex(o: Option<Oid>) -> Option<String> {
    o.map(|o| o.to_string())
}

/// Make sure HEAD is on the run's branch. A branch that does not exist
/// locally is created at `start` (the durable head, or HEAD's commit when
/// there is none) and the worktree brought to it.
pub fn ensure_on_branch(
    repo: &Repository,
    s: &Settings,
    start: Option<Oid>,
    dry_run: bool,
) -> Result<Option<Oid>> {
    let refname = s.refname();
    let head_branch = crate::git::head_branch(repo);
    let branch_tip = repo.refname_to_id(&refname).ok();
    if head_branch.as_deref() == Some(s.branch.as_str()) {
        return Ok(branch_tip);
    }
    let here = match &head_branch {
        Some(b) => format!("branch {b}"),
        None => "a detached HEAD".into(),
    };
    let head = repo.head().ok().and_then(|h| h.target());
    // A switch of ours that stopped after it created the branch and before
    // HEAD moved (a full disk, a kill): its marker names the commit HEAD is
    // still on, so the rerun finishes it, to the branch as it is.
    let marker = crate::workdir::repair::switch_marker(&s.run);
    let resuming =
        branch_tip.is_some() && head.is_some() && repo.refname_to_id(&marker).ok() == head;
    if branch_tip.is_some() && !resuming {
        return Err(Error::other(format!(
            "HEAD is on {here}, but the run's branch {} already exists",
            s.branch
        ))
        .with_hint(crate::error::Hint::rerun_after(format!(
            "`git switch {}`",
            s.branch
        ))));
    }
    let start = if resuming { branch_tip } else { start.or(head) };
    if dry_run {
        return Ok(start);
    }
    // Switching to a durable head elsewhere: only over a clean worktree,
    // only with a tree that may reach it, and never over an untracked file.
    let changes = match start {
        Some(to) if start != head => {
            let old = head.map(|h| repo.find_commit(h)?.tree()).transpose()?;
            let new = repo.find_commit(to)?.tree()?;
            let changes = crate::tree::guard::checked_changes(
                repo,
                old.as_ref(),
                Some(&new),
                to,
                &format!("the head of {} on the remote", s.branch),
            )?;
            worktree::ensure_clean(repo, None, &changes)?;
            changes
        }
        _ => Vec::new(),
    };
    // A switch leaves the worktree a mix of both trees if it is killed
    // half-way; the marker tells repair that the old tree's versions are
    // explained (the worktree was clean at it), so the next run finishes
    // the switch instead of refusing the leftovers as the user's edits.
    // Written for every switch from a commit, so that one stopped before
    // HEAD moved is finished too.
    if let Some(h) = head {
        lock::intending(repo, lock::ref_locks(repo, &marker), || {
            repo.reference(&marker, h, true, "git-steps: switching to the run branch")
        })?;
    }
    if let (Some(oid), false) = (start, resuming) {
        lock::intending(repo, lock::ref_locks(repo, &refname), || {
            repo.reference(&refname, oid, false, "git-steps: start run branch")
        })?;
    }
    lock::intending(repo, lock::ref_locks(repo, "HEAD"), || {
        repo.set_head(&refname)
    })?;
    // The marker, the branch and HEAD durable before the worktree moves
    // (once a run: a cut must not keep a HEAD on a branch it lost).
    crate::flush::repository(repo)?;
    if let (false, Some(to)) = (changes.is_empty(), start) {
        let dest = worktree::Dest {
            run: &s.run,
            commit: to,
        };
        worktree::update(repo, dest, &changes, "-")?;
    }
    if head.is_some() {
        crate::workdir::repair::clear_switch_marker(repo, &s.run)?;
    }
    Ok(start)
}

/// The id of the newest receipt at `head`, for crash points.
fn last_step(repo: &Repository, s: &Settings, head: Oid) -> String {
    repo.find_commit(head)
        .ok()
        .and_then(|c| {
            c.message()
                .ok()
                .and_then(|m| crate::history::receipt::parse(m).ok())
        })
        .filter(|r| r.run == s.run)
        .map(|r| r.id)
        .unwrap_or_else(|| "-".into())
}

/// How many receipts of `ledger` come after `from` (all of them when
/// `from` is none of its receipts: nothing, or the history the run
/// started from).
fn receipts_after(ledger: &ledger::Ledger, from: Option<Oid>) -> usize {
    let n = ledger.entries.len();
    match from.and_then(|f| ledger.entries.iter().position(|e| e.commit == f)) {
        Some(i) => n - i - 1,
        None => n,
    }
}

fn count_between(repo: &Repository, from: Option<Oid>, to: Oid) -> Result<usize> {
    let mut walk = repo.revwalk()?;
    walk.push(to)?;
    if let Some(f) = from {
        walk.hide(f)?;
    }
    walk.simplify_first_parent()?;
    Ok(walk.count())
}

/// In a shallow clone whose boundary cuts the run (its first step, or the
/// commit it started from, is not here), deepen the clone from the remote
/// by what the receipts' `Step-Index` says is missing, until the run and
/// its base are here: a CI checkout with `--depth` is the common case. The
/// run's local branch and the remote's are both looked at. A merge inside
/// the run whose other side the boundary cuts needs the whole history
/// (`--unshallow`). Returns how many commits deeper the clone went (0: deep
/// enough, not shallow, or no remote; `u64::MAX`: the whole history). Opens its own handle on the repository: libgit2 keeps a
/// commit's parents as it first read them, so the caller opens its own
/// after this. When the remote cannot give more, the scan's refusal (with
/// the fetch to run by hand) stands.
pub fn deepen_for_run(path: &std::path::Path, s: &Settings) -> Result<u64> {
    let Some(remote) = &s.remote else {
        return Ok(0);
    };
    let repo = crate::git::open(path)?;
    if !repo.is_shallow() {
        return Ok(0);
    }
    let tracking = crate::sync::remote::tracking_ref(&s.branch);
    let mut heads = vec![repo.refname_to_id(&s.refname()).ok()];
    heads.push(remote.fetch(&repo, &s.refname(), &tracking)?);
    let mut total = 0;
    for head in heads.into_iter().flatten() {
        // Each round brings at least what the oldest receipt here says lies
        // below it; commits that are not steps (adopted ones) may need
        // another, twice as deep.
        for _ in 0..8 {
            // A fresh handle each round: it reads the new boundary.
            let repo = crate::git::open(path)?;
            let scanned = ledger::scan_with(&repo, Some(head), &s.run, ledger::Reach::Run)?;
            if scanned.merges_cut {
                // A merge inside the run whose other side is cut: only the
                // whole history says which receipts it brings in.
                if remote.deepen(&repo, &s.refname(), &tracking, None).is_err() {
                    break;
                }
                ledger::forget_scans();
                total = u64::MAX;
                continue;
            }
            if scanned.shallow.is_none() || scanned.entries.is_empty() {
                break;
            }
            if total == u64::MAX {
                break;
            }
            let by = ledger::deepen_estimate(&scanned).max(total);
            if remote
                .deepen(&repo, &s.refname(), &tracking, Some(by))
                .is_err()
            {
                break;
            }
            ledger::forget_scans();
            total += by;
        }
    }
    Ok(total)
}

/// What the worktree is to the run being reconciled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Worktree {
    /// It follows the branch: a fast-forward writes the files it changes.
    #[default]
    Follows,
    /// It holds the run's next steps, made in place by the agent's own
    /// tools (`record`): a fast-forward keeps its changes. A path the
    /// durable head changes is written only where the worktree still holds
    /// the local head's version, only indexed where it holds the durable
    /// one already (the step a crash kept this box from catching up with),
    /// and refused where it holds anything else; other changed files are
    /// left as they are.
    Holds,
}

/// How to reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mode {
    /// Say what would be done; change nothing.
    pub dry_run: bool,
    pub worktree: Worktree,
}

/// Reconcile local and durable branches (see the module doc).
pub fn reconcile(repo: &Repository, s: &Settings, mode: Mode) -> Result<Reconciled> {
    let before = crate::git::head_branch(repo);
    let head = repo.head().ok().and_then(|h| h.target());
    let mut r = reconcile_branch(repo, s, mode)?;
    if before.as_deref() != Some(s.branch.as_str()) {
        r.switched = Some(Switch {
            from: before,
            from_commit: head.map(|h| h.to_string()),
            to: s.branch.clone(),
        });
    }
    Ok(r)
}

fn reconcile_branch(repo: &Repository, s: &Settings, mode: Mode) -> Result<Reconciled> {
    let Mode {
        dry_run,
        worktree: worktree_is,
    } = mode;
    let Some(remote) = &s.remote else {
        let local = ensure_on_branch(repo, s, None, dry_run)?;
        return Ok(Reconciled {
            local: hex(local),
            durable: hex(local),
            action: Action::LocalOnly,
            switched: None,
        });
    };
    // A dry run fetches the durable head's objects when they are not here
    // (into refs/steps/remote/<branch>, as `git fetch` fills a
    // remote-tracking ref; the branch, index and worktree stay): what it
    // would bring, and the effects it would deliver, must be shown before
    // anything runs.
    let durable = if dry_run {
        match remote.head(repo, &s.refname())? {
            Some(r) if repo.find_commit(r).is_err() => remote.fetch(
                repo,
                &s.refname(),
                &crate::sync::remote::tracking_ref(&s.branch),
            )?,
            r => r,
        }
    } else {
        remote.fetch(
            repo,
            &s.refname(),
            &crate::sync::remote::tracking_ref(&s.branch),
        )?
    };
    let mut durable_ledger = None;
    if let Some(r) = durable {
        if repo.find_commit(r).is_err() {
            // Only in a dry run, when the remote moved between its answer
            // and the fetch.
            let local = ensure_on_branch(repo, s, None, true)?;
            return Ok(Reconciled {
                local: hex(local),
                durable: Some(r.to_string()),
                action: Action::Fetch {
                    durable: r.to_string(),
                },
                switched: None,
            });
        }
        // The durable history must itself be sound.
        // From the receipt cache where it covers an ancestor (then only
        // newer commits are read): a resume must not cost the whole run.
        let scanned = cache::load_ledger(repo, Some(r), &s.run)?;
        if let (Some(boundary), true) = (scanned.shallow, scanned.entries.is_empty()) {
            // The durable branch exists, but this shallow clone holds no
            // receipt of the run in it: its receipts may lie below the
            // boundary (under a hand commit), and starting the run over
            // would apply every step again.
            return Err(Error::other(format!(
                "this clone is shallow: the durable branch {} on {} holds no receipt of run {} down to the clone's boundary (commit {}), and what lies below it is not here",
                s.branch,
                remote.spec,
                s.run,
                crate::git::short(boundary)
            ))
            .with_hint(format!(
                "fetch more history first: `git fetch --deepen=50 {} {}` (or `git fetch --unshallow`); a new run needs a new branch: `git steps init --branch <new branch>`",
                remote.spec, s.branch
            )));
        }
        scanned.ensure_sound(&format!("{} on {}", s.branch, remote.spec))?;
        durable_ledger = Some(scanned);
    }
    let local = ensure_on_branch(repo, s, durable, dry_run)?;
    let done = |action| Reconciled {
        local: hex(local),
        durable: hex(durable),
        action,
        switched: None,
    };
    match (local, durable) {
        (None, None) => Ok(done(Action::InSync)),
        (l, r) if l == r => Ok(done(Action::InSync)),
        (Some(l), r) if r.is_none() || repo.graph_descendant_of(l, r.unwrap_or(l))? => {
            // Local ahead: everything the remote lacks must be receipts of
            // this run (or the base the run started from).
            let local_ledger = cache::load_ledger(repo, Some(l), &s.run)?;
            local_ledger.ensure_sound(&s.branch)?;
            let action = Action::Push {
                from: hex(r),
                to: l.to_string(),
                steps: receipts_after(&local_ledger, r),
                commits: count_between(repo, r, l)?,
            };
            if dry_run {
                return Ok(done(action));
            }
            match remote.push(
                repo,
                &RefUpdate {
                    refname: &s.refname(),
                    expected: r,
                    new: l,
                    replace: false,
                    step: None,
                },
            ) {
                Ok(()) => {}
                Err(e) => return Err(e.into_error(&s.branch, &remote.spec, r)),
            }
            remote.note_tracking(repo, &s.refname(), l);
            crash::point("reconcile-pushed", &last_step(repo, s, l));
            Ok(Reconciled {
                local: Some(l.to_string()),
                durable: Some(l.to_string()),
                action,
                switched: None,
            })
        }
        (l, Some(r)) if l.is_none() || repo.graph_descendant_of(r, l.unwrap_or(r))? => {
            let action = Action::FastForward {
                from: hex(l),
                to: r.to_string(),
                steps: durable_ledger.as_ref().map_or(0, |d| receipts_after(d, l)),
                commits: count_between(repo, l, r)?,
            };
            if dry_run {
                return Ok(done(action));
            }
            // Everything that can refuse is decided before the ref moves:
            // the user's edits, the tree's paths, untracked files in its way.
            let old = l.map(|h| repo.find_commit(h)?.tree()).transpose()?;
            let new = repo.find_commit(r)?.tree()?;
            let changes = crate::tree::guard::checked_changes(
                repo,
                old.as_ref(),
                Some(&new),
                r,
                &format!("the head of {} on {}", s.branch, remote.spec),
            )?;
            let kept: Vec<bool> = if worktree_is == Worktree::Holds {
                match worktree::keep_in_place(repo, &changes, None)? {
                    Ok(kept) => kept,
                    Err(path) => {
                        return Err(Error::from(Refusal {
                            kind: RefusalKind::DirtyWorktree,
                            step: None,
                            saw: format!(
                                "the worktree's {path} is an edit of its own, and the durable head {} changes that file too",
                                short(r)
                            ),
                            would: "overwrite the edit while bringing this box up to the durable head".into(),
                            hint: "move the edit out of the way (`git stash -u`), rerun, then make it again".into(),
                        }))
                    }
                }
            } else {
                // A file that holds the durable head's version already
                // needs only its index entry: a power cut can keep the
                // worktree's write (flushed) and lose the branch's move and
                // the index (not flushed: rebuilt from the durable head).
                // Every other path must be clean, as for any update.
                let kept = changes
                    .iter()
                    .map(|c| worktree::holds_new(repo, c))
                    .collect::<Result<Vec<bool>>>()?;
                let rest: Vec<_> = changes
                    .iter()
                    .zip(&kept)
                    .filter(|(_, k)| !**k)
                    .map(|(c, _)| c.clone())
                    .collect();
                worktree::ensure_clean(repo, None, &rest)?;
                kept
            };
            let refname = s.refname();
            let log = "git-steps: fast-forward to the durable head";
            let move_ref = || {
                lock::intending(repo, lock::ref_locks(repo, &refname), || match l {
                    Some(l) => repo.reference_matching(&refname, r, true, l, log),
                    None => repo.reference(&refname, r, false, log),
                })
            };
            let step = last_step(repo, s, r);
            let update = || {
                let dest = worktree::Dest {
                    run: &s.run,
                    commit: r,
                };
                worktree::update_keeping(repo, dest, &changes, &step, &|c| {
                    changes
                        .iter()
                        .position(|x| std::ptr::eq(x, c))
                        .is_some_and(|i| kept[i])
                })
            };
            if worktree_is == Worktree::Holds {
                // Worktree and index first, the branch last: the worktree
                // holds the agent's edits, and a branch moved ahead of an
                // index left behind would read, to `record`, as edits taking
                // back the steps brought in. Killed before the branch moved,
                // the rerun fast-forwards again (every path then holds the
                // old or the new version).
                update()?;
                move_ref()?;
                crash::point("reconcile-ref", &step);
            } else {
                // Noted, and flushed with the fetched objects, before the
                // branch moves (the evidence of an update cut short).
                worktree::note_update(repo, l, r)?;
                crate::flush::repository(repo)?;
                move_ref()?;
                // The branch durable before the worktree moves past it.
                crate::flush::repository(repo)?;
                crash::point("reconcile-ref", &step);
                update()?;
            }
            Ok(Reconciled {
                local: Some(r.to_string()),
                durable: Some(r.to_string()),
                action,
                switched: None,
            })
        }
        (Some(l), Some(r)) => {
            let base = repo.merge_base(l, r).ok();
            let ahead = count_between(repo, base, l)?;
            let behind = count_between(repo, base, r)?;
            Err(Error::from(Refusal {
                kind: RefusalKind::Diverged,
                step: None,
                saw: format!(
                    "the local branch {} is at {} ({ahead} commit(s) the remote lacks) and the durable branch on {} is at {} ({behind} commit(s) the local branch lacks){}",
                    s.branch,
                    short(l),
                    remote.spec,
                    short(r),
                    base.map(|b| format!("; they split at {}", short(b))).unwrap_or_default()
                ),
                would: "continue one of two histories and lose the other's steps".into(),
                hint: format!(
                    "compare them with `git log --oneline {} {}`; the remote is the durable one: if the local-only commits were never accepted (another runner won), keep them on a side branch and take the remote's: `git branch steps-local-{} {} && git reset --keep {}`, then rerun",
                    short(l),
                    short(r),
                    short(l),
                    short(l),
                    short(r)
                ).into(),
            }))
        }
        (None, Some(_)) | (Some(_), None) => unreachable!("handled above"),
    }
}
