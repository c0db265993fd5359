//! `record`: what an agent changed in the worktree with its own tools
//! becomes one step — a `files` step whose object is the recorded decision,
//! one commit with its receipt (`Step-Source: record`), made durable like
//! every step.
//!
//! Owns turning the worktree's changes into a step object, and the rerun of
//! a record. Invariant: record writes no worktree file — the step is built
//! from what is on disk, and only the branch and the index catch up with
//! it — so no change in the worktree is ever lost; an id that has a receipt
//! is done when the worktree's changes still make that decision, and is
//! refused when they make another.

use std::collections::BTreeSet;
use std::path::Path;

use git2::{Repository, Status, StatusOptions, Tree};
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::crash;
use crate::error::{Error, Refusal, RefusalKind, Result};
use crate::git::{short, BlobEntry, MODE_EXEC, MODE_LINK};
use crate::history::ledger::AppliedStep as Receipt;
use crate::plan::step::{self, decision_digest, validate_id, Step};
use crate::settings::Settings;
use crate::sync::reconcile::Reconciled;
use crate::workdir::worktree;

use super::session::{ApplyOptions, Reporter, Session, Source, StepOutcome};

/// What to record.
#[derive(Debug, Clone, Default)]
pub struct RecordOptions {
    pub id: String,
    pub message: Option<String>,
    /// Kept in the receipt's message, as a step's `intent`.
    pub intent: Option<Value>,
    pub allow_duplicate_hunks: bool,
}

/// The result of `record`.
#[derive(Debug, Serialize)]
pub struct RecordReport {
    pub run: String,
    pub branch: String,
    pub durable: &'static str,
    pub step: String,
    /// `recorded` now, or `already-recorded` (a rerun: nothing new).
    pub status: &'static str,
    pub commit: String,
    pub decision: String,
    pub files: Vec<String>,
    pub reconcile: Reconciled,
    pub artifact: String,
    pub history: String,
}

/// Record the worktree's changes against the run's head as step `opts.id`.
pub fn record(
    repo: &Repository,
    s: &Settings,
    opts: &RecordOptions,
    ui: &mut dyn Reporter,
) -> Result<RecordReport> {
    crash::validate_env().map_err(Error::input)?;
    worktree::workdir(repo)?;
    validate_id(&opts.id).map_err(|m| Error::Input {
        step: None,
        line: None,
        message: format!("--id: {m}"),
    })?;
    let apply = ApplyOptions {
        allow_duplicate_hunks: opts.allow_duplicate_hunks,
        ..ApplyOptions::default()
    };
    let mut session = Session::open_in_place(repo, s, apply, ui)?.load(false)?;
    if let Some(receipt) = session.receipt(&opts.id).cloned() {
        return rerun(repo, s, session, opts, &receipt);
    }
    let head_tree = session
        .head()
        .map(|h| repo.find_commit(h)?.tree())
        .transpose()?;
    if let Some(at) = interrupted_update(repo)? {
        finish_update(repo, at, &opts.id)?;
        ui.note(&format!(
            "finished a worktree update that was interrupted (from {} to the run's head)",
            short(at)
        ));
    }
    ensure_index_agrees(repo, &opts.id)?;
    let Some(value) = worktree_step(repo, head_tree.as_ref(), opts)? else {
        return Err(Error::input(format!(
            "step {}: nothing to record: the worktree has no changes against the run's head ({})",
            opts.id,
            session.head().map_or("no commits".into(), short)
        ))
        .with_hint("make the edits first; ignored files are never recorded"));
    };
    let step = Step::from_value(value, 0)?;
    if let Some(note) = session.identity_note() {
        ui.note(&note);
    }
    session.stage(&step, Some(Source::Record))?;
    // The content is in the object database now; only the step's id and
    // decision are kept (a large file is not held through the push).
    let Step { id, digest, .. } = { step };
    let Some(outcome) = session.flush()?.pop() else {
        return Err(Error::internal("a recorded step has no outcome"));
    };
    ui.step(&outcome, None);
    let StepOutcome::Applied { commit, files, .. } = outcome else {
        return Err(Error::internal("a recorded step was not applied"));
    };
    let done = session.finish()?;
    Ok(RecordReport {
        run: s.run.clone(),
        branch: s.branch.clone(),
        durable: s.durable_kind(),
        step: id,
        status: "recorded",
        commit,
        decision: digest,
        files,
        reconcile: done.reconcile,
        artifact: done.artifact,
        history: done.history,
    })
}

