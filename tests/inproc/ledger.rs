//! `history::ledger`: the scan of a branch's first-parent history into the
//! applied set, checked against `git log`'s trailers: a run the library
//! made, receipts written by hand with `git commit`, a long run read in
//! bulk from a pack, and the histories it must refuse (a repeated id, a
//! commit without a receipt, another run's receipt, a malformed one), each
//! with its RefusalKind.

use git2::Oid;
use git_steps::history::ledger::{self, Reach};
use git_steps::RefusalKind;

use crate::common::*;

/// (Step-Id, Step-Decision, commit) of each receipt on `rev`'s first
/// parents, oldest first, as git reads them.
fn git_receipts(r: &Repo, rev: &str) -> Vec<(String, String, Oid)> {
    r.git(&[
        "log",
        "--reverse",
        "--first-parent",
        "--format=%H %(trailers:key=Step-Id,valueonly,separator=%x2C) %(trailers:key=Step-Decision,valueonly,separator=%x2C)",
        rev,
    ])
    .lines()
    .filter_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.len() == 3 && !f[1].is_empty())
            .then(|| (f[1].to_string(), f[2].to_string(), Oid::from_str(f[0]).unwrap()))
    })
    .collect()
}

fn entries(l: &ledger::Ledger) -> Vec<(String, String, Oid)> {
    l.entries
        .iter()
        .map(|e| (e.id.clone(), e.decision.clone(), e.commit))
        .collect()
}

fn head(r: &Repo) -> Option<Oid> {
    Some(Oid::from_str(&r.rev("HEAD")).unwrap())
}

/// A hand-written receipt commit (`git commit --allow-empty` would be
/// refused by nothing here: each changes a file, as a step does).
fn hand_commit(r: &Repo, file: &str, message: &str) -> Oid {
    r.write(file, &format!("{message}\n"));
    r.git(&["add", file]);
    r.git(&["commit", "-q", "-m", message]);
    head(r).unwrap()
}

