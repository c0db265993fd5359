//! Typed errors and refusals, and the exit code each one maps to.
//!
//! Owns the SPEC's exit-code table. Invariant: every failure the engine can
//! report is one of these variants, so `main` never has to guess a code, and
//! every refusal carries what was seen, what would have happened, and what the
//! user can run next.

#![forbid(unsafe_code)]

use std::fmt;

#[cfg(feature = "git2")]
mod libgit2;
#[cfg(feature = "git2")]
pub use libgit2::*;

/// The SPEC's exit codes.
pub mod exit {
    pub const OK: u8 = 0;
    pub const ERROR: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const REFUSED: u8 = 3;
    pub const REMOTE_MOVED: u8 = 4;
}

/// Why a refusal happened; stable names for `--json` consumers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// A step id already has a receipt with another decision digest.
    DigestMismatch,
    /// A hunk repeats a change an earlier step made and that is still in effect.
    DuplicateHunk,
    /// The run's history holds a commit without a receipt of this run.
    ForeignCommit,
    /// The worktree or index has changes no step explains.
    DirtyWorktree,
    /// Local and durable histories have diverged.
    Diverged,
    /// The history breaks an invariant (duplicate ids, malformed receipt).
    BrokenHistory,
    /// The decision journal disagrees with the log (a cursor ahead of it,
    /// or another decision recorded where a step was applied).
    JournalMismatch,
    /// The decider proposed a step whose id already has a receipt.
    RepeatedStep,
    /// A tree holds an entry that must not reach the worktree (a `.git` or
    /// `..` name, a symlink out of the repository).
    UnsafeTree,
    /// The plan and the history disagree: a receipt the plan does not hold
    /// at that position, or a plan step missing before an applied one.
    PlanMismatch,
    /// A client hook run as a check (`steps.hooks=true`) failed, or changed
    /// the step's content, its message or the worktree.
    HookRejected,
}

impl RefusalKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalKind::DigestMismatch => "digest-mismatch",
            RefusalKind::DuplicateHunk => "duplicate-hunk",
            RefusalKind::ForeignCommit => "foreign-commit",
            RefusalKind::DirtyWorktree => "dirty-worktree",
            RefusalKind::Diverged => "diverged",
            RefusalKind::BrokenHistory => "broken-history",
            RefusalKind::JournalMismatch => "journal-mismatch",
            RefusalKind::RepeatedStep => "repeated-step",
            RefusalKind::UnsafeTree => "unsafe-tree",
            RefusalKind::PlanMismatch => "plan-mismatch",
            RefusalKind::HookRejected => "hook-rejected",
        }
    }
}

/// Going on would break the invariant. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub kind: RefusalKind,
    /// The step this refusal is about, if any.
    pub step: Option<String>,
    /// What git-steps saw.
    pub saw: String,
    /// What it would have done had it gone on.
    pub would: String,
    /// What the user can do next (a command where there is one).
    pub hint: Hint,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.step {
            Some(step) => write!(f, "refused step {step}: {}", self.saw),
            None => write!(f, "refused: {}", self.saw),
        }
    }
}

impl std::error::Error for Refusal {}

/// What the user (or the runner driving git-steps) can do next, as a value
/// the CLI renders: what to do first, in words, and whether running the
/// same command again is then the way on ([`Rerun`]), with what that rerun
/// does. `--json` carries the words as `hint` and the rerun as `"rerun":
/// "now" | "after" | "no"`, so a runner need not parse English to know
/// whether it may simply retry.
///
/// Boxed: errors carry one on their failure path only, and stay small.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hint(Box<HintParts>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct HintParts {
    first: String,
    rerun: Rerun,
    because: String,
}

/// Whether, and when, running the same command again is the way on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rerun {
    /// Not the way on, or not alone: the words say what is.
    No,
    /// Once what the words say first is done: a fix someone (a person,
    /// the agent) makes. Rerunning before it fails the same way.
    After,
    /// As it is: at once, or once another writer is done or the remote
    /// answers, which nobody needs to do anything for. A runner may retry
    /// (with backoff).
    Now,
}

