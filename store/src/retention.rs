//! Retention's statements: deleting expired ledger rows, their raw bytes and finished runs (with
//! their dispatch, attempts, history, members, waits and the waits' Slack approval messages) in
//! bounded batches, and giving the space back where the database does not (SQLite, through its
//! driver).
//!
//! *Invariant: never deletes an active run or the rows it needs; never holds one long
//! transaction.* Every batch is its own short write transaction of at most `batch` rows per
//! table; the caller paces them.
//!
//! "Older than T" needs no new index: ids are UUIDv7 strings, whose first 12 hex digits are the
//! creation time in Unix milliseconds, so `id < cutoff_id(T)` is a range on the primary key
//! (and, with `status = ?`, on `runs_status (status, id)`; a run finished before T was created
//! before T). Each batch selects ids with `LIMIT` and then deletes `id IN (...)`, because MySQL
//! allows no `LIMIT` in an `IN` subquery.
//!
//! What is kept: a ledger row whose run is active (`queued`, `dispatched`, `needs_input`: the
//! dispatcher builds the run's message from it) or `dead_lettered` (`redispatch` builds it
//! again) stays past its window, until its run is pruned. `entity_locks` are never deleted:
//! their fencing tokens must keep growing.

use sea_orm::sea_query::{Alias, Expr, ExprTrait, LockBehavior, LockType, Order, Query};
use sea_orm::{ConnectionTrait, DatabaseTransaction, DbErr, StatementBuilder};

use crate::entities::raw_delivery;
use crate::entities::run::RunStatus;
use crate::runs::begin_write;
use crate::{Millis, Store, cutoff_id};

/// Final run statuses, in the order a pass prunes them; only runs in one of these are ever
/// pruned.
pub const FINAL_STATUSES: [RunStatus; 5] = [
    RunStatus::Completed,
    RunStatus::Failed,
    RunStatus::Cancelled,
    RunStatus::Expired,
    RunStatus::DeadLettered,
];

/// Statuses of runs whose ledger row is still needed (to build their message).
const NEEDS_LEDGER_ROW: &str = "('queued', 'dispatched', 'needs_input', 'dead_lettered')";

/// Rows deleted, per table.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Deleted {
    /// Ledger rows whose raw bytes were emptied (named after the table the bytes had before
    /// m0023, as the retention log line still is).
    pub raw_deliveries: u64,
    pub intake: u64,
    pub runs: u64,
    pub dispatches: u64,
    pub dispatch_attempts: u64,
    pub run_history: u64,
    pub waits: u64,
    /// Slack approval messages of the deleted waits.
    pub slack_messages: u64,
}

impl Deleted {
    /// Whether anything was deleted.
    pub fn any(&self) -> bool {
        *self != Deleted::default()
    }
}

/// One batch: how many rows it selected (fewer than the batch size: the last one) and how
/// many it deleted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    pub selected: usize,
    pub deleted: u64,
}

/// The ids (`id` column) of up to `batch` rows of `table` made before `cutoff`, oldest first,
/// that `keep` (an SQL condition) does not name.
async fn select_ids<C: ConnectionTrait>(
    txn: &C,
    table: &str,
    conditions: Vec<Expr>,
    batch: usize,
    lock: bool,
) -> Result<Vec<String>, DbErr> {
    let mut select = Query::select();
    select
        .column(Alias::new("id"))
        .from(Alias::new(table))
        .order_by(Alias::new("id"), Order::Asc)
        .limit(batch as u64);
    for condition in conditions {
        select.and_where(condition);
    }
    if lock {
        // SQLite has no row locks (its one writer is the lock); the servers skip rows another
        // transaction holds instead of waiting for them.
        select.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
    }
    let backend = txn.get_database_backend();
    txn.query_all_raw(StatementBuilder::build(&select, &backend))
        .await?
        .iter()
        .map(|row| row.try_get_by_index::<String>(0))
        .collect()
}

