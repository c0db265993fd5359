//! This box's worktree and index.
//!
//! Owns mending what a power cut tore ([`torn`]), bringing worktree and
//! index up to a step ([`worktree`]), and finishing an update a crash
//! interrupted ([`repair`]); the locks that
//! keep one runner per repository are [`crate::lock`]'s. Invariant: nothing here
//! overwrites work no step explains; what a repair replaces is saved first.

pub mod repair;
pub mod torn;
pub mod worktree;
