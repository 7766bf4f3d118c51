//! An index for the operator's lookup by outcome: `/v1/intake?outcome=…` (within a time window
//! or not) newest first read every ledger row (131 ms at 645,000); with `intake_outcome
//! (outcome, id)` it reads the rows of that outcome in id (time) order, and a `since` bound
//! stops the walk (`ledger::select`). The intake writer never reads by outcome, so its
//! per-key probes keep their own indexes (`intake_delivery_scope`, `intake_message_key_source`;
//! checked with a generic plan in the query-plan tests). Runs need none: by status they read
//! `runs_status (status, id)`, by workflow `runs_workflow_status`.

use sea_orm_migration::prelude::*;

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
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
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
