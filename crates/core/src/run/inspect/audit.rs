//! Auditing a run from any clone: the head an audit reads when the run is
//! not checked out here, one step's whole record (`show`), and every run
//! this clone and its remote hold (`runs`).
//!
//! Owns where an audit finds a run. Invariant: nothing here touches the
//! worktree, the index or a branch; what the remote holds is fetched only
//! into git-steps' private refs (`refs/steps/remote/…`).

use git2::{Oid, Repository};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::git::short;
use crate::history::{ledger, receipt};
use crate::settings::Settings;

/// The head an audit reads, and where it came from when it is not this
/// clone's branch.
pub struct Audited {
    pub head: Option<Oid>,
    /// None: this clone's own branch. Some: a sentence naming the remote
    /// ref that was read instead (the run is not checked out here).
    pub from: Option<String>,
}

/// The private ref a run's archived head (`refs/steps/runs/<run>`) is
/// fetched into for an audit.
fn archive_copy(run: &str) -> String {
    format!("refs/steps/remote-runs/{run}")
}

/// The run's head for an audit: this clone's branch when it has one;
/// otherwise the durable branch (fetched into the private tracking ref),
/// or the run's archived head `refs/steps/runs/<run>`, on the remote; and
/// when the remote cannot be asked, the last copy this clone holds
/// (`refs/remotes/<remote>/<branch>`).
pub fn audited_head(repo: &Repository, s: &Settings) -> Result<Audited> {
    if let Ok(h) = repo.refname_to_id(&s.refname()) {
        return Ok(Audited {
            head: Some(h),
            from: None,
        });
    }
    let mut unreachable = None;
    if let Some(remote) = &s.remote {
        let tracking = crate::sync::remote::tracking_ref(&s.branch);
        match remote.fetch(repo, &s.refname(), &tracking) {
            Ok(Some(d)) => {
                return Ok(Audited {
                    head: Some(d),
                    from: Some(format!(
                        "run {} is not checked out here: read its branch {} on {} (at {}), without touching this worktree",
                        s.run,
                        s.branch,
                        remote.spec,
                        short(d)
                    )),
                })
            }
            Ok(None) => {
                let archived = format!("refs/steps/runs/{}", s.run);
                if let Ok(Some(d)) = remote.fetch(repo, &archived, &archive_copy(&s.run)) {
                    return Ok(Audited {
                        head: Some(d),
                        from: Some(format!(
                            "run {} has no branch {} here nor on {}: read its archived head {archived} there (at {})",
                            s.run,
                            s.branch,
                            remote.spec,
                            short(d)
                        )),
                    });
                }
            }
            Err(e) => unreachable = Some(e.to_string()),
        }
    }
    // The last copies this clone holds of what a remote said.
    let mut copies: Vec<String> = crate::git::remote_names(repo)
        .into_iter()
        .map(|r| format!("refs/remotes/{r}/{}", s.branch))
        .collect();
    copies.push(crate::sync::remote::tracking_ref(&s.branch));
    copies.push(format!("refs/steps/runs/{}", s.run));
    for name in copies {
        if let Ok(d) = repo.refname_to_id(&name) {
            return Ok(Audited {
                head: Some(d),
                from: Some(format!(
                    "run {} is not checked out here: read this clone's copy {name} (at {}){}",
                    s.run,
                    short(d),
                    unreachable
                        .as_deref()
                        .map(|e| format!("; the remote could not be asked: {e}"))
                        .unwrap_or_default()
                )),
            });
        }
    }
    Ok(Audited {
        head: None,
        from: None,
    })
}

/// `show`: one step's whole record.
#[derive(Debug, Serialize)]
pub struct Shown {
    pub run: String,
    pub step: String,
    pub index: usize,
    pub commit: String,
    /// The receipt's `Step-Decision`.
    pub digest: String,
    /// The decision the commit stores (its canonical JSON), parsed; None
    /// when it stores none (see `stored_note`).
    pub decision: Option<serde_json::Value>,
    /// Whether the stored decision's digest is the receipt's.
    pub digest_matches: Option<bool>,
    /// Why no decision is shown, when none is.
    pub stored_note: Option<String>,
    /// Whether the commit's tree is the stored decision applied to its
    /// parent (None: no step decision to apply, as an adoption's).
    pub tree_matches: Option<bool>,
    /// The paths where it is not (a tree changed under a kept receipt).
    pub differs: Vec<String>,
    pub intent: Option<serde_json::Value>,
    pub source: Option<String>,
    /// The step's change, as `git show` prints it.
    pub diff: String,
    /// Where the run was read, when not from this clone's branch.
    pub read_from: Option<String>,
}

