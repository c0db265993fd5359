//! `verify --merged <commit>`: a commit on the target branch held against
//! the run it merged — a squash (its `Steps-*` trailers), a rebase merge
//! (the steps' own receipts, copied), or a true merge (the run's head as a
//! parent).
//!
//! Invariant: read-only but for fetching `refs/steps/runs/<run>`; the
//! verdict is ok only if the run is kept there with a sound history that
//! holds the merged head, the trailers (squash) or the copied receipts
//! (rebase) agree with that history, and every path the run changed holds
//! the run's content in the merged commit while the merge changed no other
//! path. Every difference is named, path by path.

use std::collections::BTreeSet;

use git2::{Commit, Oid, Repository, Tree};
use serde::Serialize;

use super::{refname, KEY_ARTIFACT, KEY_COUNT, KEY_HEAD, KEY_HISTORY, KEY_RUN};
use crate::error::{Error, Result};
use crate::git::short;
use crate::history::{ledger, receipt};
use crate::settings::Remote;

/// What `verify --merged` found.
#[derive(Debug, Serialize)]
pub struct MergedCheck {
    pub ok: bool,
    pub commit: String,
    /// `squash`, `rebase` or `merge`.
    pub kind: &'static str,
    pub run: String,
    /// The run's head the commit merged.
    pub head: Option<String>,
    /// What refs/steps/runs/<run> holds.
    pub kept: Option<String>,
    pub steps: usize,
    pub history: Option<String>,
    pub artifact: String,
    pub problems: Vec<String>,
    pub notes: Vec<String>,
}

/// How the commit names its run.
struct Claim {
    kind: &'static str,
    run: String,
    /// The run head it merged, when the commit says (squash) or holds it
    /// (merge).
    head: Option<Oid>,
    /// Squash: its `Steps-Head` as written.
    head_text: Option<String>,
    /// Squash: (count, history, artifact) as its trailers say.
    trailers: Option<(String, String, String)>,
    /// The receipts its message copies (a rebase copy: 1; a forge's
    /// default squash message, which copies every commit's: more); 0 when
    /// its message is no receipt. The last one says where in the run it
    /// stands.
    copies: usize,
}

/// The receipt of `run` (any run: None) a commit's message ends with. The
/// merged commit itself (`tip`) may carry what a forge adds after it (a
/// `---` rule, `Co-authored-by:`): its message is then read up to each
/// earlier paragraph break, last first, until a receipt ends it.
fn copied(c: &Commit<'_>, run: Option<&str>, tip: bool) -> Option<receipt::Receipt> {
    let msg = c.message().unwrap_or_default();
    let ours = |m: &str| {
        receipt::parse(m)
            .ok()
            .filter(|r| run.is_none_or(|want| want == r.run))
    };
    if let Some(r) = ours(msg) {
        return Some(r);
    }
    if !tip {
        return None;
    }
    msg.match_indices("\n\n")
        .map(|(at, _)| at)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .find_map(|at| ours(&msg[..at]).filter(|_| forge_tail(&msg[at..])))
}

/// Whether `text` is only what a forge appends to a squash message: blank
/// lines, a rule of dashes, `Co-authored-by:`-style lines. Anything else
/// (prose a person kept or wrote) means the message is no copy of a
/// receipt.
fn forge_tail(text: &str) -> bool {
    text.lines().map(str::trim).all(|l| {
        l.is_empty()
            || l.chars().all(|c| c == '-')
            || l.split_once(':').is_some_and(|(k, _)| {
                k.len() > 3 && k.ends_with("-by") && !k.contains(char::is_whitespace)
            })
    })
}

/// How many distinct steps' `Step-Id:` lines a message holds.
fn step_ids_in(msg: &str) -> usize {
    msg.lines()
        .filter_map(|l| {
            let (k, v) = l.trim().split_once(':')?;
            k.eq_ignore_ascii_case("Step-Id").then(|| v.trim())
        })
        .collect::<BTreeSet<_>>()
        .len()
}

fn trailer(trailers: &[(String, String)], key: &str) -> Option<String> {
    trailers
        .iter()
        .rev()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| v.trim().to_string())
}

