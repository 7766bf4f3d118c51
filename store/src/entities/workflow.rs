//! Workflows as synced from the config file, stamped with the revision that last wrote them.

use sea_orm::entity::prelude::*;

#[derive(Debug, Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "workflows")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub tenant_id: String,
    pub status: String,
    pub lock_ttl_secs: i64,
    /// The triggers as JSON text.
    pub triggers: String,
    pub config_revision: String,
    pub synced_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
