//! The durable domain: the remote, and bringing this box level with it.
//!
//! Fetching and compare-and-swap pushing of the run's branch is
//! [`remote`], the `git-steps-remote` crate below the engine; this module
//! owns resume's reconcile of local and durable branches
//! ([`reconcile`]). Invariant: the remote's branch only ever moves forward
//! from the head we last saw, and never by a force push.

pub mod reconcile;
pub use git_steps_remote as remote;
pub mod share;
