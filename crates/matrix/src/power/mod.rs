//! `crashtest --power-loss`: resume equivalence after a power cut, not
//! only after SIGKILL.
//!
//! Owns the sweep: record one uninterrupted run (box and local bare
//! remote) with strace(1), so that what libgit2 and every child process
//! write is seen, not only what this crate thinks it writes; turn the
//! record into logical operations ([`model::Record`]); at each cut point
//! build the states a power cut may leave under each file-system model
//! ([`model::Model`]), the least such state and seeded samples; resume each
//! with the same command and judge it as the crash matrix does. Invariant:
//! no state is built from a record that does not replay to the disk the
//! run left (checked before any state is built), and a row not SAME names
//! the operations its cut dropped.

pub mod fs;
pub mod model;
mod record;
pub mod trace;

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;

use serde::Serialize;

pub use model::{Model, Record, Rng};

use super::boxes::{self, command, new_box, output, scratch, scratch_dir, Env, Scratch};
use super::{
    durable_fingerprints, error_line, judge, plan_ids, rows_on_threads, BoxMode, Fingerprints,
    Matrix, Phase, Row, Summary, Verdict, UNARMED,
};
use crate::error::{Error, Result};

/// How wide a sweep is.
#[derive(Debug, Clone)]
pub struct Options {
    pub models: Vec<Model>,
    /// Random states per cut point and model, besides the least one.
    pub samples: usize,
    /// Cut points to take, chosen with the seed (None: every one).
    pub cuts: Option<usize>,
    pub seed: u64,
    /// Leave the state of every row not SAME in scratch space, as it was
    /// before the resume, and name it in the row.
    pub keep_failed: bool,
}

/// What a sweep recorded and explored.
#[derive(Debug, Clone, Serialize)]
pub struct Explored {
    /// Recorded operations on the box and the remote (summed over the
    /// records: one per way of flushing the models need).
    pub operations: usize,
    /// Of them, fsync/fdatasync calls.
    pub syncs: usize,
    /// Cut points in the record (before each sync, and the end).
    pub cut_points: usize,
    /// Cut points taken.
    pub cuts: usize,
    /// Distinct states resumed, per model (the vanished-box states count
    /// under the model their remote was built with).
    pub states: Vec<(Model, usize)>,
    pub seed: u64,
}

/// One state to resume.
struct State {
    cut: usize,
    model: Model,
    kept: Vec<bool>,
    box_mode: BoxMode,
}

fn recorder_missing(e: std::io::Error) -> Error {
    Error::program(format!(
        "crashtest --power-loss records the run with strace(1), which could not be run ({e}); install it (Debian: apt-get install strace)"
    ))
}

/// The resume of a power-loss state: uninterrupted, in a new boot.
const REBOOTED: Phase = Phase {
    after_reboot: true,
    ..UNARMED
};

/// Run `env`'s command once under strace in a fresh scratch box; the
/// scratch space and the record.
fn record(env: &Env) -> Result<(Scratch, std::path::PathBuf, Record, Fingerprints)> {
    Command::new("strace")
        .arg("-V")
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(recorder_missing)?;
    let s = scratch(env)?;
    let dir = new_box(&s, env, 0, env.base.is_some())?;
    let before = fs::Fs::snapshot(&s.root)?;
    let trace_dir = scratch_dir()?;
    let trace_file = trace_dir.path().join("trace");
    let inner = command(env, &dir, &s.bare, &UNARMED);
    let mut cmd = Command::new("strace");
    // `?name`: a call this kernel's strace does not know is no error.
    let calls: Vec<String> = trace::CALLS.iter().map(|c| format!("?{c}")).collect();
    cmd.args(["-f", "-qq", "-y", "-xx", "-s", "268435456", "-e"])
        .arg(format!("trace={}", calls.join(",")))
        .arg("-o")
        .arg(&trace_file)
        .current_dir(&s.root)
        .arg("--")
        .arg(inner.get_program())
        .args(inner.get_args());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let o = output(cmd, Path::new("strace"))?;
    if o.code != Some(0) {
        return Err(Error::other(format!(
            "the recorded run failed (exit {:?}): {}",
            o.code,
            error_line(&o.stderr)
        )));
    }
    let text =
        std::fs::read(&trace_file).map_err(|e| Error::io("cannot read strace's record", e))?;
    let calls = trace::parse(&String::from_utf8_lossy(&text))?;
    let rec = Record::build(&s.root, &s.root, before, &calls)?;
    if let Some(diff) = rec.after().differs_from_disk(&s.root)? {
        return Err(Error::program(format!(
            "the record of the run does not replay to the disk the run left ({diff}): no crash state built from it could be trusted"
        )));
    }
    let (reference, _) = durable_fingerprints(&s.bare)?;
    Ok((s, dir, rec, reference))
}

