//! An approval message Switchyard posts to Slack for a wait that names a Slack channel: the
//! outbox row that is posted, then updated once the wait ends (m0016).

use sea_orm::entity::prelude::*;

/// Where a message is: `pending` (to post), `posted` (to update when its wait ends), `done`.
pub mod status {
    pub const PENDING: &str = "pending";
    pub const POSTED: &str = "posted";
    pub const DONE: &str = "done";
}

#[derive(Debug, Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "slack_messages")]
pub struct Model {
    /// UUIDv7.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub tenant_id: String,
    pub run_id: String,
    /// The wait's row id (`waits.id`).
    pub wait_row_id: String,
    /// The Slack source whose bot token posts it.
    pub source: String,
    pub channel: String,
    /// What the message says (the proposal), as text.
    pub body: String,
    /// The buttons' value (resume token and proposal digest): kept only until posted.
    pub button_value: Option<String>,
    pub status: String,
    /// The posted message's `ts`.
    pub ts: Option<String>,
    /// Failed attempts since the last success.
    pub attempts: i32,
    /// When it is next worked on.
    pub due_at: i64,
    /// Claimed by a replica until then.
    pub claimed_until: Option<i64>,
    pub last_error: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
