//! git's trailer reader (git 2.47, `git log --format=%(trailers)`), which
//! receipts are read with.
//!
//! Owns one function, `trailers`: the (key, value) pairs git shows for a
//! commit message. Invariant: exactly what `%(trailers)` shows, byte for
//! byte; `tests/it/trailers.rs` checks it against the real `git log`.
//!
//! **Reading.** A receipt is what `git log --format='%(trailers:key=Step-Id)'`
//! shows (SPEC "Receipts"), so [`super::receipt::parse`] reads trailers exactly as git 2.47's
//! `%(trailers)` does (pretty.c `format_trailers_from_commit`, trailer.c
//! `trailer_info_get`, commit.c `ignored_log_message_bytes`), with git's
//! defaults: no `trailer.*` configuration, `:` the only separator, `#` the
//! comment string. libgit2's port (`git_message_trailers`) is not used: it
//! diverges from git (it honours a `---` divider that `git log` ignores, does
//! not cut at the scissors line, and groups continuation lines differently).
//! Step by step, as git does it:
//!
//! 1. The message ends at its first NUL byte (git handles it as a C string).
//! 2. Leading lines made only of whitespace are skipped (pretty.c
//!    `skip_blank_lines`). "Whitespace" is always git's: space, tab, LF, CR.
//! 3. The end of the log message (`find_end_of_log_message` with
//!    `no_divider`, as `%(trailers)` sets it): a `---` line is *not* a
//!    divider. Everything from a scissors line
//!    (`# ------------------------ >8 ------------------------` plus LF, at the
//!    start of a line) on is cut; then a final run of comment lines (starting
//!    with `#`), empty lines (exactly LF) and old-style `Conflicts:` blocks
//!    (tab-indented paths) is cut.
//! 4. The trailer block start (`find_trailer_block_start`): the title is the
//!    first paragraph (comment lines do not end it) and cannot hold trailers.
//!    From the last line back towards the title, whitespace-only lines at the
//!    end are skipped; a comment line is ignored but turns pending
//!    continuation lines into non-trailer lines; a line starting with
//!    `Signed-off-by: ` or `(cherry picked from commit ` is a git-generated
//!    trailer; `<token><optional space/tab><:>` where the token is ASCII
//!    letters, digits and `-` (not starting with whitespace) is a trailer; a
//!    line starting with whitespace is a possible continuation; anything else
//!    is a non-trailer line. At the first whitespace-only line the paragraph
//!    below it is the block if it has a git-generated trailer and at least
//!    25% trailer lines, or has trailers and no non-trailer line; otherwise
//!    (or without such a line) there is no block.
//! 5. The block is split into lines; a line starting with whitespace (even an
//!    empty one) continues the previous line if that one had a separator.
//! 6. Lines starting with `#` are dropped; a line with a separator at
//!    position ≥ 1 is a trailer: key and value are trimmed of whitespace, and
//!    the value is unfolded (each LF and the whitespace after it become one
//!    space), as `git interpret-trailers --parse` and `%(trailers:unfold)` do.
//!    Keys compare ASCII-case-insensitively, as `%(trailers:key=…)` does.

use std::borrow::Cow;

// ---- git's trailer reader (git 2.47, `git log --format=%(trailers)`) ----
//
// A hand-written port of the parts of git's pretty.c, commit.c, wt-status.c
// and trailer.c that `%(trailers)` runs, line for line, on bytes. libgit2's
// port (git2::message_trailers_strs) diverges from git on `---` lines,
// scissors lines and continuation lines, so it is not used.

/// git's `comment_line_str` default (`core.commentChar`).
const COMMENT: u8 = b'#';
/// git's `trailer.separators` default.
const SEPARATORS: &[u8] = b":";
/// trailer.c `git_generated_prefixes`.
const GIT_GENERATED_PREFIXES: [&[u8]; 2] = [b"Signed-off-by: ", b"(cherry picked from commit "];
/// wt-status.c: `"\n" comment_line_str " " cut_line`.
const SCISSORS: &[u8] = b"\n# ------------------------ >8 ------------------------\n";

