//! Per-database operations of the outbox: how a claim keeps the rows it read from every other
//! claimer (PostgreSQL and MySQL: `FOR UPDATE SKIP LOCKED`, so replicas share the work and
//! never wait on each other; SQLite: no row lock, its one writer at a time already excludes
//! them), and the operations a database may run its own way (SQLite's writer thread is to take
//! push claims and records into its own transactions).
//!
//! Invariant: what a claim or record changes is decided in `outbox::machine` and written by
//! `outbox::apply` on every database; a driver only chooses how rows are read and locked, and
//! where the unit of work runs.

use async_trait::async_trait;
use sea_orm::{Condition, DatabaseConnection, DatabaseTransaction, DbErr};

use crate::Millis;
use crate::ceilings::MaxRunning;
use crate::entities::dispatch;
use crate::outbox::{ClaimedRun, Recorded};

/// What each database does its own way in the outbox.
#[async_trait]
pub trait OutboxDriver: Send + Sync {
    /// The first `limit` pending dispatches due by `now` that match `filter`, oldest due first
    /// (`outbox::due`), each kept from every other claimer until `txn` ends; rows another
    /// claimer holds are passed over, not waited for.
    async fn lock_due(
        &self,
        txn: &DatabaseTransaction,
        filter: Condition,
        now: Millis,
        limit: u64,
    ) -> Result<Vec<dispatch::Model>, DbErr>;

    /// The dispatches with `ids` (by key alone, `crate::by_key`), each kept from every other
    /// claimer until `txn` ends; rows another holds are passed over (the lapsed-claims reset).
    async fn lock_by_id(
        &self,
        txn: &DatabaseTransaction,
        ids: Vec<String>,
    ) -> Result<Vec<dispatch::Model>, DbErr>;

    /// Claims up to `limit` due dispatches of the push target `target` for `owner` until
    /// `claim_until` (`outbox::claim_push`). By default in a transaction of the pool.
    #[allow(clippy::too_many_arguments)]
    async fn claim_push(
        &self,
        db: &DatabaseConnection,
        target: &str,
        owner: &str,
        limit: u64,
        now: Millis,
        claim_until: Millis,
        capped: &[MaxRunning],
    ) -> Result<Vec<ClaimedRun>, DbErr> {
        crate::outbox::claim::claim_push_with(
            self,
            db,
            target,
            owner,
            limit,
            now,
            claim_until,
            capped,
        )
        .await
    }

    /// Records a batch of attempts in one transaction (`outbox::record`): per attempt, whether
    /// it still held its claim. By default in a transaction of the pool.
    async fn record_attempts(
        &self,
        db: &DatabaseConnection,
        attempts: &[Recorded],
        now: Millis,
    ) -> Result<Vec<bool>, DbErr> {
        crate::outbox::record::record_with(db, attempts, now).await
    }
}
