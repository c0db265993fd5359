//! Where an `apply_patch` chunk lands: Codex's `seek_sequence`, ported.
//!
//! Owns the matching passes (exact, then ignoring trailing whitespace, then
//! ignoring surrounding whitespace, then Codex's punctuation-normalised
//! form), the end-of-file anchor, and an update's rewrite of a file.
//! Invariant: a chunk lands where Codex's own tool lands it, or the step
//! is refused naming the chunk; never at a guess of ours.

use super::{list_lines, quote, Chunk, EOF};

/// The whitespace-and-punctuation form Codex's last matching pass compares.
pub(super) fn normalised(s: &str) -> String {
    s.trim()
        .chars()
        .map(|c| match c {
            '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
            '\u{2018}'..='\u{201B}' => '\'',
            '\u{201C}'..='\u{201F}' => '"',
            '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
            c => c,
        })
        .collect()
}

/// Codex's four passes, loosest last.
pub(super) const PASSES: [fn(&str, &str) -> bool; 4] = [
    |a, b| a == b,
    |a, b| a.trim_end() == b.trim_end(),
    |a, b| a.trim() == b.trim(),
    |a, b| normalised(a) == normalised(b),
];

/// Where `pattern` is in `lines` at or after `from`: the matches of the
/// first pass that has any.
pub(super) fn seek(lines: &[&str], pattern: &[String], from: usize) -> Vec<usize> {
    if pattern.is_empty() || pattern.len() > lines.len() || from > lines.len() - pattern.len() {
        return Vec::new();
    }
    for pass in PASSES {
        let found: Vec<usize> = (from..=lines.len() - pattern.len())
            .filter(|&p| {
                lines[p..p + pattern.len()]
                    .iter()
                    .zip(pattern)
                    .all(|(a, b)| pass(a, b))
            })
            .collect();
        if !found.is_empty() {
            return found;
        }
    }
    Vec::new()
}

/// Whether `pattern` is at the very end of `lines` (in any pass).
pub(super) fn at_end(lines: &[&str], pattern: &[String]) -> Option<usize> {
    let p = lines.len().checked_sub(pattern.len())?;
    PASSES
        .iter()
        .any(|pass| lines[p..].iter().zip(pattern).all(|(a, b)| pass(a, b)))
        .then_some(p)
}

/// The file `text` with `chunks` applied, as Codex computes it.
pub(super) fn update(text: &str, chunks: &[Chunk], path: &str) -> Result<String, String> {
    // Where Codex's own modes write different bytes, refuse: a file with
    // CRLF line ends (its default turns the changed lines LF, its
    // line-ending mode keeps them) and one that ends in a blank line (one
    // newline is lost, or kept).
    if text.contains("\r\n") {
        return Err(format!(
            "Update File {path}: it has CRLF line ends, which Codex's apply_patch writes differently in its two line-ending modes; use `search_replace`, `edits` or `patch` for it"
        ));
    }
    if text.ends_with("\n\n") {
        return Err(format!(
            "Update File {path}: it ends with a blank line, which Codex's apply_patch keeps or drops depending on its line-ending mode; use `search_replace`, `edits` or `patch` for it"
        ));
    }
    let mut lines: Vec<&str> = text.split('\n').collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    let mut replacements: Vec<(usize, usize, &[String])> = Vec::new();
    let mut cursor = 0usize;
    for c in chunks {
        let what = format!("apply_patch line {}: chunk of {path}", c.line);
        if let Some(a) = &c.anchor {
            match seek(&lines, std::slice::from_ref(a), cursor).first() {
                Some(&p) => cursor = p + 1,
                None => {
                    return Err(format!(
                        "{what}: its anchor @@ {} is not in {path}{}",
                        quote(a.as_bytes()),
                        after(cursor)
                    ))
                }
            }
        }
        if c.old.is_empty() {
            // Added lines only: at the end (before a final blank line).
            let end = if lines.last() == Some(&"") {
                lines.len() - 1
            } else {
                lines.len()
            };
            if c.anchor.is_some() && !c.end_of_file && cursor < end {
                return Err(format!(
                    "{what}: it only adds lines, after @@ {}, which is not the end of {path}: Codex's releases put such lines in different places (at the end of the file, or after the @@ line); add a context line from the file to say where",
                    quote(c.anchor.as_deref().unwrap_or_default().as_bytes())
                ));
            }
            replacements.push((end, 0, &c.new));
            continue;
        }
        let (mut old, mut new) = (&c.old[..], &c.new[..]);
        let mut found = find(&lines, old, c, cursor, path, &what)?;
        // A blank line that ended the chunk (before the next `@@`) is not
        // part of it, if the chunk is found without it.
        if found.is_none() && old.last().is_some_and(String::is_empty) {
            old = &old[..old.len() - 1];
            if new.last().is_some_and(String::is_empty) {
                new = &new[..new.len() - 1];
            }
            found = find(&lines, old, c, cursor, path, &what)?;
        }
        let Some(p) = found else {
            let hay: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
            let needle: Vec<&[u8]> = c.old.iter().map(|l| l.as_bytes()).collect();
            return Err(format!(
                "{what}: its context and removed lines {} are not in {path}{}{}",
                quote(c.old.join("\n").as_bytes()),
                if c.end_of_file {
                    format!(" at its end ({EOF:?})")
                } else {
                    after(cursor)
                },
                super::super::closest_match(&hay, &needle)
                    .map(|m| format!("; closest match: {path} {m}"))
                    .unwrap_or_default()
            ));
        };
        replacements.push((p, old.len(), new));
        cursor = p + old.len();
    }
    replacements.sort_by_key(|r| r.0);
    let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    for (p, n, new) in replacements.into_iter().rev() {
        out.splice(p..p + n, new.iter().cloned());
    }
    // Ends with a line end, as Codex writes it (an emptied file is empty).
    if out.is_empty() {
        return Ok(String::new());
    }
    let mut text = out.join("\n");
    text.push('\n');
    Ok(text)
}

pub(super) fn after(cursor: usize) -> String {
    if cursor > 0 {
        format!(" after line {cursor}")
    } else {
        String::new()
    }
}

/// The start of chunk `c`'s old lines `old` at or after `cursor`: at the
/// end for `*** End of File`; else the first match after an anchor, or the
/// only one without. Several without an anchor are refused.
pub(super) fn find(
    lines: &[&str],
    old: &[String],
    c: &Chunk,
    cursor: usize,
    path: &str,
    what: &str,
) -> Result<Option<usize>, String> {
    if c.end_of_file {
        return Ok(at_end(lines, old).filter(|&p| p >= cursor));
    }
    match (seek(lines, old, cursor).as_slice(), c.anchor.is_some()) {
        ([], _) => Ok(None),
        ([p, ..], true) | ([p], false) => Ok(Some(*p)),
        (many, false) => {
            let ls: Vec<usize> = many.iter().map(|p| p + 1).collect();
            Err(format!(
                "{what}: its context and removed lines {} occur {} times in {path} (at {}); add context or an @@ anchor (Codex would take the first)",
                quote(old.join("\n").as_bytes()),
                many.len(),
                list_lines(&ls)
            ))
        }
    }
}
