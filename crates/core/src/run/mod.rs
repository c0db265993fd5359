//! Runs: a plan applied, or the agent loop, and what they report.
//!
//! Owns the order of one step's writes ([`commit`]), one run session that
//! `apply`, `resume` and `run` share ([`session`]) and the steps it has
//! staged ([`staging`]), the plan loop
//! ([`engine`]), the agent loop ([`agent`]) with its [`decider`] and
//! [`journal`], the worktree's own changes recorded as a step ([`record`]),
//! commits without a receipt joining the run ([`adopt`]), rewinding as a
//! step ([`undo`]), the run kept and checked after its merge
//! ([`provenance`]), the effects of durable steps ([`effects`], delivered
//! by [`deliver`], their outcomes in [`outcomes`]),
//! what `apply` and `run` report ([`report`]),
//! and the read-only views ([`inspect`]). Invariant: a step is
//! reported done only after its receipt is durable.

pub mod adopt;
pub mod agent;
pub mod agreement;
pub mod ahead;
pub mod authority;
mod branch;
mod bringup;
pub mod chain;
pub mod commit;
mod committer;
pub mod decider;
pub mod deliver;
pub mod effects;
pub mod engine;
pub mod hooks;
pub mod inspect;
pub mod journal;
pub mod outcomes;
mod overlap;
pub mod provenance;
pub mod record;
pub mod report;
pub mod session;
pub mod staging;
pub mod supervisor;
pub mod undo;
