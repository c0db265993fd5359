//! Unified diffs: parsing them, and placing their hunks on file contents.
//!
//! Owns the unified-diff format as `git diff` writes it (and plain
//! `---`/`+++` diffs): file headers, extended headers (modes, renames, copies,
//! new and deleted files), hunks, `\ No newline at end of file`. Invariant:
//! a parsed [`FilePatch`] is self-consistent (hunk line counts match their
//! headers, paths pass the path rules), and [`apply_hunks`] is deterministic:
//! the same hunks on the same bytes give the same bytes or the same error.

mod parse;
mod place;

pub use parse::parse;
pub use place::{apply_hunks, split_lines};

/// One file's part of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePatch {
    /// Path before the change; `None` when the patch creates the file.
    pub old_path: Option<String>,
    /// Path after the change; `None` when the patch deletes the file.
    pub new_path: Option<String>,
    pub old_mode: Option<u32>,
    pub new_mode: Option<u32>,
    /// `copy from`/`copy to`: the old path stays.
    pub is_copy: bool,
    pub hunks: Vec<Hunk>,
    /// 1-based line of the patch where this file's header starts.
    pub line: usize,
}

impl FilePatch {
    /// The path to name in messages.
    pub fn display_path(&self) -> &str {
        self.new_path
            .as_deref()
            .or(self.old_path.as_deref())
            .unwrap_or("?")
    }
}

/// One `@@ -a,b +c,d @@` hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    pub old_start: usize,
    pub old_len: usize,
    pub new_start: usize,
    pub new_len: usize,
    pub lines: Vec<Line>,
    /// 1-based line of the patch holding the `@@` header.
    pub line: usize,
    /// False for a hunk whose header has no line numbers (`@@ ... @@`):
    /// it is placed by its context alone, which must then match once.
    pub numbered: bool,
}

impl Hunk {
    pub fn header(&self) -> String {
        if !self.numbered {
            return "@@ ... @@".into();
        }
        format!(
            "@@ -{},{} +{},{} @@",
            self.old_start, self.old_len, self.new_start, self.new_len
        )
    }

    /// The lines the hunk expects to find (context and removed).
    pub fn preimage(&self) -> Vec<&[u8]> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                Line::Context(t) | Line::Remove(t) => Some(t.as_slice()),
                Line::Add(_) => None,
            })
            .collect()
    }

    /// The lines the hunk leaves behind (context and added).
    pub fn postimage(&self) -> Vec<&[u8]> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                Line::Context(t) | Line::Add(t) => Some(t.as_slice()),
                Line::Remove(_) => None,
            })
            .collect()
    }
}

/// A hunk line's text includes its `\n`, except where the patch says
/// `\ No newline at end of file`; a `\r` before the `\n` is kept, so CRLF
/// content matches byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    Context(Vec<u8>),
    Remove(Vec<u8>),
    Add(Vec<u8>),
}

impl Line {
    fn text_mut(&mut self) -> &mut Vec<u8> {
        match self {
            Line::Context(t) | Line::Remove(t) | Line::Add(t) => t,
        }
    }
}
