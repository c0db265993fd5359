//! `edits`: the text-editor operations models produce through tool calls.
//!
//! `{"path","old_str","new_str"}` replaces the one occurrence of `old_str`
//! (an error when it occurs zero or several times); `{"path","create"}`
//! creates a file with that text (it must not exist); `{"path",
//! "insert_line", "text"}` inserts `text` after line N (0: at the top);
//! `{"path", "delete": true}` deletes the file. Operations apply in order,
//! each to the result of the previous ones.

use serde_json::Value;

use super::{
    byte_matches, checked_path, create, existing_text, line_of, list_lines, quote, EditError, Files,
};

/// One operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Replace {
        path: String,
        old: String,
        new: String,
    },
    Create {
        path: String,
        text: String,
    },
    Insert {
        path: String,
        after_line: usize,
        text: String,
    },
    Delete {
        path: String,
    },
}

/// Parse the `edits` array; errors name the operation (`edits[i]`).
pub fn parse(ops: &[Value]) -> Result<Vec<Op>, EditError> {
    parse_str(ops).map_err(EditError::Malformed)
}

fn parse_str(ops: &[Value]) -> Result<Vec<Op>, String> {
    ops.iter()
        .enumerate()
        .map(|(i, v)| parse_op(v).map_err(|m| format!("edits[{i}]: {m}")))
        .collect()
}

fn parse_op(v: &Value) -> Result<Op, String> {
    let Value::Object(o) = v else {
        return Err("an operation must be an object".into());
    };
    let path = match o.get("path") {
        Some(Value::String(p)) => checked_path(p, "path")?,
        Some(_) => return Err("`path` must be a string".into()),
        None => return Err("no `path`".into()),
    };
    let mut keys: Vec<&str> = o
        .keys()
        .map(String::as_str)
        .filter(|k| *k != "path")
        .collect();
    keys.sort_unstable();
    let string = |k: &str| match o.get(k) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(format!("`{k}` must be a string")),
        None => Err(format!("no `{k}`")),
    };
    match keys.as_slice() {
        ["new_str", "old_str"] => {
            let old = string("old_str")?;
            if old.is_empty() {
                return Err(format!(
                    "`old_str` is empty; to add text to {path} use `insert_line`, to make a file use `create`"
                ));
            }
            Ok(Op::Replace {
                path,
                old,
                new: string("new_str")?,
            })
        }
        ["create"] => Ok(Op::Create {
            text: string("create")?,
            path,
        }),
        ["insert_line", "text"] => {
            let after_line = o
                .get("insert_line")
                .and_then(Value::as_u64)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or("`insert_line` must be a line number (0: at the top)")?;
            Ok(Op::Insert {
                after_line,
                text: string("text")?,
                path,
            })
        }
        ["delete"] => match o.get("delete") {
            Some(Value::Bool(true)) => Ok(Op::Delete { path }),
            _ => Err("`delete` must be true".into()),
        },
        other => Err(format!(
            "unknown operation with fields {other:?} besides `path`; use {{old_str, new_str}}, {{create}}, {{insert_line, text}} or {{delete: true}}"
        )),
    }
}

/// Apply the operations in order.
pub fn apply(files: &mut dyn Files, ops: &[Op]) -> Result<(), EditError> {
    apply_str(files, ops).map_err(EditError::DoesNotApply)
}

