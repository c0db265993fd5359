//! The run's history: receipts, and what a scan of them says.
//!
//! Owns the trailer block ([`receipt`]), the scan of a branch into the
//! applied set ([`ledger`]), read in bulk from the packs for a long run
//! ([`packscan`]), the replay of its hunks ([`replay`]), and its verified
//! on-disk cache ([`cache`]).
//! Invariant: the branch is the truth; a cache that does not match it
//! exactly is ignored and rebuilt.

pub mod cache;
pub mod ledger;
pub mod packscan;
pub mod receipt;
pub mod replay;
pub mod shared;
pub mod trailers;
