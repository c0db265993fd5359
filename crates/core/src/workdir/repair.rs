//! Worktree repair: finishing a worktree update that a crash interrupted,
//! after a step's receipt (or a fast-forward to the durable head) moved the
//! branch but before the worktree and index caught up.
//!
//! Owns the decision "is this dirty worktree explained by an interrupted
//! update?". Only with evidence that one of this box's was cut short (its
//! note, [`worktree::noted_update`], naming the branch's commit; a switch's
//! marker; an index a power cut lost) is any path looked at, and then only
//! the paths that update changes. A path is explained when its index entry is not yet the
//! head's (an update writes the index last, in one write) and both its
//! worktree file and its index entry hold a version the path had somewhere
//! in the run (the branch head, a step, or the run's base) — exactly the
//! states an interrupted update can leave behind, one path at a time — or,
//! after a switch to the run's branch was killed half-way, a version from
//! the tree it was leaving (`refs/steps/switch/<run>`; the paths a switch
//! changes start clean). Invariant: no user work is ever discarded. Before
//! anything is restored, what was found is saved as a commit under
//! `refs/steps/rescue/<run>/<n>`; the user's own changes elsewhere are
//! carried along untouched, and an edit to a path whose update was cut
//! short is refused and left untouched.

use std::path::Path;

use git2::{Oid, Repository};

use crate::crash;
use crate::error::{Error, Refusal, RefusalKind, Result};
use crate::git::{short, BlobEntry, Change};
use crate::history::ledger::Ledger;
use crate::settings::Settings;

use crate::workdir::worktree;

/// What repair found and did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum Repair {
    /// Nothing to repair: no update of this box was cut short (the
    /// worktree is then not walked; uncommitted changes elsewhere are
    /// carried along and not listed), or one was and left it clean.
    Clean,
    /// Changes no step explains; left alone because nothing was to be applied.
    LeftAlone { paths: Vec<String> },
    /// The user's uncommitted changes to paths no interrupted update
    /// involves: carried along untouched, as `git switch` carries them.
    Carried { paths: Vec<String> },
    /// The worktree was (or, in a dry run, would be) brought up to the branch
    /// head, whose last step is `step`.
    Repaired {
        step: String,
        paths: Vec<String>,
        /// Where what was found is saved (None in a dry run).
        rescue: Option<String>,
    },
}

fn entry_at(
    repo: &Repository,
    tree: Option<&git2::Tree<'_>>,
    path: &str,
) -> Result<Option<BlobEntry>> {
    let Some(tree) = tree else { return Ok(None) };
    match tree.get_path(Path::new(path)) {
        // A directory is no version of a file path.
        Ok(e) if e.kind() == Some(git2::ObjectType::Tree) => Ok(None),
        Ok(e) => Ok(Some(BlobEntry {
            oid: e.id(),
            mode: e.filemode() as u32,
        })),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
        Err(e) => {
            let _ = repo;
            Err(e.into())
        }
    }
}

/// The ref naming the commit HEAD was on while `ensure_on_branch` switches
/// a box to the run's branch; present only until the switch completes.
pub fn switch_marker(run: &str) -> String {
    format!("refs/steps/switch/{run}")
}

/// The switch is complete: the worktree is at the run's branch.
pub fn clear_switch_marker(repo: &Repository, run: &str) -> Result<()> {
    crate::lock::delete_ref(repo, &switch_marker(run))
}

/// Every version `path` had in the run: at the head, at each step, at the
/// base the run started from (None: absent), and in `switched_from` (the
/// tree a killed switch to the run's branch was leaving).
fn run_versions(
    repo: &Repository,
    ledger: &Ledger,
    head: Oid,
    switched_from: Option<Oid>,
    path: &str,
) -> Result<Vec<Option<BlobEntry>>> {
    let mut commits: Vec<Oid> = vec![head];
    commits.extend(switched_from);
    commits.extend(ledger.entries.iter().rev().map(|e| e.commit));
    // Commits the run adopted: a fast-forward over them can be interrupted
    // too.
    commits.extend(ledger.adopted.iter().rev().map(|(_, oid)| *oid));
    if let Some(b) = ledger.base {
        commits.push(b);
    }
    let mut out: Vec<Option<BlobEntry>> = Vec::new();
    for c in commits {
        let v = entry_at(repo, Some(&repo.find_commit(c)?.tree()?), path)?;
        if !out.contains(&v) {
            out.push(v);
        }
    }
    if ledger.base.is_none() && !out.contains(&None) {
        // The run started from an empty tree.
        out.push(None);
    }
    Ok(out)
}

