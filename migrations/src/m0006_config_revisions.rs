//! `config_revisions`: every config revision that came into force, with what it said (the
//! workflows and their triggers, source and target names; never secrets) and when it came in
//! and went out, so a past decision is explained against the revision that made it.
//!
//! `hash` is the revision id ledger rows carry (`intake.config_revision`); the same file put
//! back in force later is a new row with the same hash.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;
use sea_orm_migration::sea_orm::DatabaseBackend;

#[derive(Debug)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0006_config_revisions"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let content = match manager.get_database_backend() {
            DatabaseBackend::MySql => ColumnDef::new("content")
                .custom("LONGTEXT")
                .not_null()
                .take(),
            _ => text("content"),
        };
        manager
            .create_table(
                Table::create()
                    .table("config_revisions")
                    .col(string_len("id", 36).primary_key())
                    .col(string_len("hash", 64))
                    .col(content)
                    .col(big_integer("in_force_from"))
                    .col(big_integer_null("in_force_until"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("config_revisions_hash")
                    .table("config_revisions")
                    .col("hash")
                    .col("id")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table("config_revisions").to_owned())
            .await
    }
}