/// `record --id ID` again, ID having a receipt: done if the worktree's
/// changes against the step's parent still make its decision (the index
/// is brought up to the step, which a crash may have kept from it), else
/// refused.
fn rerun(
    repo: &Repository,
    s: &Settings,
    session: Session<'_>,
    opts: &RecordOptions,
    receipt: &Receipt,
) -> Result<RecordReport> {
    let commit = repo.find_commit(receipt.commit)?;
    let parent = commit.parent(0).ok().map(|p| p.tree()).transpose()?;
    let value = worktree_step(repo, parent.as_ref(), opts)?;
    let digest = value.as_ref().map(decision_digest);
    if digest.as_deref() != Some(receipt.decision.as_str()) {
        let later = session.head() != Some(receipt.commit);
        return Err(Error::from(Refusal {
            kind: RefusalKind::DigestMismatch,
            step: Some(opts.id.clone()),
            saw: format!(
                "step {} already has a receipt in {} with decision {}, but the worktree's changes since its parent {}{}",
                opts.id,
                short(receipt.commit),
                receipt.decision,
                match &digest {
                    Some(d) => format!("make decision {d}"),
                    None => "are none".into(),
                },
                if later {
                    " (steps were recorded after it)"
                } else {
                    ""
                }
            ),
            would: "record a second, different decision under the same step id".into(),
            hint: format!(
                "a step id is its idempotency key: record the new changes under a new id (`git steps record --id <new id>`); `git show {}` shows the recorded step",
                short(receipt.commit)
            ).into(),
        }));
    }
    // Done. The index catches up with the step where a crash kept it back
    // (the files are the worktree's already).
    let changes = crate::git::tree_changes(repo, parent.as_ref(), Some(&commit.tree()?))?;
    let index = crate::git::index(repo)?;
    let behind: Vec<_> = changes
        .iter()
        .filter(|c| {
            let have = index.get_path(Path::new(&c.path), 0).map(|e| BlobEntry {
                oid: e.id,
                mode: e.mode,
            });
            have != c.new
        })
        .cloned()
        .collect();
    if !behind.is_empty() {
        let dest = worktree::Dest {
            run: &s.run,
            commit: receipt.commit,
        };
        worktree::update_keeping(repo, dest, &behind, &opts.id, &|_| true)?;
    }
    let files = changes.iter().map(|c| c.path.clone()).collect();
    let done = session.finish()?;
    Ok(RecordReport {
        run: s.run.clone(),
        branch: s.branch.clone(),
        durable: s.durable_kind(),
        step: opts.id.clone(),
        status: "already-recorded",
        commit: receipt.commit.to_string(),
        decision: receipt.decision.clone(),
        files,
        reconcile: done.reconcile,
        artifact: done.artifact,
        history: done.history,
    })
}

/// Refuse an index that holds, for some path, a version that is neither
/// the head's nor the worktree's: a worktree update that was interrupted
/// (its files half written, the index not yet), or a partial `git add`.
/// Recording then would take a half-finished state for the agent's work.
fn ensure_index_agrees(repo: &Repository, id: &str) -> Result<()> {
    let mut so = StatusOptions::new();
    so.include_untracked(false)
        .exclude_submodules(true)
        .renames_head_to_index(false);
    let statuses = repo.statuses(Some(&mut so))?;
    let index = crate::git::index(repo)?;
    let workdir = worktree::workdir(repo)?;
    for st in statuses.iter() {
        let staged = Status::INDEX_NEW
            | Status::INDEX_MODIFIED
            | Status::INDEX_DELETED
            | Status::INDEX_TYPECHANGE;
        if !st.status().intersects(staged) {
            continue;
        }
        let path = String::from_utf8_lossy(st.path_bytes()).into_owned();
        let in_index = index.get_path(Path::new(&path), 0).map(|e| BlobEntry {
            oid: e.id,
            mode: e.mode,
        });
        let disk = worktree::on_disk(&workdir, &path)?;
        if !worktree::same(repo, &path, &disk, &in_index)? {
            return Err(Error::from(Refusal {
                kind: RefusalKind::DirtyWorktree,
                step: Some(id.to_string()),
                saw: format!(
                    "the index holds a version of {path} that is neither the run head's nor the worktree's (a partial `git add`, or a worktree update that was interrupted)"
                ),
                would: "record a step from a worktree the index disagrees with".into(),
                hint: format!(
                    "`git add {path}` if the worktree's version is the one to record, then rerun; if a git-steps command was interrupted, rerun it first"
                ).into(),
            }));
        }
    }
    Ok(())
}

