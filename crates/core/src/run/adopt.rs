//! `adopt`: commits inside the run that carry no receipt — a human's fix
//! made with plain git — join the run through one receipted commit that
//! names each of them (`Step-Adopt`), on top of them.
//!
//! Owns finding what is adoptable and writing the adopting commit.
//! Invariant: nothing is rewritten, reset or force-pushed — the adopting
//! commit's tree is its parent's, its parent is the newest commit of the
//! run, and it becomes durable by the same compare-and-swap push as a step;
//! a commit that carries another run's receipt (or a malformed one) is
//! never adopted; the worktree is only brought forward, and only when
//! nothing of the user's is in the way.

use git2::{Oid, Repository};
use serde::Serialize;

use crate::crash;
use crate::error::{Error, Refusal, RefusalKind, Result};
use crate::git::short;
use crate::history::{ledger, receipt};
use crate::plan::step::{decision_digest, validate_id};
use crate::settings::Settings;
use crate::sync::remote::RefUpdate;
use crate::{lock, workdir::worktree};

use super::session::Reporter;

/// How to adopt.
#[derive(Debug, Clone, Default)]
pub struct AdoptOptions {
    /// The adopting step's id (default `adopt:<newest adopted commit>`).
    pub id: Option<String>,
    /// List only.
    pub dry_run: bool,
}

/// A commit that has (or had) no receipt inside the run.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    pub commit: String,
    pub author: String,
    pub subject: String,
}

/// The result of `adopt`.
#[derive(Debug, Serialize)]
pub struct AdoptReport {
    pub run: String,
    pub branch: String,
    /// `adopted`, `would-adopt` (listed only) or `nothing` (no commit
    /// without a receipt inside the run).
    pub status: &'static str,
    /// Oldest first.
    pub commits: Vec<Candidate>,
    pub step: Option<String>,
    pub receipt: Option<String>,
    pub head: Option<String>,
}

