//! SQLite's own statements for the intake batch: cached statements on the writer thread's
//! connection, in `BEGIN IMMEDIATE` (which already serialises writers: a read is a lock); new
//! rows go in as multi-row inserts (`row_insert.rs`), updates one row at a time. The batch's
//! order is `intake::order`'s.

use std::collections::HashMap;

use rusqlite::{CachedStatement, OptionalExtension, Transaction, params};

use super::Sqlite;
use super::row_insert::RowInsert;
use crate::entities::entity_lock;
use crate::entities::run::RunStatus;
use crate::intake::flow::{
    Counts, FlowFound, FlowKeys, FlowWrites, WINDOW_COLUMNS, Window, holders, running_list,
};
use crate::intake::order::Steps;
use crate::intake::{DeliveryKey, Found, Keys, MessageKey, StoredAnswer, Writes};
use crate::{ACTIVE, Millis};

#[async_trait::async_trait]
impl crate::driver::IntakeDriver for Sqlite {
    fn start_intake(
        &self,
        _store: &crate::Store,
        sources: Vec<Box<dyn crate::intake::Batches>>,
    ) -> Result<(), sea_orm::DbErr> {
        self.start_writer(sources)
    }

    async fn record_in_intake(
        &self,
        attempts: Vec<crate::outbox::Recorded>,
    ) -> Result<usize, Vec<crate::outbox::Recorded>> {
        self.record_riding(attempts).await
    }

    async fn claim_in_intake(
        &self,
        target: &str,
        owner: &str,
        limit: usize,
        claim_until: Millis,
    ) -> Option<Result<Vec<crate::outbox::ClaimedRun>, String>> {
        self.claim_riding(target, owner, limit, claim_until).await
    }
}

/// A batch's steps on the writer's transaction.
pub(crate) struct TxnSteps<'c, 't>(pub &'c Transaction<'t>);

impl Steps for TxnSteps<'_, '_> {
    type Error = rusqlite::Error;

    async fn look_up(&mut self, keys: &Keys<'_>, now: Millis) -> rusqlite::Result<Found> {
        let txn = self.0;
        let mut flow = FlowFound::default();
        lock_gates(txn, &keys.flow, now, &mut flow)?;
        Ok(Found {
            seen: stored_deliveries(txn, &keys.deliveries)?,
            claimed: claimed_messages(txn, &keys.messages)?,
            leases: leases(txn, &keys.leases)?,
            flow,
        })
    }

    async fn counts_and_windows(
        &mut self,
        flow: &FlowKeys,
        leases: &[entity_lock::Model],
        now: Millis,
        found: &mut FlowFound,
    ) -> rusqlite::Result<()> {
        counts(self.0, flow, found)?;
        windows(self.0, flow, leases, now, found)
    }

    async fn write(&mut self, writes: Writes, now: Millis) -> rusqlite::Result<()> {
        replace(self.0, &writes.flow)?;
        write(self.0, &writes)?;
        write_flow(self.0, &writes.flow, now)
    }

    fn refused(detail: String) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
            Some(detail),
        )
    }
}

/// The batch's new rows, each table's statements built once (`row_insert.rs`).
static LEASES: RowInsert = RowInsert::new(
    "entity_locks (tenant_id, target_entity_id, run_id, fencing_token, expires_at, updated_at)",
);
static RUNS: RowInsert = RowInsert::new(
    "runs (id, tenant_id, workflow_id, target_entity_id, intake_id, status, fencing_token, \
     lock_ttl_ms, created_at, updated_at, finished_at, traceparent, tracestate, config_revision, \
     principal_id, deadline_at, budgets)",
);
static DISPATCHES: RowInsert = RowInsert::new(
    "dispatches (id, run_id, tenant_id, workflow_id, target, status, attempts, series, due_at, \
     created_at, updated_at, claimed_by)",
);
static LEDGER: RowInsert = RowInsert::new(
    "intake (id, source, delivery_id, scope, outcome, detail, channel, event_type, tenant_id, \
     target_entity_id, payload, raw_ref, run_id, workflow_id, held_by_run_id, message_key, \
     config_revision, received_at, decided_at, traceparent, tracestate, raw_content_type, \
     raw_body)",
);
/// What a stored answer is read as; `WHERE` one of the unique indexes.
const ANSWER_COLUMNS: &str = "SELECT id, outcome, detail, run_id, workflow_id, held_by_run_id \
     FROM intake WHERE ";
/// The answer of the routed row that claimed `(message_key ?1, source ?2)`: read through the
/// partial `intake_message_key`, which `message_key = ?1` implies (m0022).
pub const CLAIMED_MESSAGE: &str = "SELECT id, outcome, detail, run_id, workflow_id, \
     held_by_run_id FROM intake WHERE message_key = ?1 AND source = ?2";