/// The `Steps-*` block of a message: the trailers of its last paragraph,
/// or, when a forge added a paragraph after it (a `---` line and
/// `Co-authored-by:`), the last lines that start with the keys.
fn steps_block(msg: &str) -> Vec<(String, String)> {
    let t = crate::history::trailers::trailers(msg);
    if trailer(&t, KEY_RUN).is_some() {
        return t;
    }
    msg.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            [KEY_RUN, KEY_HEAD, KEY_COUNT, KEY_HISTORY, KEY_ARTIFACT]
                .iter()
                .any(|key| k.eq_ignore_ascii_case(key))
                .then(|| (k.to_string(), v.trim().to_string()))
        })
        .collect()
}

/// A run id as a trailer gives it, checked before it names a ref.
fn run_id(v: &str) -> Result<String> {
    let ok = !v.is_empty()
        && !v
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || "*?[\\".contains(c))
        && git2::Reference::is_valid_name(&refname(v));
    if ok {
        Ok(v.to_string())
    } else {
        Err(Error::input(format!(
            "its {KEY_RUN} trailer {v:?} is not a run id"
        )))
    }
}

fn claim(c: &Commit<'_>, run: Option<&str>) -> Result<Claim> {
    let msg = c.message().unwrap_or_default();
    let t = steps_block(msg);
    if let Some(r) = trailer(&t, KEY_RUN) {
        let head = trailer(&t, KEY_HEAD).unwrap_or_default();
        let full = head.len() == 40 && head.bytes().all(|b| b.is_ascii_hexdigit());
        return Ok(Claim {
            kind: "squash",
            run: match run {
                Some(r) => r.to_string(),
                None => run_id(&r)?,
            },
            head: full.then(|| Oid::from_str(&head).ok()).flatten(),
            head_text: Some(head),
            trailers: Some((
                trailer(&t, KEY_COUNT).unwrap_or_default(),
                trailer(&t, KEY_HISTORY).unwrap_or_default(),
                trailer(&t, KEY_ARTIFACT).unwrap_or_default(),
            )),
            copies: 0,
        });
    }
    if c.parent_count() > 1 {
        for p in c.parents().skip(1) {
            if let Ok(r) = receipt::parse(p.message().unwrap_or_default()) {
                if run.is_none_or(|want| want == r.run) {
                    return Ok(Claim {
                        kind: "merge",
                        run: r.run,
                        head: Some(p.id()),
                        head_text: None,
                        trailers: None,
                        copies: 0,
                    });
                }
            }
        }
    }
    if let Some(r) = copied(c, run, true) {
        // Several steps' receipts in one message: a forge's default
        // squash message (each commit's, one after the other), not a
        // rebase copy; checked as one all the same, by the last.
        let copies = step_ids_in(msg).max(1);
        return Ok(Claim {
            kind: if copies > 1 { "squash" } else { "rebase" },
            run: r.run,
            head: None,
            head_text: None,
            trailers: None,
            copies,
        });
    }
    if let Some(r) = run {
        // Named by the user: a squash without merge-message's trailers (a
        // forge's own message), held against the kept run's head.
        return Ok(Claim {
            kind: "squash",
            run: r.to_string(),
            head: None,
            head_text: None,
            trailers: None,
            copies: 0,
        });
    }
    Err(Error::input(format!(
        "commit {} names no run: no {KEY_RUN} trailer (a squash with `git steps merge-message`), no step receipt (a rebase merge), and no parent that is a run's step (a merge)",
        short(c.id())
    ))
    .with_hint("give the run: `git steps verify --merged <commit> --run <id>` (then it is held against the run's kept head)"))
}

/// A shallow clone (a CI checkout) cuts the commits a check needs: make it
/// whole from the first of `remotes` that can (`git fetch --unshallow`),
/// as `apply` deepens a clone that cuts its run. Returns the remote that
/// did it (None: the clone was not shallow). A clone no remote makes whole
/// (the commit is on none of their branches) is left for [`check`] to
/// refuse. Opens its own handles: the caller opens a new one after this.
pub fn unshallow(path: &std::path::Path, remotes: &[Remote]) -> Result<Option<String>> {
    if !crate::git::open(path)?.is_shallow() {
        return Ok(None);
    }
    for r in remotes {
        let repo = crate::git::open(path)?;
        if r.unshallow(&repo).is_ok() && !crate::git::open(path)?.is_shallow() {
            return Ok(Some(r.spec.clone()));
        }
    }
    Ok(None)
}

