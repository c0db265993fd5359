//! Read-only views of a run: status, log, verify, fingerprint, effects.
//!
//! Owns what an auditor sees. Invariant: nothing here writes — not a ref, not
//! the index, not a file — and everything is derived from the log, so it agrees
//! with what plain `git log` shows.

use git2::{Oid, Repository};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::git::short;
use crate::history::{ledger, replay};
use crate::plan::reader::Plan;
use crate::settings::Settings;
use crate::workdir::worktree;

pub mod audit;
pub mod effects;
mod verify;
pub use verify::{verify, Verification};

/// `status`.
#[derive(Debug, Serialize)]
pub struct Status {
    pub run: String,
    pub branch: String,
    pub durable: &'static str,
    /// The durable remote's name, when it is a configured remote (None: a
    /// URL or a path, or the local repository is durable).
    pub remote_name: Option<String>,
    /// The durable remote's URL (a configured remote's), or the URL or path
    /// given (credentials redacted; None: the local repository is durable).
    pub remote_url: Option<String>,
    /// `confirmed`: the durable head was read from the remote just now;
    /// `unreachable`: the remote could not be asked, so `durable_head` is
    /// unknown and the rest is this box's view only (None without a remote).
    pub remote: Option<&'static str>,
    /// Why the remote could not be asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_error: Option<String>,
    pub durable_head: Option<String>,
    pub local_head: Option<String>,
    pub agree: bool,
    /// Steps of the run that are durable (read at the durable head when
    /// this box holds it; otherwise this box's count).
    pub steps_applied: usize,
    pub last_step: Option<String>,
    /// Steps on this box's branch, when that differs from the durable head
    /// (a crash after a push, before the local branch moved).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps_local: Option<usize>,
    /// True when the durable head is a commit this box has not fetched:
    /// `steps_applied` is then this box's count.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub durable_not_here: bool,
    /// Steps of the given plan without a receipt (None: no plan given).
    pub pending: Option<Vec<String>>,
    pub dirty: Vec<String>,
    /// The pid of a git-steps applying in this repository right now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<u32>,
    /// Dirty paths a crashed step's worktree update explains (the next
    /// `apply` or `resume` finishes it): the step and the paths.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interrupted>,
    pub problems: Vec<String>,
    /// The agent loop's decision journal, if the run has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal: Option<JournalStatus>,
    /// The effects of the run's steps, counted by state (None: no step
    /// carries effects, or the remote could not be asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effects: Option<effects::EffectsStatus>,
    /// Client hooks the repository has installed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<String>,
    /// Of those, the ones each step must pass (`steps.hooks=true`):
    /// `pre-commit`, `commit-msg`. The others never run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hooks_run: Vec<String>,
}

/// A worktree update a crash cut short, as `status` sees it.
#[derive(Debug, Serialize)]
pub struct Interrupted {
    pub step: String,
    pub paths: Vec<String>,
}

/// The journal as `status` sees it.
#[derive(Debug, Serialize)]
pub struct JournalStatus {
    /// The durable journal head.
    pub head: String,
    /// False when that head's objects are not on this box (a fresh clone
    /// before its first `run`): entries and pending are then unknown.
    pub read: bool,
    pub entries: usize,
    /// A decision recorded but not applied yet: the next `run` applies it
    /// without asking the decider.
    pub pending: Option<crate::run::journal::JournalEntry>,
    /// The latest entry, when it is a refusal of the next step.
    pub refused: Option<crate::run::journal::JournalEntry>,
}

