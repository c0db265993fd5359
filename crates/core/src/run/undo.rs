//! `undo`: rewinding is a step like any other — one receipted step whose
//! tree holds, for every file the undone steps touched, the version it had
//! at the point rewound to.
//!
//! Owns choosing the undone steps and building that step (a `files` step
//! with `undo` naming them, so its receipt says what it undoes). Invariant:
//! nothing is reset, rewritten or force-pushed — the undo is applied through
//! the same session as `apply` (its checks, its one push, its worktree
//! update of the changed paths only) — and no file that no undone step
//! touched changes. It is idempotent by its id: rerun after a crash, the
//! same undo computed at its receipt's parent is done; another is refused.

use std::collections::BTreeSet;
use std::path::Path;

use git2::{Oid, Repository, Tree};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::crash;
use crate::error::{Error, Refusal, RefusalKind, Result};
use crate::git::{short, BlobEntry, MODE_EXEC, MODE_LINK};
use crate::history::ledger::AppliedStep;
use crate::plan::step::{self, validate_id, Step};
use crate::settings::Settings;

use super::session::{ApplyOptions, Reporter, Session, Source, StepOutcome};

/// What to rewind to.
#[derive(Debug, Clone)]
pub enum Target {
    /// Back to just after this step.
    To(String),
    /// Undo the last N steps.
    Last(usize),
}

/// The result of `undo`.
#[derive(Debug, Serialize)]
pub struct UndoReport {
    pub run: String,
    pub branch: String,
    /// `undone` now, or `already-undone` (a rerun: nothing new).
    pub status: &'static str,
    pub step: String,
    /// The step the run was rewound to (None: its start).
    pub to: Option<String>,
    pub undone: Vec<String>,
    pub files: Vec<String>,
    pub commit: String,
    pub artifact: String,
    pub history: String,
    /// The effects delivered (or whose failure was recorded) by this undo:
    /// what was due, and the compensations.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub effects: Vec<super::outcomes::Delivered>,
    /// Effects this box held back (`steps.effects`) and those queued
    /// behind them: pending for a box that delivers them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub effects_pending: Vec<String>,
}

/// Undo the steps after `target` as one new step (`id`: its id, default
/// `undo:<target>`).
pub fn undo(
    repo: &Repository,
    s: &Settings,
    target: &Target,
    id: Option<&str>,
    allow_duplicate_hunks: bool,
    ui: &mut dyn Reporter,
) -> Result<UndoReport> {
    crash::validate_env().map_err(Error::input)?;
    if let Some(id) = id {
        validate_id(id).map_err(|m| Error::Input {
            step: None,
            line: None,
            message: format!("--id: {m}"),
        })?;
    }
    let opts = ApplyOptions {
        allow_duplicate_hunks,
        ..ApplyOptions::default()
    };
    let mut session = Session::open(repo, s, None, opts, ui)?.load(false)?;
    // Every effect of the steps undone is delivered before their
    // compensations are decided (a crash may have left some undelivered).
    session.deliver_effects(ui)?;
    let entries: Vec<AppliedStep> = session.receipts().cloned().collect();
    let base = session.ledger().base;
    // A rerun: this undo, computed where it was made, is the run's last
    // step (`--last N` counts from there, so its id is read off that
    // step); or a step has this undo's id.
    let last_is_this = match entries.last() {
        Some(last) => build(repo, &entries[..last.index], base, target, id)
            .ok()
            .and_then(|(step, _, _)| step)
            .is_some_and(|st| st.id == last.id && st.digest == last.decision),
        None => false,
    };
    let named = if last_is_this {
        entries.last().map(|e| e.id.clone())
    } else {
        id.map(str::to_string)
            .or_else(|| default_id(&entries, target).ok())
    };
    if let Some(done) = named.as_deref().and_then(|n| session.receipt(n)).cloned() {
        if done.index + 1 != entries.len() {
            // Steps came after it. As for any step whose receipt exists, its
            // id makes this a rerun (a script run again after a crash), not
            // a new undo; say so, since a new rewind needs an id of its own.
            ui.note(&format!(
                "{} was made before {} later step(s) and is not made again; to rewind again, give the new undo an id of its own (`--id`)",
                done.id,
                entries.len() - done.index - 1
            ));
        }
        let before = &entries[..done.index];
        let (step, to, undone) = build(repo, before, base, target, id)?;
        if step.as_ref().map(|s| s.digest.as_str()) != Some(done.decision.as_str()) {
            return Err(Error::from(Refusal {
                kind: RefusalKind::DigestMismatch,
                step: Some(done.id.clone()),
                saw: format!(
                    "step {} already has a receipt in {} with decision {}, and this undo, computed where it was made, is another",
                    done.id,
                    short(done.commit),
                    done.decision
                ),
                would: "record a second, different decision under the same step id".into(),
                hint: "give this undo its own id: `git steps undo … --id <new id>`".into(),
            }));
        }
        let files = step.map(|s| files_of(&s)).unwrap_or_default();
        let done_step = done.id.clone();
        let fin = session.finish()?;
        return Ok(UndoReport {
            run: s.run.clone(),
            branch: s.branch.clone(),
            status: "already-undone",
            step: done_step,
            to,
            undone,
            files,
            commit: done.commit.to_string(),
            artifact: fin.artifact,
            history: fin.history,
            effects: fin.effects,
            effects_pending: fin.effects_pending,
        });
    }
    let (step, to, undone) = build(repo, &entries, base, target, id)?;
    let Some(step) = step else {
        return Err(Error::input(format!(
            "nothing to undo: the files that {} touched are as they were {}",
            undone.join(", "),
            to.as_deref()
                .map_or("at the run's start".to_string(), |t| format!(
                    "after step {t}"
                ))
        )));
    };
    if let Some(note) = session.identity_note() {
        ui.note(&note);
    }
    // Its compensations run on this box's authority only when every step
    // whose compensating command it carries was decided here (a command
    // from the history stays pending, named, as any other would).
    if !foreign_commands(repo, &s.run, &entries, &undone)? {
        super::authority::note_decided(repo, &s.run, &step.digest, &step.effects);
    }
    let outcome = session.apply(&step, Some(Source::Undo))?;
    ui.step(&outcome, None);
    session.deliver_effects(ui)?;
    let StepOutcome::Applied { commit, files, .. } = outcome else {
        return Err(Error::internal("an undo step was not applied"));
    };
    let fin = session.finish()?;
    Ok(UndoReport {
        run: s.run.clone(),
        branch: s.branch.clone(),
        status: "undone",
        step: step.id,
        to,
        undone,
        files,
        commit,
        artifact: fin.artifact,
        history: fin.history,
        effects: fin.effects,
        effects_pending: fin.effects_pending,
    })
}

