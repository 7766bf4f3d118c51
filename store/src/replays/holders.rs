//! Who held an entity when: the lock state at a past moment, rebuilt from `runs` and
//! `run_history`, so a replay of yesterday reproduces yesterday's `entity_locked`.
//!
//! A run holds its entity from its creation while its status is active (`queued`,
//! `dispatched`); each history entry that leaves an active status ends a hold, a redispatch
//! (back to `queued`) starts another. A delivery decided at `at` saw as holder the run of
//! another, earlier delivery (smaller intake id: runs created in the same batch held the
//! entity for the later deliveries of that batch) whose hold covered `at`; a run taken over
//! at `at` (its lease expired) did not. Lease expiry without a takeover is not recorded, so a
//! replay that routes an event the original did not still sees only the recorded holders.

use std::collections::HashMap;

use sea_orm::{ColumnTrait, DbErr, EntityTrait, QueryFilter, QueryOrder};

use crate::Store;
use crate::entities::{run, run_history};

/// One run's holds of its entity: `[from, until)` intervals, `until = None` still held.
#[derive(Debug, Clone)]
struct Holds {
    run_id: String,
    intake_id: String,
    spans: Vec<(i64, Option<i64>)>,
}

/// Past holders of the entities asked for so far, by `(tenant_id, target_entity_id)`.
#[derive(Debug, Default)]
pub struct Holders {
    by_entity: HashMap<(String, String), Vec<Holds>>,
}

/// Entities whose holders are kept between batches before the cache starts over.
const MAX_CACHED: usize = 50_000;

impl Holders {
    /// Reads the runs (and their history) of every entity in `keys` not read yet.
    pub async fn load(
        &mut self,
        store: &Store,
        keys: impl IntoIterator<Item = (String, String)>,
    ) -> Result<(), DbErr> {
        let mut wanted: Vec<(String, String)> = keys
            .into_iter()
            .filter(|k| !self.by_entity.contains_key(k))
            .collect();
        wanted.sort();
        wanted.dedup();
        if wanted.is_empty() {
            return Ok(());
        }
        if self.by_entity.len() + wanted.len() > MAX_CACHED {
            self.by_entity.clear();
        }
        for chunk in wanted.chunks(200) {
            let entities: Vec<&str> = chunk.iter().map(|(_, e)| e.as_str()).collect();
            let runs = run::Entity::find()
                .filter(run::Column::TargetEntityId.is_in(entities))
                .all(store.db())
                .await?;
            let runs: Vec<run::Model> = runs
                .into_iter()
                .filter(|r| chunk.contains(&(r.tenant_id.clone(), r.target_entity_id.clone())))
                .collect();
            let mut history: HashMap<String, Vec<run_history::Model>> = HashMap::new();
            for ids in runs.chunks(300) {
                for entry in run_history::Entity::find()
                    .filter(run_history::Column::RunId.is_in(ids.iter().map(|r| r.id.as_str())))
                    .order_by_asc(run_history::Column::At)
                    .order_by_asc(run_history::Column::Id)
                    .all(store.db())
                    .await?
                {
                    history.entry(entry.run_id.clone()).or_default().push(entry);
                }
            }
            for key in chunk {
                self.by_entity.insert(key.clone(), Vec::new());
            }
            for run in runs {
                let entries = history.remove(&run.id).unwrap_or_default();
                let holds = holds_of(&run, &entries);
                self.by_entity
                    .entry((run.tenant_id.clone(), run.target_entity_id.clone()))
                    .or_default()
                    .push(holds);
            }
        }
        Ok(())
    }

    /// The run that held `(tenant, entity)` for the delivery `intake_id` decided at `at`.
    pub fn holder_at(&self, tenant: &str, entity: &str, intake_id: &str, at: i64) -> Option<&str> {
        self.by_entity
            .get(&(tenant.to_owned(), entity.to_owned()))?
            .iter()
            .filter(|h| h.intake_id.as_str() < intake_id)
            .find(|h| {
                h.spans
                    .iter()
                    .any(|&(from, until)| from <= at && until.is_none_or(|until| at < until))
            })
            .map(|h| h.run_id.as_str())
    }
}

/// A run's hold intervals from its creation and its history (oldest first).
fn holds_of(run: &run::Model, history: &[run_history::Model]) -> Holds {
    let mut spans = Vec::new();
    let mut open = Some(run.created_at);
    for entry in history {
        match (open, entry.status.is_active()) {
            (Some(from), false) => {
                spans.push((from, Some(entry.at)));
                open = None;
            }
            (None, true) => open = Some(entry.at),
            _ => {}
        }
    }
    if let Some(from) = open {
        // A finished run whose last change left no history entry ended at `finished_at`.
        let until = run
            .status
            .is_finished()
            .then_some(run.finished_at.unwrap_or(run.updated_at));
        spans.push((from, until));
    }
    Holds {
        run_id: run.id.clone(),
        intake_id: run.intake_id.clone(),
        spans,
    }
}

#[cfg(test)]
mod tests {
    use crate::entities::run::RunStatus;

    use super::*;

    fn run(id: &str, intake: &str, created: i64, status: RunStatus) -> run::Model {
        run::Model {
            id: id.into(),
            tenant_id: "acme".into(),
            workflow_id: "triage".into(),
            target_entity_id: "T1".into(),
            intake_id: intake.into(),
            status,
            fencing_token: 1,
            lock_ttl_ms: 60_000,
            created_at: created,
            updated_at: created,
            finished_at: None,
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
        }
    }

    fn entry(run_id: &str, status: RunStatus, at: i64) -> run_history::Model {
        run_history::Model::entry(run_id, status, "test", None, at)
    }

    #[test]
    fn a_run_holds_from_creation_until_it_leaves_an_active_status_and_again_after_redispatch() {
        let mut holders = Holders::default();
        let first = run("r1", "i1", 100, RunStatus::Completed);
        let history = [
            entry("r1", RunStatus::Dispatched, 110),
            entry("r1", RunStatus::DeadLettered, 200),
            entry("r1", RunStatus::Queued, 300),
            entry("r1", RunStatus::Completed, 400),
        ];
        let second = run("r2", "i5", 500, RunStatus::Dispatched);
        holders.by_entity.insert(
            ("acme".into(), "T1".into()),
            vec![holds_of(&first, &history), holds_of(&second, &[])],
        );
        let at = |intake: &str, when: i64| holders.holder_at("acme", "T1", intake, when);
        // Its own delivery never sees it; later ones do while it is active.
        assert_eq!(at("i1", 100), None);
        assert_eq!(
            at("i2", 100),
            Some("r1"),
            "created in the same batch, earlier"
        );
        assert_eq!(at("i2", 199), Some("r1"));
        assert_eq!(at("i3", 200), None, "dead-lettered: released");
        assert_eq!(at("i3", 350), Some("r1"), "redispatched: held again");
        assert_eq!(at("i4", 400), None, "finished");
        assert_eq!(at("i6", 10_000), Some("r2"), "still active");
        assert_eq!(holders.holder_at("acme", "T2", "i6", 10_000), None);
        assert_eq!(holders.holder_at("globex", "T1", "i6", 10_000), None);
    }
}