/// Check `commit` against its run (named by the commit, or `run`), whose
/// history is fetched from `remote` (when given) into refs/steps/runs/.
pub fn check(
    repo: &Repository,
    remotes: &[Remote],
    commit: Oid,
    run: Option<&str>,
) -> Result<MergedCheck> {
    if repo.is_shallow() {
        return Err(Error::other(
            "this clone is shallow, and no remote made it whole: checking a merge needs the commits below it (its parents, the steps a rebase copied), which a shallow clone may cut",
        )
        .with_hint("fetch the branch the commit is on with `git fetch --unshallow <remote> <branch>` (in CI: a checkout with fetch-depth 0), then rerun"));
    }
    let c = repo.find_commit(commit)?;
    let claim = claim(&c, run)?;
    let name = refname(&claim.run);
    // The kept run, from the first remote that has it.
    let mut kept = None;
    let mut remote = None;
    for r in remotes {
        if let Some(k) = r.fetch(repo, &name, &name)? {
            kept = Some(k);
            remote = Some(r);
            break;
        }
    }
    if remotes.is_empty() {
        kept = repo.refname_to_id(&name).ok();
    }
    let artifact = crate::tree::fingerprint::artifact(repo, Some(&c.tree()?))?;
    let mut out = MergedCheck {
        ok: false,
        commit: commit.to_string(),
        kind: claim.kind,
        run: claim.run.clone(),
        head: None,
        kept: kept.map(|k| k.to_string()),
        steps: 0,
        history: None,
        artifact,
        problems: Vec::new(),
        notes: Vec::new(),
    };
    let Some(kept) = kept else {
        out.problems.push(format!(
            "the run's history is not kept: {name} does not exist{} (`git steps archive` on a box of the run keeps it; `git steps merge-message` does too)",
            match remotes {
                [] => String::new(),
                [one] => format!(" on {}", one.spec),
                more => format!(
                    " on any of {}",
                    more.iter().map(|r| r.spec.as_str()).collect::<Vec<_>>().join(", ")
                ),
            }
        ));
        return Ok(out);
    };
    if let (Some(r), true) = (remote, remotes.len() > 1) {
        out.notes.push(format!("the run is kept on {}", r.spec));
    }
    let whole = ledger::scan(repo, Some(kept), &claim.run)?;
    for p in &whole.problems {
        out.problems.push(format!(
            "the kept history ({name}) is not sound: commit {}: {}",
            short(p.commit),
            p.what
        ));
    }
    // The run's head the commit merged, and the steps up to it.
    if claim.copies > 1 {
        out.notes.push(format!(
            "its message copies the receipts of {} steps (a forge's default squash message): it is held against the run up to the last of them",
            claim.copies
        ));
    }
    let (head, upto) = match claim.copies {
        1.. => match rebased(&c, &claim.run, claim.copies, &whole, &mut out.problems) {
            Some(x) => x,
            None => return Ok(finish(out)),
        },
        0 => {
            let h = match (claim.head, &claim.head_text, &claim.trailers) {
                (Some(h), _, _) => h,
                (None, Some(text), _) => {
                    out.problems.push(format!(
                        "its {KEY_HEAD} trailer {text:?} is not a full commit id"
                    ));
                    return Ok(finish(out));
                }
                // Named with --run, no trailers: the kept head.
                _ => {
                    out.notes.push(format!(
                        "the commit has no {KEY_RUN} trailers: it is held against the run's kept head (`git steps merge-message` writes them)"
                    ));
                    kept
                }
            };
            match whole.entries.iter().position(|e| e.commit == h) {
                Some(i) => (h, i + 1),
                None => {
                    out.problems.push(format!(
                        "the run's head {} it merged is not a step of the run kept at {name} ({})",
                        short(h),
                        short(kept)
                    ));
                    return Ok(finish(out));
                }
            }
        }
    };
    let steps = &whole.entries[..upto];
    let history = crate::tree::fingerprint::history(
        steps.iter().map(|e| (e.id.as_str(), e.decision.as_str())),
    );
    let head_tree = repo.find_commit(head)?.tree()?;
    let head_artifact = crate::tree::fingerprint::artifact(repo, Some(&head_tree))?;
    out.head = Some(head.to_string());
    out.steps = upto;
    out.history = Some(history.clone());
    if head != kept {
        out.notes.push(format!(
            "the run went on after this merge: {name} is at {} ({} step(s)); the merge holds the first {upto}",
            short(kept),
            whole.entries.len()
        ));
    }
    if let Some((count, hist, art)) = &claim.trailers {
        for (key, said, is) in [
            (KEY_COUNT, count.clone(), upto.to_string()),
            (KEY_HISTORY, hist.clone(), history.clone()),
            (KEY_ARTIFACT, art.clone(), head_artifact.clone()),
        ] {
            if *said != is {
                out.problems.push(format!(
                    "its {key} trailer says {said:?}, but the run's history at {} gives {is}",
                    short(head)
                ));
            }
        }
    }
    // The content: the run's changes (from the commit it started from to
    // the head) against the merge's (from its first parent, or the commit
    // the rebased steps went onto).
    let base = match whole.base.filter(|_| upto > 0) {
        Some(b) => Some(repo.find_commit(b)?.tree()?),
        None => None,
    };
    let onto = match claim.copies {
        1.. => rebase_onto(&c, &claim.run, claim.copies),
        0 => c.parent(0).ok().map(|p| p.id()),
    };
    let onto_tree = onto.map(|o| repo.find_commit(o)?.tree()).transpose()?;
    let merged_tree = c.tree()?;
    compare(
        repo,
        base.as_ref(),
        &head_tree,
        onto_tree.as_ref(),
        &merged_tree,
        &mut out,
    )?;
    if merged_tree.id() == head_tree.id() {
        out.notes.push(format!(
            "its tree is exactly the run's artifact ({head_artifact})"
        ));
    }
    Ok(finish(out))
}

