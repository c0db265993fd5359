//! The crash matrix's in-place agent: a plan replayed through `record`, as
//! by an agent that edits files with its own tools and records each edit
//! (`git steps replay-record PLAN`, the `record` runner's command).
//!
//! Owns no state of its own: each step's edit is the plan step applied to
//! the head's tree and written into the worktree (the index untouched, as
//! an editor leaves it), then recorded. A rerun first records again the
//! last step that has a receipt — the hook's rerun after a crash, which
//! must answer done and bring the index (and the remote) up — unless the
//! worktree holds the next step's edit already, then goes on with the next
//! step.

use std::collections::HashSet;

use git2::Repository;

use crate::error::Result;
use crate::history::ledger;
use crate::plan::reader::Plan;
use crate::plan::step::Step;
use crate::run::record::{self, RecordOptions};
use crate::run::session::Reporter;
use crate::settings::Settings;
use crate::workdir::worktree;

struct Silent;
impl Reporter for Silent {}

/// Replay `plan` through `record` in the repository.
pub fn replay(repo: &Repository, s: &Settings, plan: &Plan) -> Result<()> {
    let steps: Vec<Step> = plan.steps()?.collect::<Result<_>>()?;
    let opts = |st: &Step| RecordOptions {
        id: st.id.clone(),
        message: st.message.clone(),
        intent: None,
        allow_duplicate_hunks: st.allow_duplicate,
    };
    let local = repo.refname_to_id(&s.refname()).ok();
    let recorded: HashSet<String> = ledger::scan(repo, local, &s.run)?
        .entries
        .into_iter()
        .map(|e| e.id)
        .collect();
    let last = steps.iter().rposition(|st| recorded.contains(&st.id));
    // The worktree holds no edit beyond the head: a crash (if any) came
    // while the last step was recorded, and its rerun finishes it. An edit
    // there is the next step's, made before the crash: it is made again
    // (the same files) and recorded.
    let head_tree = local.map(|h| repo.find_commit(h)?.tree()).transpose()?;
    let probe = RecordOptions {
        id: "probe".into(),
        ..RecordOptions::default()
    };
    let edited = record::worktree_step(repo, head_tree.as_ref(), &probe)?.is_some();
    if let (Some(j), false) = (last, edited) {
        record::record(repo, s, &opts(&steps[j]), &mut Silent)?;
    }
    for st in &steps[last.map_or(0, |j| j + 1)..] {
        let head = repo.refname_to_id(&s.refname()).ok();
        let base = head.map(|h| repo.find_commit(h)?.tree()).transpose()?;
        let applied = crate::tree::build::apply(repo, base, st)?;
        worktree::write_in_place(repo, &applied.changes)?;
        record::record(repo, s, &opts(st), &mut Silent)?;
    }
    Ok(())
}

/// The `undo` runner's scenario over a plan of N steps: the plan applied,
/// its last ceil(N/2) steps undone by one `undo` (id [`UNDO_ID`]), then the
/// undone steps applied again under new ids (`again-<id>`): the undone
/// changes are no duplicated hunks, and the run ends at the plan's own
/// artifact. A rerun runs the same three parts; each is idempotent.
pub fn replay_undo(repo: &Repository, s: &Settings, path: &std::path::Path) -> Result<()> {
    let mut ui = Silent;
    let opts = crate::run::session::ApplyOptions::default();
    let plan = Plan::open(&path.to_string_lossy(), repo.path())?;
    crate::run::engine::apply_plan(repo, s, &plan, &opts, &mut ui).map_err(|(e, _)| e)?;
    let steps: Vec<serde_json::Value> = plan_values(path)?;
    let k = steps.len().div_ceil(2);
    crate::run::undo::undo(
        repo,
        s,
        &crate::run::undo::Target::Last(k),
        Some(UNDO_ID),
        false,
        &mut ui,
    )?;
    let again: Vec<String> = steps[steps.len() - k..]
        .iter()
        .map(|v| {
            let mut v = v.clone();
            v["id"] = serde_json::json!(again_id(v["id"].as_str().unwrap_or_default()));
            v.to_string()
        })
        .collect();
    let again = Plan::from_text(&again.join("\n"), repo.path(), "the steps made again")?;
    crate::run::engine::apply_plan(repo, s, &again, &opts, &mut ui).map_err(|(e, _)| e)?;
    Ok(())
}

/// The undo step's id in the `undo` runner's scenario.
pub const UNDO_ID: &str = "undo-replay";

/// A step made again after the undo.
pub fn again_id(id: &str) -> String {
    format!("again-{id}")
}

/// The step ids of the `undo` runner's scenario, in order.
pub fn undo_ids(ids: &[String]) -> Vec<String> {
    let k = ids.len().div_ceil(2);
    let mut out = ids.to_vec();
    out.push(UNDO_ID.to_string());
    out.extend(ids[ids.len() - k..].iter().map(|i| again_id(i)));
    out
}

/// The plan's step objects as given, the first of each id.
fn plan_values(path: &std::path::Path) -> Result<Vec<serde_json::Value>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        crate::Error::input(format!("cannot read the plan {}: {e}", path.display()))
    })?;
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for v in serde_json::Deserializer::from_str(&text).into_iter::<serde_json::Value>() {
        let v = v.map_err(|e| crate::Error::input(format!("the plan {}: {e}", path.display())))?;
        if seen.insert(v["id"].as_str().unwrap_or_default().to_string()) {
            out.push(v);
        }
    }
    Ok(out)
}
