//! The original bytes of a delivery: what `raw_ref` points at.

use sea_orm::entity::prelude::*;

#[derive(Debug, Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "raw_deliveries")]
pub struct Model {
    /// The same id as the delivery's intake row.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub source: String,
    pub content_type: String,
    pub body: Vec<u8>,
    pub received_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
