//! `search_replace`: SEARCH/REPLACE blocks, as aider and others emit them.
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
//! A path line names the file for the blocks that follow it (a fence line
//! around a block is optional). The SEARCH lines must occur exactly once in
//! the file, as whole lines; they are replaced by the REPLACE lines. An empty
//! SEARCH creates the file, which must not exist. Blocks apply in order.

use super::{
    checked_path, create, existing_text, line_matches, list_lines, quote, splice_lines, EditError,
    Files,
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

fn marker(line: &str) -> &str {
    line.trim_end_matches(['\n', '\r']).trim_end()
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
    let mut blocks = Vec::new();
    let mut path: Option<String> = None;
    let mut state = State::Outside;
    for (i, raw) in text.split_inclusive('\n').enumerate() {
        let n = i + 1;
        let m = marker(raw);
        state = match state {
            State::Outside => {
                if m.is_empty() || m.starts_with("```") {
                    State::Outside
                } else if m == SEARCH {
                    let Some(p) = path.clone() else {
                        return Err(format!(
                            "line {n}: a SEARCH block with no path line before it"
                        ));
                    };
                    State::Search(Block {
                        path: p,
                        search: Vec::new(),
                        replace: Vec::new(),
                        line: n,
                    })
                } else if m == DIVIDER || m == REPLACE {
                    return Err(format!("line {n}: {m:?} outside a SEARCH block"));
                } else {
                    let p = m.trim().trim_matches('`').trim();
                    path = Some(checked_path(p, &format!("line {n}: path"))?);
                    State::Outside
                }
            }
            State::Search(mut b) => {
                if m == DIVIDER {
                    State::Replace(b)
                } else if m == SEARCH || m == REPLACE {
                    return Err(format!(
                        "line {n}: {m:?} inside the SEARCH part of the block at line {} (expected {DIVIDER:?})",
                        b.line
                    ));
                } else {
                    b.search.push(raw.to_string());
                    State::Search(b)
                }
            }
            State::Replace(mut b) => {
                if m == REPLACE {
                    blocks.push(b);
                    State::Outside
                } else if m == SEARCH || m == DIVIDER {
                    return Err(format!(
                        "line {n}: {m:?} inside the REPLACE part of the block at line {} (expected {REPLACE:?})",
                        b.line
                    ));
                } else {
                    b.replace.push(raw.to_string());
                    State::Replace(b)
                }
            }
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

/// Apply the blocks in order.
pub fn apply(files: &mut dyn Files, blocks: &[Block]) -> Result<(), EditError> {
    apply_str(files, blocks).map_err(EditError::DoesNotApply)
}

fn apply_str(files: &mut dyn Files, blocks: &[Block]) -> Result<(), String> {
    for b in blocks {
        let what = format!("search_replace block at line {}", b.line);
        let replace: Vec<&[u8]> = b.replace.iter().map(|l| l.as_bytes()).collect();
        if b.search.is_empty() {
            create(files, &b.path, replace.concat(), &what)?;
            continue;
        }
        let (content, mode) = existing_text(files, &b.path, &what)?;
        let hay = super::lines(&content);
        let needle: Vec<&[u8]> = b.search.iter().map(|l| l.as_bytes()).collect();
        let at = line_matches(&hay, &needle, 0);
        match at.as_slice() {
            [] => {
                return Err(format!(
                    "{what}: the SEARCH text {} is not in {} (it must match whole lines exactly){}",
                    quote(&needle.concat()),
                    b.path,
                    super::closest_match(&hay, &needle)
                        .map(|m| format!("; closest match: {} {m}", b.path))
                        .unwrap_or_default()
                ))
            }
            [p] => files.put(
                &b.path,
                splice_lines(&hay, *p, needle.len(), &replace),
                mode,
            )?,
            many => {
                let ls: Vec<usize> = many.iter().map(|p| p + 1).collect();
                return Err(format!(
                    "{what}: the SEARCH text {} occurs {} times in {} (at {}); it must occur exactly once",
                    quote(&needle.concat()),
                    many.len(),
                    b.path,
                    list_lines(&ls)
                ));
            }
        }
    }
    Ok(())
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
                "occurs 2 times in a.py (at lines 1 and 3)",
            ),
            (
                "b.py\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n",
                "b.py does not exist",
            ),
            (
                "a.py\n<<<<<<< SEARCH\n=======\ny\n>>>>>>> REPLACE\n",
                "a.py already exists",
            ),
            (
                "<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n",
                "no path line",
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
            ("a.py\n=======\n", "outside a SEARCH block"),
            ("just prose\n", "no \"<<<<<<< SEARCH\""),
            (
                "../etc/passwd\n<<<<<<< SEARCH\n=======\nx\n>>>>>>> REPLACE\n",
                "line 1: path",
            ),
        ];
        for (text, want) in cases {
            let e = run("x\ny\nx\n", text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}