/// Deletes the Slack approval messages of the waits of runs `run_ids` (found through
/// `waits_run_wait` and `slack_messages_wait`; `slack_messages` has no index on its own
/// `run_id`); returns the rows deleted.
async fn delete_messages_of_waits(
    txn: &DatabaseTransaction,
    run_ids: &[String],
) -> Result<u64, DbErr> {
    let waits = Query::select()
        .column(Alias::new("id"))
        .from(Alias::new("waits"))
        .and_where(Expr::col(Alias::new("run_id")).is_in(run_ids.iter().map(String::as_str)))
        .to_owned();
    let of_waits = Expr::col(Alias::new("wait_row_id")).in_subquery(waits);
    delete_where(txn, "slack_messages", of_waits).await
}

/// `DELETE FROM table WHERE column IN (ids)`; returns the rows deleted.
async fn delete_in(
    txn: &DatabaseTransaction,
    table: &str,
    column: &str,
    ids: &[String],
) -> Result<u64, DbErr> {
    let listed = Expr::col(Alias::new(column)).is_in(ids.iter().map(String::as_str));
    delete_where(txn, table, listed).await
}

/// `DELETE FROM table WHERE condition`; returns the rows deleted.
async fn delete_where(
    txn: &DatabaseTransaction,
    table: &str,
    condition: Expr,
) -> Result<u64, DbErr> {
    let delete = Query::delete()
        .from_table(Alias::new(table))
        .and_where(condition)
        .to_owned();
    let backend = txn.get_database_backend();
    Ok(txn
        .execute_raw(StatementBuilder::build(&delete, &backend))
        .await?
        .rows_affected())
}

impl Store {
    /// Deletes one batch of up to `batch` runs in the final `status` finished before `before`,
    /// with their dispatches, attempts, history, members, waits and the waits' Slack approval
    /// messages, in one transaction; adds what it deleted to `deleted` and returns how many runs
    /// it selected. An active run is never selected, nor a run a concurrent `redispatch` holds.
    pub async fn prune_finished_runs(
        &self,
        status: RunStatus,
        before: Millis,
        batch: usize,
        deleted: &mut Deleted,
    ) -> Result<usize, DbErr> {
        if status.is_active() {
            return Ok(0);
        }
        let txn = begin_write(self.db()).await?;
        // `status` is written into the text so PostgreSQL plans each with its own statistics
        // (measured: a rare status goes through `runs_status`, the common one through the
        // primary key; with a bound status the generic plan always took the key). Locked so a
        // concurrent `redispatch` (which locks the run) either finishes first, and the run is
        // no longer final, or waits for this batch; SKIP LOCKED never waits for it.
        let ids = select_ids(
            &txn,
            "runs",
            vec![
                Expr::cust(format!("status = '{}'", status.as_str())),
                Expr::col(Alias::new("id")).lt(cutoff_id(before)),
                Expr::col(Alias::new("finished_at")).lt(before),
            ],
            batch,
            true,
        )
        .await?;
        if ids.is_empty() {
            txn.commit().await?;
            return Ok(0);
        }
        deleted.run_history += delete_in(&txn, "run_history", "run_id", &ids).await?;
        deleted.dispatch_attempts += delete_in(&txn, "dispatch_attempts", "run_id", &ids).await?;
        deleted.dispatches += delete_in(&txn, "dispatches", "run_id", &ids).await?;
        // Coalesced members go with their run (counted with its history).
        deleted.run_history += delete_in(&txn, "run_members", "run_id", &ids).await?;
        deleted.slack_messages += delete_messages_of_waits(&txn, &ids).await?;
        deleted.waits += delete_in(&txn, "waits", "run_id", &ids).await?;
        deleted.runs += delete_in(&txn, "runs", "id", &ids).await?;
        txn.commit().await?;
        Ok(ids.len())
    }

