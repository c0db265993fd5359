//! The plan: what an agent decided, before it meets any tree.
//!
//! Owns the step object and its decision digest ([`step`]), the path rules
//! every edit format obeys ([`path`]), and the edit formats themselves
//! ([`formats`], unified diffs among them), and the step's JSON schema
//! ([`schema`]). Invariant: everything here is a
//! pure function of the step's text; nothing reads a repository.

pub mod canonical;
pub mod effect;
pub mod formats;
pub mod inplace;
pub mod path;
pub mod reader;
#[cfg(feature = "mcp")]
pub mod schema;
pub mod step;