/// The journal's durable head, read without fetching: `status` writes
/// nothing.
fn journal_status(
    repo: &Repository,
    s: &Settings,
    applied: usize,
) -> Result<Option<JournalStatus>> {
    let name = crate::run::journal::refname(&s.run);
    let head = match &s.remote {
        None => repo.refname_to_id(&name).ok(),
        Some(r) => r.head(repo, &name)?,
    };
    let Some(head) = head else {
        return Ok(None);
    };
    if repo.find_commit(head).is_err() {
        return Ok(Some(JournalStatus {
            head: head.to_string(),
            read: false,
            entries: 0,
            pending: None,
            refused: None,
        }));
    }
    let j = crate::run::journal::read(repo, Some(head))?;
    Ok(Some(JournalStatus {
        head: head.to_string(),
        read: true,
        entries: j.entries.len(),
        pending: j.pending(applied).cloned(),
        refused: j
            .latest(applied)
            .filter(|e| e.status == crate::run::journal::DecisionStatus::Refused)
            .cloned(),
    }))
}

pub fn status(repo: &Repository, s: &Settings, plan: Option<&Plan>) -> Result<Status> {
    // The worktree is compared on another thread, with its own handle,
    // while this one reads the run (a first scan of a long run is the
    // longer of the two).
    std::thread::scope(|scope| {
        let dirty = match repo.workdir().filter(|_| !repo.is_bare()) {
            None => None,
            Some(wd) => {
                let wd = wd.to_path_buf();
                Some(scope.spawn(move || {
                    let r = crate::git::open(&wd)?;
                    worktree::dirty_paths(&r)
                }))
            }
        };
        let st = status_of_run(repo, s, plan);
        let dirty = match dirty {
            None => Ok(Vec::new()),
            Some(h) => h
                .join()
                .map_err(|_| Error::other("comparing the worktree with HEAD failed"))?,
        };
        let st = st?;
        let dirty = dirty?;
        // Dirty paths may be a step's update that a crash cut short, not
        // the user's edits: what repair would say, without repairing.
        let interrupted = if dirty.is_empty()
            || crate::git::head_branch(repo).as_deref() != Some(s.branch.as_str())
        {
            None
        } else {
            let local = repo.refname_to_id(&s.refname()).ok();
            let ledger = crate::history::cache::load_ledger(repo, local, &s.run)?;
            match crate::workdir::repair::repair(repo, s, &ledger, true) {
                Ok(crate::workdir::repair::Repair::Repaired { step, paths, .. }) => {
                    Some(Interrupted { step, paths })
                }
                _ => None,
            }
        };
        Ok(Status {
            dirty,
            interrupted,
            running: crate::lock::holder(repo.path()),
            ..st
        })
    })
}