/// The record of step `id` of the run: its decision as its commit stores
/// it, its intent, its diff.
pub fn show(repo: &Repository, s: &Settings, id: &str) -> Result<Shown> {
    let audited = audited_head(repo, s)?;
    let ledger = ledger::scan(repo, audited.head, &s.run)?;
    let Some(e) = ledger.entries.iter().find(|e| e.id == id) else {
        let known: Vec<&str> = ledger.entries.iter().map(|e| e.id.as_str()).collect();
        return Err(Error::other(format!(
            "run {} on {} has no step {id}{}",
            s.run,
            s.branch,
            if known.is_empty() {
                " (it has no steps)".to_string()
            } else {
                format!(
                    "; its steps: {}{}",
                    known
                        .iter()
                        .take(10)
                        .copied()
                        .collect::<Vec<_>>()
                        .join(", "),
                    if known.len() > 10 { ", …" } else { "" }
                )
            }
        ))
        .with_hint("`git steps log` lists the run's steps; `--run X` names another run"));
    };
    let commit = repo.find_commit(e.commit)?;
    let message = commit.message().unwrap_or_default().to_string();
    let parsed = receipt::parse(&message).ok();
    let stored = receipt::stored_decision(&commit);
    let (decision, digest_matches, stored_note) = match &stored {
        Some(text) => match serde_json::from_str::<serde_json::Value>(text) {
            Ok(v) => {
                let ok = crate::plan::canonical::decision_digest(&v) == e.decision;
                (Some(v), Some(ok), None)
            }
            Err(err) => (
                None,
                Some(false),
                Some(format!("the decision its commit stores is not JSON: {err}")),
            ),
        },
        None => (
            None,
            None,
            Some(format!(
                "its commit stores no decision: a decision over {} KiB, or a step written before decisions were kept (only its digest is known)",
                crate::plan::canonical::STORED_DECISION_MAX >> 10
            )),
        ),
    };
    let intent = decision
        .as_ref()
        .and_then(|d| d.get("intent").cloned())
        .or_else(|| intent_of(&message));
    // The decision applied again to the parent (in memory), as `verify`
    // does: a diff that is not the decision's is said here too.
    let (mut tree_matches, mut differs) = (None, Vec::new());
    if let Some(step) = stored
        .as_deref()
        .filter(|_| decision.as_ref().is_some_and(|d| d.get("adopt").is_none()))
        .and_then(|t| crate::plan::step::Step::from_stored(t).ok())
    {
        repo.odb()?.add_new_mempack_backend(1000)?;
        let parent = commit.parent(0).ok().map(|p| p.tree()).transpose()?;
        match crate::tree::build::apply(repo, parent, &step) {
            Ok(applied) if applied.tree == commit.tree_id() => tree_matches = Some(true),
            Ok(applied) => {
                let want = repo.find_tree(applied.tree)?;
                differs = crate::git::tree_changes(repo, Some(&want), Some(&commit.tree()?))?
                    .into_iter()
                    .map(|c| c.path)
                    .collect();
                tree_matches = Some(false);
            }
            Err(_) => tree_matches = Some(false),
        }
    }
    Ok(Shown {
        run: s.run.clone(),
        step: e.id.clone(),
        index: e.index + 1,
        commit: e.commit.to_string(),
        digest: e.decision.clone(),
        decision,
        digest_matches,
        stored_note,
        tree_matches,
        differs,
        intent,
        source: parsed.and_then(|r| r.source),
        diff: super::step_diff(repo, e.commit)?,
        read_from: audited.from,
    })
}

/// The intent paragraph of a receipt's message (one line of JSON after the
/// subject), for a commit that stores no decision.
fn intent_of(message: &str) -> Option<serde_json::Value> {
    let mut paragraphs = message.split("\n\n");
    paragraphs.next()?;
    let second = paragraphs.next()?.trim();
    if second.starts_with('{') || second.starts_with('[') || second.starts_with('"') {
        serde_json::from_str(second).ok()
    } else {
        None
    }
}