/// The states to resume: for each cut taken and model, the least state and
/// `samples` random ones (distinct), each with the box kept; and per cut a
/// vanished box over the least remote.
fn states(rec: &Record, opts: &Options) -> (Vec<State>, usize) {
    let mut rng = Rng(opts.seed);
    let mut cuts = rec.cut_points();
    if let Some(n) = opts.cuts {
        if n < cuts.len() {
            // Seeded choice, the end always in.
            let last = cuts.pop().unwrap_or(0);
            let mut chosen = HashSet::new();
            while chosen.len() < n.saturating_sub(1).min(cuts.len()) {
                chosen.insert(cuts[rng.below(cuts.len() as u64) as usize]);
            }
            cuts = chosen.into_iter().collect();
            cuts.push(last);
            cuts.sort();
        }
    }
    let mut out = Vec::new();
    let mut seen: HashSet<Vec<bool>> = HashSet::new();
    for &cut in &cuts {
        for &m in &opts.models {
            let mut candidates = vec![rec.minimal(cut, m)];
            for _ in 0..opts.samples {
                candidates.push(rec.sample(cut, m, &mut rng));
            }
            for kept in candidates {
                if seen.insert(kept.clone()) {
                    out.push(State {
                        cut,
                        model: m,
                        kept,
                        box_mode: BoxMode::Survive,
                    });
                }
            }
        }
        let m = *opts.models.last().unwrap_or(&Model::Posix);
        out.push(State {
            cut,
            model: m,
            kept: rec.minimal(cut, m),
            box_mode: BoxMode::Vanish,
        });
    }
    (out, cuts.len())
}

/// Resume one state: write it to a fresh scratch root, resume, judge.
fn resume(
    env: &Env,
    opts: &Options,
    rec: &Record,
    ids: &[String],
    state: &State,
    reference: &Fingerprints,
) -> Result<Row> {
    let tmp = scratch_dir()?;
    let root = tmp.path().to_path_buf();
    rec.state(&state.kept).materialize(&rec.root, &root)?;
    let s = Scratch {
        _tmp: tmp,
        bare: root.join("remote.git"),
        root: root.clone(),
    };
    // What the run had reported durable before the cut must be on the
    // remote the cut left, before anything resumes (a resume that applies
    // a lost step again would hide the loss).
    let lost = lost_promise(rec, state.cut, &s.bare);
    let dir = match state.box_mode {
        BoxMode::Survive => Ok(root.join("box0")),
        BoxMode::Vanish => {
            let _ = std::fs::remove_dir_all(root.join("box0"));
            new_box(&s, env, 1, true)
        }
    };
    // The step in flight: the first not durable in the cut's remote.
    let step = durable_fingerprints(&s.bare)
        .ok()
        .and_then(|(_, done)| ids.iter().find(|i| !done.contains(i)).cloned())
        .unwrap_or_else(|| "-".into());
    let point = format!("op {}/{}", state.cut, rec.ops.len());
    let mut row = Row::new(&step, &point, state.box_mode);
    row.op = Some(state.cut);
    row.model = Some(state.model);
    match dir {
        Ok(dir) => {
            let o = boxes::run_once(env, &dir, &s.bare, &REBOOTED)?;
            if let Err(e) = judge(env, &dir, &s.bare, &o, reference, &mut row) {
                row.verdict = Verdict::Diverged;
                row.reason = format!("the durable branch cannot be read after the resume: {e}");
            }
        }
        // A new box is a clone of the remote the cut left.
        Err(e) => {
            row.verdict = Verdict::Diverged;
            row.reason = format!("a fresh clone of the remote fails after the cut: {e}");
        }
    }
    if let Some(lost) = lost {
        row.verdict = Verdict::Diverged;
        row.reason = lost;
    }
    if row.verdict != Verdict::Same && opts.keep_failed {
        let again = scratch_dir()?;
        rec.state(&state.kept)
            .materialize(&rec.root, again.path())?;
        row.kept = Some(again.keep().display().to_string());
    }
    if row.verdict != Verdict::Same {
        // The likeliest causes first: what the cut dropped in the box's
        // worktree, then names (creates, renames, unlinks), then data.
        let mut dropped: Vec<usize> = (0..state.cut).filter(|&i| !state.kept[i]).collect();
        dropped.sort_by_key(|&i| (!rec.in_worktree(i), !rec.ops[i].is_name(), i));
        row.dropped = dropped
            .iter()
            .take(8)
            .map(|&i| format!("#{i} {}", rec.ops[i].describe(&rec.root, rec)))
            .collect();
        if dropped.len() > 8 {
            row.dropped
                .push(format!("… and {} more", dropped.len() - 8));
        }
    }
    Ok(row)
}

