//! The decision journal of the agent loop (`run --decider`).
//!
//! Owns `refs/steps/journal/<run>`: a first-parent chain of commits, one per
//! decision the decider gave. Each holds the step object as canonical JSON
//! (`decision.json` in its tree) and a trailer block `Journal-Run`,
//! `Journal-Index` (the step index, from 0), `Journal-Step-Id`,
//! `Journal-Decision` (the digest) and `Journal-Status` (`recorded`, or
//! `refused` with the reason in the body). Invariant: an entry is durable —
//! accepted by the remote with a compare-and-swap, or its local ref update
//! fsynced — before its decision is applied, so an index whose latest entry
//! is `recorded` is never asked of the decider again. The journal never
//! overrules the log: receipts say what was applied, and a journal that
//! disagrees with them is refused.

use std::collections::HashMap;

use git2::{Oid, Repository};

use crate::crash;
use crate::error::{Error, Refusal, RefusalKind, Result};
use crate::git::short;
use crate::history::ledger::Ledger;
use crate::plan::step::Step;
use crate::settings::Settings;

const FILE: &str = "decision.json";
const KEY_RUN: &str = "Journal-Run";
const KEY_INDEX: &str = "Journal-Index";
const KEY_ID: &str = "Journal-Step-Id";
const KEY_DECISION: &str = "Journal-Decision";
const KEY_STATUS: &str = "Journal-Status";

/// The journal ref of `run`, locally and on the remote.
pub fn refname(run: &str) -> String {
    format!("refs/steps/journal/{run}")
}

/// What became of a recorded decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DecisionStatus {
    /// Recorded before being applied; applied unless its receipt is missing.
    Recorded,
    /// Refused (an applied id, a duplicated hunk); not applied.
    Refused,
}

/// One journal entry.
#[derive(Debug, Clone, serde::Serialize)]
pub struct JournalEntry {
    pub index: usize,
    pub step_id: String,
    pub decision: String,
    pub status: DecisionStatus,
    /// Why it was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(serialize_with = "ser_oid")]
    pub commit: Oid,
}

fn ser_oid<S: serde::Serializer>(oid: &Oid, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&oid.to_string())
}

impl JournalEntry {
    /// The recorded step object (canonical JSON), read from the entry's
    /// tree: only the entry about to be applied needs it.
    pub fn text(&self, repo: &Repository) -> Result<String> {
        let bad = |what: &str| {
            Error::corrupt(format!(
                "journal entry {} (step index {}): {what}",
                short(self.commit),
                self.index
            ))
        };
        let tree = repo.find_commit(self.commit)?.tree()?;
        let blob = tree
            .get_name(FILE)
            .ok_or_else(|| bad("no decision.json in its tree"))?
            .to_object(repo)?
            .peel_to_blob()?;
        std::str::from_utf8(blob.content())
            .map(str::to_string)
            .map_err(|_| bad("decision.json is not UTF-8"))
    }

    /// The recorded step and its text, checked against the digest.
    pub fn step(&self, repo: &Repository) -> Result<(Step, String)> {
        let text = self.text(repo)?;
        let step = Step::parse(&text).map_err(|e| {
            Error::corrupt(format!(
                "journal entry {} (step index {}): the recorded decision does not parse: {e}",
                short(self.commit),
                self.index
            ))
        })?;
        if step.digest != self.decision || step.id != self.step_id {
            return Err(Error::corrupt(format!(
                "journal entry {} (step index {}): the recorded decision does not match its trailers ({} {} vs {} {})",
                short(self.commit),
                self.index,
                self.step_id,
                self.decision,
                step.id,
                step.digest
            )));
        }
        Ok((step, text))
    }
}

/// The journal of a run, oldest entry first.
#[derive(Debug, Clone, Default)]
pub struct Journal {
    pub head: Option<Oid>,
    pub entries: Vec<JournalEntry>,
    /// Step index → position of its latest entry: lookups stay O(1) on
    /// long runs.
    latest: HashMap<usize, usize>,
}

impl Journal {
    fn from_entries(head: Option<Oid>, entries: Vec<JournalEntry>) -> Journal {
        let mut j = Journal {
            head,
            entries: Vec::new(),
            latest: HashMap::new(),
        };
        for e in entries {
            j.push(e);
        }
        j
    }

    fn push(&mut self, e: JournalEntry) {
        let at = self.entries.len();
        self.latest.insert(e.index, at);
        self.entries.push(e);
    }

    /// The latest entry for step index `index`.
    pub fn latest(&self, index: usize) -> Option<&JournalEntry> {
        self.latest.get(&index).map(|&i| &self.entries[i])
    }

