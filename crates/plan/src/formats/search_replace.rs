//! `search_replace`: SEARCH/REPLACE blocks, as aider emits and applies them
//! (`aider/coders/editblock_coder.py`).
//!
//! ~~~text
//! path/to/file.py
//! ```python
//! <<<<<<< SEARCH
//! old lines
//! =======
//! new lines
//! >>>>>>> REPLACE
//! ```
//! ~~~
//!
//! Owns the format's grammar and its matching. Invariant: blocks aider
//! applies are applied to the same bytes, or refused with the reason; never
//! a different edit. As aider: the file name is the last line before a
//! block (fence lines skipped), stripped of the decorations models put on it
//! (`# a.py`, `**a.py**`, `` `a.py` ``, `a.py:`); a block after a blank line
//! or a `...` line reuses the previous block's file; marker lines may be
//! indented and have 5 to 9 marker characters (`<<<<<<< SEARCH>` too); the
//! SEARCH lines are found as whole lines, exactly, or else all offset by the
//! same leading whitespace (which the REPLACE lines then get); an empty
//! SEARCH creates the file, or appends to it; a replaced file ends with a
//! newline. Blocks apply in order.
//!
//! Deliberately stricter, each refused with the reason: SEARCH lines that
//! occur more than once (aider edits the first); a block whose file name
//! line is prose (aider takes it for a name); a SEARCH not in the named
//! file (aider tries it on the other files of its chat); a step is atomic
//! (aider keeps the blocks that matched); a file with CRLF line ends (aider
//! on Linux rewrites it with LF). Block text is read as aider reads it
//! (`strip_quoted_wrapping`): a first line ending with the file's name, a
//! fence around it and one blank line at its end are dropped, CRLF is LF.

use super::{
    checked_path, existing_text, line_matches, list_lines, quote, EditError, Files, MODE_FILE,
};

const SEARCH: &str = "<<<<<<< SEARCH";
const DIVIDER: &str = "=======";
const REPLACE: &str = ">>>>>>> REPLACE";

/// One block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub path: String,
    /// Lines, each with its `\n`.
    pub search: Vec<String>,
    pub replace: Vec<String>,
    /// 1-based line of the `<<<<<<< SEARCH` marker.
    pub line: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    Search,
    Divider,
    Replace,
}

/// aider's marker lines: `^<{5,9} SEARCH>?$`, `^={5,9}$`, `^>{5,9} REPLACE$`
/// after trimming the line.
fn marker(line: &str) -> Option<Marker> {
    let t = line.trim();
    let run = |c: char| {
        let n = t.chars().take_while(|x| *x == c).count();
        (5..=9).contains(&n).then(|| &t[n..])
    };
    if let Some(rest) = run('<') {
        if rest == " SEARCH" || rest == " SEARCH>" {
            return Some(Marker::Search);
        }
    }
    if run('=') == Some("") {
        return Some(Marker::Divider);
    }
    if run('>') == Some(" REPLACE") {
        return Some(Marker::Replace);
    }
    None
}

/// A file-name line as aider reads it: trimmed, a trailing `:`, leading
/// `#`s, and surrounding backticks and `*`s taken off. None for a line that
/// names no file (`...`, a fence without a name).
fn file_name(line: &str) -> Option<String> {
    let t = line.trim();
    if t == "..." || t.is_empty() {
        return None;
    }
    if let Some(rest) = t.strip_prefix("```") {
        // ```` ```a.py ````: a name right after the fence (not a language).
        return (rest.contains('.') || rest.contains('/')).then(|| rest.to_string());
    }
    let t = t.trim_end_matches(':').trim_start_matches('#').trim();
    let t = t.trim_matches('`').trim_matches('*');
    (!t.is_empty()).then(|| t.to_string())
}

/// Parse the blocks; errors name the line of the text.
pub fn parse(text: &str) -> Result<Vec<Block>, EditError> {
    parse_str(text).map_err(EditError::Malformed)
}