/// The answer of the ledger row of each `(source, scope, delivery_id)`: what a later copy is a
/// duplicate of.
fn stored_deliveries(
    txn: &Transaction<'_>,
    keys: &[(&str, &str, &str)],
) -> rusqlite::Result<HashMap<DeliveryKey, StoredAnswer>> {
    let mut found = HashMap::new();
    if keys.is_empty() {
        return Ok(found);
    }
    let mut select = txn.prepare_cached(&format!(
        "{ANSWER_COLUMNS}delivery_id = ?1 AND source = ?2 AND scope = ?3"
    ))?;
    for &(source, scope, id) in keys {
        if let Some(answer) = select
            .query(params![id, source, scope])?
            .next()?
            .map(answer_of)
            .transpose()?
        {
            found.insert((source.to_owned(), scope.to_owned(), id.to_owned()), answer);
        }
    }
    Ok(found)
}

/// The answer of the routed ledger row that claimed each `(source, message_key)`.
fn claimed_messages(
    txn: &Transaction<'_>,
    keys: &[(&str, &str)],
) -> rusqlite::Result<HashMap<MessageKey, StoredAnswer>> {
    let mut found = HashMap::new();
    if keys.is_empty() {
        return Ok(found);
    }
    let mut select = txn.prepare_cached(CLAIMED_MESSAGE)?;
    for &(source, key) in keys {
        if let Some(answer) = select
            .query(params![key, source])?
            .next()?
            .map(answer_of)
            .transpose()?
        {
            found.insert((source.to_owned(), key.to_owned()), answer);
        }
    }
    Ok(found)
}

/// A row of [`ANSWER_COLUMNS`] as the answer it gave.
fn answer_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<StoredAnswer> {
    Ok(StoredAnswer {
        intake_id: row.get(0)?,
        outcome: row.get(1)?,
        detail: row.get(2)?,
        run_id: row.get(3)?,
        workflow_id: row.get(4)?,
        held_by_run_id: row.get(5)?,
    })
}

/// The lease rows of `(tenant_id, target_entity_id)` keys that have one.
fn leases(
    txn: &Transaction<'_>,
    keys: &[(String, String)],
) -> rusqlite::Result<Vec<entity_lock::Model>> {
    let mut found = Vec::new();
    if keys.is_empty() {
        return Ok(found);
    }
    let mut select = txn.prepare_cached(
        "SELECT tenant_id, target_entity_id, run_id, fencing_token, expires_at, updated_at \
         FROM entity_locks WHERE target_entity_id = ?1 AND tenant_id = ?2",
    )?;
    for (tenant_id, entity_id) in keys {
        let mut rows = select.query(params![entity_id, tenant_id])?;
        if let Some(row) = rows.next()? {
            found.push(entity_lock::Model {
                tenant_id: row.get(0)?,
                target_entity_id: row.get(1)?,
                run_id: row.get(2)?,
                fencing_token: row.get(3)?,
                expires_at: row.get(4)?,
                updated_at: row.get(5)?,
            });
        }
    }
    Ok(found)
}

