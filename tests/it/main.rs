//! The integration tests: one binary, real repositories, the real `git-steps`
//! binary, audited with the real `git` CLI.

mod core;
mod harness;
