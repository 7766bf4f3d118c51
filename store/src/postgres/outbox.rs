//! PostgreSQL's outbox: its claims read rows `FOR UPDATE SKIP LOCKED`, as every server's do
//! (`outbox::skip_locked`).

use async_trait::async_trait;
use sea_orm::{Condition, DatabaseTransaction, DbErr};

use super::Postgres;
use crate::Millis;
use crate::driver::OutboxDriver;
use crate::entities::dispatch;
use crate::outbox::skip_locked::SkipLocked;

#[async_trait]
impl OutboxDriver for Postgres {
    async fn lock_due(
        &self,
        txn: &DatabaseTransaction,
        filter: Condition,
        now: Millis,
        limit: u64,
    ) -> Result<Vec<dispatch::Model>, DbErr> {
        SkipLocked.lock_due(txn, filter, now, limit).await
    }

    async fn lock_by_id(
        &self,
        txn: &DatabaseTransaction,
        ids: Vec<String>,
    ) -> Result<Vec<dispatch::Model>, DbErr> {
        SkipLocked.lock_by_id(txn, ids).await
    }
}
