//! Reading strace(1)'s record of a run: the system calls that change files,
//! with their arguments decoded.
//!
//! Owns the parse of `strace -f -y -xx -s <huge>` output (every string and
//! every path as `\xNN` bytes, every descriptor annotated with its path).
//! Invariant: a call is returned whole or not at all; a line this parser
//! cannot read is an error naming the line, never skipped, because a
//! missed write would make every crash state built from the record wrong.

use std::path::PathBuf;

use crate::error::{Error, Result};

/// The calls recorded (`strace -e trace=`): what changes a file, its name,
/// its durability, and what tracks descriptors and processes.
pub const CALLS: &[&str] = &[
    "open",
    "openat",
    "creat",
    "write",
    "pwrite64",
    "writev",
    "pwritev",
    "pwritev2",
    "lseek",
    "rename",
    "renameat",
    "renameat2",
    "link",
    "linkat",
    "symlink",
    "symlinkat",
    "unlink",
    "unlinkat",
    "mkdir",
    "mkdirat",
    "rmdir",
    "fsync",
    "fdatasync",
    "sync",
    "syncfs",
    "ftruncate",
    "truncate",
    "chmod",
    "fchmod",
    "fchmodat",
    "close",
    "dup",
    "dup2",
    "dup3",
    "fcntl",
    "clone",
    "clone3",
    "fork",
    "vfork",
    "chdir",
    "fchdir",
    "mmap",
    "fallocate",
    "copy_file_range",
    "sendfile",
    "splice",
];

/// One finished system call.
#[derive(Debug, Clone)]
pub struct Call {
    /// The thread that made it.
    pub pid: u32,
    pub name: String,
    /// The arguments as strace printed them, split at top-level commas.
    pub args: Vec<String>,
    /// The return value (negative: failed).
    pub ret: i64,
    /// A returned descriptor's path as strace names it (symlinks
    /// followed), when it has one.
    pub ret_path: Option<PathBuf>,
    /// The line, for errors.
    pub line: usize,
}

/// What stands for a `close` already counted where it started.
const CLOSE_STARTED: &str = "\0close";

/// Parse a whole record. Lines split by strace around a call that another
/// thread interrupted (`<unfinished ...>` / `<... resumed>`) are joined;
/// the call counts where it finished.
pub fn parse(text: &str) -> Result<Vec<Call>> {
    let mut out = Vec::new();
    let mut pending: std::collections::HashMap<u32, String> = Default::default();
    for (n, raw) in text.lines().enumerate() {
        let line = n + 1;
        let bad = |why: &str| Error::program(format!("strace record line {line}: {why}: {raw}"));
        let raw = raw.trim_end();
        if raw.is_empty() {
            continue;
        }
        let (pid, rest) = raw.split_once(' ').ok_or_else(|| bad("no pid"))?;
        let pid: u32 = pid.parse().map_err(|_| bad("no pid"))?;
        let rest = rest.trim_start();
        // Signals, exits: not calls.
        if rest.starts_with("---") || rest.starts_with("+++") {
            continue;
        }
        let text = if let Some(head) = rest.strip_suffix("<unfinished ...>") {
            let head = head.trim_end();
            // A descriptor's number is free the moment `close` starts (the
            // kernel takes it out of the table first): another thread's
            // open may get it before the close returns. A close counts
            // where it started; its resume is dropped.
            if head.starts_with("close(") {
                pending.insert(pid, CLOSE_STARTED.to_string());
                format!("{head}) = 0")
            } else {
                pending.insert(pid, head.to_string());
                continue;
            }
        } else if let Some(tail) = rest.strip_prefix("<... ") {
            let (_, after) = tail
                .split_once(" resumed>")
                .ok_or_else(|| bad("bad resume"))?;
            let head = pending
                .remove(&pid)
                .ok_or_else(|| bad("a resume with no start"))?;
            if head == CLOSE_STARTED {
                continue;
            }
            format!("{head}{after}")
        } else {
            rest.to_string()
        };

        let open = text.find('(').ok_or_else(|| bad("no call"))?;
        let name = text[..open].to_string();
        // strace pads before ` = ` to align return values.
        let eq = text.rfind(" = ").ok_or_else(|| bad("no return value"))?;
        let close = text[..eq].trim_end().len() - 1;
        if text.as_bytes().get(close) != Some(&b')') {
            return Err(bad("no return value"));
        }
        let ret_text = text[eq + 3..].split_whitespace().next().unwrap_or("");
        // `= ?`, `= ? <unavailable>`, `= ? ERESTARTSYS …`: a call that never
        // returned (its process was killed in it) or is restarted (and
        // recorded again when it finishes).
        if ret_text == "?" {
            continue;
        }
        // `= 3<\x2f…>`: the descriptor's path follows the number.
        let ret_num = ret_text.split('<').next().unwrap_or("");
        let ret = if let Some(hex) = ret_num.strip_prefix("0x") {
            i64::from_str_radix(hex, 16).unwrap_or(0)
        } else {
            ret_num
                .parse::<i64>()
                .map_err(|_| bad("bad return value"))?
        };
        let args = split_args(&text[open + 1..close]);
        let ret_path = ret_text
            .split_once('<')
            .and_then(|_| fd(ret_text))
            .and_then(|(_, p)| p);
        out.push(Call {
            pid,
            name,
            args,
            ret,
            ret_path,
            line,
        });
    }
    Ok(out)
}

