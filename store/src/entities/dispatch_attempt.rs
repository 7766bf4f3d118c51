//! One delivery attempt of a dispatch, as recorded: Svix's attempt rows are the model.

use sea_orm::entity::prelude::*;

#[derive(Debug, Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "dispatch_attempts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub dispatch_id: String,
    pub run_id: String,
    pub series: i32,
    /// 1-based within its series.
    pub attempt: i32,
    pub target: String,
    /// `delivered`, `retry`, `rejected_4xx`, `target_gone`, `claimed`, `released`, ...
    pub result: String,
    pub status_code: Option<i32>,
    /// The first 4 KiB of the response body.
    pub response: Option<String>,
    pub error: Option<String>,
    pub started_at: i64,
    pub duration_ms: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
