//! Whether the paths a step writes hold uncommitted work, decided from
//! the index as git wrote it ([`crate::git::index_file`]), path by path.
//!
//! Owns that check. Invariant: a path is clean only when libgit2's status
//! would call it clean (its `maybe_modified` rules); where stat data cannot
//! vouch for a file, its content is compared as git compares it.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use git2::Repository;

use super::check::disk_is;
use super::{through_non_dir, workdir};
use crate::error::Result;
use crate::git::index_file::{Stat, INTENT_TO_ADD};
use crate::git::{BlobEntry, MODE_EXEC, MODE_FILE, MODE_LINK};

/// [`dirty_paths_in`] for `paths` alone, as libgit2's status decides it
/// (`maybe_modified`), without its walk of the worktree and index: per
/// path, HEAD's entry against the index's (a conflict, an intent to add, a
/// staged change or deletion is dirty), then the index's entry against
/// the file ([`look`]).
pub(super) fn dirty_by_index(
    repo: &Repository,
    index: &crate::git::index_file::IndexFile,
    paths: &[&str],
) -> Result<Vec<String>> {
    let workdir = workdir(repo)?;
    let head = repo.head().ok().and_then(|h| h.peel_to_tree().ok());
    let rules = Rules::of(repo)?;
    let mut out = Vec::new();
    for p in paths {
        let at_head = head
            .as_ref()
            .and_then(|t| t.get_path(Path::new(p)).ok())
            .filter(|e| e.kind() != Some(git2::ObjectType::Tree))
            .map(|e| (e.id(), e.filemode() as u32));
        let e = index.get(p.as_bytes(), 0);
        if index.conflicted(p.as_bytes()) || staged(at_head, e.as_ref()) {
            out.push(p.to_string());
            continue;
        }
        let Some(e) = e else { continue };
        let racy = index.racy(&e);
        let disk = match through_non_dir(&workdir, p) {
            true => None,
            false => fs::symlink_metadata(workdir.join(p))
                .ok()
                .map(|m| Disk::of(&m)),
        };
        if dirty_on_disk(repo, &workdir, p, look(&workdir, p, &e, racy, disk, &rules))? {
            out.push(p.to_string());
        }
    }
    Ok(out)
}

