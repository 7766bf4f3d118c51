//! One notification of an alert's transition (`fired`, `resolved`) to one notifier: an outbox
//! row, written with the transition and retried until delivered.

use sea_orm::entity::prelude::*;

#[derive(Debug, Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "alert_notifications")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub alert_id: String,
    pub episode: i32,
    /// `fired` or `resolved`.
    pub event: String,
    /// The `[[notifier]]` name.
    pub notifier: String,
    /// `pending` (including claimed: `due_at` is then the claim's expiry) or `delivered`.
    pub status: String,
    pub attempts: i32,
    /// When it is next tried (first try, retry, or a claim's expiry).
    pub due_at: i64,
    pub claim_token: Option<String>,
    pub last_error: Option<String>,
    /// What the notifier gave back to find the message again (Slack: `channel ts`), so the
    /// resolve updates it.
    pub external_ref: Option<String>,
    pub created_at: i64,
    pub delivered_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
