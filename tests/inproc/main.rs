//! In-process tests of the engine: the library called directly (no
//! binary), one file per module under test, git's own CLI as the oracle.
//! `snapshots` runs the binary once more for its human output.

mod common;

mod build;
mod commit;
mod ledger;
mod packscan;
mod reconcile;
mod session;
mod snapshots;
mod worktree;