/// Every tracked path whose index or worktree differs from HEAD, as
/// [`dirty_by_index`] decides it for each, from one pass over HEAD's tree
/// and the index merged by path; the files' stat data is read on a few
/// threads (as git's `core.preloadIndex`), and only files stat cannot
/// vouch for are read. Sorted by path.
pub(super) fn dirty_whole(
    repo: &Repository,
    index: &crate::git::index_file::IndexFile,
) -> Result<Vec<String>> {
    let workdir = workdir(repo)?;
    let rules = Rules::of(repo)?;
    let head_tree = repo.head().ok().and_then(|h| h.peel_to_tree().ok());
    let mut leaves = Leaves::new(
        repo,
        head_tree.as_ref().map(|t| t.id()),
        index.valid_trees(),
    );
    // The merge: a path dirty in the index, or an entry (by its place in
    // the index) to look at on disk.
    let mut out: Vec<String> = Vec::new();
    let mut to_look: Vec<usize> = Vec::new();
    let mut head = leaves.by_ref().peekable();
    let mut entries = index.entries().enumerate().peekable();
    let lossy = |p: &[u8]| String::from_utf8_lossy(p).into_owned();
    loop {
        // A directory the cache tree vouches for: its index entries are
        // HEAD's, so only a conflict or an intent to add is staged there.
        if let Some(Head::Same(prefix)) = head.peek() {
            let prefix = prefix.clone();
            if entries.peek().is_none_or(|(_, e)| e.0 >= prefix.as_slice()) {
                head.next();
                while let Some((at, (path, stage, st))) =
                    entries.next_if(|(_, e)| e.0.starts_with(&prefix))
                {
                    if std::str::from_utf8(path).is_err() {
                        return super::check::dirty_paths_in(repo, None);
                    }
                    if stage != 0 || st.extended & INTENT_TO_ADD != 0 {
                        if out.last().map(|l| l.as_bytes()) != Some(path) {
                            out.push(lossy(path));
                        }
                    } else {
                        to_look.push(at);
                    }
                }
                continue;
            }
        }
        if entries
            .peek()
            .is_some_and(|(_, e)| std::str::from_utf8(e.0).is_err())
        {
            // A name that is not UTF-8: the content check reads by a
            // `str` path, so libgit2's status decides.
            return super::check::dirty_paths_in(repo, None);
        }
        let path: Vec<u8> = match (head.peek(), entries.peek()) {
            (None, None) => break,
            (Some(h), None) => h.key().to_vec(),
            (None, Some((_, e))) => e.0.to_vec(),
            (Some(h), Some((_, e))) => h.key().min(e.0).to_vec(),
        };
        let at_head = match head.next_if(|h| matches!(h, Head::Leaf(p, ..) if *p == path)) {
            Some(Head::Leaf(_, oid, mode)) => Some((oid, mode)),
            _ => None,
        };
        let mut merged = None;
        let mut conflict = false;
        while let Some((at, (_, stage, st))) = entries.next_if(|(_, e)| e.0 == path.as_slice()) {
            match stage {
                0 => merged = Some((at, st)),
                _ => conflict = true,
            }
        }
        if conflict || staged(at_head, merged.as_ref().map(|m| &m.1)) {
            out.push(lossy(&path));
        } else if let Some((at, _)) = merged {
            to_look.push(at);
        }
    }
    drop(head);
    if let Some(e) = leaves.failed {
        return Err(e.into());
    }
    if !leaves.sorted {
        // A tree git would not write: libgit2's status decides.
        return super::check::dirty_paths_in(repo, None);
    }
    // The stat data, on up to 4 threads, each its own slice of entries.
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4)
        .min(to_look.len() / 2_000 + 1);
    let chunk = to_look.len().div_ceil(threads).max(1);
    let looks: Vec<Look> = std::thread::scope(|scope| {
        let (workdir, rules) = (&workdir, &rules);
        let part_looks = move |part: &[usize]| {
            let mut dirs = Dirs::new(workdir);
            part.iter()
                .map(|&at| {
                    let (name, e) = index.at(at);
                    let p = String::from_utf8_lossy(name);
                    look(workdir, &p, &e, index.racy(&e), dirs.stat(name), rules)
                })
                .collect::<Vec<Look>>()
        };
        // A part whose thread cannot be made is done here.
        let workers: Vec<_> = to_look
            .chunks(chunk)
            .map(|part| {
                std::thread::Builder::new()
                    .spawn_scoped(scope, move || part_looks(part))
                    .map_err(|_| part)
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| match w {
                Ok(w) => w.join().unwrap_or_default(),
                Err(part) => part_looks(part),
            })
            .collect()
    });
    if looks.len() != to_look.len() {
        return Err(crate::error::Error::other(
            "comparing the worktree with the index failed on a thread",
        ));
    }
    for (at, l) in to_look.into_iter().zip(looks) {
        let p = String::from_utf8_lossy(index.at(at).0);
        if dirty_on_disk(repo, &workdir, &p, l)? {
            out.push(p.into_owned());
        }
    }
    out.sort();
    Ok(out)
}

/// The worktree's directories, opened one at a time from the worktree's
/// root without following a link (a parent that is a link or a file
/// leaves nothing at the path as far as the worktree goes), and a file's
/// stat data read relative to its directory.
struct Dirs<'w> {
    workdir: &'w Path,
    /// The directory last opened: its path in the worktree, and its
    /// descriptor (None: not a real directory).
    at: Option<(Vec<u8>, Option<rustix::fd::OwnedFd>)>,
}

