//! Keys most rows do not have are left out of their unique indexes, so the intake writer's
//! routed row inserts nothing into them:
//!
//! - `intake_message_key_source (message_key, source)` becomes `intake_message_key`, the same
//!   columns holding only rows with a `message_key` (mail and Slack messages; every other
//!   channel's rows have none). The writer's claim probe `message_key = ? AND source = ?`
//!   implies `message_key IS NOT NULL`, so both planners still read it.
//! - `dispatches_claim_token (claim_token)` becomes `dispatches_claim`, holding only claimed
//!   dispatches; a new dispatch is unclaimed (its token is set by a claim, cleared by a
//!   release). The lookups `claim_token = ?` and the keep-alive's `claim_token > ?` imply it.
//!
//! Uniqueness is unchanged: NULLs never collided in the old indexes either. MySQL has no
//! partial indexes and keeps every row in them, under the new names.
//!
//! New names, created before the old are dropped (as in `m0011`): on SQLite another pooled
//! connection may still hold the schema from before a drop.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DatabaseBackend;

#[derive(Debug)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0022_partial_key_indexes"
    }
}

/// A unique index on `table (columns)`, holding only rows whose `columns[0]` is not NULL
/// where the database has partial indexes.
fn present_only(
    manager: &SchemaManager,
    name: &str,
    table: &'static str,
    columns: &[&'static str],
) -> IndexCreateStatement {
    let mut index = Index::create();
    index.name(name).table(table).unique();
    for &column in columns {
        index.col(column);
    }
    if manager.get_database_backend() != DatabaseBackend::MySql {
        index.and_where(Expr::col(columns[0]).is_not_null());
    }
    index.to_owned()
}

fn every_row(name: &str, table: &'static str, columns: &[&'static str]) -> IndexCreateStatement {
    let mut index = Index::create();
    index.name(name).table(table).unique();
    for &column in columns {
        index.col(column);
    }
    index.to_owned()
}

fn drop(name: &str, table: &'static str) -> IndexDropStatement {
    Index::drop().name(name).table(table).to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(present_only(
                manager,
                "intake_message_key",
                "intake",
                &["message_key", "source"],
            ))
            .await?;
        manager
            .create_index(present_only(
                manager,
                "dispatches_claim",
                "dispatches",
                &["claim_token"],
            ))
            .await?;
        manager
            .drop_index(drop("intake_message_key_source", "intake"))
            .await?;
        manager
            .drop_index(drop("dispatches_claim_token", "dispatches"))
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(every_row(
                "intake_message_key_source",
                "intake",
                &["message_key", "source"],
            ))
            .await?;
        manager
            .create_index(every_row(
                "dispatches_claim_token",
                "dispatches",
                &["claim_token"],
            ))
            .await?;
        manager
            .drop_index(drop("intake_message_key", "intake"))
            .await?;
        manager
            .drop_index(drop("dispatches_claim", "dispatches"))
            .await
    }
}