fn parse_str(text: &str) -> Result<Vec<Block>, String> {
    enum State {
        Outside,
        Search(Block),
        Replace(Block),
    }
    let mut blocks: Vec<Block> = Vec::new();
    // The last line before a block that may name its file: (line, text).
    let mut named: Option<(usize, &str)> = None;
    let mut state = State::Outside;
    for (i, raw) in text.split_inclusive('\n').enumerate() {
        let n = i + 1;
        let m = marker(raw);
        state = match state {
            State::Outside => match m {
                Some(Marker::Search) => {
                    let path = match named.take() {
                        Some((at, line)) => {
                            let Some(name) = file_name(line) else {
                                return Err(format!("line {at}: {} names no file", quote(line.as_bytes())));
                            };
                            checked_path(&name, &format!("line {at}: the file name {}", quote(line.trim().as_bytes())))?
                        }
                        None => match blocks.last() {
                            Some(b) => b.path.clone(),
                            None => {
                                return Err(format!(
                                    "line {n}: the block has no file name: it must be alone on the line before the block (or its opening fence)"
                                ))
                            }
                        },
                    };
                    State::Search(Block {
                        path,
                        search: Vec::new(),
                        replace: Vec::new(),
                        line: n,
                    })
                }
                // A divider or REPLACE line outside a block is text to
                // aider (a heading's underline): never a file name.
                Some(_) => {
                    named = None;
                    State::Outside
                }
                None => {
                    let t = raw.trim();
                    if t.starts_with("```") && file_name(t).is_none() {
                        // A fence line: the name above it still counts.
                    } else if t.is_empty() || t == "..." {
                        // A blank or `...` line: the block after it reuses
                        // the previous block's file.
                        named = None;
                    } else {
                        named = Some((n, raw.trim_end_matches(['\n', '\r'])));
                    }
                    State::Outside
                }
            },
            State::Search(mut b) => match m {
                Some(Marker::Divider) => State::Replace(b),
                Some(_) => {
                    return Err(format!(
                        "line {n}: {} inside the SEARCH part of the block at line {} (expected {DIVIDER:?})",
                        quote(raw.trim().as_bytes()),
                        b.line
                    ))
                }
                None => {
                    b.search.push(raw.to_string());
                    State::Search(b)
                }
            },
            State::Replace(mut b) => match m {
                Some(Marker::Replace) => {
                    unwrap_quoted(&mut b)?;
                    blocks.push(b);
                    State::Outside
                }
                Some(_) => {
                    return Err(format!(
                        "line {n}: {} inside the REPLACE part of the block at line {} (expected {REPLACE:?})",
                        quote(raw.trim().as_bytes()),
                        b.line
                    ))
                }
                None => {
                    b.replace.push(raw.to_string());
                    State::Replace(b)
                }
            },
        };
    }
    match state {
        State::Outside if blocks.is_empty() => {
            Err(format!("no {SEARCH:?} … {DIVIDER:?} … {REPLACE:?} block"))
        }
        State::Outside => Ok(blocks),
        State::Search(b) | State::Replace(b) => Err(format!(
            "the block at line {} for {} is not closed with {REPLACE:?}",
            b.line, b.path
        )),
    }
}

