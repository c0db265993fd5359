//! What libgit2's errors are, read once where they come in: a failure
//! worth trying again, one of this machine's files, a damaged object or an
//! unreadable ref, and the [`Error`] each becomes (with the hint it asks
//! for). Only with the `git2` feature, which the engine turns on: the
//! plan crate builds without libgit2.

use super::*;

/// Whether libgit2 failed in a way trying again may cure: a timeout, or a
/// network, HTTP or ssh failure whose message says so. libgit2 reports an
/// HTTP status only in its message.
pub fn spurious_git2(e: &git2::Error) -> bool {
    e.code() == git2::ErrorCode::Timeout
        || (matches!(
            e.class(),
            git2::ErrorClass::Net
                | git2::ErrorClass::Http
                | git2::ErrorClass::Ssh
                | git2::ErrorClass::Ssl
                | git2::ErrorClass::Os
        ) && spurious_text(e.message()))
}

/// Whether libgit2 failed on a file of this machine (the OS refused a
/// read, write, sync or rename), rather than on the network or the data.
pub fn is_local_failure(e: &git2::Error) -> bool {
    matches!(
        e.class(),
        git2::ErrorClass::Os | git2::ErrorClass::Filesystem
    ) || [
        "No space left",
        "Input/output error",
        "Read-only file system",
        "Disk quota exceeded",
        "Disc quota exceeded",
    ]
    .iter()
    .any(|m| e.message().contains(m))
}

/// The kind of OS error a libgit2 message quotes (libgit2 reports the
/// OS's error only in its words: `strerror`'s, as glibc and macOS say it).
pub fn os_error_kind(e: &git2::Error) -> std::io::ErrorKind {
    use std::io::ErrorKind as K;
    let m = e.message();
    [
        ("No space left", K::StorageFull),
        ("Disk quota exceeded", K::QuotaExceeded),
        ("Disc quota exceeded", K::QuotaExceeded), // macOS's spelling
        ("Read-only file system", K::ReadOnlyFilesystem),
        ("Permission denied", K::PermissionDenied),
    ]
    .into_iter()
    .find(|(words, _)| m.contains(words))
    .map_or(K::Other, |(_, kind)| kind)
}

/// A libgit2 error that says an object file of a repository on this disk
/// cannot be read (a loose object empty or cut short, a damaged pack):
/// not the remote's URL, nor its credentials.
pub fn is_damaged_object(e: &git2::Error) -> bool {
    matches!(
        e.class(),
        git2::ErrorClass::Odb | git2::ErrorClass::Zlib | git2::ErrorClass::Object
    ) && !matches!(e.code(), git2::ErrorCode::NotFound)
        || [
            "loose object",
            "packfile",
            "object file is empty",
            "cannot be peeled",
        ]
        .iter()
        .any(|m| e.message().contains(m))
}

/// The ref a libgit2 error says it cannot read (a loose ref file torn by a
/// power cut, or written by another tool).
pub fn unreadable_ref(e: &git2::Error) -> Option<String> {
    let m = e.message();
    let name = m
        .strip_prefix("corrupted loose reference file: ")
        .or_else(|| {
            m.split_once("the reference '")
                .and_then(|(_, rest)| rest.split_once("' cannot be parsed"))
                .map(|(name, _)| name)
        })?;
    let name = name.trim();
    name.starts_with("refs/").then(|| name.to_string())
}

impl From<git2::Error> for Error {
    /// The message stays in the context; the error itself is kept as the
    /// source, so `Caused by:` shows git's class and code.
    fn from(e: git2::Error) -> Self {
        let hint = if e.code() == git2::ErrorCode::Locked {
            // Not the disk: a lock file is there.
            Some(hints::locked())
        } else if e.message().starts_with("corrupted loose reference file: ") {
            // (HEAD, or a ref no caller named: git cannot read it either.)
            Some(hints::unreadable())
        } else if is_damaged_object(&e) {
            Some(hints::damaged_object())
        } else {
            is_local_failure(&e).then(|| hints::local_failure_of(os_error_kind(&e)))
        };
        Error::Other {
            cause: if is_local_failure(&e) || is_damaged_object(&e) {
                Cause::Local
            } else {
                Cause::General
            },
            context: format!("git: {}", e.message()),
            source: Some(Box::new(e)),
            hint,
        }
    }
}
