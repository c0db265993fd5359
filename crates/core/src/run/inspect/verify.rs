//! `verify`: the run's history, plan, durable branch and trees checked
//! against each other.
//!
//! Owns the audit a reviewer or CI runs: every receipt sound, the plan in
//! agreement, the local branch equal to the durable one, each step's tree
//! what its decision makes. Invariant: it reads and never writes.

use git2::Repository;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::git::short;
use crate::history::{ledger, replay};
use crate::plan::reader::Plan;
use crate::settings::Settings;

/// `verify`: every invariant of the history.
#[derive(Debug, Serialize)]
pub struct Verification {
    pub ok: bool,
    pub steps: usize,
    pub history: String,
    pub problems: Vec<String>,
    /// What could not be checked, and why.
    pub notes: Vec<String>,
}

pub fn verify(repo: &Repository, s: &Settings, plan: Option<&Plan>) -> Result<Verification> {
    // A run not checked out here is verified as the remote holds it.
    let audited = super::audit::audited_head(repo, s)?;
    let head = audited.head;
    let mut notes = Vec::new();
    notes.extend(audited.from.clone());
    // Every first parent, not only the run's segment: a receipt of this run
    // below its first step is a problem too.
    let ledger = ledger::scan_with(repo, head, &s.run, ledger::Reach::Full)?;
    let mut problems: Vec<String> = ledger
        .problems
        .iter()
        .map(|p| format!("commit {}: {}", short(p.commit), p.what))
        .collect();
    if let (Some(remote), None) = (&s.remote, &audited.from) {
        let durable = remote.head(repo, &s.refname())?;
        let behind = match (head, durable) {
            (None, Some(_)) => true,
            (Some(h), Some(d)) => repo.find_commit(d).is_ok() && repo.graph_descendant_of(d, h)?,
            _ => false,
        };
        if durable != head && behind {
            problems.push(format!(
                "this box's branch {} is behind the durable branch on {} ({} → {}): the state a crash after a push leaves, nothing is lost; `git steps resume` (or the next apply) brings it up",
                s.branch,
                remote.spec,
                head.map(short).unwrap_or_else(|| "nothing".into()),
                durable.map(short).unwrap_or_else(|| "nothing".into())
            ));
        } else if durable != head {
            problems.push(format!(
                "the local branch {} is at {} but the durable branch on {} is at {} (`git steps resume` reconciles them)",
                s.branch,
                head.map(short).unwrap_or_else(|| "nothing".into()),
                remote.spec,
                durable.map(short).unwrap_or_else(|| "nothing".into())
            ));
        }
    }
    // A run with no branch anywhere is not a verified run of no steps: a
    // supervisor reading the exit code would take "ok" for its run.
    if head.is_none() && ledger.entries.is_empty() {
        let durable = match &s.remote {
            Some(remote) => remote.head(repo, &s.refname())?,
            None => None,
        };
        if durable.is_none() {
            problems.push(format!(
                "run {} has no branch {} here{}: there is nothing to verify (another run's name, or a run not fetched?)",
                s.run,
                s.branch,
                s.remote
                    .as_ref()
                    .map(|r| format!(" nor on {}", r.spec))
                    .unwrap_or_default()
            ));
        }
    }
    // A shallow clone whose boundary cuts the run (its first step or the
    // commit it started from not here, or a merge's other side), or that
    // holds no receipt above its boundary at all, cannot say "ok": what
    // lies below may break every invariant. (`apply`, `resume` and the
    // other writing commands deepen the clone themselves; verify fetches
    // nothing.)
    let whole = ledger.oldest_index == Some(1)
        && ledger.base.is_none_or(|b| repo.find_commit(b).is_ok())
        && !ledger.merges_cut;
    if let (Some(boundary), false) = (ledger.shallow, whole) {
        return Err(Error::other(format!(
            "this clone is shallow and its boundary (commit {}) cuts what verify must read: {}",
            short(boundary),
            if ledger.entries.is_empty() {
                "no receipt of the run lies above it, and what lies below is not here".to_string()
            } else if ledger.merges_cut {
                "the other side of a merge inside the run is not here".to_string()
            } else {
                format!(
                    "{} step(s) are above it; the run's first step or the commit it started from is not here",
                    ledger.entries.len()
                )
            }
        ))
        .with_hint(crate::error::Hint::rerun_after("`git fetch --unshallow` (or `git steps resume`, which deepens the clone as far as the run needs)")));
    }
    let complete = match ledger.shallow {
        Some(boundary) if !ledger.entries.is_empty() && !whole => {
            notes.push(format!(
                "this clone is shallow and the run continues below its boundary (commit {}): {} step(s) above it were checked, the steps below it and their duplicated hunks were not (`git fetch --unshallow` checks everything)",
                short(boundary),
                ledger.entries.len()
            ));
            false
        }
        Some(boundary) => {
            notes.push(format!(
                "this clone is shallow: the history below commit {} was not checked for receipts of this run (`git fetch --unshallow` checks everything)",
                short(boundary)
            ));
            true
        }
        None => true,
    };
    let dups = if complete {
        replay::live_hunks(repo, &ledger)?.1
    } else {
        Vec::new()
    };
    for d in &dups {
        let what = format!(
            "step {} repeats a change of step {} still in effect at {}:{} (before step {}): {}",
            d.step,
            d.duplicate.earlier_step,
            d.duplicate.path,
            d.duplicate.earlier_line,
            d.step,
            d.duplicate.hunk
        );
        if d.allowed {
            notes.push(format!("{what} (allowed by the step: allow_duplicate)"));
        } else {
            problems.push(what);
        }
    }
    // The agent loop's journal must agree with the log (read where it is
    // durable, without fetching: verify writes nothing).
    let name = crate::run::journal::refname(&s.run);
    let jhead = match &s.remote {
        None => repo.refname_to_id(&name).ok(),
        Some(r) => r.head(repo, &name)?,
    };
    let mut journal = None;
    if let Some(jh) = jhead {
        if repo.find_commit(jh).is_err() {
            notes.push(format!(
                "the journal {name} is at {} on the remote, which this box has not fetched (`git steps run` fetches it); it was not checked",
                short(jh)
            ));
        } else {
            let j = crate::run::journal::read(repo, Some(jh))?;
            if let Err(Error::Refused(r)) = j.check(&ledger, &s.branch) {
                problems.push(format!("journal {name}: {}", r.saw));
            }
            journal = Some(j);
        }
    }
    check_trees(
        repo,
        &ledger,
        plan,
        journal.as_ref(),
        &mut problems,
        &mut notes,
    )?;
    if let Some(plan) = plan {
        // A receipt's Step-Allow-Duplicate must be what its plan step says
        // (a digest that matches implies it; a hand-added trailer does not).
        let allowed: std::collections::HashSet<String> = plan
            .steps()?
            .filter_map(|s| s.ok())
            .filter(|s| s.allow_duplicate)
            .map(|s| s.id)
            .collect();
        for d in dups
            .iter()
            .filter(|d| d.allowed && !allowed.contains(&d.step))
        {
            problems.push(format!(
                "step {}: its receipt says Step-Allow-Duplicate but the plan's step {} does not set allow_duplicate",
                d.step, d.step
            ));
        }
        let (_, found) = crate::run::agreement::plan_agreement(repo, plan, &ledger, false)?;
        for e in found {
            problems.push(match e {
                Error::Refused(r) => match r.step {
                    Some(step) => format!("step {step}: {}", r.saw),
                    None => r.saw,
                },
                other => other.to_string(),
            });
        }
    }
    // Every recorded effect outcome belongs to a durable step of the run.
    let (stray, pending) = super::effects::check(repo, s, &ledger)?;
    problems.extend(stray);
    notes.extend(pending);
    Ok(Verification {
        ok: problems.is_empty(),
        steps: ledger.entries.len(),
        history: ledger.history_fingerprint(),
        problems,
        notes,
    })
}

