//! git-steps: resume-equivalent agent steps on git — the command line and
//! the MCP server, on top of the workspace's crates.
//!
//! Every step is one git commit whose trailer is its receipt; a resumed
//! run produces the same artifact, with the same fingerprint, as an
//! uninterrupted run of the same steps, or refuses loudly and changes
//! nothing (the engine's own documentation, `git_steps_core`, says how).
//!
//! ## Crates
//!
//! Bottom to top; each may use only those below it, and cargo builds no
//! cycle:
//!
//! 1. `git-steps-error` (`crates/error`): typed errors, refusals and the
//!    SPEC's exit codes;
//! 2. `git-steps-plan` (`crates/plan`): what an agent decided — the step
//!    object and its digest, the edit formats, canonical JSON, the schema;
//!    no libgit2, OpenSSL or tokio;
//! 3. `git-steps-io` (`crates/io`): git and disk I/O — libgit2, git's
//!    files written as git writes them, locks, flushing, signing, crash
//!    points, the system calls beyond std; the only crate with `unsafe`
//!    code;
//! 4. `git-steps-remote` (`crates/remote`): the durable remote — one
//!    transport trait over git's CLI, libgit2, the smart-HTTP client and a
//!    bare repository on this machine, compare-and-swap pushes settled by
//!    asking the remote, and the one retry rule;
//! 5. `git-steps-core` (`crates/core`): the engine — trees, history,
//!    settings, the worktree, sessions and the two loops (the remote
//!    crate is its `sync::remote`);
//! 6. `git-steps-matrix` (`crates/matrix`): the crash matrix, the
//!    power-loss recorder and the classic runner, which drive the binary;
//! 7. this crate: [`cli`], the command line and its rendering, and `git
//!    steps mcp`.
//!
//! This crate re-exports the engine whole (`git_steps::run`,
//! `git_steps::git`, …) and the matrix as [`matrix`], so a program that
//! embeds git-steps names one crate.

#![forbid(unsafe_code)]

pub mod cli;
#[cfg(test)]
mod source_checks;

pub use git_steps_core::*;
/// The crash matrix: the `git-steps-matrix` crate (the `harness` feature).
#[cfg(feature = "harness")]
pub use git_steps_matrix as matrix;
