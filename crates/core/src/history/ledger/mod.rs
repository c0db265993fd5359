//! The ledger: the run's applied steps, read back from the receipts in history.
//!
//! Owns the scan of the branch's first-parent history into the applied set.
//! The run's segment starts at its oldest receipt and ends at the branch head;
//! what lies before it is the base the run started from. Invariant: the log is
//! the truth — a step counts as applied exactly when a commit in the segment
//! carries its receipt — and a segment with a commit that is not a receipt of
//! this run, a malformed receipt, or a repeated step id is reported, never
//! silently skipped.

use std::collections::HashMap;

use git2::{Oid, Repository};

use crate::error::{Error, RefusalKind, Result};
use crate::git::short;
use crate::history::packscan::{self, RawCommit, Scanned};
use crate::history::receipt::ParseError;

mod edges;
mod ids;
use ids::{id_hash, IdIndex};
mod sound;
use edges::{hidden_or_cut, receipt_below, shallow_boundary, MERGE_HIDES};
pub use edges::{hidden_receipts, Hidden};

/// One applied step, as its receipt says.
#[derive(Debug, Clone)]
pub struct AppliedStep {
    /// 0-based position in the run.
    pub index: usize,
    pub id: String,
    pub decision: String,
    pub commit: Oid,
}

/// A problem with the history itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub commit: Oid,
    pub kind: ProblemKind,
    pub what: String,
}

/// What is wrong with a commit of the run: code branches on this, never on
/// the words of [`Problem::what`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    /// A commit with no receipt inside the run (`adopt` can take it in).
    NoReceipt,
    /// A receipt of another run inside this run.
    OtherRun,
    /// A receipt that does not parse.
    Malformed,
    /// A step whose commit has more than one parent.
    StepIsMerge,
    /// A step id a second time.
    RepeatedId,
    /// A `Step-Index` that is not the step's position.
    WrongIndex,
    /// A merge whose other parent holds a receipt the first-parent line
    /// does not: its step would be applied again.
    MergeHidesReceipt,
    /// A merge whose other side a shallow boundary cuts.
    MergeCut,
}

impl ProblemKind {
    /// The refusal a ledger with this problem first gets.
    pub fn refusal(self) -> RefusalKind {
        match self {
            ProblemKind::NoReceipt | ProblemKind::OtherRun => RefusalKind::ForeignCommit,
            ProblemKind::MergeHidesReceipt => RefusalKind::Diverged,
            ProblemKind::Malformed
            | ProblemKind::StepIsMerge
            | ProblemKind::RepeatedId
            | ProblemKind::WrongIndex
            | ProblemKind::MergeCut => RefusalKind::BrokenHistory,
        }
    }
}

/// The run as the history records it.
#[derive(Debug, Default)]
pub struct Ledger {
    /// The branch head scanned (None: unborn branch).
    pub head: Option<Oid>,
    /// The commit the run started from (None: the run starts at the root).
    pub base: Option<Oid>,
    /// Applied steps, oldest first.
    pub entries: Vec<AppliedStep>,
    /// Built on first lookup (`status` on a long run never needs it).
    by_id: std::cell::OnceCell<IdIndex>,
    /// Commits in the segment that are not receipts of this run, malformed
    /// receipts, repeated ids.
    pub problems: Vec<Problem>,
    /// In a shallow clone: the boundary commit where the scan ran out of
    /// history before it reached the run's first step (or the root).
    pub shallow: Option<Oid>,
    /// In a shallow clone: a merge inside the run whose other side the
    /// boundary cuts (see [`hidden_receipts`]); only a whole history can
    /// say what it brings in.
    pub merges_cut: bool,
    /// The `Step-Index` of the oldest receipt read, if it had one.
    pub oldest_index: Option<u64>,
    /// Commits without a receipt that a later `adopt` step of the run
    /// names (`Step-Adopt`): part of the run, each with the number of
    /// entries that precede it. Their changes count for duplicated hunks.
    pub adopted: Vec<(usize, Oid)>,
    /// Steps that carry effects (`Step-Effects`): (position among the
    /// entries, how many), oldest first.
    pub effects: Vec<(usize, usize)>,
}

