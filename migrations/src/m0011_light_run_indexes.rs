//! Lighter `runs` indexes for the one write every delivered run makes, `status` from `queued`
//! to `dispatched`: each index holding `status` moves that run's entry, so fewer of them is
//! fewer index pages dirtied in every intake writer's batch.
//!
//! - `runs_tenant_status (tenant_id, status)` becomes `runs_tenant (tenant_id, id)`: the
//!   tenant-scoped reads (a principal's run list, newest first; its status counts since a
//!   time) are ordered or bounded by `id`, and no status change touches it.
//! - `runs_status_deadline_at (status, deadline_at)` becomes `runs_deadline`, the same columns
//!   holding only runs that have a deadline on SQLite and PostgreSQL (`WHERE deadline_at IS
//!   NOT NULL`; the deadline timer's `deadline_at <= ?` implies it, so both planners still use
//!   it). MySQL has no partial indexes and keeps every run in it.
//!
//! New names, created before the old are dropped: on SQLite another pooled connection may
//! still hold the schema from before a drop, and would refuse a new index of the dropped name.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DatabaseBackend;

#[derive(Debug)]
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m0011_light_run_indexes"
    }
}

fn runs_index(name: &str, columns: [&'static str; 2]) -> IndexCreateStatement {
    let mut index = Index::create();
    index.name(name).table("runs");
    for column in columns {
        index.col(column);
    }
    index.to_owned()
}

fn drop_runs_index(name: &str) -> IndexDropStatement {
    Index::drop().name(name).table("runs").to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let mut deadline = runs_index("runs_deadline", ["status", "deadline_at"]);
        if manager.get_database_backend() != DatabaseBackend::MySql {
            deadline.and_where(Expr::col("deadline_at").is_not_null());
        }
        manager.create_index(deadline).await?;
        manager
            .create_index(runs_index("runs_tenant", ["tenant_id", "id"]))
            .await?;
        manager
            .drop_index(drop_runs_index("runs_status_deadline_at"))
            .await?;
        manager
            .drop_index(drop_runs_index("runs_tenant_status"))
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(runs_index(
                "runs_status_deadline_at",
                ["status", "deadline_at"],
            ))
            .await?;
        manager
            .create_index(runs_index("runs_tenant_status", ["tenant_id", "status"]))
            .await?;
        manager.drop_index(drop_runs_index("runs_deadline")).await?;
        manager.drop_index(drop_runs_index("runs_tenant")).await
    }
}