/// `status` without the worktree's changes.
fn status_of_run(repo: &Repository, s: &Settings, plan: Option<&Plan>) -> Result<Status> {
    let head = repo.refname_to_id(&s.refname()).ok();
    // An unreachable remote does not fail `status`: the local view is shown,
    // marked as not confirmed.
    let (durable_head, remote_state, remote_error) = match &s.remote {
        None => (head, None, None),
        Some(r) => match r.head(repo, &s.refname()) {
            Ok(h) => (h, Some("confirmed"), None),
            // (A URL's password stays out of what status prints.)
            Err(e) => (
                None,
                Some("unreachable"),
                Some(crate::git::redact(&e.to_string()).into_owned()),
            ),
        },
    };
    let ledger = crate::history::cache::load_ledger(repo, head, &s.run)?;
    // After a crash between a push and the local branch update, the
    // durable head holds more steps than this box's branch: what is
    // applied is what is durable, read there when this box has it.
    let mut steps_local = None;
    let mut durable_not_here = false;
    let ledger = match durable_head {
        Some(d) if Some(d) != head && remote_error.is_none() => {
            if repo.find_commit(d).is_err() {
                durable_not_here = true;
                ledger
            } else if head.map_or(Ok(true), |h| repo.graph_descendant_of(d, h))? {
                // Behind it, as a crash after a push leaves a box (a
                // diverged box keeps its own count: `agree` says NO).
                steps_local = Some(ledger.entries.len());
                crate::history::cache::load_ledger(repo, Some(d), &s.run)?
            } else {
                ledger
            }
        }
        _ => ledger,
    };
    let pending = match plan {
        None => None,
        Some(p) => {
            let mut v = Vec::new();
            for step in p.steps()? {
                let step = step?;
                if ledger.get(&step.id).is_none() {
                    v.push(step.id);
                }
            }
            Some(v)
        }
    };
    let (journal, effects) = if remote_error.is_some() {
        (None, None)
    } else {
        (
            journal_status(repo, s, ledger.entries.len())?,
            effects::status(repo, s, &ledger)?,
        )
    };
    let mut problems: Vec<String> = ledger
        .problems
        .iter()
        .map(|p| format!("{}: {}", short(p.commit), p.what))
        .collect();
    // No receipt down to a shallow boundary, on a branch the remote holds:
    // the run's receipts may lie below (a hand commit on top of a run,
    // cloned at depth 1). "0 steps applied" would be a guess; `apply`
    // refuses the same history.
    if let (Some(boundary), true, true) = (
        ledger.shallow,
        ledger.entries.is_empty(),
        durable_head.is_some(),
    ) {
        problems.push(format!(
            "{}: this clone is shallow and holds no receipt of run {} down to this boundary; the run's receipts may lie below it, so the steps applied are unknown here (`git fetch --unshallow` reads them)",
            short(boundary),
            s.run
        ));
    }
    Ok(Status {
        journal,
        effects,
        run: s.run.clone(),
        branch: s.branch.clone(),
        durable: s.durable_kind(),
        remote_name: s
            .remote
            .as_ref()
            .filter(|r| repo.find_remote(&r.spec).is_ok())
            .map(|r| r.spec.clone()),
        remote_url: s.remote.as_ref().map(|r| r.url(repo)),
        steps_local,
        durable_not_here,
        interrupted: None,
        running: None,
        remote: remote_state,
        agree: remote_error.is_none() && durable_head == head,
        remote_error,
        durable_head: durable_head.map(|h| h.to_string()),
        local_head: head.map(|h| h.to_string()),
        steps_applied: ledger.entries.len(),
        last_step: ledger.last().map(|e| e.id.clone()),
        pending,
        dirty: Vec::new(),
        problems,
        hooks: crate::git::installed_hooks(repo),
        hooks_run: hooks_run(repo, s),
    })
}

/// The installed hooks git-steps runs as checks on each step.
pub fn hooks_run(repo: &Repository, s: &Settings) -> Vec<String> {
    if !s.config.hooks {
        return Vec::new();
    }
    crate::git::installed_hooks(repo)
        .into_iter()
        .filter(|h| h == "pre-commit" || h == "commit-msg")
        .collect()
}

/// The sentence `init` and `status` say about the repository's hooks.
pub fn hooks_sentence(installed: &[String], run: &[String]) -> String {
    if run.is_empty() {
        format!(
            "{} (not run by git-steps: a step's content is its recorded decision; `git config steps.hooks true` runs pre-commit and commit-msg as checks)",
            installed.join(", ")
        )
    } else {
        let others: Vec<&str> = installed
            .iter()
            .filter(|h| !run.contains(h))
            .map(String::as_str)
            .collect();
        format!(
            "{} run as checks on every step (steps.hooks); {}",
            run.join(", "),
            if others.is_empty() {
                "no other hook is installed".to_string()
            } else {
                format!("not run: {}", others.join(", "))
            }
        )
    }
}

/// One row of `log`.
#[derive(Debug, Serialize)]
pub struct LogEntry {
    /// The step's position in the run, counted from 1 (the receipt's
    /// `Step-Index`).
    pub index: usize,
    pub step: String,
    pub decision: String,
    pub commit: String,
    pub files: Vec<String>,
    pub added: usize,
    pub removed: usize,
    /// For steps applied by `run`: `decider` (asked then) or `journal`
    /// (recorded before a crash, applied on resume without asking again).
    pub source: Option<String>,
    /// Earlier steps whose change this step repeats.
    pub duplicates: Vec<DuplicateOf>,
}

#[derive(Debug, Serialize)]
pub struct DuplicateOf {
    pub earlier_step: String,
    pub hunk: String,
    /// The step says it repeats the change on purpose (`allow_duplicate`).
    pub allowed: bool,
}