/// git's `isspace` (ctype.c): space, tab, LF and CR only.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// The position after the LF ending the line at `pos` (or the end).
fn next_line(buf: &[u8], pos: usize) -> usize {
    memchr::memchr(b'\n', &buf[pos..]).map_or(buf.len(), |i| pos + i + 1)
}

/// trailer.c `is_blank_line`: the line at `pos` holds only whitespace.
fn is_blank_line(buf: &[u8], pos: usize) -> bool {
    buf[pos..]
        .iter()
        .take_while(|&&b| b != b'\n')
        .all(|&b| is_space(b))
}

/// trailer.c `last_line`: the start of the last line of `buf[..len]`, LF
/// ending it included; None when `len` is 0.
fn last_line(buf: &[u8], len: usize) -> Option<usize> {
    if len == 0 {
        return None;
    }
    Some(memchr::memrchr(b'\n', &buf[..len - 1]).map_or(0, |i| i + 1))
}

/// pretty.c `skip_blank_lines`: the subject starts at the first line that
/// is not all whitespace.
fn skip_blank_lines(buf: &[u8]) -> usize {
    let mut pos = 0;
    while pos < buf.len() {
        let next = next_line(buf, pos);
        if !buf[pos..next].iter().all(|&b| is_space(b)) {
            break;
        }
        pos = next;
    }
    pos
}

/// wt-status.c `wt_status_locate_end`: where a scissors line starts (the
/// message starting with one counts), else `len`.
fn locate_end(buf: &[u8], len: usize) -> usize {
    if buf.starts_with(&SCISSORS[1..]) {
        return 0;
    }
    static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(SCISSORS));
    match FINDER.find(buf) {
        Some(p) if p + 1 < len => p + 1,
        _ => len,
    }
}

/// commit.c `ignored_log_message_bytes`: how many bytes at the end of
/// `buf[..len]` are not log message (the scissors line and below, then a
/// final run of comment lines, empty lines and old `Conflicts:` blocks).
fn ignored_log_message_bytes(buf: &[u8], len: usize) -> usize {
    let cutoff = locate_end(buf, len);
    // As in git, 0 means "no run started" (a run at offset 0 is not kept).
    let mut boc = 0;
    let mut bol = 0;
    let mut in_old_conflicts_block = false;
    while bol < cutoff {
        let next = memchr::memchr(b'\n', &buf[bol..len]).map_or(len, |i| bol + i + 1);
        if buf[bol] == COMMENT || buf[bol] == b'\n' {
            if boc == 0 {
                boc = bol;
            }
        } else if buf[bol..].starts_with(b"Conflicts:\n") {
            in_old_conflicts_block = true;
            if boc == 0 {
                boc = bol;
            }
        } else if in_old_conflicts_block && buf[bol] == b'\t' {
            // A pathname in the conflicts block.
        } else if boc != 0 {
            boc = 0;
            in_old_conflicts_block = false;
        }
        bol = next;
    }
    if boc != 0 {
        len - boc
    } else {
        len - cutoff
    }
}

/// trailer.c `find_end_of_log_message` with `no_divider` set, as
/// `%(trailers)` sets it: a `---` line is *not* the start of a patch.
fn find_end_of_log_message(buf: &[u8]) -> usize {
    buf.len() - ignored_log_message_bytes(buf, buf.len())
}

/// trailer.c `find_separator`: the position of the separator in
/// `<token><optional space/tab><separator>…` or `<separator>…`.
fn find_separator(line: &[u8]) -> Option<usize> {
    let mut whitespace_found = false;
    for (i, &c) in line.iter().enumerate() {
        if SEPARATORS.contains(&c) {
            return Some(i);
        }
        if !whitespace_found && (c.is_ascii_alphanumeric() || c == b'-') {
            continue;
        }
        if i != 0 && (c == b' ' || c == b'\t') {
            whitespace_found = true;
            continue;
        }
        break;
    }
    None
}

/// A separator at position ≥ 1: the line is `<token>:<value>`.
fn has_token(line: &[u8]) -> bool {
    find_separator(line).is_some_and(|p| p >= 1)
}