fn apply_str(files: &mut dyn Files, ops: &[Op]) -> Result<(), String> {
    for (i, op) in ops.iter().enumerate() {
        let what = format!("edits[{i}]");
        match op {
            Op::Replace { path, old, new } => {
                let (content, mode) = existing_text(files, path, &what)?;
                let at = byte_matches(&content, old.as_bytes());
                match at.as_slice() {
                    [] => {
                        return Err(format!(
                            "{what}: old_str {} is not in {path}{}",
                            quote(old.as_bytes()),
                            super::closest_match(
                                &super::lines(&content),
                                &super::lines(old.as_bytes())
                            )
                            .map(|m| format!(" (closest match: {path} {m})"))
                            .unwrap_or_default()
                        ))
                    }
                    [p] => {
                        let mut out = content[..*p].to_vec();
                        out.extend_from_slice(new.as_bytes());
                        out.extend_from_slice(&content[p + old.len()..]);
                        files.put(path, out, mode)?;
                    }
                    many => {
                        let ls: Vec<usize> = many.iter().map(|p| line_of(&content, *p)).collect();
                        return Err(format!(
                            "{what}: old_str {} occurs {} times in {path} (at {}); it must occur exactly once — add surrounding text to make it unique",
                            quote(old.as_bytes()),
                            many.len(),
                            list_lines(&ls)
                        ));
                    }
                }
            }
            Op::Create { path, text } => create(files, path, text.as_bytes().to_vec(), &what)?,
            Op::Insert {
                path,
                after_line,
                text,
            } => {
                let (content, mode) = existing_text(files, path, &what)?;
                let ls = super::lines(&content);
                if *after_line > ls.len() {
                    return Err(format!(
                        "{what}: cannot insert after line {after_line} of {path}: it has {} line(s)",
                        ls.len()
                    ));
                }
                let mut out: Vec<u8> = ls[..*after_line].concat();
                if !out.is_empty() && out.last() != Some(&b'\n') {
                    out.push(b'\n');
                }
                out.extend_from_slice(text.as_bytes());
                let rest = ls[*after_line..].concat();
                if !rest.is_empty() && out.last() != Some(&b'\n') {
                    out.push(b'\n');
                }
                out.extend_from_slice(&rest);
                files.put(path, out, mode)?;
            }
            Op::Delete { path } => {
                existing_text(files, path, &what)?;
                files.remove(path)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::MemFiles;
    use super::*;
    use serde_json::json;

    fn run(start: &[(&str, &str)], ops: Value) -> Result<MemFiles, String> {
        let mut f = MemFiles::default();
        for (p, c) in start {
            f.put(p, c.as_bytes().to_vec(), super::super::MODE_FILE)
                .unwrap();
        }
        let ops = parse(ops.as_array().unwrap()).map_err(|e| {
            assert!(matches!(e, EditError::Malformed(_)), "{e:?}");
            e.to_string()
        })?;
        apply(&mut f, &ops).map_err(|e| {
            assert!(matches!(e, EditError::DoesNotApply(_)), "{e:?}");
            e.to_string()
        })?;
        Ok(f)
    }

    fn text(f: &MemFiles, p: &str) -> String {
        String::from_utf8(f.0[p].0.clone()).unwrap()
    }

    #[test]
    fn each_operation() {
        let f = run(
            &[("a", "one\ntwo\nthree\n")],
            json!([
                {"path": "a", "old_str": "two", "new_str": "2"},
                {"path": "a", "insert_line": 0, "text": "zero\n"},
                {"path": "a", "insert_line": 4, "text": "four"},
                {"path": "b", "create": "new\n"},
            ]),
        )
        .unwrap();
        assert_eq!(text(&f, "a"), "zero\none\n2\nthree\nfour");
        assert_eq!(text(&f, "b"), "new\n");
        let f = run(&[("a", "x")], json!([{"path": "a", "delete": true}])).unwrap();
        assert!(f.0.is_empty());
        // Inserting after a last line without a newline starts a new line.
        let f = run(
            &[("a", "x")],
            json!([{"path": "a", "insert_line": 1, "text": "y\n"}]),
        )
        .unwrap();
        assert_eq!(text(&f, "a"), "x\ny\n");
    }

    #[test]
    fn every_failure_names_the_operation_the_file_and_the_text() {
        let cases = [
            (
                json!([{"path": "a", "old_str": "nope", "new_str": "x"}]),
                "edits[0]: old_str \"nope\" is not in a",
            ),
            (
                json!([{"path": "a", "old_str": "o", "new_str": "x"}]),
                "occurs 2 times in a (at lines 1 and 2)",
            ),
            (
                json!([{"path": "zz", "old_str": "o", "new_str": "x"}]),
                "edits[0]: zz does not exist",
            ),
            (
                json!([{"path": "a", "create": "x"}]),
                "edits[0]: a already exists",
            ),
            (
                json!([{"path": "a", "insert_line": 9, "text": "x"}]),
                "it has 2 line(s)",
            ),
            (json!([{"path": "zz", "delete": true}]), "zz does not exist"),
            (
                json!([{"path": "a", "delete": false}]),
                "`delete` must be true",
            ),
            (
                json!([{"path": "a", "old_str": "", "new_str": "x"}]),
                "`old_str` is empty",
            ),
            (
                json!([{"path": "a", "old_str": "one"}]),
                "unknown operation",
            ),
            (json!([{"path": "a", "view": true}]), "unknown operation"),
            (json!([{"old_str": "a", "new_str": "b"}]), "no `path`"),
            (json!([{"path": "../x", "create": "x"}]), "path:"),
            (
                json!([{"path": "a", "insert_line": -1, "text": "x"}]),
                "must be a line number",
            ),
            (json!(["a"]), "must be an object"),
            (
                json!([{"path": "a", "old_str": 1, "new_str": "x"}]),
                "`old_str` must be a string",
            ),
        ];
        for (ops, want) in cases {
            let e = run(&[("a", "one\ntwo\n")], ops.clone()).unwrap_err();
            assert!(e.contains(want), "{ops}: {e}");
        }
        // A later operation fails: the message names it.
        let e = run(
            &[("a", "one\n")],
            json!([{"path": "a", "old_str": "one", "new_str": "1"}, {"path": "a", "old_str": "one", "new_str": "x"}]),
        )
        .unwrap_err();
        assert!(
            e.starts_with("edits[1]: old_str \"one\" is not in a"),
            "{e}"
        );
    }
}
