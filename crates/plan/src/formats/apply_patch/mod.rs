//! `apply_patch`: the `*** Begin Patch` … `*** End Patch` format, read and
//! applied as OpenAI Codex's own `apply_patch` does (`codex-rs/apply-patch`).
//!
//! ```text
//! *** Begin Patch
//! *** Add File: docs/new.md
//! +first line
//! *** Update File: src/app.py
//! *** Move to: src/main.py
//! @@ def greet():
//! -    print("Hi")
//! +    print("Hello")
//! *** Delete File: old.txt
//! *** End Patch
//! ```
//!
//! Owns the format's grammar and its placement rules. Invariant: a patch
//! Codex applies is applied to the same bytes, or refused with the reason
//! and nothing changed; it is never a different edit. As Codex:
//! - the text is trimmed, read as lines (a `\r` before a line end
//!   dropped), and may come in a heredoc (`<<'EOF'` … `EOF`, or the shell
//!   form `apply_patch <<'EOF'` …); the Begin/End lines and the file
//!   headers are read trimmed;
//! - `Add File` writes its `+` lines, each ending in `\n`, over a file
//!   that exists; `Move to` replaces a destination that exists;
//! - an Update's chunks are found in order, each after the previous one:
//!   an `@@ context` line first, then the chunk's context and removed lines,
//!   compared exactly, then ignoring trailing whitespace, then ignoring
//!   whitespace at both ends, then with typographic dashes, quotes and
//!   spaces read as ASCII (each pass over the whole file before the next);
//!   the lines found are replaced by the chunk's context and added lines as
//!   the patch writes them; `*** End of File` pins a chunk to the end;
//! - a chunk that only adds lines, with a bare `@@`, is appended at the end
//!   of the file;
//! - an updated file ends with a newline.
//!
//! Deliberately stricter, each refused with the reason: a step is atomic
//! (Codex keeps the operations before a failing one); an unanchored chunk
//! whose lines occur more than once (Codex takes the first); a chunk that
//! only adds lines after an `@@ context` that is not the file's last line
//! (Codex's releases disagree on where those lines go: at the end of the
//! file, or after the context line); a `Move to` onto the file itself
//! (Codex deletes the file); a path with whitespace Codex would keep in the
//! name; and an Update of a file with CRLF line ends or that ends in a
//! blank line (Codex's two line-ending modes write those differently).

use super::{checked_path, existing_text, list_lines, quote, EditError, Files, MODE_FILE};

mod seek;
use seek::update;

/// One file operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileOp {
    Add {
        path: String,
        /// Lines with their `\n`.
        lines: Vec<String>,
        line: usize,
    },
    Delete {
        path: String,
        line: usize,
    },
    Update {
        path: String,
        move_to: Option<String>,
        chunks: Vec<Chunk>,
        line: usize,
    },
}

/// One `@@` chunk of an Update.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Chunk {
    /// The text after `@@ ` (as written, not trimmed).
    pub anchor: Option<String>,
    /// Context and removed lines, without their line ends.
    pub old: Vec<String>,
    /// Context and added lines, without their line ends.
    pub new: Vec<String>,
    pub end_of_file: bool,
    /// 1-based line of the patch where the chunk starts.
    pub line: usize,
}

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File: ";
const DELETE: &str = "*** Delete File: ";
const UPDATE: &str = "*** Update File: ";
const MOVE: &str = "*** Move to: ";
pub(super) const EOF: &str = "*** End of File";

/// Parse a patch; errors name the line of the patch.
pub fn parse(text: &str) -> Result<Vec<FileOp>, EditError> {
    parse_str(text).map_err(EditError::Malformed)
}

