//! One replay: its parameters, who started it, and its progress.

use sea_orm::entity::prelude::*;

#[derive(Debug, Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "replays")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// Who started it: `token:<name>` (API, console) or `cli:<user>`.
    pub actor: String,
    /// `diagnostic` or `live`.
    pub mode: String,
    /// `original`, `current` or `candidate`.
    pub revision: String,
    /// The candidate file's revision (hash), for `candidate`.
    pub candidate_revision: Option<String>,
    /// The candidate file's text (secrets are named by variable, never written in it).
    pub candidate: Option<String>,
    /// The filters as JSON (`replay::Filters`).
    pub filters: String,
    /// `running`, `completed`, `cancelled`, `failed` or `interrupted`.
    pub status: String,
    /// Deliveries matching the filters when it started.
    pub total: i64,
    /// Deliveries replayed so far.
    pub done: i64,
    /// How many of those came out differently.
    pub differ: i64,
    /// The last ledger row replayed: where a rerun would continue.
    pub last_intake_id: Option<String>,
    pub error: Option<String>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
