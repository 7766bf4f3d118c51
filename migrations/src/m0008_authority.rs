//! What bounds a run, recorded when it is created and never changed: the config revision that
//! routed it, the principal whose authority it acts under, its absolute deadline and its
//! budgets; then what it used and how it ended (reason, the worker's version, the subject
//! version that superseded it). An index on `runs (status, deadline_at)` lets the deadline
//! timer find the active runs past their deadline without reading finished ones.
//! Nullable: rows written before have none of these.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{big_integer_null, text_null};

#[derive(Debug)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0008_authority"
    }
}

/// Text columns this migration adds to `runs`.
const TEXT: [&str; 7] = [
    "config_revision",
    "principal_id",
    "budgets",
    "run_usage",
    "end_reason",
    "worker_version",
    "subject_version",
];

const INDEX: &str = "runs_status_deadline_at";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite's ALTER TABLE adds one at a time.
        for column in TEXT {
            manager
                .alter_table(
                    Table::alter()
                        .table("runs")
                        .add_column(text_null(column))
                        .to_owned(),
                )
                .await?;
        }
        manager
            .alter_table(
                Table::alter()
                    .table("runs")
                    .add_column(big_integer_null("deadline_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name(INDEX)
                    .table("runs")
                    .col("status")
                    .col("deadline_at")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(Index::drop().name(INDEX).table("runs").to_owned())
            .await?;
        for column in TEXT.into_iter().chain(["deadline_at"]) {
            manager
                .alter_table(Table::alter().table("runs").drop_column(column).to_owned())
                .await?;
        }
        Ok(())
    }
}
