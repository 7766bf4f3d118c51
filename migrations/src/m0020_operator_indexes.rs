//! An index for the operator's lookup by outcome: `/v1/intake?outcome=…` (within a time window
//! or not) newest first read every ledger row (131 ms at 645,000); with `intake_outcome
//! (outcome, id)` it reads the rows of that outcome in id (time) order, and a `since` bound
//! stops the walk (`ledger::select`). The intake writer never reads by outcome, so its
//! per-key probes keep their own indexes (`intake_delivery_scope`, `intake_message_key_source`;
//! checked with a generic plan in the query-plan tests). Runs need none: by status they read
//! `runs_status (status, id)`, by workflow `runs_workflow_status`.
//!
//! And `entity_locks_held (tenant_id, target_entity_id) WHERE run_id IS NOT NULL` on SQLite and
//! PostgreSQL (MySQL has no partial index: there `/v1/locks` keeps `entity_locks_expires_at`):
//! `/v1/locks` lists held leases in that order, and read them through the expiry index and a
//! sort of every held lease (574 ms behind 500,000 queued runs). A release sets `run_id` NULL,
//! so the index holds the held leases only; the writer's lease lookup names no `run_id`, so it
//! cannot use it.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DatabaseBackend;

#[derive(Debug)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0020_operator_indexes"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .name("intake_outcome")
                    .table("intake")
                    .col("outcome")
                    .col("id")
                    .to_owned(),
            )
            .await?;
        if manager.get_database_backend() != DatabaseBackend::MySql {
            manager
                .create_index(
                    Index::create()
                        .name("entity_locks_held")
                        .table("entity_locks")
                        .col("tenant_id")
                        .col("target_entity_id")
                        .and_where(Expr::col("run_id").is_not_null())
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DatabaseBackend::MySql {
            manager
                .drop_index(
                    Index::drop()
                        .name("entity_locks_held")
                        .table("entity_locks")
                        .to_owned(),
                )
                .await?;
        }
        manager
            .drop_index(
                Index::drop()
                    .name("intake_outcome")
                    .table("intake")
                    .to_owned(),
            )
            .await
    }
}
