//! The configuration git hands a subcommand outside its files: `git -c
//! key=value steps …` (and `--config-env`), which git passes down in
//! `GIT_CONFIG_PARAMETERS`, and `GIT_CONFIG_COUNT` with
//! `GIT_CONFIG_KEY_<n>`/`GIT_CONFIG_VALUE_<n>`. libgit2 reads neither.
//!
//! Owns reading them as git does and giving them to the repository's
//! config object as its highest level, so every setting git-steps reads
//! (`steps.*`, `user.*`, signing, line endings) sees them, as git's own
//! commands would. Invariant: nothing is written anywhere a file could
//! outlive the process: the entries live in an anonymous file
//! (`memfd_create` reached through `/proc/self/fd` on Linux, an unlinked
//! temporary file reached through `/dev/fd` elsewhere); git-steps' own
//! writes (`init`) go to the files they name and never to this level; and
//! settings that cannot be given this way are an error, never dropped.

/// The entries, in the order git applies them (a later one wins: the
/// `GIT_CONFIG_COUNT` ones, then `git -c`'s): the key, and its value as
/// bytes (None: the key alone, which is `true`).
pub fn entries() -> Vec<(String, Option<Vec<u8>>)> {
    use std::os::unix::ffi::OsStringExt;
    let var = |k: &str| std::env::var_os(k).map(OsStringExt::into_vec);
    let mut out = Vec::new();
    let count = var("GIT_CONFIG_COUNT")
        .and_then(|c| String::from_utf8(c).ok()?.trim().parse::<usize>().ok())
        .unwrap_or(0);
    for i in 0..count {
        let (Some(k), Some(v)) = (
            var(&format!("GIT_CONFIG_KEY_{i}")),
            var(&format!("GIT_CONFIG_VALUE_{i}")),
        ) else {
            continue;
        };
        out.push((String::from_utf8_lossy(&k).into_owned(), Some(v)));
    }
    if let Some(p) = var("GIT_CONFIG_PARAMETERS") {
        out.extend(parse_parameters(&p));
    }
    out
}

/// One single-quoted word of `s` from `at` (git's `sq_quote`: `'` is
/// written `'\''`, `!` `'\!'`), and where it ends; None if there is none.
fn sq_word(s: &[u8], mut at: usize) -> Option<(Vec<u8>, usize)> {
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
                    return Some((word, at + 1));
                }
            }
            &c => {
                word.push(c);
                at += 1;
            }
        }
    }
}

/// `GIT_CONFIG_PARAMETERS`: `'key'='value'`, `'key'=` (the key alone),
/// or the older `'key=value'` and `'key'`, separated by spaces. What does
/// not parse ends the list, as git stops at it.
fn parse_parameters(s: &[u8]) -> Vec<(String, Option<Vec<u8>>)> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
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
                    out.push((text(&first), Some(value)));
                    at = end;
                }
                // `git -c key`: no value, which is true.
                None => {
                    out.push((text(&first), None));
                    at += 1;
                }
            }
        } else {
            match first.iter().position(|&c| c == b'=') {
                Some(eq) => out.push((text(&first[..eq]), Some(first[eq + 1..].to_vec()))),
                None => out.push((text(&first), None)),
            }
        }
    }
}

/// The entries as a config file git and libgit2 read back as the same
/// keys and values. A key without a section or a name is left out.
fn as_file(entries: &[(String, Option<Vec<u8>>)]) -> Vec<u8> {
    let quote = |v: &[u8]| {
        let mut q = Vec::with_capacity(v.len());
        for &c in v {
            match c {
                b'\\' => q.extend_from_slice(b"\\\\"),
                b'"' => q.extend_from_slice(b"\\\""),
                b'\n' => q.extend_from_slice(b"\\n"),
                b'\t' => q.extend_from_slice(b"\\t"),
                c => q.push(c),
            }
        }
        q
    };
    let mut text = Vec::new();
    for (key, value) in entries {
        let (Some((section, rest)), Some(dot)) = (key.split_once('.'), key.rfind('.')) else {
            continue;
        };
        let name = &key[dot + 1..];
        if section.is_empty() || name.is_empty() {
            continue;
        }
        text.push(b'[');
        text.extend_from_slice(section.as_bytes());
        if let Some(d) = rest.rfind('.') {
            text.extend_from_slice(b" \"");
            text.extend_from_slice(&quote(&rest.as_bytes()[..d]));
            text.push(b'"');
        }
        text.extend_from_slice(b"]\n\t");
        text.extend_from_slice(name.as_bytes());
        if let Some(v) = value {
            text.extend_from_slice(b" = \"");
            text.extend_from_slice(&quote(v));
            text.push(b'"');
        }
        text.push(b'\n');
    }
    text
}