impl<'w> Dirs<'w> {
    fn new(workdir: &'w Path) -> Dirs<'w> {
        Dirs { workdir, at: None }
    }

    /// The stat data of the file at `path` (a worktree path), None where
    /// nothing is there (or a parent is not a directory).
    fn stat(&mut self, path: &[u8]) -> Option<Disk> {
        use rustix::fs::{AtFlags, Mode, OFlags, CWD};
        use std::os::unix::ffi::OsStrExt;
        let (dir, name) = match path.iter().rposition(|&b| b == b'/') {
            Some(i) => (&path[..i], &path[i + 1..]),
            None => (&path[..0], path),
        };
        if self.at.as_ref().map(|a| a.0.as_slice()) != Some(dir) {
            let lookup = crate::os::lookup_dir_flags();
            let flags = lookup | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            // The worktree's own path may pass through links; what is in it
            // may not.
            let root = lookup | OFlags::DIRECTORY | OFlags::CLOEXEC;
            let mut fd = rustix::fs::openat(CWD, self.workdir, root, Mode::empty()).ok();
            for part in dir.split(|&b| b == b'/').filter(|_| !dir.is_empty()) {
                if matches!(part, b"" | b"." | b"..") {
                    // A path git would not write never leads out.
                    fd = None;
                }
                fd = fd.and_then(|f| {
                    rustix::fs::openat(&f, std::ffi::OsStr::from_bytes(part), flags, Mode::empty())
                        .ok()
                });
            }
            self.at = Some((dir.to_vec(), fd));
        }
        if matches!(name, b"" | b"." | b"..") {
            return None;
        }
        let fd = self.at.as_ref()?.1.as_ref()?;
        let st = rustix::fs::statat(
            fd,
            std::ffi::OsStr::from_bytes(name),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .ok()?;
        Some(Disk {
            kind: match rustix::fs::FileType::from_raw_mode(st.st_mode) {
                rustix::fs::FileType::RegularFile => Kind::File,
                rustix::fs::FileType::Symlink => Kind::Link,
                rustix::fs::FileType::Directory => Kind::Dir,
                _ => Kind::Other,
            },
            exec: st.st_mode & 0o111 != 0,
            size: st.st_size as u64,
            mtime: (st.st_mtime as u32, st.st_mtime_nsec as u32),
            ctime: (st.st_ctime as u32, st.st_ctime_nsec as u32),
            ino: st.st_ino as u32,
            owner: (st.st_uid, st.st_gid),
        })
    }
}

/// What [`look`] needs of a file's stat data.
struct Disk {
    kind: Kind,
    exec: bool,
    size: u64,
    mtime: (u32, u32),
    ctime: (u32, u32),
    ino: u32,
    owner: (u32, u32),
}

#[derive(PartialEq, Eq)]
enum Kind {
    File,
    Link,
    Dir,
    Other,
}

impl Disk {
    fn of(m: &fs::Metadata) -> Disk {
        use std::os::unix::fs::MetadataExt;
        let t = m.file_type();
        Disk {
            kind: if t.is_file() {
                Kind::File
            } else if t.is_symlink() {
                Kind::Link
            } else if t.is_dir() {
                Kind::Dir
            } else {
                Kind::Other
            },
            exec: m.permissions().mode() & 0o111 != 0,
            size: m.size(),
            mtime: (m.mtime() as u32, m.mtime_nsec() as u32),
            ctime: (m.ctime() as u32, m.ctime_nsec() as u32),
            ino: m.ino() as u32,
            owner: (m.uid(), m.gid()),
        }
    }
}

/// Every entry of a tree but its subtrees, by full path, in the tree's
/// order: path, id, mode. One tree's entries are held per level, not the
/// whole tree's. In git's order (a tree's name sorted as if it ended in
/// `/`) that is the order of the full paths as bytes; a tree that is not
/// (one git would not write) is reported by [`Leaves::sorted`] going false.
struct Leaves<'r> {
    repo: &'r Repository,
    /// Directories (`path/`) the index's cache tree vouches for, with the
    /// id git computed from the index's entries there: where HEAD's
    /// subtree has that id, its entries are the index's.
    vouched: std::collections::HashMap<Vec<u8>, git2::Oid>,
    /// Per level: the directory's prefix, its entries, the next one.
    stack: Vec<(Vec<u8>, Vec<Listed>, usize)>,
    last: Option<Vec<u8>>,
    sorted: bool,
    failed: Option<git2::Error>,
    /// A vouched-for directory to report before reading on.
    same: Option<Vec<u8>>,
}

/// What HEAD holds next, by path.
enum Head {
    /// A file, link or submodule: its path, id, mode.
    Leaf(Vec<u8>, git2::Oid, u32),
    /// A directory (`path/`) whose entries are exactly the index's there.
    Same(Vec<u8>),
}

impl Head {
    fn key(&self) -> &[u8] {
        match self {
            Head::Leaf(p, ..) | Head::Same(p) => p,
        }
    }
}

/// A tree's entry: name, id, mode, whether a tree.
type Listed = (Vec<u8>, git2::Oid, u32, bool);

impl<'r> Leaves<'r> {
    fn new(
        repo: &'r Repository,
        tree: Option<git2::Oid>,
        vouched: std::collections::HashMap<Vec<u8>, git2::Oid>,
    ) -> Leaves<'r> {
        let mut l = Leaves {
            repo,
            vouched,
            stack: Vec::new(),
            last: None,
            sorted: true,
            failed: None,
            same: None,
        };
        if let Some(id) = tree {
            match l.vouched.get(&Vec::new()) == Some(&id) {
                true => l.same = Some(Vec::new()),
                false => l.push(Vec::new(), id),
            }
        }
        l
    }

