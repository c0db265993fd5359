//! The worktree's form and the repository's: git's end-of-line conversion
//! and filter drivers, as `git add` (clean) and `git checkout` (smudge)
//! apply them.
//!
//! Owns the rules: the `text`, `eol`, legacy `crlf` and `filter`
//! attributes, `core.autocrlf` and `core.eol` (git's convert.c), and the
//! `filter.<driver>.clean`/`smudge`/`required` commands. Invariant: what a
//! step stores for a path is what `git add` would store for the same
//! worktree bytes, and what it writes to the worktree is what `git
//! checkout` would write, so `git status` after a run is empty; a path
//! whose conversion git-steps cannot perform (`ident`,
//! `working-tree-encoding`, a driver with only a long-running `process`
//! command) is an error before anything is written, never raw bytes.
//!
//! The rules are read once per path and session, as git reads attributes
//! and config once per command ([`forget`] starts over: a session's start,
//! and a step that changes a `.gitattributes`).

use std::borrow::Cow;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use git2::{AttrCheckFlags, AttrValue, Repository};

/// What to do with line endings for one path (git's `crlf_action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Eol {
    /// Binary, or no conversion configured.
    None,
    /// Text: CRLF → LF into the repository; LF in the worktree.
    Input,
    /// Text: CRLF → LF into the repository; LF → CRLF into the worktree.
    Crlf,
    /// As `Input`/`Crlf`, only for content that does not look binary and,
    /// into the worktree, holds no CR already (`text=auto`, `core.autocrlf`).
    AutoInput,
    AutoCrlf,
}

/// How one path is converted.
#[derive(Debug, Clone, Default)]
struct Rules {
    eol: Option<Eol>,
    /// (driver name, clean command, smudge command, required)
    driver: Option<(String, Option<String>, Option<String>, bool)>,
}

/// Conversions for the paths of one repository.
pub struct Convert<'r> {
    repo: &'r Repository,
    autocrlf: String,
    core_eol: String,
}

/// The rules read so far, for one repository (its git dir).
struct Memo {
    git_dir: std::path::PathBuf,
    autocrlf: String,
    core_eol: String,
    rules: std::collections::HashMap<String, Rules>,
}

thread_local! {
    static MEMO: std::cell::RefCell<Option<Memo>> = const { std::cell::RefCell::new(None) };
}

/// Read the rules again from here on: the attributes or the config may
/// have changed (a new session; a step changed a `.gitattributes`).
pub fn forget() {
    MEMO.with(|m| *m.borrow_mut() = None);
    crate::git::attributes::forget();
}

/// Held while files are written: if any of `paths` is a `.gitattributes`,
/// the rules are read again after (and, to be sure, before).
pub struct Rewriting(bool);

impl Rewriting {
    pub fn paths<'a>(mut paths: impl Iterator<Item = &'a str>) -> Rewriting {
        let any = paths.any(|p| p.rsplit('/').next() == Some(".gitattributes"));
        if any {
            forget();
        }
        Rewriting(any)
    }
}

impl Drop for Rewriting {
    fn drop(&mut self) {
        if self.0 {
            forget();
        }
    }
}

fn attr<'a>(repo: &'a Repository, path: &str, name: &str) -> Result<AttrValue<'a>, String> {
    if crate::git::attributes::none_for(repo, path) {
        // No attributes file could speak for it (libgit2 would load the
        // whole index to find that out).
        return Ok(AttrValue::Unspecified);
    }
    repo.get_attr(Path::new(path), name, AttrCheckFlags::FILE_THEN_INDEX)
        .map(AttrValue::from_string)
        .map_err(|e| {
            format!(
                "cannot read the {name} attribute of {path}: {}",
                e.message()
            )
        })
}

fn config(repo: &Repository, key: &str) -> Option<String> {
    repo.config().ok()?.get_string(key).ok()
}

