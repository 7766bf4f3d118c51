//! One row per authenticated delivery: the intake ledger.

use sea_orm::entity::prelude::*;

#[derive(Debug, Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "intake")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub source: String,
    pub delivery_id: String,
    /// With `source` and `delivery_id`, the delivery's identity: the caller's tenant where
    /// callers of several tenants share a source and choose the id (`api`), else empty.
    pub scope: String,
    pub outcome: String,
    pub detail: Option<String>,
    pub channel: Option<String>,
    pub event_type: Option<String>,
    pub tenant_id: Option<String>,
    pub target_entity_id: Option<String>,
    /// The event's payload as JSON text.
    pub payload: Option<String>,
    pub raw_ref: Option<String>,
    pub run_id: Option<String>,
    pub workflow_id: Option<String>,
    pub held_by_run_id: Option<String>,
    /// Set on a routed delivery whose message may arrive again as another event (Slack's
    /// `message` + `app_mention`): later copies are duplicates of this row.
    pub message_key: Option<String>,
    pub config_revision: String,
    pub received_at: i64,
    pub decided_at: i64,
    /// W3C `traceparent` the delivery arrived with, or its intake span's when tracing is on.
    pub traceparent: Option<String>,
    /// W3C `tracestate` the delivery arrived with, unchanged.
    pub tracestate: Option<String>,
    /// What each shadow workflow would have done (`shadow::ShadowVerdict`s as JSON); only
    /// when shadow workflows trigger on the event.
    pub shadow: Option<String>,
    /// The replay that re-admitted this delivery (live replays only).
    pub replay_id: Option<String>,
    /// The intake id of the delivery this one replays.
    pub replay_of: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
