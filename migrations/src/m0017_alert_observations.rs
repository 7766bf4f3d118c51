//! `alert_observations`: which replicas observe the fault of an alert fed by in-memory health
//! (`mailbox_stalled`, `intake_unhealthy`, `reload_refused`, `provider_disable_risk`,
//! `target_failing`, `dead_letters`), one row per `(alert_id, replica)` with when that replica
//! last saw it. The alert itself stays one row per `(rule, scope)` across replicas (m0014);
//! these rows let a replica that finds the scope healthy resolve it only when no other
//! replica's observation is fresh, so two replicas with different views do not flap it.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

use crate::KEY_LEN;

/// UUIDv7 strings (`alerts.id`).
const ID_LEN: u32 = 36;

#[derive(Debug)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0017_alert_observations"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table("alert_observations")
                    .col(string_len("alert_id", ID_LEN))
                    .col(string_len("replica", KEY_LEN))
                    .col(big_integer("observed_at"))
                    .primary_key(Index::create().col("alert_id").col("replica"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table("alert_observations").to_owned())
            .await
    }
}
