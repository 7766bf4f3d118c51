//! Mirrors the config's workflows into the `workflows` table, stamped with the revision.

use sea_orm::sea_query::OnConflict;
use sea_orm::{ActiveValue::Set, DatabaseConnection, DbErr, EntityTrait};
use switchyard_core::Workflow;

use super::entities::workflow;
use crate::Store;

/// Upserts every workflow of `revision`. Workflows removed from the file keep their last row
/// (runs name them), with the revision that last carried them.
pub async fn sync(
    db: &DatabaseConnection,
    revision: &str,
    workflows: &[Workflow],
    now: i64,
) -> Result<(), DbErr> {
    if workflows.is_empty() {
        return Ok(());
    }
    let rows = workflows.iter().map(|w| workflow::ActiveModel {
        id: Set(w.id.clone()),
        tenant_id: Set(w.tenant_id.clone()),
        status: Set(w.status.as_str().to_owned()),
        lock_ttl_secs: Set(i64::try_from(w.lock_ttl.as_secs()).unwrap_or(i64::MAX)),
        triggers: Set(serde_json::to_string(&w.triggers).unwrap_or_default()),
        config_revision: Set(revision.to_owned()),
        synced_at: Set(now),
    });
    for chunk in rows.collect::<Vec<_>>().chunks(500) {
        workflow::Entity::insert_many(chunk.to_vec())
            .on_conflict(
                OnConflict::column(workflow::Column::Id)
                    .update_columns([
                        workflow::Column::TenantId,
                        workflow::Column::Status,
                        workflow::Column::LockTtlSecs,
                        workflow::Column::Triggers,
                        workflow::Column::ConfigRevision,
                        workflow::Column::SyncedAt,
                    ])
                    .to_owned(),
            )
            .exec_without_returning(db)
            .await?;
    }
    Ok(())
}

impl Store {
    /// Upserts every workflow of `revision` into `workflows` (removed ones keep their last row).
    pub async fn sync_workflows(
        &self,
        revision: &str,
        workflows: &[Workflow],
        now: i64,
    ) -> Result<(), DbErr> {
        sync(self.db(), revision, workflows, now).await
    }
}
