//! The pool intake writer (PostgreSQL, MySQL): decides a batch of deliveries in one transaction
//! and commits once, on PostgreSQL with fixed statements on a connection it keeps
//! ([`postgres_batch`]), on MySQL through sea-orm. Several may run, sharded by entity.

use std::collections::HashMap;
use std::time::Duration;

use futures::FutureExt;
use sea_orm::sea_query::OnConflict;
use sea_orm::{DatabaseConnection, DbBackend, DbErr, EntityTrait, RuntimeErr, SqlErr};
use switchyard_store::entities::{dispatch, run_history};
use switchyard_store::leases::lock_leases;
use switchyard_store::now_millis;
use switchyard_store::runs::begin_write;
use tokio::sync::mpsc;

use super::decide::{self, Committed, Found, Lookups};
use super::flow_store::orm as flow_store;
use super::health::Signals;
use super::postgres_batch;
use super::{Answer, Delivery, MAX_BATCH, Pending, answer_all, refuse_all, refuse_unstorable};
use crate::dispatcher::preclaim::PreClaims;
use crate::live::{Live, LiveConfig};
use crate::store::entities::{intake, mailbox_cursor, raw_delivery};
use crate::store::ledger;

/// Tries of one batch when it lost a race with another writer (unique key, deadlock).
pub(super) const ATTEMPTS: u32 = 5;

/// Where a writer commits: PostgreSQL with its own statements on a connection it keeps
/// ([`postgres_batch`]), MySQL through sea-orm.
enum Store {
    Postgres(postgres_batch::Writer),
    Orm(DatabaseConnection),
}

/// Runs until every sender is gone.
pub(super) async fn run(
    db: DatabaseConnection,
    live: LiveConfig,
    mut queue: mpsc::Receiver<Pending>,
    signals: Signals,
) {
    let mut store = if db.get_database_backend() == DbBackend::Postgres {
        Store::Postgres(postgres_batch::Writer::new(
            db.get_postgres_connection_pool().clone(),
        ))
    } else {
        Store::Orm(db)
    };
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while queue.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let revision = live.current();
        let batch = std::mem::take(&mut batch);
        let more_queued = || !queue.is_empty();
        // A panic on one batch drops its replies (its senders answer 503, retry safe); the
        // writer goes on with the next batch.
        let decided = std::panic::AssertUnwindSafe(decide(
            &mut store,
            &revision,
            batch,
            &signals,
            &more_queued,
        ))
        .catch_unwind()
        .await;
        if decided.is_err() {
            signals.health.panicked();
            tracing::error!(
                "an intake writer panicked on a batch; its senders were answered 503 and it goes on"
            );
        }
    }
}

/// Decides and answers every delivery of `batch`. If the batch as a whole keeps failing, each
/// delivery is tried alone, so one poisonous delivery cannot refuse its neighbours.
/// `more_queued` tells whether another batch waits for this writer.
async fn decide(
    store: &mut Store,
    live: &Live,
    batch: Vec<Pending>,
    signals: &Signals,
    more_queued: &(dyn Fn() -> bool + Sync),
) {
    let deliveries: Vec<&Delivery> = batch.iter().map(|p| &p.delivery).collect();
    let started = std::time::Instant::now();
    let span = crate::telemetry::batch_commit(&deliveries);
    let committed = commit_with_retries(
        store,
        live,
        &deliveries,
        &signals.wake.preclaims,
        more_queued,
    )
    .await;
    drop(span);
    match committed {
        Ok(committed) => {
            crate::metrics::metrics().batch(committed.answers.len(), started.elapsed());
            tracing::debug!(
                size = committed.answers.len(),
                micros = started.elapsed().as_micros() as u64,
                "batch committed"
            );
            answer_all(batch, committed, signals);
        }
        Err(error) if batch.len() > 1 && !is_connection_error(&error) => {
            tracing::warn!(%error, size = batch.len(), "a batch failed; deciding its deliveries one by one");
            for pending in batch {
                Box::pin(decide(store, live, vec![pending], signals, more_queued)).await;
            }
        }
        Err(error) if is_unstorable(&error) => refuse_unstorable(batch, &error),
        Err(error) => refuse_all(batch, &error, signals),
    }
}

/// An error about the delivery's values (SQLSTATE class 22, data exceptions: a value too long,
/// a byte sequence the column's encoding cannot take), which a retry would meet again.
fn is_unstorable(error: &DbErr) -> bool {
    let (DbErr::Query(RuntimeErr::SqlxError(error)) | DbErr::Exec(RuntimeErr::SqlxError(error))) =
        error
    else {
        return false;
    };
    let Some(database) = error.as_database_error() else {
        return false;
    };
    let code = database.code().unwrap_or_default();
    code.starts_with("22")
        || (code == "HY000" && database.message().contains("Incorrect string value"))
}

