//! Entity leases for a batch of events decided in one transaction.
//!
//! The intake batch reads the lease rows of every entity it touches (row-locked by the store
//! until its commit) into a [`LockBatch::from_rows`], decides each event in arrival order in
//! memory with [`LockBatch::route`], and hands the store every change
//! ([`LockBatch::into_changes`], a `switchyard_store::leases::LockChanges`) to write before the
//! ledger rows, in the same transaction. A lease row that did not exist is created with a plain
//! `INSERT`: if another replica created it meanwhile, the insert fails and the caller retries
//! the whole batch, which then sees that replica's lease.

use std::collections::HashMap;
use std::sync::Arc;

use switchyard_store::entities::{entity_lock, run};
use switchyard_store::leases::LockChanges;
use uuid::Uuid;

use crate::{Candidate, Millis};

/// What routing decided for one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// A run was created and holds the entity lease.
    Routed {
        run_id: String,
        workflow_id: Arc<str>,
        fencing_token: i64,
        /// The run whose expired lease this one took over, now marked `expired`.
        took_over_from: Option<String>,
    },
    /// No live workflow of the tenant triggers on (channel, event_type).
    NoTriggerMatch,
    /// The chosen workflow's entity is held by another active run.
    EntityLocked {
        held_by_run_id: String,
        workflow_id: Arc<str>,
        /// When the holder's lease expires unless its run extends it (heartbeats) or ends.
        until: Millis,
    },
}

#[derive(Debug)]
struct Slot {
    /// The row as loaded; `None` when no lease was ever taken on the entity.
    stored: Option<entity_lock::Model>,
    /// The row as this batch leaves it.
    current: Option<entity_lock::Model>,
}

/// The lease rows of one batch's entities, and the runs the batch creates.
#[derive(Debug)]
pub struct LockBatch {
    now: Millis,
    slots: HashMap<(String, String), Slot>,
    new_runs: Vec<run::Model>,
    expired_runs: Vec<String>,
}

impl LockBatch {
    /// A batch over `keys` whose stored lease rows are `rows` (read by the caller, row-locked
    /// until its transaction ends); keys without a row were never locked.
    pub fn from_rows(
        keys: impl IntoIterator<Item = (String, String)>,
        rows: impl IntoIterator<Item = entity_lock::Model>,
        now: Millis,
    ) -> Self {
        let mut slots: HashMap<(String, String), Slot> = keys
            .into_iter()
            .map(|key| {
                (
                    key,
                    Slot {
                        stored: None,
                        current: None,
                    },
                )
            })
            .collect();
        for row in rows {
            if let Some(slot) =
                slots.get_mut(&(row.tenant_id.clone(), row.target_entity_id.clone()))
            {
                slot.current = Some(row.clone());
                slot.stored = Some(row);
            }
        }
        Self::from_slots(slots, now)
    }

    fn from_slots(slots: HashMap<(String, String), Slot>, now: Millis) -> Self {
        Self {
            now,
            slots,
            new_runs: Vec::new(),
            expired_runs: Vec::new(),
        }
    }

    /// Decides one event: its chosen workflow (if any) gets a run and the entity's lease, unless
    /// an active run holds it. Events of one batch must be routed in arrival order.
    ///
    /// The entity must be among the keys given to [`LockBatch::load`]; an unknown key is
    /// treated as never locked, which is only true if the caller loaded it.
    pub fn route(
        &mut self,
        tenant_id: &str,
        target_entity_id: &str,
        chosen: Option<&Candidate>,
        intake_id: &str,
    ) -> Decision {
        let Some(candidate) = chosen else {
            return Decision::NoTriggerMatch;
        };
        let now = self.now;
        let slot = self
            .slots
            .entry((tenant_id.to_owned(), target_entity_id.to_owned()))
            .or_insert(Slot {
                stored: None,
                current: None,
            });
        if let Some(row) = slot.current.as_ref()
            && let Some(holder) = row.held_at(now)
        {
            return Decision::EntityLocked {
                held_by_run_id: holder.to_owned(),
                workflow_id: candidate.workflow_id.clone(),
                until: row.expires_at,
            };
        }
        let took_over_from = slot.current.as_ref().and_then(|row| row.run_id.clone());
        let fencing_token = slot.current.as_ref().map_or(1, |row| row.fencing_token + 1);
        let ttl_ms = i64::try_from(candidate.lock_ttl.as_millis()).unwrap_or(i64::MAX / 2);
        let run_id = Uuid::now_v7().to_string();
        slot.current = Some(entity_lock::Model {
            tenant_id: tenant_id.to_owned(),
            target_entity_id: target_entity_id.to_owned(),
            run_id: Some(run_id.clone()),
            fencing_token,
            expires_at: now.saturating_add(ttl_ms),
            updated_at: now,
        });
        if let Some(expired) = &took_over_from {
            self.expired_runs.push(expired.clone());
        }
        self.new_runs.push(run::Model {
            id: run_id.clone(),
            tenant_id: tenant_id.to_owned(),
            workflow_id: candidate.workflow_id.to_string(),
            target_entity_id: target_entity_id.to_owned(),
            intake_id: intake_id.to_owned(),
            status: run::RunStatus::Queued,
            fencing_token,
            lock_ttl_ms: ttl_ms,
            created_at: now,
            updated_at: now,
            // Trace context, revision, principal, deadline and budgets are set by the caller
            // (the router sees no delivery and knows no principals).
            ..run::Model::default()
        });
        Decision::Routed {
            run_id,
            workflow_id: candidate.workflow_id.clone(),
            fencing_token,
            took_over_from,
        }
    }

