//! `max_running` at claim time: a dispatch of a workflow at its ceiling is not claimed; it
//! stays pending (its run keeps its entity) and is claimed, oldest due first, once a slot
//! frees.
//!
//! Invariant: the running count is derived from rows inside the claim's transaction, after
//! the workflow's `flow_gates` row is locked (`FOR UPDATE` on PostgreSQL/MySQL; SQLite
//! serialises writers), so two dispatchers never both take the last slot. A run counts while
//! it is dispatched and not finished (every active status but `queued`), and while a push
//! dispatcher's claim on it is in flight (pending, claimed, not lapsed). Every way a run ends
//! (finish, cancel, dead letter, expiry, a lapsed claim after a crash) changes one of those
//! rows, so it frees its slot without any counter to release.

use std::collections::HashMap;

use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};

use crate::Millis;

/// A workflow's `max_running`, and the target its dispatches go to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaxRunning {
    pub workflow_id: String,
    pub target: String,
    pub max: u32,
}

/// The statuses of a run that has been handed to its worker and is not finished.
pub fn running_statuses() -> Vec<&'static str> {
    crate::ACTIVE
        .iter()
        .copied()
        .filter(|s| *s != "queued")
        .collect()
}

/// Locks the `flow_gates` row `name` for the rest of the transaction (creating it first).
pub async fn lock_gate<C: ConnectionTrait>(txn: &C, name: &str, now: Millis) -> Result<(), DbErr> {
    let backend = txn.get_database_backend();
    let (insert, select) = match backend {
        DbBackend::Postgres => (
            "INSERT INTO flow_gates (name, tat_us, updated_at) VALUES ($1, 0, $2) \
             ON CONFLICT (name) DO NOTHING",
            "SELECT tat_us FROM flow_gates WHERE name = $1 FOR UPDATE",
        ),
        DbBackend::MySql => (
            "INSERT INTO flow_gates (name, tat_us, updated_at) VALUES (?, 0, ?) \
             ON DUPLICATE KEY UPDATE name = name",
            "SELECT tat_us FROM flow_gates WHERE name = ? FOR UPDATE",
        ),
        _ => (
            "INSERT INTO flow_gates (name, tat_us, updated_at) VALUES (?, 0, ?) \
             ON CONFLICT (name) DO NOTHING",
            "SELECT tat_us FROM flow_gates WHERE name = ?",
        ),
    };
    txn.execute_raw(Statement::from_sql_and_values(
        backend,
        insert,
        [name.into(), now.into()],
    ))
    .await?;
    txn.query_one_raw(Statement::from_sql_and_values(
        backend,
        select,
        [name.into()],
    ))
    .await?;
    Ok(())
}

/// How many runs of `workflow_id` hold a slot at `now` (see the module's invariant). One
/// statement, so one snapshot: an attempt recorded meanwhile (its dispatch no longer in
/// flight, its run now dispatched) is counted once, never zero times.
pub async fn running<C: ConnectionTrait>(
    txn: &C,
    workflow_id: &str,
    target: &str,
    now: Millis,
) -> Result<u64, DbErr> {
    let backend = txn.get_database_backend();
    let statuses: Vec<String> = running_statuses()
        .iter()
        .map(|s| format!("'{s}'"))
        .collect();
    let statuses = statuses.join(", ");
    // A push claim in flight: its run is still `queued` until the attempt is recorded.
    let (sql, values): (String, Vec<sea_orm::Value>) = match backend {
        DbBackend::Postgres => (
            format!(
                "SELECT (SELECT COUNT(*) FROM runs WHERE workflow_id = $1 AND status IN \
                 ({statuses})) + (SELECT COUNT(*) FROM dispatches WHERE status = 'pending' \
                 AND target = $2 AND due_at > $3 AND workflow_id = $1 \
                 AND claimed_by IS NOT NULL AND claimed_by <> 'pull') AS running"
            ),
            vec![workflow_id.into(), target.into(), now.into()],
        ),
        _ => (
            format!(
                "SELECT (SELECT COUNT(*) FROM runs WHERE workflow_id = ? AND status IN \
                 ({statuses})) + (SELECT COUNT(*) FROM dispatches WHERE status = 'pending' \
                 AND target = ? AND due_at > ? AND workflow_id = ? \
                 AND claimed_by IS NOT NULL AND claimed_by <> 'pull') AS running"
            ),
            vec![
                workflow_id.into(),
                target.into(),
                now.into(),
                workflow_id.into(),
            ],
        ),
    };
    let row = txn
        .query_one_raw(Statement::from_sql_and_values(backend, sql, values))
        .await?;
    let running: i64 = match row {
        Some(row) => row.try_get_by_index(0)?,
        None => 0,
    };
    Ok(u64::try_from(running).unwrap_or(0))
}

/// Locks each capped workflow's running gate (in name order) and counts its running runs:
/// the slots each has free now.
pub async fn free_slots<C: ConnectionTrait>(
    txn: &C,
    capped: &[MaxRunning],
    now: Millis,
) -> Result<HashMap<String, u64>, DbErr> {
    let mut sorted: Vec<&MaxRunning> = capped.iter().collect();
    sorted.sort_by(|a, b| a.workflow_id.cmp(&b.workflow_id));
    let mut free = HashMap::with_capacity(sorted.len());
    for ceiling in sorted {
        lock_gate(txn, &gate_name(&ceiling.workflow_id), now).await?;
        let running = running(txn, &ceiling.workflow_id, &ceiling.target, now).await?;
        free.insert(
            ceiling.workflow_id.clone(),
            u64::from(ceiling.max).saturating_sub(running),
        );
    }
    Ok(free)
}

/// The `flow_gates` row a workflow's claims take turns on.
pub fn gate_name(workflow_id: &str) -> String {
    format!("running:{workflow_id}")
}

/// Slots per workflow during one claim: rows of capped workflows are taken only while their
/// workflow has a slot left.
#[derive(Debug, Default)]
pub struct Slots(HashMap<String, u64>);

impl Slots {
    pub fn new(free: HashMap<String, u64>) -> Self {
        Slots(free)
    }

    /// Workflows with no slot at all (left out of the claim's query).
    pub fn full(&self) -> Vec<String> {
        self.0
            .iter()
            .filter(|(_, free)| **free == 0)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Takes a slot for a dispatch of `workflow_id` if it is capped; whether it may be claimed.
    pub fn take(&mut self, workflow_id: &str) -> bool {
        match self.0.get_mut(workflow_id) {
            None => true,
            Some(0) => false,
            Some(free) => {
                *free -= 1;
                true
            }
        }
    }
}