async fn commit_with_retries(
    store: &mut Store,
    live: &Live,
    deliveries: &[&Delivery],
    claims: &PreClaims,
    more_queued: &(dyn Fn() -> bool + Sync),
) -> Result<Committed, DbErr> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let result = match store {
            Store::Postgres(writer) => {
                writer
                    .commit_batch(live, deliveries, claims, more_queued)
                    .await
            }
            Store::Orm(db) => commit_batch(db, live, deliveries).await,
        };
        match result {
            Err(error) if attempt < ATTEMPTS && is_lost_race(&error) => {
                tracing::debug!(%error, attempt, "batch lost a race with another writer; retrying");
                tokio::time::sleep(backoff(attempt)).await;
            }
            result => return result,
        }
    }
}

/// A conflict another transaction caused: trying again will see its committed result.
fn is_lost_race(error: &DbErr) -> bool {
    if matches!(error.sql_err(), Some(SqlErr::UniqueConstraintViolation(_))) {
        return true;
    }
    let text = error.to_string().to_ascii_lowercase();
    [
        "deadlock",
        "40001",
        "40p01",
        "serialize",
        "database is locked",
        "lock wait timeout",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

fn is_connection_error(error: &DbErr) -> bool {
    matches!(error, DbErr::Conn(_) | DbErr::ConnectionAcquire(_))
}

pub(super) fn backoff(attempt: u32) -> Duration {
    // Jitter from the clock's low bits keeps two writers that collided from colliding again.
    let jitter = u64::from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
            % 5_000,
    );
    Duration::from_micros((2_000 << attempt.min(6)) + jitter)
}

fn answers_of<K: Eq + std::hash::Hash>(rows: HashMap<K, intake::Model>) -> HashMap<K, Answer> {
    rows.into_iter()
        .map(|(key, row)| (key, decide::first_answer(&row)))
        .collect()
}

/// One transaction through sea-orm: dedup, route, lock, and write everything the batch decided.
async fn commit_batch(
    db: &DatabaseConnection,
    live: &Live,
    deliveries: &[&Delivery],
) -> Result<Committed, DbErr> {
    let now = now_millis();
    let txn = begin_write(db).await?;
    let lookups = Lookups::needed(deliveries, live);
    let flow = flow_store::look_up(&txn, &lookups.flow, now).await?;
    let mut found = Found {
        seen: answers_of(ledger::existing_deliveries(&txn, &lookups.deliveries).await?),
        claimed: if lookups.messages.is_empty() {
            HashMap::new()
        } else {
            answers_of(ledger::claimed_messages(&txn, &lookups.messages).await?)
        },
        leases: lock_leases(&txn, &lookups.leases).await?,
        flow,
    };
    flow_store::windows(&txn, &lookups.flow, &found.leases, now, &mut found.flow).await?;
    let decided = decide::decide(deliveries, lookups, found, live, now);
    let expired_runs = decided.locks.expired_runs.len();
    flow_store::replace(&txn, &decided.flow).await?;
    flow_store::write(&txn, &decided.flow, now).await?;

    decided.locks.persist(&txn).await?;
    if !decided.raw.is_empty() {
        raw_delivery::Entity::insert_many(
            decided.raw.into_iter().map(raw_delivery::ActiveModel::from),
        )
        .exec_without_returning(&txn)
        .await?;
    }
    if !decided.ledger.is_empty() {
        intake::Entity::insert_many(decided.ledger.into_iter().map(intake::ActiveModel::from))
            .exec_without_returning(&txn)
            .await?;
    }
    if !decided.dispatches.is_empty() {
        dispatch::Entity::insert_many(
            decided
                .dispatches
                .into_iter()
                .map(dispatch::ActiveModel::from),
        )
        .exec_without_returning(&txn)
        .await?;
    }
    if !decided.history.is_empty() {
        run_history::Entity::insert_many(
            decided
                .history
                .into_iter()
                .map(run_history::ActiveModel::from),
        )
        .exec_without_returning(&txn)
        .await?;
    }
    if !decided.cursors.is_empty() {
        mailbox_cursor::Entity::insert_many(
            decided
                .cursors
                .into_iter()
                .map(mailbox_cursor::ActiveModel::from),
        )
        .on_conflict(
            OnConflict::columns([
                mailbox_cursor::Column::Source,
                mailbox_cursor::Column::Mailbox,
            ])
            .update_columns([
                mailbox_cursor::Column::Uidvalidity,
                mailbox_cursor::Column::LastUid,
                mailbox_cursor::Column::UpdatedAt,
            ])
            .to_owned(),
        )
        .exec_without_returning(&txn)
        .await?;
    }
    txn.commit().await?;
    Ok(Committed {
        answers: decided.answers,
        expired_runs,
        preclaimed: Vec::new(),
    })
}
