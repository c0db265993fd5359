//! The path rules every step obeys, whatever its edit format.
//!
//! Owns the check that a path is repository-relative, `/`-separated, never
//! absolute, never containing `.` or `..`, never naming `.git` in any spelling
//! git itself rejects (case, trailing dots and spaces, NTFS short names and
//! streams, HFS+ ignorable code points). Invariant: a path that passes
//! [`validate`] can only name something inside the worktree, outside `.git`.
//! (That it never passes *through a symlink* depends on the tree, and is
//! checked where the tree is known, in `apply`.)

/// Code points HFS+ ignores when comparing names (git's `is_hfs_dotgit`).
fn hfs_ignorable(c: char) -> bool {
    matches!(c,
        '\u{200c}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{206a}'..='\u{206f}' | '\u{feff}')
}

/// Whether one path component would be read as `.git` by git on some
/// filesystem.
pub fn is_dotgit_alias(component: &str) -> bool {
    let folded: String = component
        .chars()
        .filter(|c| !hfs_ignorable(*c))
        .flat_map(char::to_lowercase)
        .collect();
    // NTFS: alternate data streams (`.git::$INDEX_ALLOCATION`) name the same file.
    let base = folded.split(':').next().unwrap_or("");
    // NTFS and Windows: trailing dots and spaces are dropped.
    let trimmed = base.trim_end_matches(['.', ' ']);
    trimmed == ".git" || trimmed == "git~1"
}

/// What is wrong with a path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("empty path")]
    Empty,
    #[error("path {0:?} contains a NUL byte")]
    Nul(String),
    #[error("path {0:?} contains a backslash; paths are `/`-separated")]
    Backslash(String),
    #[error("path {0:?} is absolute; paths are repository-relative")]
    Absolute(String),
    #[error("path {0:?} contains a control character")]
    Control(String),
    #[error("path {0:?} has an empty component (`//` or a trailing `/`)")]
    EmptyComponent(String),
    /// A `.` or `..` component.
    #[error("path {path:?} contains a `{component}` component")]
    Dots { path: String, component: String },
    /// A component git would read as `.git` on some filesystem.
    #[error("path {path:?} names `.git` (as {component:?}); steps never write inside .git")]
    DotGit { path: String, component: String },
}

/// The path without leading `./` components, as `git apply` and editors
/// write them (`./src/lib.rs` is `src/lib.rs`). Any other `.` component is
/// still refused by [`validate`].
pub fn normalise(path: &str) -> &str {
    let mut p = path;
    // `.//a` is not `/a`: only `./` followed by a name is dropped.
    while let Some(rest) = p.strip_prefix("./").filter(|r| !r.starts_with('/')) {
        p = rest;
    }
    p
}

/// Check one repository-relative path; the error says what is wrong with it.
pub fn validate(path: &str) -> Result<(), PathError> {
    let owned = || path.to_string();
    if path.is_empty() {
        return Err(PathError::Empty);
    }
    if path.contains('\0') {
        return Err(PathError::Nul(owned()));
    }
    if path.contains('\\') {
        return Err(PathError::Backslash(owned()));
    }
    if path.starts_with('/') {
        return Err(PathError::Absolute(owned()));
    }
    if path.chars().any(|c| c.is_control()) {
        return Err(PathError::Control(owned()));
    }
    for component in path.split('/') {
        match component {
            "" => return Err(PathError::EmptyComponent(owned())),
            "." | ".." => {
                return Err(PathError::Dots {
                    path: owned(),
                    component: component.to_string(),
                })
            }
            c if is_dotgit_alias(c) => {
                return Err(PathError::DotGit {
                    path: owned(),
                    component: c.to_string(),
                })
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_paths() {
        for p in [
            "a",
            "src/lib.rs",
            "a.git",
            ".gitignore",
            "dir/.github/x",
            "ünï/cödé",
        ] {
            assert_eq!(validate(p), Ok(()), "{p}");
        }
    }

    #[test]
    fn rejects_escapes_and_dotgit_aliases() {
        for p in [
            "",
            "/etc/passwd",
            "../x",
            "a/../b",
            "./a",
            "a//b",
            "a/",
            "a\\b",
            "a\0b",
            ".git/config",
            "x/.GIT/hooks",
            ".git./x",
            ".git /x",
            "GIT~1/config",
            ".git::$INDEX_ALLOCATION/x",
            ".g\u{200c}it/config",
            "\u{feff}.git/x",
            "a\nb",
        ] {
            assert!(validate(p).is_err(), "{p:?} should be rejected");
        }
    }
}
