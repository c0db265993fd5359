//! `git steps demo`: the whole story on an embedded default.

use std::io::Write;
use std::time::Instant;

use super::crashtest::{jobs, summary_line};
use super::{emit_json, Ctx, Failure};
use crate::error::Error;
use crate::matrix::{self, BoxMode, Env, Matrix, Runner, Verdict};

/// The invariant's example: step i adds the line `line-i`.
const PLAN: &str = include_str!("../../fixtures/eight-steps.jsonl");

/// Show resume equivalence on an embedded default, in seconds.
///
/// Takes the built-in 8-step plan (step i adds the line `line-i`), and in a
/// scratch repository with a local bare remote runs the crash matrix twice:
/// against the classic runner (cursor checkpointed every 3 steps, receipts on
/// the box, no trailer check) and against git-steps. Prints both matrices
/// and a one-line verdict. Needs no setup and no network.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Rows run at once [default: the number of cores].
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
}

fn cell(m: &Matrix, step: &str, point: &str, b: BoxMode) -> &'static str {
    match m
        .rows
        .iter()
        .find(|r| r.step == step && r.point == point && r.box_mode == b)
    {
        Some(r) => match r.verdict {
            Verdict::Same => ".",
            Verdict::Refused => "R",
            Verdict::Diverged => "D",
        },
        None => " ",
    }
}

/// What the grids' words mean: the two box modes, and each crash point
/// the grids show, as the state a crash there leaves.
fn legend(matrices: &[Matrix], out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "How to read the grids:")?;
    writeln!(
        out,
        "  (survive): the box is killed at the point and reruns the same command on its own disk"
    )?;
    writeln!(out, "  (vanish):  the box is killed and thrown away; a fresh clone of the remote reruns the command")?;
    writeln!(
        out,
        "  the crash points, in the order a step passes them; a crash there leaves:"
    )?;
    let mut shown: Vec<&str> = Vec::new();
    // git-steps' points first (its grid is the last), then the classic
    // runner's own.
    for m in matrices.iter().rev() {
        for r in &m.rows {
            if shown.contains(&r.point.as_str()) {
                continue;
            }
            shown.push(&r.point);
            let state = match crate::crash::POINTS.iter().find(|p| p.name == r.point) {
                Some(p) => p.state.to_string(),
                None => crate::matrix::classic::POINTS
                    .iter()
                    .find(|p| p.name == r.point)
                    .map_or(String::new(), |p| {
                        format!("(the classic runner) {}", p.state)
                    }),
            };
            writeln!(out, "    {:<18} {state}", r.point)?;
        }
    }
    writeln!(out, "  More: docs/guide.md (crash points and the crash matrix); `git steps crashtest PLAN` runs the matrix on your own plan.\n")
}

/// A compact grid: one line per crash point and box, one column per step.
fn grid(m: &Matrix, out: &mut dyn Write) -> std::io::Result<()> {
    let mut steps: Vec<&str> = Vec::new();
    let mut points: Vec<&str> = Vec::new();
    for r in &m.rows {
        if !steps.contains(&r.step.as_str()) {
            steps.push(&r.step);
        }
        if !points.contains(&r.point.as_str()) {
            points.push(&r.point);
        }
    }
    let pw = points.iter().map(|p| p.len()).max().unwrap_or(5) + 10;
    write!(out, "  {:<pw$}", "crash point (box)")?;
    for s in &steps {
        write!(out, " {s:>3}")?;
    }
    writeln!(out)?;
    for p in &points {
        for b in [BoxMode::Survive, BoxMode::Vanish] {
            if !m.rows.iter().any(|r| r.point == *p && r.box_mode == b) {
                continue;
            }
            let label = format!(
                "{p} ({})",
                if b == BoxMode::Survive {
                    "survive"
                } else {
                    "vanish"
                }
            );
            write!(out, "  {label:<pw$}")?;
            for s in &steps {
                write!(out, " {:>3}", cell(m, s, p, b))?;
            }
            writeln!(out)?;
        }
    }
    writeln!(out, "  {}", summary_line(m))?;
    Ok(())
}

pub fn run(ctx: &Ctx, a: Args, out: &mut dyn Write) -> Result<(), Failure> {
    let started = Instant::now();
    let dir = tempfile::Builder::new()
        .prefix("git-steps-demo-")
        .tempdir()
        .map_err(|e| Error::io("cannot make a scratch dir", e))?;
    let plan = dir.path().join("eight-steps.jsonl");
    std::fs::write(&plan, PLAN)?;
    let exe = std::env::current_exe().map_err(|e| Error::io("cannot find this binary", e))?;
    let jobs = jobs(a.jobs);
    let mut matrices = Vec::new();
    for runner in [
        Runner::ClassicDurableLog,
        Runner::ClassicVolatileLog,
        Runner::GitSteps,
    ] {
        let progress = ctx.ui.matrix_progress(runner.name());
        let env = Env {
            exe: exe.clone(),
            plan: plan.clone(),
            runner,
            base: None,
            batch: 1,
            flush_files: false,
        };
        matrices.push(matrix::run(&env, jobs, &|d, t| progress.tick(d, t))?);
    }
    let ours = &matrices[2];
    let classic_diverged: usize = matrices[..2].iter().map(|m| m.summary.diverged).sum();
    let classic_rows: usize = matrices[..2].iter().map(|m| m.rows.len()).sum();
    let holds = ours.summary.diverged == 0 && ours.summary.refused == 0 && classic_diverged > 0;
    let verdict = format!(
        "verdict: {} — git-steps: {}/{} crash rows resume to the same fingerprint; the classic runner diverges in {classic_diverged} of {classic_rows} (duplicated or lost hunks)",
        if holds { "resume equivalence holds" } else { "UNEXPECTED" },
        ours.summary.same,
        ours.rows.len(),
    );
    if ctx.ui.json {
        emit_json(
            out,
            "demo",
            &serde_json::json!({
                "plan": PLAN.lines().collect::<Vec<_>>(),
                "matrices": matrices,
                "holds": holds,
                "verdict": verdict,
            }),
        )?;
    } else {
        writeln!(out, "git-steps demo: the 8-step plan (step i adds `line-i`), a scratch repository and a local bare remote.")?;
        writeln!(out, "Each cell: crash the run at that point of that step, resume with the same command, compare fingerprints.")?;
        writeln!(out, "  . SAME   R REFUSED   D DIVERGED\n")?;
        for m in &matrices {
            writeln!(out, "{}", m.runner.name())?;
            grid(m, out)?;
            writeln!(out)?;
        }
        legend(&matrices, out)?;
        writeln!(out, "{verdict}")?;
    }
    ctx.ui.status(&format!(
        "demo took {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    if holds {
        Ok(())
    } else {
        Err(Error::other(verdict).into())
    }
}