    /// The recorded decision at `index` that has no receipt yet, given a log
    /// with `applied` receipts.
    pub fn pending(&self, applied: usize) -> Option<&JournalEntry> {
        self.latest(applied)
            .filter(|e| e.status == DecisionStatus::Recorded)
    }

    /// Check the journal against the log: a recorded decision at an index
    /// the log has passed must be the step the log holds there, and no entry
    /// may be ahead of the next step (a cursor ahead of the log).
    pub fn check(&self, ledger: &Ledger, branch: &str) -> Result<()> {
        let applied = ledger.entries.len();
        if let Some(e) = self.entries.iter().find(|e| e.index > applied) {
            return Err(mismatch(
                e,
                format!(
                    "the journal records a decision for step index {} but the log holds only {applied} step(s)",
                    e.index
                ),
                branch,
            ));
        }
        for (index, r) in ledger.entries.iter().enumerate() {
            // A decision kept for an index (the latest entry there, recorded)
            // is the one applied there. After a refusal the next answer is
            // applied without an entry (its receipt is its record), and
            // steps applied by `apply` have none.
            let Some(e) = self
                .latest(index)
                .filter(|e| e.status == DecisionStatus::Recorded)
            else {
                continue;
            };
            if r.id != e.step_id || r.decision != e.decision {
                return Err(mismatch(
                    e,
                    format!(
                        "the journal recorded step {} ({}) at index {index}, but the log applied step {} ({}) there",
                        e.step_id, e.decision, r.id, r.decision
                    ),
                    branch,
                ));
            }
        }
        Ok(())
    }
}

fn mismatch(e: &JournalEntry, saw: String, branch: &str) -> Error {
    Error::from(Refusal {
        kind: RefusalKind::JournalMismatch,
        step: Some(e.step_id.clone()),
        saw,
        would: "apply or ask for decisions against a log that does not hold what was decided".into(),
        hint: format!(
            "inspect both with `git log {branch}` and `git log {}`; the log is the truth: delete the journal ref (`git update-ref -d <ref>`, on the remote too) only if you know the log is right",
            e.commit
        ).into(),
    })
}

/// Read the journal chain ending at `head`.
pub fn read(repo: &Repository, head: Option<Oid>) -> Result<Journal> {
    let mut entries = Vec::new();
    let mut next = head;
    while let Some(oid) = next {
        let c = repo.find_commit(oid)?;
        entries.push(parse(&c)?);
        next = c.parent_ids().next();
    }
    entries.reverse();
    Ok(Journal::from_entries(head, entries))
}

fn parse(c: &git2::Commit<'_>) -> Result<JournalEntry> {
    let msg = c
        .message()
        .map_err(|_| not_an_entry(c.id(), "its message is not UTF-8"))?;
    parse_message(msg, c.id())
}

fn not_an_entry(commit: Oid, what: &str) -> Error {
    Error::corrupt(format!(
        "journal commit {} is not a journal entry: {what}",
        short(commit)
    ))
    .with_hint("the journal ref must only be written by git-steps")
}

/// The entry a journal commit's message records (`commit`: the commit's id).
fn parse_message(msg: &str, commit: Oid) -> Result<JournalEntry> {
    let bad = |what: &str| not_an_entry(commit, what);
    let fields = super::chain::Fields::of(msg, &bad)?;
    let get = |key: &str| fields.get(key);
    let index: usize = get(KEY_INDEX)?
        .parse()
        .map_err(|_| bad("a bad Journal-Index"))?;
    let status = match get(KEY_STATUS)?.as_str() {
        "recorded" => DecisionStatus::Recorded,
        "refused" => DecisionStatus::Refused,
        other => return Err(bad(&format!("unknown status {other:?}"))),
    };
    let reason = (status == DecisionStatus::Refused).then(|| {
        // The body between the subject and the trailers.
        let body: Vec<&str> = msg.split("\n\n").collect();
        if body.len() >= 3 {
            let text = body[1..body.len() - 1].join("\n\n");
            let text = text.trim();
            text.strip_prefix("Refused: ").unwrap_or(text).to_string()
        } else {
            String::new()
        }
    });
    let _ = get(KEY_RUN)?;
    Ok(JournalEntry {
        index,
        step_id: get(KEY_ID)?,
        decision: get(KEY_DECISION)?,
        status,
        reason,
        commit,
    })
}

/// Bring the local journal ref up to the durable one and read it. With a
/// remote, the remote's journal is the truth and the local ref a copy.
pub fn load(repo: &Repository, s: &Settings) -> Result<Journal> {
    let head = super::chain::load(repo, s, &refname(&s.run), super::chain::Missing::Forget)?;
    read(repo, head)
}