/// aider's `strip_quoted_wrapping`, on SEARCH and REPLACE each: a first
/// line ending with the file's name is dropped, so are a fence line around
/// the text and one blank line at its end, and CRLF line ends are read as
/// LF.
fn unwrap_quoted(b: &mut Block) -> Result<(), String> {
    let base = b.path.rsplit('/').next().unwrap_or(&b.path).to_string();
    for (part, lines) in [("SEARCH", &mut b.search), ("REPLACE", &mut b.replace)] {
        if lines.is_empty() {
            continue;
        }
        if lines[0].trim().ends_with(base.as_str()) {
            lines.remove(0);
            if lines.is_empty() {
                return Err(format!(
                    "the block at line {} holds only its file name in its {part} part",
                    b.line
                ));
            }
        }
        if lines.len() >= 2
            && lines[0].starts_with("```")
            && lines[lines.len() - 1].starts_with("```")
        {
            lines.pop();
            lines.remove(0);
        }
        if !lines.is_empty()
            && lines[lines.len() - 1]
                .trim_end_matches(['\n', '\r'])
                .is_empty()
        {
            // (Only a blank line after a line end: "x\n" + "\n".)
            lines.pop();
        }
        if let Some(last) = lines.last_mut() {
            if !last.ends_with('\n') {
                last.push('\n');
            }
        }
        // Line ends as aider reads the text: LF.
        for l in lines.iter_mut() {
            if l.ends_with("\r\n") {
                l.truncate(l.len() - 2);
                l.push('\n');
            }
        }
    }
    Ok(())
}

/// Apply the blocks in order.
pub fn apply(files: &mut dyn Files, blocks: &[Block]) -> Result<(), EditError> {
    apply_str(files, blocks).map_err(EditError::DoesNotApply)
}

/// A file name line that reads as prose: refused as a missing name.
fn prose(path: &str) -> bool {
    path.contains(' ') && path.split(' ').count() > 2
}

fn apply_str(files: &mut dyn Files, blocks: &[Block]) -> Result<(), String> {
    for b in blocks {
        let what = format!("search_replace block at line {}", b.line);
        let replace = b.replace.concat();
        let existing = files.get(&b.path)?;
        if existing.is_none() && prose(&b.path) {
            return Err(format!(
                "{what}: the file name is missing: {} is not a file (the file name must be alone on the line before the block)",
                quote(b.path.as_bytes())
            ));
        }
        if b.search.iter().all(|l| l.trim().is_empty()) {
            // Empty SEARCH: a new file, or (aider) text appended to one.
            match existing {
                None => files.put(&b.path, replace.into_bytes(), MODE_FILE)?,
                Some((content, mode)) => {
                    if mode == super::MODE_LINK {
                        return Err(format!("{what}: {} is a symlink", b.path));
                    }
                    if !content.is_empty() && !content.ends_with(b"\n") {
                        return Err(format!(
                            "{what}: an empty SEARCH appends to {}, whose last line has no line end (aider would join the two lines)",
                            b.path
                        ));
                    }
                    let mut out = content;
                    out.extend_from_slice(replace.as_bytes());
                    files.put(&b.path, out, mode)?;
                }
            }
            continue;
        }
        let (content, mode) = existing_text(files, &b.path, &what)?;
        if content.windows(2).any(|w| w == b"\r\n") {
            return Err(format!(
                "{what}: {} has CRLF line ends, which aider rewrites as LF; use `edits` or `patch` for it",
                b.path
            ));
        }
        let hay = super::lines(&content);
        let needle: Vec<&[u8]> = b.search.iter().map(|l| l.as_bytes()).collect();
        let exact = line_matches(&hay, &needle, 0);
        let (at, with): (usize, Vec<Vec<u8>>) = match exact.as_slice() {
            [p] => (*p, b.replace.iter().map(|l| l.as_bytes().to_vec()).collect()),
            [] => match offset_match(&hay, &b.search, &b.replace) {
                Offset::One(p, with) => (p, with),
                Offset::None => {
                    return Err(format!(
                        "{what}: the SEARCH text {} is not in {} (it must match whole lines exactly, or all with the same extra indentation){}",
                        quote(&needle.concat()),
                        b.path,
                        super::closest_match(&hay, &needle)
                            .map(|m| format!("; closest match: {} {m}", b.path))
                            .unwrap_or_default()
                    ))
                }
                Offset::Many(ps) => return Err(many(&what, &needle, &b.path, &ps, " (with its indentation changed)")),
            },
            many_at => return Err(many(&what, &needle, &b.path, many_at, "")),
        };
        files.put(&b.path, splice(&hay, at, needle.len(), &with), mode)?;
    }
    Ok(())
}