/// The patch inside a heredoc, as Codex takes it: `<<EOF`, `<<'EOF'` or
/// `<<"EOF"` on the first line and a last line ending in `EOF`, or the
/// shell form `apply_patch <<'DELIM'` … `DELIM` its tool accepts. Returns
/// the inner lines and how many lines come before them.
fn unwrap_heredoc<'a>(lines: &'a [&'a str]) -> Result<Option<&'a [&'a str]>, String> {
    let [first, .., last] = lines else {
        return Ok(None);
    };
    if lines.len() < 4 {
        return Ok(None);
    }
    if matches!(*first, "<<EOF" | "<<'EOF'" | "<<\"EOF\"") && last.ends_with("EOF") {
        return Ok(Some(&lines[1..lines.len() - 1]));
    }
    let command = first
        .strip_prefix("apply_patch")
        .or_else(|| first.strip_prefix("applypatch"));
    let Some(rest) = command.map(str::trim) else {
        if first.contains("apply_patch <<") || first.contains("applypatch <<") {
            return Err(format!(
                "line 1: {} runs more than `apply_patch <<DELIM`; give the patch alone, with paths from the repository's top",
                quote(first.as_bytes())
            ));
        }
        return Ok(None);
    };
    let Some(delim) = rest.strip_prefix("<<").map(str::trim_start) else {
        return Ok(None);
    };
    let word = match delim.as_bytes().first() {
        Some(q @ (b'\'' | b'"')) => delim[1..].strip_suffix(*q as char),
        _ => Some(delim),
    };
    match word {
        Some(w)
            if !w.is_empty()
                && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && last.trim_end() == w =>
        {
            Ok(Some(&lines[1..lines.len() - 1]))
        }
        _ => Err(format!(
            "line 1: {} starts a heredoc that does not end with its delimiter on the last line",
            quote(first.as_bytes())
        )),
    }
}

fn parse_str(text: &str) -> Result<Vec<FileOp>, String> {
    // Line numbers are the step's: count what the trim takes off the start.
    let trimmed = text.trim();
    let lead = text[..text.len() - text.trim_start().len()]
        .matches('\n')
        .count();
    let all: Vec<&str> = trimmed.lines().collect();
    let strict = |ls: &[&str]| {
        ls.first().map(|l| l.trim()) == Some(BEGIN)
            && ls.last().map(|l| l.trim()) == Some(END)
            && ls.len() >= 2
    };
    let (lines, offset): (&[&str], usize) = if strict(&all) {
        (&all, lead)
    } else {
        match unwrap_heredoc(&all)? {
            Some(inner) if strict(inner) => (inner, lead + 1),
            Some(inner) => {
                return Err(begin_end_error(inner, lead + 1));
            }
            None => return Err(begin_end_error(&all, lead)),
        }
    };
    // 1-based line in the step's text of `lines[i]`.
    let at = |i: usize| offset + i + 1;
    let body = &lines[1..lines.len() - 1];
    let mut ops = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let n = at(i + 1);
        let raw = body[i];
        let t = raw.trim();
        if t.is_empty() {
            i += 1;
            continue;
        }
        if let Some(p) = t.strip_prefix(ADD) {
            let path = header_path(p, &format!("line {n}: Add File"))?;
            i += 1;
            let mut content = Vec::new();
            while let Some(rest) = body.get(i).and_then(|l| l.strip_prefix('+')) {
                content.push(format!("{rest}\n"));
                i += 1;
            }
            ops.push(FileOp::Add {
                path,
                lines: content,
                line: n,
            });
        } else if let Some(p) = t.strip_prefix(DELETE) {
            ops.push(FileOp::Delete {
                path: header_path(p, &format!("line {n}: Delete File"))?,
                line: n,
            });
            i += 1;
        } else if let Some(p) = t.strip_prefix(UPDATE) {
            let path = header_path(p, &format!("line {n}: Update File"))?;
            i += 1;
            let mut move_to = None;
            if let Some(m) = body.get(i).and_then(|l| l.strip_prefix(MOVE)) {
                let what = format!("line {}: Move to", at(i + 1));
                if m != m.trim() {
                    return Err(format!(
                        "{what}: the path {} has whitespace around it, which Codex keeps in the name",
                        quote(m.as_bytes())
                    ));
                }
                let dest = checked_path(m, &what)?;
                if dest == path {
                    return Err(format!(
                        "{what}: {dest} is the file itself (Codex would delete it)"
                    ));
                }
                move_to = Some(dest);
                i += 1;
            }
            let (chunks, next) = parse_chunks(body, i, &path, &at)?;
            i = next;
            if chunks.is_empty() && move_to.is_none() {
                return Err(format!("line {n}: Update File {path} has no changes"));
            }
            ops.push(FileOp::Update {
                path,
                move_to,
                chunks,
                line: n,
            });
        } else {
            return Err(format!(
                "line {n}: expected {ADD:?}, {DELETE:?} or {UPDATE:?}, found {}",
                quote(raw.as_bytes())
            ));
        }
    }
    if ops.is_empty() {
        return Err("the patch changes no file".into());
    }
    Ok(ops)
}