    fn push(&mut self, prefix: Vec<u8>, id: git2::Oid) {
        match self.repo.find_tree(id) {
            Ok(t) => {
                let entries = t
                    .iter()
                    .map(|e| {
                        let is_tree = e.kind() == Some(git2::ObjectType::Tree);
                        (
                            e.name_bytes().to_vec(),
                            e.id(),
                            e.filemode() as u32,
                            is_tree,
                        )
                    })
                    .collect();
                self.stack.push((prefix, entries, 0));
            }
            Err(e) => self.failed = Some(e),
        }
    }
}

impl Iterator for Leaves<'_> {
    type Item = Head;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(prefix) = self.same.take() {
            if self.last.as_ref().is_some_and(|l| prefix <= *l) {
                self.sorted = false;
            }
            self.last = Some(prefix.clone());
            return Some(Head::Same(prefix));
        }
        loop {
            if self.failed.is_some() {
                return None;
            }
            let (prefix, entries, at) = self.stack.last_mut()?;
            let Some((name, id, mode, is_tree)) = entries.get(*at).cloned() else {
                self.stack.pop();
                continue;
            };
            *at += 1;
            let mut path = prefix.clone();
            path.extend_from_slice(&name);
            if is_tree {
                path.push(b'/');
                if self.vouched.get(&path) == Some(&id) {
                    self.same = Some(path);
                    return self.next();
                }
                self.push(path, id);
                continue;
            }
            if self.last.as_ref().is_some_and(|l| path <= *l) {
                self.sorted = false;
            }
            self.last = Some(path.clone());
            return Some(Head::Leaf(path, id, mode));
        }
    }
}

/// Whether HEAD's entry (id, mode) and the index's merged entry differ,
/// or the index's is an intent to add.
fn staged(at_head: Option<(git2::Oid, u32)>, e: Option<&Stat>) -> bool {
    match (at_head, e) {
        (None, None) => false,
        (Some(h), Some(e)) => h != (e.oid, e.mode) || e.extended & INTENT_TO_ADD != 0,
        _ => true,
    }
}

/// The configuration [`look`] follows.
struct Rules {
    trust_ctime: bool,
    trust_mode: bool,
    symlinks: bool,
}

impl Rules {
    fn of(repo: &Repository) -> Result<Rules> {
        let cfg = repo.config()?;
        let flag = |key: &str| cfg.get_bool(key).unwrap_or(true);
        Ok(Rules {
            trust_ctime: flag("core.trustctime"),
            trust_mode: flag("core.filemode"),
            symlinks: flag("core.symlinks"),
        })
    }
}

/// What the file says of an index entry from its stat data alone.
enum Look {
    Clean,
    Dirty,
    /// Stat cannot vouch: compare the content with this entry (the mode
    /// as the disk gives it where `core.fileMode` is off).
    Compare(BlobEntry),
}