impl Rerun {
    /// Its `--json` name.
    pub fn as_str(self) -> &'static str {
        match self {
            Rerun::No => "no",
            Rerun::After => "after",
            Rerun::Now => "now",
        }
    }
}

impl Hint {
    fn new(first: impl Into<String>, rerun: Rerun) -> Self {
        Hint(Box::new(HintParts {
            first: first.into(),
            rerun,
            because: String::new(),
        }))
    }

    /// Advice in words; the same command is not the way on (or not alone).
    pub fn say(text: impl Into<String>) -> Self {
        Hint::new(text, Rerun::No)
    }

    /// Run the same command again, as it is.
    pub fn rerun() -> Self {
        Hint::new(String::new(), Rerun::Now)
    }

    /// `wait` (another writer finishing, the remote answering: nothing
    /// anybody does), then run the same command again.
    pub fn rerun_when(wait: impl Into<String>) -> Self {
        Hint::new(wait, Rerun::Now)
    }

    /// Do `first` (a fix), then run the same command again.
    pub fn rerun_after(first: impl Into<String>) -> Self {
        Hint::new(first, Rerun::After)
    }

    /// What the rerun does (why it is safe), said after it.
    pub fn because(mut self, what: impl Into<String>) -> Self {
        self.0.because = what.into();
        self
    }

    /// Whether, and when, running the same command again is the way on.
    pub fn next(&self) -> Rerun {
        self.0.rerun
    }
}

impl fmt::Display for Hint {
    /// "FIRST, then rerun the same command: BECAUSE", with the parts it has.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let HintParts {
            first,
            rerun,
            because,
        } = &*self.0;
        f.write_str(first)?;
        if *rerun != Rerun::No {
            if !first.is_empty() {
                f.write_str(", then ")?;
            }
            f.write_str("rerun the same command")?;
        }
        if !because.is_empty() {
            write!(f, ": {because}")?;
        }
        Ok(())
    }
}

impl From<String> for Hint {
    fn from(text: String) -> Self {
        Hint::say(text)
    }
}

impl From<&str> for Hint {
    fn from(text: &str) -> Self {
        Hint::say(text)
    }
}

/// Everything the engine can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The plan or a step is malformed (bad JSON, bad id, bad path, ...).
    #[error("{}", located(.step.as_deref(), *.line, .message))]
    Input {
        step: Option<String>,
        line: Option<usize>,
        message: String,
    },
    /// A step is well-formed but cannot be applied to the tree it meets.
    #[error("step {step}: {message}")]
    Apply {
        step: String,
        message: String,
        hint: Option<Hint>,
    },
    #[error(transparent)]
    Refused(Box<Refusal>),
    /// The durable branch moved under us: another writer won the race.
    #[error("the remote moved: {message}")]
    RemoteMoved { message: String, hint: Hint },
    /// Another git-steps process holds a lock this command needs (this
    /// repository's `steps.lock`, a ref's lock): rerun when it is done.
    #[error("{message}")]
    Busy { message: String, hint: Hint },
    /// The command cannot run as invoked (a run not set up where it would
    /// land on the default branch, say): nothing was read or written.
    #[error("{message}")]
    Usage { message: String, hint: Hint },
    /// A failure of another kind while one step was being made (signing
    /// its commit, say): the step is named, the code and kind are the
    /// inner error's.
    #[error("step {step}: {error}")]
    AtStep { step: String, error: Box<Error> },
    /// A failure outside the plan: git, I/O, configuration. `cause` sorts
    /// it for code that branches on it (a retry, a hint); exit code and
    /// `--json` kind are the same for every cause.
    #[error("{context}")]
    Other {
        cause: Cause,
        context: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
        hint: Option<Hint>,
    },
}

/// What an [`Error::Other`] is, for code that decides by it: never the
/// words of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// Not sorted further (git's own errors carry their class as source).
    General,
    /// A bug: the engine called its own parts out of order.
    Internal,
    /// The network or a remote. `spurious`: trying again may work (the
    /// server said 502/503/504, the connection broke or timed out).
    Remote { spurious: bool },
    /// A file of this machine could not be read or written.
    Local,
    /// A program git-steps runs (a decider, a hook, a signer, git) could
    /// not be run or failed.
    Program,
    /// Data git-steps wrote or git keeps does not read back (a commit, a
    /// journal, a cache line).
    Corrupt,
    /// A setting or the environment is not usable.
    Config,
}

