//! `apply_patch`: the `*** Begin Patch` … `*** End Patch` format.
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
//! No line numbers: an Update's chunks are placed by their text, in order.
//! A chunk's `@@ <anchor>` line, if given, must be found (the first line
//! equal to it after the previous chunk), and the chunk's context and
//! removed lines are then taken at their first match after it; without an
//! anchor they must match exactly once after the previous chunk. `*** End of
//! File` pins a chunk to the end of the file. A chunk of added lines only
//! needs an anchor (it goes after it) or `*** End of File` (it is appended).
//! Matching is exact, line by line.

use super::{
    checked_path, create, existing_text, line_matches, list_lines, quote, splice_lines, EditError,
    Files,
};

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
    pub anchor: Option<String>,
    /// Context and removed lines, with `\n`.
    pub old: Vec<String>,
    /// Context and added lines, with `\n`.
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
const EOF: &str = "*** End of File";

/// Parse a patch; errors name the line of the patch.
pub fn parse(text: &str) -> Result<Vec<FileOp>, EditError> {
    parse_str(text).map_err(EditError::Malformed)
}

fn parse_str(text: &str) -> Result<Vec<FileOp>, String> {
    let lines: Vec<&str> = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    let mut i = 0;
    while i < lines.len() && lines[i].trim().is_empty() {
        i += 1;
    }
    if lines.get(i).map(|l| l.trim_end()) != Some(BEGIN) {
        return Err(format!(
            "line {}: the patch must start with {BEGIN:?}",
            i + 1
        ));
    }
    i += 1;
    let mut ops = Vec::new();
    loop {
        let n = i + 1;
        let Some(&l) = lines.get(i) else {
            return Err(format!("the patch ends without {END:?}"));
        };
        let t = l.trim_end();
        if t == END {
            if lines[i + 1..].iter().any(|l| !l.trim().is_empty()) {
                return Err(format!("line {}: text after {END:?}", n + 1));
            }
            break;
        }
        if let Some(p) = t.strip_prefix(ADD) {
            let path = checked_path(p.trim(), &format!("line {n}: Add File"))?;
            i += 1;
            let mut body = Vec::new();
            while let Some(l) = lines.get(i).filter(|l| !l.starts_with("*** ")) {
                match l.strip_prefix('+') {
                    Some(rest) => body.push(format!("{rest}\n")),
                    None => {
                        return Err(format!(
                            "line {}: every line of an added file starts with '+', found {}",
                            i + 1,
                            quote(l.as_bytes())
                        ))
                    }
                }
                i += 1;
            }
            ops.push(FileOp::Add {
                path,
                lines: body,
                line: n,
            });
        } else if let Some(p) = t.strip_prefix(DELETE) {
            ops.push(FileOp::Delete {
                path: checked_path(p.trim(), &format!("line {n}: Delete File"))?,
                line: n,
            });
            i += 1;
        } else if let Some(p) = t.strip_prefix(UPDATE) {
            let path = checked_path(p.trim(), &format!("line {n}: Update File"))?;
            i += 1;
            let mut move_to = None;
            if let Some(m) = lines.get(i).and_then(|l| l.trim_end().strip_prefix(MOVE)) {
                move_to = Some(checked_path(m.trim(), &format!("line {}: Move to", i + 1))?);
                i += 1;
            }
            let (chunks, next) = parse_chunks(&lines, i, &path)?;
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
        } else if t.is_empty() {
            i += 1;
        } else {
            return Err(format!(
                "line {n}: expected {ADD:?}, {DELETE:?}, {UPDATE:?} or {END:?}, found {}",
                quote(l.as_bytes())
            ));
        }
    }
    if ops.is_empty() {
        return Err("the patch changes no file".into());
    }
    Ok(ops)
}

fn parse_chunks(lines: &[&str], mut i: usize, path: &str) -> Result<(Vec<Chunk>, usize), String> {
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut cur: Option<Chunk> = None;
    while let Some(&l) = lines.get(i) {
        if l.trim_end() == EOF {
            let Some(c) = cur.as_mut() else {
                return Err(format!("line {}: {EOF:?} before any change", i + 1));
            };
            c.end_of_file = true;
            i += 1;
            continue;
        }
        if l.starts_with("*** ") {
            break;
        }
        if let Some(rest) = l.strip_prefix("@@") {
            chunks.extend(cur.take());
            let anchor = rest.trim();
            cur = Some(Chunk {
                anchor: (!anchor.is_empty()).then(|| anchor.to_string()),
                line: i + 1,
                ..Chunk::default()
            });
            i += 1;
            continue;
        }
        let c = cur.get_or_insert_with(|| Chunk {
            line: i + 1,
            ..Chunk::default()
        });
        if c.end_of_file {
            return Err(format!(
                "line {}: lines after {EOF:?} in the chunk at line {} of {path}",
                i + 1,
                c.line
            ));
        }
        match l.as_bytes().first() {
            // An empty line is an empty context line (editors strip the space).
            None => {
                if lines.get(i + 1).is_none() {
                    break;
                }
                c.old.push("\n".into());
                c.new.push("\n".into());
            }
            Some(b' ') => {
                c.old.push(format!("{}\n", &l[1..]));
                c.new.push(format!("{}\n", &l[1..]));
            }
            Some(b'-') => c.old.push(format!("{}\n", &l[1..])),
            Some(b'+') => c.new.push(format!("{}\n", &l[1..])),
            _ => {
                return Err(format!(
                    "line {}: in Update File {path}, a line starts with ' ', '-', '+' or \"@@\", found {}",
                    i + 1,
                    quote(l.as_bytes())
                ))
            }
        }
        i += 1;
    }
    chunks.extend(cur);
    for c in &chunks {
        if c.old.is_empty() && c.new.is_empty() {
            return Err(format!(
                "line {}: an empty chunk in Update File {path}",
                c.line
            ));
        }
    }
    Ok((chunks, i))
}

