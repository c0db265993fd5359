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
use crate::run::session::Ui;
use crate::settings::Settings;
use crate::workdir::worktree;

struct Silent;
impl Ui for Silent {}

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
