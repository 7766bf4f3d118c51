//! The claim reads of the database servers (PostgreSQL, MySQL 8, MariaDB 10.6): rows are read
//! `FOR UPDATE SKIP LOCKED`, so replicas share the due rows and never wait on each other's
//! claims. SQLite, with one writer at a time, reads them without a row lock (`sqlite::outbox`).

use async_trait::async_trait;
use sea_orm::sea_query::{LockBehavior, LockType};
use sea_orm::{Condition, DatabaseTransaction, DbErr, QuerySelect};

use crate::Millis;
use crate::driver::OutboxDriver;
use crate::entities::dispatch;

/// The servers' outbox statements. They hold no state: the pool-only entry points
/// (`outbox::claim_push(db, ...)`) use them without a `Store`.
#[derive(Debug)]
pub(crate) struct SkipLocked;

#[async_trait]
impl OutboxDriver for SkipLocked {
    async fn lock_due(
        &self,
        txn: &DatabaseTransaction,
        filter: Condition,
        now: Millis,
        limit: u64,
    ) -> Result<Vec<dispatch::Model>, DbErr> {
        super::due(filter, now, limit)
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
