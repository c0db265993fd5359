//! The durable domain: the remote, and bringing this box level with it.
//!
//! Owns fetching and compare-and-swap pushing of the run's branch
//! ([`remote`]) and resume's reconcile of local and durable branches
//! ([`reconcile`]). Invariant: the remote's branch only ever moves forward
//! from the head we last saw, and never by a force push.

pub mod reconcile;
pub mod remote;
pub mod share;
