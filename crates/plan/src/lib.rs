//! The plan: what an agent decided, before it meets any tree.
//!
//! Owns the step object and its decision digest ([`step`]), the path rules
//! every edit format obeys ([`path`]), and the edit formats themselves
//! ([`formats`], unified diffs among them), and the step's JSON schema
//! (`schema`, with the `schema` feature). Invariant: everything here is a
//! pure function of the step's text; nothing reads a repository.
//!
//! A crate of its own so that the compiler keeps it so: it depends on
//! `git-steps-error` and pure Rust crates only (no libgit2, no OpenSSL,
//! no tokio; CI checks `cargo tree`), and nothing here can import the
//! engine; it builds without a C compiler (its fuzz targets need C++ for
//! libFuzzer, not for the plan).
//! The engine re-exports it as `git_steps::plan`.
//!
//! Bottom to top: [`modes`], [`path`], [`formats`], [`canonical`],
//! [`inplace`], [`effect`], [`step`], [`reader`], `schema`.

#![forbid(unsafe_code)]

use git_steps_error as error;

pub mod canonical;
pub mod effect;
pub mod formats;
pub mod inplace;
pub mod modes;
pub mod path;
pub mod reader;
#[cfg(feature = "schema")]
pub mod schema;
pub mod step;
