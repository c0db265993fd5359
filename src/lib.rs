//! git-steps: resume-equivalent agent steps on git.
//!
//! An agent run is a sequence of recorded decisions (steps). Each applied step
//! is exactly one commit whose trailer block — `Step-Id`, `Step-Run`,
//! `Step-Decision` — is its receipt: the hunk and the receipt are one object,
//! so they become durable together when the branch update is.
//!
//! **The invariant.** A resumed run produces the same artifact, with the same
//! fingerprint, as an uninterrupted run of the same steps — or it refuses
//! loudly and changes nothing. Rerunning the same `apply` after a crash *is*
//! the resume: steps with receipts are skipped, a redelivered step lands once,
//! a different decision under a used id or a duplicated hunk is refused.
//!
//! The modules, by domain concept:
//! - [`step`]: the plan and step format, validation, decision digests;
//! - [`path`]: the path rules every edit format obeys;
//! - [`guard`]: the path rules applied to whole trees, before any reaches the worktree;
//! - [`patch`]: unified diffs, parsed and placed on file contents;
//! - [`formats`]: the other edit formats (`edits`, `apply_patch`, `search_replace`);
//! - [`apply`]: a step applied to a tree in the object database;
//! - [`receipt`]: the trailer block, written and read;
//! - [`ledger`]: the history scan into the applied set;
//! - [`index`]: the receipt index, a verified cache of the ledger;
//! - [`hunks`]: hunk identity and the duplicated-hunk count;
//! - [`fingerprint`]: artifact and history fingerprints;
//! - [`worktree`]: bringing worktree and index up to a step;
//! - [`engine`]: the apply loop and its order of writes;
//! - [`repair`]: finishing a worktree a crashed step left behind;
//! - [`agent`]: the agent loop (`run --decider`), git-steps as the runner;
//! - [`decider`]: asking the external decider for the next step;
//! - [`journal`]: recorded decisions, durable before they are applied;
//! - [`remote`]: fetch and compare-and-swap push of the durable branch;
//! - [`reconcile`]: bringing local and durable branches together on resume;
//! - [`lock`]: one runner per repository;
//! - [`crash`]: named crash points at every write boundary;
//! - [`crashmatrix`]: the resume-equivalence matrix, and the classic runner;
//! - [`settings`]: `steps.*` config and durability switches;
//! - [`inspect`]: status, log, verify, fingerprint;
//! - [`cli`]: the command line and its rendering;
//! - [`error`]: typed errors, refusals and exit codes.

pub mod cli;
pub mod crash;
pub mod error;
pub mod git;
pub mod history;
pub mod plan;
pub mod run;
pub mod settings;
pub mod sync;
pub mod tree;
pub mod workdir;

pub use error::{Error, Refusal, RefusalKind, Result};