fn many(what: &str, needle: &[&[u8]], path: &str, at: &[usize], how: &str) -> String {
    let ls: Vec<usize> = at.iter().map(|p| p + 1).collect();
    format!(
        "{what}: the SEARCH text {} occurs {} times in {path}{how} (at {}); it must occur exactly once (aider would edit the first)",
        quote(&needle.concat()),
        at.len(),
        list_lines(&ls)
    )
}

/// `hay` with lines `at..at + n` replaced by `with`; the file ends with a
/// line end afterwards, as aider writes it (the file's own: CRLF in a CRLF
/// file).
fn splice(hay: &[&[u8]], at: usize, n: usize, with: &[Vec<u8>]) -> Vec<u8> {
    let mut out: Vec<u8> = hay[..at].concat();
    for l in with {
        out.extend_from_slice(l);
    }
    // A replacement's last line without a line end, before more lines.
    if at + n < hay.len() && !out.is_empty() && !out.ends_with(b"\n") {
        out.push(b'\n');
    }
    out.extend(hay[at + n..].iter().flat_map(|l| l.iter()));
    if !out.is_empty() && !out.ends_with(b"\n") {
        let crlf = hay.first().is_some_and(|l| l.ends_with(b"\r\n"));
        out.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
    }
    out
}

enum Offset {
    None,
    One(usize, Vec<Vec<u8>>),
    Many(Vec<usize>),
}