/// trailer.c `find_trailer_block_start`: where the trailer block in
/// `buf[..len]` starts, or `len` when there is none.
fn find_trailer_block_start(buf: &[u8], len: usize) -> usize {
    // The first paragraph is the title and cannot be trailers.
    let mut s = 0;
    while s < len {
        if buf[s] != COMMENT && is_blank_line(buf, s) {
            break;
        }
        s = next_line(buf, s);
    }
    let end_of_title = s;

    let mut only_spaces = true;
    let mut recognized_prefix = false;
    let (mut trailer_lines, mut non_trailer_lines) = (0usize, 0usize);
    // Lines that continue a trailer if one comes above them, else are
    // non-trailer lines.
    let mut possible_continuation_lines = 0usize;
    let mut cursor = last_line(buf, len);
    while let Some(bol) = cursor.filter(|&l| l >= end_of_title) {
        cursor = last_line(buf, bol);
        let line = &buf[bol..next_line(buf, bol)];
        if line[0] == COMMENT {
            non_trailer_lines += possible_continuation_lines;
            possible_continuation_lines = 0;
            continue;
        }
        if is_blank_line(buf, bol) {
            if only_spaces {
                continue;
            }
            non_trailer_lines += possible_continuation_lines;
            if (recognized_prefix && trailer_lines * 3 >= non_trailer_lines)
                || (trailer_lines > 0 && non_trailer_lines == 0)
            {
                return next_line(buf, bol);
            }
            return len;
        }
        only_spaces = false;
        if GIT_GENERATED_PREFIXES.iter().any(|p| line.starts_with(p)) {
            trailer_lines += 1;
            possible_continuation_lines = 0;
            recognized_prefix = true;
        } else if has_token(line) && !is_space(line[0]) {
            // (With no trailer.<token>.key configured, no token is a
            // recognized prefix.)
            trailer_lines += 1;
            possible_continuation_lines = 0;
        } else if is_space(line[0]) {
            possible_continuation_lines += 1;
        } else {
            non_trailer_lines += 1 + possible_continuation_lines;
            possible_continuation_lines = 0;
        }
    }
    len
}

/// strbuf_trim with git's whitespace.
fn trim(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|&c| !is_space(c)).unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|&c| !is_space(c))
        .map_or(start, |i| i + 1);
    &b[start..end]
}

/// trailer.c `unfold_value`: each LF and the whitespace after it become one
/// space.
fn unfold(val: &[u8]) -> Cow<'_, [u8]> {
    if !val.contains(&b'\n') {
        return Cow::Borrowed(trim(val));
    }
    let mut out = Vec::with_capacity(val.len());
    let mut i = 0;
    while i < val.len() {
        let c = val[i];
        i += 1;
        if c == b'\n' {
            while i < val.len() && is_space(val[i]) {
                i += 1;
            }
            out.push(b' ');
        } else {
            out.push(c);
        }
    }
    Cow::Owned(trim(&out).to_vec())
}