/// Find the commits of the run without a receipt and, unless `dry_run`,
/// adopt them.
pub fn adopt(
    repo: &Repository,
    s: &Settings,
    opts: &AdoptOptions,
    ui: &mut dyn Reporter,
) -> Result<AdoptReport> {
    crash::validate_env().map_err(Error::input)?;
    worktree::workdir(repo)?;
    if let Some(id) = &opts.id {
        validate_id(id).map_err(|m| Error::Input {
            step: None,
            line: None,
            message: format!("--id: {m}"),
        })?;
    }
    crate::git::ensure_branch_is_ours(repo, &s.branch)?;
    if crate::git::head_branch(repo).as_deref() != Some(s.branch.as_str()) {
        return Err(Error::other(format!(
            "adopt works on the run's branch {}, and HEAD is not on it",
            s.branch
        ))
        .with_hint(crate::error::Hint::rerun_after(format!(
            "`git switch {}`",
            s.branch
        ))));
    }
    let lock = if opts.dry_run {
        None
    } else {
        let lock = lock::acquire(repo.path())?;
        if let Some(stale) = &lock.stale {
            ui.note(stale);
        }
        Some(lock)
    };
    let local = repo.refname_to_id(&s.refname()).ok();
    let durable = match &s.remote {
        Some(remote) => remote.fetch(
            repo,
            &s.refname(),
            &crate::sync::remote::tracking_ref(&s.branch),
        )?,
        None => local,
    };
    // The newest of the two, when one descends from the other.
    let target = match (local, durable) {
        (l, d) if l == d => l,
        (Some(l), None) => Some(l),
        (None, Some(d)) => Some(d),
        (Some(l), Some(d)) if repo.graph_descendant_of(l, d)? => Some(l),
        (Some(l), Some(d)) if repo.graph_descendant_of(d, l)? => Some(d),
        (Some(l), Some(d)) => {
            return Err(Error::from(Refusal {
                kind: RefusalKind::Diverged,
                step: None,
                saw: format!(
                    "the local branch {} is at {} and the durable one at {}; neither contains the other",
                    s.branch,
                    short(l),
                    short(d)
                ),
                would: "adopt one of two histories and lose the other".into(),
                hint: format!(
                    "compare them with `git log --oneline {} {}`; keep what is only local on a side branch, take the durable one, then adopt",
                    short(l),
                    short(d)
                ).into(),
            }))
        }
        (None, None) => None,
    };
    let report = |status, commits, step, receipt: Option<Oid>, head: Option<Oid>| AdoptReport {
        run: s.run.clone(),
        branch: s.branch.clone(),
        status,
        commits,
        step,
        receipt: receipt.map(|r| r.to_string()),
        head: head.map(|h| h.to_string()),
    };
    let Some(target) = target else {
        return Ok(report("nothing", Vec::new(), None, None, None));
    };
    let scanned = ledger::scan(repo, Some(target), &s.run)?;
    let mut candidates = Vec::new();
    let mut listed = std::collections::HashSet::new();
    for p in &scanned.problems {
        // A commit can carry more than one problem (a merge that hides
        // receipts): listed once.
        if !listed.insert(p.commit) {
            continue;
        }
        let c = repo.find_commit(p.commit)?;
        if p.kind != ledger::ProblemKind::NoReceipt {
            return Err(Error::from(Refusal {
                kind: RefusalKind::ForeignCommit,
                step: None,
                saw: format!("commit {} inside the run: {}", short(p.commit), p.what),
                would: "adopt a commit that carries a receipt (of another run, or a broken one) as this run's".into(),
                hint: "only commits without a receipt can be adopted; `git steps verify` lists every problem; a run that holds another run's steps cannot go on: start a new one, `git steps init --branch <new branch> --run <new id>`".into(),
            }));
        }
        if c.parent_count() == 0 {
            return Err(Error::other(format!(
                "commit {} inside the run has no parent; it cannot be adopted",
                short(p.commit)
            )));
        }
        candidates.push(Candidate {
            commit: p.commit.to_string(),
            author: c.author().name().unwrap_or("?").to_string(),
            subject: c.summary().ok().flatten().unwrap_or("").to_string(),
        });
    }
    if candidates.is_empty() {
        if opts.dry_run {
            return Ok(report("nothing", Vec::new(), None, None, Some(target)));
        }
        // Nothing to adopt (a rerun after the adopting commit became
        // durable, say): bring the box up as any command would, finishing
        // a worktree update a crash interrupted.
        drop(lock);
        let session = super::session::Session::open(
            repo,
            s,
            None,
            super::session::ApplyOptions::default(),
            ui,
        )?;
        let head = session.head();
        drop(session);
        return Ok(report("nothing", Vec::new(), None, None, head));
    }
    // A merge made with `git pull` over a diverged run brings receipts in
    // through its other parents, where the run's first-parent history does
    // not see them: adopted, their steps would be applied again.
    let merges = candidates
        .iter()
        .filter_map(|c| Oid::from_str(&c.commit).ok());
    if scanned.merges_cut {
        return Err(Error::other(
            "this clone is shallow and cuts the other side of a merge inside the run: which receipts it brings in cannot be checked here",
        )
        .with_hint(crate::error::Hint::rerun_after("`git fetch --unshallow`")));
    }
    let mut hidden = ledger::hidden_receipts(repo, &scanned, &s.run, merges)?;
    hidden.dedup_by(|a, b| a.commit == b.commit);
    if let Some(first) = hidden.first() {
        let named: Vec<String> = hidden
            .iter()
            .map(|h| format!("{} ({})", h.id, short(h.commit)))
            .collect();
        return Err(Error::from(Refusal {
            kind: RefusalKind::Diverged,
            step: None,
            saw: format!(
                "the merge {} brings in receipts of run {} through its other parent(s) that the run's history does not hold: {}",
                short(first.merge),
                s.run,
                named.join(", ")
            ),
            would: "adopt the merge and hide those steps from the run, so that they would be applied again".into(),
            hint: format!(
                "a run is one line of steps: take one side (`git reset --keep {}` keeps the run's own line), then let `git steps apply` bring in the other side's steps as steps",
                short(repo.find_commit(first.merge)?.parent_id(0)?)
            ).into(),
        }));
    }
    let newest = candidates
        .last()
        .map(|c| c.commit.clone())
        .unwrap_or_default();
    let id = opts
        .id
        .clone()
        .unwrap_or_else(|| format!("adopt:{}", &newest[..12]));
    if opts.dry_run {
        return Ok(report(
            "would-adopt",
            candidates,
            Some(id),
            None,
            Some(target),
        ));
    }
    if let Some(e) = scanned.get(&id) {
        return Err(Error::from(Refusal {
            kind: RefusalKind::DigestMismatch,
            step: Some(id.clone()),
            saw: format!("step {id} already has a receipt in {}", short(e.commit)),
            would: "record a second step under the same id".into(),
            hint: "give the adoption another id: `git steps adopt --yes --id <new id>`".into(),
        }));
    }
    let oids: Vec<Oid> = candidates
        .iter()
        .map(|c| Oid::from_str(&c.commit))
        .collect::<std::result::Result<_, _>>()?;
    let decided = serde_json::json!({
        "id": id,
        "adopt": candidates.iter().map(|c| c.commit.clone()).collect::<Vec<_>>(),
    });
    let decision = decision_digest(&decided);
    // Kept in the commit, as every step's decision is (`git steps show`).
    let decision_json = crate::plan::canonical::to_string_capped(
        &decided,
        crate::plan::canonical::STORED_DECISION_MAX,
    )
    .ok_or_else(|| Error::internal("an adopt decision is small"))?;
    let index = scanned.entries.len() + 1;
    let summary = match candidates.as_slice() {
        [one] => format!("adopt {} ({})", short(oids[0]), one.subject),
        many => format!("adopt {} commits without a receipt", many.len()),
    };
    let message = receipt::adopt_message(&id, &s.run, &decision, index, &oids, &summary);
    // Everything that can refuse is decided before anything is written:
    // the worktree is brought from the local head to the target.
    let old_tree = local.map(|l| repo.find_commit(l)?.tree()).transpose()?;
    let parent = repo.find_commit(target)?;
    let tree = parent.tree()?;
    let changes = crate::tree::guard::checked_changes(
        repo,
        old_tree.as_ref(),
        Some(&tree),
        target,
        &format!("the head of {}", s.branch),
    )?;
    worktree::ensure_clean(repo, Some(&id), &changes)?;
    let who = crate::git::identity(repo)?;
    let signer = crate::sign::signer(repo, &who.committer)?;
    if let Some(h) = super::hooks::enabled(repo, &s.config)? {
        h.check(repo, &id, tree.id(), &message)?;
    }
    crash::point("before-write", &id);
    let commit = crate::sign::commit(
        repo,
        signer.as_ref(),
        &who.author,
        &who.committer,
        &message,
        &tree,
        &[&parent],
        Some(&decision_json),
    )?;
    crash::point("objects-written", &id);
    // The evidence of the update that follows the branch's move, flushed
    // with the push's commit point (or `move_ref`'s).
    worktree::note_update(repo, local, commit)?;
    crash::point("update-noted", &id);
    if let Some(remote) = &s.remote {
        remote
            .push(
                repo,
                &RefUpdate {
                    refname: &s.refname(),
                    expected: durable,
                    new: commit,
                    replace: false,
                    step: Some(&id),
                },
            )
            .map_err(|e| e.into_error(&s.branch, &remote.spec, durable))?;
        crash::point("pushed", &id);
        remote.note_tracking(repo, &s.refname(), commit);
        crash::point("tracking-updated", &id);
    }
    // (Nothing is staged ahead here: the worktree holds the adopted
    // commits already. The point keeps every step's sequence one.)
    crash::point("worktree-staged", &id);
    super::branch::move_ref(repo, s, local, commit, &id)?;
    if s.remote.is_some() {
        // The local branch durable before the worktree moves past it
        // (without a remote, `move_ref` flushed it).
        crate::flush::repository(repo)?;
    }
    crash::point("ref-updated", &id);
    let dest = worktree::Dest {
        run: &s.run,
        commit,
    };
    worktree::update(repo, dest, &changes, &id)?;
    worktree::settle_update(repo);
    drop(lock);
    Ok(report(
        "adopted",
        candidates,
        Some(id),
        Some(commit),
        Some(commit),
    ))
}