/// The message of the journal entry for `step` at `index`, recorded or
/// refused with the reason.
fn message(run: &str, index: usize, step: &Step, refused: Option<&str>) -> String {
    let label = if refused.is_some() {
        "refused"
    } else {
        "recorded"
    };
    let mut message = format!("journal: step index {index} is {} ({label})\n\n", step.id);
    if let Some(reason) = refused {
        // One line of its own paragraph, starting with our words: it can
        // neither become the trailer block nor be git's `---` divider.
        let flat: Vec<&str> = reason.split_whitespace().collect();
        message.push_str("Refused: ");
        message.push_str(&flat.join(" "));
        message.push_str("\n\n");
    }
    message.push_str(&format!(
        "{KEY_RUN}: {run}\n{KEY_INDEX}: {index}\n{KEY_ID}: {}\n{KEY_DECISION}: {}\n{KEY_STATUS}: {label}\n",
        step.id, step.digest
    ));
    message
}

/// Append an entry for the decision `step` (canonical JSON `text`) at
/// `index` — recorded, or refused with the reason — and make it durable
/// before returning: pushed with a compare-and-swap on the journal ref (exit
/// 4 if another runner moved it), or the local ref moved and fsynced.
pub fn append(
    repo: &Repository,
    s: &Settings,
    journal: &mut Journal,
    index: usize,
    step: &Step,
    text: &str,
    refused: Option<&str>,
) -> Result<Oid> {
    let (status, label) = match refused {
        None => (DecisionStatus::Recorded, "recorded"),
        Some(_) => (DecisionStatus::Refused, "refused"),
    };
    let message = message(&s.run, index, step, refused);
    let blob = repo.blob(text.as_bytes())?;
    let mut tb = repo.treebuilder(None)?;
    tb.insert(FILE, blob, i32::from(git2::FileMode::Blob))?;
    let tree = repo.find_tree(tb.write()?)?;
    let commit = super::chain::commit(repo, &message, &tree, journal.head)?;
    crash::point("journal-objects", &step.id);
    let log = format!("git-steps: journal {label} {}", step.id);
    super::chain::move_ref(
        repo,
        s,
        &refname(&s.run),
        journal.head,
        commit,
        &log,
        &|| crash::point("journal-pushed", &step.id),
    )
    .map_err(|e| e.at_step(&step.id))?;
    journal.head = Some(commit);
    journal.push(JournalEntry {
        index,
        step_id: step.id.clone(),
        decision: step.digest.clone(),
        status,
        reason: refused.map(str::to_string),
        commit,
    });
    Ok(commit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(id: &str) -> Step {
        Step::parse(&format!(r#"{{"id":"{id}","files":{{"a":"x\n"}}}}"#)).unwrap()
    }

    fn oid() -> Oid {
        Oid::from_bytes(&[9; 20]).unwrap()
    }

    #[test]
    fn a_recorded_entry_reads_back() {
        let s = step("s1");
        let e = parse_message(&message("run-1", 4, &s, None), oid()).unwrap();
        assert_eq!((e.index, e.step_id.as_str()), (4, "s1"));
        assert_eq!(e.decision, s.digest);
        assert_eq!(e.status, DecisionStatus::Recorded);
        assert_eq!(e.reason, None);
        assert_eq!(e.commit, oid());
    }

    #[test]
    fn a_refused_entry_keeps_its_reason_on_one_line() {
        let s = step("s2");
        // A reason that looks like trailers, a divider and paragraphs.
        let reason = "it does not apply:\n\n---\nStep-Id: forged\nJournal-Index: 9\n";
        let e = parse_message(&message("r", 7, &s, Some(reason)), oid()).unwrap();
        assert_eq!((e.index, e.step_id.as_str()), (7, "s2"));
        assert_eq!(e.status, DecisionStatus::Refused);
        assert_eq!(
            e.reason.as_deref(),
            Some("it does not apply: --- Step-Id: forged Journal-Index: 9")
        );
    }

    #[test]
    fn messages_that_are_not_entries_are_refused() {
        let good = message("r", 1, &step("s1"), None);
        for (msg, why) in [
            ("hand commit\n", "no Journal-Index trailer"),
            (
                &good.replace("Journal-Index: 1", "Journal-Index: one"),
                "a bad Journal-Index",
            ),
            (
                &good.replace("Journal-Status: recorded", "Journal-Status: lost"),
                "unknown status",
            ),
            (
                &good.replace("Journal-Run: r\n", ""),
                "no Journal-Run trailer",
            ),
            (
                &good.replace("Journal-Decision", "X-Decision"),
                "no Journal-Decision trailer",
            ),
        ] {
            let e = parse_message(msg, oid()).unwrap_err().to_string();
            assert!(
                e.contains(why) && e.contains("is not a journal entry"),
                "{msg:?}: {e}"
            );
        }
    }
}
