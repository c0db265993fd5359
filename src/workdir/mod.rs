//! This box's repository: its locks, its worktree and index.
//!
//! Owns one runner per repository and git-style lock files ([`lock`]),
//! bringing worktree and index up to a step ([`worktree`]), and finishing
//! an update a crash interrupted ([`repair`]). Invariant: nothing here
//! overwrites work no step explains; what a repair replaces is saved first.

pub mod lock;
pub mod repair;
pub mod worktree;
