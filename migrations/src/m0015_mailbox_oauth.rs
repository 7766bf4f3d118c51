//! Mailboxes that sign in with OAuth2 and start where they are told: `mailbox_oauth_tokens`
//! keeps the newest refresh token a provider rotated to (per source, with the fingerprint of
//! the configured token it grew from, so a newly configured one wins), and `mailbox_starts`
//! records where each mailbox started being read (`start_from`) and how many messages it left
//! behind.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::{big_integer, string_len, text};

use crate::KEY_LEN;

#[derive(Debug)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0015_mailbox_oauth"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("mailbox_oauth_tokens")
                    .col(string_len("source", KEY_LEN).primary_key())
                    .col(string_len("seed_fingerprint", 64))
                    .col(text("refresh_token"))
                    .col(big_integer("updated_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("mailbox_starts")
                    .col(string_len("source", KEY_LEN))
                    .col(string_len("mailbox", KEY_LEN))
                    .col(string_len("start_from", 64))
                    .col(big_integer("uidvalidity"))
                    .col(big_integer("first_uid"))
                    .col(big_integer("left_behind"))
                    .col(big_integer("started_at"))
                    .primary_key(Index::create().col("source").col("mailbox"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in ["mailbox_starts", "mailbox_oauth_tokens"] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
