//! The SQLite intake writer: one thread with its own connection decides each batch in one
//! `BEGIN IMMEDIATE` transaction with cached single-row statements.
//!
//! SQLite has one writer at a time, so the whole group commit runs on this thread: no statement
//! crosses to another thread and back (sqlx runs each statement on its own worker thread, and on
//! a loaded two-core machine every such hop waits for a core). The daemon's pool keeps serving
//! every other query; both connections open the same WAL database.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use rusqlite::{
    CachedStatement, Connection, ErrorCode, OpenFlags, Transaction, TransactionBehavior, params,
};
use switchyard_store::entities::entity_lock;
use switchyard_store::entities::run::RunStatus;
use switchyard_store::{ACTIVE, now_millis};
use tokio::sync::mpsc;

use super::decide::{self, Committed, Decided, DeliveryKey, Found, Lookups, SourceKey};
use super::flow_store::sqlite as flow_store;
use super::health::Signals;
use super::sqlite_checkpoint::{self, Nudge};
use super::{Answer, Delivery, MAX_BATCH, Pending, answer_all, refuse_all, refuse_unstorable};
use crate::config::Durability;
use crate::dispatcher::preclaim::PreClaims;
use crate::dispatcher::writer_records::Taken;
use crate::live::{Live, LiveConfig};
use switchyard_store::outbox::Recorded;

fn open(path: &Path, durability: Durability) -> anyhow::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    // A pooled connection holds the write lock only between its turn (`write_turn`) and its
    // commit, usually a millisecond or two: wait for it in short steps, not SQLite's default
    // steps of up to 100 ms, for at most 5 s as before.
    conn.busy_handler(Some(wait_briefly))?;
    // `journal_mode` answers with the mode now in force.
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        anyhow::bail!("the database stays in journal mode `{mode}`; WAL is required");
    }
    let synchronous = match durability {
        Durability::Full => "FULL",
        Durability::Normal => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", synchronous)?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.set_prepared_statement_cache_capacity(32);
    // Checkpoints run on their own thread (`sqlite_checkpoint`).
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    Ok(conn)
}

/// The busy handler: sleep 100 µs per call, give up (SQLITE_BUSY) after 5 s.
fn wait_briefly(calls: i32) -> bool {
    std::thread::sleep(Duration::from_micros(100));
    calls < 50_000
}

/// Opens the writer's and the checkpointer's connections to the (already migrated) database
/// file and starts their threads; they run until every sender is gone.
pub(super) fn start(
    path: &Path,
    durability: Durability,
    live: LiveConfig,
    queue: mpsc::Receiver<Pending>,
    signals: Signals,
) -> anyhow::Result<()> {
    let conn = open(path, durability)?;
    let checkpoints = sqlite_checkpoint::start(path)?;
    std::thread::Builder::new()
        .name("intake-sqlite".into())
        .spawn(move || run(conn, live, queue, checkpoints, &signals))?;
    Ok(())
}

fn run(
    mut conn: Connection,
    live: LiveConfig,
    mut queue: mpsc::Receiver<Pending>,
    checkpoints: Nudge,
    signals: &Signals,
) {
    let records = &signals.wake.records;
    let claims = &signals.wake.preclaims;
    records.open();
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        // Deliveries first; the dispatcher wakes an idle writer too (attempts to record,
        // backlog rows wanted).
        let first = futures::executor::block_on(async {
            tokio::select! {
                biased;
                next = queue.recv() => Some(next),
                () = records.woken() => None,
            }
        });
        let first = match first {
            Some(Some(first)) => first,
            Some(None) => break,
            None => {
                record_and_claim(&mut conn, records.take(), claims);
                checkpoints.committed();
                continue;
            }
        };
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let revision = live.current();
        let batch = std::mem::take(&mut batch);
        // Attempts the dispatcher offered ride along in this batch's transaction.
        let taken = records.take();
        // A panic on one batch drops its replies (its senders answer 503, retry safe) and
        // leaves the transaction rolled back; the writer goes on with the next batch.
        let decided = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            decide(&mut conn, &revision, batch, taken.attempts(), signals)
        }));
        match decided {
            Ok(Some(held)) => taken.recorded(&held),
            Ok(None) => taken.failed("the batch transaction that carried them failed"),
            Err(_) => {
                taken.failed("the intake writer panicked on the batch that carried them");
                signals.health.panicked();
                tracing::error!(
                    "the intake writer panicked on a batch; its senders were answered 503 and it goes on"
                );
            }
        }
        checkpoints.committed();
        checkpoints.catch_up(&conn);
    }
    records.close();
}

