//! `replays` and `replay_results`: stored deliveries run again through the adapters and the
//! router (diagnostic: a report per delivery; live: re-admitted under namespaced delivery ids),
//! with their parameters, actor and progress. Adds to `intake` what links a row to a replay
//! (`replay_id`, `replay_of`: the original intake id) and what shadow workflows would have done
//! with it (`shadow`, JSON text, only when shadows exist), and to `runs` the entity key the
//! replay reconstructs past lock holders by.

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
        "m0010_replays"
    }
}

/// `intake` columns this migration adds.
const INTAKE_COLUMNS: [&str; 3] = ["shadow", "replay_id", "replay_of"];

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
                    .table("replays")
                    .col(string_len("id", ID_LEN).primary_key())
                    .col(string_len("actor", KEY_LEN))
                    .col(string_len("mode", 16))
                    .col(string_len("revision", 16))
                    .col(string_len_null("candidate_revision", 64))
                    .col(long_text("candidate", true))
                    .col(long_text("filters", false))
                    .col(string_len("status", 16))
                    .col(big_integer("total"))
                    .col(big_integer("done"))
                    .col(big_integer("differ"))
                    .col(string_len_null("last_intake_id", ID_LEN))
                    .col(text_null("error"))
                    .col(big_integer("created_at"))
                    .col(big_integer_null("started_at"))
                    .col(big_integer_null("finished_at"))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table("replay_results")
                    .col(string_len("id", ID_LEN).primary_key())
                    .col(string_len("replay_id", ID_LEN))
                    .col(string_len("intake_id", ID_LEN))
                    .col(string_len("source", KEY_LEN))
                    .col(string_len("delivery_id", KEY_LEN))
                    .col(string_len_null("tenant_id", KEY_LEN))
                    .col(string_len_null("event_type", KEY_LEN))
                    .col(big_integer("received_at"))
                    .col(string_len("original_outcome", 32))
                    .col(string_len_null("original_workflow_id", KEY_LEN))
                    .col(string_len("replayed_outcome", 32))
                    .col(string_len_null("replayed_workflow_id", KEY_LEN))
                    .col(boolean("differs"))
                    .col(text_null("why"))
                    .col(string_len_null("new_intake_id", ID_LEN))
                    .col(string_len_null("new_run_id", ID_LEN))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("replay_results_replay")
                    .table("replay_results")
                    .col("replay_id")
                    .col("intake_id")
                    .unique()
                    .to_owned(),
            )
            .await?;
        // One column per statement: SQLite's ALTER TABLE adds one at a time.
        for column in INTAKE_COLUMNS {
            let def = match column {
                "shadow" => text_null(column),
                _ => string_len_null(column, ID_LEN),
            };
            manager
                .alter_table(Table::alter().table("intake").add_column(def).to_owned())
                .await?;
        }
        // Which run held an entity when: a replay reads past holders by entity.
        manager
            .create_index(
                Index::create()
                    .name("runs_entity")
                    .table("runs")
                    .col("target_entity_id")
                    .col("tenant_id")
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(Index::drop().name("runs_entity").table("runs").to_owned())
            .await?;
        for column in INTAKE_COLUMNS {
            manager
                .alter_table(
                    Table::alter()
                        .table("intake")
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        for table in ["replay_results", "replays"] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
