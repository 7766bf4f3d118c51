//! A delivery's original bytes move into its ledger row: `intake` gains `raw_content_type` and
//! `raw_body` (both `NULL` where no bytes are kept), every `raw_deliveries` row is copied into
//! the ledger row of the same id, and `raw_deliveries` is dropped.
//!
//! Why: the bytes were always one row per ledger row, under the same id, written in the same
//! transaction; a table of their own cost every delivery one more row and primary-key entry
//! (round 24 of BENCHMARKS.md). Retention's shorter `retention.raw` now empties the two columns
//! instead of deleting rows. Bytes whose ledger row is gone (only possible when retention kept
//! them longer than the ledger) are not carried over: no `raw_ref` could reach them.
//!
//! `down` recreates `raw_deliveries` from the columns and drops them.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DatabaseBackend, Statement};

#[derive(Debug)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0023_raw_in_ledger"
    }
}

/// `raw_body`: `LONGBLOB` on MySQL (a `BLOB` holds 64 KiB there), the backend's blob elsewhere.
fn body_column(backend: DatabaseBackend, name: &'static str) -> ColumnDef {
    let mut column = ColumnDef::new(name);
    match backend {
        DatabaseBackend::MySql => column.custom("LONGBLOB"),
        _ => column.blob(),
    };
    column
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let backend = manager.get_database_backend();
        // One column per statement: SQLite alters one thing at a time.
        manager
            .alter_table(
                Table::alter()
                    .table("intake")
                    .add_column(ColumnDef::new("raw_content_type").string_len(128).null())
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table("intake")
                    .add_column(body_column(backend, "raw_body").null().to_owned())
                    .to_owned(),
            )
            .await?;
        let copy = match backend {
            DatabaseBackend::MySql => {
                "UPDATE intake JOIN raw_deliveries AS r ON r.id = intake.id \
                 SET intake.raw_content_type = r.content_type, intake.raw_body = r.body"
            }
            _ => {
                "UPDATE intake SET raw_content_type = r.content_type, raw_body = r.body \
                 FROM raw_deliveries AS r WHERE r.id = intake.id"
            }
        };
        let db = manager.get_connection();
        db.execute_unprepared(copy).await?;
        manager
            .drop_table(Table::drop().table("raw_deliveries").to_owned())
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let backend = manager.get_database_backend();
        let mut table = Table::create();
        table
            .table("raw_deliveries")
            .col(ColumnDef::new("id").string_len(36).not_null().primary_key())
            .col(
                ColumnDef::new("source")
                    .string_len(crate::KEY_LEN)
                    .not_null(),
            )
            .col(ColumnDef::new("content_type").string_len(128).not_null())
            .col(body_column(backend, "body").not_null().to_owned())
            .col(ColumnDef::new("received_at").big_integer().not_null());
        if backend == DatabaseBackend::MySql {
            // Keys compare byte for byte, as in every table since m0003: `intake`'s collation.
            let collation = manager
                .get_connection()
                .query_one_raw(Statement::from_string(
                    backend,
                    "SELECT TABLE_COLLATION AS collation FROM information_schema.TABLES \
                     WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'intake'",
                ))
                .await?
                .map(|row| row.try_get::<String>("", "collation"))
                .transpose()?
                .ok_or_else(|| DbErr::Custom("no `intake` table to take its collation".into()))?;
            table.character_set("utf8mb4").collate(collation);
        }
        manager.create_table(table.to_owned()).await?;
        let db = manager.get_connection();
        db.execute_unprepared(
            "INSERT INTO raw_deliveries (id, source, content_type, body, received_at) \
             SELECT id, source, raw_content_type, raw_body, received_at FROM intake \
             WHERE raw_body IS NOT NULL",
        )
        .await?;
        for column in ["raw_body", "raw_content_type"] {
            manager
                .alter_table(
                    Table::alter()
                        .table("intake")
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}