/// Whether a message from outside — git's stderr, libgit2's own message —
/// says a transport failure worth trying again: the server said it is
/// unavailable (HTTP 502, 503, 504) or the connection broke (reset, timed
/// out, closed early). Not: refusals, authentication, a missing repository.
/// Read once, where such a message comes in; code then asks
/// [`Error::is_spurious`].
pub fn spurious_text(message: &str) -> bool {
    let m = message.to_lowercase();
    [
        "status code: 502",
        "status code: 503",
        "status code: 504",
        "http 502",
        "http 503",
        "http 504",
        "returned error: 502",
        "returned error: 503",
        "returned error: 504",
        "service unavailable",
        "bad gateway",
        "gateway timeout",
        "connection reset",
        "timed out",
        "early eof",
        "unexpected disconnect",
        "the remote end hung up unexpectedly",
    ]
    .iter()
    .any(|p| m.contains(p))
}

fn located(step: Option<&str>, line: Option<usize>, message: &str) -> String {
    match (step, line) {
        (Some(s), Some(l)) => format!("plan line {l}, step {s}: {message}"),
        (Some(s), None) => format!("step {s}: {message}"),
        (None, Some(l)) => format!("plan line {l}: {message}"),
        (None, None) => message.to_string(),
    }
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Input { .. } | Error::Apply { .. } | Error::Other { .. } => exit::ERROR,
            Error::Refused(_) => exit::REFUSED,
            Error::RemoteMoved { .. } | Error::Busy { .. } => exit::REMOTE_MOVED,
            Error::Usage { .. } => exit::USAGE,
            Error::AtStep { error, .. } => error.exit_code(),
        }
    }

    /// A stable machine name for `--json`.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Input { .. } => "bad-input",
            Error::Apply { .. } => "does-not-apply",
            Error::Refused(r) => r.kind.as_str(),
            Error::RemoteMoved { .. } => "remote-moved",
            Error::Busy { .. } => "busy",
            Error::Usage { .. } => "usage",
            Error::Other { .. } => "error",
            Error::AtStep { error, .. } => error.kind(),
        }
    }

    pub fn hint(&self) -> Option<&Hint> {
        match self {
            Error::Refused(r) => Some(&r.hint),
            Error::RemoteMoved { hint, .. }
            | Error::Busy { hint, .. }
            | Error::Usage { hint, .. } => Some(hint),
            Error::Other { hint, .. } => hint.as_ref(),
            Error::Apply { hint, .. } => hint.as_ref(),
            Error::Input { .. } => None,
            Error::AtStep { error, .. } => error.hint(),
        }
    }

    pub fn input(message: impl Into<String>) -> Self {
        Error::Input {
            step: None,
            line: None,
            message: message.into(),
        }
    }

    pub fn apply(step: &str, message: impl Into<String>) -> Self {
        Error::Apply {
            step: step.to_string(),
            message: message.into(),
            hint: None,
        }
    }

    /// Name `step` in an error that does not name one already.
    pub fn at_step(self, step: &str) -> Self {
        match &self {
            Error::Input { step: Some(_), .. } | Error::Apply { .. } | Error::AtStep { .. } => self,
            Error::Refused(r) if r.step.is_some() => self,
            _ => Error::AtStep {
                step: step.to_string(),
                error: Box::new(self),
            },
        }
    }

    pub fn other(context: impl Into<String>) -> Self {
        Error::caused(Cause::General, context)
    }

    /// An [`Error::Other`] of this cause.
    pub fn caused(cause: Cause, context: impl Into<String>) -> Self {
        Error::Other {
            cause,
            context: context.into(),
            source: None,
            hint: None,
        }
    }

    /// A bug: the engine's parts called out of order.
    pub fn internal(context: impl Into<String>) -> Self {
        Error::caused(Cause::Internal, format!("internal: {}", context.into()))
    }

    /// A failure of the network or of a remote; `spurious` if trying again
    /// may work (then its hint, until another is given, is to rerun as it
    /// is once the remote answers: [`hints::remote_unavailable`]).
    pub fn remote(context: impl Into<String>, spurious: bool) -> Self {
        let e = Error::caused(Cause::Remote { spurious }, context);
        match spurious {
            true => e.with_hint(hints::remote_unavailable()),
            false => e,
        }
    }

    /// A file of this machine could not be read or written (no OS error
    /// at hand; where there is one, [`Error::io`]).
    pub fn local(context: impl Into<String>) -> Self {
        Error::caused(Cause::Local, context)
    }

    /// `what` failed on this machine with the OS error `e`: "WHAT: E",
    /// with the hint its kind asks for ([`hints::local_failure_of`]: a full
    /// disk, a read-only file system, a refused permission, or any other
    /// file-system error). The one way an I/O error becomes an [`Error`].
    /// `e` stays its source, for code that asks its kind ([`Error::io_kind`]:
    /// a reader that went away is not a failure); its words are already in
    /// the message.
    pub fn io(what: impl Into<String>, e: std::io::Error) -> Self {
        Error::Other {
            cause: Cause::Local,
            context: format!("{}: {e}", what.into()),
            hint: Some(hints::local_failure_of(e.kind())),
            source: Some(Box::new(e)),
        }
    }

    /// The kind of the OS error an [`Error::io`] (or one inside an
    /// [`Error::AtStep`]) came from.
    pub fn io_kind(&self) -> Option<std::io::ErrorKind> {
        match self {
            Error::Other {
                source: Some(s), ..
            } => s.downcast_ref::<std::io::Error>().map(std::io::Error::kind),
            Error::AtStep { error, .. } => error.io_kind(),
            _ => None,
        }
    }

    /// A program git-steps runs could not be run or failed.
    pub fn program(context: impl Into<String>) -> Self {
        Error::caused(Cause::Program, context)
    }

    /// Data that does not read back.
    pub fn corrupt(context: impl Into<String>) -> Self {
        Error::caused(Cause::Corrupt, context)
    }

    /// A setting or the environment is not usable.
    pub fn config(context: impl Into<String>) -> Self {
        Error::caused(Cause::Config, context)
    }

    /// What an [`Error::Other`] is (None for the other variants).
    pub fn cause(&self) -> Option<Cause> {
        match self {
            Error::Other { cause, .. } => Some(*cause),
            Error::AtStep { error, .. } => error.cause(),
            _ => None,
        }
    }

    /// Whether trying the same remote operation again may work: a remote
    /// failure said to be spurious where it came in, or libgit2's own
    /// error of that kind.
    pub fn is_spurious(&self) -> bool {
        match self {
            Error::Other {
                cause: Cause::Remote { spurious },
                ..
            } => *spurious,
            #[cfg(feature = "git2")]
            Error::Other {
                source: Some(s), ..
            } => s.downcast_ref::<git2::Error>().is_some_and(spurious_git2),
            Error::AtStep { error, .. } => error.is_spurious(),
            _ => false,
        }
    }

    /// Add a sentence to the message of an [`Error::Other`], a lost race
    /// ([`Error::RemoteMoved`], [`Error::Busy`]) or the error inside an
    /// [`Error::AtStep`] (others unchanged: their messages are the
    /// step's own).
    pub fn with_note(mut self, note: impl AsRef<str>) -> Self {
        match &mut self {
            Error::Other {
                context: message, ..
            }
            | Error::RemoteMoved { message, .. }
            | Error::Busy { message, .. } => {
                message.push_str(" (");
                message.push_str(note.as_ref());
                message.push(')');
            }
            Error::AtStep { error, .. } => {
                let inner = std::mem::replace(error.as_mut(), Error::other(String::new()));
                **error = inner.with_note(note);
            }
            _ => {}
        }
        self
    }

    /// Set the hint of an [`Error::Other`] or [`Error::Apply`] (others
    /// unchanged).
    pub fn with_hint(mut self, new_hint: impl Into<Hint>) -> Self {
        if let Error::Other { hint, .. } | Error::Apply { hint, .. } = &mut self {
            *hint = Some(new_hint.into());
        }
        self
    }
}

