//! One delivery of a replay: what it was then and what it is now.

use sea_orm::entity::prelude::*;

#[derive(Debug, Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "replay_results")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub replay_id: String,
    /// The original ledger row.
    pub intake_id: String,
    pub source: String,
    pub delivery_id: String,
    pub tenant_id: Option<String>,
    pub event_type: Option<String>,
    pub received_at: i64,
    pub original_outcome: String,
    pub original_workflow_id: Option<String>,
    pub replayed_outcome: String,
    pub replayed_workflow_id: Option<String>,
    pub differs: bool,
    /// Why it differs (or how it was replayed, when that needs saying).
    pub why: Option<String>,
    /// Live replays: the ledger row and run of the re-admitted delivery.
    pub new_intake_id: Option<String>,
    pub new_run_id: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