/// The directory descriptor strace prints as `AT_FDCWD` (the working
/// directory): Linux's value, where strace runs.
const AT_FDCWD: i32 = -100;

/// Split at commas outside quotes, brackets, braces and `<…>` annotations.
fn split_args(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut quoted = false;
    let mut escaped = false;
    let mut cur = String::new();
    for c in s.chars() {
        if quoted {
            cur.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                quoted = false;
            }
            continue;
        }
        match c {
            '"' => quoted = true,
            '[' | '{' | '<' | '(' => depth += 1,
            ']' | '}' | '>' | ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// `\xNN…` bytes (the inside of a quoted string or an annotation).
fn unhex(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if !b.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(b.len() / 4);
    for chunk in b.chunks(4) {
        if chunk[0] != b'\\' || chunk[1] != b'x' {
            return None;
        }
        let hex = std::str::from_utf8(&chunk[2..]).ok()?;
        out.push(u8::from_str_radix(hex, 16).ok()?);
    }
    Some(out)
}

/// A quoted string argument's bytes (`"\x61\x62"`); strace appends `...`
/// to a string it cut short, which `-s` makes impossible here: refused.
pub fn string(arg: &str) -> Option<Vec<u8>> {
    let inner = arg.strip_prefix('"')?.strip_suffix('"')?;
    unhex(inner)
}

fn os(bytes: Vec<u8>) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    PathBuf::from(std::ffi::OsString::from_vec(bytes))
}

/// A descriptor argument: its number and, when strace could name it, its
/// path (`3<\x2f…>`; `AT_FDCWD<\x2f…>` is -100). A deleted file's path
/// ends in ` (deleted)`: None.
pub fn fd(arg: &str) -> Option<(i32, Option<PathBuf>)> {
    let (num, annot) = match arg.split_once('<') {
        Some((n, a)) => (n, a.strip_suffix('>')),
        None => (arg, None),
    };
    let num = if num == "AT_FDCWD" {
        AT_FDCWD
    } else {
        num.parse().ok()?
    };
    let path = annot
        .and_then(unhex)
        .filter(|p| !p.ends_with(b" (deleted)"))
        .map(os);
    Some((num, path))
}

/// A path argument: absolute, relative to a directory descriptor argument
/// (as strace names it), else relative to the process's working directory
/// `cwd`.
pub fn path_at(cwd: &std::path::Path, dirfd: Option<&str>, arg: &str) -> Option<PathBuf> {
    let p = os(string(arg)?);
    if p.is_absolute() {
        return Some(p);
    }
    match dirfd.map(fd) {
        Some(Some((_, Some(base)))) => Some(base.join(p)),
        Some(Some((AT_FDCWD, None))) | None => Some(cwd.join(p)),
        _ => None,
    }
}

/// An integer argument (decimal, octal `0644`, or hex).
pub fn int(arg: &str) -> Option<i64> {
    let a = arg.trim();
    if let Some(h) = a.strip_prefix("0x") {
        return i64::from_str_radix(h, 16).ok();
    }
    if a.len() > 1 && a.starts_with('0') {
        return i64::from_str_radix(&a[1..], 8).ok();
    }
    a.parse().ok()
}

/// The buffers of a `writev` argument: `[{iov_base="…", iov_len=N}, …]`.
pub fn iovec(arg: &str) -> Option<Vec<u8>> {
    let inner = arg.strip_prefix('[')?.strip_suffix(']')?;
    let mut out = Vec::new();
    for part in split_args(inner) {
        let part = part.strip_prefix('{')?.strip_suffix('}')?;
        for field in split_args(part) {
            if let Some(v) = field.strip_prefix("iov_base=") {
                out.extend(string(v)?);
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> String {
        s.bytes().map(|b| format!("\\x{b:02x}")).collect()
    }

    #[test]
    fn a_close_counts_where_it_started() {
        // Thread 13 closes 7; thread 12 opens and gets 7 before the close
        // returns; the close must not take the new descriptor away.
        let text = format!(
            "13  close(7<{}> <unfinished ...>\n\
             12  openat(AT_FDCWD<{}>, \"{}\", O_RDONLY|O_DIRECTORY) = 7<{}>\n\
             13  <... close resumed>)      = 0\n\
             12  fsync(7<{}>) = 0\n",
            hex("/r/a"),
            hex("/r"),
            hex("/r/d"),
            hex("/r/d"),
            hex("/r/d"),
        );
        let calls = parse(&text).unwrap();
        let names: Vec<_> = calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["close", "openat", "fsync"]);
        assert_eq!(fd(&calls[0].args[0]).map(|(n, _)| n), Some(7));
        assert_eq!(calls[0].ret, 0);
    }

    #[test]
    fn calls_are_read_with_their_paths_and_bytes() {
        let text = format!(
            "12  openat(AT_FDCWD<{}>, \"{}\", O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0666) = 3<{}>\n\
             12  write(3<{}>, \"{}\", 3) = 3\n\
             13  writev(4<{}>, [{{iov_base=\"{}\", iov_len=2}}, {{iov_base=\"{}\", iov_len=1}}], 2 <unfinished ...>\n\
             12  fsync(3<{}>) = 0\n\
             13  <... writev resumed>)      = 3\n\
             12  unlink(\"{}\") = -1 ENOENT (No such file or directory)\n\
             14  exit_group(0 <unfinished ...>\n\
             15  read(3, <unfinished ...>) = ? <unavailable>\n\
             12  +++ exited with 0 +++\n",
            hex("/r"),
            hex("/r/a"),
            hex("/r/a"),
            hex("/r/a"),
            hex("a,b"),
            hex("/r/b"),
            hex("xy"),
            hex("z"),
            hex("/r/a"),
            hex("/r/c"),
        );
        let calls = parse(&text).unwrap();
        let names: Vec<_> = calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["openat", "write", "fsync", "writev", "unlink"]);
        assert_eq!(calls[0].ret, 3);
        assert_eq!(calls[0].ret_path, Some(PathBuf::from("/r/a")));
        assert_eq!(
            path_at(
                std::path::Path::new("/x"),
                Some(&calls[0].args[0]),
                &calls[0].args[1]
            )
            .unwrap(),
            PathBuf::from("/r/a")
        );
        assert_eq!(string(&calls[1].args[1]).unwrap(), b"a,b");
        assert_eq!(
            fd(&calls[1].args[0]).unwrap().1.unwrap(),
            PathBuf::from("/r/a")
        );
        assert_eq!(iovec(&calls[3].args[1]).unwrap(), b"xyz");
        assert_eq!(calls[4].ret, -1);
        assert_eq!(int("0666"), Some(0o666));
        // Relative to the working directory without a directory argument.
        let rel = format!("\"{}\"", hex("b/c"));
        assert_eq!(
            path_at(std::path::Path::new("/w"), None, &rel).unwrap(),
            PathBuf::from("/w/b/c")
        );
    }

    #[test]
    fn an_unreadable_line_is_an_error_not_a_skip() {
        assert!(parse("12  write(3, \"\\x61\", 1)\n").is_err());
    }
}
