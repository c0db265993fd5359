//! `history::packscan` against git as the oracle: what the bulk read hands
//! out for a commit (first parent, parent count, receipt) is what `git log`
//! says of it, and what the library's own libgit2 path reads; it answers
//! for exactly the commits a pack stores whole (`git verify-pack -v`), and
//! leaves out loose, deltified, corrupted and cut-off ones.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

use git2::Oid;
use git_steps::history::packscan::{self, Bulk, RawCommit, Scanned, MIN_RUN};
use git_steps::history::receipt::ParseError;

use crate::common::*;

/// What git says of one commit.
#[derive(Debug)]
struct GitCommit {
    parents: Vec<Oid>,
    /// The values of each receipt key, as `%(trailers:key=…,valueonly)`.
    id: Vec<String>,
    run: Vec<String>,
    decision: Vec<String>,
    index: Vec<String>,
}

fn git_commits(r: &Repo) -> HashMap<Oid, GitCommit> {
    let key = |k: &str| format!("%(trailers:key={k},valueonly,separator=%x03)");
    let format = format!(
        "--format=%H%x01%P%x01{}%x01{}%x01{}%x01{}%x02",
        key("Step-Id"),
        key("Step-Run"),
        key("Step-Decision"),
        key("Step-Index")
    );
    let out = r.git(&["log", "--all", &format]);
    let values = |s: &str| -> Vec<String> {
        s.split('\x03')
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .collect()
    };
    out.split('\x02')
        .map(|rec| rec.trim_start_matches('\n'))
        .filter(|rec| !rec.is_empty())
        .map(|rec| {
            let f: Vec<&str> = rec.split('\x01').collect();
            assert_eq!(f.len(), 6, "{rec:?}");
            (
                Oid::from_str(f[0]).unwrap(),
                GitCommit {
                    parents: f[1]
                        .split_whitespace()
                        .map(|p| Oid::from_str(p).unwrap())
                        .collect(),
                    id: values(f[2]),
                    run: values(f[3]),
                    decision: values(f[4]),
                    index: values(f[5]),
                },
            )
        })
        .collect()
}

/// One object of a pack, as `git verify-pack -v` lists it.
#[derive(Debug, Clone)]
struct PackEntry {
    oid: Oid,
    kind: String,
    in_pack: u64,
    offset: u64,
    deltified: bool,
    pack: PathBuf,
}

fn pack_entries(r: &Repo) -> Vec<PackEntry> {
    let dir = r.path(".git/objects/pack");
    let mut out = Vec::new();
    let mut idxs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "idx"))
        .collect();
    idxs.sort();
    for idx in idxs {
        let listing = r.git(&["verify-pack", "-v", idx.to_str().unwrap()]);
        for line in listing.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let Ok(oid) = Oid::from_str(f.first().copied().unwrap_or("")) else {
                continue;
            };
            if f.len() < 5 || f[0].len() != 40 {
                continue;
            }
            out.push(PackEntry {
                oid,
                kind: f[1].to_string(),
                in_pack: f[3].parse().unwrap(),
                offset: f[4].parse().unwrap(),
                deltified: f.len() >= 7,
                pack: idx.with_extension("pack"),
            });
        }
    }
    out
}

/// The commits a pack stores whole: what a bulk read may answer for.
fn whole_commits(entries: &[PackEntry]) -> BTreeSet<Oid> {
    entries
        .iter()
        .filter(|e| e.kind == "commit" && !e.deltified)
        .map(|e| e.oid)
        .collect()
}

fn first_parents(r: &Repo) -> Vec<Oid> {
    r.git(&["rev-list", "--first-parent", "HEAD"])
        .lines()
        .map(|l| Oid::from_str(l).unwrap())
        .collect()
}

/// Every commit of the repository, first parents of HEAD first (newest
/// first, the order a scan asks in), then the others.
fn scan_order(r: &Repo, git: &HashMap<Oid, GitCommit>) -> Vec<Oid> {
    let mut order = first_parents(r);
    let on: BTreeSet<Oid> = order.iter().copied().collect();
    let mut rest: Vec<Oid> = git.keys().filter(|o| !on.contains(o)).copied().collect();
    rest.sort();
    order.extend(rest);
    order
}