/// The index's entry `e` of `p` against the file (its stat data `disk`,
/// None where nothing is there): gone, or of another type, is dirty;
/// skip-worktree, "assume unchanged" and submodules are not looked at;
/// stat data equal and not racily clean (`racy`) vouches for it; else the
/// content is to be compared as git compares it, through the clean
/// conversion.
fn look(workdir: &Path, p: &str, e: &Stat, racy: bool, disk: Option<Disk>, rules: &Rules) -> Look {
    use crate::git::index_file::SKIP_WORKTREE;
    // "Assume unchanged" and skip-worktree: not looked at, even when the
    // file is gone (git's and libgit2's rule for the first; git's for the
    // second, where a sparse checkout leaves the file out).
    if e.assume_valid || e.extended & SKIP_WORKTREE != 0 {
        return Look::Clean;
    }
    if e.mode == 0o160000 {
        // A submodule: its own repository is not looked into; only a
        // file or link where it was is a change (of type).
        return match disk {
            Some(d) if d.kind != Kind::Dir => Look::Dirty,
            _ => Look::Clean,
        };
    }
    let Some(disk) = disk.filter(|d| d.kind != Kind::Dir) else {
        return Look::Dirty;
    };
    let link = disk.kind == Kind::Link;
    if disk.kind == Kind::Other {
        // A FIFO, socket or device where a file was: never opened.
        return Look::Dirty;
    }
    if !rules.symlinks && e.mode == MODE_LINK && disk.kind == Kind::File {
        // core.symlinks off: git checks a link out as a file holding its
        // target, and keeps the link's mode.
        let target = fs::read(workdir.join(p)).unwrap_or_default();
        return match git2::Oid::hash_object(git2::ObjectType::Blob, &target) {
            Ok(id) if id == e.oid => Look::Clean,
            _ => Look::Dirty,
        };
    }
    if link != (e.mode == MODE_LINK) {
        return Look::Dirty;
    }
    let disk_mode = match (link, disk.exec) {
        (true, _) => MODE_LINK,
        (false, true) if rules.trust_mode => MODE_EXEC,
        (false, false) if rules.trust_mode => MODE_FILE,
        // core.fileMode off: the executable bit is not looked at.
        (false, _) => e.mode,
    };
    if disk_mode != e.mode {
        return Look::Dirty;
    }
    let stat_same = disk.size as u32 == e.size
        && disk.mtime == e.mtime
        && (!rules.trust_ctime || disk.ctime == e.ctime)
        && disk.ino == e.ino
        && disk.owner == (e.uid, e.gid);
    // git's rule: a size of 0 for a blob that is not empty is a smudged
    // entry, never vouched for by stat.
    let smudged = e.size == 0 && e.oid.as_bytes() != EMPTY_BLOB;
    if stat_same && !smudged && !racy {
        return Look::Clean;
    }
    Look::Compare(BlobEntry {
        oid: e.oid,
        mode: match disk_mode {
            MODE_LINK => MODE_LINK,
            _ if !rules.trust_mode && disk.exec => MODE_EXEC,
            _ if !rules.trust_mode => MODE_FILE,
            _ => e.mode,
        },
    })
}

/// Whether [`look`]'s verdict makes `p` dirty, its content compared where
/// stat could not vouch.
fn dirty_on_disk(repo: &Repository, workdir: &Path, p: &str, l: Look) -> Result<bool> {
    Ok(match l {
        Look::Clean => false,
        Look::Dirty => true,
        Look::Compare(entry) => !disk_is(repo, workdir, p, &Some(entry))?,
    })
}

/// The empty blob's id.
const EMPTY_BLOB: [u8; 20] = [
    0xe6, 0x9d, 0xe2, 0x9b, 0xb2, 0xd1, 0xd6, 0x43, 0x4b, 0x8b, 0x29, 0xae, 0x77, 0x5a, 0xd8, 0xc2,
    0xe4, 0x8c, 0x53, 0x91,
];

