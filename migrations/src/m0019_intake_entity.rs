//! An index on the ledger's entity id, for the console's and the API's lookups by ticket
//! (`target_entity_id`, exact or by prefix) newest first: without it a search by entity read
//! every ledger row. `id` follows so the rows of one entity come back in time order (ids are
//! UUIDv7) without a sort. The intake writer never reads by entity, so its per-key probes
//! keep their own index (`intake_delivery_scope`).
//!
//! And one on `replay_results (intake_id)`: a delivery's page lists the replays that took it
//! (a re-admission from the console links both ways).

use sea_orm_migration::prelude::*;

#[derive(Debug)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0019_intake_entity"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .name("intake_target_entity")
                    .table("intake")
                    .col("target_entity_id")
                    .col("id")
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("replay_results_intake")
                    .table("replay_results")
                    .col("intake_id")
                    .col("replay_id")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("replay_results_intake")
                    .table("replay_results")
                    .to_owned(),
            )
            .await?;
        manager
            .drop_index(
                Index::drop()
                    .name("intake_target_entity")
                    .table("intake")
                    .to_owned(),
            )
            .await
    }
}
