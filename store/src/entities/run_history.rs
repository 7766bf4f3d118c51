//! Every state change of a run, with its cause: the run's own audit trail. The first change,
//! `routed`, is the run row itself (`outbox::trail` shows it): intake writes one row less per
//! routed event.

use sea_orm::entity::prelude::*;
use uuid::Uuid;

use super::run::RunStatus;

#[derive(Debug, Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "run_history")]
pub struct Model {
    /// UUIDv7: history sorts by id in the order it happened.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub run_id: String,
    /// The status the run has after this change.
    pub status: RunStatus,
    /// What caused it: `routed`, `attempt_failed`, `delivered`, `claimed`, `heartbeat`,
    /// `finished`, `lease_expired`, `dead_lettered`, `redispatched`, ...
    pub cause: String,
    pub detail: Option<String>,
    pub at: i64,
}

impl Model {
    /// A history entry made now.
    pub fn entry(
        run_id: impl Into<String>,
        status: RunStatus,
        cause: &str,
        detail: Option<String>,
        at: i64,
    ) -> Self {
        Self {
            id: Uuid::now_v7().to_string(),
            run_id: run_id.into(),
            status,
            cause: cause.to_owned(),
            detail,
            at,
        }
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