/// The steps `target` undoes in `entries`, and the one they rewind to.
fn split<'e>(
    entries: &'e [AppliedStep],
    target: &Target,
) -> Result<(Option<&'e AppliedStep>, &'e [AppliedStep])> {
    let keep = match target {
        Target::To(step) => match entries.iter().position(|e| &e.id == step) {
            Some(i) => i + 1,
            None => {
                return Err(
                    Error::input(format!("--to {step}: the run has no step {step}"))
                        .with_hint("`git steps log` lists the run's steps"),
                )
            }
        },
        Target::Last(n) if *n == 0 => return Err(Error::input("--last 0 undoes nothing")),
        Target::Last(n) if *n > entries.len() => {
            return Err(Error::input(format!(
                "--last {n}: the run has {} step(s)",
                entries.len()
            )))
        }
        Target::Last(n) => entries.len() - n,
    };
    if keep == entries.len() {
        return Err(Error::input(match target {
            Target::To(step) => format!("nothing to undo: {step} is the run's last step"),
            Target::Last(_) => "nothing to undo".to_string(),
        }));
    }
    Ok((keep.checked_sub(1).map(|i| &entries[i]), &entries[keep..]))
}

/// `undo:<the step rewound to>`, or `undo:start`.
fn default_id(entries: &[AppliedStep], target: &Target) -> Result<String> {
    let (to, _) = split(entries, target)?;
    Ok(format!("undo:{}", to.map_or("start", |e| e.id.as_str())))
}