/// The receipt promises that its commit is its decision applied to the
/// commit's parent: a tree changed under a kept receipt (a hand `--amend`,
/// a force-push) must not pass. Every step whose decision is at hand — in
/// PLAN, or kept by the run itself in its journal — is applied again to
/// its commit's parent (in memory: verify writes nothing) and the trees
/// compared; the others are named in a note, with why.
pub(super) fn check_trees(
    repo: &Repository,
    ledger: &ledger::Ledger,
    plan: Option<&Plan>,
    journal: Option<&crate::run::journal::Journal>,
    problems: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> Result<()> {
    use std::collections::HashMap;
    if ledger.entries.is_empty() {
        return Ok(());
    }
    // Decisions by digest (a digest names one decision, id included).
    let mut decisions: HashMap<String, crate::plan::step::Step> = HashMap::new();
    if let Some(plan) = plan {
        for step in plan.steps()?.flatten() {
            decisions.insert(step.digest.clone(), step);
        }
    }
    if let Some(j) = journal {
        for e in j
            .entries
            .iter()
            .filter(|e| e.status == crate::run::journal::DecisionStatus::Recorded)
        {
            if !decisions.contains_key(&e.decision) {
                if let Ok((step, _)) = e.step(repo) {
                    decisions.insert(step.digest.clone(), step);
                }
            }
        }
    }
    let mut unchecked = Vec::new();
    let mut in_memory = false;
    for e in &ledger.entries {
        // The decision the commit stores: its digest must be the receipt's,
        // and it is applied again as a plan's would be.
        if !decisions.contains_key(&e.decision) {
            let commit = repo.find_commit(e.commit)?;
            if let Some(text) = crate::history::receipt::stored_decision(&commit) {
                match stored(e, &commit, &text) {
                    Ok(Some(step)) => {
                        decisions.insert(step.digest.clone(), step);
                    }
                    Ok(None) => continue,
                    Err(why) => {
                        problems.push(format!("step {}: {why}", e.id));
                        continue;
                    }
                }
            }
        }
        let Some(step) = decisions.get(&e.decision).filter(|st| st.id == e.id) else {
            unchecked.push(e.id.as_str());
            continue;
        };
        if !in_memory {
            // Objects a re-application builds go to memory and are
            // dropped with it.
            repo.odb()?.add_new_mempack_backend(1000)?;
            in_memory = true;
        }
        let commit = repo.find_commit(e.commit)?;
        let parent = commit.parent(0).ok().map(|p| p.tree()).transpose()?;
        match crate::tree::build::apply(repo, parent, step) {
            Ok(applied) if applied.tree == commit.tree_id() => {}
            Ok(applied) => {
                let want = repo.find_tree(applied.tree)?;
                let paths: Vec<String> =
                    crate::git::tree_changes(repo, Some(&want), Some(&commit.tree()?))?
                        .into_iter()
                        .map(|c| c.path)
                        .collect();
                problems.push(format!(
                    "step {}: its commit {} is not its decision applied to its parent; these paths differ from what the decision writes: {} (a tree changed under a kept receipt)",
                    e.id,
                    short(e.commit),
                    paths.join(", ")
                ));
            }
            Err(err) => problems.push(format!(
                "step {}: its decision does not apply to its commit {}'s parent ({err}): the commit was not made by it",
                e.id,
                short(e.commit)
            )),
        }
    }
    if !unchecked.is_empty() {
        let shown: Vec<&str> = unchecked.iter().take(10).copied().collect();
        notes.push(format!(
            "{} step(s) were not checked against their decision, which is kept neither in their commit (a decision over {} KiB, or a step written before decisions were kept), nor in {}, nor in the run's journal: {}{}",
            unchecked.len(),
            crate::plan::canonical::STORED_DECISION_MAX >> 10,
            if plan.is_some() { "PLAN" } else { "a PLAN (none was given)" },
            shown.join(", "),
            if unchecked.len() > shown.len() {
                format!(" and {} more", unchecked.len() - shown.len())
            } else {
                String::new()
            }
        ));
    }
    Ok(())
}

/// The decision `commit` stores (`text`), checked against its receipt `e`:
/// Ok(Some(step)) to apply again; Ok(None) for an `adopt` decision, whose
/// whole check is here (it names the receipt's adopted commits, and its
/// tree is its parent's); Err(why) when it is not the receipt's decision.
fn stored(
    e: &ledger::AppliedStep,
    commit: &git2::Commit<'_>,
    text: &str,
) -> std::result::Result<Option<crate::plan::step::Step>, String> {
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|err| format!("the decision its commit stores is not JSON ({err})"))?;
    let digest = crate::plan::canonical::decision_digest(&value);
    if digest != e.decision {
        return Err(format!(
            "the decision its commit {} stores has digest {digest}, its receipt says {} (a decision changed under a kept receipt)",
            short(e.commit),
            e.decision
        ));
    }
    if let Some(adopted) = value.get("adopt") {
        let receipt = commit
            .message()
            .ok()
            .and_then(|m| crate::history::receipt::parse(m).ok());
        let named: Vec<String> = receipt
            .map(|r| r.adopts.iter().map(|o| o.to_string()).collect())
            .unwrap_or_default();
        let listed: Vec<String> = serde_json::from_value(adopted.clone()).unwrap_or_default();
        if listed != named {
            return Err(format!(
                "its stored adopt decision names {} commit(s), its receipt's Step-Adopt trailers {}",
                listed.len(),
                named.len()
            ));
        }
        let parent = commit.parent(0).map(|p| p.tree_id()).ok();
        if parent != Some(commit.tree_id()) {
            return Err(format!(
                "its commit {} is an adoption, which changes no file, but its tree differs from its parent's",
                short(e.commit)
            ));
        }
        return Ok(None);
    }
    let step = crate::plan::step::Step::from_stored(text)
        .map_err(|err| format!("the decision its commit stores is not a step ({err})"))?;
    if step.id != e.id {
        return Err(format!(
            "the decision its commit stores is step {}'s",
            step.id
        ));
    }
    Ok(Some(step))
}