/// Assert that what the bulk read says of `oid` is what git says, and
/// what the library's libgit2 path reads.
#[track_caller]
fn agrees(repo: &git2::Repository, git: &HashMap<Oid, GitCommit>, oid: Oid, s: &Scanned) {
    let g = &git[&oid];
    assert_eq!(s.parents, g.parents.len(), "parent count of {oid}");
    assert_eq!(
        s.first_parent,
        g.parents.first().copied(),
        "first parent of {oid}"
    );
    match &s.receipt {
        Ok(rc) => {
            assert_eq!(
                (
                    vec![rc.id.clone()],
                    vec![rc.run.clone()],
                    vec![rc.decision.clone()]
                ),
                (g.id.clone(), g.run.clone(), g.decision.clone()),
                "receipt of {oid}"
            );
            assert_eq!(
                rc.index
                    .map(|n| n.to_string())
                    .into_iter()
                    .collect::<Vec<_>>(),
                g.index,
                "Step-Index of {oid}"
            );
        }
        Err(ParseError::NotAReceipt) => assert!(
            g.id.is_empty() && g.run.is_empty() && g.decision.is_empty(),
            "{oid}: no receipt read, git shows {g:?}"
        ),
        Err(ParseError::Malformed(why)) => {
            let index_ok = match g.index.as_slice() {
                [] => true,
                [n] => n.parse::<u64>().is_ok_and(|n| n >= 1),
                _ => false,
            };
            assert!(
                !(g.id.len() == 1 && g.run.len() == 1 && g.decision.len() == 1 && index_ok),
                "{oid}: read as malformed ({why}), git shows a well-formed receipt: {g:?}"
            )
        }
    }
    // The library's own path (libgit2's bytes, the same parser).
    let odb = repo.odb().unwrap();
    let obj = odb.read(oid).unwrap();
    let slow = Scanned::from_raw(RawCommit::parse(oid, obj.data()).unwrap());
    assert_eq!(s.first_parent, slow.first_parent, "{oid}");
    assert_eq!(s.parents, slow.parents, "{oid}");
    assert_eq!(s.receipt, slow.receipt, "{oid}");
}

/// Ask the bulk read for each of `order`; check every answer against git;
/// return the commits it answered for.
fn take_all(
    repo: &git2::Repository,
    git: &HashMap<Oid, GitCommit>,
    bulk: &mut Bulk,
    order: &[Oid],
) -> BTreeSet<Oid> {
    let mut found = BTreeSet::new();
    for &oid in order {
        if let Some(s) = bulk.take(oid) {
            agrees(repo, git, oid, &s);
            found.insert(oid);
            // Each commit is handed out once.
            assert!(bulk.take(oid).is_none(), "{oid} handed out twice");
        }
    }
    found
}

/// Messages of every shape a scan meets: receipts of this run and of
/// another, plain commits, receipts that are malformed (two ids, no
/// decision, a bad index), a `Step-Id` line git does not read as a
/// trailer, and long bodies (which a repack may store as deltas).
fn messages(n: usize) -> Vec<Fake> {
    let long_body: String = (0..60)
        .map(|l| format!("A long shared paragraph of the body, line {l}.\n"))
        .collect();
    (0..n)
        .map(|i| {
            let message = match i % 9 {
                0..=2 => receipt_message(&format!("s{i}"), "r1", i + 1),
                3 => receipt_message(&format!("o{i}"), "other", i + 1),
                4 => format!("plain commit {i}\n\nSome text.\n"),
                5 => format!(
                    "two ids {i}\n\nStep-Id: a{i}\nStep-Id: b{i}\nStep-Run: r1\nStep-Decision: sha256:{i:064x}\n"
                ),
                6 => format!("no decision {i}\n\nStep-Id: n{i}\nStep-Run: r1\n"),
                7 => format!(
                    "not a trailer {i}\n\nStep-Id: x{i}\nStep-Run: r1\nthis line makes the paragraph prose, not trailers\nand so does this one\nand this\n\nEnd.\n"
                ),
                _ => format!(
                    "long body {i}\n\n{long_body}\nStep-Id: l{i}\nStep-Run: r1\nStep-Decision: sha256:{i:064x}\nStep-Index: 0\n"
                ),
            };
            Fake {
                message,
                merge_side: i % 37 == 20,
            }
        })
        .collect()
}

fn loose_commits(r: &Repo, n: usize) {
    for i in 0..n {
        r.write("loose.txt", &format!("loose {i}\n"));
        r.git(&["add", "loose.txt"]);
        let msg = receipt_message(&format!("loose{i}"), "r1", 1000 + i);
        r.git(&["commit", "-q", "-m", &msg]);
    }
}