/// Whether a branch of the remote that the recorded run had moved and
/// made durable before operation `cut` (a step it reported applied) is
/// missing, torn or behind in the state at `bare`: the reason if so.
fn lost_promise(rec: &Record, cut: usize, bare: &Path) -> Option<String> {
    let heads = rec.root.join("remote.git").join("refs").join("heads");
    let promised = rec.promised(&heads, cut);
    if promised.is_empty() {
        return None;
    }
    let remote = match git2::Repository::open_bare(bare) {
        Ok(r) => r,
        Err(e) => {
            return Some(format!(
                "the remote cannot be opened after the cut ({}), though the run had made steps durable on it",
                e.message()
            ))
        }
    };
    for (path, bytes) in promised {
        let rel = path
            .strip_prefix(rec.root.join("remote.git"))
            .unwrap_or(&path);
        let refname = rel.to_string_lossy().into_owned();
        let Some(want) = std::str::from_utf8(&bytes)
            .ok()
            .and_then(|t| git2::Oid::from_str(t.trim()).ok())
        else {
            continue;
        };
        let lost = |why: String| {
            Some(format!(
                "a step reported applied was lost: the run had made {refname} = {} durable before the cut (op {cut}), and after it {why}",
                crate::git::short(want)
            ))
        };
        let now = match std::fs::read(bare.join(rel)) {
            Ok(on_disk) => {
                let Some(now) = std::str::from_utf8(&on_disk)
                    .ok()
                    .and_then(|t| git2::Oid::from_str(t.trim()).ok())
                else {
                    return lost(format!(
                        "the file holds {:?}",
                        String::from_utf8_lossy(&on_disk[..on_disk.len().min(60)])
                    ));
                };
                now
            }
            // Packed since (or gone): git's word.
            Err(_) => match remote.refname_to_id(&refname) {
                Ok(now) => now,
                Err(e) => return lost(format!("it cannot be read: {}", e.message())),
            },
        };
        if now != want && !remote.graph_descendant_of(now, want).unwrap_or(false) {
            return lost(format!("it is {}", crate::git::short(now)));
        }
        if let Some(missing) = missing_object(&remote, want) {
            return lost(format!("the remote lacks {missing}, which it names"));
        }
    }
    None
}

/// The first object the commit `id` needs (itself, its tree, every tree
/// and blob under it) that `repo` lacks or cannot read.
fn missing_object(repo: &git2::Repository, id: git2::Oid) -> Option<String> {
    let Ok(commit) = repo.find_commit(id) else {
        return Some(format!("the commit {}", crate::git::short(id)));
    };
    let mut trees = vec![commit.tree_id()];
    while let Some(t) = trees.pop() {
        let Ok(tree) = repo.find_tree(t) else {
            return Some(format!("the tree {}", crate::git::short(t)));
        };
        for e in tree.iter() {
            match e.kind() {
                Some(git2::ObjectType::Tree) => trees.push(e.id()),
                Some(git2::ObjectType::Blob) if repo.find_blob(e.id()).is_err() => {
                    return Some(format!("the blob {}", crate::git::short(e.id())))
                }
                _ => {}
            }
        }
    }
    None
}

/// The whole sweep on `jobs` threads; `progress(done, total)` after each
/// state. Models whose syncfs does not flush ([`Model::syncfs_flushes`])
/// explore a run of their own, recorded flushing file by file.
pub fn run(
    env: &Env,
    opts: &Options,
    jobs: usize,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Matrix> {
    let (trusting, per_file): (Vec<Model>, Vec<Model>) =
        opts.models.iter().partition(|m| m.syncfs_flushes());
    let mut out: Option<Matrix> = None;
    for (models, flush_files) in [(trusting, false), (per_file, true)] {
        if models.is_empty() {
            continue;
        }
        let env = Env {
            flush_files: env.flush_files || flush_files,
            ..env.clone()
        };
        let opts = Options {
            models,
            ..opts.clone()
        };
        let m = sweep(&env, &opts, jobs, progress)?;
        out = Some(match out {
            None => m,
            Some(mut all) => {
                all.rows.extend(m.rows);
                all.summary = Summary::of(&all.rows);
                if let (Some(a), Some(b)) = (all.power.as_mut(), m.power) {
                    a.operations += b.operations;
                    a.syncs += b.syncs;
                    a.cut_points += b.cut_points;
                    a.cuts += b.cuts;
                    a.states.extend(b.states);
                }
                all
            }
        });
    }
    out.ok_or_else(|| Error::program("crashtest --power-loss: no file-system model given"))
}

/// One recorded run's sweep.
fn sweep(
    env: &Env,
    opts: &Options,
    jobs: usize,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Matrix> {
    crate::git::setup()?;
    let ids = plan_ids(env)?;
    let (scratch, _dir, rec, reference) = record(env)?;
    // The record is in memory: the recorded root goes now, so a state
    // that still named it (a path the root's replacement missed) fails
    // loudly instead of writing into it.
    drop(scratch);
    let (states, cuts) = states(&rec, opts);
    let rows = rows_on_threads(states.len(), jobs, progress, &|i| {
        resume(env, opts, &rec, &ids, &states[i], &reference)
    })?;
    let per_model = opts
        .models
        .iter()
        .map(|&m| (m, states.iter().filter(|s| s.model == m).count()))
        .collect();
    Ok(Matrix {
        runner: env.runner,
        reference,
        summary: Summary::of(&rows),
        rows,
        power: Some(Explored {
            operations: rec.ops.len(),
            syncs: rec
                .ops
                .iter()
                .filter(|o| matches!(o, model::Op::Sync { .. } | model::Op::SyncAll))
                .count(),
            cut_points: rec.cut_points().len(),
            cuts,
            states: per_model,
            seed: opts.seed,
        }),
    })
}
