//! Which replica polls a mailbox: a lease row per email source.

use sea_orm::entity::prelude::*;

#[derive(Debug, Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "poller_leases")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub source: String,
    /// The replica holding it; `None` once released.
    pub owner: Option<String>,
    pub fencing_token: i64,
    pub expires_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
