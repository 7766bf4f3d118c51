//! An index on `dispatches (workflow_id, status, due_at)`, for the Workflows page's dispatch
//! lag: a workflow's earliest-due pending dispatch is its first entry under
//! `(workflow_id, 'pending')`, one index seek per configured workflow, however long the
//! backlog. The dispatcher's claims keep `dispatches_due (status, target, due_at)`.

use sea_orm_migration::prelude::*;

#[derive(Debug)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0021_dispatch_workflow_lag"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .name("dispatches_workflow_due")
                    .table("dispatches")
                    .col("workflow_id")
                    .col("status")
                    .col("due_at")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("dispatches_workflow_due")
                    .table("dispatches")
                    .to_owned(),
            )
            .await
    }
}