/// One run, as `runs` lists it.
#[derive(Debug, Serialize)]
pub struct RunRow {
    pub run: String,
    pub branch: String,
    /// This clone's branch head (None: not checked out here).
    pub local_head: Option<String>,
    /// The remote's branch head (None: not on the remote, or no remote).
    pub durable_head: Option<String>,
    /// The archived head (`refs/steps/runs/<run>`) on the remote or here.
    pub archived_head: Option<String>,
    pub steps: usize,
    /// The last step's commit time (seconds since the epoch, and as git's
    /// ISO-8601).
    pub last_step_time: Option<i64>,
    pub last_step_date: Option<String>,
    pub last_step: Option<String>,
    pub pending_effects: usize,
    /// Whether the run's head is in the default branch's history, or a
    /// squash merge of it names the run (`Steps-Run`).
    pub merged: Option<String>,
    /// Whether this is the run set up here (`steps.run`).
    pub current: bool,
}

/// `runs`.
#[derive(Debug, Serialize)]
pub struct Runs {
    pub remote: Option<String>,
    /// None, or why the remote could not be asked (then only this clone's
    /// view is listed).
    pub remote_error: Option<String>,
    pub default_branch: Option<String>,
    pub runs: Vec<RunRow>,
}

/// Every run this clone and its remote hold: branches `steps/<run>` (and
/// the run set up here, on whatever branch), archived heads
/// `refs/steps/runs/<run>`.
pub fn runs(repo: &Repository, s: &Settings) -> Result<Runs> {
    use std::collections::BTreeMap;
    // branch → (this clone's head, the remote's head)
    let mut found: BTreeMap<String, (Option<Oid>, Option<Oid>)> = BTreeMap::new();
    let configured = crate::settings::config_str(repo, crate::keys::BRANCH.name)?;
    for r in repo.references_glob("refs/heads/steps/*")?.flatten() {
        if let (Ok(name), Some(id)) = (r.name(), r.target()) {
            let b = name.trim_start_matches("refs/heads/").to_string();
            found.entry(b).or_default().0 = Some(id);
        }
    }
    if let Some(b) = &configured {
        let head = repo.refname_to_id(&format!("refs/heads/{b}")).ok();
        found.entry(b.clone()).or_default().0 = head;
    }
    let mut archived: BTreeMap<String, Oid> = BTreeMap::new();
    for r in repo.references_glob("refs/steps/runs/*")?.flatten() {
        if let (Ok(name), Some(id)) = (r.name(), r.target()) {
            archived.insert(name.trim_start_matches("refs/steps/runs/").into(), id);
        }
    }
    let mut remote_error = None;
    if let Some(remote) = &s.remote {
        match remote.list(repo, &["refs/heads/steps/*", "refs/steps/runs/*"]) {
            Ok(refs) => {
                let want_configured = configured.as_deref().map(|b| format!("refs/heads/{b}"));
                for (name, id) in refs {
                    if let Some(b) = name.strip_prefix("refs/heads/") {
                        if b.starts_with("steps/") {
                            found.entry(b.to_string()).or_default().1 = Some(id);
                        }
                    } else if let Some(run) = name.strip_prefix("refs/steps/runs/") {
                        archived.insert(run.to_string(), id);
                    }
                }
                if let Some(want) = want_configured {
                    if let Ok(Some(id)) = remote.head(repo, &want) {
                        let b = want.trim_start_matches("refs/heads/").to_string();
                        found.entry(b).or_default().1 = Some(id);
                    }
                }
            }
            Err(e) => remote_error = Some(e.to_string()),
        }
    }
    let default = default_head(repo);
    let mut rows = Vec::new();
    let mut seen_runs = std::collections::HashSet::new();
    for (branch, (local, durable)) in &found {
        let mut s2 = s.clone();
        s2.branch = branch.clone();
        // Read what the remote holds into the private tracking ref (never
        // the branch): its steps are counted from it.
        let head = match (local, durable, &s.remote) {
            (_, Some(d), Some(remote)) if repo.find_commit(*d).is_err() => remote
                .fetch(
                    repo,
                    &s2.refname(),
                    &crate::sync::remote::tracking_ref(branch),
                )
                .ok()
                .flatten()
                .or(*local),
            (Some(l), _, _) => Some(*l),
            (None, d, _) => *d,
        };
        let run = match head.and_then(|h| head_run(repo, h)) {
            Some(r) => r,
            None => crate::settings::run_of_branch(repo, branch),
        };
        s2.run = run.clone();
        seen_runs.insert(run.clone());
        rows.push(row(
            repo,
            &s2,
            head,
            *local,
            *durable,
            archived.get(&run).copied(),
            &default,
            configured.as_deref() == Some(branch.as_str()),
        )?);
    }
    for (run, id) in &archived {
        if seen_runs.contains(run) {
            continue;
        }
        let mut s2 = s.clone();
        s2.run = run.clone();
        s2.branch = format!("steps/{run}");
        let head = if repo.find_commit(*id).is_ok() {
            Some(*id)
        } else {
            s.remote.as_ref().and_then(|r| {
                r.fetch(repo, &format!("refs/steps/runs/{run}"), &archive_copy(run))
                    .ok()
                    .flatten()
            })
        };
        rows.push(row(
            repo,
            &s2,
            head,
            None,
            None,
            Some(*id),
            &default,
            false,
        )?);
    }
    Ok(Runs {
        remote: s.remote.as_ref().map(|r| r.spec.clone()),
        remote_error,
        default_branch: default.as_ref().map(|(n, _)| n.clone()),
        runs: rows,
    })
}

