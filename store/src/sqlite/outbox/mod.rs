//! SQLite's own statements for the outbox. On the pool, claims read their rows without a row
//! lock: a write transaction (`BEGIN IMMEDIATE`, `runs::begin_write`) already excludes every
//! other writer, so no other claimer can take them meanwhile. On the intake writer's own
//! connection ([`writer`]), push claims and records are applied with cached single-row
//! statements ([`apply`]) inside the writer's batch transaction.

// Transitional: used (beyond the tests) once the intake writer thread moves into this crate.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod apply;
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod writer;

#[cfg(test)]
mod tests;

use async_trait::async_trait;
use sea_orm::{Condition, DatabaseTransaction, DbErr};

use super::Sqlite;
use crate::Millis;
use crate::driver::OutboxDriver;
use crate::entities::dispatch;

#[allow(unused_imports)] // Transitional: the intake writer thread's entry points.
pub(crate) use writer::{claim_push, record};

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

/// The pool's claims and records for now; the intake writer thread is to take them into its
/// own transactions ([`writer`]).
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