impl From<Refusal> for Error {
    fn from(r: Refusal) -> Self {
        Error::Refused(Box::new(r))
    }
}

/// The hints several errors give, made once.
pub mod hints {
    use super::Hint;

    /// What a lock file another writer holds, or one stopped before it
    /// could remove it, asks of the user.
    pub fn locked() -> Hint {
        Hint::rerun_after("a lock file is in the way: another git process is writing this repository, or one was stopped (killed, or by a power cut) before it removed its lock; if no git process is running here, remove the lock file named above")
    }

    /// What a file of this repository that git cannot read either asks of
    /// the user (git-steps repairs only what it can prove it wrote).
    pub fn unreadable() -> Hint {
        Hint::say("git cannot read that file either (`git status` fails too): a power cut before git flushed it, or another tool wrote it. git-steps did not write it and does not guess what it held: restore it (HEAD holds `ref: refs/heads/<branch>`), or take a fresh clone (`git clone`, `git steps init`, then the same command): the remote holds every step reported applied")
    }

    /// What an object file of this repository that git cannot read asks
    /// of the user.
    pub fn damaged_object() -> Hint {
        Hint::say("an object file of this repository is damaged (`git fsck` names it): a power cut before git flushed it (git does not fsync a clone's objects by default), or a disk error. git-steps repairs only a file it can prove it wrote and a cut tore (its boot record), and has no such proof here. Nothing was changed: take a fresh clone (`git clone`, `git steps init`, then the same command), which resumes from the remote, or restore the file from another clone")
    }

