//! A durable wait a dispatched run opened: the proposal it binds, the hash of its resume token,
//! its deadline (the row is its own expiry timer) and how it ended. Each wait ends once: every
//! change is a conditional update from `open`.

use sea_orm::entity::prelude::*;
use serde::Serialize;

/// Where a wait is. Only `Open` waits can be resumed or time out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Serialize)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::N(16))")]
#[serde(rename_all = "snake_case")]
pub enum WaitStatus {
    #[sea_orm(string_value = "open")]
    Open,
    /// A delivery resumed it (`resumed_by`).
    #[sea_orm(string_value = "resumed")]
    Resumed,
    /// Its deadline passed with `on_timeout = "resume"`: the run was resumed with decision
    /// `timeout`.
    #[sea_orm(string_value = "timed_out")]
    TimedOut,
    /// Its deadline passed with `on_timeout = "fail"`: the run failed.
    #[sea_orm(string_value = "expired")]
    Expired,
    /// The run ended otherwise (finished, lease taken over) while it waited.
    #[sea_orm(string_value = "cancelled")]
    Cancelled,
}

impl WaitStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            WaitStatus::Open => "open",
            WaitStatus::Resumed => "resumed",
            WaitStatus::TimedOut => "timed_out",
            WaitStatus::Expired => "expired",
            WaitStatus::Cancelled => "cancelled",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "waits")]
pub struct Model {
    /// UUIDv7.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub tenant_id: String,
    pub run_id: String,
    pub workflow_id: String,
    /// The worker's name for the wait (unique per run).
    pub wait_id: String,
    /// What the wait expects, e.g. `approval`.
    pub expects: String,
    pub proposal_id: String,
    /// `sha256:<hex>`: a resume must carry the same digest.
    pub proposal_digest: String,
    /// SHA-256 (hex) of the resume token.
    pub token_hash: String,
    pub status: WaitStatus,
    /// `fail` or `resume`.
    pub on_timeout: String,
    /// When the wait times out (ms since the epoch): the timer's due time.
    pub deadline: i64,
    pub decision: Option<String>,
    pub actor: Option<String>,
    /// The ledger row (intake id) of the delivery that resumed it.
    pub resumed_by: Option<String>,
    /// The dispatch carrying its `switchyard.run.resume` message.
    pub dispatch_id: Option<String>,
    pub created_at: i64,
    pub ended_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