/// Apply the file operations in order.
pub fn apply(files: &mut dyn Files, ops: &[FileOp]) -> Result<(), EditError> {
    apply_str(files, ops).map_err(EditError::DoesNotApply)
}

fn apply_str(files: &mut dyn Files, ops: &[FileOp]) -> Result<(), String> {
    for op in ops {
        match op {
            FileOp::Add { path, lines, line } => create(
                files,
                path,
                lines.concat().into_bytes(),
                &format!("apply_patch line {line}: Add File"),
            )?,
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
                let (mut content, mode) = existing_text(files, path, &what)?;
                let mut cursor = 0usize;
                for c in chunks {
                    let (next, at) = place(&content, c, cursor, path)?;
                    content = next;
                    cursor = at;
                }
                match move_to.as_deref().filter(|m| *m != path) {
                    Some(dest) => {
                        if files.get(dest)?.is_some() {
                            return Err(format!(
                                "{what} {path}: Move to {dest}: it already exists"
                            ));
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

/// Place one chunk at or after line `cursor`; the new content and the line
/// after the chunk's new lines.
fn place(content: &[u8], c: &Chunk, cursor: usize, path: &str) -> Result<(Vec<u8>, usize), String> {
    let what = format!("apply_patch line {}: chunk of {path}", c.line);
    let hay = super::lines(content);
    let old: Vec<&[u8]> = c.old.iter().map(|l| l.as_bytes()).collect();
    let new: Vec<&[u8]> = c.new.iter().map(|l| l.as_bytes()).collect();
    let mut from = cursor;
    if let Some(a) = &c.anchor {
        let want = [a.as_bytes()];
        // The anchor as a whole line, or as a line's start after its
        // indentation (models write `@@ def f():` for an indented def).
        let found = (cursor..hay.len()).find(|&p| {
            let line = super::body(hay[p]);
            line == want[0] || line.trim_ascii_start() == want[0]
        });
        match found {
            Some(p) => from = p + 1,
            None => {
                return Err(format!(
                    "{what}: its anchor @@ {} is not in {path} after line {cursor}",
                    quote(a.as_bytes())
                ))
            }
        }
    }
    if old.is_empty() {
        let at = if c.end_of_file {
            hay.len()
        } else if c.anchor.is_some() {
            from
        } else {
            return Err(format!(
                "{what}: a chunk that only adds lines needs an @@ anchor or {EOF:?} to say where"
            ));
        };
        return Ok((splice_lines(&hay, at, 0, &new), at + new.len()));
    }
    let matches = line_matches(&hay, &old, from);
    let at = if c.end_of_file {
        match matches.last() {
            Some(&p) if p + old.len() == hay.len() => p,
            _ => {
                return Err(format!(
                    "{what}: its lines {} are not at the end of {path} ({EOF:?})",
                    quote(&old.concat())
                ))
            }
        }
    } else {
        match (matches.as_slice(), c.anchor.is_some()) {
            ([], _) => {
                return Err(format!(
                    "{what}: its context and removed lines {} are not in {path}{}{}",
                    quote(&old.concat()),
                    if from > 0 {
                        format!(" after line {from}")
                    } else {
                        String::new()
                    },
                    super::closest_match(&hay, &old)
                        .map(|m| format!("; closest match: {path} {m}"))
                        .unwrap_or_default()
                ))
            }
            ([p, ..], true) | ([p], false) => *p,
            (many, false) => {
                let ls: Vec<usize> = many.iter().map(|p| p + 1).collect();
                return Err(format!(
                    "{what}: its context and removed lines {} occur {} times in {path} (at {}); add context or an @@ anchor",
                    quote(&old.concat()),
                    many.len(),
                    list_lines(&ls)
                ));
            }
        }
    };
    Ok((splice_lines(&hay, at, old.len(), &new), at + new.len()))
}

#[cfg(test)]
mod tests {
    use super::super::{MemFiles, MODE_FILE};
    use super::*;

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

    #[test]
    fn an_add_at_the_end_of_a_file_without_a_final_newline_is_its_own_line() {
        let mut f = files(&[("f", "a\nb")]);
        let p =
            parse("*** Begin Patch\n*** Update File: f\n@@\n+c\n*** End of File\n*** End Patch\n")
                .unwrap();
        apply(&mut f, &p).unwrap();
        assert_eq!(text(&f, "f"), "a\nb\nc");
        // Two adds in turn: still their own lines.
        apply(&mut f, &p).unwrap();
        assert_eq!(text(&f, "f"), "a\nb\nc\nc");
    }

    #[test]
    fn add_update_move_delete() {
        let mut f = files(&[
            (
                "app.py",
                "import os\n\ndef greet():\n    print(\"Hi\")\n\ndef bye():\n    print(\"Hi\")\n",
            ),
            ("old.txt", "x\n"),
        ]);
        let p = "*** Begin Patch\n*** Add File: docs/new.md\n+# New\n+\n*** Update File: app.py\n*** Move to: main.py\n@@ def bye():\n-    print(\"Hi\")\n+    print(\"Bye\")\n*** Delete File: old.txt\n*** End Patch\n";
        apply(&mut f, &parse(p).unwrap()).unwrap();
        assert_eq!(text(&f, "docs/new.md"), "# New\n\n");
        assert_eq!(
            text(&f, "main.py"),
            "import os\n\ndef greet():\n    print(\"Hi\")\n\ndef bye():\n    print(\"Bye\")\n"
        );
        assert!(!f.0.contains_key("app.py") && !f.0.contains_key("old.txt"));
    }

    #[test]
    fn chunks_in_order_end_of_file_and_additions() {
        let mut f = files(&[("a", "1\n2\n3\n2\n")]);
        let p = "*** Begin Patch\n*** Update File: a\n@@\n 1\n-2\n+two\n@@\n 3\n-2\n+TWO\n*** End of File\n@@ 1\n+after one\n*** End Patch";
        apply(&mut f, &parse(p).unwrap()).unwrap_err(); // the anchor `1` is behind the cursor
        let p = "*** Begin Patch\n*** Update File: a\n@@ 1\n+after one\n@@\n-2\n+two\n 3\n*** Update File: a\n@@\n-2\n+TWO\n*** End of File\n*** End Patch";
        apply(&mut f, &parse(p).unwrap()).unwrap();
        assert_eq!(text(&f, "a"), "1\nafter one\ntwo\n3\nTWO\n");
    }

    #[test]
    fn every_failure_is_named() {
        let start = [("a", "x\ny\nx\n")];
        let cases = [
            ("*** Update File: a\n", "must start with \"*** Begin Patch\""),
            ("*** Begin Patch\n*** Update File: a\n-x\n", "ends without \"*** End Patch\""),
            ("*** Begin Patch\n*** Update File: a\n-x\n+z\n*** End Patch\n", "occur 2 times in a (at lines 1 and 3)"),
            ("*** Begin Patch\n*** Update File: a\n-nope\n*** End Patch\n", "\"nope⏎\" are not in a"),
            ("*** Begin Patch\n*** Update File: zz\n-x\n*** End Patch\n", "zz does not exist"),
            ("*** Begin Patch\n*** Delete File: zz\n*** End Patch\n", "zz does not exist"),
            ("*** Begin Patch\n*** Add File: a\n+x\n*** End Patch\n", "a already exists"),
            ("*** Begin Patch\n*** Add File: b\nx\n*** End Patch\n", "starts with '+'"),
            ("*** Begin Patch\n*** Update File: a\n@@ nope\n-x\n*** End Patch\n", "its anchor @@ \"nope\" is not in a"),
            ("*** Begin Patch\n*** Update File: a\n+z\n*** End Patch\n", "needs an @@ anchor"),
            ("*** Begin Patch\n*** Update File: a\n-y\n*** End of File\n*** End Patch\n", "not at the end of a"),
            ("*** Begin Patch\n*** Update File: a\n*** End Patch\n", "has no changes"),
            ("*** Begin Patch\n*** Update File: a\n*** Move to: a2\n*** Add File: a2\n+q\n*** End Patch\n", "a2 already exists"),
            ("*** Begin Patch\n*** Frobnicate: a\n*** End Patch\n", "expected \"*** Add File: \""),
            ("*** Begin Patch\n*** Update File: a\n?x\n*** End Patch\n", "a line starts with"),
            ("*** Begin Patch\n*** Add File: ../x\n+a\n*** End Patch\n", "line 2: Add File"),
            ("*** Begin Patch\n*** End Patch\n", "changes no file"),
            ("*** Begin Patch\n*** Delete File: a\n*** End Patch\nmore\n", "text after"),
        ];
        for (p, want) in cases {
            let mut f = files(&start);
            let e = parse(p).and_then(|ops| apply(&mut f, &ops)).unwrap_err();
            assert!(e.to_string().contains(want), "{p:?}: {e}");
        }
    }
}
