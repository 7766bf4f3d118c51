//! An outbox row of a run (its start, or the resume of one of its waits): written with the run, claimed by dispatchers and pull workers.

use sea_orm::entity::prelude::*;
use serde::Serialize;

/// Where a dispatch is. `Pending` includes rows claimed right now (by a push dispatcher or a
/// pull worker): their `due_at` is the claim's expiry, after which they may be claimed again.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Serialize,
)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::N(16))")]
#[serde(rename_all = "snake_case")]
pub enum DispatchStatus {
    #[default]
    #[sea_orm(string_value = "pending")]
    Pending,
    #[sea_orm(string_value = "delivered")]
    Delivered,
    #[sea_orm(string_value = "dead_lettered")]
    DeadLettered,
    /// The run ended before it was delivered (lease taken over, cancelled): nothing to send.
    #[sea_orm(string_value = "cancelled")]
    Cancelled,
}

impl DispatchStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DispatchStatus::Pending => "pending",
            DispatchStatus::Delivered => "delivered",
            DispatchStatus::DeadLettered => "dead_lettered",
            DispatchStatus::Cancelled => "cancelled",
        }
    }
}

/// `Default` is a pending dispatch with every optional column unset.
#[derive(Debug, Clone, Default, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "dispatches")]
pub struct Model {
    /// The dispatch id: the message id on every attempt and every series.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub run_id: String,
    pub tenant_id: String,
    pub workflow_id: String,
    /// The configured target's name.
    pub target: String,
    pub status: DispatchStatus,
    /// Attempts made in the current series.
    pub attempts: i32,
    /// 1 for the series started by routing; each redispatch adds one.
    pub series: i32,
    /// When this row next needs a dispatcher (first try, retry, or a claim's expiry).
    pub due_at: i64,
    /// The replica (push) or `pull` holding the current claim, if any.
    pub claimed_by: Option<String>,
    /// A pull worker's claim token, if claimed.
    pub claim_token: Option<String>,
    /// Why it was dead-lettered: `max_attempts`, `rejected_4xx`, `target_gone`, ...
    pub reason: Option<String>,
    pub last_error: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub delivered_at: Option<i64>,
    /// Set on a row that carries a `switchyard.run.resume` message: the wait it resumes (a run
    /// has one start row and one row per resumed wait).
    pub wait_id: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
