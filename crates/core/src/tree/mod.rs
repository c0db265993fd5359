//! Trees in the object database: a step applied to a tree, and what a tree
//! is allowed to hold.
//!
//! Owns building a step's tree ([`build`]), the path rules for whole trees
//! ([`guard`]), hunk identity ([`hunks`]), fingerprints ([`fingerprint`]) and
//! the worktree's form of a file against the repository's ([`convert`]).
//! Invariant: nothing here touches the worktree, the index or a ref; every
//! result is an object id or a value computed from objects.

pub mod build;
pub mod convert;
pub mod fingerprint;
pub mod guard;
pub mod hunks;
