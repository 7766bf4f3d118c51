//! `slack_messages`: the outbox of approval messages Switchyard posts to Slack for waits that
//! name a Slack channel (`notify`). One row per wait, written in the wait's own transaction;
//! `pending` rows are posted (`chat.postMessage`) and become `posted` with the message's `ts`,
//! then `done` once the message was updated after the wait ended (`chat.update`). A row is
//! claimed by one replica at a time (`claimed_until`); a failure is retried at `due_at`.
//! `button_value` (which carries the wait's resume token) is kept only until the post.
//! Socket Mode connection state is not stored: each replica keeps its own connections.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;
use sea_orm_migration::sea_orm::DatabaseBackend;

use crate::m0001_initial::KEY_LEN;

/// UUIDv7 strings.
const ID_LEN: u32 = 36;

#[derive(Debug)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0016_slack"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let long_text = |name: &'static str, null: bool| match manager.get_database_backend() {
            DatabaseBackend::MySql => {
                let mut column = ColumnDef::new(name).custom("LONGTEXT").take();
                if null {
                    column.null()
                } else {
                    column.not_null()
                };
                column
            }
            _ if null => text_null(name),
            _ => text(name),
        };
        manager
            .create_table(
                Table::create()
                    .table("slack_messages")
                    .col(string_len("id", ID_LEN).primary_key())
                    .col(string_len("tenant_id", KEY_LEN))
                    .col(string_len("run_id", ID_LEN))
                    .col(string_len("wait_row_id", ID_LEN))
                    .col(string_len("source", KEY_LEN))
                    .col(string_len("channel", KEY_LEN))
                    .col(long_text("body", false))
                    .col(long_text("button_value", true))
                    .col(string_len("status", 16))
                    .col(string_len_null("ts", 64))
                    .col(integer("attempts"))
                    .col(big_integer("due_at"))
                    .col(big_integer_null("claimed_until"))
                    .col(text_null("last_error"))
                    .col(big_integer("created_at"))
                    .col(big_integer("updated_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("slack_messages_wait")
                    .table("slack_messages")
                    .col("wait_row_id")
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("slack_messages_due")
                    .table("slack_messages")
                    .col("status")
                    .col("due_at")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table("slack_messages").to_owned())
            .await
    }
}