/// The trailers (key, unfolded value) of `message`, in order, exactly as
/// `git log --format=%(trailers:only,unfold)` lists them.
pub(crate) fn trailers(message: &str) -> Vec<(String, String)> {
    let bytes = message.as_bytes();
    // git reads the message as a C string.
    let bytes = &bytes[..memchr::memchr(0, bytes).unwrap_or(bytes.len())];
    let buf = &bytes[skip_blank_lines(bytes)..];
    let end = find_end_of_log_message(buf);
    let start = find_trailer_block_start(buf, end);

    // trailer_info_get: one string per line, continuation lines appended
    // to the line above when that one has a separator.
    let mut lines: Vec<Cow<'_, [u8]>> = Vec::new();
    let mut last_is_trailer = false;
    let mut pos = start;
    while pos < end {
        let next = memchr::memchr(b'\n', &buf[pos..end]).map_or(end, |i| pos + i + 1);
        let line = &buf[pos..next];
        pos = next;
        if let Some(prev) = lines
            .last_mut()
            .filter(|_| last_is_trailer && is_space(line[0]))
        {
            prev.to_mut().extend_from_slice(line);
            continue;
        }
        last_is_trailer = has_token(line);
        lines.push(Cow::Borrowed(line));
    }

    // parse_trailers with only_trailers and unfold.
    let text = |b: &[u8]| match std::str::from_utf8(b) {
        Ok(t) => t.to_owned(),
        Err(_) => String::from_utf8_lossy(b).into_owned(),
    };
    lines
        .iter()
        .filter(|l| l[0] != COMMENT)
        .filter_map(|l| {
            let sep = find_separator(l).filter(|&p| p >= 1)?;
            Some((text(trim(&l[..sep])), text(&unfold(trim(&l[sep + 1..])))))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::receipt::{parse, ParseError, Receipt};

    const SCISSORS_LINE: &str = "# ------------------------ >8 ------------------------";
    const RECEIPT: &str = "Step-Id: a\nStep-Run: r\nStep-Decision: d\n";

    fn pairs(message: &str) -> Vec<(String, String)> {
        trailers(message)
    }

    fn kv(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn id(message: &str) -> Option<String> {
        parse(message).ok().map(|r| r.id)
    }

    #[test]
    fn separator_rule_is_gits() {
        assert_eq!(find_separator(b"Step-Id: a"), Some(7));
        assert_eq!(find_separator(b"Step-Id : a"), Some(8));
        assert_eq!(find_separator(b"Step-Id\t: a"), Some(8));
        assert_eq!(find_separator(b": a"), Some(0));
        assert_eq!(find_separator(b" Step-Id: a"), None);
        assert_eq!(find_separator(b"Step_Id: a"), None);
        assert_eq!(find_separator(b"Step-Id = a"), None);
        assert_eq!(find_separator(b"Step Id: a"), None);
        assert_eq!(find_separator(b"Step-Id\n: a"), None);
        assert_eq!(find_separator(b"Step-Id"), None);
    }

    #[test]
    fn dash_lines_are_no_divider_for_git_log() {
        // `%(trailers)` sets no_divider: `---` is an ordinary (non-trailer)
        // line, so a receipt followed by one is no receipt ...
        assert_eq!(
            parse(&format!("s\n\n{RECEIPT}---\n")),
            Err(ParseError::NotAReceipt)
        );
        assert_eq!(
            parse(&format!("s\n\n{RECEIPT}--- a/x\n+++ b/x\n")),
            Err(ParseError::NotAReceipt)
        );
        // ... and one above the last paragraph hides nothing.
        assert_eq!(id(&format!("s\n\n---\n\n{RECEIPT}")).as_deref(), Some("a"));
        assert_eq!(
            id(&format!("s\n\nbody\n--- \nmore\n\n{RECEIPT}")).as_deref(),
            Some("a")
        );
    }

    #[test]
    fn scissors_line_cuts_the_message() {
        let m = format!("s\n\n{RECEIPT}{SCISSORS_LINE}\nStep-Id: b\nanything\n");
        assert_eq!(id(&m).as_deref(), Some("a"));
        // Text below the scissors with a blank line before the receipt.
        let m = format!("s\n\n{RECEIPT}\n{SCISSORS_LINE}\n\nStep-Id: b\n");
        assert_eq!(id(&m).as_deref(), Some("a"));
        // A receipt below the scissors is cut away.
        let m = format!("s\n\nbody\n{SCISSORS_LINE}\n\n{RECEIPT}");
        assert_eq!(parse(&m), Err(ParseError::NotAReceipt));
        // A message starting with the scissors line is empty.
        let m = format!("{SCISSORS_LINE}\n\n{RECEIPT}");
        assert_eq!(parse(&m), Err(ParseError::NotAReceipt));
        // Only a whole line ending in LF counts: without it the line is a
        // comment, and a trailing comment is ignored anyway.
        let m = format!("s\n\n{RECEIPT}{SCISSORS_LINE}");
        assert_eq!(id(&m).as_deref(), Some("a"));
        // Indented, or with CRLF, it is a plain line (non-trailer).
        let m = format!("s\n\n{RECEIPT} {SCISSORS_LINE}\nx\n");
        assert_eq!(parse(&m), Err(ParseError::NotAReceipt));
        let m = format!("s\n\n{RECEIPT}{SCISSORS_LINE}\r\nStep-Id: b\n");
        assert!(matches!(parse(&m), Err(ParseError::Malformed(_))));
    }

    #[test]
    fn trailing_comments_blank_lines_and_conflicts_are_ignored() {
        let m = format!("s\n\n{RECEIPT}# a comment\n\n# more\n\n\n");
        assert_eq!(id(&m).as_deref(), Some("a"));
        let m = format!("s\n\n{RECEIPT}\nConflicts:\n\tx.rs\n\ty.rs\n# c\n");
        assert_eq!(id(&m).as_deref(), Some("a"));
        // Whitespace-only lines are not ignored bytes, but the block scan
        // skips them and they join the last trailer (trimmed away).
        let m = format!("s\n\n{RECEIPT}   \n\t\n");
        assert_eq!(parse(&m).unwrap().decision, "d");
    }

    #[test]
    fn comment_lines_inside_the_block() {
        // A comment is skipped, and dropped from the trailers.
        let m = "s\n\nStep-Id: a\n# note\nStep-Run: r\n#Step-Id: x\nStep-Decision: d\n";
        assert_eq!(
            pairs(m),
            kv(&[("Step-Id", "a"), ("Step-Run", "r"), ("Step-Decision", "d")])
        );
        // But it turns the indented lines below it into non-trailer lines.
        let m = "s\n\nStep-Id: a\n# note\n  cont\nStep-Run: r\nStep-Decision: d\n";
        assert_eq!(pairs(m), kv(&[]));
        // A comment line does not end the title paragraph.
        let m = format!("s\n# c\nStep-Id: x\n\n{RECEIPT}");
        assert_eq!(id(&m).as_deref(), Some("a"));
    }

    #[test]
    fn continuation_lines_unfold() {
        let m = "s\n\nStep-Id: a\nStep-Run: r\n  x  y\n\tz\nStep-Decision: d\n";
        assert_eq!(parse(m).unwrap().run, "r x  y z");
        // An indented line continues only a line with a separator.
        let m = "s\n\nSigned-off-by: A <a@x>\n(cherry picked from commit 1)\n  x\n";
        assert_eq!(pairs(m), kv(&[("Signed-off-by", "A <a@x>")]));
        // A continued Step-Id holds a space: no valid id.
        let m = "s\n\nStep-Id: a\n b\nStep-Run: r\nStep-Decision: d\n";
        assert!(matches!(parse(m), Err(ParseError::Malformed(_))));
        // An indented key is a continuation, not a trailer.
        let m = "s\n\nStep-Id: a\n Step-Id: b\nStep-Run: r\nStep-Decision: d\n";
        assert_eq!(pairs(m)[0], ("Step-Id".into(), "a Step-Id: b".into()));
        // Indented lines with no trailer above are non-trailer lines.
        let m = format!("s\n\n  lead\n{RECEIPT}");
        assert_eq!(parse(&m), Err(ParseError::NotAReceipt));
    }

    #[test]
    fn only_colon_separates_and_space_before_it_is_allowed() {
        let m = "s\n\nStep-Id : a\nStep-Run\t: r\nStep-Decision:d\n";
        assert_eq!(
            pairs(m),
            kv(&[("Step-Id", "a"), ("Step-Run", "r"), ("Step-Decision", "d")])
        );
        let m = "s\n\nStep-Id = a\nStep-Run: r\nStep-Decision: d\n";
        assert_eq!(parse(m), Err(ParseError::NotAReceipt));
        let m = "s\n\nStep-Id # a\nStep-Run: r\n";
        assert_eq!(pairs(m), kv(&[]));
        // Key case does not matter.
        let m = "s\n\nstep-id: a\nSTEP-RUN: r\nStep-decision: d\n";
        assert_eq!(id(m).as_deref(), Some("a"));
    }

    #[test]
    fn only_the_last_paragraph_and_the_25_percent_rule() {
        let m = format!("s\n\nStep-Id: x\nStep-Run: y\nStep-Decision: z\n\n{RECEIPT}");
        assert_eq!(id(&m).as_deref(), Some("a"));
        let m = format!("s\n\n{RECEIPT}\nplain text\n");
        assert_eq!(parse(&m), Err(ParseError::NotAReceipt));
        // A non-trailer line without a git-generated trailer spoils it.
        let m = format!("s\n\n{RECEIPT}text\n");
        assert_eq!(parse(&m), Err(ParseError::NotAReceipt));
        // With Signed-off-by, 25% trailers are enough: 4 of 16 lines.
        let filler = "text\n".repeat(12);
        let m = format!("s\n\n{filler}Signed-off-by: A\n{RECEIPT}");
        assert_eq!(id(&m).as_deref(), Some("a"));
        let filler = "text\n".repeat(13);
        let m = format!("s\n\n{filler}Signed-off-by: A\n{RECEIPT}");
        assert_eq!(parse(&m), Err(ParseError::NotAReceipt));
        // The generated prefix is case-sensitive and needs its space.
        let m = format!("s\n\ntext\nsigned-off-by: A\n{RECEIPT}");
        assert_eq!(parse(&m), Err(ParseError::NotAReceipt));
        let m = format!("s\n\ntext\n(cherry picked from commit abc)\n{RECEIPT}");
        assert_eq!(id(&m).as_deref(), Some("a"));
    }

    #[test]
    fn the_title_paragraph_never_holds_trailers() {
        assert_eq!(parse(RECEIPT), Err(ParseError::NotAReceipt));
        assert_eq!(
            parse(&format!("s\n{RECEIPT}")),
            Err(ParseError::NotAReceipt)
        );
        assert_eq!(parse(""), Err(ParseError::NotAReceipt));
        assert_eq!(parse("\n\n"), Err(ParseError::NotAReceipt));
        // Leading whitespace-only lines are skipped before the title.
        assert_eq!(
            parse(&format!("\n \n\t\r\n{RECEIPT}")),
            Err(ParseError::NotAReceipt)
        );
        assert_eq!(
            id(&format!("\n \n\t\r\ns\n\n{RECEIPT}")).as_deref(),
            Some("a")
        );
        // A whitespace-only line ends the title.
        assert_eq!(id(&format!("s\n \t\n{RECEIPT}")).as_deref(), Some("a"));
    }

    #[test]
    fn crlf_and_lone_cr() {
        let m = "s\r\n\r\nStep-Id: a\r\nStep-Run: r\r\nStep-Decision: d\r\n";
        assert_eq!(
            parse(m).unwrap(),
            Receipt {
                id: "a".into(),
                run: "r".into(),
                decision: "d".into(),
                index: None,
                source: None,
                adopts: Vec::new(),
                undoes: Vec::new(),
                effects: 0,
            }
        );
        // A lone CR does not end a line: the value runs on.
        let m = "s\n\nStep-Id: a\rStep-Run: r\nStep-Decision: d\n";
        assert_eq!(
            pairs(m),
            kv(&[("Step-Id", "a\rStep-Run: r"), ("Step-Decision", "d")])
        );
        assert!(matches!(parse(m), Err(ParseError::Malformed(_))));
        // Neither \v nor \f is whitespace to git.
        let m = "s\n\nStep-Id: a\x0b\nStep-Run: r\nStep-Decision: d\n";
        assert_eq!(pairs(m)[0].1, "a\x0b");
    }

    #[test]
    fn nul_ends_the_message() {
        let m = format!("s\n\n{RECEIPT}\0\n\nStep-Id: b\n");
        assert_eq!(id(&m).as_deref(), Some("a"));
        let m = format!("s\n\nbody\0\n\n{RECEIPT}");
        assert_eq!(parse(&m), Err(ParseError::NotAReceipt));
    }

    #[test]
    fn duplicates_and_sources() {
        let m = format!("s\n\n{RECEIPT}Step-Id: a\n");
        assert!(matches!(parse(&m), Err(ParseError::Malformed(_))));
        let m = format!("s\n\n{RECEIPT}Step-Source: decider\nStep-Source: journal\n");
        assert_eq!(parse(&m).unwrap().source.as_deref(), Some("journal"));
        // Some receipt keys but no Step-Id: malformed, not foreign.
        let m = "s\n\nStep-Run: r\nStep-Decision: d\n";
        assert!(matches!(parse(m), Err(ParseError::Malformed(_))));
        // Empty values are values.
        let m = "s\n\nStep-Id:\nStep-Run: r\nStep-Decision: d\n";
        assert!(matches!(parse(m), Err(ParseError::Malformed(_))));
    }
}