    /// Deletes one batch of up to `batch` ledger rows made before `before`, except those whose
    /// run still needs them (active or dead-lettered), in one transaction.
    pub async fn prune_ledger(&self, before: Millis, batch: usize) -> Result<Batch, DbErr> {
        // A row's run is found by its primary key; no scan of `runs`.
        let keep = Expr::cust(format!(
            "NOT EXISTS (SELECT 1 FROM runs WHERE runs.id = intake.run_id AND runs.status IN \
             {NEEDS_LEDGER_ROW})"
        ));
        self.prune_by_id("intake", before, batch, Some(keep)).await
    }

    /// Empties the raw bytes of up to `batch` ledger rows made before `before` (their
    /// `raw_content_type` and `raw_body`; the rows stay for `retention.ledger`), oldest first,
    /// starting at the id `from` (`""`: the oldest row). Returns the batch and where the next
    /// one starts: the last id it emptied, or `before`'s cutoff once none is left before it.
    ///
    /// Emptied rows stay in the ledger, so a batch starting from the oldest row reads past
    /// every row emptied earlier: the caller keeps `from` between passes, and only its first
    /// pass reads them. The ids are read before the write transaction, so that read never holds
    /// the write lock.
    pub async fn prune_raw(
        &self,
        from: &str,
        before: Millis,
        batch: usize,
    ) -> Result<(Batch, String), DbErr> {
        let cutoff = cutoff_id(before);
        let kept = || Expr::col(raw_delivery::Column::Body).is_not_null();
        let conditions = vec![
            Expr::col(Alias::new("id")).gte(from),
            Expr::col(Alias::new("id")).lt(cutoff.as_str()),
            kept(),
        ];
        let ids = select_ids(self.db(), "intake", conditions, batch, false).await?;
        let Some(last) = ids.last().cloned() else {
            return Ok((Batch::default(), cutoff));
        };
        let txn = begin_write(self.db()).await?;
        let empty = Query::update()
            .table(raw_delivery::Entity)
            .value(raw_delivery::Column::ContentType, Option::<String>::None)
            .value(raw_delivery::Column::Body, Option::<Vec<u8>>::None)
            .and_where(Expr::col(Alias::new("id")).is_in(ids.iter().map(String::as_str)))
            .and_where(kept())
            .to_owned();
        let backend = self.db().get_database_backend();
        let emptied = txn
            .execute_raw(StatementBuilder::build(&empty, &backend))
            .await?
            .rows_affected();
        txn.commit().await?;
        let next = match ids.len() < batch {
            true => cutoff,
            false => last,
        };
        Ok((
            Batch {
                selected: ids.len(),
                deleted: emptied,
            },
            next,
        ))
    }

    async fn prune_by_id(
        &self,
        table: &str,
        before: Millis,
        batch: usize,
        keep: Option<Expr>,
    ) -> Result<Batch, DbErr> {
        let txn = begin_write(self.db()).await?;
        let mut conditions = vec![Expr::col(Alias::new("id")).lt(cutoff_id(before))];
        conditions.extend(keep);
        let ids = select_ids(&txn, table, conditions, batch, false).await?;
        let deleted = if ids.is_empty() {
            0
        } else {
            delete_in(&txn, table, "id", &ids).await?
        };
        txn.commit().await?;
        Ok(Batch {
            selected: ids.len(),
            deleted,
        })
    }

    /// Readies the database for retention to give space back (SQLite: incremental
    /// auto_vacuum, rewriting an older file once): before any other connection is open.
    pub async fn prepare_space(&self) -> Result<(), DbErr> {
        self.driver().prepare_space(self.db()).await
    }

    /// One short step of giving the space retention freed back to the file system; whether
    /// freed space remains (never on a server, which manages its own).
    pub async fn give_back_space(&self) -> Result<bool, DbErr> {
        self.driver().give_back_space(self.db()).await
    }
}

#[cfg(test)]
mod tests {
    use crate::cutoff_id;

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
