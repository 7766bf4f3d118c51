//! Retention: a background task that deletes expired ledger rows, raw deliveries and finished
//! runs (with their dispatch, attempts and history), and on SQLite gives the space back.
//!
//! *Invariant: never deletes an active run or the rows it needs; never holds one long
//! transaction.* Every batch is its own short write transaction of at most `retention.batch`
//! rows per table, with a pause before the next, so the intake writer waits at most one batch.
//!
//! "Older than T" needs no new index: ids are UUIDv7 strings, whose first 12 hex digits are the
//! creation time in Unix milliseconds, so `id < cutoff_id(T)` is a range on the primary key
//! (and, with `status = ?`, on `runs_status (status, id)`; a run finished before T was created
//! before T). Each batch selects ids with `LIMIT` and then deletes `id IN (...)`, because MySQL
//! allows no `LIMIT` in an `IN` subquery.
//!
//! What is kept: a ledger row whose run is active (`queued`, `dispatched`, `needs_input`: the dispatcher
//! builds the run's message from it) or `dead_lettered` (`redispatch` builds it again) stays
//! past `retention.ledger`, until its run is pruned. `entity_locks` are never deleted: their
//! fencing tokens must keep growing.

use std::time::Duration;

use anyhow::Context;
use sea_orm::{
    ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr, Statement, Value,
};
use tokio::sync::watch;

use crate::background::Background;
use crate::config::RetentionConfig;
use crate::live::LiveConfig;

/// Pause between two batches, so the intake writer gets the write lock in between.
const BATCH_PAUSE: Duration = Duration::from_millis(20);

/// Pages one `PRAGMA incremental_vacuum` step gives back (1 MiB at SQLite's default page size):
/// each step is one short write transaction. A step moves live pages from the end of the file
/// into free ones, and every moved page is a WAL frame, so the steps are small and paced: the
/// WAL is checkpointed and starts over between them instead of growing by the whole shrink
/// (measured: a 20 MB shrink in 4 MiB steps 20 ms apart left a 9.4 MB WAL behind).
const VACUUM_PAGES: u32 = 256;

/// Pause between two vacuum steps: about one checkpoint pass of the intake writer's
/// checkpointer (`sqlite_checkpoint::PAUSE`, 100 ms).
const VACUUM_PAUSE: Duration = Duration::from_millis(150);

/// Final run statuses; only runs in one of these are ever pruned.
const FINAL_STATUSES: [&str; 5] = [
    "completed",
    "failed",
    "cancelled",
    "expired",
    "dead_lettered",
];

/// Statuses of runs whose ledger row is still needed (to build their message).
const NEEDS_LEDGER_ROW: &str = "('queued', 'dispatched', 'needs_input', 'dead_lettered')";

pub use switchyard_store::cutoff_id;

/// Rows deleted, per table.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Deleted {
    pub raw_deliveries: u64,
    pub intake: u64,
    pub runs: u64,
    pub dispatches: u64,
    pub dispatch_attempts: u64,
    pub run_history: u64,
    pub waits: u64,
}

impl Deleted {
    fn any(&self) -> bool {
        *self != Deleted::default()
    }
}

/// The running task.
#[derive(Debug)]
pub struct Retention(Background);

impl Retention {
    /// Starts pruning every `retention.interval` of the revision in force (a reload changes
    /// the windows from the next pass on).
    pub fn start(db: DatabaseConnection, live: LiveConfig) -> Self {
        Self(Background::spawn(|stopped| run(db, live, stopped)))
    }

    /// Stops after the batch in progress (which commits or rolls back on its own).
    pub async fn shutdown(&self) {
        if !self.0.stop(Duration::from_secs(10)).await {
            tracing::warn!("the retention task did not stop in time");
        }
    }
}

/// SQLite only, before any other connection (the intake writer's) is open: turns on
/// `auto_vacuum = INCREMENTAL`, which lets retention give freed pages back to the file system.
/// The mode takes effect only on a new database or through a `VACUUM`, so an older database is
/// rewritten once here (it needs free disk space of about its size, and time).
pub async fn prepare_sqlite(db: &DatabaseConnection) -> anyhow::Result<()> {
    if db.get_database_backend() != DbBackend::Sqlite {
        return Ok(());
    }
    use sea_orm::sqlx::Row;
    // Setting the mode and the VACUUM that applies it must run on the same connection.
    let mut conn = db
        .get_sqlite_connection_pool()
        .acquire()
        .await
        .context("cannot open a connection to set auto_vacuum")?;
    let mode: i64 = sea_orm::sqlx::query("PRAGMA auto_vacuum")
        .fetch_one(&mut *conn)
        .await
        .context("cannot read PRAGMA auto_vacuum")?
        .try_get(0)
        .context("cannot read PRAGMA auto_vacuum")?;
    if mode == 2 {
        return Ok(());
    }
    tracing::info!(
        auto_vacuum = mode,
        "turning on incremental auto_vacuum: rewriting the SQLite database once (VACUUM)"
    );
    for sql in ["PRAGMA auto_vacuum = INCREMENTAL", "VACUUM"] {
        sea_orm::sqlx::query(sql)
            .execute(&mut *conn)
            .await
            .with_context(|| format!("cannot run `{sql}` on the SQLite database"))?;
    }
    tracing::info!("the SQLite database now gives space back after retention deletes rows");
    Ok(())
}