/// What is wrong with the first and last lines.
fn begin_end_error(lines: &[&str], offset: usize) -> String {
    if lines.first().map(|l| l.trim()) != Some(BEGIN) {
        format!("line {}: the patch must start with {BEGIN:?}", offset + 1)
    } else {
        format!(
            "line {}: the patch must end with {END:?}",
            offset + lines.len().max(1)
        )
    }
}

/// A header's path: the text after the marker's one space. More
/// whitespace there would be part of the name for Codex.
fn header_path(p: &str, what: &str) -> Result<String, String> {
    if p != p.trim_start() {
        return Err(format!(
            "{what}: the path {} starts with whitespace, which Codex keeps in the name",
            quote(p.as_bytes())
        ));
    }
    checked_path(p, what)
}

fn parse_chunks(
    lines: &[&str],
    mut i: usize,
    path: &str,
    at: &dyn Fn(usize) -> usize,
) -> Result<(Vec<Chunk>, usize), String> {
    let mut chunks: Vec<Chunk> = Vec::new();
    while let Some(&l) = lines.get(i) {
        // Blank lines between chunks are skipped; a line starting with `*`
        // ends the Update (the next header, as Codex reads it).
        if l.trim().is_empty() {
            i += 1;
            continue;
        }
        if l.starts_with('*') {
            break;
        }
        let mut c = Chunk {
            line: at(i + 1),
            ..Chunk::default()
        };
        if l == "@@" {
            i += 1;
        } else if let Some(anchor) = l.strip_prefix("@@ ") {
            c.anchor = Some(anchor.to_string());
            i += 1;
        } else if !chunks.is_empty() {
            return Err(format!(
                "line {}: in Update File {path}, a chunk after the first starts with \"@@\", found {}",
                at(i + 1),
                quote(l.as_bytes())
            ));
        }
        let mut taken = 0;
        while let Some(&l) = lines.get(i) {
            if l == EOF {
                if taken == 0 {
                    break;
                }
                c.end_of_file = true;
                i += 1;
                break;
            }
            match l.as_bytes().first() {
                // An empty line is an empty context line (editors strip
                // the space).
                None => {
                    c.old.push(String::new());
                    c.new.push(String::new());
                }
                Some(b' ') => {
                    c.old.push(l[1..].to_string());
                    c.new.push(l[1..].to_string());
                }
                Some(b'-') => c.old.push(l[1..].to_string()),
                Some(b'+') => c.new.push(l[1..].to_string()),
                _ if taken == 0 => {
                    return Err(format!(
                        "line {}: in Update File {path}, a line starts with ' ', '-', '+' or \"@@\", found {}",
                        at(i + 1),
                        quote(l.as_bytes())
                    ))
                }
                _ => break,
            }
            taken += 1;
            i += 1;
        }
        if taken == 0 {
            return Err(format!(
                "line {}: an empty chunk in Update File {path}",
                c.line
            ));
        }
        chunks.push(c);
    }
    Ok((chunks, i))
}

/// Apply the file operations in order: all of them or none (the step is
/// atomic; the caller's files are the step's overlay).
pub fn apply(files: &mut dyn Files, ops: &[FileOp]) -> Result<(), EditError> {
    apply_str(files, ops).map_err(EditError::DoesNotApply)
}

