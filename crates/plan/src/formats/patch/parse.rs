//! Parse unified diffs into [`FilePatch`]es. Errors name the patch line.

use super::{FilePatch, Hunk, Line};
use crate::formats::EditError;
use crate::modes::{MODE_EXEC, MODE_FILE, MODE_GITLINK, MODE_LINK};
use crate::path;

/// Parse a whole patch. Text before the first file header (a commit message,
/// as `git format-patch` writes) and a `-- ` signature after the last hunk
/// are ignored; anything else that is not part of a file patch is an error,
/// so that garbage never silently drops a hunk.
pub fn parse(text: &str) -> Result<Vec<FilePatch>, EditError> {
    parse_str(text).map_err(EditError::Malformed)
}

fn parse_str(text: &str) -> Result<Vec<FilePatch>, String> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut files: Vec<FilePatch> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let bare = strip_eol(line);
        if line.starts_with("diff --git ") {
            let (fp, next) = parse_git_file(&lines, i)?;
            files.push(fp);
            i = next;
        } else if line.starts_with("--- ")
            && lines.get(i + 1).is_some_and(|l| l.starts_with("+++ "))
        {
            let (fp, next) = parse_plain_file(&lines, i)?;
            files.push(fp);
            i = next;
        } else if files.is_empty() {
            if is_hunk_header(line) {
                return Err(format!(
                    "line {}: a hunk before any file header (`--- a/path` / `+++ b/path`)",
                    i + 1
                ));
            }
            i += 1; // preamble
        } else if bare == "--" || bare.starts_with("-- ") && !bare.starts_with("--- ") {
            break; // format-patch signature: the rest is not patch text
        } else if bare.trim().is_empty() {
            i += 1;
        } else if is_hunk_header(line) {
            return Err(format!(
                "line {}: a hunk header outside a file patch",
                i + 1
            ));
        } else {
            return Err(format!(
                "line {}: unexpected text after the hunks of {}: {:?} (a hunk whose header counts fewer lines than follow, or garbage between hunks)",
                i + 1,
                files.last().map(|f| f.display_path()).unwrap_or("?"),
                truncate(bare)
            ));
        }
    }
    if files.is_empty() {
        return Err(
            "the patch holds no file changes (no `diff --git` or `---`/`+++` header)".into(),
        );
    }
    for fp in &mut files {
        for p in [&mut fp.old_path, &mut fp.new_path].into_iter().flatten() {
            *p = path::normalise(p).to_string();
            path::validate(p).map_err(|m| format!("line {}: {m}", fp.line))?;
        }
    }
    Ok(files)
}

