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

    /// The lease `run` holds once it takes the entity again (a redispatch) over `current`, with
    /// the next fencing token, or the run that holds it now.
    pub fn retaken(
        current: Option<&Model>,
        run: &super::run::Model,
        now: i64,
    ) -> Result<Model, String> {
        if let Some(holder) = current.and_then(|row| row.held_at(now))
            && holder != run.id
        {
            return Err(holder.to_owned());
        }
        Ok(Model {
            tenant_id: run.tenant_id.clone(),
            target_entity_id: run.target_entity_id.clone(),
            run_id: Some(run.id.clone()),
            fencing_token: current.map_or(1, |row| row.fencing_token + 1),
            expires_at: now.saturating_add(run.lock_ttl_ms),
            updated_at: now,
        })
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
