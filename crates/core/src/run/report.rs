//! What a command that applies steps reports: `apply` (and `resume PLAN`)
//! and `run` give one [`Report`], with their steps and what is each
//! command's own.
//!
//! Invariant: a report is made only from a finished session
//! ([`Finished`]), so the head, artifact and history it names are those of
//! steps already durable, and the two commands cannot disagree on what a
//! field means.

use serde::Serialize;

use crate::settings::Settings;
use crate::sync::reconcile::Reconciled;
use crate::workdir::repair::Repair;

use super::outcomes::Delivered;
use super::session::Finished;

/// The result of `apply` or `run`: `S` is a step's outcome, `K` what is
/// the command's own (its fields sit beside the others in `--json`).
#[derive(Debug, Serialize)]
pub struct Report<S, K> {
    pub run: String,
    pub branch: String,
    pub durable: &'static str,
    #[serde(flatten)]
    pub command: K,
    pub repair: Repair,
    pub reconcile: Reconciled,
    pub steps: Vec<S>,
    pub head: Option<String>,
    pub artifact: String,
    pub history: String,
    /// The effects delivered (or whose failure was recorded) by this run.
    pub effects: Vec<Delivered>,
    /// Effects this box held back (`steps.effects`) and those queued
    /// behind them: pending for a box that delivers them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub effects_pending: Vec<String>,
}

impl<S, K> Report<S, K> {
    /// The report of the session `done` finished, in the run `s` names.
    pub fn new(s: &Settings, done: Finished, steps: Vec<S>, command: K) -> Self {
        Report {
            run: s.run.clone(),
            branch: s.branch.clone(),
            durable: s.durable_kind(),
            command,
            repair: done.repair,
            reconcile: done.reconcile,
            steps,
            head: done.head.map(|h| h.to_string()),
            artifact: done.artifact,
            history: done.history,
            effects: done.effects,
            effects_pending: done.effects_pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What reconciling without a remote reports.
    fn local_only() -> Reconciled {
        Reconciled {
            local: None,
            durable: None,
            action: crate::sync::reconcile::Action::LocalOnly,
            switched: None,
        }
    }

    #[derive(Serialize)]
    struct Own {
        dry_run: bool,
    }

    /// The command's own fields sit beside the shared ones, not nested; an
    /// empty `effects_pending` is left out.
    #[test]
    fn a_commands_own_fields_are_flattened_into_the_report() {
        let report = Report {
            run: "r".into(),
            branch: "steps/r".into(),
            durable: "remote",
            command: Own { dry_run: true },
            repair: Repair::Clean,
            reconcile: local_only(),
            steps: vec![1, 2],
            head: None,
            artifact: "a".into(),
            history: "h".into(),
            effects: Vec::new(),
            effects_pending: Vec::new(),
        };
        let v = serde_json::to_value(&report).unwrap();
        assert_eq!(v["dry_run"], true);
        assert!(v.get("command").is_none(), "{v}");
        assert_eq!(v["steps"], serde_json::json!([1, 2]));
        assert!(v.get("effects_pending").is_none(), "{v}");
        assert!(v["head"].is_null());
    }

    /// The keys of `v`, a JSON object.
    fn keys(v: serde_json::Value) -> Vec<String> {
        v.as_object().unwrap().keys().cloned().collect()
    }

    /// No command's own field has a shared field's name: flattened, it
    /// would print the key twice in `--json`.
    #[test]
    fn no_commands_own_field_shadows_a_shared_one() {
        #[derive(Serialize)]
        struct Nothing {}
        let shared = keys(
            serde_json::to_value(Report {
                run: String::new(),
                branch: String::new(),
                durable: "local",
                command: Nothing {},
                repair: Repair::Clean,
                reconcile: local_only(),
                steps: Vec::<u8>::new(),
                head: None,
                artifact: String::new(),
                history: String::new(),
                effects: Vec::new(),
                effects_pending: vec![String::new()],
            })
            .unwrap(),
        );
        assert!(
            shared.contains(&"effects_pending".to_string()),
            "{shared:?}"
        );
        let own = [
            keys(serde_json::to_value(super::super::engine::Applied { dry_run: true }).unwrap()),
            keys(
                serde_json::to_value(super::super::agent::Ran {
                    stopped: super::super::agent::Stop::Done,
                    decider_calls: 0,
                    archived: Some(super::super::provenance::Archived {
                        refname: String::new(),
                        head: String::new(),
                        previous: None,
                        moved: false,
                    }),
                })
                .unwrap(),
            ),
        ];
        assert_eq!(own[1].len(), 3, "{own:?}");
        for k in own.iter().flatten() {
            assert!(
                !shared.contains(k),
                "{k} is both shared and a command's own"
            );
        }
    }
}