/// Whether the index is still where a worktree update found it: for one of
/// the head's last 64 first-parent ancestors A, every path that differs
/// between A and the head holds A's version in the index (and none the
/// head's). The
/// index is written once, after the files, so that is what an update killed
/// after the branch moved leaves; recorded, its missing part would take
/// back the steps it was bringing in. (An agent that `git rm`s exactly the
/// files the last step created looks the same, and is refused too.)
fn interrupted_update(repo: &Repository) -> Result<Option<git2::Oid>> {
    let Ok(head) = repo.head().and_then(|h| h.peel_to_commit()) else {
        return Ok(None);
    };
    let index = crate::git::index(repo)?;
    let head_tree = head.tree()?;
    let mut c = head.clone();
    for _ in 0..64 {
        let Ok(parent) = c.parent(0) else { break };
        let changes = crate::git::tree_changes(repo, Some(&parent.tree()?), Some(&head_tree))?;
        let indexed = |p: &str| {
            index.get_path(Path::new(p), 0).map(|e| BlobEntry {
                oid: e.id,
                mode: e.mode,
            })
        };
        if changes.iter().any(|ch| indexed(&ch.path) == ch.new) {
            // The index has the head's version of something changed since.
            return Ok(None);
        }
        if !changes.is_empty() && changes.iter().all(|ch| indexed(&ch.path) == ch.old) {
            return Ok(Some(parent.id()));
        }
        // Not there yet: an update over several steps started further down.
        c = parent;
    }
    Ok(None)
}

/// Finish the worktree update from `from` to the head that a kill left
/// behind, keeping every edit of the agent's: a path the update brings in
/// is written where the worktree still holds the old version, only indexed
/// where it holds the new one, and refused where it holds anything else.
fn finish_update(repo: &Repository, from: git2::Oid, id: &str) -> Result<()> {
    let head = repo.head()?.peel_to_commit()?;
    let changes = crate::git::tree_changes(
        repo,
        Some(&repo.find_commit(from)?.tree()?),
        Some(&head.tree()?),
    )?;
    let kept = match worktree::keep_in_place(repo, &changes, Some(id))? {
        Ok(kept) => kept,
        Err(path) => {
            return Err(Error::from(Refusal {
                kind: RefusalKind::DirtyWorktree,
                step: Some(id.to_string()),
                saw: format!(
                    "a worktree update to the run's head was interrupted, and {path} holds an edit of its own where the update brings in a new version"
                ),
                would: "overwrite the edit, or record the update's missing part as an edit".into(),
                hint: format!(
                    "move {path} out of the way, rerun the command that was interrupted (or `git steps resume`), then make the edit again and record"
                ).into(),
            }))
        }
    };
    let step = crate::history::receipt::parse(head.message().unwrap_or_default())
        .map(|r| r.id)
        .unwrap_or_else(|_| "-".into());
    let run = crate::history::receipt::parse(head.message().unwrap_or_default())
        .map(|r| r.run)
        .unwrap_or_else(|_| "-".into());
    let dest = worktree::Dest {
        run: &run,
        commit: head.id(),
    };
    worktree::update_keeping(repo, dest, &changes, &step, &|c| {
        changes
            .iter()
            .position(|x| std::ptr::eq(x, c))
            .is_some_and(|i| kept[i])
    })
}

