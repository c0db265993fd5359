//! git-steps' engine: resume-equivalent agent steps on git.
//!
//! An agent run is a sequence of recorded decisions (steps). Each applied
//! step is exactly one commit whose trailer block — `Step-Id`, `Step-Run`,
//! `Step-Decision`, `Step-Index` — is its receipt: the hunk and the receipt
//! are one object, so they become durable together when the branch update
//! is.
//!
//! **The invariant.** A resumed run produces the same artifact, with the same
//! fingerprint, as an uninterrupted run of the same steps — or it refuses
//! loudly and changes nothing. Rerunning the same `apply` after a crash *is*
//! the resume: steps with receipts are skipped, a redelivered step lands once,
//! a different decision under a used id or a duplicated hunk is refused.
//!
//! Above this crate: `git-steps-matrix` (the crash matrix, which drives
//! the binary) and `git-steps`, the command line and the MCP server,
//! which re-exports this crate whole.
//!
//! ## Crates and layers
//!
//! Below the engine sit four crates the compiler keeps apart from it;
//! none of them can import it (cargo would not build a cycle):
//!
//! - [`error`] (`git-steps-error`): typed errors, refusals and the SPEC's
//!   exit codes;
//! - [`plan`] (`git-steps-plan`): what an agent decided — the step object
//!   and its digest, the path rules, the edit formats, canonical JSON, the
//!   schema — with no libgit2, OpenSSL or tokio;
//! - `git-steps-io`: git and disk I/O, re-exported here as [`keys`],
//!   [`backoff`], [`os`], [`git`], [`sign`], [`crash`], [`progress`],
//!   [`lock`] and [`flush`]; the one crate with `unsafe` code. This crate
//!   forbids it;
//! - [`sync::remote`] (`git-steps-remote`): the durable remote, reached
//!   through one transport trait, and the one retry rule of its pushes
//!   and reads ([`settings::remote`] is its `spec`).
//!
//! `ls src` shows the engine's domains: `tree/` (steps applied to trees in
//! the object database), `history/` (receipts and the scan of them),
//! `sync/` (the durable remote), `workdir/` (this box's worktree and
//! index), `run/` (sessions, the plan loop and the agent loop), and at the
//! top level [`settings`].
//!
//! Every module uses only the crates below, the modules listed before it
//! here, and its own submodules; the test `layers_point_down` (in the
//! top package, `git-steps`)
//! reads this list and every source file (and `git-steps-io`'s list and
//! files), and fails on an import that points up. Bottom to top:
//!
//! 1. [`tree::guard`]: the path rules applied to whole trees;
//! 2. [`tree::hunks`]: hunk identity and the duplicated-hunk count;
//! 3. [`tree::fingerprint`]: artifact and history fingerprints;
//! 4. [`tree::convert`]: end-of-line conversion and filter drivers, as git applies them;
//! 5. [`tree::build`]: a step applied to a tree in the object database;
//! 6. [`history::trailers`]: git's own trailer reader, ported;
//! 7. [`history::receipt`]: the receipt trailer block, written and read;
//! 8. [`history::packscan`]: a long run's commits read in bulk from the packs;
//! 9. [`history::ledger`]: the history scan into the applied set;
//! 10. [`history::replay`]: the steps' hunks replayed into the hunks still in effect;
//! 11. [`history::shared`]: the shared hunk cache's format, checked against the ledger;
//! 12. [`history::cache`]: the receipt cache, a verified copy of the ledger;
//! 13. [`settings`]: `steps.*` config and the run's durable domain, as plain data;
//! 14. [`workdir::worktree`]: bringing worktree and index up to a step;
//! 15. [`workdir::torn`]: the index and the run's branch, mended after a power cut tore them;
//! 16. [`workdir::repair`]: finishing a worktree a crashed step left behind;
//! 17. [`sync::remote`]: fetch and compare-and-swap push of the durable branch (the `git-steps-remote` crate);
//! 18. [`sync::share`]: publishing and fetching the shared hunk cache;
//! 19. [`sync::reconcile`]: bringing local and durable branches together;
//! 20. [`run::decider`]: asking the external decider for the next step;
//! 21. [`run::ahead`]: the decider's answer asked ahead, kept on this box until it is used;
//! 22. [`run::chain`]: the run's side refs (journal, outcomes, kept run), moved by compare-and-swap;
//! 23. [`run::journal`]: recorded decisions, durable before they are applied;
//! 24. [`run::outcomes`]: the recorded outcomes of a run's effects;
//! 25. [`run::supervisor`]: commands that die with their runner (effects; hooks off Linux);
//! 26. [`run::deliver`]: one effect delivered, tried with its idempotency key;
//! 27. [`run::authority`]: who may make an effect happen from this box, and where a secret may go;
//! 28. [`run::agreement`]: the plan against the history;
//! 29. [`run::hooks`]: `pre-commit` and `commit-msg` as checks (`steps.hooks`);
//! 30. [`run::staging`]: the steps staged and not durable yet;
//! 31. [`run::bringup`]: a box brought up before the first step: lock, repair, reconcile;
//! 32. [`run::session`]: one run from lock to fingerprints, and its `Reporter`;
//! 33. [`run::effects`]: a session's effects, delivered once their steps are durable;
//! 34. [`run::branch`]: the run's branch moved, on the remote (the commit point) and here;
//! 35. [`run::committer`]: a flush's writes in their one order (noted, pushed, landed; or landed, then pushed);
//! 36. [`run::commit`]: a step staged (checked, its objects and commit written) and the flush of the staged steps;
//! 37. [`run::overlap`]: the agent loop's step with its push behind the decider;
//! 38. [`run::provenance`]: the run kept under refs/steps/runs/, its squash message, a merge checked;
//! 39. [`run::report`]: what `apply` and `run` report;
//! 40. [`run::engine`]: the plan loop (`apply`);
//! 41. [`run::record`]: the worktree's own changes recorded as a step (`record`);
//! 42. [`run::adopt`]: commits without a receipt joining the run (`adopt`);
//! 43. [`run::undo`]: rewinding as a step (`undo`);
//! 44. [`run::agent`]: the agent loop (`run --decider`);
//! 45. [`run::inspect`]: status, log, verify, fingerprint.

#![forbid(unsafe_code)]

pub mod history;
pub mod run;
pub mod settings;
pub mod sync;
pub mod tree;
pub mod workdir;

/// Typed errors, refusals and the SPEC's exit codes: the
/// `git-steps-error` crate, below everything.
pub use git_steps_error as error;
/// git and disk I/O: the `git-steps-io` crate (libgit2, git's files
/// written as git writes them, locks, flushing, signing, crash points,
/// the system calls beyond std), the one crate with `unsafe` code.
pub use git_steps_io::{backoff, crash, flush, git, keys, lock, os, progress, sign};
/// What an agent decided: the `git-steps-plan` crate (the step format, the
/// edit formats, canonical JSON, the schema), which cannot import the
/// engine and builds without libgit2.
pub use git_steps_plan as plan;

pub use error::{Error, Refusal, RefusalKind, Result};