#[test]
fn a_short_run_or_no_pack_is_not_read_in_bulk() {
    let r = Repo::new();
    // Loose objects only (`git commit`): no pack to read.
    loose_commits(&r, 3);
    let repo = r.open();
    assert!(packscan::read(&repo, MIN_RUN).is_none());
    r.git(&["repack", "-q", "-a", "-d"]);
    let repo = r.open();
    assert!(packscan::read(&repo, MIN_RUN - 1).is_none());
    assert!(packscan::read(&repo, 10).is_none());
    let mut bulk = packscan::read(&repo, MIN_RUN).expect("a packed repository is read");
    let git = git_commits(&r);
    let found = take_all(&repo, &git, &mut bulk, &first_parents(&r));
    // git stores two of the three as deltas of the newest: those are
    // left to libgit2.
    let whole = whole_commits(&pack_entries(&r));
    assert!(!whole.is_empty());
    assert_eq!(found, whole);
}

/// fast-import's own pack (objects in the order written: each commit
/// among its blob and tree, oldest first) plus loose commits on top.
#[test]
fn fast_import_pack_and_loose_commits_agree_with_git() {
    let r = Repo::new();
    fast_import(&r, &messages(300));
    loose_commits(&r, 4);
    let git = git_commits(&r);
    let entries = pack_entries(&r);
    let whole = whole_commits(&entries);
    // 300 on main, the side commits merged in.
    let merges = (0..300).filter(|i| i % 37 == 20).count();
    assert_eq!(whole.len(), 300 + merges);
    let loose: BTreeSet<Oid> = git.keys().filter(|o| !whole.contains(o)).copied().collect();
    assert_eq!(loose.len(), 4);
    let repo = r.open();
    let mut bulk = packscan::read(&repo, MIN_RUN).expect("bulk read");
    let found = take_all(&repo, &git, &mut bulk, &scan_order(&r, &git));
    assert_eq!(
        found, whole,
        "the bulk read answers for exactly the whole commits"
    );
}

/// `git repack -a -d -f`: git's own write order (commits first), with
/// deltas where git finds them.
#[test]
fn repacked_history_agrees_with_git() {
    let r = Repo::new();
    fast_import(&r, &messages(400));
    r.git(&[
        "repack",
        "-q",
        "-a",
        "-d",
        "-f",
        "--window=50",
        "--depth=50",
    ]);
    loose_commits(&r, 2);
    let git = git_commits(&r);
    let entries = pack_entries(&r);
    let whole = whole_commits(&entries);
    let deltified: BTreeSet<Oid> = entries
        .iter()
        .filter(|e| e.kind == "commit" && e.deltified)
        .map(|e| e.oid)
        .collect();
    let repo = r.open();
    let mut bulk = packscan::read(&repo, MIN_RUN).expect("bulk read");
    let found = take_all(&repo, &git, &mut bulk, &scan_order(&r, &git));
    assert_eq!(found, whole);
    assert!(found.is_disjoint(&deltified));
    assert_eq!(
        found.len() + deltified.len() + 2,
        git.len(),
        "every commit is whole, a delta, or loose"
    );
}

/// Two packs (two imports): whatever order the packs are read in, every
/// answer is git's, and the newest pack's first-parent commits (where a
/// scan starts) are all found.
#[test]
fn two_packs_agree_with_git() {
    let r = Repo::new();
    fast_import(&r, &messages(150));
    let first: BTreeSet<Oid> = whole_commits(&pack_entries(&r));
    fast_import(&r, &messages(120));
    let entries = pack_entries(&r);
    let all = whole_commits(&entries);
    let newest: BTreeSet<Oid> = all.difference(&first).copied().collect();
    assert_eq!(
        entries
            .iter()
            .map(|e| &e.pack)
            .collect::<BTreeSet<_>>()
            .len(),
        2
    );
    let git = git_commits(&r);
    let repo = r.open();
    let mut bulk = packscan::read(&repo, MIN_RUN).expect("bulk read");
    let order = first_parents(&r);
    let found = take_all(&repo, &git, &mut bulk, &order);
    assert!(found.is_subset(&all));
    // The side commits merged in are not asked for.
    let newest: BTreeSet<Oid> = newest.into_iter().filter(|o| order.contains(o)).collect();
    assert!(newest.len() >= 100, "{}", newest.len());
    assert!(
        newest.is_subset(&found),
        "missing: {:?}",
        newest.difference(&found).collect::<Vec<_>>()
    );
}