/// The step object for the worktree's changes against `base` (the tree a
/// step would apply to): a `files` step holding each changed path —
/// modified, added (untracked, not ignored) or deleted — as a string (UTF-8
/// text whose executable bit is unchanged), an object (`text` or `base64`
/// with `mode`, or `symlink`), or null. None when nothing changed.
pub fn worktree_step(
    repo: &Repository,
    base: Option<&Tree<'_>>,
    opts: &RecordOptions,
) -> Result<Option<Value>> {
    let mut dopts = git2::DiffOptions::new();
    dopts
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_typechange(true)
        .ignore_submodules(true);
    let diff = repo.diff_tree_to_workdir(base, Some(&mut dopts))?;
    let mut paths = BTreeSet::new();
    for d in diff.deltas() {
        for f in [d.old_file(), d.new_file()] {
            if let Some(p) = f.path_bytes() {
                let p = std::str::from_utf8(p).map_err(|_| {
                    Error::input(format!(
                        "step {}: cannot record {:?}: the path is not UTF-8",
                        opts.id,
                        String::from_utf8_lossy(p)
                    ))
                })?;
                paths.insert(p.to_string());
            }
        }
    }
    let workdir = worktree::workdir(repo)?;
    let mut files = Map::new();
    for p in paths {
        if p.ends_with('/') {
            return Err(Error::input(format!(
                "step {}: cannot record {p}: it is a git repository of its own inside the worktree",
                opts.id
            ))
            .with_hint("record takes files; move the repository out, or ignore it in .gitignore"));
        }
        let in_base = match base.map(|t| t.get_path(Path::new(&p))) {
            Some(Ok(e)) if e.kind() != Some(git2::ObjectType::Tree) => Some(BlobEntry {
                oid: e.id(),
                mode: e.filemode() as u32,
            }),
            _ => None,
        };
        // Measured before it is read: a file over the cap is never held.
        let size = std::fs::symlink_metadata(workdir.join(&p)).map_or(0, |m| m.len());
        let max = crate::tree::build::max_file_bytes();
        if size > max as u64 {
            return Err(Error::Input {
                step: Some(opts.id.clone()),
                line: None,
                message: format!(
                    "cannot record {p}: it is {size} bytes, over the {max} bytes a file may have (steps.maxFileSize; git hosts refuse files over 100 MiB): ignore it in .gitignore, or raise the cap if it belongs in the run (`git config steps.maxFileSize 200m`)"
                ),
            });
        }
        let disk = worktree::on_disk(&workdir, &p)?;
        if worktree::same(repo, &p, &disk, &in_base)? {
            continue;
        }
        let value = match disk {
            None if in_base.is_some() => Value::Null,
            None => continue,
            Some((bytes, MODE_LINK)) => match String::from_utf8(bytes) {
                Ok(target) => step::symlink_value(target),
                Err(_) => {
                    return Err(Error::input(format!(
                        "step {}: cannot record the symlink {p}: its target is not UTF-8",
                        opts.id
                    )))
                }
            },
            Some((bytes, mode)) => {
                let was_exec = in_base.is_some_and(|e| e.mode == MODE_EXEC);
                let mode_kept = (mode == MODE_EXEC) == was_exec;
                let mode_str = if mode == MODE_EXEC {
                    "100755"
                } else {
                    "100644"
                };
                // Moved into the step, never copied.
                match String::from_utf8(bytes) {
                    Ok(text) if !text.contains('\0') && mode_kept => step::text_value(text, None),
                    Ok(text) if !text.contains('\0') => step::text_value(text, Some(mode_str)),
                    Ok(text) => binary(&workdir, &p, text.into_bytes(), mode_str, &opts.id)?,
                    Err(e) => binary(&workdir, &p, e.into_bytes(), mode_str, &opts.id)?,
                }
            }
        };
        files.insert(p, value);
    }
    if files.is_empty() {
        return Ok(None);
    }
    let mut step = step::object([
        ("id", Value::String(opts.id.clone())),
        ("files", Value::Object(files)),
    ]);
    if let Some(m) = &opts.message {
        step["message"] = json!(m);
    }
    if let Some(i) = &opts.intent {
        step["intent"] = i.clone();
    }
    Ok(Some(step))
}

/// The base64 form of a binary file whose `bytes` were read from `path`.
/// A large one is encoded from the file as it is read again, once `bytes`
/// are dropped, so its bytes and their encoding are never held together
/// (133 MB for a 100 MB file, not 233 MB); the second read must be the
/// same file, by its object id, or the file changed while it was recorded.
fn binary(workdir: &Path, path: &str, bytes: Vec<u8>, mode: &str, id: &str) -> Result<Value> {
    use sha1::Digest;
    use std::io::{Read, Write};
    if bytes.len() < 1 << 20 {
        return Ok(step::base64_value(bytes, mode));
    }
    let (len, want) = (
        bytes.len(),
        git2::Oid::hash_object(git2::ObjectType::Blob, &bytes)?,
    );
    drop(bytes);
    let changed = || {
        Error::from(Refusal {
            kind: RefusalKind::DirtyWorktree,
            step: Some(id.to_string()),
            saw: format!("{path} changed while it was being recorded"),
            would: "record a version of the file that was never whole on disk".into(),
            hint: "rerun `git steps record` once the file is written".into(),
        })
    };
    let mut file = std::fs::File::open(workdir.join(path))
        .map_err(|e| Error::io(format!("cannot read {path}"), e))?;
    let engine = &base64::engine::general_purpose::STANDARD;
    let mut encoder = base64::write::EncoderStringWriter::from_consumer(
        String::with_capacity(len.div_ceil(3) * 4),
        engine,
    );
    let mut hash = sha1::Sha1::new();
    hash.update(format!("blob {len}\0").as_bytes());
    let (mut buf, mut seen) = (vec![0u8; 1 << 16], 0usize);
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| Error::io(format!("cannot read {path}"), e))?;
        if n == 0 {
            break;
        }
        seen += n;
        if seen > len {
            return Err(changed());
        }
        hash.update(&buf[..n]);
        encoder.write_all(&buf[..n])?;
    }
    if seen != len || hash.finalize()[..] != *want.as_bytes() {
        return Err(changed());
    }
    Ok(step::base64_encoded_value(encoder.into_inner(), mode))
}
