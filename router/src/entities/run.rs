//! A workflow run created by routing.

use sea_orm::entity::prelude::*;
use serde::Serialize;

/// Where a run is in its life. Only `Queued` runs hold (or may hold) an entity lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Serialize)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::N(16))")]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    #[sea_orm(string_value = "queued")]
    Queued,
    #[sea_orm(string_value = "completed")]
    Completed,
    #[sea_orm(string_value = "failed")]
    Failed,
    #[sea_orm(string_value = "cancelled")]
    Cancelled,
    /// Its lease ran out and another event took the entity over.
    #[sea_orm(string_value = "expired")]
    Expired,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Expired => "expired",
        }
    }

    pub fn is_finished(self) -> bool {
        self != RunStatus::Queued
    }
}

impl std::str::FromStr for RunStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            RunStatus::Queued,
            RunStatus::Completed,
            RunStatus::Failed,
            RunStatus::Cancelled,
            RunStatus::Expired,
        ]
        .into_iter()
        .find(|status| status.as_str() == s)
        .ok_or_else(|| {
            format!("unknown run status `{s}` (expected queued, completed, failed, cancelled or expired)")
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "runs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub tenant_id: String,
    pub workflow_id: String,
    pub target_entity_id: String,
    pub intake_id: String,
    pub status: RunStatus,
    /// The entity lease's token when this run took it; a stale holder can be told apart.
    pub fencing_token: i64,
    pub lock_ttl_ms: i64,
    pub created_at: i64,
    pub updated_at: i64,
    pub finished_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