/// Records offered attempts and claims backlog rows wanted while no delivery is waiting, in a
/// transaction of their own.
fn record_and_claim(conn: &mut Connection, taken: Taken, claims: &PreClaims) {
    let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _turn = switchyard_store::write_turn::take_blocking();
        let now = now_millis();
        let txn = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let backlog = super::sqlite_backlog::claim(&txn, claims, now)?;
        let held = super::sqlite_records::record(&txn, taken.attempts(), now)?;
        txn.commit()?;
        Ok::<_, rusqlite::Error>((held, backlog))
    }));
    match done {
        Ok(Ok((held, backlog))) => {
            claims.hand_over_backlog(backlog);
            taken.recorded(&held);
        }
        Ok(Err(error)) => {
            tracing::warn!(%error, "cannot record dispatch attempts or claim backlog rows; the dispatcher takes over");
            claims.want_backlog();
            taken.failed(&error.to_string());
        }
        Err(_) => taken.failed("the intake writer panicked recording them"),
    }
}

/// Decides and answers every delivery of `batch`, recording `attempts` in the same transaction;
/// returns, per attempt, whether it still held its claim, or `None` if they were not recorded.
/// If the batch as a whole keeps failing, each delivery is tried alone (without the attempts),
/// so one poisonous delivery cannot refuse its neighbours.
fn decide(
    conn: &mut Connection,
    live: &Live,
    batch: Vec<Pending>,
    attempts: &[Recorded],
    signals: &Signals,
) -> Option<Vec<bool>> {
    let deliveries: Vec<&Delivery> = batch.iter().map(|p| &p.delivery).collect();
    let started = std::time::Instant::now();
    let _span = crate::telemetry::batch_commit(&deliveries);
    match commit_with_retries(conn, live, &deliveries, attempts, &signals.wake.preclaims) {
        Ok((committed, held)) => {
            crate::metrics::metrics().batch(committed.answers.len(), started.elapsed());
            tracing::debug!(
                size = committed.answers.len(),
                recorded = held.len(),
                micros = started.elapsed().as_micros() as u64,
                "batch committed"
            );
            answer_all(batch, committed, signals);
            return Some(held);
        }
        Err(error) if batch.len() > 1 || !attempts.is_empty() => {
            // Backlog rows it may have been asked for are asked for again.
            signals.wake.preclaims.want_backlog();
            tracing::warn!(%error, size = batch.len(), "a batch failed; deciding its deliveries one by one");
            for pending in batch {
                decide(conn, live, vec![pending], &[], signals);
            }
        }
        Err(error) if is_unstorable(&error) => refuse_unstorable(batch, &error),
        Err(error) => refuse_all(batch, &error, signals),
    }
    None
}

/// An error about the delivery's values, which a retry would meet again.
fn is_unstorable(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(ErrorCode::TooBig | ErrorCode::TypeMismatch | ErrorCode::ParameterOutOfRange)
    ) || matches!(
        error,
        rusqlite::Error::SqliteFailure(failure, _)
            if failure.code == ErrorCode::ConstraintViolation && !is_lost_race(error)
    )
}

fn commit_with_retries(
    conn: &mut Connection,
    live: &Live,
    deliveries: &[&Delivery],
    attempts: &[Recorded],
    claims: &PreClaims,
) -> rusqlite::Result<(Committed, Vec<bool>)> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match commit_batch(conn, live, deliveries, attempts, claims) {
            Err(error) if attempt < super::writer::ATTEMPTS && is_lost_race(&error) => {
                tracing::debug!(%error, attempt, "batch lost a race with another writer; retrying");
                std::thread::sleep(super::writer::backoff(attempt));
            }
            result => return result,
        }
    }
}

/// Another connection (a second daemon on the same file, or the busy timeout running out)
/// got in the way: trying again will see its committed result.
fn is_lost_race(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    ) || matches!(
        error,
        rusqlite::Error::SqliteFailure(failure, _)
            if failure.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                || failure.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
    )
}

/// One transaction: look up, decide, write, record the offered attempts, commit.
fn commit_batch(
    conn: &mut Connection,
    live: &Live,
    deliveries: &[&Delivery],
    attempts: &[Recorded],
    claims: &PreClaims,
) -> rusqlite::Result<(Committed, Vec<bool>)> {
    // Held until the commit: a pooled connection waiting for a turn then finds the lock free.
    let _turn = switchyard_store::write_turn::take_blocking();
    let now = now_millis();
    let txn = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let lookups = Lookups::needed(deliveries, live);
    let flow = flow_store::look_up(&txn, &lookups.flow, now)?;
    let mut found = Found {
        seen: stored_deliveries(&txn, &lookups.deliveries)?,
        claimed: claimed_messages(&txn, &lookups.messages)?,
        leases: leases(&txn, &lookups.leases)?,
        flow,
    };
    flow_store::windows(&txn, &lookups.flow, &found.leases, now, &mut found.flow)?;
    let mut decided = decide::decide(deliveries, lookups, found, live, now);
    // The backlog's oldest rows take free slots before this batch's new runs.
    let backlog = super::sqlite_backlog::claim(&txn, claims, now)?;
    let preclaimed = super::preclaim::claim(&mut decided, deliveries, claims, now);
    flow_store::replace(&txn, &decided.flow)?;
    write(&txn, &decided)?;
    flow_store::write(&txn, &decided.flow, now)?;
    let held = super::sqlite_records::record(&txn, attempts, now)?;
    txn.commit()?;
    claims.hand_over_backlog(backlog);
    let committed = Committed {
        expired_runs: decided.locks.expired_runs.len(),
        answers: decided.answers,
        preclaimed,
    };
    Ok((committed, held))
}