/// A commit whose stored bytes are damaged is left out (libgit2 reports
/// the damage when the scan reads it); every other answer stays git's.
#[test]
fn a_damaged_commit_is_left_out() {
    let r = Repo::new();
    fast_import(&r, &messages(200));
    r.git(&["repack", "-q", "-a", "-d", "-f"]);
    let git = git_commits(&r);
    let entries = pack_entries(&r);
    let whole = whole_commits(&entries);
    let order = first_parents(&r);
    // A whole commit in the middle of the run.
    let victim = order[100..]
        .iter()
        .find_map(|o| entries.iter().find(|e| e.oid == *o && !e.deltified))
        .cloned()
        .expect("a commit after the 100th is stored whole");
    let mut pack = std::fs::read(&victim.pack).unwrap();
    let at = (victim.offset + victim.in_pack / 2) as usize;
    pack[at] ^= 0x55;
    // Packs are read-only as git writes them.
    let mut perms = std::fs::metadata(&victim.pack).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&victim.pack, perms).unwrap();
    std::fs::write(&victim.pack, &pack).unwrap();
    let repo = r.open();
    let mut bulk = packscan::read(&repo, MIN_RUN).expect("bulk read");
    let mut found = BTreeSet::new();
    for &oid in &order {
        if let Some(s) = bulk.take(oid) {
            assert_ne!(oid, victim.oid, "the damaged commit was handed out");
            // Not through `agrees`: libgit2 cannot read the damaged pack
            // for the others' slow path either, but git's view stands.
            let g = &git[&oid];
            assert_eq!(s.first_parent, g.parents.first().copied());
            assert_eq!(s.parents, g.parents.len());
            found.insert(oid);
        }
    }
    let expected: BTreeSet<Oid> = order
        .iter()
        .filter(|o| whole.contains(o) && **o != victim.oid)
        .copied()
        .collect();
    assert_eq!(found, expected);
}

/// A pack cut short (a copy that stopped half way): the commits whose
/// bytes are all there are read, the others left out.
#[test]
fn a_truncated_pack_yields_only_intact_commits() {
    let r = Repo::new();
    fast_import(&r, &messages(200));
    r.git(&["repack", "-q", "-a", "-d", "-f"]);
    let git = git_commits(&r);
    let entries = pack_entries(&r);
    let order = scan_order(&r, &git);
    let whole = whole_commits(&entries);
    // Cut inside the commit region: after the 80th commit of the pack.
    let mut commits: Vec<&PackEntry> = entries
        .iter()
        .filter(|e| e.kind == "commit" && !e.deltified)
        .collect();
    commits.sort_by_key(|e| e.offset);
    let cut = commits[80].offset + 3;
    let pack = commits[80].pack.clone();
    let f = std::fs::OpenOptions::new().write(true).open(&pack);
    let f = match f {
        Ok(f) => f,
        Err(_) => {
            let mut perms = std::fs::metadata(&pack).unwrap().permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            perms.set_readonly(false);
            std::fs::set_permissions(&pack, perms).unwrap();
            std::fs::OpenOptions::new().write(true).open(&pack).unwrap()
        }
    };
    f.set_len(cut).unwrap();
    drop(f);
    let repo = r.open();
    let found = match packscan::read(&repo, MIN_RUN) {
        None => BTreeSet::new(),
        Some(mut bulk) => {
            let mut found = BTreeSet::new();
            for &oid in &order {
                if let Some(s) = bulk.take(oid) {
                    let e = entries.iter().find(|e| e.oid == oid).unwrap();
                    assert!(
                        e.offset + e.in_pack <= cut,
                        "{oid} handed out, but its bytes end at {} past the cut {cut}",
                        e.offset + e.in_pack
                    );
                    let g = &git[&oid];
                    assert_eq!(s.first_parent, g.parents.first().copied());
                    assert_eq!(s.parents, g.parents.len());
                    found.insert(oid);
                }
            }
            found
        }
    };
    // The commits well before the cut (the pack's trailing checksum is
    // gone: the last 20 bytes left may be read as such) are read.
    let intact: BTreeSet<Oid> = commits
        .iter()
        .filter(|e| e.offset + e.in_pack + 20 <= cut && whole.contains(&e.oid))
        .map(|e| e.oid)
        .collect();
    assert!(intact.len() >= 70, "{}", intact.len());
    assert!(
        intact.is_subset(&found),
        "missing: {:?}",
        intact.difference(&found).collect::<Vec<_>>()
    );
}

/// An index cut short is not read: the pack's commits are left to libgit2.
#[test]
fn a_truncated_index_is_not_read() {
    let r = Repo::new();
    fast_import(&r, &messages(100));
    let entries = pack_entries(&r);
    let order = first_parents(&r);
    assert!(
        packscan::read(&r.open(), MIN_RUN).is_some(),
        "read before the cut"
    );
    let idx = entries[0].pack.with_extension("idx");
    let len = std::fs::metadata(&idx).unwrap().len();
    let mut perms = std::fs::metadata(&idx).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&idx, perms).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&idx).unwrap();
    f.set_len(len / 2).unwrap();
    drop(f);
    let repo = r.open();
    if let Some(mut bulk) = packscan::read(&repo, MIN_RUN) {
        for &oid in &order {
            assert!(bulk.take(oid).is_none(), "{oid} read through a cut index");
        }
    }
}