fn strip_eol(line: &str) -> &str {
    line.strip_suffix('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .unwrap_or(line)
}

fn truncate(s: &str) -> String {
    if s.chars().count() > 60 {
        s.chars().take(60).collect::<String>() + "…"
    } else {
        s.to_string()
    }
}

fn parse_mode(s: &str, lineno: usize) -> Result<u32, String> {
    let m = u32::from_str_radix(s.trim(), 8)
        .map_err(|_| format!("line {lineno}: bad file mode {s:?}"))?;
    match m {
        MODE_FILE | MODE_EXEC | MODE_LINK => Ok(m),
        MODE_GITLINK => Err(format!(
            "line {lineno}: submodule changes (mode 160000) are not supported"
        )),
        _ => Err(format!("line {lineno}: unsupported file mode {s:?}")),
    }
}

/// Unquote a C-style quoted path as git writes it (`"a/t\tb"`), or return
/// the name up to a tab (plain diffs put a timestamp after it).
fn parse_name(raw: &str, lineno: usize) -> Result<String, String> {
    let raw = raw.trim_end_matches(['\n', '\r']);
    if let Some(rest) = raw.strip_prefix('"') {
        let (name, _) =
            unquote(rest).ok_or_else(|| format!("line {lineno}: bad quoted path {raw:?}"))?;
        Ok(name)
    } else {
        let name = raw.split('\t').next().unwrap_or("");
        Ok(name.trim_end().to_string())
    }
}

/// Unquote the rest of a C-quoted string (after the opening quote); returns
/// the string and what follows the closing quote.
fn unquote(s: &str) -> Option<(String, &str)> {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => return Some((String::from_utf8(out).ok()?, &s[i + 1..])),
            b'\\' => {
                i += 1;
                let c = *bytes.get(i)?;
                match c {
                    b'n' => out.push(b'\n'),
                    b't' => out.push(b'\t'),
                    b'r' => out.push(b'\r'),
                    b'a' => out.push(7),
                    b'b' => out.push(8),
                    b'f' => out.push(12),
                    b'v' => out.push(11),
                    b'\\' | b'"' => out.push(c),
                    b'0'..=b'3' => {
                        let oct = s.get(i..i + 3)?;
                        out.push(u8::from_str_radix(oct, 8).ok()?);
                        i += 2;
                    }
                    _ => return None,
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    None
}

/// Drop git's `a/` or `b/` prefix.
fn strip_prefix(name: &str, prefix: &str) -> String {
    name.strip_prefix(prefix).unwrap_or(name).to_string()
}

/// The names on a `diff --git` line with the prefixes it uses, when they
/// can be told apart: `a/` and `b/`, `diff.mnemonicPrefix`'s `i/`, `w/`,
/// `c/`, `o/`, any `--src-prefix`/`--dst-prefix` pair (the first path
/// component of each side, when the rest is the same), or none
/// (`--no-prefix`: both names equal). As `git apply`, which strips one
/// component of each name.
struct HeaderNames {
    a: String,
    b: String,
    prefixes: (String, String),
}

/// Split two prefixed names into names and prefixes, if they are one file's.
fn split_prefixes(a: &str, b: &str) -> Option<HeaderNames> {
    if let (Some(ra), Some(rb)) = (a.strip_prefix("a/"), b.strip_prefix("b/")) {
        if ra == rb {
            return Some(HeaderNames {
                a: ra.into(),
                b: rb.into(),
                prefixes: ("a/".into(), "b/".into()),
            });
        }
    }
    if a == b {
        return Some(HeaderNames {
            a: a.into(),
            b: b.into(),
            prefixes: (String::new(), String::new()),
        });
    }
    let (pa, ra) = a.split_once('/')?;
    let (pb, rb) = b.split_once('/')?;
    (ra == rb && !ra.is_empty() && !pa.is_empty() && !pb.is_empty()).then(|| HeaderNames {
        a: ra.into(),
        b: rb.into(),
        prefixes: (format!("{pa}/"), format!("{pb}/")),
    })
}

/// The two names on a `diff --git a/X b/Y` line, when they can be told apart.
fn git_header_names(rest: &str, lineno: usize) -> Result<Option<HeaderNames>, String> {
    let rest = strip_eol(rest);
    // A rename's names differ: only the a/ b/ prefixes are recognised there.
    let renamed = |a: &str, b: &str| HeaderNames {
        a: strip_prefix(a, "a/"),
        b: strip_prefix(b, "b/"),
        prefixes: ("a/".into(), "b/".into()),
    };
    if let Some(q) = rest.strip_prefix('"') {
        let (a, after) = unquote(q).ok_or_else(|| format!("line {lineno}: bad quoted path"))?;
        let b = parse_name(after.trim_start(), lineno)?;
        return Ok(Some(
            split_prefixes(&a, &b).unwrap_or_else(|| renamed(&a, &b)),
        ));
    }
    if rest.ends_with('"') {
        if let Some(pos) = rest.find(" \"") {
            let a = &rest[..pos];
            let b = parse_name(&rest[pos + 1..], lineno)?;
            return Ok(Some(
                split_prefixes(a, &b).unwrap_or_else(|| renamed(a, &b)),
            ));
        }
    }
    // Unquoted: "a/X b/X". With spaces in names this is ambiguous unless both
    // halves name one file, which is the case for every non-rename header.
    let mut found = None;
    for (pos, _) in rest.match_indices(' ') {
        if let Some(h) = split_prefixes(&rest[..pos], &rest[pos + 1..]) {
            found = Some(h);
            break;
        }
    }
    if found.is_none() {
        for (pos, _) in rest.match_indices(" b/") {
            let (a, b) = (&rest[..pos], &rest[pos + 1..]);
            if a.starts_with("a/") {
                found = Some(renamed(a, b));
                break;
            }
        }
    }
    Ok(found)
}

fn parse_git_file(lines: &[&str], start: usize) -> Result<(FilePatch, usize), String> {
    let lineno = start + 1;
    let header_names = git_header_names(&lines[start]["diff --git ".len()..], lineno)?;
    let mut fp = FilePatch {
        old_path: None,
        new_path: None,
        old_mode: None,
        new_mode: None,
        is_copy: false,
        hunks: Vec::new(),
        line: lineno,
    };
    let (mut created, mut deleted) = (false, false);
    let (mut rename_from, mut rename_to) = (None, None);
    let mut minus: Option<Option<String>> = None;
    let mut plus: Option<Option<String>> = None;
    let mut i = start + 1;
    while i < lines.len() {
        let l = strip_eol(lines[i]);
        let n = i + 1;
        if let Some(m) = l.strip_prefix("old mode ") {
            fp.old_mode = Some(parse_mode(m, n)?);
        } else if let Some(m) = l.strip_prefix("new mode ") {
            fp.new_mode = Some(parse_mode(m, n)?);
        } else if let Some(m) = l.strip_prefix("deleted file mode ") {
            fp.old_mode = Some(parse_mode(m, n)?);
            deleted = true;
        } else if let Some(m) = l.strip_prefix("new file mode ") {
            fp.new_mode = Some(parse_mode(m, n)?);
            created = true;
        } else if let Some(p) = l.strip_prefix("rename from ") {
            rename_from = Some(parse_name(p, n)?);
        } else if let Some(p) = l.strip_prefix("rename to ") {
            rename_to = Some(parse_name(p, n)?);
        } else if let Some(p) = l.strip_prefix("copy from ") {
            rename_from = Some(parse_name(p, n)?);
            fp.is_copy = true;
        } else if let Some(p) = l.strip_prefix("copy to ") {
            rename_to = Some(parse_name(p, n)?);
            fp.is_copy = true;
        } else if l.starts_with("similarity index ") || l.starts_with("dissimilarity index ") {
        } else if let Some(rest) = l.strip_prefix("index ") {
            // "index abc..def 100644": the mode of an unchanged-mode file.
            if let Some((_, mode)) = rest.split_once(' ') {
                let m = parse_mode(mode, n)?;
                fp.old_mode.get_or_insert(m);
                fp.new_mode.get_or_insert(m);
            }
        } else if l.starts_with("Binary files ") || l == "GIT binary patch" {
            return Err(format!(
                "line {n}: binary patches are not supported; write the file with a `files` step instead"
            ));
        } else if let Some(name) = l.strip_prefix("--- ") {
            if !lines.get(i + 1).is_some_and(|x| x.starts_with("+++ ")) {
                return Err(format!(
                    "line {n}: `---` header without a following `+++` header"
                ));
            }
            let (pa, pb) = header_names
                .as_ref()
                .map(|h| (h.prefixes.0.as_str(), h.prefixes.1.as_str()))
                .unwrap_or(("a/", "b/"));
            minus = Some(dev_null_or(parse_name(name, n)?, pa, "a/"));
            let p = strip_eol(lines[i + 1]);
            plus = Some(dev_null_or(parse_name(&p[4..], n + 1)?, pb, "b/"));
            i += 2;
            break;
        } else {
            break;
        }
        i += 1;
    }
    // Names: rename and copy headers carry no prefix, so they come first
    // (with --no-prefix, `diff --git src/x.rs lib/x.rs` would otherwise read
    // as the prefixes `src/` and `lib/` of one file `x.rs`); then ---/+++,
    // then the diff --git line.
    let (a, b) = match (&rename_from, &rename_to, &minus, &plus) {
        (Some(f), Some(t), _, _) => (Some(f.clone()), Some(t.clone())),
        (_, _, Some(m), Some(p)) => (m.clone(), p.clone()),
        _ => {
            if let Some(h) = &header_names {
                (
                    (!created).then(|| h.a.clone()),
                    (!deleted).then(|| h.b.clone()),
                )
            } else {
                return Err(format!(
                    "line {lineno}: cannot tell the file names apart in this `diff --git` header"
                ));
            }
        }
    };
    fp.old_path = if created {
        None
    } else {
        a.or(rename_from.clone())
    };
    fp.new_path = if deleted {
        None
    } else {
        b.or(rename_to.clone())
    };
    if fp.old_path.is_none() && fp.new_path.is_none() {
        return Err(format!(
            "line {lineno}: a file patch with neither an old nor a new path"
        ));
    }
    if created {
        fp.old_mode = None;
    }
    if deleted {
        fp.new_mode = None;
    }
    let next = parse_hunks(lines, i, &mut fp)?;
    Ok((fp, next))
}

/// None for `/dev/null`; else the name without the header's `prefix` (or,
/// failing that, git's default one).
fn dev_null_or(name: String, prefix: &str, default: &str) -> Option<String> {
    if name == "/dev/null" {
        None
    } else if !prefix.is_empty() && name.starts_with(prefix) {
        Some(strip_prefix(&name, prefix))
    } else {
        Some(strip_prefix(&name, default))
    }
}

fn parse_plain_file(lines: &[&str], start: usize) -> Result<(FilePatch, usize), String> {
    let n = start + 1;
    let minus = parse_name(&lines[start][4..], n)?;
    let plus = parse_name(&lines[start + 1][4..], n + 1)?;
    // The prefixes, when both names are one file's (`i/x` and `w/x`).
    let (pa, pb) = match split_prefixes(&minus, &plus) {
        Some(h) => h.prefixes,
        None => ("a/".into(), "b/".into()),
    };
    let mut fp = FilePatch {
        old_path: dev_null_or(minus, &pa, "a/"),
        new_path: dev_null_or(plus, &pb, "b/"),
        old_mode: None,
        new_mode: None,
        is_copy: false,
        hunks: Vec::new(),
        line: n,
    };
    if fp.old_path.is_none() && fp.new_path.is_none() {
        return Err(format!(
            "line {n}: both sides of the file patch are /dev/null"
        ));
    }
    let next = parse_hunks(lines, start + 2, &mut fp)?;
    if fp.hunks.is_empty() {
        return Err(format!(
            "line {n}: file patch for {} has no hunks",
            fp.display_path()
        ));
    }
    Ok((fp, next))
}

/// `@@ -a[,b] +c[,d] @@`.
fn parse_hunk_header(l: &str, n: usize) -> Result<(usize, usize, usize, usize), String> {
    let bad = || format!("line {n}: malformed hunk header {:?}", truncate(l));
    let rest = l.strip_prefix("@@ -").ok_or_else(bad)?;
    let end = rest.find(" @@").ok_or_else(bad)?;
    let (old, new) = rest[..end].split_once(" +").ok_or_else(bad)?;
    let range = |s: &str| -> Result<(usize, usize), String> {
        match s.split_once(',') {
            Some((a, b)) => Ok((a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?)),
            None => Ok((s.parse().map_err(|_| bad())?, 1)),
        }
    };
    let (a, b) = range(old)?;
    let (c, d) = range(new)?;
    Ok((a, b, c, d))
}

/// `@@`, alone or followed by a space: a hunk header, numbered or not.
fn is_hunk_header(line: &str) -> bool {
    let l = strip_eol(line);
    l == "@@" || l.starts_with("@@ ")
}

/// Where an unnumbered hunk's body ends: at the next hunk or file header.
fn ends_unnumbered(lines: &[&str], i: usize) -> bool {
    let l = lines[i];
    is_hunk_header(l)
        || l.starts_with("diff --git ")
        || (l.starts_with("--- ") && lines.get(i + 1).is_some_and(|n| n.starts_with("+++ ")))
}

/// A hunk without line numbers (`@@`, `@@ @@`, `@@ ... @@`): its body runs
/// to the next header; it is placed by its context alone.
fn parse_unnumbered(lines: &[&str], mut i: usize, fp: &FilePatch) -> Result<(Hunk, usize), String> {
    let n = i + 1;
    let mut hunk = Hunk {
        old_start: 0,
        old_len: 0,
        new_start: 0,
        new_len: 0,
        lines: Vec::new(),
        line: n,
        numbered: false,
    };
    i += 1;
    let mut blank_run = 0;
    while i < lines.len() && !ends_unnumbered(lines, i) {
        let text = lines[i].as_bytes();
        match text.first() {
            Some(b' ') => hunk.lines.push(Line::Context(text[1..].to_vec())),
            Some(b'-') => hunk.lines.push(Line::Remove(text[1..].to_vec())),
            Some(b'+') => hunk.lines.push(Line::Add(text[1..].to_vec())),
            Some(b'\n') => hunk.lines.push(Line::Context(text.to_vec())),
            Some(b'\r') if text.get(1) == Some(&b'\n') => {
                hunk.lines.push(Line::Context(text[1..].to_vec()))
            }
            Some(b'\\') => no_newline(&mut hunk, i + 1)?,
            _ => break,
        }
        blank_run = if matches!(text.first(), Some(b'\n' | b'\r')) {
            blank_run + 1
        } else {
            0
        };
        i += 1;
    }
    // Blank lines that end the patch text are not context.
    if i == lines.len() {
        hunk.lines.truncate(hunk.lines.len() - blank_run);
    }
    hunk.old_len = hunk.preimage().len();
    hunk.new_len = hunk.postimage().len();
    if hunk.lines.is_empty() {
        return Err(format!(
            "line {n}: the hunk @@ ... @@ of {} is empty",
            fp.display_path()
        ));
    }
    Ok((hunk, i))
}

fn parse_hunks(lines: &[&str], mut i: usize, fp: &mut FilePatch) -> Result<usize, String> {
    while i < lines.len() && is_hunk_header(lines[i]) {
        let n = i + 1;
        let header = strip_eol(lines[i]);
        if !header.starts_with("@@ -") {
            let (hunk, next) = parse_unnumbered(lines, i, fp)?;
            fp.hunks.push(hunk);
            i = next;
            continue;
        }
        let (old_start, old_len, new_start, new_len) = parse_hunk_header(header, n)?;
        let mut hunk = Hunk {
            old_start,
            old_len,
            new_start,
            new_len,
            lines: Vec::new(),
            line: n,
            numbered: true,
        };
        let (mut seen_old, mut seen_new) = (0, 0);
        i += 1;
        while seen_old < old_len || seen_new < new_len {
            let Some(raw) = lines.get(i) else {
                return Err(format!(
                    "line {n}: hunk {} of {} is truncated: its header counts {old_len} old and {new_len} new lines, the patch ends after {seen_old} and {seen_new}",
                    hunk.header(),
                    fp.display_path()
                ));
            };
            let text = raw.as_bytes();
            let (kind, body) = match text.first() {
                Some(b' ') => (b' ', &text[1..]),
                Some(b'-') => (b'-', &text[1..]),
                Some(b'+') => (b'+', &text[1..]),
                // An empty line inside a hunk is an empty context line (some
                // tools strip the trailing space).
                Some(b'\n') => (b' ', text),
                Some(b'\r') if text.get(1) == Some(&b'\n') => (b' ', &text[1..]),
                Some(b'\\') => {
                    no_newline(&mut hunk, i + 1)?;
                    i += 1;
                    continue;
                }
                _ => {
                    return Err(format!(
                        "line {}: hunk {} of {} is truncated: its header counts {old_len} old and {new_len} new lines, found {seen_old} and {seen_new} before {:?}",
                        i + 1,
                        hunk.header(),
                        fp.display_path(),
                        truncate(strip_eol(raw))
                    ))
                }
            };
            let body = body.to_vec();
            match kind {
                b' ' => {
                    seen_old += 1;
                    seen_new += 1;
                    hunk.lines.push(Line::Context(body));
                }
                b'-' => {
                    seen_old += 1;
                    hunk.lines.push(Line::Remove(body));
                }
                _ => {
                    seen_new += 1;
                    hunk.lines.push(Line::Add(body));
                }
            }
            if seen_old > old_len || seen_new > new_len {
                return Err(format!(
                    "line {}: hunk {} of {} has more lines than its header counts",
                    i + 1,
                    hunk.header(),
                    fp.display_path()
                ));
            }
            i += 1;
        }
        // A trailing "\ No newline at end of file" belongs to the last line.
        if lines.get(i).is_some_and(|l| l.starts_with('\\')) {
            no_newline(&mut hunk, i + 1)?;
            i += 1;
        }
        fp.hunks.push(hunk);
    }
    Ok(i)
}

fn no_newline(hunk: &mut Hunk, n: usize) -> Result<(), String> {
    let Some(last) = hunk.lines.last_mut() else {
        return Err(format!(
            "line {n}: `\\ No newline at end of file` with no line before it"
        ));
    };
    let t = last.text_mut();
    if t.last() == Some(&b'\n') {
        t.pop();
        Ok(())
    } else {
        Err(format!(
            "line {n}: a second `\\ No newline at end of file` for the same line"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_style_headers() {
        let p = "diff --git a/old.txt b/new.txt\nsimilarity index 90%\nrename from old.txt\nrename to new.txt\n--- a/old.txt\n+++ b/new.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+c\ndiff --git a/x.sh b/x.sh\nold mode 100644\nnew mode 100755\ndiff --git a/gone b/gone\ndeleted file mode 100644\nindex 123..000\n--- a/gone\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n\\ No newline at end of file\ndiff --git a/e b/e\nnew file mode 100644\nindex 000..e69\n";
        let files = parse(p).unwrap();
        assert_eq!(files.len(), 4);
        assert_eq!(files[0].old_path.as_deref(), Some("old.txt"));
        assert_eq!(files[0].new_path.as_deref(), Some("new.txt"));
        assert_eq!(files[1].old_mode, Some(0o100644));
        assert_eq!(files[1].new_mode, Some(0o100755));
        assert_eq!(files[1].new_path.as_deref(), Some("x.sh"));
        assert_eq!(files[2].new_path, None);
        assert_eq!(files[2].hunks[0].lines, vec![Line::Remove(b"bye".to_vec())]);
        assert_eq!(files[3].old_path, None);
        assert_eq!(files[3].new_path.as_deref(), Some("e"));
        assert!(files[3].hunks.is_empty());
    }

    #[test]
    fn quoted_names_and_plain_diffs() {
        let p = "--- \"a/caf\\303\\251 x\"\t2024-01-01\n+++ \"b/caf\\303\\251 x\"\n@@ -1 +1 @@\n-x\n+y\n";
        let f = parse(p).unwrap();
        assert_eq!(f[0].new_path.as_deref(), Some("café x"));
        // A control character in a path is refused, even when quoted.
        let p = "--- \"a/t\\tab\"\n+++ \"b/t\\tab\"\n@@ -1 +1 @@\n-x\n+y\n";
        assert!(parse(p)
            .unwrap_err()
            .to_string()
            .contains("control character"));
        let p =
            "--- file.txt\t2024-01-01 10:00\n+++ file.txt\t2024-01-01 10:01\n@@ -1 +1 @@\n-x\n+y\n";
        assert_eq!(parse(p).unwrap()[0].old_path.as_deref(), Some("file.txt"));
    }

    #[test]
    fn errors() {
        for (p, what) in [
            ("", "no file changes"),
            ("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n", "truncated"),
            (
                "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n+c\n",
                "unexpected text",
            ),
            (
                "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\ngarbage\n@@ -5 +5 @@\n-a\n+b\n",
                "garbage",
            ),
            ("--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n", "`..`"),
            (
                "diff --git a/b b/b\nindex 1..2 100644\nGIT binary patch\nliteral 0\n",
                "binary",
            ),
            (
                "--- a/x\n+++ b/x\n@@ -1 +1 @\n-a\n+b\n",
                "malformed hunk header",
            ),
        ] {
            let e = parse(p).unwrap_err();
            assert!(matches!(e, EditError::Malformed(_)), "{p:?}: {e:?}");
            assert!(e.to_string().contains(what), "{p:?}: {e}");
        }
    }

    #[test]
    fn preamble_and_signature_are_ignored() {
        let p = "From abc Mon Sep 17 00:00:00 2001\nSubject: x\n\n---\n x | 2 +-\n\ndiff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n-- \n2.47.3\n\n";
        let f = parse(p).unwrap();
        assert_eq!(f.len(), 1);
    }

    #[test]
    fn crlf_lines_keep_their_cr() {
        let p = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\r\n+b\r\n";
        let f = parse(p).unwrap();
        assert_eq!(f[0].hunks[0].lines[1], Line::Add(b"b\r\n".to_vec()));
    }
}
