//! Issue 2: every step becomes one commit whose trailer is its receipt,
//! audited with plain git.
//!
//! Grouped by topic: `receipts` (the trailers plain git reads, and the
//! receipt index that caches them), `applying` (plans applied, dry runs,
//! trees reproduced exactly), `refusals` (what a run refuses, changing
//! nothing), `cli` (settings, the git subcommand, exit codes, error causes)
//! and `crashes` (crash points, and the resumes after them).

mod applying;
mod cli;
mod crashes;
mod duplicates;
mod receipts;
mod refusals;
