//! MySQL's and MariaDB's own statements for the outbox: claims read their rows `FOR UPDATE
//! SKIP LOCKED` (MySQL 8, MariaDB 10.6), so replicas share the due rows and never wait on each
//! other's claims.

use async_trait::async_trait;
use sea_orm::sea_query::{LockBehavior, LockType};
use sea_orm::{Condition, DatabaseTransaction, DbErr, QuerySelect};

use super::MySql;
use crate::Millis;
use crate::driver::OutboxDriver;
use crate::entities::dispatch;

/// MySQL (and MariaDB)'s outbox statements. They hold no state: the pool-only entry points
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
        crate::outbox::due(filter, now, limit)
            .lock_with_behavior(LockType::Update, LockBehavior::SkipLocked)
            .all(txn)
            .await
    }

    async fn lock_by_id(
        &self,
        txn: &DatabaseTransaction,
        ids: Vec<String>,
    ) -> Result<Vec<dispatch::Model>, DbErr> {
        crate::by_key::dispatches(ids)
            .lock_with_behavior(LockType::Update, LockBehavior::SkipLocked)
            .all(txn)
            .await
    }
}

#[async_trait]
impl OutboxDriver for MySql {
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