/// The undo step over `entries` (the run up to where it is made): None when
/// the touched files are as they were already. Also the step rewound to
/// and the ids undone.
fn build(
    repo: &Repository,
    entries: &[AppliedStep],
    base: Option<Oid>,
    target: &Target,
    id: Option<&str>,
) -> Result<(Option<Step>, Option<String>, Vec<String>)> {
    let (to, undone) = split(entries, target)?;
    let id = match id {
        Some(i) => i.to_string(),
        None => default_id(entries, target)?,
    };
    let tree_at = |c: Option<Oid>| -> Result<Option<Tree<'_>>> {
        Ok(match c {
            Some(c) => Some(repo.find_commit(c)?.tree()?),
            None => None,
        })
    };
    // The run's tree where it is rewound to, and where it is now.
    let then = tree_at(to.map(|e| e.commit).or(base))?;
    let now = tree_at(entries.last().map(|e| e.commit))?;
    // Every file that differs between there and here: what the undone
    // steps touched, and what the commits they adopted touched (an
    // adopting step's own tree is its parent's; the hand commit before it
    // made the change).
    let touched: BTreeSet<String> = crate::git::tree_changes(repo, then.as_ref(), now.as_ref())?
        .into_iter()
        .map(|c| c.path)
        .collect();
    let convert = crate::tree::convert::Convert::new(repo);
    let mut files = Map::new();
    for path in &touched {
        let (was, is) = (entry(then.as_ref(), path), entry(now.as_ref(), path));
        if was == is {
            continue;
        }
        let value = match was {
            None => Value::Null,
            Some(e) => {
                let blob = repo.find_blob(e.oid)?;
                if e.mode == MODE_LINK {
                    match std::str::from_utf8(blob.content()) {
                        Ok(t) => step::symlink_value(t.to_string()),
                        Err(_) => {
                            return Err(Error::other(format!(
                                "cannot undo {path}: its symlink target is not UTF-8"
                            )))
                        }
                    }
                } else {
                    // The `files` format takes the worktree's form.
                    let bytes = convert
                        .to_worktree(path, blob.content())
                        .map_err(Error::program)?;
                    let mode = if e.mode == MODE_EXEC {
                        "100755"
                    } else {
                        "100644"
                    };
                    // The blob is read in place, and the text moved: an undo
                    // of a large file holds it (and its copy, if converted)
                    // without copying it again.
                    let owned = bytes.into_owned();
                    drop(blob);
                    match String::from_utf8(owned) {
                        Ok(t) if !t.contains('\0') => step::text_value(t, Some(mode)),
                        Ok(t) => step::base64_value(t.into_bytes(), mode),
                        Err(b) => step::base64_value(b.into_bytes(), mode),
                    }
                }
            }
        };
        files.insert(path.clone(), value);
    }
    let undone_ids: Vec<String> = undone.iter().map(|e| e.id.clone()).collect();
    let to_id = to.map(|e| e.id.clone());
    if files.is_empty() {
        return Ok((None, to_id, undone_ids));
    }
    let message = match undone_ids.as_slice() {
        [one] => format!("undo {one}"),
        [first, .., last] => format!("undo {first} to {last}"),
        [] => unreachable!("split undoes at least one step"),
    };
    let mut object = step::object([
        ("id", Value::String(id.to_string())),
        ("files", Value::Object(files)),
        ("message", Value::String(message)),
    ]);
    // What the undone steps did beyond the artifact is compensated, newest
    // first: each effect's `compensate` becomes an effect of the undo step
    // (all of them were delivered before an undo is decided).
    let compensations = compensations(repo, undone)?;
    if let (false, Value::Object(map)) = (compensations.is_empty(), &mut object) {
        map.insert("effects".into(), Value::Array(compensations));
    }
    Ok((
        Some(Step::undoing(object, undone_ids.clone())?),
        to_id,
        undone_ids,
    ))
}

/// Whether any of the steps `undone` names (by id, among `entries`) has a
/// compensating command and was not decided on this box.
fn foreign_commands(
    repo: &Repository,
    run: &str,
    entries: &[AppliedStep],
    undone: &[String],
) -> Result<bool> {
    for e in entries.iter().filter(|e| undone.contains(&e.id)) {
        let commit = repo.find_commit(e.commit)?;
        let message = commit.message().unwrap_or_default();
        let count = crate::history::receipt::parse(message)
            .map(|r| r.effects)
            .unwrap_or(0);
        let effects = crate::history::receipt::effects(message, count).unwrap_or_default();
        if super::authority::decided(repo, run, &e.decision, &effects) {
            continue;
        }
        if effects
            .iter()
            .any(|f| matches!(f.compensate, Some(crate::plan::effect::Action::Command(_))))
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The `compensate` actions of the effects of `undone`, newest first, as
/// effects of their own.
fn compensations(repo: &Repository, undone: &[AppliedStep]) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for e in undone.iter().rev() {
        let commit = repo.find_commit(e.commit)?;
        let message = commit.message().unwrap_or_default();
        let count = crate::history::receipt::parse(message)
            .map(|r| r.effects)
            .unwrap_or(0);
        let effects = crate::history::receipt::effects(message, count).map_err(|m| {
            Error::corrupt(format!("step {}'s commit {}: {m}", e.id, short(e.commit)))
        })?;
        out.extend(effects.iter().rev().filter_map(|f| f.compensation()));
    }
    if out.len() > crate::plan::effect::MAX_EFFECTS {
        return Err(Error::input(format!(
            "the steps undone carry {} compensations; one undo step may carry at most {}: undo fewer steps at a time",
            out.len(),
            crate::plan::effect::MAX_EFFECTS
        )));
    }
    Ok(out)
}

fn entry(tree: Option<&Tree<'_>>, path: &str) -> Option<BlobEntry> {
    let e = tree?.get_path(Path::new(path)).ok()?;
    (e.kind() != Some(git2::ObjectType::Tree)).then(|| BlobEntry {
        oid: e.id(),
        mode: e.filemode() as u32,
    })
}

fn files_of(step: &Step) -> Vec<String> {
    match &step.content {
        crate::plan::step::Content::Files(f) => f.keys().cloned().collect(),
        _ => Vec::new(),
    }
}
