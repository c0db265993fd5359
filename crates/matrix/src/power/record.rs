//! A run's record built from its system calls: each call on a file under
//! the record's root turned into logical operations on inodes.
//!
//! Owns the descriptor tables (per process, shared by threads that share
//! them, copied by fork), file offsets, and the mapping from names to
//! inodes as the run changed them. Invariant: a call this cannot model
//! (a shared writable mapping, fallocate, copy_file_range, a rename across
//! the root) on a file under the root is an error, never skipped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::fs::{Data, Fs, Node};
use super::model::{Op, Record};
use super::trace::{self, Call};
use crate::error::{Error, Result};

/// An open file description.
#[derive(Debug, Clone)]
struct Ofd {
    ino: usize,
    pos: u64,
    append: bool,
}

impl Record {
    /// Turn the calls of a run into operations on the files under `root`,
    /// starting from `before` (the snapshot taken before the run); the run
    /// started in the directory `start`.
    pub fn build(root: &Path, start: &Path, before: Fs, calls: &[Call]) -> Result<Record> {
        let mut live = before.clone();
        let mut kinds: Vec<Node> = before
            .nodes
            .iter()
            .map(|n| Node {
                data: match n.data {
                    Data::File(_) => Data::File(Vec::new()),
                    ref d => d.clone(),
                },
                mode: n.mode,
            })
            .collect();
        let mut names: HashMap<usize, PathBuf> =
            before.names.iter().map(|(p, &i)| (i, p.clone())).collect();
        let mut ops = Vec::new();
        // Descriptor tables: thread → table; table → fd → open file description.
        let mut table_of: HashMap<u32, usize> = HashMap::new();
        let mut tables: Vec<HashMap<i32, usize>> = Vec::new();
        let mut ofds: Vec<Ofd> = Vec::new();
        // Working directories, for paths given relative to them.
        let mut cwds: HashMap<u32, PathBuf> = HashMap::new();
        let under = |p: &Path| p.starts_with(root);
        for c in calls {
            let bad = |why: &str| {
                Error::program(format!("strace record line {}: {}: {why}", c.line, c.name))
            };
            let t = *table_of.entry(c.pid).or_insert_with(|| {
                tables.push(HashMap::new());
                tables.len() - 1
            });
            if c.ret < 0 {
                continue;
            }
            let a = |i: usize| c.args.get(i).map(String::as_str).unwrap_or("");
            let cwd = cwds
                .get(&c.pid)
                .cloned()
                .unwrap_or_else(|| start.to_path_buf());
            // The open file description a descriptor argument names. strace's
            // annotation (the path the kernel has for it now) is the truth:
            // a descriptor on something outside the root (a pipe reusing a
            // closed file's number, say) is not ours; one on a file under
            // the root that the tables do not know is an error, never a
            // silent skip.
            let fd_ofd = |tables: &Vec<HashMap<i32, usize>>,
                          ofds: &Vec<Ofd>,
                          live: &Fs,
                          arg: &str|
             -> Result<Option<usize>> {
                let Some((n, annot)) = trace::fd(arg) else {
                    return Ok(None);
                };
                let mine = tables[t].get(&n).copied();
                let Some(p) = annot.map(|p| normal(&p)) else {
                    // Deleted, or unnamed: the tables' word.
                    return Ok(mine);
                };
                if !under(&p) {
                    return Ok(None);
                }
                let Some(&ino) = live.names.get(&p) else {
                    return Err(bad(&format!(
                        "descriptor {n} names {}, which the record does not know",
                        p.display()
                    )));
                };
                if let Some(o) = mine.filter(|&o| ofds[o].ino == ino) {
                    return Ok(Some(o));
                }
                // Inherited through a vfork whose lines strace printed
                // before the parent's, or a thread's: any table's.
                if let Some(o) = tables
                    .iter()
                    .filter_map(|tb| tb.get(&n).copied())
                    .find(|&o| ofds[o].ino == ino)
                {
                    return Ok(Some(o));
                }
                Err(bad(&format!(
                    "descriptor {n} names {}, but the record lost track of how it was opened",
                    p.display()
                )))
            };
            let new_ino = |kinds: &mut Vec<Node>, data: Data, mode: u32| -> usize {
                kinds.push(Node { data, mode });
                kinds.len() - 1
            };
            match c.name.as_str() {
                "clone" | "clone3" | "fork" | "vfork" => {
                    let child = c.ret as u32;
                    let shares = c.args.iter().any(|x| x.contains("CLONE_FILES"));
                    let table = if shares {
                        t
                    } else {
                        tables.push(tables[t].clone());
                        tables.len() - 1
                    };
                    table_of.insert(child, table);
                    cwds.insert(child, cwd.clone());
                }
                "chdir" => {
                    if let Some(p) = trace::path_at(&cwd, None, a(0)) {
                        cwds.insert(c.pid, normal(&p));
                    }
                }
                "fchdir" => {
                    if let Some((_, Some(p))) = trace::fd(a(0)) {
                        cwds.insert(c.pid, p);
                    }
                }
                "open" | "openat" | "creat" => {
                    let (dirfd, p, flags) = match c.name.as_str() {
                        "openat" => (Some(a(0)), a(1), a(2)),
                        "open" => (None, a(0), a(1)),
                        _ => (None, a(0), "O_CREAT|O_WRONLY|O_TRUNC"),
                    };
                    let fdn = c.ret as i32;
                    tables[t].remove(&fdn);
                    // The kernel's resolution of the path (symlinks
                    // followed), as strace names the new descriptor.
                    let Some(path) = c
                        .ret_path
                        .clone()
                        .or_else(|| trace::path_at(&cwd, dirfd, p))
                        .map(|p| normal(&p))
                    else {
                        continue;
                    };
                    if !under(&path) {
                        continue;
                    }
                    let ino = match live.names.get(&path) {
                        Some(&i) => i,
                        None if flags.contains("O_CREAT") => {
                            // The mode as a 022 umask leaves it: what a
                            // crash state needs of it is the x bit.
                            let at = match c.name.as_str() {
                                "openat" => 3,
                                "open" => 2,
                                _ => 1,
                            };
                            let mode = trace::int(a(at)).unwrap_or(0o644) as u32 & 0o755;
                            let i = new_ino(&mut kinds, Data::File(Vec::new()), mode);
                            names.insert(i, path.clone());
                            emit(
                                Op::Name {
                                    path: path.clone(),
                                    ino: i,
                                },
                                &mut live,
                                &mut ops,
                                &kinds,
                            );
                            i
                        }
                        None => {
                            return Err(bad(&format!("{} opened but not known", path.display())))
                        }
                    };
                    if flags.contains("O_TRUNC")
                        && matches!(live.nodes[ino].data, Data::File(ref b) if !b.is_empty())
                    {
                        emit(Op::Truncate { ino, len: 0 }, &mut live, &mut ops, &kinds);
                    }
                    ofds.push(Ofd {
                        ino,
                        pos: 0,
                        append: flags.contains("O_APPEND"),
                    });
                    tables[t].insert(fdn, ofds.len() - 1);
                }
                "close" => {
                    if let Some((n, _)) = trace::fd(a(0)) {
                        tables[t].remove(&n);
                    }
                }
                "dup" | "dup2" | "dup3" | "fcntl" => {
                    if c.name == "fcntl" && !a(1).starts_with("F_DUPFD") {
                        continue;
                    }
                    if let Some(o) = fd_ofd(&tables, &ofds, &live, a(0))? {
                        tables[t].insert(c.ret as i32, o);
                    } else {
                        tables[t].remove(&(c.ret as i32));
                    }
                }
                "lseek" => {
                    if let Some(o) = fd_ofd(&tables, &ofds, &live, a(0))? {
                        ofds[o].pos = c.ret as u64;
                    }
                }
                "write" | "pwrite64" | "writev" | "pwritev" | "pwritev2" => {
                    let Some(o) = fd_ofd(&tables, &ofds, &live, a(0))? else {
                        continue;
                    };
                    let data = if c.name.contains('v') {
                        trace::iovec(a(1))
                    } else {
                        trace::string(a(1))
                    }
                    .ok_or_else(|| bad("unreadable data"))?;
                    let n = (c.ret as usize).min(data.len());
                    let ino = ofds[o].ino;
                    let off = if c.name.starts_with('p') {
                        trace::int(a(3)).ok_or_else(|| bad("no offset"))? as u64
                    } else if ofds[o].append {
                        match &live.nodes[ino].data {
                            Data::File(b) => b.len() as u64,
                            _ => 0,
                        }
                    } else {
                        ofds[o].pos
                    };
                    if !c.name.starts_with('p') {
                        ofds[o].pos = off + n as u64;
                    }
                    emit(
                        Op::Write {
                            ino,
                            off,
                            data: data[..n].to_vec(),
                        },
                        &mut live,
                        &mut ops,
                        &kinds,
                    );
                }
                "ftruncate" => {
                    if let Some(o) = fd_ofd(&tables, &ofds, &live, a(0))? {
                        let len = trace::int(a(1)).ok_or_else(|| bad("no length"))? as u64;
                        emit(
                            Op::Truncate {
                                ino: ofds[o].ino,
                                len,
                            },
                            &mut live,
                            &mut ops,
                            &kinds,
                        );
                    }
                }
                "truncate" => {
                    if let Some(p) = trace::path_at(&cwd, None, a(0))
                        .map(|p| normal(&p))
                        .filter(|p| under(p))
                    {
                        let ino = *live.names.get(&p).ok_or_else(|| bad("unknown file"))?;
                        let len = trace::int(a(1)).ok_or_else(|| bad("no length"))? as u64;
                        emit(Op::Truncate { ino, len }, &mut live, &mut ops, &kinds);
                    }
                }
                "fsync" | "fdatasync" => {
                    if let Some(o) = fd_ofd(&tables, &ofds, &live, a(0))? {
                        emit(Op::Sync { ino: ofds[o].ino }, &mut live, &mut ops, &kinds);
                    }
                }
                "sync" | "syncfs" => emit(Op::SyncAll, &mut live, &mut ops, &kinds),
                "chmod" | "fchmodat" | "fchmod" => {
                    let (ino, mode) = if c.name == "fchmod" {
                        let Some(o) = fd_ofd(&tables, &ofds, &live, a(0))? else {
                            continue;
                        };
                        (ofds[o].ino, trace::int(a(1)))
                    } else {
                        let (dirfd, p, m) = if c.name == "chmod" {
                            (None, a(0), a(1))
                        } else {
                            (Some(a(0)), a(1), a(2))
                        };
                        let Some(path) = trace::path_at(&cwd, dirfd, p)
                            .map(|p| normal(&p))
                            .filter(|p| under(p))
                        else {
                            continue;
                        };
                        (
                            *live.names.get(&path).ok_or_else(|| bad("unknown file"))?,
                            trace::int(m),
                        )
                    };
                    let mode = mode.ok_or_else(|| bad("no mode"))? as u32;
                    emit(Op::Chmod { ino, mode }, &mut live, &mut ops, &kinds);
                }
                "mkdir" | "mkdirat" | "symlink" | "symlinkat" | "link" | "linkat" => {
                    let (path, node) = match c.name.as_str() {
                        "mkdir" => (trace::path_at(&cwd, None, a(0)), None),
                        "mkdirat" => (trace::path_at(&cwd, Some(a(0)), a(1)), None),
                        "symlink" => (trace::path_at(&cwd, None, a(1)), trace::string(a(0))),
                        "symlinkat" => {
                            (trace::path_at(&cwd, Some(a(1)), a(2)), trace::string(a(0)))
                        }
                        "link" => (trace::path_at(&cwd, None, a(1)), None),
                        _ => (trace::path_at(&cwd, Some(a(2)), a(3)), None),
                    };
                    let Some(path) = path.map(|p| normal(&p)).filter(|p| under(p)) else {
                        continue;
                    };
                    let ino = if c.name.starts_with("link") {
                        let src = if c.name == "link" {
                            trace::path_at(&cwd, None, a(0))
                        } else {
                            trace::path_at(&cwd, Some(a(0)), a(1))
                        }
                        .map(|p| normal(&p));
                        let src = src.ok_or_else(|| bad("no source"))?;
                        *live.names.get(&src).ok_or_else(|| {
                            bad(&format!(
                                "{} linked from outside the record",
                                path.display()
                            ))
                        })?
                    } else if c.name.starts_with("mkdir") {
                        new_ino(&mut kinds, Data::Dir, 0o755)
                    } else {
                        let target = node.ok_or_else(|| bad("no target"))?;
                        new_ino(&mut kinds, Data::Symlink(target), 0o777)
                    };
                    names.entry(ino).or_insert_with(|| path.clone());
                    emit(Op::Name { path, ino }, &mut live, &mut ops, &kinds);
                }
                "unlink" | "unlinkat" | "rmdir" => {
                    let path = match c.name.as_str() {
                        "unlinkat" => trace::path_at(&cwd, Some(a(0)), a(1)),
                        _ => trace::path_at(&cwd, None, a(0)),
                    };
                    let Some(path) = path.map(|p| normal(&p)).filter(|p| under(p)) else {
                        continue;
                    };
                    let ino = *live.names.get(&path).ok_or_else(|| bad("unknown file"))?;
                    emit(Op::Unname { path, ino }, &mut live, &mut ops, &kinds);
                }
                "rename" | "renameat" | "renameat2" => {
                    let (from, to) = if c.name == "rename" {
                        (
                            trace::path_at(&cwd, None, a(0)),
                            trace::path_at(&cwd, None, a(1)),
                        )
                    } else {
                        (
                            trace::path_at(&cwd, Some(a(0)), a(1)),
                            trace::path_at(&cwd, Some(a(2)), a(3)),
                        )
                    };
                    let (Some(from), Some(to)) = (from.map(|p| normal(&p)), to.map(|p| normal(&p)))
                    else {
                        continue;
                    };
                    match (under(&from), under(&to)) {
                        (false, false) => continue,
                        (true, true) => {}
                        _ => return Err(bad("a rename across the record's root")),
                    }
                    let ino = *live.names.get(&from).ok_or_else(|| bad("unknown file"))?;
                    let exchange = if a(4).contains("RENAME_EXCHANGE") {
                        Some(*live.names.get(&to).ok_or_else(|| bad("unknown file"))?)
                    } else {
                        None
                    };
                    names.insert(ino, to.clone());
                    emit(
                        Op::Rename {
                            from,
                            to,
                            ino,
                            exchange,
                        },
                        &mut live,
                        &mut ops,
                        &kinds,
                    );
                }
                "mmap" if a(2).contains("PROT_WRITE") && a(3).contains("MAP_SHARED") => {
                    if let Some(p) = trace::fd(a(4)).and_then(|f| f.1).filter(|p| under(p)) {
                        return Err(bad(&format!(
                            "{} written through a shared mapping, which a record of calls cannot see",
                            p.display()
                        )));
                    }
                }
                "fallocate" | "copy_file_range" | "sendfile" | "splice" => {
                    let touches = c
                        .args
                        .iter()
                        .filter_map(|x| trace::fd(x).and_then(|f| f.1))
                        .any(|p| under(&p));
                    if touches {
                        return Err(bad(
                            "a call this recorder does not model wrote under the record's root",
                        ));
                    }
                }
                _ => {}
            }
        }
        Ok(Record {
            root: root.to_path_buf(),
            before,
            ops,
            kinds,
            names,
        })
    }
}

/// Apply an operation to the live file system and append it to the record.
fn emit(op: Op, live: &mut Fs, ops: &mut Vec<Op>, kinds: &[Node]) {
    live.apply(&op, kinds);
    ops.push(op);
}

/// `a/./b`, `a//b` (no `..`: strace prints what the program passed).
fn normal(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}
