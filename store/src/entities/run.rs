//! A workflow run created by routing.

use sea_orm::entity::prelude::*;
use serde::Serialize;

/// Where a run is in its life (DESIGN.md section 6). Only active runs (`Queued`, `Dispatched`,
/// `NeedsInput`) hold (or may hold) an entity lock.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Serialize,
)]
#[sea_orm(rs_type = "String", db_type = "String(StringLen::N(16))")]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Routed; its dispatch is waiting to be delivered (or retried).
    #[default]
    #[sea_orm(string_value = "queued")]
    Queued,
    /// Delivered to its worker (pushed, or claimed by a pull worker).
    #[sea_orm(string_value = "dispatched")]
    Dispatched,
    /// Waits for input (a durable wait is open); keeps its entity lease until the wait ends.
    #[sea_orm(string_value = "needs_input")]
    NeedsInput,
    #[sea_orm(string_value = "completed")]
    Completed,
    #[sea_orm(string_value = "failed")]
    Failed,
    #[sea_orm(string_value = "cancelled")]
    Cancelled,
    /// Its lease ran out and another event took the entity over.
    #[sea_orm(string_value = "expired")]
    Expired,
    /// Its dispatch ran out of attempts or was refused; the entity is released and
    /// `redispatch` may start a new attempt series.
    #[sea_orm(string_value = "dead_lettered")]
    DeadLettered,
    /// The worker found it unnecessary: the subject changed meanwhile (a person resolved the
    /// ticket). A successful safety decision, not a failure; `subject_version` says which.
    #[sea_orm(string_value = "superseded")]
    Superseded,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Dispatched => "dispatched",
            RunStatus::NeedsInput => "needs_input",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Expired => "expired",
            RunStatus::DeadLettered => "dead_lettered",
            RunStatus::Superseded => "superseded",
        }
    }

    /// Every status but the active ones is final.
    pub fn is_finished(self) -> bool {
        !self.is_active()
    }

    /// Whether the run may still hold its entity lease.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            RunStatus::Queued | RunStatus::Dispatched | RunStatus::NeedsInput
        )
    }

    /// Every status, in lifecycle order.
    pub const ALL: [RunStatus; 9] = [
        RunStatus::Queued,
        RunStatus::Dispatched,
        RunStatus::NeedsInput,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::Expired,
        RunStatus::DeadLettered,
        RunStatus::Superseded,
    ];
}

impl std::str::FromStr for RunStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunStatus::ALL
        .into_iter()
        .find(|status| status.as_str() == s)
        .ok_or_else(|| {
            format!("unknown run status `{s}` (expected queued, dispatched, needs_input, completed, failed, cancelled, expired, dead_lettered or superseded)")
        })
    }
}

/// `Default` is a queued run with every optional column unset (what a new run starts from).
#[derive(Debug, Clone, Default, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "runs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub tenant_id: String,
    pub workflow_id: String,
    pub target_entity_id: String,
    pub intake_id: String,
    pub status: RunStatus,
    /// The entity lease's token when this run took it; a stale holder can be told apart.
    pub fencing_token: i64,
    pub lock_ttl_ms: i64,
    pub created_at: i64,
    pub updated_at: i64,
    pub finished_at: Option<i64>,
    /// W3C `traceparent` of the delivery that caused the run (its intake span when tracing
    /// is on); every dispatch of the run carries its trace on.
    pub traceparent: Option<String>,
    /// W3C `tracestate` that came with it, unchanged.
    pub tracestate: Option<String>,
    /// The config revision that routed it (m0008; never changed).
    pub config_revision: Option<String>,
    /// The principal whose authority it acts under (never changed).
    pub principal_id: Option<String>,
    /// Unix ms by which it must finish, else it ends `failed` (`deadline_exceeded`).
    pub deadline_at: Option<i64>,
    /// Its budgets as a JSON object of numbers (`max_attempts` and the workflow's own keys).
    pub budgets: Option<String>,
    /// What the worker reported using so far, a JSON object of running totals.
    pub run_usage: Option<String>,
    /// Why it ended when the daemon ended it (`authority_revoked`, `budget_exhausted`,
    /// `deadline_exceeded`) or the worker said why.
    pub end_reason: Option<String>,
    /// The worker's own version, as it reported on finish.
    pub worker_version: Option<String>,
    /// For a `superseded` run: the subject version that made it unnecessary.
    pub subject_version: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