/// [`repair`], before a run with `pending` steps to apply: the user's own
/// edits only matter when a step would land on them, so with none pending
/// they are left alone; unless an update of this box to the head was cut
/// short (its note): then what it left stays refused, and its note kept,
/// until those edits are out of the way.
pub fn repair_before(
    repo: &Repository,
    s: &Settings,
    ledger: &Ledger,
    dry_run: bool,
    pending: usize,
) -> Result<Repair> {
    match repair(repo, s, ledger, dry_run) {
        Err(Error::Refused(r))
            if pending == 0
                && r.kind == RefusalKind::DirtyWorktree
                && ledger
                    .head
                    .is_none_or(|h| worktree::noted_update(repo, h).is_none()) =>
        {
            Ok(Repair::LeftAlone {
                paths: worktree::dirty_paths(repo)?,
            })
        }
        other => other,
    }
}

/// Check the worktree against the branch head and repair it if an
/// interrupted update explains every difference: each dirty path holds, in
/// the worktree and in the index, a version that path had at some point of
/// the run. `dry_run` only reports.
pub fn repair(repo: &Repository, s: &Settings, ledger: &Ledger, dry_run: bool) -> Result<Repair> {
    let workdir = worktree::workdir(repo)?;
    let index_missing = !repo.path().join("index").exists();
    let switched_from = repo.refname_to_id(&switch_marker(&s.run)).ok();
    // Without evidence of a cut (a note of an update to the branch's
    // commit, a switch's marker, a lost index) there is nothing to repair,
    // and the worktree is not walked: a step costs what it writes, not
    // what the worktree holds. The user's changes elsewhere are carried
    // along untouched (the step's own paths are checked before it writes;
    // `status` lists them all).
    let evidence = index_missing
        || switched_from.is_some()
        || ledger
            .head
            .is_some_and(|h| worktree::noted_update(repo, h).is_some());
    if !evidence {
        if worktree::any_noted(repo) && !dry_run {
            // A note of an update to another commit: one that never began
            // (killed before the branch moved) or finished long ago.
            worktree::settle_update(repo);
        }
        return Ok(Repair::Clean);
    }
    let mut dirty = worktree::dirty_paths(repo)?;
    if let (true, Some(head)) = (index_missing, ledger.head) {
        // Without an index, a file the run left behind where the head has
        // none reads as untracked: it is looked at too.
        for c in worktree::left_behind(repo, &repo.find_commit(head)?, &workdir)? {
            if !dirty.contains(&c.path) {
                dirty.push(c.path);
            }
        }
    }
    if dirty.is_empty() {
        if !dry_run {
            clear_switch_marker(repo, &s.run)?;
            worktree::settle_update(repo);
        }
        return Ok(Repair::Clean);
    }
    let Some(head) = ledger.head else {
        // No step yet: no update to finish, only the user's changes.
        return Ok(Repair::Carried { paths: dirty });
    };
    let head_tree = repo.find_commit(head)?.tree()?;
    // The evidence that an update of this box was cut short: its note
    // naming the commit the branch is at (its paths: those it changes), or
    // a switch to the run's branch that was. Without it, every change is
    // the user's (a staged older version, a deletion, a revert), carried.
    let noted = worktree::noted_update(repo, head);
    let cut_short = switched_from.is_some() || noted.is_some();
    let scope: Option<std::collections::HashSet<String>> = match noted {
        Some(Some(from)) if switched_from.is_none() => Some(
            crate::git::tree_changes(
                repo,
                Some(&repo.find_commit(from)?.tree()?),
                Some(&head_tree),
            )?
            .into_iter()
            .map(|c| c.path)
            .collect(),
        ),
        _ => None,
    };
    if !cut_short && !index_missing {
        if worktree::any_noted(repo) && !dry_run {
            // A note of an update to another commit: one that never began
            // (killed before the branch moved) or finished long ago.
            worktree::settle_update(repo);
        }
        return Ok(Repair::Carried { paths: dirty });
    }
    let index = crate::git::index(repo)?;
    let sparse = index_missing
        && repo
            .config()?
            .get_bool("core.sparseCheckout")
            .unwrap_or(false);
    let mut unexplained = Vec::new();
    let mut carried = Vec::new();
    let mut to_fix = Vec::new();
    for p in &dirty {
        let versions = run_versions(repo, ledger, head, switched_from, p)?;
        let disk = worktree::on_disk(&workdir, p)?;
        let idx = index.get_path(Path::new(p), 0).map(|e| BlobEntry {
            oid: e.id,
            mode: e.mode,
        });
        let mut disk_version = None;
        for v in &versions {
            if worktree::same(repo, p, &disk, v)? {
                disk_version = Some(*v);
                break;
            }
        }
        let at_head = entry_at(repo, Some(&head_tree), p)?;
        if index_missing {
            // No index at all (a power cut undid its first write): nothing
            // tells an interrupted update from an edit but the file itself.
            // A file holding one of the run's versions, or no file, is
            // brought to the head (a file the run left behind where the
            // head has none is removed, saved first); other content at a
            // path the run has is refused; a file at a path the run never
            // had is the user's.
            match (disk_version, &disk) {
                (Some(found), _) => to_fix.push(Change {
                    path: p.clone(),
                    old: found,
                    new: at_head,
                }),
                // Outside a sparse checkout's cone a file is absent on
                // purpose.
                (None, None) if sparse => carried.push(p.clone()),
                (None, None) => to_fix.push(Change {
                    path: p.clone(),
                    old: None,
                    new: at_head,
                }),
                (None, Some(_)) if versions.iter().all(Option::is_none) => carried.push(p.clone()),
                (None, Some(_)) => unexplained.push(p.clone()),
            }
            continue;
        }
        // An update writes every file first and the index last, in one
        // write: a path whose index entry is already the head's was not
        // left by an interrupted update, whatever its file holds. It is
        // the user's change (a deletion, an old version put back) and is
        // carried along, never "repaired"; so is a path the cut update
        // does not change.
        if idx == at_head || scope.as_ref().is_some_and(|paths| !paths.contains(p)) {
            carried.push(p.clone());
        } else if let (Some(found), true) = (disk_version, versions.contains(&idx)) {
            // The update replaces what was found on disk: a file changed
            // again before it is reached is kept (and saved), not replaced.
            to_fix.push(Change {
                path: p.clone(),
                old: found,
                new: at_head,
            });
        } else if versions.contains(&idx) {
            // The index still holds an older version of the run's: an
            // update to this path was interrupted, and the file has been
            // changed since. Neither version may be chosen for the user.
            unexplained.push(p.clone());
        } else {
            // The user's own change (the index at the head's version, or
            // holding what they staged): carried along, untouched.
            carried.push(p.clone());
        }
    }
    // Files the run left behind in the way of a path the update writes (a
    // directory that became a file or link, a file that became a
    // directory), which no index entry names, as when a power cut lost an
    // index write and kept later worktree writes: each holding one of the
    // run's versions is removed (saved first, with the rest); any other is
    // refused.
    let written: Vec<String> = to_fix
        .iter()
        .filter(|f| f.new.is_some())
        .map(|f| f.path.clone())
        .collect();
    let writes_under = |p: &str| {
        written
            .iter()
            .any(|w| p.starts_with(&format!("{w}/")) || w.starts_with(&format!("{p}/")))
    };
    let behind = if written.is_empty() {
        Vec::new()
    } else {
        worktree::left_behind(repo, &repo.find_commit(head)?, &workdir)?
    };
    for c in behind {
        if dirty.contains(&c.path) || !writes_under(&c.path) {
            continue;
        }
        let disk = worktree::on_disk(&workdir, &c.path)?;
        let mut found = None;
        for v in run_versions(repo, ledger, head, switched_from, &c.path)? {
            if v.is_some() && worktree::same(repo, &c.path, &disk, &v)? {
                found = Some(v);
                break;
            }
        }
        match found {
            Some(old) => to_fix.push(Change {
                path: c.path,
                old,
                new: None,
            }),
            None => unexplained.push(c.path),
        }
    }
    let step = ledger
        .last()
        .map(|e| e.id.clone())
        .unwrap_or_else(|| "-".into());
    if !unexplained.is_empty() {
        return Err(Error::from(Refusal {
            kind: RefusalKind::DirtyWorktree,
            step: None,
            saw: format!(
                "the worktree or index has changes that no step of the run explains (branch at {}, last step {step}): {}",
                short(head),
                unexplained.join(", ")
            ),
            would: "overwrite them while finishing or continuing the run".into(),
            hint: format!(
                "these look like your own edits, made while an update to them was interrupted: copy each aside and put back what the index holds (`for f in {}; do cp -p \"$f\" \"$f.mine\"; git checkout -- \"$f\"; done`), rerun, then move each `.mine` copy back (a `git stash` would take the interrupted update's staged files too, and its pop would undo the repair); nothing was changed",
                worktree::words(unexplained.iter())
            ).into(),
        }));
    }
    if to_fix.is_empty() {
        return Ok(Repair::Carried { paths: carried });
    }
    let paths: Vec<String> = to_fix.iter().map(|c| c.path.clone()).collect();
    if dry_run {
        return Ok(Repair::Repaired {
            step,
            paths,
            rescue: None,
        });
    }
    let msg = format!(
        "git-steps rescue: worktree found mid-step {step}\n\nThe worktree of run {} held these paths between the previous step's\nversion and step {step}'s when the run resumed; they are saved here\nbefore the worktree is brought up to the step.\n",
        s.run
    );
    let found: Vec<&str> = paths.iter().map(String::as_str).collect();
    let rescue = worktree::save_rescue(repo, &s.run, head, &found, &msg)?;
    crash::point("repair-saved", &step);
    let dest = worktree::Dest {
        run: &s.run,
        commit: head,
    };
    worktree::update(repo, dest, &to_fix, &step)?;
    clear_switch_marker(repo, &s.run)?;
    Ok(Repair::Repaired {
        step,
        paths,
        rescue: Some(rescue),
    })
}