    /// The run that holds the lease of `(tenant_id, target_entity_id)` as the batch stands now,
    /// if any (what [`LockBatch::route`] would answer `EntityLocked` with).
    pub fn holder(&self, tenant_id: &str, target_entity_id: &str) -> Option<&str> {
        self.slots
            .get(&(tenant_id.to_owned(), target_entity_id.to_owned()))
            .and_then(|slot| slot.current.as_ref())
            .and_then(|row| row.held_at(self.now))
    }

    /// Re-takes the lease of `run`'s entity for that run itself (a redispatch): the new fencing
    /// token, or the id of the active run that holds it.
    pub fn retake(&mut self, run: &run::Model, now: Millis) -> Result<i64, String> {
        let slot = self
            .slots
            .entry((run.tenant_id.clone(), run.target_entity_id.clone()))
            .or_insert(Slot {
                stored: None,
                current: None,
            });
        let lease = entity_lock::Model::retaken(slot.current.as_ref(), run, now)?;
        let fencing_token = lease.fencing_token;
        slot.current = Some(lease);
        Ok(fencing_token)
    }

    /// What the batch decided, to be written in its transaction.
    pub fn into_changes(self) -> LockChanges {
        let mut changes = LockChanges {
            now: self.now,
            new_runs: self.new_runs,
            expired_runs: self.expired_runs,
            ..LockChanges::default()
        };
        for slot in self.slots.into_values() {
            match (slot.stored, slot.current) {
                (None, Some(new)) => changes.created.push(new),
                (Some(old), Some(new)) if old != new => changes.changed.push(new),
                _ => {}
            }
        }
        changes
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const NOW: Millis = 1_000_000;

    fn lease(
        entity: &str,
        run: Option<&str>,
        token: i64,
        expires_at: Millis,
    ) -> entity_lock::Model {
        entity_lock::Model {
            tenant_id: "acme".into(),
            target_entity_id: entity.into(),
            run_id: run.map(Into::into),
            fencing_token: token,
            expires_at,
            updated_at: 0,
        }
    }

    fn batch(stored: Vec<entity_lock::Model>) -> LockBatch {
        let slots = stored
            .into_iter()
            .map(|row| {
                let key = (row.tenant_id.clone(), row.target_entity_id.clone());
                (
                    key,
                    Slot {
                        stored: Some(row.clone()),
                        current: Some(row),
                    },
                )
            })
            .collect();
        LockBatch::from_slots(slots, NOW)
    }

    fn triage() -> Candidate {
        Candidate {
            workflow_id: Arc::from("triage"),
            priority: 100,
            lock_ttl: Duration::from_secs(60),
            when: None,
        }
    }

    /// A name, the stored lease, `routed` or `locked`, and for a routed event its token and the
    /// run it took over from.
    type Case = (
        &'static str,
        Option<entity_lock::Model>,
        &'static str,
        Option<(i64, Option<&'static str>)>,
    );

    /// What one event on `entity` meets, given the stored lease: the expected outcome and, for a
    /// routed event, its fencing token and the run it took over from.
    #[test]
    fn each_lease_state_decides_as_expected() {
        let cases: Vec<Case> = vec![
            ("never locked", None, "routed", Some((1, None))),
            (
                "held",
                Some(lease("E", Some("r1"), 4, NOW + 1)),
                "locked",
                None,
            ),
            (
                "expires exactly now",
                Some(lease("E", Some("r1"), 4, NOW)),
                "routed",
                Some((5, Some("r1"))),
            ),
            (
                "expired",
                Some(lease("E", Some("r1"), 4, NOW - 1)),
                "routed",
                Some((5, Some("r1"))),
            ),
            (
                "released",
                Some(lease("E", None, 7, NOW - 1)),
                "routed",
                Some((8, None)),
            ),
            (
                "released, unexpired",
                Some(lease("E", None, 7, NOW + 10)),
                "routed",
                Some((8, None)),
            ),
        ];
        for (name, stored, expected, routed) in cases {
            let mut locks = batch(stored.into_iter().collect());
            let decision = locks.route("acme", "E", Some(&triage()), "intake-1");
            match (&decision, expected, routed) {
                (
                    Decision::Routed {
                        fencing_token,
                        took_over_from,
                        ..
                    },
                    "routed",
                    Some((token, from)),
                ) => {
                    assert_eq!(*fencing_token, token, "{name}");
                    assert_eq!(took_over_from.as_deref(), from, "{name}");
                }
                (
                    Decision::EntityLocked {
                        held_by_run_id,
                        workflow_id,
                        ..
                    },
                    "locked",
                    None,
                ) => {
                    assert_eq!(held_by_run_id, "r1", "{name}");
                    assert_eq!(&**workflow_id, "triage", "{name}");
                }
                _ => panic!("{name}: unexpected {decision:?}"),
            }
        }
    }

    #[test]
    fn a_redispatch_retakes_a_free_lease_with_a_larger_token_or_names_the_holder() {
        let run = run::Model {
            id: "r1".into(),
            tenant_id: "acme".into(),
            workflow_id: "triage".into(),
            target_entity_id: "E".into(),
            intake_id: "i1".into(),
            status: run::RunStatus::DeadLettered,
            fencing_token: 4,
            lock_ttl_ms: 60_000,
            created_at: 0,
            updated_at: 0,
            finished_at: Some(1),
            traceparent: None,
            tracestate: None,
            config_revision: None,
            principal_id: None,
            deadline_at: None,
            budgets: None,
            run_usage: None,
            end_reason: None,
            worker_version: None,
            subject_version: None,
        };
        let cases = [
            ("released", lease("E", None, 4, NOW - 1), Ok(5)),
            ("expired holder", lease("E", Some("r2"), 6, NOW), Ok(7)),
            (
                "held by another",
                lease("E", Some("r2"), 6, NOW + 1),
                Err("r2".to_owned()),
            ),
        ];
        for (name, stored, expected) in cases {
            let mut locks = batch(vec![stored]);
            assert_eq!(locks.retake(&run, NOW), expected, "{name}");
            let changes = locks.into_changes();
            let taken = expected.is_ok();
            assert_eq!(changes.changed.len(), usize::from(taken), "{name}");
            if taken {
                assert_eq!(changes.changed[0].run_id.as_deref(), Some("r1"), "{name}");
                assert_eq!(changes.changed[0].expires_at, NOW + 60_000, "{name}");
            }
        }
        assert_eq!(batch(Vec::new()).retake(&run, NOW), Ok(1), "never locked");
    }

    #[test]
    fn a_batch_sees_its_own_earlier_decisions() {
        let mut locks = batch(Vec::new());
        let first = locks.route("acme", "E", Some(&triage()), "i1");
        let Decision::Routed { run_id, .. } = first else {
            panic!("first event routes: {first:?}");
        };
        assert_eq!(
            locks.route("acme", "E", Some(&triage()), "i2"),
            Decision::EntityLocked {
                held_by_run_id: run_id,
                workflow_id: Arc::from("triage"),
                until: NOW + 60_000,
            }
        );
        assert!(matches!(
            locks.route("acme", "F", Some(&triage()), "i3"),
            Decision::Routed { .. }
        ));
        assert!(matches!(
            locks.route("globex", "E", Some(&triage()), "i4"),
            Decision::Routed { .. }
        ));
        assert_eq!(
            locks.route("acme", "G", None, "i5"),
            Decision::NoTriggerMatch
        );
        assert_eq!(locks.new_runs.len(), 3);
    }
}