async fn run(db: DatabaseConnection, live: LiveConfig, mut stopped: watch::Receiver<bool>) {
    loop {
        let config = live.current().settings.loaded.config.retention.clone();
        let now = switchyard_store::now_millis();
        match pass(&db, &config, now, &stopped).await {
            Ok(deleted) if deleted.any() => {
                tracing::info!(
                    raw_deliveries = deleted.raw_deliveries,
                    intake = deleted.intake,
                    runs = deleted.runs,
                    dispatches = deleted.dispatches,
                    dispatch_attempts = deleted.dispatch_attempts,
                    run_history = deleted.run_history,
                    waits = deleted.waits,
                    "retention deleted expired rows"
                );
                if let Err(error) = vacuum_sqlite(&db, &stopped).await {
                    tracing::warn!(%error, "incremental vacuum failed; the next pass retries it");
                }
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "retention pass failed; the next pass retries it");
            }
        }
        if *stopped.borrow() {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(config.interval) => {}
            _ = stopped.changed() => return,
        }
    }
}

/// One pass: finished runs first (their ledger rows may then go in the same pass), then the
/// ledger, then raw bytes. Stops early, between batches, when asked to.
pub async fn pass(
    db: &DatabaseConnection,
    config: &RetentionConfig,
    now: i64,
    stopped: &watch::Receiver<bool>,
) -> Result<Deleted, DbErr> {
    let mut deleted = Deleted::default();
    let before = |window: Duration| now.saturating_sub(window.as_millis() as i64);
    let runs_before = before(config.finished_runs);
    for status in FINAL_STATUSES {
        while !*stopped.borrow() {
            let txn = switchyard_store::runs::begin_write(db).await?;
            let n = prune_runs(&txn, status, runs_before, config.batch, &mut deleted).await?;
            txn.commit().await?;
            if n < config.batch {
                break;
            }
            tokio::time::sleep(BATCH_PAUSE).await;
        }
    }
    let ledger = Prune {
        table: "intake",
        // A row's run is found by its primary key; no scan of `runs`.
        keep: Some(format!(
            "EXISTS (SELECT 1 FROM runs WHERE runs.id = intake.run_id AND runs.status IN \
             {NEEDS_LEDGER_ROW})"
        )),
    };
    deleted.intake = ledger
        .all(db, before(config.ledger), config.batch, stopped)
        .await?;
    let raw = Prune {
        table: "raw_deliveries",
        keep: None,
    };
    deleted.raw_deliveries = raw
        .all(db, before(config.raw), config.batch, stopped)
        .await?;
    Ok(deleted)
}

/// Deletes one batch of runs in `status` finished before `before`, with their rows; returns
/// how many runs it selected.
async fn prune_runs(
    txn: &DatabaseTransaction,
    status: &'static str,
    before: i64,
    batch: usize,
    deleted: &mut Deleted,
) -> Result<usize, DbErr> {
    let backend = txn.get_database_backend();
    // Locked so a concurrent `redispatch` (which locks the run) either finishes first, and the
    // run is no longer final, or waits for this batch; SKIP LOCKED never waits for it.
    let lock = match backend {
        DbBackend::Sqlite => "",
        _ => " FOR UPDATE SKIP LOCKED",
    };
    // `status` is one of FINAL_STATUSES, written into the text so PostgreSQL plans each with
    // its own statistics (measured: a rare status goes through `runs_status`, the common one
    // through the primary key; with a bound status the generic plan always took the key).
    let sql = format!(
        "SELECT id FROM runs WHERE status = '{status}' AND id < {} AND finished_at < {} \
         ORDER BY id LIMIT {batch}{lock}",
        param(backend, 1),
        param(backend, 2)
    );
    let ids = select_ids(txn, &sql, vec![cutoff_id(before).into(), before.into()]).await?;
    if ids.is_empty() {
        return Ok(0);
    }
    deleted.run_history += delete_in(txn, "run_history", "run_id", &ids).await?;
    deleted.dispatch_attempts += delete_in(txn, "dispatch_attempts", "run_id", &ids).await?;
    deleted.dispatches += delete_in(txn, "dispatches", "run_id", &ids).await?;
    // Coalesced members go with their run (counted with its history).
    deleted.run_history += delete_in(txn, "run_members", "run_id", &ids).await?;
    deleted.waits += delete_in(txn, "waits", "run_id", &ids).await?;
    deleted.runs += delete_in(txn, "runs", "id", &ids).await?;
    Ok(ids.len())
}

