//! `alerts` and `alert_notifications`: the alert lifecycle and its notification outbox.
//!
//! An alert is one row per `(rule, scope)` (unique), so replicas evaluating the same rule on
//! one database raise one alert: the first insert wins, the other replica's fails on the key
//! and finds the row. A row goes `firing` -> `resolved` and back; each firing is an `episode`
//! (the counter grows), with `since`, the numbers behind it, who acknowledged it and until
//! when it is silenced. A notification is an outbox row per `(alert, episode, event,
//! notifier)` (unique: one message per notifier per transition), written in the transaction
//! that fires or resolves the alert, claimed by a notifier loop (`due_at` is the retry time
//! or the claim's expiry) and retried with backoff until delivered.
//!
//! No index on the ledger is added: one leading with `source` (to find a source's newest
//! delivery for `source_quiet`) was taken by PostgreSQL's generic plan for the intake writer's
//! per-key probes, which then read every row of the source (intake fell from about 6,000 to
//! 600 answers/s in `switchyard-bench`; BENCHMARKS.md, round 19).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

use crate::KEY_LEN;

/// UUIDv7 strings.
const ID_LEN: u32 = 36;

#[derive(Debug)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0014_alerts"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("alerts")
                    .col(string_len("id", ID_LEN).primary_key())
                    .col(string_len("rule", KEY_LEN))
                    .col(string_len("scope", KEY_LEN))
                    .col(string_len("kind", 32))
                    .col(string_len_null("tenant_id", KEY_LEN))
                    .col(string_len("state", 16))
                    .col(integer("episode"))
                    .col(text("summary"))
                    .col(text("numbers"))
                    .col(big_integer("since"))
                    .col(big_integer("fired_at"))
                    .col(big_integer_null("resolved_at"))
                    .col(big_integer_null("acknowledged_at"))
                    .col(string_len_null("acknowledged_by", KEY_LEN))
                    .col(big_integer_null("silenced_until"))
                    .col(string_len_null("silenced_by", KEY_LEN))
                    .col(big_integer("updated_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("alerts_rule_scope")
                    .table("alerts")
                    .col("rule")
                    .col("scope")
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("alerts_state")
                    .table("alerts")
                    .col("state")
                    .col("id")
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("alert_notifications")
                    .col(string_len("id", ID_LEN).primary_key())
                    .col(string_len("alert_id", ID_LEN))
                    .col(integer("episode"))
                    .col(string_len("event", 16))
                    .col(string_len("notifier", KEY_LEN))
                    .col(string_len("status", 16))
                    .col(integer("attempts"))
                    .col(big_integer("due_at"))
                    .col(string_len_null("claim_token", 64))
                    .col(text_null("last_error"))
                    .col(string_len_null("external_ref", 255))
                    .col(big_integer("created_at"))
                    .col(big_integer_null("delivered_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("alert_notifications_once")
                    .table("alert_notifications")
                    .col("alert_id")
                    .col("episode")
                    .col("event")
                    .col("notifier")
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("alert_notifications_due")
                    .table("alert_notifications")
                    .col("status")
                    .col("due_at")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in ["alert_notifications", "alerts"] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