/// git's heuristic (`gather_stats` + `convert_is_binary`): a NUL, a lone
/// CR, or more than one non-printable byte in 128 printable ones; LF and
/// the CR of CRLF count as neither, and a final ^Z (DOS EOF) is forgiven.
fn looks_binary(data: &[u8]) -> bool {
    let (mut printable, mut nonprintable) = (0usize, 0usize);
    for (i, &b) in data.iter().enumerate() {
        match b {
            0 => return true,
            b'\r' => {
                if data.get(i + 1) != Some(&b'\n') {
                    return true;
                }
            }
            b'\n' => {}
            b'\t' | 8 | 27 | 12 => printable += 1,
            26 if i + 1 == data.len() => {}
            127 => nonprintable += 1,
            b if b < 32 => nonprintable += 1,
            _ => printable += 1,
        }
    }
    (printable >> 7) < nonprintable
}

fn crlf_to_lf(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    let mut i = 0;
    while i < data.len() {
        if data[i] == b'\r' && data.get(i + 1) == Some(&b'\n') {
            i += 1;
            continue;
        }
        out.push(data[i]);
        i += 1;
    }
    out
}

fn lf_to_crlf(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + data.len() / 16);
    for (i, &b) in data.iter().enumerate() {
        if b == b'\n' && (i == 0 || data[i - 1] != b'\r') {
            out.push(b'\r');
        }
        out.push(b);
    }
    out
}