const INTAKE_COLUMNS: &str = "id, source, delivery_id, scope, outcome, detail, channel, \
     event_type, tenant_id, target_entity_id, payload, raw_ref, run_id, workflow_id, \
     held_by_run_id, message_key, config_revision, received_at, decided_at, traceparent, \
     tracestate";
/// What a stored answer is read as; `WHERE` one of the unique indexes.
const ANSWER_COLUMNS: &str = "SELECT id, outcome, detail, run_id, workflow_id, held_by_run_id \
     FROM intake WHERE ";

/// The answer of the ledger row of each `(source, scope, delivery_id)`: what a later copy is a
/// duplicate of.
fn stored_deliveries(
    txn: &Transaction<'_>,
    keys: &[(&str, &str, &str)],
) -> rusqlite::Result<HashMap<DeliveryKey, Answer>> {
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
) -> rusqlite::Result<HashMap<SourceKey, Answer>> {
    let mut found = HashMap::new();
    if keys.is_empty() {
        return Ok(found);
    }
    let mut select =
        txn.prepare_cached(&format!("{ANSWER_COLUMNS}message_key = ?1 AND source = ?2"))?;
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
fn answer_of(row: &rusqlite::Row<'_>) -> rusqlite::Result<Answer> {
    let outcome: String = row.get(1)?;
    Ok(decide::recorded_answer(
        row.get(0)?,
        &outcome,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
    ))
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

/// Writes everything the batch decided: leases, runs, their dispatches and history, raw bytes,
/// ledger rows, cursors.
fn write(txn: &Transaction<'_>, decided: &Decided) -> rusqlite::Result<()> {
    let locks = &decided.locks;
    // A plain insert: another process that created the row meanwhile makes it fail.
    each(
        txn,
        "INSERT INTO entity_locks \
         (tenant_id, target_entity_id, run_id, fencing_token, expires_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        &locks.created,
        |insert, lease| insert.execute(lease_params(lease)),
    )?;
    each(
        txn,
        "UPDATE entity_locks SET run_id = ?3, fencing_token = ?4, expires_at = ?5, \
         updated_at = ?6 WHERE target_entity_id = ?2 AND tenant_id = ?1",
        &locks.changed,
        |update, lease| update.execute(lease_params(lease)),
    )?;
    each(
        txn,
        "INSERT INTO runs (id, tenant_id, workflow_id, target_entity_id, intake_id, status, \
         fencing_token, lock_ttl_ms, created_at, updated_at, finished_at, traceparent, \
         tracestate, config_revision, principal_id, deadline_at, budgets) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
        &locks.new_runs,
        |insert, run| {
            insert.execute(params![
                run.id,
                run.tenant_id,
                run.workflow_id,
                run.target_entity_id,
                run.intake_id,
                run.status.as_str(),
                run.fencing_token,
                run.lock_ttl_ms,
                run.created_at,
                run.updated_at,
                run.finished_at,
                run.traceparent,
                run.tracestate,
                run.config_revision,
                run.principal_id,
                run.deadline_at,
                run.budgets,
            ])
        },
    )?;
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
    each(
        txn,
        "INSERT INTO dispatches (id, run_id, tenant_id, workflow_id, target, status, attempts, \
         series, due_at, created_at, updated_at, claimed_by) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        &decided.dispatches,
        |insert, d| {
            insert.execute(params![
                d.id,
                d.run_id,
                d.tenant_id,
                d.workflow_id,
                d.target,
                d.status.as_str(),
                d.attempts,
                d.series,
                d.due_at,
                d.created_at,
                d.updated_at,
                d.claimed_by,
            ])
        },
    )?;
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
    each(
        txn,
        "INSERT INTO raw_deliveries (id, source, content_type, body, received_at) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
        &decided.raw,
        |insert, raw| {
            insert.execute(params![
                raw.id,
                raw.source,
                raw.content_type,
                raw.body,
                raw.received_at,
            ])
        },
    )?;
    each(
        txn,
        &format!(
            "INSERT INTO intake ({INTAKE_COLUMNS}) VALUES \
             (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, \
             ?19, ?20, ?21)"
        ),
        &decided.ledger,
        |insert, row| {
            insert.execute(params![
                row.id,
                row.source,
                row.delivery_id,
                row.scope,
                row.outcome,
                row.detail,
                row.channel,
                row.event_type,
                row.tenant_id,
                row.target_entity_id,
                row.payload,
                row.raw_ref,
                row.run_id,
                row.workflow_id,
                row.held_by_run_id,
                row.message_key,
                row.config_revision,
                row.received_at,
                row.decided_at,
                row.traceparent,
                row.tracestate,
            ])
        },
    )?;
    each(
        txn,
        super::annotate::SQLITE,
        &super::annotate::of(&decided.ledger),
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
