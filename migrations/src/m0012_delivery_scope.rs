//! A delivery's identity gains a scope: `(source, scope, delivery_id)`. For a source whose
//! sender is authenticated per source (a signed webhook, Slack, a mailbox, a CloudEvents
//! source) the scope is empty: the source alone says whose the id is. For `POST /v1/events` and
//! `POST /v1/waits/resume`, where every tenant's callers share the source `api` and the caller
//! chooses the id (`Idempotency-Key`), the scope is the caller's tenant, so one tenant's key can
//! never make another tenant's delivery a duplicate, nor read its answer.
//!
//! `intake_delivery_source (delivery_id, source)` becomes `intake_delivery_scope (delivery_id,
//! source, scope)`, unique; `delivery_id` still leads (the writers look a batch up by it). Rows
//! recorded before take their tenant as scope when they came through `api`. The new index is
//! created before the old is dropped (see m0011: another pooled SQLite connection may hold the
//! schema from before a drop). On MySQL the three `VARCHAR(255)` utf8mb4 columns make a
//! 3,060-byte key, within InnoDB's 3,072.
//!
//! Down fails if two tenants' rows now share an `api` key: then the old identity cannot hold.

use sea_orm_migration::prelude::*;

use crate::KEY_LEN;

#[derive(Debug)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0012_delivery_scope"
    }
}

fn intake_index(name: &str, columns: &[&'static str]) -> IndexCreateStatement {
    let mut index = Index::create();
    index.name(name).table("intake").unique();
    for column in columns {
        index.col(*column);
    }
    index.to_owned()
}

fn drop_intake_index(name: &str) -> IndexDropStatement {
    Index::drop().name(name).table("intake").to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table("intake")
                    .add_column(
                        ColumnDef::new("scope")
                            .string_len(KEY_LEN)
                            .not_null()
                            .default(""),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .exec_stmt(
                Query::update()
                    .table("intake")
                    .value("scope", Expr::col("tenant_id"))
                    .and_where(Expr::col("source").eq("api"))
                    .and_where(Expr::col("tenant_id").is_not_null())
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(intake_index(
                "intake_delivery_scope",
                &["delivery_id", "source", "scope"],
            ))
            .await?;
        manager
            .drop_index(drop_intake_index("intake_delivery_source"))
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(intake_index(
                "intake_delivery_source",
                &["delivery_id", "source"],
            ))
            .await?;
        manager
            .drop_index(drop_intake_index("intake_delivery_scope"))
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table("intake")
                    .drop_column("scope")
                    .to_owned(),
            )
            .await
    }
}