    /// What a remote that said it is unavailable, or a connection that
    /// broke, asks (once the retries are spent): nothing but time.
    pub fn remote_unavailable() -> Hint {
        Hint::rerun_when("wait until the remote answers again")
            .because("it asks the remote first, so nothing is applied twice")
    }

    /// What a file-system error of this kind on this machine asks of the
    /// user: a full disk, a read-only file system and a refused permission
    /// each said as such, anything else as a file-system error.
    pub fn local_failure_of(kind: std::io::ErrorKind) -> Hint {
        use std::io::ErrorKind as K;
        Hint::rerun_after(match kind {
            K::StorageFull | K::QuotaExceeded => {
                "this machine's disk is full (or a disk quota is reached): free some space"
            }
            K::ReadOnlyFilesystem => {
                "the file system is read-only here: make it writable, or work where it is"
            }
            K::PermissionDenied => {
                "this user may not read or write there: fix the permissions (or run as the repository's owner)"
            }
            _ => "a file-system error (a full disk, an I/O error, permissions) on this machine: fix it",
        })
        .because("nothing is lost")
    }
}

impl From<std::io::Error> for Error {
    /// An I/O failure no caller put in words: [`Error::io`] with "I/O".
    fn from(e: std::io::Error) -> Self {
        Error::io("I/O", e)
    }
}