/// Rows of one table older than a cutoff, by primary key, except those `keep` names.
struct Prune {
    table: &'static str,
    keep: Option<String>,
}

impl Prune {
    /// Deletes every row made before `before` in batches; returns how many.
    async fn all(
        &self,
        db: &DatabaseConnection,
        before: i64,
        batch: usize,
        stopped: &watch::Receiver<bool>,
    ) -> Result<u64, DbErr> {
        let backend = db.get_database_backend();
        let keep = self
            .keep
            .as_ref()
            .map(|keep| format!(" AND NOT {keep}"))
            .unwrap_or_default();
        let sql = format!(
            "SELECT id FROM {} WHERE id < {}{keep} ORDER BY id LIMIT {batch}",
            self.table,
            param(backend, 1)
        );
        let cutoff = cutoff_id(before);
        let mut total = 0;
        while !*stopped.borrow() {
            let txn = switchyard_store::runs::begin_write(db).await?;
            let ids = select_ids(&txn, &sql, vec![cutoff.clone().into()]).await?;
            if !ids.is_empty() {
                total += delete_in(&txn, self.table, "id", &ids).await?;
            }
            txn.commit().await?;
            if ids.len() < batch {
                break;
            }
            tokio::time::sleep(BATCH_PAUSE).await;
        }
        Ok(total)
    }
}

/// The `n`th bind parameter (1-based) in `backend`'s syntax.
fn param(backend: DbBackend, n: usize) -> String {
    match backend {
        DbBackend::Postgres => format!("${n}"),
        _ => "?".into(),
    }
}

async fn select_ids(
    txn: &DatabaseTransaction,
    sql: &str,
    values: Vec<Value>,
) -> Result<Vec<String>, DbErr> {
    let backend = txn.get_database_backend();
    txn.query_all_raw(Statement::from_sql_and_values(backend, sql, values))
        .await?
        .iter()
        .map(|row| row.try_get_by_index::<String>(0))
        .collect()
}

/// `DELETE FROM table WHERE column IN (ids)`; returns the rows deleted.
async fn delete_in(
    txn: &DatabaseTransaction,
    table: &str,
    column: &str,
    ids: &[String],
) -> Result<u64, DbErr> {
    let backend = txn.get_database_backend();
    let params: Vec<String> = (1..=ids.len()).map(|n| param(backend, n)).collect();
    let sql = format!(
        "DELETE FROM {table} WHERE {column} IN ({})",
        params.join(", ")
    );
    let values: Vec<Value> = ids.iter().map(|id| id.clone().into()).collect();
    Ok(txn
        .execute_raw(Statement::from_sql_and_values(backend, sql, values))
        .await?
        .rows_affected())
}

/// SQLite: gives the pages freed by a pass back to the file system, a few at a time (each step
/// is a short write transaction of its own).
async fn vacuum_sqlite(
    db: &DatabaseConnection,
    stopped: &watch::Receiver<bool>,
) -> Result<(), DbErr> {
    if db.get_database_backend() != DbBackend::Sqlite {
        return Ok(());
    }
    while !*stopped.borrow() {
        let free = db
            .query_one_raw(Statement::from_string(
                DbBackend::Sqlite,
                "PRAGMA freelist_count",
            ))
            .await?
            .map(|row| row.try_get_by_index::<i64>(0))
            .transpose()?
            .unwrap_or(0);
        if free == 0 {
            break;
        }
        db.execute_unprepared(&format!("PRAGMA incremental_vacuum({VACUUM_PAGES})"))
            .await?;
        tokio::time::sleep(VACUUM_PAUSE).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn millis_of(id: uuid::Uuid) -> i64 {
        let (secs, nanos) = id
            .get_timestamp()
            .expect("a v7 uuid has a timestamp")
            .to_unix();
        secs as i64 * 1000 + i64::from(nanos / 1_000_000)
    }

    #[test]
    fn an_id_made_at_t_sorts_between_the_cutoffs_of_t_minus_and_plus_one_ms() {
        for _ in 0..1000 {
            let id = uuid::Uuid::now_v7();
            let t = millis_of(id);
            let id = id.to_string();
            assert!(cutoff_id(t - 1) < id, "{} < {id}", cutoff_id(t - 1));
            assert!(id < cutoff_id(t + 1), "{id} < {}", cutoff_id(t + 1));
            // Made at t exactly: not older than t.
            assert!(cutoff_id(t) <= id, "{} <= {id}", cutoff_id(t));
        }
    }

    #[test]
    fn the_cutoff_is_a_uuid_string_of_its_millisecond() {
        let cutoff = cutoff_id(0x0123_4567_89ab);
        assert_eq!(cutoff, "01234567-89ab-0000-0000-000000000000");
        assert!(uuid::Uuid::parse_str(&cutoff).is_ok());
        assert_eq!(cutoff_id(-5), "00000000-0000-0000-0000-000000000000");
        assert!(cutoff_id(1_000) < cutoff_id(1_001));
    }
}