#[cfg(test)]
mod tests {
    use crate::git::testing::git;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    /// The whole-tree check (`status`) lists exactly what libgit2's status
    /// lists, over every kind of change a user makes, with `core.fileMode`
    /// on and off, and with the index written by git in versions 2 and 4
    /// (the version `feature.manyFiles` picks) — but for a skip-worktree
    /// file a sparse checkout left out, which libgit2 calls deleted and
    /// git (and this check) does not.
    #[test]
    fn the_whole_tree_check_is_libgit2_s_status() {
        for (file_mode, version) in [("true", "2"), ("false", "4")] {
            let d = tempfile::tempdir().unwrap();
            let p = d.path();
            git(p, &["init", "-q"]);
            git(p, &["config", "core.fileMode", file_mode]);
            for i in 0..300 {
                let f = p.join(format!("d{}/f{i}.txt", i % 7));
                fs::create_dir_all(f.parent().unwrap()).unwrap();
                fs::write(&f, format!("{i}\n")).unwrap();
            }
            std::os::unix::fs::symlink("d0/f0.txt", p.join("link")).unwrap();
            git(p, &["add", "-A"]);
            let commit = "1111111111111111111111111111111111111111";
            git(
                p,
                &[
                    "update-index",
                    "--add",
                    "--cacheinfo",
                    &format!("160000,{commit},sub"),
                ],
            );
            git(p, &["commit", "-qm", "base"]);
            let w = |f: &str, s: &str| fs::write(p.join(f), s).unwrap();
            // Same size, new content; another size; gone; executable; a
            // link where a file was; a directory where a file was; a file
            // where a link was; a parent that is a link now.
            w("d1/f1.txt", "X\n");
            w("d2/f2.txt", "longer\n");
            fs::remove_file(p.join("d3/f3.txt")).unwrap();
            fs::set_permissions(p.join("d4/f4.txt"), fs::Permissions::from_mode(0o755)).unwrap();
            fs::remove_file(p.join("d5/f5.txt")).unwrap();
            std::os::unix::fs::symlink("elsewhere", p.join("d5/f5.txt")).unwrap();
            fs::remove_file(p.join("d6/f6.txt")).unwrap();
            fs::create_dir(p.join("d6/f6.txt")).unwrap();
            w("d6/f6.txt/inner", "x\n");
            fs::remove_file(p.join("link")).unwrap();
            w("link", "d0/f0.txt");
            fs::rename(p.join("d0"), p.join("moved")).unwrap();
            std::os::unix::fs::symlink("moved", p.join("d0")).unwrap();
            // Staged: a change, a deletion (the file stays, untracked),
            // an intent to add, a conflict, an edit staged then undone.
            w("d1/f8.txt", "staged\n");
            git(p, &["add", "d1/f8.txt"]);
            git(p, &["rm", "-q", "--cached", "d2/f9.txt"]);
            w("new.txt", "new\n");
            git(p, &["add", "-N", "new.txt"]);
            let blob = git(p, &["hash-object", "-w", "d4/f11.txt"]);
            let info = format!(
                "0 {z}\td3/f10.txt\n100644 {b} 1\td3/f10.txt\n100644 {b} 2\td3/f10.txt\n100644 {b} 3\td3/f10.txt\n",
                z = "0".repeat(40),
                b = blob.trim()
            );
            let mut c = std::process::Command::new("git")
                .args(["update-index", "--index-info"])
                .current_dir(p)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .stdin(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            use std::io::Write;
            c.stdin.take().unwrap().write_all(info.as_bytes()).unwrap();
            assert!(c.wait().unwrap().success());
            w("d1/f15.txt", "undone\n");
            git(p, &["add", "d1/f15.txt"]);
            w("d1/f15.txt", "15\n");
            // Not looked at: "assume unchanged" (gone), skip-worktree
            // (gone: libgit2 lists it, git does not, nor do we). A file
            // where a submodule was is a change.
            git(p, &["update-index", "--assume-unchanged", "d5/f12.txt"]);
            fs::remove_file(p.join("d5/f12.txt")).unwrap();
            git(p, &["update-index", "--skip-worktree", "d5/f19.txt"]);
            fs::remove_file(p.join("d5/f19.txt")).unwrap();
            w("sub", "a file now\n");
            // Untracked and ignored files are not listed by either.
            w(".gitignore", "*.log\n");
            w("x.log", "ignored\n");
            w("d1/untracked", "u\n");
            git(p, &["update-index", "--index-version", version]);
            let repo = git2::Repository::open(p).unwrap();
            let index = super::super::index::own(&repo).expect("git's own index");
            let mine = super::dirty_whole(&repo, &index).unwrap();
            let mut theirs = super::super::check::dirty_paths_in(&repo, None).unwrap();
            theirs.sort();
            assert!(theirs.iter().any(|t| t == "d5/f19.txt"), "{theirs:?}");
            theirs.retain(|t| t != "d5/f19.txt");
            assert_eq!(mine, theirs, "fileMode {file_mode}, version {version}");
            for must in [
                "d1/f1.txt",
                "d2/f2.txt",
                "d3/f3.txt",
                "d3/f10.txt",
                "new.txt",
            ] {
                assert!(mine.iter().any(|m| m == must), "{must}: {mine:?}");
            }
            for never in ["d1/untracked", "x.log", "d5/f12.txt", "d5/f19.txt"] {
                assert!(mine.iter().all(|m| m != never), "{never}: {mine:?}");
            }
        }
    }
}
