//! One config revision that came into force: what it said and when it was in force.

use sea_orm::entity::prelude::*;

#[derive(Debug, Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "config_revisions")]
pub struct Model {
    /// UUIDv7: revisions in the order they came into force.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// The revision id ledger rows and runs carry (`intake.config_revision`).
    pub hash: String,
    /// [`crate::store::revisions::RevisionContent`] as JSON.
    pub content: String,
    pub in_force_from: i64,
    /// `None` while in force.
    pub in_force_until: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