/// Give the entries to `repo`'s config object as its highest level (the
/// one libgit2 and git-steps read from): an error, naming them, when they
/// cannot be.
pub fn apply(repo: &git2::Repository) -> crate::error::Result<()> {
    let given = file().map_err(|e| {
        crate::error::Error::other(format!(
            "the configuration given with `git -c` (GIT_CONFIG_PARAMETERS, GIT_CONFIG_COUNT) cannot be read: {e}"
        ))
    })?;
    if let Some((f, path)) = given {
        // One reader at a time, from the start: where the path shares the
        // file's offset (macOS's `/dev/fd`), a read moves it for the next.
        static READING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = READING.lock().unwrap_or_else(|e| e.into_inner());
        crate::os::rewind(f).map_err(|e| {
            crate::error::Error::other(format!(
                "the configuration given with `git -c` cannot be read again: {e}"
            ))
        })?;
        repo.config()?
            .add_file(path, git2::ConfigLevel::App, true)?;
    }
    Ok(())
}

/// The anonymous file ([`crate::os::anonymous_file`]: `memfd_create` on
/// Linux) holding the entries, open for the life of the process, and the
/// path that reaches it; None when there are none. An error when there
/// are some and no such file can be made or reached: the settings are
/// never silently dropped.
fn file() -> Result<Option<&'static (std::fs::File, std::path::PathBuf)>, String> {
    type Made = Result<Option<(std::fs::File, std::path::PathBuf)>, String>;
    static FILE: std::sync::OnceLock<Made> = std::sync::OnceLock::new();
    let made = FILE.get_or_init(|| {
        let entries = entries();
        if entries.is_empty() {
            return Ok(None);
        }
        let (f, path) = crate::os::anonymous_file("git-steps-config", &as_file(&entries))
            .map_err(|e| format!("cannot make a file for them: {e}"))?;
        if !path.exists() {
            return Err(format!("{} cannot be read", path.display()));
        }
        Ok(Some((f, path)))
    });
    match made {
        Ok(f) => Ok(f.as_ref()),
        Err(e) => Err(e.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Option<Vec<u8>> {
        Some(s.as_bytes().to_vec())
    }

    #[test]
    fn git_config_parameters_are_read_as_git_writes_them() {
        // git 2.31 and later, as `git -c e.f -c g.h= -c 'a.b=x y' -c
        // "c.d=it's!"` writes them.
        assert_eq!(
            parse_parameters(b"'e.f'= 'g.h'='' 'a.b'='x y' 'c.d'='it'\\''s'\\!''"),
            [
                ("e.f".to_string(), None),
                ("g.h".into(), v("")),
                ("a.b".into(), v("x y")),
                ("c.d".into(), v("it's!")),
            ]
        );
        // Older gits.
        assert_eq!(
            parse_parameters(b"'steps.batch=4' 'a.b=c=d' 'e.f'"),
            [
                ("steps.batch".to_string(), v("4")),
                ("a.b".into(), v("c=d")),
                ("e.f".into(), None),
            ]
        );
        assert_eq!(parse_parameters(b"'a.b'='x' garbage 'c.d'='y'").len(), 1);
        // Not UTF-8: kept as bytes.
        assert_eq!(
            parse_parameters(b"'user.name'='Ren\xe9'"),
            [("user.name".to_string(), Some(b"Ren\xe9".to_vec()))]
        );
    }

    #[test]
    fn the_file_holds_sections_subsections_and_escaped_values() {
        let text = as_file(&[
            ("steps.effects".into(), v("none")),
            ("remote.My.Origin.url".into(), v("a\"b\\c")),
            ("core.bare".into(), None),
            ("nosection".into(), v("x")),
        ]);
        assert_eq!(
            String::from_utf8(text).unwrap(),
            "[steps]\n\teffects = \"none\"\n[remote \"My.Origin\"]\n\turl = \"a\\\"b\\\\c\"\n[core]\n\tbare\n"
        );
    }
}
