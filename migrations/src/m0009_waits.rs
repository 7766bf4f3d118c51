//! Durable waits: `waits` (one row per wait a run opened: what it expects, the proposal it binds,
//! the hash of its resume token, its deadline, how it ended) and `dispatches.wait_id`, which
//! marks a dispatch row that carries a `switchyard.run.resume` message instead of the start.
//!
//! A run now has one dispatch row for its start and one per resumed wait, so the unique index
//! on `dispatches (run_id)` becomes a plain one; a resume row's id is derived from run and wait
//! (so it is unique by the primary key).
//!
//! The wait row is its own expiry timer: an `open` wait whose `deadline` has passed is due, found
//! by `waits (status, deadline)` and fired by a conditional update (`status = 'open'`), so it
//! fires once across replicas and after a restart.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

use crate::m0001_initial::KEY_LEN;

#[derive(Debug)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0009_waits"
    }
}

const ID_LEN: u32 = 36;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("waits")
                    .col(string_len("id", ID_LEN).primary_key())
                    .col(string_len("tenant_id", KEY_LEN))
                    .col(string_len("run_id", ID_LEN))
                    .col(string_len("workflow_id", KEY_LEN))
                    // The worker's name for the wait, unique per run.
                    .col(string_len("wait_id", KEY_LEN))
                    .col(string_len("expects", KEY_LEN))
                    .col(string_len("proposal_id", KEY_LEN))
                    .col(string_len("proposal_digest", KEY_LEN))
                    // SHA-256 (hex) of the resume token; the token itself is never stored.
                    .col(string_len("token_hash", 64))
                    // open | resumed | timed_out | expired | cancelled
                    .col(string_len("status", 16))
                    // fail | resume
                    .col(string_len("on_timeout", 16))
                    .col(big_integer("deadline"))
                    .col(string_len_null("decision", KEY_LEN))
                    .col(string_len_null("actor", KEY_LEN))
                    // The delivery (ledger row) that resumed it.
                    .col(string_len_null("resumed_by", ID_LEN))
                    .col(string_len_null("dispatch_id", ID_LEN))
                    .col(big_integer("created_at"))
                    .col(big_integer_null("ended_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("waits_token_hash")
                    .table("waits")
                    .col("token_hash")
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("waits_run_wait")
                    .table("waits")
                    .col("run_id")
                    .col("wait_id")
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("waits_due")
                    .table("waits")
                    .col("status")
                    .col("deadline")
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table("dispatches")
                    .add_column(string_len_null("wait_id", KEY_LEN))
                    .to_owned(),
            )
            .await?;
        manager
            .drop_index(
                Index::drop()
                    .name("dispatches_run")
                    .table("dispatches")
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("dispatches_run_id")
                    .table("dispatches")
                    .col("run_id")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("dispatches_run_id")
                    .table("dispatches")
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
            .alter_table(
                Table::alter()
                    .table("dispatches")
                    .drop_column("wait_id")
                    .to_owned(),
            )
            .await?;
        manager
            .drop_table(Table::drop().table("waits").to_owned())
            .await
    }
}