/// A step's change as `git show` prints its diff: its commit against its
/// parent (the run's first step against the empty tree).
pub fn step_diff(repo: &Repository, commit: Oid) -> Result<String> {
    let commit = repo.find_commit(commit)?;
    let parent = match commit.parent(0) {
        Ok(p) => Some(p.tree()?),
        Err(_) => None,
    };
    super::commit::resolved_diff(repo, parent.as_ref(), &commit.tree()?)
}

/// The run's steps, and where they were read when the run is not checked
/// out here ([`audit::audited_head`]).
pub fn log(repo: &Repository, s: &Settings) -> Result<(Vec<LogEntry>, Option<String>)> {
    let audited = audit::audited_head(repo, s)?;
    let head = audited.head;
    let ledger = ledger::scan(repo, head, &s.run)?;
    let (_, dups) = replay::live_hunks(repo, &ledger)?;
    let mut out = Vec::with_capacity(ledger.entries.len());
    for e in &ledger.entries {
        let commit = repo.find_commit(e.commit)?;
        let parent_tree = match commit.parent(0) {
            Ok(p) => Some(p.tree()?),
            Err(_) => None,
        };
        let diff = repo.diff_tree_to_tree(parent_tree.as_ref(), Some(&commit.tree()?), None)?;
        let stats = diff.stats()?;
        let files = diff
            .deltas()
            .filter_map(|d| {
                d.new_file()
                    .path()
                    .or(d.old_file().path())
                    .map(|p| p.to_string_lossy().into_owned())
            })
            .collect();
        out.push(LogEntry {
            index: e.index + 1,
            step: e.id.clone(),
            decision: e.decision.clone(),
            commit: e.commit.to_string(),
            files,
            added: stats.insertions(),
            removed: stats.deletions(),
            source: commit
                .message()
                .ok()
                .and_then(|m| crate::history::receipt::parse(m).ok())
                .and_then(|r| r.source),
            duplicates: dups
                .iter()
                .filter(|d| d.step == e.id)
                .map(|d| DuplicateOf {
                    earlier_step: d.duplicate.earlier_step.clone(),
                    hunk: d.duplicate.hunk.clone(),
                    allowed: d.allowed,
                })
                .collect(),
        });
    }
    Ok((out, audited.from))
}

/// `fingerprint [REV]`.
#[derive(Debug, Serialize)]
pub struct Fingerprints {
    pub rev: String,
    pub commit: Option<String>,
    pub artifact: String,
    pub history: String,
}

pub fn fingerprint(repo: &Repository, s: &Settings, rev: Option<&str>) -> Result<Fingerprints> {
    let (label, oid): (String, Option<Oid>) = match rev {
        Some(r) => {
            let obj = repo
                .revparse_single(r)
                .map_err(|e| Error::input(format!("cannot resolve {r:?}: {}", e.message())))?;
            (r.to_string(), Some(obj.peel_to_commit()?.id()))
        }
        None => match &s.remote {
            None => (s.branch.clone(), repo.refname_to_id(&s.refname()).ok()),
            // The durable head: the remote's, which must be here already.
            Some(remote) => {
                let durable = remote.head(repo, &s.refname())?;
                if let Some(d) = durable {
                    if repo.find_commit(d).is_err() {
                        return Err(Error::other(format!(
                            "the durable head {} on {} is not in this repository yet",
                            short(d),
                            remote.spec
                        ))
                        .with_hint("`git steps resume` fetches it (or name a commit: `git steps fingerprint HEAD`)"));
                    }
                }
                (format!("{} on {}", s.branch, remote.spec), durable)
            }
        },
    };
    let tree = oid.map(|o| repo.find_commit(o)?.tree()).transpose()?;
    let artifact = crate::tree::fingerprint::artifact(repo, tree.as_ref())?;
    let ledger = ledger::scan(repo, oid, &s.run)?;
    Ok(Fingerprints {
        rev: label,
        commit: oid.map(|o| o.to_string()),
        artifact,
        history: ledger.history_fingerprint(),
    })
}
