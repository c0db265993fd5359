//! Reading a merged commit's message: which run it names and how (the
//! `Steps-*` trailers of a squash, the receipts a rebase or a forge's
//! squash copies, a parent that is the run's step), as [`Claim`].
//!
//! Invariant: only the message and the parents are read; a receipt found
//! inside a message counts only when all that follows it is what a forge
//! appends, so prose a person wrote never stands for a copy.

use std::collections::BTreeSet;

use git2::{Commit, Oid};

use super::super::{refname, KEY_ARTIFACT, KEY_COUNT, KEY_HEAD, KEY_HISTORY, KEY_RUN};
use crate::error::{Error, Result};
use crate::git::short;
use crate::history::receipt;

/// How the commit names its run.
pub(super) struct Claim {
    pub(super) kind: &'static str,
    pub(super) run: String,
    /// The run head it merged, when the commit says (squash) or holds it
    /// (merge).
    pub(super) head: Option<Oid>,
    /// Squash: its `Steps-Head` as written.
    pub(super) head_text: Option<String>,
    /// Squash: (count, history, artifact) as its trailers say.
    pub(super) trailers: Option<(String, String, String)>,
    /// The receipts its message copies (a rebase copy: 1; a forge's
    /// default squash message, which copies every commit's: more); 0 when
    /// its message is no receipt. The last one says where in the run it
    /// stands.
    pub(super) copies: usize,
}

/// The receipt of `run` (any run: None) a commit's message ends with. The
/// merged commit itself (`tip`) may carry what a forge adds after it (a
/// `---` rule, `Co-authored-by:`): its message is then read up to each
/// earlier paragraph break, last first, until a receipt ends it.
pub(super) fn copied(c: &Commit<'_>, run: Option<&str>, tip: bool) -> Option<receipt::Receipt> {
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

/// Whether `text` is only what a forge or a review tool appends to a
/// squash message: blank lines, a rule of dashes, trailers
/// (`Co-authored-by:`, `Change-Id:`, `Reviewed-on:`), GitLab's `See merge
/// request group/project!12`, and closing keywords (`Closes #12`).
/// Anything else (prose a person kept or wrote) means the message is no
/// copy of a receipt.
pub(super) fn forge_tail(text: &str) -> bool {
    text.lines().map(str::trim).all(|l| {
        let lower = l.to_ascii_lowercase();
        let closing = [
            "close", "closes", "closed", "fix", "fixes", "fixed", "resolve", "resolves", "resolved",
        ]
        .iter()
        .any(|w| {
            lower
                .strip_prefix(w)
                .and_then(|r| r.strip_prefix(' '))
                .is_some_and(|r| {
                    r.split([',', ' '])
                        .filter(|t| !t.is_empty())
                        .all(|t| t.contains('#') || t.contains('!') || t.contains("://"))
                })
        });
        l.is_empty()
            || l.chars().all(|c| c == '-')
            || closing
            || (lower.starts_with("see merge request ") && l.contains('!'))
            || l.split_once(':').is_some_and(|(k, v)| {
                !k.is_empty()
                    && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                    && v.starts_with(' ')
            })
    })
}

/// How many distinct steps' `Step-Id:` lines a message holds.
pub(super) fn step_ids_in(msg: &str) -> usize {
    msg.lines()
        .filter_map(|l| {
            let (k, v) = l.trim().split_once(':')?;
            k.eq_ignore_ascii_case("Step-Id").then(|| v.trim())
        })
        .collect::<BTreeSet<_>>()
        .len()
}

pub(super) fn trailer(trailers: &[(String, String)], key: &str) -> Option<String> {
    trailers
        .iter()
        .rev()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| v.trim().to_string())
}

/// The `Steps-*` block of a message: the trailers of its last paragraph,
/// or, when a forge added a paragraph after it (a `---` line and
/// `Co-authored-by:`), the last lines that start with the keys.
pub(super) fn steps_block(msg: &str) -> Vec<(String, String)> {
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
pub(super) fn run_id(v: &str) -> Result<String> {
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

pub(super) fn claim(c: &Commit<'_>, run: Option<&str>) -> Result<Claim> {
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