/// The run the receipt at `head` names.
fn head_run(repo: &Repository, head: Oid) -> Option<String> {
    let c = repo.find_commit(head).ok()?;
    receipt::parse(c.message().ok()?).ok().map(|r| r.run)
}

/// The default branch's name and head, as this clone knows it (the remote's
/// HEAD, else main/master).
fn default_head(repo: &Repository) -> Option<(String, Oid)> {
    for b in crate::settings::default_branches(repo) {
        for name in std::iter::once(format!("refs/heads/{b}")).chain(
            crate::git::remote_names(repo)
                .into_iter()
                .map(|r| format!("refs/remotes/{r}/{b}")),
        ) {
            if let Ok(id) = repo.refname_to_id(&name) {
                let shown = name
                    .strip_prefix("refs/heads/")
                    .or_else(|| name.strip_prefix("refs/remotes/"))
                    .unwrap_or(&name)
                    .to_string();
                return Some((shown, id));
            }
        }
    }
    None
}

#[allow(clippy::too_many_arguments)]
fn row(
    repo: &Repository,
    s: &Settings,
    head: Option<Oid>,
    local: Option<Oid>,
    durable: Option<Oid>,
    archived: Option<Oid>,
    default: &Option<(String, Oid)>,
    current: bool,
) -> Result<RunRow> {
    let readable = head.filter(|h| repo.find_commit(*h).is_ok());
    let ledger = ledger::scan(repo, readable, &s.run)?;
    let last = ledger.entries.last();
    let time = last
        .and_then(|e| repo.find_commit(e.commit).ok())
        .map(|c| c.time());
    let pending = super::effects::list(repo, s, s.remote.is_some())
        .map(|r| r.pending)
        .unwrap_or(0);
    let merged = match (readable, default) {
        (Some(h), Some((name, d)))
            if *d == h || repo.graph_descendant_of(*d, h).unwrap_or(false) =>
        {
            Some(format!("in {name}"))
        }
        (_, Some((name, d))) => {
            squash_of(repo, *d, &s.run).map(|c| format!("squash {} in {name}", short(c)))
        }
        _ => None,
    };
    Ok(RunRow {
        run: s.run.clone(),
        branch: s.branch.clone(),
        local_head: local.map(|h| h.to_string()),
        durable_head: durable.map(|h| h.to_string()),
        archived_head: archived.map(|h| h.to_string()),
        steps: ledger.entries.len(),
        last_step_time: time.map(|t| t.seconds()),
        last_step_date: time.map(iso_date),
        last_step: last.map(|e| e.id.clone()),
        pending_effects: pending,
        merged,
        current,
    })
}

/// git's `%ci` of a commit time.
fn iso_date(t: git2::Time) -> String {
    let offset = t.offset_minutes();
    let secs = t.seconds() + i64::from(offset) * 60;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} {}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        if offset < 0 { '-' } else { '+' },
        offset.abs() / 60,
        offset.abs() % 60
    )
}

/// A commit on the default branch's first-parent line (its latest 5,000)
/// whose trailers name the run (`Steps-Run: <run>`, a squash merge's).
fn squash_of(repo: &Repository, tip: Oid, run: &str) -> Option<Oid> {
    let mut walk = repo.revwalk().ok()?;
    walk.push(tip).ok()?;
    walk.simplify_first_parent().ok()?;
    for id in walk.take(5_000).flatten() {
        let c = repo.find_commit(id).ok()?;
        let msg = c.message().unwrap_or_default();
        if msg.contains("Steps-Run:")
            && crate::history::trailers::trailers(msg)
                .iter()
                .any(|(k, v)| k.eq_ignore_ascii_case("Steps-Run") && v == run)
        {
            return Some(id);
        }
    }
    None
}
