//! Where a mailbox started being read (`start_from`) and how many messages it left behind.

use sea_orm::entity::prelude::*;

#[derive(Debug, Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "mailbox_starts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub source: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub mailbox: String,
    pub start_from: String,
    pub uidvalidity: i64,
    pub first_uid: i64,
    pub left_behind: i64,
    pub started_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