/// Attach context to git and I/O failures.
pub trait Context<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> Context<T> for std::result::Result<T, E> {
    /// An I/O error becomes [`Error::io`] (the OS's words in the message,
    /// the hint its kind asks for); any other keeps its error as the
    /// source.
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| {
            let e: Box<dyn std::error::Error + Send + Sync> = Box::new(e);
            match e.downcast::<std::io::Error>() {
                Ok(io) => Error::io(what(), *io),
                Err(e) => Error::Other {
                    cause: Cause::General,
                    context: what(),
                    source: Some(e),
                    hint: None,
                },
            }
        })
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// A hint renders its parts in one order, and says whether the same
    /// command is the way on, and when; plain words never claim a rerun.
    #[test]
    fn a_hint_renders_its_parts_and_says_when_to_rerun() {
        let cases = [
            (Hint::say("look at it"), "look at it", Rerun::No),
            (Hint::rerun(), "rerun the same command", Rerun::Now),
            (
                Hint::rerun_when("let it finish"),
                "let it finish, then rerun the same command",
                Rerun::Now,
            ),
            (
                Hint::rerun_after("fix the disk"),
                "fix the disk, then rerun the same command",
                Rerun::After,
            ),
            (
                Hint::rerun_after("fix the disk").because("nothing is lost"),
                "fix the disk, then rerun the same command: nothing is lost",
                Rerun::After,
            ),
            (
                Hint::rerun().because("it reconciles"),
                "rerun the same command: it reconciles",
                Rerun::Now,
            ),
            (Hint::from("words"), "words", Rerun::No),
        ];
        for (hint, text, rerun) in cases {
            assert_eq!(hint.to_string(), text);
            assert_eq!(hint.next(), rerun, "{text}");
        }
        assert_eq!(
            [Rerun::No, Rerun::After, Rerun::Now].map(Rerun::as_str),
            ["no", "after", "now"]
        );
    }

    /// The error's hint is the value it was given, through `AtStep` too;
    /// `with_hint` takes words or a typed hint.
    #[test]
    fn an_error_keeps_its_typed_hint() {
        let e = Error::local("disk").with_hint(hints::local_failure_of(std::io::ErrorKind::Other));
        assert_eq!(e.hint().unwrap().next(), Rerun::After);
        let e = e.at_step("s1");
        assert_eq!(e.hint().unwrap().next(), Rerun::After);
        assert!(e.hint().unwrap().to_string().ends_with("nothing is lost"));
        let e = Error::other("x").with_hint("read the log");
        assert_eq!(e.hint().unwrap().next(), Rerun::No);
        // A remote that may answer if asked again: a rerun as it is.
        let e = Error::remote("503", true);
        assert_eq!(e.hint().unwrap().next(), Rerun::Now);
        assert!(Error::remote("404", false).hint().is_none());
    }

    /// An OS error's kind picks the words; every one is a fix, then a
    /// rerun; the message keeps the OS's own words after the caller's.
    #[test]
    fn an_io_error_says_what_failed_and_what_it_asks() {
        use std::io::{Error as Io, ErrorKind as K};
        let cases = [
            (Io::from_raw_os_error(28), "disk is full"),  // ENOSPC
            (Io::from(K::QuotaExceeded), "disk is full"), // EDQUOT (122 on Linux, 69 on macOS)
            (Io::from_raw_os_error(30), "read-only"),     // EROFS
            (Io::from_raw_os_error(13), "permissions"),   // EACCES
            (Io::from_raw_os_error(5), "a file-system error"), // EIO
            (Io::other("odd"), "a file-system error"),
        ];
        for (io, words) in cases {
            let os = io.to_string();
            let e = Error::io("cannot write a.txt", io);
            assert_eq!(e.cause(), Some(Cause::Local));
            assert_eq!(e.to_string(), format!("cannot write a.txt: {os}"));
            let hint = e.hint().expect("a hint").to_string();
            assert!(hint.contains(words), "{os}: {hint}");
            assert!(
                hint.ends_with("rerun the same command: nothing is lost"),
                "{hint}"
            );
            assert_eq!(e.hint().unwrap().next(), Rerun::After);
            assert!(e.io_kind().is_some());
        }
        // A reader that went away is known by its kind, at a step too.
        let e = Error::io("cannot write the log", Io::from(K::BrokenPipe)).at_step("s1");
        assert_eq!(e.io_kind(), Some(K::BrokenPipe));
        assert_eq!(Error::local("x").io_kind(), None);
        // `?` on an io::Error goes the same way, and so does `context`.
        let e: Error = Io::from_raw_os_error(28).into();
        assert!(e.to_string().starts_with("I/O: "), "{e}");
        assert!(e.hint().unwrap().to_string().contains("disk is full"));
        let e = Err::<(), _>(Io::from_raw_os_error(30))
            .context(|| "cannot write b.txt".into())
            .unwrap_err();
        assert!(e.to_string().starts_with("cannot write b.txt: "), "{e}");
        assert_eq!(e.cause(), Some(Cause::Local));
        assert!(e.hint().unwrap().to_string().contains("read-only"));
        // Any other error keeps its own as the source, and no hint.
        let e = Err::<(), _>(std::fmt::Error)
            .context(|| "cannot format".into())
            .unwrap_err();
        assert_eq!(e.to_string(), "cannot format");
        assert!(std::error::Error::source(&e).is_some());
        assert!(e.hint().is_none());
    }
}
