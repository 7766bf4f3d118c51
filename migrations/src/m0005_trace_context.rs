//! The W3C trace context a delivery arrived with (or the intake span that started its trace)
//! on the ledger row and on the run, so every dispatch of the run carries it on to the worker.
//! Nullable text: a delivery without trace context, and every row written before, has none.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::text_null;

#[derive(Debug)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0005_trace_context"
    }
}

/// `(table, column)` pairs this migration adds.
const COLUMNS: [(&str, &str); 4] = [
    ("intake", "traceparent"),
    ("intake", "tracestate"),
    ("runs", "traceparent"),
    ("runs", "tracestate"),
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite's ALTER TABLE adds one at a time.
        for (table, column) in COLUMNS {
            manager
                .alter_table(
                    Table::alter()
                        .table(table)
                        .add_column(text_null(column))
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for (table, column) in COLUMNS {
            manager
                .alter_table(Table::alter().table(table).drop_column(column).to_owned())
                .await?;
        }
        Ok(())
    }
}
