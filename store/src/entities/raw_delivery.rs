//! The original bytes of a delivery, what `raw_ref` points at: two columns of the delivery's own
//! ledger row (`intake.raw_content_type`, `intake.raw_body`, since m0023), read and written
//! through this entity so the ledger's own reads never carry them.
//!
//! Invariant: a delivery's bytes live in its ledger row, so they are written by the row's
//! insert (never without it) and leave with it; retention empties the two columns earlier
//! (`retention.raw`). A row whose bytes were never stored or were pruned has them `NULL`, and
//! every read here asks for `raw_body IS NOT NULL` ([`stored`]).

use sea_orm::entity::prelude::*;
use sea_orm::sea_query::SimpleExpr;

#[derive(Debug, Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "intake")]
pub struct Model {
    /// The id of the delivery's ledger row.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub source: String,
    #[sea_orm(column_name = "raw_content_type")]
    pub content_type: String,
    #[sea_orm(column_name = "raw_body")]
    pub body: Vec<u8>,
    pub received_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

/// The rows whose bytes are kept: the condition of every read through this entity.
pub fn stored() -> SimpleExpr {
    Column::Body.is_not_null()
}