fn finish(mut out: MergedCheck) -> MergedCheck {
    out.ok = out.problems.is_empty();
    out
}

/// A rebase merge: the commits from `tip` down that carry receipts of
/// `run`, oldest first, must be steps of the run in order, with the same
/// decisions, placed by their `Step-Index` (a run merged in several parts
/// starts a later part at its own position; receipts without an index are
/// placed from the first step). The run's head they copy up to, and how
/// many steps that is.
fn rebased(
    tip: &Commit<'_>,
    run: &str,
    tip_copies: usize,
    whole: &ledger::Ledger,
    problems: &mut Vec<String>,
) -> Option<(Oid, usize)> {
    let mut copies = Vec::new();
    let mut at = Some(tip.clone());
    while let Some(c) = at {
        match copied(&c, Some(run), c.id() == tip.id()) {
            Some(r) => copies.push((r.id, r.decision, r.index, c.id())),
            None => break,
        }
        // A squash of several steps stands for all of them: what lies
        // below it was merged before (an earlier part of the run).
        if tip_copies > 1 {
            break;
        }
        at = c.parent(0).ok();
    }
    copies.reverse();
    let copied = copies;
    let first = copied
        .first()
        .and_then(|c| c.2)
        .map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX) - 1);
    for (i, (id, decision, _, commit)) in copied.iter().enumerate() {
        let at = first.saturating_add(i);
        let Some(e) = whole.entries.get(at) else {
            problems.push(format!(
                "commit {} copies step {id} at position {}, but the kept run has only {} step(s)",
                short(*commit),
                at.saturating_add(1),
                whole.entries.len()
            ));
            return None;
        };
        if e.id != *id || e.decision != *decision {
            problems.push(format!(
                "commit {} copies step {id} ({decision}) at position {}, where the run has step {} ({})",
                short(*commit),
                at + 1,
                e.id,
                e.decision
            ));
        }
    }
    if !problems.is_empty() || copied.is_empty() {
        return None;
    }
    let last = first + copied.len() - 1;
    Some((whole.entries[last].commit, last + 1))
}

/// The commit the rebased steps of `run` below `tip` went onto (a squash
/// that copies several receipts: its parent).
fn rebase_onto(tip: &Commit<'_>, run: &str, tip_copies: usize) -> Option<Oid> {
    if tip_copies > 1 {
        return tip.parent(0).ok().map(|p| p.id());
    }
    let mut at = tip.clone();
    loop {
        if copied(&at, Some(run), at.id() == tip.id()).is_none() {
            return Some(at.id());
        }
        at = at.parent(0).ok()?;
    }
}