/// aider's "missing leading whitespace" match: SEARCH and REPLACE outdented
/// by their smallest indentation, then the SEARCH lines found in the file
/// each with the same whitespace prefix (blank lines match blank lines),
/// which every non-blank REPLACE line gets. Only a unique match counts.
fn offset_match(hay: &[&[u8]], search: &[String], replace: &[String]) -> Offset {
    let body = |l: &str| l.strip_suffix('\n').unwrap_or(l).to_string();
    // Counted in characters, as aider counts them (a tab is one, and a
    // wide space is one, never a part of one).
    let indent = |l: &str| l.chars().take_while(|c| c.is_whitespace()).count();
    let blank = |l: &str| l.trim().is_empty();
    let min = search
        .iter()
        .chain(replace)
        .filter(|l| !blank(l))
        .map(|l| indent(l))
        .min()
        .unwrap_or(0);
    let cut = |l: &String| {
        if blank(l) {
            l.clone()
        } else {
            l.chars().skip(min).collect()
        }
    };
    let search: Vec<String> = search.iter().map(cut).map(|l| body(&l)).collect();
    let replace: Vec<String> = replace.iter().map(cut).collect();
    let Ok(hay) = hay
        .iter()
        .map(|l| std::str::from_utf8(super::body(l)))
        .collect::<Result<Vec<&str>, _>>()
    else {
        return Offset::None;
    };
    let n = search.len();
    let mut found = Vec::new();
    if n == 0 || n > hay.len() {
        return Offset::None;
    }
    // aider's own window test (`match_but_for_leading_whitespace`): lines
    // equal once their leading whitespace is gone, and one prefix, taken
    // as the file line's first (its length − the SEARCH line's length)
    // characters. It fits windows this rule does not (other whitespace of
    // the same length): the first one it fits is the one aider edits.
    let aider_first = (0..=hay.len() - n).find(|&p| {
        let mut prefixes = std::collections::BTreeSet::new();
        hay[p..p + n].iter().zip(&search).all(|(h, s)| {
            if h.trim_start() != s.trim_start() {
                return false;
            }
            if !blank(h) {
                let (lh, ls) = (h.chars().count(), s.chars().count());
                prefixes.insert(if lh >= ls {
                    h.chars().take(lh - ls).collect::<String>()
                } else {
                    // Python's negative slice: aider's garbled prefix.
                    h.chars().take(lh.saturating_sub(ls - lh)).collect()
                });
            }
            true
        }) && prefixes.len() == 1
    });
    for p in 0..=hay.len() - n {
        let mut prefix: Option<&str> = None;
        let ok = hay[p..p + n].iter().zip(&search).all(|(h, s)| {
            if blank(s) || blank(h) {
                return blank(s) && blank(h);
            }
            // The file line is the SEARCH line after whitespace.
            match h.strip_suffix(s) {
                Some(pre) if pre.chars().all(char::is_whitespace) => {
                    *prefix.get_or_insert(pre) == pre
                }
                _ => false,
            }
        });
        // (An empty prefix: the lines differ only in blank lines' spaces.)
        if ok {
            found.push((p, prefix.unwrap_or_default().to_string()));
        }
    }
    match found.as_slice() {
        [] => Offset::None,
        // aider would edit another window: not the same edit.
        [(p, _)] if aider_first.is_some_and(|q| q != *p) => {
            Offset::Many(vec![aider_first.unwrap_or(*p), *p])
        }
        [(p, pre)] => Offset::One(
            *p,
            replace
                .iter()
                .map(|l| {
                    if blank(l) {
                        l.as_bytes().to_vec()
                    } else {
                        format!("{pre}{l}").into_bytes()
                    }
                })
                .collect(),
        ),
        many => Offset::Many(many.iter().map(|(p, _)| *p).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{MemFiles, MODE_FILE};
    use super::*;

    fn run(start: &str, text: &str) -> Result<String, String> {
        let mut f = MemFiles::default();
        f.put("a.py", start.as_bytes().to_vec(), MODE_FILE).unwrap();
        let blocks = parse(text).map_err(|e| {
            assert!(matches!(e, EditError::Malformed(_)), "{e:?}");
            e.to_string()
        })?;
        apply(&mut f, &blocks).map_err(|e| {
            assert!(matches!(e, EditError::DoesNotApply(_)), "{e:?}");
            e.to_string()
        })?;
        Ok(String::from_utf8(f.0["a.py"].0.clone()).unwrap())
    }

    #[test]
    fn blocks_with_and_without_fences() {
        let t = "a.py\n```python\n<<<<<<< SEARCH\ndef f():\n    return 1\n=======\ndef f():\n    return 2\n>>>>>>> REPLACE\n```\n";
        assert_eq!(
            run("x = 0\ndef f():\n    return 1\n", t).unwrap(),
            "x = 0\ndef f():\n    return 2\n"
        );
        // Two blocks under one path; the last line has no newline and keeps it so.
        let t = "a.py\n<<<<<<< SEARCH\nx = 0\n=======\nx = 1\n>>>>>>> REPLACE\n<<<<<<< SEARCH\ny\n=======\n>>>>>>> REPLACE\n";
        assert_eq!(run("x = 0\ny", t).unwrap(), "x = 1\n");
        // An empty SEARCH creates a file.
        let mut f = MemFiles::default();
        apply(
            &mut f,
            &parse("new.txt\n<<<<<<< SEARCH\n=======\nhello\n>>>>>>> REPLACE\n").unwrap(),
        )
        .unwrap();
        assert_eq!(f.0["new.txt"].0, b"hello\n");
    }

    #[test]
    fn every_failure_is_named() {
        let ok = "a.py\n<<<<<<< SEARCH\n";
        let cases = [
            (
                "a.py\n<<<<<<< SEARCH\nnope\n=======\nx\n>>>>>>> REPLACE\n",
                "the SEARCH text \"nope⏎\" is not in a.py",
            ),
            (
                "a.py\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n",
                "occurs 2 times in a.py (at lines 1 and 3); it must occur exactly once (aider would edit the first)",
            ),
            (
                "b.py\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n",
                "b.py does not exist",
            ),
            (
                "<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n",
                "line 1: the block has no file name",
            ),
            (ok, "is not closed"),
            (
                "a.py\n<<<<<<< SEARCH\nx\n>>>>>>> REPLACE\n",
                "inside the SEARCH part",
            ),
            (
                "a.py\n<<<<<<< SEARCH\nx\n=======\n<<<<<<< SEARCH\n",
                "inside the REPLACE part",
            ),
            ("a.py\n=======\n", "no \"<<<<<<< SEARCH\""),
            ("just prose\n", "no \"<<<<<<< SEARCH\""),
            (
                "../etc/passwd\n<<<<<<< SEARCH\n=======\nx\n>>>>>>> REPLACE\n",
                "line 1: the file name",
            ),
        ];
        for (text, want) in cases {
            let e = run("x\ny\nx\n", text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    // Conformance with aider's SEARCH/REPLACE blocks: one test per
    // behaviour of its editblock coder (tests/basic/test_editblock.py), the
    // cases written here from what aider does.

    fn files_after(start: &[(&str, &str)], text: &str) -> Result<MemFiles, String> {
        let mut f = MemFiles::default();
        for (p, c) in start {
            f.put(p, c.as_bytes().to_vec(), MODE_FILE).unwrap();
        }
        let blocks = parse(text).map_err(|e| e.to_string())?;
        apply(&mut f, &blocks).map_err(|e| e.to_string())?;
        Ok(f)
    }

    fn content(f: &MemFiles, p: &str) -> String {
        String::from_utf8(f.0[p].0.clone()).unwrap()
    }

    #[test]
    fn aider_several_blocks_for_one_file_named_once_with_dots_between() {
        let t = "foo.txt\n```\n<<<<<<< SEARCH\none\n=======\nuno\n>>>>>>> REPLACE\n\n...\n\n<<<<<<< SEARCH\nthree\n=======\ntres\n>>>>>>> REPLACE\n```\n";
        let f = files_after(&[("foo.txt", "one\ntwo\nthree\n")], t).unwrap();
        assert_eq!(content(&f, "foo.txt"), "uno\ntwo\ntres\n");
    }

    #[test]
    fn aider_decorated_file_names_are_stripped() {
        for name in [
            "# file1.py",
            "**file1.py**",
            "file1.py:",
            "`file1.py`",
            "### file1.py",
            "*file1.py*",
            "# `file1.py`:",
        ] {
            let t = format!(
                "{name}\n```python\n<<<<<<< SEARCH\na = 1\n=======\na = 2\n>>>>>>> REPLACE\n```\n"
            );
            let f = files_after(&[("file1.py", "a = 1\n")], &t).unwrap();
            assert_eq!(content(&f, "file1.py"), "a = 2\n", "{name}");
            assert_eq!(f.0.len(), 1, "{name}: created another file");
        }
        // A fence with the name right after it.
        let f = files_after(
            &[("file1.py", "a = 1\n")],
            "```file1.py\n<<<<<<< SEARCH\na = 1\n=======\na = 3\n>>>>>>> REPLACE\n```\n",
        )
        .unwrap();
        assert_eq!(content(&f, "file1.py"), "a = 3\n");
    }

    #[test]
    fn aider_prose_before_a_block_is_a_missing_file_name() {
        let e = files_after(
            &[("a.py", "x\n")],
            "Here's the change:\n```python\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n```\n",
        )
        .unwrap_err();
        assert!(
            e.contains("block at line 3: the file name is missing"),
            "{e}"
        );
    }

    #[test]
    fn aider_missing_leading_whitespace() {
        // The SEARCH lines lack the file's indentation, all by the same
        // amount: found, and the REPLACE lines get it.
        let whole =
            "class A:\n    def f(self):\n        return 1\n\n    def g(self):\n        pass\n";
        let t = "a.py\n<<<<<<< SEARCH\ndef f(self):\n    return 1\n=======\ndef f(self):\n    return 2\n>>>>>>> REPLACE\n";
        let f = files_after(&[("a.py", whole)], t).unwrap();
        assert_eq!(
            content(&f, "a.py"),
            "class A:\n    def f(self):\n        return 2\n\n    def g(self):\n        pass\n"
        );
        // Relative indentation inside REPLACE kept; tabs too.
        let f = files_after(
            &[("a.py", "\ta\n\tb\n")],
            "a.py\n<<<<<<< SEARCH\na\nb\n=======\nX\n  Y\n>>>>>>> REPLACE\n",
        )
        .unwrap();
        assert_eq!(content(&f, "a.py"), "\tX\n\t  Y\n");
        // Not the same offset on every line: refused (aider too).
        let e = files_after(
            &[("a.py", "  a\n    b\n")],
            "a.py\n<<<<<<< SEARCH\na\nb\n=======\nX\n>>>>>>> REPLACE\n",
        )
        .unwrap_err();
        assert!(e.contains("is not in a.py"), "{e}");
        // More indentation in SEARCH than in the file: refused (aider
        // writes a broken line).
        let e = files_after(
            &[("a.py", "abc\n")],
            "a.py\n<<<<<<< SEARCH\n  abc\n=======\nX\n>>>>>>> REPLACE\n",
        )
        .unwrap_err();
        assert!(e.contains("is not in a.py"), "{e}");
    }

    #[test]
    fn a_window_aider_would_take_first_is_refused() {
        // aider fits line 1 (`\t x` and `  x` after removing the same
        // length of whitespace); this rule fits line 3 only. Refused, not a
        // different edit.
        let e = files_after(
            &[("a.py", "\t x\ny\n    x\n")],
            "a.py\n<<<<<<< SEARCH\n  x\n=======\nz\n>>>>>>> REPLACE\n",
        )
        .unwrap_err();
        assert!(
            e.contains("occurs 2 times in a.py (with its indentation changed) (at lines 1 and 3)"),
            "{e}"
        );
    }

    #[test]
    fn aider_several_matches_are_refused_not_the_first_edited() {
        let e = files_after(
            &[("a.py", "    x\n    x\n")],
            "a.py\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n",
        )
        .unwrap_err();
        assert!(
            e.contains("occurs 2 times in a.py (with its indentation changed) (at lines 1 and 2)"),
            "{e}"
        );
    }

    #[test]
    fn aider_final_newline_after_a_replace() {
        let f = files_after(
            &[("a.py", "a\nb")],
            "a.py\n<<<<<<< SEARCH\nb\n=======\nc\n>>>>>>> REPLACE\n",
        )
        .unwrap();
        assert_eq!(content(&f, "a.py"), "a\nc\n");
        let f = files_after(
            &[("a.py", "a\nb")],
            "a.py\n<<<<<<< SEARCH\na\n=======\nA\n>>>>>>> REPLACE\n",
        )
        .unwrap();
        assert_eq!(content(&f, "a.py"), "A\nb\n");
    }

    #[test]
    fn aider_empty_search_creates_or_appends() {
        let f = files_after(
            &[],
            "new.txt\n<<<<<<< SEARCH\n=======\ncreating a new file\n>>>>>>> REPLACE\n",
        )
        .unwrap();
        assert_eq!(content(&f, "new.txt"), "creating a new file\n");
        let f = files_after(
            &[("a.txt", "abc\n")],
            "a.txt\n<<<<<<< SEARCH\n=======\ndef\n>>>>>>> REPLACE\n",
        )
        .unwrap();
        assert_eq!(content(&f, "a.txt"), "abc\ndef\n");
        let e = files_after(
            &[("a.txt", "abc")],
            "a.txt\n<<<<<<< SEARCH\n=======\ndef\n>>>>>>> REPLACE\n",
        )
        .unwrap_err();
        assert!(e.contains("no line end"), "{e}");
    }

    #[test]
    fn aider_marker_variants() {
        // Indented markers, 5 to 9 marker characters, `SEARCH>`.
        let t = "a.py\n  <<<<< SEARCH>\nx\n =========\ny\n>>>>>>>>> REPLACE  \n";
        let f = files_after(&[("a.py", "x\n")], t).unwrap();
        assert_eq!(content(&f, "a.py"), "y\n");
        // Ten are not a marker: no block (the other lines are text).
        let e = files_after(
            &[("a.py", "x\n")],
            "a.py\n<<<<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n",
        )
        .unwrap_err();
        assert!(e.contains("no \"<<<<<<< SEARCH\""), "{e}");
    }

    #[test]
    fn wide_whitespace_is_one_character_of_indentation() {
        // U+3000 is three bytes: outdenting by one character must not cut it.
        let e = files_after(
            &[("a.py", "x\n")],
            "a.py\n<<<<<<< SEARCH\n\u{3000}a\n=======\n b\n>>>>>>> REPLACE\n",
        )
        .unwrap_err();
        assert!(e.contains("is not in a.py"), "{e}");
        let f = files_after(
            &[("a.py", "\u{3000}\u{3000}a\n")],
            "a.py\n<<<<<<< SEARCH\n\u{3000}a\n=======\n\u{3000}b\n>>>>>>> REPLACE\n",
        )
        .unwrap();
        assert_eq!(content(&f, "a.py"), "\u{3000}\u{3000}b\n");
    }

    #[test]
    fn crlf_files_are_refused_as_aider_rewrites_them() {
        let e = files_after(
            &[("a.txt", "one\r\ntwo")],
            "a.txt\n<<<<<<< SEARCH\none\r\n=======\nONE\r\n>>>>>>> REPLACE\n",
        )
        .unwrap_err();
        assert!(
            e.contains("CRLF line ends, which aider rewrites as LF"),
            "{e}"
        );
    }

    #[test]
    fn aider_strips_the_quoted_wrapping_of_each_part() {
        // A trailing blank line of REPLACE is dropped, as aider drops it.
        let f = files_after(
            &[("a.py", "x\ny\n")],
            "a.py\n<<<<<<< SEARCH\nx\n=======\nX\n\n>>>>>>> REPLACE\n",
        )
        .unwrap();
        assert_eq!(content(&f, "a.py"), "X\ny\n");
        // A first line that ends with the file's name, and a fence around.
        let f = files_after(
            &[],
            "src/app.py\n<<<<<<< SEARCH\n=======\n# src/app.py\nimport os\n\n>>>>>>> REPLACE\n",
        )
        .unwrap();
        assert_eq!(content(&f, "src/app.py"), "import os\n");
        let f = files_after(
            &[("a.py", "x\n")],
            "a.py\n<<<<<<< SEARCH\n```\nx\n```\n=======\n```\nz\n```\n>>>>>>> REPLACE\n",
        )
        .unwrap();
        assert_eq!(content(&f, "a.py"), "z\n");
        let e = files_after(
            &[("a.py", "x\n")],
            "a.py\n<<<<<<< SEARCH\n# a.py\n=======\nz\n>>>>>>> REPLACE\n",
        )
        .unwrap_err();
        assert!(e.contains("holds only its file name"), "{e}");
    }

    #[test]
    fn aider_blank_lines_match_blank_lines_with_spaces() {
        let f = files_after(
            &[("a.py", "a\n  \nb\n")],
            "a.py\n<<<<<<< SEARCH\na\n\nb\n=======\nA\n\nB\n>>>>>>> REPLACE\n",
        )
        .unwrap();
        assert_eq!(content(&f, "a.py"), "A\n\nB\n");
    }

    #[test]
    fn aider_ignores_a_divider_in_prose() {
        let f = files_after(
            &[("a.py", "x\n")],
            "Notes\n=======\n\na.py\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n",
        )
        .unwrap();
        assert_eq!(content(&f, "a.py"), "y\n");
    }
}
