//! The lease row on one (tenant, target entity). Kept after release so its token keeps growing.

use sea_orm::entity::prelude::*;

#[derive(Debug, Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "entity_locks")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub tenant_id: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub target_entity_id: String,
    /// The holding run; `None` once released.
    pub run_id: Option<String>,
    /// Grows by one at every acquisition, never reused.
    pub fencing_token: i64,
    /// Millis since the epoch; a lease at or past this is free to take over.
    pub expires_at: i64,
    pub updated_at: i64,
}

impl Model {
    /// Whether a run holds this lease at `now`.
    pub fn held_at(&self, now: i64) -> Option<&str> {
        self.run_id.as_deref().filter(|_| self.expires_at > now)
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
