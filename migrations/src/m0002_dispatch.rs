//! Dispatch: the outbox of routed runs (`dispatches`, written in the run's own transaction),
//! every delivery attempt (`dispatch_attempts`) and every run state change with its cause
//! (`run_history`).
//!
//! A dispatch is `pending` until a transport delivered it (`delivered`) or it ran out of
//! attempts or was refused (`dead_lettered`). `due_at` is when a pending row next needs a
//! dispatcher: its first try, its next retry, or the moment an in-flight claim (a push
//! dispatcher's or a pull worker's) lapses and the row may be claimed again. So one index,
//! `(status, target, due_at)`, finds all work that is due.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

use crate::m0001_initial::KEY_LEN;

#[derive(Debug)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0002_dispatch"
    }
}

const ID_LEN: u32 = 36;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("dispatches")
                    .col(string_len("id", ID_LEN).primary_key())
                    .col(string_len("run_id", ID_LEN))
                    .col(string_len("tenant_id", KEY_LEN))
                    .col(string_len("workflow_id", KEY_LEN))
                    .col(string_len("target", KEY_LEN))
                    .col(string_len("status", 16))
                    // Attempts in the current series (a redispatch starts a new one).
                    .col(integer("attempts"))
                    .col(integer("series"))
                    .col(big_integer("due_at"))
                    .col(string_len_null("claimed_by", KEY_LEN))
                    .col(string_len_null("claim_token", 64))
                    .col(string_len_null("reason", 32))
                    .col(text_null("last_error"))
                    .col(big_integer("created_at"))
                    .col(big_integer("updated_at"))
                    .col(big_integer_null("delivered_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("dispatches_due")
                    .table("dispatches")
                    .col("status")
                    .col("target")
                    .col("due_at")
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("dispatches_run")
                    .table("dispatches")
                    .col("run_id")
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("dispatches_claim_token")
                    .table("dispatches")
                    .col("claim_token")
                    .unique()
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table("dispatch_attempts")
                    .col(string_len("id", ID_LEN).primary_key())
                    .col(string_len("dispatch_id", ID_LEN))
                    .col(string_len("run_id", ID_LEN))
                    .col(integer("series"))
                    .col(integer("attempt"))
                    .col(string_len("target", KEY_LEN))
                    // delivered | retry | rejected_4xx | target_gone | claimed | released | ...
                    .col(string_len("result", 32))
                    .col(integer_null("status_code"))
                    .col(text_null("response"))
                    .col(text_null("error"))
                    .col(big_integer("started_at"))
                    .col(big_integer("duration_ms"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("dispatch_attempts_run")
                    .table("dispatch_attempts")
                    .col("run_id")
                    .col("id")
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table("run_history")
                    .col(string_len("id", ID_LEN).primary_key())
                    .col(string_len("run_id", ID_LEN))
                    .col(string_len("status", 16))
                    .col(string_len("cause", 32))
                    .col(text_null("detail"))
                    .col(big_integer("at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("run_history_run")
                    .table("run_history")
                    .col("run_id")
                    .col("id")
                    .to_owned(),
            )
            .await?;
        // Which runs are still active, for the dispatcher's lease keep-alive and listings.
        manager
            .create_index(
                Index::create()
                    .name("runs_status")
                    .table("runs")
                    .col("status")
                    .col("id")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(Index::drop().name("runs_status").table("runs").to_owned())
            .await?;
        for table in ["run_history", "dispatch_attempts", "dispatches"] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