impl<'r> Convert<'r> {
    pub fn new(repo: &'r Repository) -> Convert<'r> {
        let known = MEMO.with(|m| {
            m.borrow()
                .as_ref()
                .filter(|m| m.git_dir == repo.path())
                .map(|m| (m.autocrlf.clone(), m.core_eol.clone()))
        });
        let (autocrlf, core_eol) = known.unwrap_or_else(|| {
            let read = |k| config(repo, k).unwrap_or_default().to_ascii_lowercase();
            let (a, e) = (read("core.autocrlf"), read("core.eol"));
            MEMO.with(|m| {
                *m.borrow_mut() = Some(Memo {
                    git_dir: repo.path().to_path_buf(),
                    autocrlf: a.clone(),
                    core_eol: e.clone(),
                    rules: Default::default(),
                })
            });
            (a, e)
        });
        Convert {
            repo,
            autocrlf,
            core_eol,
        }
    }

    fn rules(&self, path: &str) -> Result<Rules, String> {
        let memo = |m: &Option<Memo>| {
            m.as_ref()
                .filter(|m| m.git_dir == self.repo.path())
                .and_then(|m| m.rules.get(path).cloned())
        };
        if let Some(r) = MEMO.with(|m| memo(&m.borrow())) {
            return Ok(r);
        }
        let rules = self.read_rules(path)?;
        MEMO.with(|m| {
            if let Some(m) = m.borrow_mut().as_mut() {
                if m.git_dir == self.repo.path() {
                    m.rules.insert(path.to_string(), rules.clone());
                }
            }
        });
        Ok(rules)
    }

    fn read_rules(&self, path: &str) -> Result<Rules, String> {
        let repo = self.repo;
        // What git-steps cannot do as git does is refused, not skipped.
        for unsupported in ["ident", "working-tree-encoding"] {
            match attr(repo, path, unsupported)? {
                AttrValue::Unspecified | AttrValue::False => {}
                _ => {
                    return Err(format!(
                        "{path} has the {unsupported} attribute, which git-steps does not apply: writing it would store what git add would not"
                    ))
                }
            }
        }
        let mut text = attr(repo, path, "text")?;
        let mut eol_attr = attr(repo, path, "eol")?;
        // The legacy `crlf` attribute.
        if matches!(text, AttrValue::Unspecified) {
            match attr(repo, path, "crlf")? {
                AttrValue::True => text = AttrValue::True,
                AttrValue::False => text = AttrValue::False,
                AttrValue::String("input") => {
                    text = AttrValue::True;
                    eol_attr = AttrValue::String("lf");
                }
                _ => {}
            }
        }
        let eol = match (text, eol_attr) {
            (AttrValue::False, _) => Eol::None,
            (AttrValue::True, AttrValue::String("crlf")) => Eol::Crlf,
            (AttrValue::True, AttrValue::String("lf")) => Eol::Input,
            // `eol` set implies text (git: "eol" without "text").
            (AttrValue::Unspecified, AttrValue::String("crlf")) => Eol::Crlf,
            (AttrValue::Unspecified, AttrValue::String("lf")) => Eol::Input,
            (AttrValue::String("auto"), AttrValue::String("crlf")) => Eol::AutoCrlf,
            (AttrValue::String("auto"), AttrValue::String("lf")) => Eol::AutoInput,
            (AttrValue::True, _) => self.default_text(Eol::Input, Eol::Crlf),
            (AttrValue::String("auto"), _) => self.default_text(Eol::AutoInput, Eol::AutoCrlf),
            _ => match self.autocrlf.as_str() {
                "true" => Eol::AutoCrlf,
                "input" => Eol::AutoInput,
                _ => Eol::None,
            },
        };
        let driver = match attr(repo, path, "filter")? {
            AttrValue::String(name) if !name.is_empty() => {
                let name = name.to_string();
                let get = |k: &str| config(repo, &format!("filter.{name}.{k}"));
                let required = repo
                    .config()
                    .ok()
                    .and_then(|c| c.get_bool(&format!("filter.{name}.required")).ok())
                    .unwrap_or(false);
                let (clean, smudge, process) = (get("clean"), get("smudge"), get("process"));
                if clean.is_none() && smudge.is_none() {
                    if process.is_some() || required {
                        return Err(format!(
                            "{path} uses the filter driver {name}, which has no clean and smudge commands git-steps can run{}",
                            if process.is_some() { " (only a long-running `process` one)" } else { "" }
                        ));
                    }
                    // As git: a driver with no commands converts nothing.
                    None
                } else {
                    Some((name, clean, smudge, required))
                }
            }
            _ => None,
        };
        Ok(Rules {
            eol: Some(eol),
            driver,
        })
    }

    /// `text` without `eol`: `core.autocrlf`, then `core.eol`.
    fn default_text(&self, input: Eol, crlf: Eol) -> Eol {
        match self.autocrlf.as_str() {
            "true" => crlf,
            "input" => input,
            _ if self.core_eol == "crlf" => crlf,
            _ => input,
        }
    }

    fn run_driver(
        &self,
        path: &str,
        name: &str,
        cmd: &str,
        required: bool,
        data: &[u8],
    ) -> Result<Vec<u8>, String> {
        // `%f` is the path, quoted for the shell, as git passes it.
        let quoted = format!("'{}'", path.replace('\'', "'\\''"));
        let line = cmd.replace("%f", &quoted);
        let workdir = self.repo.workdir().unwrap_or_else(|| self.repo.path());
        let run = || -> std::io::Result<std::process::Output> {
            let mut child = Command::new("sh")
                .args(["-c", &line])
                .current_dir(workdir)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()?;
            let mut stdin = child.stdin.take().expect("piped");
            let input = data.to_vec();
            let writer = std::thread::spawn(move || {
                let _ = stdin.write_all(&input);
            });
            let out = child.wait_with_output()?;
            let _ = writer.join();
            Ok(out)
        };
        match run() {
            Ok(out) if out.status.success() => Ok(out.stdout),
            // As git: a driver that fails passes the content through,
            // unless it is required.
            _ if !required => Ok(data.to_vec()),
            Ok(out) => Err(format!(
                "the filter driver {name} failed on {path} ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Err(e) => Err(format!(
                "cannot run the filter driver {name} on {path}: {e}"
            )),
        }
    }

    /// Worktree bytes → what the repository stores (`git add`): the
    /// driver's `clean`, then CRLF → LF.
    pub fn to_repo<'d>(&self, path: &str, data: &'d [u8]) -> Result<Cow<'d, [u8]>, String> {
        self.to_repo_over(path, data, None)
    }

    /// As [`Convert::to_repo`], over the version the repository holds now
    /// (`previous`): as git's "safer autocrlf", `text=auto` and
    /// `core.autocrlf` leave CRLF alone in a file whose stored version
    /// already has CRs, so an edit does not rewrite every line.
    ///
    /// Borrowed when nothing converts (a large file is not copied).
    pub fn to_repo_over<'d>(
        &self,
        path: &str,
        data: &'d [u8],
        previous: Option<&[u8]>,
    ) -> Result<Cow<'d, [u8]>, String> {
        let rules = self.rules(path)?;
        let out: Cow<'d, [u8]> = match &rules.driver {
            Some((name, Some(clean), _, required)) => {
                Cow::Owned(self.run_driver(path, name, clean, *required, data)?)
            }
            _ => Cow::Borrowed(data),
        };
        // CRLF → LF only where there is a CR to take out.
        let strip = |out: Cow<'d, [u8]>| {
            if out.contains(&b'\r') {
                Cow::Owned(crlf_to_lf(&out))
            } else {
                out
            }
        };
        Ok(match rules.eol.unwrap_or(Eol::None) {
            Eol::None => out,
            Eol::Input | Eol::Crlf => strip(out),
            Eol::AutoInput | Eol::AutoCrlf if looks_binary(&out) => out,
            Eol::AutoInput | Eol::AutoCrlf if previous.is_some_and(|p| p.contains(&b'\r')) => out,
            Eol::AutoInput | Eol::AutoCrlf => strip(out),
        })
    }

    /// Whether [`Convert::to_repo_over`] may change `path`'s content at
    /// all (a clean filter or an end-of-line rule applies to it): when not,
    /// a worktree file is its blob byte for byte.
    pub fn converts_to_repo(&self, path: &str) -> Result<bool, String> {
        let rules = self.rules(path)?;
        Ok(!matches!(rules.eol, None | Some(Eol::None))
            || matches!(&rules.driver, Some((_, Some(_), _, _))))
    }

    /// Whether [`Convert::to_repo_over`] reads `previous` for `path` (only
    /// `text=auto` and `core.autocrlf` do: "safer autocrlf").
    pub fn reads_previous(&self, path: &str) -> Result<bool, String> {
        Ok(matches!(
            self.rules(path)?.eol,
            Some(Eol::AutoInput | Eol::AutoCrlf)
        ))
    }

    /// Repository bytes → the worktree's (`git checkout`): LF → CRLF where
    /// the rules say, then the driver's `smudge`.
    ///
    /// Borrowed when nothing converts (a large file is not copied).
    pub fn to_worktree<'d>(&self, path: &str, data: &'d [u8]) -> Result<Cow<'d, [u8]>, String> {
        let rules = self.rules(path)?;
        let has_lf = || data.contains(&b'\n');
        let mut out = match rules.eol.unwrap_or(Eol::None) {
            Eol::Crlf if has_lf() => Cow::Owned(lf_to_crlf(data)),
            Eol::AutoCrlf if !looks_binary(data) && !data.contains(&b'\r') && has_lf() => {
                Cow::Owned(lf_to_crlf(data))
            }
            _ => Cow::Borrowed(data),
        };
        if let Some((name, _, Some(smudge), required)) = &rules.driver {
            out = Cow::Owned(self.run_driver(path, name, smudge, *required, &out)?);
        }
        Ok(out)
    }

    /// Whether [`Convert::to_worktree`] may change `path`'s content at all
    /// (an end-of-line rule or a smudge filter applies to it): when not, a
    /// blob is the worktree's file byte for byte.
    pub fn converts_to_worktree(&self, path: &str) -> Result<bool, String> {
        let rules = self.rules(path)?;
        Ok(matches!(rules.eol, Some(Eol::Crlf | Eol::AutoCrlf))
            || matches!(&rules.driver, Some((_, _, Some(_), _))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_endings_round_trip() {
        assert_eq!(crlf_to_lf(b"a\r\nb\r\n\r\n"), b"a\nb\n\n");
        assert_eq!(crlf_to_lf(b"a\rb"), b"a\rb");
        assert_eq!(lf_to_crlf(b"a\nb\r\nc\n"), b"a\r\nb\r\nc\r\n");
        assert_eq!(lf_to_crlf(b"\n"), b"\r\n");
        assert!(looks_binary(b"a\0b"));
        assert!(looks_binary(b"a\rb"));
        assert!(!looks_binary(b"plain text\r\nwith crlf\r\n"));
        assert!(!looks_binary(b"dos text\r\n\x1a"));
        // Line feeds are no printable characters, as git counts them: one
        // control byte among many empty lines is binary.
        let mut lines = vec![1u8];
        lines.extend(std::iter::repeat_n(b'\n', 200));
        lines.extend(b"ab");
        assert!(looks_binary(&lines));
    }
}
