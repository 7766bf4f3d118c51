//! SQLite's own statements for the outbox. On the pool, claims read their rows without a row
//! lock: a write transaction (`BEGIN IMMEDIATE`, `runs::begin_write`) already excludes every
//! other writer, so no other claimer can take them meanwhile. On the intake writer's own
//! connection ([`writer`]), push claims and records are applied with cached single-row
//! statements ([`apply`]) inside the writer's batch transaction.

pub(crate) mod apply;
pub(crate) mod writer;

#[cfg(test)]
mod tests;

use async_trait::async_trait;
use sea_orm::{Condition, DatabaseTransaction, DbErr};

use super::Sqlite;
use crate::Millis;
use crate::driver::OutboxDriver;
use crate::entities::dispatch;

/// SQLite's outbox statements. They hold no state: the pool-only entry points
/// (`outbox::claim_push(db, ...)`) use them without a `Store`.
#[derive(Debug)]
pub(crate) struct Statements;

#[async_trait]
impl OutboxDriver for Statements {
    async fn lock_due(
        &self,
        txn: &DatabaseTransaction,
        filter: Condition,
        now: Millis,
        limit: u64,
    ) -> Result<Vec<dispatch::Model>, DbErr> {
        crate::outbox::due(filter, now, limit).all(txn).await
    }

    async fn lock_by_id(
        &self,
        txn: &DatabaseTransaction,
        ids: Vec<String>,
    ) -> Result<Vec<dispatch::Model>, DbErr> {
        crate::by_key::dispatches(ids).all(txn).await
    }
}

/// The pool's claims and records (the intake writer's riders apply [`writer`]'s in its own
/// transactions).
#[async_trait]
impl OutboxDriver for Sqlite {
    async fn lock_due(
        &self,
        txn: &DatabaseTransaction,
        filter: Condition,
        now: Millis,
        limit: u64,
    ) -> Result<Vec<dispatch::Model>, DbErr> {
        Statements.lock_due(txn, filter, now, limit).await
    }

    async fn lock_by_id(
        &self,
        txn: &DatabaseTransaction,
        ids: Vec<String>,
    ) -> Result<Vec<dispatch::Model>, DbErr> {
        Statements.lock_by_id(txn, ids).await
    }
}