#[test]
fn a_run_the_library_made_is_read_back_as_git_reads_it() {
    let r = Repo::with_run();
    let base = r.rev("HEAD");
    r.apply_ok(&[
        files_step("s1", "a.txt", "1\n"),
        files_step("s2", "b.txt", "2\n"),
        files_step("s3", "a.txt", "3\n"),
    ]);
    let repo = r.open();
    let l = ledger::scan(&repo, head(&r), "r1").unwrap();
    let git = git_receipts(&r, "HEAD");
    assert_eq!(entries(&l), git);
    assert_eq!(
        l.entries.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        ["s1", "s2", "s3"]
    );
    assert_eq!(
        l.entries.iter().map(|e| e.index).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert_eq!(l.base, Some(Oid::from_str(&base).unwrap()));
    assert_eq!(l.head, head(&r));
    assert_eq!(l.oldest_index, Some(1));
    assert!(l.problems.is_empty(), "{:?}", l.problems);
    l.ensure_sound("main").unwrap();
    assert_eq!(l.get("s2").unwrap().commit, git[1].2);
    assert!(l.get("s4").is_none());
    // Another run's id sees none of them: the whole branch is its base.
    let other = ledger::scan(&repo, head(&r), "r2").unwrap();
    assert!(other.entries.is_empty());
    assert_eq!(other.base, head(&r));
    // An unborn branch: nothing.
    let none = ledger::scan(&repo, None, "r1").unwrap();
    assert!(none.entries.is_empty() && none.base.is_none());
}

#[test]
fn receipts_written_by_hand_are_the_applied_set() {
    let r = Repo::with_run();
    let base = head(&r);
    // Receipts without a Step-Index (written before it existed) and with.
    hand_commit(
        &r,
        "x.txt",
        "step h1: by hand\n\nStep-Id: h1\nStep-Run: r1\nStep-Decision: sha256:aa",
    );
    hand_commit(&r, "y.txt", &receipt_message("h2", "r1", 2));
    // Trailer keys are case-insensitive, as git reads them.
    hand_commit(
        &r,
        "z.txt",
        "step h3\n\nstep-id: h3\nSTEP-RUN: r1\nstep-decision: sha256:cc\nStep-Index: 3",
    );
    let repo = r.open();
    let l = ledger::scan(&repo, head(&r), "r1").unwrap();
    assert!(l.problems.is_empty(), "{:?}", l.problems);
    assert_eq!(entries(&l), git_receipts(&r, "HEAD"));
    assert_eq!(
        l.entries.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        ["h1", "h2", "h3"]
    );
    assert_eq!(l.base, base);
    assert_eq!(l.oldest_index, None);
    assert_eq!(l.get("h3").unwrap().decision, "sha256:cc");
}

#[test]
fn a_repeated_step_id_is_broken_history() {
    let r = Repo::with_run();
    hand_commit(&r, "a", &receipt_message("s1", "r1", 1));
    let first = head(&r).unwrap();
    hand_commit(&r, "b", &receipt_message("s2", "r1", 2));
    let again = hand_commit(&r, "c", &receipt_message("s1", "r1", 3));
    let repo = r.open();
    let l = ledger::scan(&repo, head(&r), "r1").unwrap();
    // The first receipt counts; the repeat is reported, not applied.
    assert_eq!(
        l.entries
            .iter()
            .map(|e| (e.id.as_str(), e.commit))
            .collect::<Vec<_>>(),
        [("s1", first), ("s2", l.entries[1].commit)]
    );
    assert_eq!(l.problems.len(), 1, "{:?}", l.problems);
    assert_eq!(l.problems[0].commit, again);
    assert!(l.problems[0].what.contains("s1"), "{:?}", l.problems);
    let e = l.ensure_sound("main").unwrap_err();
    let refusal = refusal(&e);
    assert_eq!(refusal.kind, RefusalKind::BrokenHistory);
    assert!(
        refusal.saw.contains(&again.to_string()[..7]),
        "{}",
        refusal.saw
    );
    assert_eq!(e.exit_code(), 3);
}

#[test]
fn a_commit_without_a_receipt_inside_the_run_is_a_foreign_commit() {
    let r = Repo::with_run();
    hand_commit(&r, "a", &receipt_message("s1", "r1", 1));
    let foreign = hand_commit(&r, "hand.txt", "a fix made with plain git");
    hand_commit(&r, "b", &receipt_message("s2", "r1", 2));
    let repo = r.open();
    let l = ledger::scan(&repo, head(&r), "r1").unwrap();
    assert_eq!(
        l.entries.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        ["s1", "s2"]
    );
    assert_eq!(l.problems.len(), 1, "{:?}", l.problems);
    assert_eq!(l.problems[0].commit, foreign);
    let e = l.ensure_sound("main").unwrap_err();
    assert_eq!(refusal(&e).kind, RefusalKind::ForeignCommit);
    assert!(
        refusal(&e).hint.to_string().contains("adopt"),
        "{}",
        refusal(&e).hint
    );
    // A commit without a receipt on top of the run is outside no segment:
    // it is still inside the run (the segment ends at the head).
    let r2 = Repo::with_run();
    hand_commit(&r2, "a", &receipt_message("s1", "r1", 1));
    let top = hand_commit(&r2, "hand.txt", "on top");
    let l2 = ledger::scan(&r2.open(), head(&r2), "r1").unwrap();
    assert_eq!(
        l2.problems.iter().map(|p| p.commit).collect::<Vec<_>>(),
        [top]
    );
    assert_eq!(
        refusal(&l2.ensure_sound("main").unwrap_err()).kind,
        RefusalKind::ForeignCommit
    );
}

#[test]
fn another_runs_receipt_inside_the_run_is_a_foreign_commit() {
    let r = Repo::with_run();
    hand_commit(&r, "a", &receipt_message("s1", "r1", 1));
    let other = hand_commit(&r, "o", &receipt_message("x1", "r9", 1));
    hand_commit(&r, "b", &receipt_message("s2", "r1", 2));
    let l = ledger::scan(&r.open(), head(&r), "r1").unwrap();
    assert_eq!(l.problems.len(), 1, "{:?}", l.problems);
    assert_eq!(l.problems[0].commit, other);
    assert!(l.problems[0].what.contains("r9"), "{:?}", l.problems);
    let e = l.ensure_sound("main").unwrap_err();
    assert_eq!(refusal(&e).kind, RefusalKind::ForeignCommit);
}

#[test]
fn a_malformed_receipt_or_a_gap_is_broken_history() {
    // Two Step-Run trailers.
    let r = Repo::with_run();
    hand_commit(&r, "a", &receipt_message("s1", "r1", 1));
    let bad = hand_commit(
        &r,
        "b",
        "step s2\n\nStep-Id: s2\nStep-Run: r1\nStep-Run: r1\nStep-Decision: sha256:00\nStep-Index: 2",
    );
    let l = ledger::scan(&r.open(), head(&r), "r1").unwrap();
    assert_eq!(l.problems.len(), 1, "{:?}", l.problems);
    assert_eq!(l.problems[0].commit, bad);
    assert!(l.problems[0].what.contains("malformed"), "{:?}", l.problems);
    assert_eq!(
        refusal(&l.ensure_sound("main").unwrap_err()).kind,
        RefusalKind::BrokenHistory
    );
    // A Step-Index that skips a position: a step is missing.
    let r = Repo::with_run();
    hand_commit(&r, "a", &receipt_message("s1", "r1", 1));
    let gap = hand_commit(&r, "b", &receipt_message("s3", "r1", 3));
    let l = ledger::scan(&r.open(), head(&r), "r1").unwrap();
    assert_eq!(
        l.problems.iter().map(|p| p.commit).collect::<Vec<_>>(),
        [gap]
    );
    assert_eq!(
        refusal(&l.ensure_sound("main").unwrap_err()).kind,
        RefusalKind::BrokenHistory
    );
}

/// A run longer than `packscan::MIN_RUN`, packed: the scan reads it in
/// bulk, and still gives exactly git's receipts; with the pack indexed in
/// version 1 (which libgit2 reads and the bulk read leaves alone), the
/// same ledger through libgit2.
#[test]
fn a_long_packed_run_is_read_as_git_reads_it() {
    let n = git_steps::history::packscan::MIN_RUN as usize + 300;
    let r = Repo::new();
    let commits: Vec<Fake> = (0..n)
        .map(|i| Fake {
            message: receipt_message(&format!("s{}", i + 1), "r1", i + 1),
            merge_side: false,
        })
        .collect();
    fast_import(&r, &commits);
    r.git(&["repack", "-q", "-a", "-d"]);
    let repo = r.open();
    assert!(git_steps::history::packscan::read(&repo, n as u64).is_some());
    let packed = ledger::scan_with(&repo, head(&r), "r1", Reach::Full).unwrap();
    assert!(packed.problems.is_empty(), "{:?}", &packed.problems[..1]);
    let git = git_receipts(&r, "HEAD");
    assert_eq!(git.len(), n);
    assert_eq!(entries(&packed), git);
    assert_eq!(packed.base, None);
    assert_eq!(packed.oldest_index, Some(1));
    // The same pack, its index rewritten in version 1.
    let pack_dir = r.path(".git/objects/pack");
    let packs: Vec<_> = std::fs::read_dir(&pack_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pack"))
        .collect();
    assert_eq!(packs.len(), 1);
    let idx = packs[0].with_extension("idx");
    std::fs::remove_file(&idx).unwrap();
    r.git(&[
        "index-pack",
        "--index-version=1",
        "-o",
        idx.to_str().unwrap(),
        packs[0].to_str().unwrap(),
    ]);
    let v1 = r.open();
    assert!(git_steps::history::packscan::read(&v1, n as u64).is_none());
    let walked = ledger::scan_with(&v1, head(&r), "r1", Reach::Full).unwrap();
    assert!(walked.problems.is_empty());
    assert_eq!(entries(&walked), entries(&packed));
}

/// SPEC "Receipts": a receipt is what `git log --format='%(trailers:…)'`
/// shows, for every message shape. A receipt committed with
/// `i18n.commitEncoding=ISO-8859-1` (a non-UTF-8 message with an
/// `encoding` header) is one to git log, which re-encodes it, and none to
/// the scan, which reads a message that is not UTF-8 as no receipt
/// (`packscan::RawCommit::message`): the run is refused as holding a
/// foreign commit. Ignored until the engine decides which is right.
#[test]
#[ignore = "engine divergence from git: a receipt in a non-UTF-8 (encoding header) message is read as no receipt"]
fn a_receipt_in_a_latin1_message_is_read_as_git_reads_it() {
    let r = Repo::with_run();
    hand_commit(&r, "a", &receipt_message("s1", "r1", 1));
    r.write("b", "b\n");
    r.git(&["add", "b"]);
    let mut msg = b"step s2: caf\xe9\n\n".to_vec();
    msg.extend_from_slice(
        receipt_message("s2", "r1", 2)
            .split_once("\n\n")
            .unwrap()
            .1
            .as_bytes(),
    );
    let file = r.tmp.path().join("latin1-message");
    std::fs::write(&file, &msg).unwrap();
    r.git(&[
        "-c",
        "i18n.commitEncoding=ISO-8859-1",
        "commit",
        "-q",
        "-F",
        file.to_str().unwrap(),
    ]);
    let git = git_receipts(&r, "HEAD");
    assert_eq!(
        git.iter().map(|g| g.0.as_str()).collect::<Vec<_>>(),
        ["s1", "s2"]
    );
    let l = ledger::scan(&r.open(), head(&r), "r1").unwrap();
    assert!(l.problems.is_empty(), "{:?}", l.problems);
    assert_eq!(entries(&l), git);
}