/// Writes everything the batch decided: leases, runs, their dispatches and history, ledger rows
/// (with their raw bytes), cursors.
fn write(txn: &Transaction<'_>, decided: &Writes) -> rusqlite::Result<()> {
    let locks = &decided.locks;
    // A plain insert: another process that created the row meanwhile makes it fail.
    LEASES.insert(txn, &locks.created, |lease, bind| {
        bind(&lease.tenant_id)?;
        bind(&lease.target_entity_id)?;
        bind(&lease.run_id)?;
        bind(&lease.fencing_token)?;
        bind(&lease.expires_at)?;
        bind(&lease.updated_at)?;
        Ok(())
    })?;
    each(
        txn,
        "UPDATE entity_locks SET run_id = ?3, fencing_token = ?4, expires_at = ?5, \
         updated_at = ?6 WHERE target_entity_id = ?2 AND tenant_id = ?1",
        &locks.changed,
        |update, lease| update.execute(lease_params(lease)),
    )?;
    RUNS.insert(txn, &locks.new_runs, |run, bind| {
        bind(&run.id)?;
        bind(&run.tenant_id)?;
        bind(&run.workflow_id)?;
        bind(&run.target_entity_id)?;
        bind(&run.intake_id)?;
        bind(&run.status.as_str())?;
        bind(&run.fencing_token)?;
        bind(&run.lock_ttl_ms)?;
        bind(&run.created_at)?;
        bind(&run.updated_at)?;
        bind(&run.finished_at)?;
        bind(&run.traceparent)?;
        bind(&run.tracestate)?;
        bind(&run.config_revision)?;
        bind(&run.principal_id)?;
        bind(&run.deadline_at)?;
        bind(&run.budgets)?;
        Ok(())
    })?;
    each(
        txn,
        "UPDATE runs SET status = ?2, updated_at = ?3, finished_at = ?3 \
         WHERE id = ?1 AND status IN (?4, ?5, ?6)",
        &locks.expired_runs,
        |expire, run_id| {
            expire.execute(params![
                run_id,
                RunStatus::Expired.as_str(),
                locks.now,
                ACTIVE[0],
                ACTIVE[1],
                ACTIVE[2],
            ])
        },
    )?;
    each(
        txn,
        "UPDATE dispatches SET status = 'cancelled', reason = 'lease_expired', \
         claim_token = NULL, updated_at = ?2 WHERE run_id = ?1 AND status = 'pending'",
        &locks.expired_runs,
        |cancel, run_id| cancel.execute(params![run_id, locks.now]),
    )?;
    DISPATCHES.insert(txn, &decided.dispatches, |d, bind| {
        bind(&d.id)?;
        bind(&d.run_id)?;
        bind(&d.tenant_id)?;
        bind(&d.workflow_id)?;
        bind(&d.target)?;
        bind(&d.status.as_str())?;
        bind(&d.attempts)?;
        bind(&d.series)?;
        bind(&d.due_at)?;
        bind(&d.created_at)?;
        bind(&d.updated_at)?;
        bind(&d.claimed_by)?;
        Ok(())
    })?;
    each(
        txn,
        "INSERT INTO run_history (id, run_id, status, cause, detail, at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        &decided.history,
        |insert, h| {
            insert.execute(params![
                h.id,
                h.run_id,
                h.status.as_str(),
                h.cause,
                h.detail,
                h.at
            ])
        },
    )?;
    // Each row with its raw bytes, if it keeps them.
    let raw = crate::intake::raw_by_row(&decided.ledger, &decided.raw, |bytes| &bytes.id)
        .map_err(<TxnSteps<'_, '_> as Steps>::refused)?;
    let rows: Vec<_> = decided.ledger.iter().zip(raw).collect();
    LEDGER.insert(txn, &rows, |(row, raw), bind| {
        bind(&row.id)?;
        bind(&row.source)?;
        bind(&row.delivery_id)?;
        bind(&row.scope)?;
        bind(&row.outcome)?;
        bind(&row.detail)?;
        bind(&row.channel)?;
        bind(&row.event_type)?;
        bind(&row.tenant_id)?;
        bind(&row.target_entity_id)?;
        bind(&row.payload)?;
        bind(&row.raw_ref)?;
        bind(&row.run_id)?;
        bind(&row.workflow_id)?;
        bind(&row.held_by_run_id)?;
        bind(&row.message_key)?;
        bind(&row.config_revision)?;
        bind(&row.received_at)?;
        bind(&row.decided_at)?;
        bind(&row.traceparent)?;
        bind(&row.tracestate)?;
        bind(&raw.map(|bytes| &bytes.content_type))?;
        bind(&raw.map(|bytes| &bytes.body))?;
        Ok(())
    })?;
    each(
        txn,
        crate::intake::annotate::SQLITE,
        &crate::intake::annotate::of(&decided.ledger),
        |update, a| update.execute(params![a.shadow, a.replay_id, a.replay_of, a.id]),
    )?;
    each(
        txn,
        "INSERT INTO mailbox_cursors (source, mailbox, uidvalidity, last_uid, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (source, mailbox) DO UPDATE SET \
         uidvalidity = excluded.uidvalidity, last_uid = excluded.last_uid, \
         updated_at = excluded.updated_at",
        &decided.cursors,
        |upsert, cursor| {
            upsert.execute(params![
                cursor.source,
                cursor.mailbox,
                cursor.uidvalidity,
                cursor.last_uid,
                cursor.updated_at,
            ])
        },
    )
}

/// Runs the cached statement `sql` once per item (not even prepared when there is none).
fn each<T>(
    txn: &Transaction<'_>,
    sql: &str,
    items: &[T],
    mut execute: impl FnMut(&mut CachedStatement<'_>, &T) -> rusqlite::Result<usize>,
) -> rusqlite::Result<()> {
    if items.is_empty() {
        return Ok(());
    }
    let mut statement = txn.prepare_cached(sql)?;
    for item in items {
        execute(&mut statement, item)?;
    }
    Ok(())
}

/// `(tenant_id, target_entity_id, run_id, fencing_token, expires_at, updated_at)`.
fn lease_params(lease: &entity_lock::Model) -> impl rusqlite::Params + '_ {
    (
        &lease.tenant_id,
        &lease.target_entity_id,
        &lease.run_id,
        lease.fencing_token,
        lease.expires_at,
        lease.updated_at,
    )
}

