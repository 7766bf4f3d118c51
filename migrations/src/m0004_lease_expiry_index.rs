//! An index on `entity_locks (expires_at)`: the dispatcher's keep-alive finds the leases about
//! to run out by it, so each pass costs what expires soon, not the whole backlog of waiting
//! runs (a pass over every pending dispatch took minutes on PostgreSQL with 26,000 waiting).

use sea_orm_migration::prelude::*;

#[derive(Debug)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0004_lease_expiry_index"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .name("entity_locks_expires_at")
                    .table("entity_locks")
                    .col("expires_at")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("entity_locks_expires_at")
                    .table("entity_locks")
                    .to_owned(),
            )
            .await
    }
}