impl Ledger {
    /// A ledger from entries known to be sound (the receipt index).
    pub fn from_parts(head: Option<Oid>, base: Option<Oid>, entries: Vec<AppliedStep>) -> Ledger {
        Ledger {
            head,
            base,
            entries,
            by_id: std::cell::OnceCell::new(),
            problems: Vec::new(),
            shallow: None,
            merges_cut: false,
            oldest_index: None,
            adopted: Vec::new(),
            effects: Vec::new(),
        }
    }

    /// A copy (the id index is built again when needed).
    pub fn copy(&self) -> Ledger {
        Ledger {
            head: self.head,
            base: self.base,
            entries: self.entries.clone(),
            by_id: std::cell::OnceCell::new(),
            problems: self.problems.clone(),
            shallow: self.shallow,
            merges_cut: self.merges_cut,
            oldest_index: self.oldest_index,
            adopted: self.adopted.clone(),
            effects: self.effects.clone(),
        }
    }

    pub fn get(&self, id: &str) -> Option<&AppliedStep> {
        let by_id = self.by_id.get_or_init(|| IdIndex::new(&self.entries));
        by_id.get(&self.entries, id)
    }

    pub fn last(&self) -> Option<&AppliedStep> {
        self.entries.last()
    }

    /// The history fingerprint of the applied steps.
    pub fn history_fingerprint(&self) -> String {
        crate::tree::fingerprint::history(
            self.entries
                .iter()
                .map(|e| (e.id.as_str(), e.decision.as_str())),
        )
    }
}

/// How far a scan reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Down to the run's first step: the receipt with `Step-Index: 1` whose
    /// parent is no receipt of the run. Receipts without an index (older
    /// runs) are scanned to the root. The cost follows the run, not the
    /// history it started from.
    Run,
    /// Every first parent down to the root (or a shallow clone's boundary,
    /// noted in [`Ledger::shallow`]): `verify`.
    Full,
}

/// Scan the first-parent history of `head` for receipts of `run`, down to
/// the run's first step ([`Reach::Run`]).
///
/// In a shallow clone, a run whose first step lies below the clone's
/// boundary is refused (exit 1) with the fetch that brings it; a run with
/// no receipt above the boundary is a new run.
pub fn scan(repo: &Repository, head: Option<Oid>, run: &str) -> Result<Ledger> {
    scan_kept(repo, head, run, true)
}

/// As [`scan`], for a command's last scan of `head`: a kept scan of it is
/// handed over rather than copied, and this one is not kept.
pub fn scan_last(repo: &Repository, head: Option<Oid>, run: &str) -> Result<Ledger> {
    scan_kept(repo, head, run, false)
}

fn scan_kept(repo: &Repository, head: Option<Oid>, run: &str, keep: bool) -> Result<Ledger> {
    // One command scans the same head more than once (a resume checks the
    // local branch, then the durable one, then reads the run for its
    // steps; on a fresh box they are one commit): the last scan is kept.
    // Commits are immutable, so a scan of the same head in the same
    // repository is the same ledger.
    let key = (repo.commondir().to_path_buf(), head, run.to_string());
    let memo = LAST_SCAN.with(|m| {
        let mut m = m.borrow_mut();
        if m.as_ref().is_none_or(|(k, _)| *k != key) {
            return None;
        }
        if keep {
            m.as_ref().map(|(_, l)| l.copy())
        } else {
            m.take().map(|(_, l)| l)
        }
    });
    let ledger = match memo {
        Some(l) => l,
        None => {
            let l = scan_with(repo, head, run, Reach::Run)?;
            if keep {
                LAST_SCAN.with(|m| *m.borrow_mut() = Some((key, l.copy())));
            }
            l
        }
    };
    if let Some(boundary) = ledger.shallow {
        if !ledger.entries.is_empty() {
            return Err(Error::other(format!(
                "this clone is shallow and the run {run} starts below its boundary (commit {}): its first step is not here",
                short(boundary)
            ))
            .with_hint(format!(
                "fetch more history first: `git fetch --deepen={}` (or `git fetch --unshallow`); with a remote, git-steps deepens the clone itself",
                deepen_estimate(&ledger)
            )));
        }
    }
    Ok(ledger)
}