/// Step 1: locks the gates (`BEGIN IMMEDIATE` already serialises writers: a read is the
/// lock), creating those that do not exist yet.
fn lock_gates(
    txn: &Transaction<'_>,
    needs: &FlowKeys,
    now: Millis,
    found: &mut FlowFound,
) -> rusqlite::Result<()> {
    if !needs.gates.is_empty() {
        // `BEGIN IMMEDIATE` already serialises writers: a read is the lock.
        let mut select = txn.prepare_cached("SELECT tat_us FROM flow_gates WHERE name = ?1")?;
        for gate in &needs.gates {
            let tat: Option<i64> = select
                .query_row(params![gate], |row| row.get(0))
                .optional()?;
            if tat.is_none() {
                txn.prepare_cached(
                    "INSERT INTO flow_gates (name, tat_us, updated_at) VALUES (?1, 0, ?2)",
                )?
                .execute(params![gate, now])?;
            }
            found.tats.insert(gate.clone(), tat.unwrap_or(0));
        }
    }
    Ok(())
}

/// Step 4: each capped workflow's runs, up to its ceiling.
fn counts(txn: &Transaction<'_>, needs: &FlowKeys, found: &mut FlowFound) -> rusqlite::Result<()> {
    if !needs.workflows.is_empty() {
        let mut count = txn.prepare_cached(&format!(
            "SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM runs WHERE workflow_id = ?1 \
             AND status = 'queued' LIMIT ?2)), (SELECT COUNT(*) FROM (SELECT 1 FROM runs \
             WHERE workflow_id = ?1 AND status IN ({}) LIMIT ?3))",
            running_list()
        ))?;
        for w in &needs.workflows {
            let (queued, running) = count
                .query_row(params![w.workflow, w.queued, w.running], |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })?;
            found
                .counts
                .insert(w.workflow.clone(), Counts { queued, running });
        }
    }
    Ok(())
}

/// Step 5: the windows of the runs holding the batch's entities.
fn windows(
    txn: &Transaction<'_>,
    needs: &FlowKeys,
    leases: &[entity_lock::Model],
    now: Millis,
    found: &mut FlowFound,
) -> rusqlite::Result<()> {
    if !needs.windows {
        return Ok(());
    }
    let mut select = txn.prepare_cached(&format!(
        "SELECT {WINDOW_COLUMNS} FROM dispatches d WHERE d.run_id = ?1"
    ))?;
    for run_id in holders(leases, now) {
        let mut rows = select.query(params![run_id])?;
        if let Some(row) = rows.next()? {
            let status: String = row.get(2)?;
            let w = Window::of(
                row.get(0)?,
                row.get(1)?,
                &status,
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
                row.get(6)?,
                row.get(7)?,
            );
            found.windows.insert(run_id, w);
        }
    }
    Ok(())
}

/// Deletes replaced refusals (before the ledger rows are inserted).
fn replace(txn: &Transaction<'_>, writes: &FlowWrites) -> rusqlite::Result<()> {
    if writes.replaced.is_empty() {
        return Ok(());
    }
    // The row's raw bytes go with it.
    let mut ledger =
        txn.prepare_cached("DELETE FROM intake WHERE id = ?1 AND outcome = 'rate_limited'")?;
    for id in &writes.replaced {
        ledger.execute(params![id])?;
    }
    Ok(())
}

/// Flow control's rows: rate times, members, pushed-out windows.
fn write_flow(txn: &Transaction<'_>, writes: &FlowWrites, now: Millis) -> rusqlite::Result<()> {
    if writes.is_empty() {
        return Ok(());
    }
    if !writes.tats.is_empty() {
        let mut update = txn
            .prepare_cached("UPDATE flow_gates SET tat_us = ?2, updated_at = ?3 WHERE name = ?1")?;
        for (gate, tat) in &writes.tats {
            update.execute(params![gate, tat, now])?;
        }
    }
    if !writes.members.is_empty() {
        let mut insert = txn.prepare_cached(
            "INSERT INTO run_members (run_id, intake_id, version, joined_at) \
             VALUES (?1, ?2, ?3, ?4)",
        )?;
        for m in &writes.members {
            insert.execute(params![m.run_id, m.intake_id, m.version, m.joined_at])?;
        }
    }
    if !writes.due.is_empty() {
        let mut update = txn.prepare_cached(
            "UPDATE dispatches SET due_at = ?2, updated_at = ?3 \
             WHERE id = ?1 AND status = 'pending' AND claimed_by IS NULL",
        )?;
        for (dispatch_id, due_at) in &writes.due {
            update.execute(params![dispatch_id, due_at, now])?;
        }
    }
    Ok(())
}
