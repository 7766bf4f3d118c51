//! The first schema: workflows, the intake ledger, raw deliveries, runs, entity locks, mailbox
//! cursors and poller leases.
//!
//! Portable across SQLite, PostgreSQL and MySQL/MariaDB: ids are UUIDv7 strings, times are
//! milliseconds since the Unix epoch (`BIGINT`), JSON is stored as text. Indexed strings have
//! explicit lengths because MySQL cannot index unbounded text.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;
use sea_orm_migration::sea_orm::DatabaseBackend;

#[derive(Debug)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0001_initial"
    }
}

/// Longest id or key the schema stores in an indexed column.
pub const KEY_LEN: u32 = 255;
const ID_LEN: u32 = 36;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let large = LargeColumns(manager.get_database_backend());
        manager
            .create_table(
                Table::create()
                    .table("workflows")
                    .col(string_len("id", KEY_LEN).primary_key())
                    .col(string_len("tenant_id", KEY_LEN))
                    .col(string_len("status", 16))
                    .col(big_integer("lock_ttl_secs"))
                    .col(text("triggers"))
                    .col(string_len("config_revision", 64))
                    .col(big_integer("synced_at"))
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table("intake")
                    .col(string_len("id", ID_LEN).primary_key())
                    .col(string_len("source", KEY_LEN))
                    .col(string_len("delivery_id", KEY_LEN))
                    .col(string_len("outcome", 32))
                    .col(large.text_null("detail"))
                    .col(string_len_null("channel", 16))
                    .col(string_len_null("event_type", KEY_LEN))
                    .col(string_len_null("tenant_id", KEY_LEN))
                    .col(string_len_null("target_entity_id", KEY_LEN))
                    .col(large.text_null("payload"))
                    .col(string_len_null("raw_ref", 64))
                    .col(string_len_null("run_id", ID_LEN))
                    .col(string_len_null("workflow_id", KEY_LEN))
                    .col(string_len_null("held_by_run_id", ID_LEN))
                    .col(string_len_null("message_key", KEY_LEN))
                    .col(string_len("config_revision", 64))
                    .col(big_integer("received_at"))
                    .col(big_integer("decided_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                // delivery_id leads (in this and the lease key below): the writer looks up a
                // batch as `source = ? AND delivery_id IN (...)`, and PostgreSQL without table
                // statistics only probes per key when the IN column leads the index.
                Index::create()
                    .name("intake_delivery_source")
                    .table("intake")
                    .col("delivery_id")
                    .col("source")
                    .unique()
                    .to_owned(),
            )
            .await?;
        // A message that reaches us as several events (Slack's `message` and `app_mention`)
        // is claimed by the first that routes; NULLs (everything else) never collide.
        manager
            .create_index(
                Index::create()
                    .name("intake_message_key_source")
                    .table("intake")
                    // message_key first: this index must never look like a way to scan a source.
                    .col("message_key")
                    .col("source")
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("intake_tenant")
                    .table("intake")
                    .col("tenant_id")
                    .col("id")
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table("raw_deliveries")
                    .col(string_len("id", ID_LEN).primary_key())
                    .col(string_len("source", KEY_LEN))
                    .col(string_len("content_type", 128))
                    .col(large.blob("body"))
                    .col(big_integer("received_at"))
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table("runs")
                    .col(string_len("id", ID_LEN).primary_key())
                    .col(string_len("tenant_id", KEY_LEN))
                    .col(string_len("workflow_id", KEY_LEN))
                    .col(string_len("target_entity_id", KEY_LEN))
                    .col(string_len("intake_id", ID_LEN))
                    .col(string_len("status", 16))
                    .col(big_integer("fencing_token"))
                    .col(big_integer("lock_ttl_ms"))
                    .col(big_integer("created_at"))
                    .col(big_integer("updated_at"))
                    .col(big_integer_null("finished_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("runs_tenant_status")
                    .table("runs")
                    .col("tenant_id")
                    .col("status")
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table("entity_locks")
                    .col(string_len("tenant_id", KEY_LEN))
                    .col(string_len("target_entity_id", KEY_LEN))
                    .col(string_len_null("run_id", ID_LEN))
                    .col(big_integer("fencing_token"))
                    .col(big_integer("expires_at"))
                    .col(big_integer("updated_at"))
                    .primary_key(Index::create().col("target_entity_id").col("tenant_id"))
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table("mailbox_cursors")
                    .col(string_len("source", KEY_LEN))
                    .col(string_len("mailbox", KEY_LEN))
                    .col(big_integer("uidvalidity"))
                    .col(big_integer("last_uid"))
                    .col(big_integer("updated_at"))
                    .primary_key(Index::create().col("source").col("mailbox"))
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table("poller_leases")
                    .col(string_len("source", KEY_LEN).primary_key())
                    .col(string_len_null("owner", KEY_LEN))
                    .col(big_integer("fencing_token"))
                    .col(big_integer("expires_at"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            "poller_leases",
            "mailbox_cursors",
            "entity_locks",
            "runs",
            "raw_deliveries",
            "intake",
            "workflows",
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}

/// Columns that may hold a whole delivery (up to the body limit, 1 MiB by default). MySQL's
/// `TEXT` and `BLOB` stop at 64 KiB, so there they are the `LONG` variants.
struct LargeColumns(DatabaseBackend);

impl LargeColumns {
    fn text_null(&self, name: &'static str) -> ColumnDef {
        match self.0 {
            DatabaseBackend::MySql => ColumnDef::new(name).custom("LONGTEXT").null().take(),
            _ => text_null(name),
        }
    }

    fn blob(&self, name: &'static str) -> ColumnDef {
        match self.0 {
            DatabaseBackend::MySql => ColumnDef::new(name).custom("LONGBLOB").not_null().take(),
            _ => blob(name),
        }
    }
}