type ScanKey = (std::path::PathBuf, Option<Oid>, String);

thread_local! {
    /// The last [`scan`]: its repository, head and run, and its ledger.
    static LAST_SCAN: std::cell::RefCell<Option<(ScanKey, Ledger)>> = const { std::cell::RefCell::new(None) };
}

/// Forget the kept scan: the history under a head changed (a shallow
/// clone was deepened), so a scan of the same head may read differently.
pub fn forget_scans() {
    LAST_SCAN.with(|m| *m.borrow_mut() = None);
}

/// How much deeper a shallow clone must go to hold the run's first step
/// and its base: the oldest receipt here says its position (`Step-Index`
/// k), so k - 1 steps and the base lie below it; 50 when it does not say.
pub fn deepen_estimate(ledger: &Ledger) -> u64 {
    match ledger.oldest_index {
        Some(k) if k >= 1 => k,
        _ => 50,
    }
}

/// Scan the first-parent history of `head` for receipts of `run`, as far as
/// `reach` says.
pub fn scan_with(repo: &Repository, head: Option<Oid>, run: &str, reach: Reach) -> Result<Ledger> {
    let mut ledger = Ledger {
        head,
        ..Ledger::default()
    };
    let Some(head) = head else {
        return Ok(ledger);
    };
    // Walk newest to oldest, remembering each commit's receipt status; the
    // segment is everything from the head down to the oldest receipt of this
    // run.
    // What the scan keeps of each commit, compactly: a long run is held
    // while it is read.
    struct Seen {
        oid: Oid,
        first_parent: Option<Oid>,
        parents: u32,
        kind: Kind,
    }
    enum Kind {
        /// A receipt of this run: its index in `ours`.
        Ours(u32),
        /// A receipt of another run, named.
        Other(Box<str>),
        NotAReceipt,
        Malformed(Box<str>),
    }
    #[derive(Default)]
    struct Ours {
        id: String,
        decision: String,
        index: Option<u64>,
        adopts: Vec<Oid>,
        effects: usize,
    }
    let mut ours: Vec<Ours> = Vec::new();
    // Follow first parents by hand: a revwalk sorts (and so reads) the
    // whole graph before yielding the first commit, which reads every
    // commit twice.
    let mut seen: Vec<Seen> = Vec::new();
    let mut oldest_receipt: Option<usize> = None;
    let odb = repo.odb()?;
    let shallow = shallow_boundary(repo)?;
    let _fast = FastReads::begin();
    // The newest receipt's Step-Index says how long the run is.
    let progress = crate::progress::phase("reading the run's receipts", None);
    let mut bulk: Option<packscan::Bulk> = None;
    let mut next = Some(head);
    // A commit that is its own ancestor (a corrupted or tampered store: a
    // commit naming itself as parent) would make this walk endless; Brent's
    // cycle check finds it in constant memory.
    let (mut mark, mut power, mut since) = (head, 1usize, 0usize);
    while let Some(oid) = next {
        if seen.len().is_multiple_of(4096) {
            progress.set(seen.len() as u64);
        }
        if !seen.is_empty() && oid == mark {
            return Err(Error::corrupt(format!(
                "commit {} is its own ancestor: the first-parent history of {} loops, which no git history can (the object store is corrupt or was tampered with)",
                short(oid),
                short(head)
            ))
            .with_hint("`git fsck` shows the damage; fetch the run from its remote into a fresh clone"));
        }
        since += 1;
        if since == power {
            (mark, power, since) = (oid, power * 2, 0);
        }
        let raw = match bulk.as_mut().and_then(|b| b.take(oid)) {
            Some(scanned) => scanned,
            None => read_scanned(&odb, oid)?,
        };
        let r = raw.receipt;
        let first_step = matches!(&r, Ok(rc) if rc.run == run && rc.index == Some(1));
        let kind = match r {
            Ok(rc) if rc.run == run => {
                if ours.is_empty() {
                    if let Some(n) = rc.index {
                        progress.total(n);
                        // A long run: read its commits in bulk, on every
                        // core (the same commits, parsed the same way).
                        bulk = packscan::read(repo, n);
                    }
                }
                oldest_receipt = Some(seen.len());
                ours.push(Ours {
                    id: rc.id,
                    decision: rc.decision,
                    index: rc.index,
                    adopts: rc.adopts,
                    effects: rc.effects,
                });
                Kind::Ours((ours.len() - 1) as u32)
            }
            Ok(rc) => Kind::Other(rc.run.into()),
            Err(ParseError::NotAReceipt) => Kind::NotAReceipt,
            Err(ParseError::Malformed(m)) => Kind::Malformed(m.into()),
        };
        next = raw.first_parent;
        seen.push(Seen {
            oid,
            first_parent: raw.first_parent,
            parents: u32::try_from(raw.parents).unwrap_or(u32::MAX),
            kind,
        });
        let at_boundary = shallow.contains(&oid);
        if at_boundary {
            // The parents are not in this clone.
            next = None;
            // Noted before the first-step check below: a run's first step
            // at the boundary lacks its base, and a run is never judged
            // from a history whose first step's parent is missing.
            if raw.first_parent.is_some() {
                ledger.shallow = Some(oid);
            }
        }
        if reach == Reach::Run && first_step {
            // Stop at the run's first step, unless a receipt of the run
            // lies below it within LOOK_BELOW commits (a copied first step,
            // a run that reused its id, or a first step forged on top of a
            // hand commit to hide the run's real receipts): then the whole
            // history is read, and its problems reported. At a shallow
            // boundary nothing below can be read: the first step stands.
            let Some(p) = next else { break };
            if !receipt_below(&odb, &shallow, p, run)? {
                break;
            }
        }
    }
    drop(bulk);
    let Some(oldest) = oldest_receipt else {
        ledger.base = Some(head);
        return Ok(ledger);
    };
    ledger.base = seen[oldest].first_parent;
    ledger.oldest_index = match seen[oldest].kind {
        Kind::Ours(i) => ours[i as usize].index,
        _ => None,
    };
    // Ids seen so far, by hash (the strings themselves move into the
    // entries: a long run is held once, not twice).
    let mut by_id: HashMap<u64, usize> = HashMap::new();
    let mut more_ids: Vec<(u64, usize)> = Vec::new();
    // Commits an `adopt` step of this run names (always newer than them).
    let adopted: std::collections::HashSet<Oid> =
        ours.iter().flat_map(|r| r.adopts.iter().copied()).collect();
    seen.truncate(oldest + 1);
    // Merges inside the run that are no step of it (a person's `git pull`,
    // adopted or not): receipts behind their other parents are looked for
    // once the ledger is whole.
    let mut merges: Vec<Oid> = Vec::new();
    for s in seen.into_iter().rev() {
        if s.parents > 1 && !matches!(s.kind, Kind::Ours(_)) {
            merges.push(s.oid);
        }
        if matches!(s.kind, Kind::NotAReceipt) && adopted.contains(&s.oid) {
            ledger.adopted.push((ledger.entries.len(), s.oid));
            continue;
        }
        match s.kind {
            Kind::Ours(i) => {
                let r = std::mem::take(&mut ours[i as usize]);
                if s.parents > 1 {
                    ledger.problems.push(Problem {
                        commit: s.oid,
                        kind: ProblemKind::StepIsMerge,
                        what: format!("step {} is a merge commit; a step has one parent", r.id),
                    });
                }
                let h = id_hash(&r.id);
                let entries = &ledger.entries;
                let prev = by_id
                    .get(&h)
                    .into_iter()
                    .chain(more_ids.iter().filter(|(k, _)| *k == h).map(|(_, i)| i))
                    .find(|&&i| entries[i].id == r.id);
                if let Some(prev) = prev {
                    ledger.problems.push(Problem {
                        commit: s.oid,
                        kind: ProblemKind::RepeatedId,
                        what: format!(
                            "step {} appears twice (first in {})",
                            r.id,
                            short(ledger.entries[*prev].commit)
                        ),
                    });
                    continue;
                }
                let position = ledger.entries.len() + 1;
                match r.index {
                    // Below a shallow boundary the positions are unknown.
                    Some(n) if n != position as u64 && ledger.shallow.is_none() => {
                        ledger.problems.push(Problem {
                            commit: s.oid,
                            kind: ProblemKind::WrongIndex,
                            what: format!(
                                "step {} says Step-Index {n} but is step {position} of the run (a step is missing or out of order)",
                                r.id
                            ),
                        })
                    }
                    _ => {}
                }
                match by_id.entry(h) {
                    std::collections::hash_map::Entry::Occupied(_) => {
                        more_ids.push((h, ledger.entries.len()))
                    }
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(ledger.entries.len());
                    }
                }
                if r.effects > 0 {
                    ledger.effects.push((ledger.entries.len(), r.effects));
                }
                ledger.entries.push(AppliedStep {
                    index: ledger.entries.len(),
                    id: r.id,
                    decision: r.decision,
                    commit: s.oid,
                });
            }
            Kind::Other(other) => ledger.problems.push(Problem {
                commit: s.oid,
                kind: ProblemKind::OtherRun,
                what: format!("a receipt of another run ({other}) inside this run"),
            }),
            Kind::NotAReceipt => ledger.problems.push(Problem {
                commit: s.oid,
                kind: ProblemKind::NoReceipt,
                what: "a commit with no receipt inside the run".into(),
            }),
            Kind::Malformed(m) => ledger.problems.push(Problem {
                commit: s.oid,
                kind: ProblemKind::Malformed,
                what: format!("a malformed receipt: {m}"),
            }),
        }
    }
    if !merges.is_empty() {
        let (hidden, cut) = hidden_or_cut(repo, &ledger, run, merges)?;
        for m in cut {
            ledger.merges_cut = true;
            ledger.problems.push(Problem {
                commit: m,
                kind: ProblemKind::MergeCut,
                what: "a merge whose other side this shallow clone's boundary cuts: receipts behind it cannot be checked here (`git fetch --unshallow`)".into(),
            });
        }
        for h in hidden {
            ledger.problems.push(Problem {
                commit: h.merge,
                kind: ProblemKind::MergeHidesReceipt,
                what: format!(
                    "{MERGE_HIDES} step {}'s receipt (commit {}), which the run's first-parent history does not: its step would be applied again",
                    h.id,
                    short(h.commit)
                ),
            });
        }
    }
    Ok(ledger)
}

/// While alive, libgit2 neither re-hashes objects it reads nor caches
/// them: a scan reads each commit once, and `git log` does not verify
/// object ids on read either. (libgit2's defaults are restored on drop; the
/// CLI is single-threaded.)
struct FastReads;

impl FastReads {
    fn begin() -> FastReads {
        git2::opts::strict_hash_verification(false);
        git2::opts::enable_caching(false);
        FastReads
    }
}

impl Drop for FastReads {
    fn drop(&mut self) {
        git2::opts::strict_hash_verification(true);
        git2::opts::enable_caching(true);
    }
}

/// Read commit `oid` from the object database, for a scan.
fn read_scanned(odb: &git2::Odb<'_>, oid: Oid) -> Result<Scanned> {
    let obj = odb.read(oid)?;
    if obj.kind() != git2::ObjectType::Commit {
        return Err(crate::error::Error::corrupt(format!(
            "{oid} is not a commit"
        )));
    }
    Ok(Scanned::from_raw(RawCommit::parse(oid, obj.data())?))
}