fn apply_str(files: &mut dyn Files, ops: &[FileOp]) -> Result<(), String> {
    for op in ops {
        match op {
            FileOp::Add { path, lines, line } => {
                let what = format!("apply_patch line {line}: Add File");
                // Over a file that exists, as Codex writes it (its mode
                // kept); never through a symlink.
                let mode = match files.get(path)? {
                    Some((_, m)) if m == super::MODE_LINK => {
                        return Err(format!(
                            "{what}: {path} is a symlink (Codex would write through it)"
                        ))
                    }
                    Some((_, m)) => m,
                    None => MODE_FILE,
                };
                files.put(path, lines.concat().into_bytes(), mode)?;
            }
            FileOp::Delete { path, line } => {
                existing_text(
                    files,
                    path,
                    &format!("apply_patch line {line}: Delete File"),
                )?;
                files.remove(path)?;
            }
            FileOp::Update {
                path,
                move_to,
                chunks,
                line,
            } => {
                let what = format!("apply_patch line {line}: Update File");
                let (content, mode) = existing_text(files, path, &what)?;
                let content = if chunks.is_empty() {
                    content
                } else {
                    let text = String::from_utf8(content).map_err(|_| {
                        format!("{what} {path}: it is not UTF-8 text (Codex edits text files only)")
                    })?;
                    update(&text, chunks, path)?.into_bytes()
                };
                match move_to {
                    Some(dest) => {
                        if let Some((_, m)) = files.get(dest)? {
                            if m == super::MODE_LINK {
                                return Err(format!(
                                    "{what} {path}: Move to {dest}: it is a symlink (Codex would write through it)"
                                ));
                            }
                        }
                        files.remove(path)?;
                        files.put(dest, content, mode)?;
                    }
                    None => files.put(path, content, mode)?,
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{MemFiles, MODE_FILE};
    use super::*;
    use crate::modes::MODE_EXEC;

    fn files(start: &[(&str, &str)]) -> MemFiles {
        let mut f = MemFiles::default();
        for (p, c) in start {
            f.put(p, c.as_bytes().to_vec(), MODE_FILE).unwrap();
        }
        f
    }

    fn text(f: &MemFiles, p: &str) -> String {
        String::from_utf8(f.0[p].0.clone()).unwrap()
    }

    /// Apply `patch` to `start`; the files after, or the error.
    fn run(start: &[(&str, &str)], patch: &str) -> Result<MemFiles, String> {
        let mut f = files(start);
        parse(patch)
            .and_then(|ops| apply(&mut f, &ops))
            .map_err(|e| e.to_string())?;
        Ok(f)
    }

    /// The files as (path, text), sorted.
    fn all(f: &MemFiles) -> Vec<(String, String)> {
        f.0.keys().map(|k| (k.clone(), text(f, k))).collect()
    }

    fn want(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(p, c)| (p.to_string(), c.to_string()))
            .collect()
    }

    // Conformance with Codex's apply_patch: one test per behaviour of its
    // scenario suite (codex-rs/apply-patch/tests/fixtures/scenarios), the
    // cases written here from what Codex does.

    #[test]
    fn codex_add_file_ends_every_line() {
        let f = run(
            &[],
            "*** Begin Patch\n*** Add File: bar.md\n+This is a new file\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(all(&f), want(&[("bar.md", "This is a new file\n")]));
    }

    #[test]
    fn codex_multiple_operations_in_one_patch() {
        let f = run(
            &[("delete.txt", "obsolete\n"), ("modify.txt", "line1\nline2\n")],
            "*** Begin Patch\n*** Add File: nested/new.txt\n+created\n*** Delete File: delete.txt\n*** Update File: modify.txt\n@@\n-line2\n+changed\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(
            all(&f),
            want(&[
                ("modify.txt", "line1\nchanged\n"),
                ("nested/new.txt", "created\n")
            ])
        );
    }

    #[test]
    fn codex_multiple_chunks_in_one_update() {
        let f = run(
            &[("multi.txt", "line1\nline2\nline3\nline4\n")],
            "*** Begin Patch\n*** Update File: multi.txt\n@@\n-line2\n+changed2\n@@\n-line4\n+changed4\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(text(&f, "multi.txt"), "line1\nchanged2\nline3\nchanged4\n");
    }

    #[test]
    fn codex_move_to_a_new_directory() {
        let f = run(
            &[("old/name.txt", "old content\n"), ("old/other.txt", "unrelated file\n")],
            "*** Begin Patch\n*** Update File: old/name.txt\n*** Move to: renamed/dir/name.txt\n@@\n-old content\n+new content\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(
            all(&f),
            want(&[
                ("old/other.txt", "unrelated file\n"),
                ("renamed/dir/name.txt", "new content\n")
            ])
        );
    }

    #[test]
    fn codex_rejects_an_empty_patch() {
        let e = run(
            &[("foo.txt", "stable\n")],
            "*** Begin Patch\n*** End Patch\n",
        )
        .unwrap_err();
        assert!(e.contains("changes no file"), "{e}");
    }

    #[test]
    fn codex_rejects_missing_context() {
        let e = run(
            &[("modify.txt", "line1\nline2\n")],
            "*** Begin Patch\n*** Update File: modify.txt\n@@\n-missing\n+changed\n*** End Patch\n",
        )
        .unwrap_err();
        assert!(e.contains("\"missing\" are not in modify.txt"), "{e}");
    }

    #[test]
    fn codex_rejects_deleting_a_missing_file() {
        let e = run(
            &[("foo.txt", "stable\n")],
            "*** Begin Patch\n*** Delete File: missing.txt\n*** End Patch\n",
        )
        .unwrap_err();
        assert!(e.contains("missing.txt does not exist"), "{e}");
    }

    #[test]
    fn codex_rejects_an_empty_update() {
        let e = run(
            &[("foo.txt", "stable\n")],
            "*** Begin Patch\n*** Update File: foo.txt\n*** End Patch\n",
        )
        .unwrap_err();
        assert!(
            e.contains("line 2: Update File foo.txt has no changes"),
            "{e}"
        );
    }

    #[test]
    fn codex_requires_an_existing_file_to_update() {
        let e = run(
            &[("foo.txt", "stable\n")],
            "*** Begin Patch\n*** Update File: missing.txt\n@@\n-old\n+new\n*** End Patch\n",
        )
        .unwrap_err();
        assert!(e.contains("missing.txt does not exist"), "{e}");
    }

    #[test]
    fn codex_move_overwrites_an_existing_destination() {
        let f = run(
            &[
                ("old/name.txt", "from\n"),
                ("old/other.txt", "unrelated file\n"),
                ("renamed/dir/name.txt", "existing\n"),
            ],
            "*** Begin Patch\n*** Update File: old/name.txt\n*** Move to: renamed/dir/name.txt\n@@\n-from\n+new\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(
            all(&f),
            want(&[
                ("old/other.txt", "unrelated file\n"),
                ("renamed/dir/name.txt", "new\n")
            ])
        );
    }

    #[test]
    fn codex_add_overwrites_an_existing_file() {
        let mut f = files(&[("duplicate.txt", "old content\n")]);
        f.0.get_mut("duplicate.txt").unwrap().1 = MODE_EXEC;
        let ops =
            parse("*** Begin Patch\n*** Add File: duplicate.txt\n+new content\n*** End Patch\n")
                .unwrap();
        apply(&mut f, &ops).unwrap();
        // The content Codex writes; the mode the file had (a write keeps it).
        assert_eq!(f.0["duplicate.txt"], (b"new content\n".to_vec(), MODE_EXEC));
    }

    #[test]
    fn codex_rejects_an_invalid_hunk_header() {
        let e = run(
            &[("foo.txt", "stable\n")],
            "*** Begin Patch\n*** Frobnicate File: foo\n*** End Patch\n",
        )
        .unwrap_err();
        assert!(e.contains("line 2: expected \"*** Add File: \""), "{e}");
    }

    #[test]
    fn codex_update_appends_the_final_newline() {
        let f = run(
            &[("no_newline.txt", "no newline at end")],
            "*** Begin Patch\n*** Update File: no_newline.txt\n@@\n-no newline at end\n+first line\n+second line\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(text(&f, "no_newline.txt"), "first line\nsecond line\n");
        // An addition after such a last line too.
        let f = run(
            &[("f", "a\nb")],
            "*** Begin Patch\n*** Update File: f\n@@\n+c\n*** End of File\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(text(&f, "f"), "a\nb\nc\n");
    }

    #[test]
    fn codex_failure_after_a_success_changes_nothing_here() {
        // Deliberately atomic: Codex keeps `created.txt`; a step changes
        // nothing when any of its operations fails (the overlay is the
        // caller's, thrown away on error, so only the error is checked).
        let e = run(
            &[],
            "*** Begin Patch\n*** Add File: created.txt\n+hello\n*** Update File: missing.txt\n@@\n-old\n+new\n*** End Patch\n",
        )
        .unwrap_err();
        assert!(e.contains("missing.txt does not exist"), "{e}");
    }

    #[test]
    fn codex_pure_addition_with_a_bare_anchor_appends() {
        let f = run(
            &[("input.txt", "line1\nline2\n")],
            "*** Begin Patch\n*** Update File: input.txt\n@@\n+added line 1\n+added line 2\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(
            text(&f, "input.txt"),
            "line1\nline2\nadded line 1\nadded line 2\n"
        );
    }

    #[test]
    fn codex_whitespace_padded_hunk_header() {
        let f = run(
            &[("foo.txt", "old\n")],
            "*** Begin Patch\n  *** Update File: foo.txt\n@@\n-old\n+new\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(text(&f, "foo.txt"), "new\n");
    }

    #[test]
    fn codex_whitespace_padded_patch_markers() {
        for p in [
            " *** Begin Patch\n*** Update File: file.txt\n@@\n-one\n+two\n*** End Patch \n",
            "*** Begin Patch \n*** Update File: file.txt\n@@\n-one\n+two\n *** End Patch\n",
        ] {
            let f = run(&[("file.txt", "one\n")], p).unwrap();
            assert_eq!(text(&f, "file.txt"), "two\n", "{p:?}");
        }
    }

    #[test]
    fn codex_unicode_lines_match_exactly() {
        let f = run(
            &[("foo.txt", "line1\nnaïve café\nline3\n")],
            "*** Begin Patch\n*** Update File: foo.txt\n@@\n line1\n-naïve café\n+naïve café ✅\n*** End Patch \n",
        )
        .unwrap();
        assert_eq!(text(&f, "foo.txt"), "line1\nnaïve café ✅\nline3\n");
    }

    #[test]
    fn codex_delete_file() {
        let f = run(
            &[("keep.txt", "keep\n"), ("obsolete.txt", "obsolete\n")],
            "*** Begin Patch\n*** Delete File: obsolete.txt\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(all(&f), want(&[("keep.txt", "keep\n")]));
    }

    #[test]
    fn codex_update_that_only_deletes() {
        let f = run(
            &[("lines.txt", "line1\nline2\nline3\n")],
            "*** Begin Patch\n*** Update File: lines.txt\n@@\n line1\n-line2\n line3\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(text(&f, "lines.txt"), "line1\nline3\n");
    }

    #[test]
    fn codex_end_of_file_marker() {
        let f = run(
            &[("tail.txt", "first\nsecond\n")],
            "*** Begin Patch\n*** Update File: tail.txt\n@@\n first\n-second\n+second updated\n*** End of File\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(text(&f, "tail.txt"), "first\nsecond updated\n");
        let e = run(
            &[("t", "a\nb\na\nc\n")],
            "*** Begin Patch\n*** Update File: t\n@@\n-a\n+x\n*** End of File\n*** End Patch\n",
        )
        .unwrap_err();
        assert!(e.contains("at its end"), "{e}");
    }

    #[test]
    fn codex_heredoc_wrappers() {
        for p in [
            "<<'EOF'\n*** Begin Patch\n*** Update File: f\n@@\n-a\n+b\n*** End Patch\nEOF\n",
            "<<EOF\n*** Begin Patch\n*** Update File: f\n@@\n-a\n+b\n*** End Patch\nEOF",
            "<<\"EOF\"\n*** Begin Patch\n*** Update File: f\n@@\n-a\n+b\n*** End Patch\nEOF\n",
            "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: f\n@@\n-a\n+b\n*** End Patch\nEOF\n",
            "apply_patch <<PATCH\n*** Begin Patch\n*** Update File: f\n@@\n-a\n+b\n*** End Patch\nPATCH\n",
            "apply_patch << 'EOF'\n*** Begin Patch\n*** Update File: f\n@@\n-a\n+b\n*** End Patch\nEOF\n",
        ] {
            let f = run(&[("f", "a\n")], p).unwrap();
            assert_eq!(text(&f, "f"), "b\n", "{p:?}");
        }
        for (p, msg) in [
            ("cd sub && apply_patch <<'EOF'\n*** Begin Patch\n*** Delete File: f\n*** End Patch\nEOF\n", "runs more than"),
            ("apply_patch <<'EOF'\n*** Begin Patch\n*** Delete File: f\n*** End Patch\nEND\n", "does not end with its delimiter"),
            ("<<'EOF'\n*** Begin Patch\n*** Delete File: f\nEOF\n", "line 3: the patch must end with"),
        ] {
            let e = run(&[("f", "a\n")], p).unwrap_err();
            assert!(e.contains(msg), "{p:?}: {e}");
        }
    }

    #[test]
    fn codex_matching_passes_and_rewritten_context() {
        // Trailing whitespace, indentation and typographic punctuation in
        // the file: found in a later pass; the span is written as the patch
        // has it (Codex replaces the whole span).
        let f = run(
            &[("f", "a  \n    b\nsay “hi” — now\nz\n")],
            "*** Begin Patch\n*** Update File: f\n@@\n a\n-b\n+B\n@@\n-say \"hi\" - now\n+said\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(text(&f, "f"), "a\nB\nsaid\nz\n");
        // An exact match later beats a looser one earlier.
        let f = run(
            &[("f", " x\nx\n")],
            "*** Begin Patch\n*** Update File: f\n@@\n-x\n+y\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(text(&f, "f"), " x\ny\n");
    }

    #[test]
    fn codex_blank_line_between_chunks() {
        let f = run(
            &[("f", "a\nb\nc\nd\n")],
            "*** Begin Patch\n*** Update File: f\n@@\n-b\n+B\n\n@@\n-d\n+D\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(text(&f, "f"), "a\nB\nc\nD\n");
    }

    #[test]
    fn anchored_additions_apply_only_where_codex_releases_agree() {
        // After the last line: at the end either way.
        let f = run(
            &[("f", "a\nb\n")],
            "*** Begin Patch\n*** Update File: f\n@@ b\n+c\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(text(&f, "f"), "a\nb\nc\n");
        let e = run(
            &[("f", "a\nb\n")],
            "*** Begin Patch\n*** Update File: f\n@@ a\n+c\n*** End Patch\n",
        )
        .unwrap_err();
        assert!(
            e.contains("Codex's releases put such lines in different places"),
            "{e}"
        );
    }

    #[test]
    fn crlf_files_and_blank_last_lines_are_refused_where_codex_modes_differ() {
        for (file, want) in [
            ("one\r\ntwo\r\nthree\r\n", "CRLF line ends"),
            ("one\r\ntwo", "CRLF line ends"),
            ("one\r\ntwo\nthree\r\nfour\n", "CRLF line ends"),
            ("one\ntwo\n\n", "ends with a blank line"),
        ] {
            let e = run(
                &[("f", file)],
                "*** Begin Patch\n*** Update File: f\n@@\n-one\n+ONE\n*** End Patch\n",
            )
            .unwrap_err();
            assert!(e.contains(want), "{file:?}: {e}");
        }
        // A lone CR inside a line is not a line end.
        let f = run(
            &[("f", "a\rb\nc\n")],
            "*** Begin Patch\n*** Update File: f\n@@\n-c\n+C\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(text(&f, "f"), "a\rb\nC\n");
    }

    #[test]
    fn ambiguity_and_names_codex_would_take_otherwise_are_refused() {
        let start = [("a", "x\ny\nx\n")];
        let cases = [
            (
                "*** Update File: a\n",
                "line 1: the patch must start with \"*** Begin Patch\"",
            ),
            (
                "*** Begin Patch\n*** Update File: a\n-x\n",
                "line 3: the patch must end with \"*** End Patch\"",
            ),
            (
                "*** Begin Patch\n*** Update File: a\n-x\n+z\n*** End Patch\n",
                "occur 2 times in a (at lines 1 and 3)",
            ),
            (
                "*** Begin Patch\n*** Update File: a\n@@ nope\n-x\n*** End Patch\n",
                "its anchor @@ \"nope\" is not in a",
            ),
            (
                "*** Begin Patch\n*** Update File: a\n*** Move to: a\n@@\n-y\n*** End Patch\n",
                "is the file itself",
            ),
            (
                "*** Begin Patch\n*** Update File: a\n*** Move to: b \n@@\n-y\n*** End Patch\n",
                "whitespace around it",
            ),
            (
                "*** Begin Patch\n*** Add File:  b\n+q\n*** End Patch\n",
                "starts with whitespace",
            ),
            (
                "*** Begin Patch\n*** Update File: a\n?x\n*** End Patch\n",
                "line 3: in Update File a, a line starts with",
            ),
            (
                "*** Begin Patch\n*** Update File: a\n@@\n-y\n+q\nx\n*** End Patch\n",
                "a chunk after the first starts with \"@@\"",
            ),
            (
                "*** Begin Patch\n*** Add File: ../x\n+a\n*** End Patch\n",
                "line 2: Add File",
            ),
            (
                "*** Begin Patch\n*** Delete File: a\n*** End Patch\nmore\n",
                "must end with",
            ),
            (
                "\n\n*** Begin Patch\n*** Frobnicate: a\n*** End Patch\n",
                "line 4: expected",
            ),
        ];
        for (p, want) in cases {
            let e = run(&start, p).unwrap_err();
            assert!(e.contains(want), "{p:?}: {e}");
        }
    }
}
