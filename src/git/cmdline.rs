//! The configuration git hands a subcommand outside its files: `git -c
//! key=value steps …` (and `--config-env`), which git passes down in
//! `GIT_CONFIG_PARAMETERS`, and `GIT_CONFIG_COUNT` with
//! `GIT_CONFIG_KEY_<n>`/`GIT_CONFIG_VALUE_<n>`. libgit2 reads neither.
//!
//! Owns reading them as git does and giving them to the repository's
//! config object as its highest level, so every setting git-steps reads
//! (`steps.*`, `user.*`, signing, line endings) sees them, as git's own
//! commands would. Invariant: nothing is written anywhere a file could
//! outlive the process: the entries live in an unnamed temporary file
//! (`O_TMPFILE`), reached through `/proc/self/fd`; git-steps' own writes
//! (`init`) go to the files they name and never to this level.

use std::io::Write;

/// The entries, in the order git applies them (a later one wins): the key
/// as given, and its value (None: the key alone, which is `true`).
pub fn entries() -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    if let Ok(p) = std::env::var("GIT_CONFIG_PARAMETERS") {
        out.extend(parse_parameters(&p));
    }
    let count = std::env::var("GIT_CONFIG_COUNT")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .unwrap_or(0);
    for i in 0..count {
        let (Ok(k), Ok(v)) = (
            std::env::var(format!("GIT_CONFIG_KEY_{i}")),
            std::env::var(format!("GIT_CONFIG_VALUE_{i}")),
        ) else {
            continue;
        };
        out.push((k, Some(v)));
    }
    out
}

/// One single-quoted word of `s` from `at` (git's `sq_quote`: `'` is
/// written `'\''`, `!` `'\!'`), and where it ends; None if there is none.
fn sq_word(s: &[u8], mut at: usize) -> Option<(String, usize)> {
    if s.get(at) != Some(&b'\'') {
        return None;
    }
    at += 1;
    let mut word = Vec::new();
    loop {
        match s.get(at)? {
            b'\'' => {
                // Closed; `\x'` continues the word with x.
                if s.get(at + 1) == Some(&b'\\') && s.get(at + 3) == Some(&b'\'') {
                    word.push(*s.get(at + 2)?);
                    at += 4;
                } else {
                    return Some((String::from_utf8_lossy(&word).into_owned(), at + 1));
                }
            }
            &c => {
                word.push(c);
                at += 1;
            }
        }
    }
}

/// `GIT_CONFIG_PARAMETERS`: `'key'='value'`, `'key'` (no value) or the
/// older `'key=value'`, separated by spaces. What does not parse ends the
/// list, as git stops at it.
fn parse_parameters(p: &str) -> Vec<(String, Option<String>)> {
    let s = p.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        while s.get(at).is_some_and(u8::is_ascii_whitespace) {
            at += 1;
        }
        if at >= s.len() {
            return out;
        }
        let Some((first, end)) = sq_word(s, at) else {
            return out;
        };
        at = end;
        if s.get(at) == Some(&b'=') {
            match sq_word(s, at + 1) {
                Some((value, end)) => {
                    out.push((first, Some(value)));
                    at = end;
                }
                // `'key'=` with nothing after it: an empty value.
                None => {
                    out.push((first, Some(String::new())));
                    at += 1;
                }
            }
        } else {
            match first.split_once('=') {
                Some((k, v)) => out.push((k.to_string(), Some(v.to_string()))),
                None => out.push((first, None)),
            }
        }
    }
}

/// The entries as a config file git and libgit2 read back as the same
/// keys and values. A key without a section or a name is left out.
fn as_file(entries: &[(String, Option<String>)]) -> String {
    let mut text = String::new();
    for (key, value) in entries {
        let (Some((section, rest)), Some(dot)) = (key.split_once('.'), key.rfind('.')) else {
            continue;
        };
        let name = &key[dot + 1..];
        if section.is_empty() || name.is_empty() {
            continue;
        }
        let quote = |v: &str| {
            v.replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n")
                .replace('\t', "\\t")
        };
        match rest.rfind('.') {
            Some(d) => text.push_str(&format!("[{section} \"{}\"]\n", quote(&rest[..d]))),
            None => text.push_str(&format!("[{section}]\n")),
        }
        match value {
            Some(v) => text.push_str(&format!("\t{name} = \"{}\"\n", quote(v))),
            None => text.push_str(&format!("\t{name}\n")),
        }
    }
    text
}

/// The path of an unnamed file holding the entries, open for the life of
/// the process (None: there are none, or no such file can be made).
pub fn file() -> Option<&'static std::path::Path> {
    static FILE: std::sync::OnceLock<Option<(std::fs::File, std::path::PathBuf)>> =
        std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let entries = entries();
        if entries.is_empty() {
            return None;
        }
        let mut f = tempfile::tempfile().ok()?;
        f.write_all(as_file(&entries).as_bytes()).ok()?;
        use std::os::fd::AsRawFd;
        let path = std::path::PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()));
        path.exists().then_some((f, path))
    })
    .as_ref()
    .map(|(_, p)| p.as_path())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_config_parameters_are_read_as_git_writes_them() {
        // git 2.31 and later.
        assert_eq!(
            parse_parameters("'steps.effects'='none' 'user.name'='A '\\''Q'\\'' B' 'core.x'"),
            [
                ("steps.effects".to_string(), Some("none".to_string())),
                ("user.name".into(), Some("A 'Q' B".into())),
                ("core.x".into(), None),
            ]
        );
        // Older gits.
        assert_eq!(
            parse_parameters("'steps.batch=4' 'a.b=c=d'"),
            [
                ("steps.batch".to_string(), Some("4".to_string())),
                ("a.b".into(), Some("c=d".into())),
            ]
        );
        assert_eq!(parse_parameters("'a.b'='x' garbage 'c.d'='y'").len(), 1);
    }

    #[test]
    fn the_file_holds_sections_subsections_and_escaped_values() {
        let text = as_file(&[
            ("steps.effects".into(), Some("none".into())),
            ("remote.My.Origin.url".into(), Some("a\"b\\c".into())),
            ("core.bare".into(), None),
            ("nosection".into(), Some("x".into())),
        ]);
        assert_eq!(
            text,
            "[steps]\n\teffects = \"none\"\n[remote \"My.Origin\"]\n\turl = \"a\\\"b\\\\c\"\n[core]\n\tbare\n"
        );
    }
}