/// The run's changes (base → head) merged into the target branch as git
/// merges them (three ways, from the run's base, onto the commit the merge
/// went on): every path the run or the merge changed must hold in the
/// merged tree what that merge gives. A path both changed in conflicting
/// ways must hold the run's content, or is named as resolved by hand.
fn compare(
    repo: &Repository,
    base: Option<&Tree<'_>>,
    head: &Tree<'_>,
    onto: Option<&Tree<'_>>,
    merged: &Tree<'_>,
    out: &mut MergedCheck,
) -> Result<()> {
    let empty = repo.find_tree(repo.treebuilder(None)?.write()?)?;
    let (b, o) = (base.unwrap_or(&empty), onto.unwrap_or(&empty));
    let index = repo.merge_trees(b, o, head, None)?;
    let conflicts: BTreeSet<String> = index
        .conflicts()?
        .filter_map(|c| c.ok())
        .filter_map(|c| c.our.or(c.their).or(c.ancestor))
        .map(|e| String::from_utf8_lossy(&e.path).into_owned())
        .collect();
    let run_changes = crate::git::tree_changes(repo, base, Some(head))?;
    let run_paths: BTreeSet<String> = run_changes.into_iter().map(|c| c.path).collect();
    let mut paths = run_paths.clone();
    paths.extend(
        crate::git::tree_changes(repo, onto, Some(merged))?
            .into_iter()
            .map(|c| c.path),
    );
    let entry = |t: &Tree<'_>, p: &str| {
        t.get_path(std::path::Path::new(p))
            .ok()
            .map(|e| (e.id(), u32::try_from(e.filemode()).unwrap_or(0)))
    };
    for p in &paths {
        let got = entry(merged, p);
        let at_head = entry(head, p);
        if conflicts.contains(p) {
            if got == at_head {
                out.notes.push(format!(
                    "{p}: the run and the target branch both changed it; the merge holds the run's content"
                ));
            } else {
                out.problems.push(format!(
                    "{p}: the run and the target branch both changed it, and the merge holds neither's content (resolved by hand{})",
                    match (at_head, got) {
                        (Some((w, _)), Some((g, _))) => lines(repo, w, g)
                            .map(|l| format!(": {l}"))
                            .unwrap_or_default(),
                        _ => String::new(),
                    }
                ));
            }
            continue;
        }
        let want = index
            .get_path(std::path::Path::new(p), 0)
            .map(|e| (e.id, e.mode));
        if want == got {
            continue;
        }
        let against = if want == at_head {
            "the run's head"
        } else {
            "the run's changes merged onto the target branch"
        };
        out.problems.push(if !run_paths.contains(p) {
            format!("{p}: changed by the merge, and by no step of the run")
        } else {
            match (want, got) {
                (Some(_), None) => format!("{p}: {against} has it; the merge does not"),
                (None, Some(_)) => format!("{p}: the run deleted it; the merge has it"),
                (Some((w, wm)), Some((g, gm))) if w == g => format!(
                    "{p}: the same content with mode {gm:o} in the merge, {wm:o} in {against}"
                ),
                (Some((w, _)), Some((g, _))) => format!(
                    "{p}: the merge holds other content than {against} ({})",
                    lines(repo, w, g)
                        .map(|l| format!("{l} against {against}"))
                        .unwrap_or_else(|| format!("blob {} vs {}", short(g), short(w)))
                ),
                (None, None) => unreachable!("equal"),
            }
        });
    }
    Ok(())
}

/// `+a -r lines` between two text blobs.
fn lines(repo: &Repository, run: Oid, merged: Oid) -> Option<String> {
    let (a, b) = (repo.find_blob(run).ok()?, repo.find_blob(merged).ok()?);
    if a.is_binary() || b.is_binary() {
        return None;
    }
    let diff = similar::TextDiff::from_lines(a.content(), b.content());
    let (mut add, mut del) = (0, 0);
    for op in diff.iter_all_changes() {
        match op.tag() {
            similar::ChangeTag::Insert => add += 1,
            similar::ChangeTag::Delete => del += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    Some(format!("+{add} -{del} lines"))
}
