//! Flow control: ceilings and coalescing.
//!
//! - `flow_gates`: one row per ceiling key (`name`), row-locked by the transaction that checks it, so
//!   replicas sharing the database take turns per key. `tat_us` is a `rate`'s theoretical
//!   arrival time (GCRA, microseconds; see `switchyard_core::Rate`); the rows that serialise a
//!   workflow's `max_queued` and `max_running` checks leave it 0.
//! - `runs (workflow_id, status)`: the counts those checks take (queued, running) are index
//!   ranges of one workflow, whatever the other workflows hold.
//! - `run_members`: the deliveries that joined a pending run in a coalescing window (the run's
//!   own delivery is `runs.intake_id`); `version` is the provider's own ordering of the event,
//!   where the adapter knows one, so the newest member is the dispatched one.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(Debug)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0007_flow_control"
    }
}

/// Longest ceiling key: a kind prefix and a configured name.
pub const GATE_KEY_LEN: u32 = 300;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("flow_gates")
                    .col(string_len("name", GATE_KEY_LEN).primary_key())
                    .col(big_integer("tat_us"))
                    .col(big_integer("updated_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("runs_workflow_status")
                    .table("runs")
                    .col("workflow_id")
                    .col("status")
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("run_members")
                    .col(string_len("run_id", 36))
                    .col(string_len("intake_id", 36))
                    .col(string_len_null("version", 64))
                    .col(big_integer("joined_at"))
                    .primary_key(Index::create().col("run_id").col("intake_id"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table("run_members").to_owned())
            .await?;
        manager
            .drop_index(
                Index::drop()
                    .name("runs_workflow_status")
                    .table("runs")
                    .to_owned(),
            )
            .await?;
        manager
            .drop_table(Table::drop().table("flow_gates").to_owned())
            .await
    }
}
