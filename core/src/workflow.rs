//! Workflows as admins define them in config, and the triggers that select them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{Channel, Condition};

/// Whether a workflow can be triggered. Only `Live` workflows ever match a real event;
/// `Shadow` ones are evaluated on every live event as if they were live and what they would
/// have done is recorded, but they never run and never lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkflowStatus {
    Draft,
    Live,
    Disabled,
    Shadow,
}

impl WorkflowStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkflowStatus::Draft => "draft",
            WorkflowStatus::Live => "live",
            WorkflowStatus::Disabled => "disabled",
            WorkflowStatus::Shadow => "shadow",
        }
    }
}

/// One (channel, event_type) a workflow reacts to, and how strongly it claims it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trigger {
    pub channel: Channel,
    pub event_type: String,
    /// Higher wins; ties break by workflow id.
    pub priority: i32,
    /// Eligibility: the trigger only claims events whose payload satisfies this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<Condition>,
}

/// A workflow of one tenant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workflow {
    pub id: String,
    pub tenant_id: String,
    pub status: WorkflowStatus,
    /// How long a run of this workflow holds its entity lock without a heartbeat.
    #[serde(with = "duration_secs")]
    pub lock_ttl: Duration,
    pub triggers: Vec<Trigger>,
}

impl Workflow {
    /// The lock TTL used when a workflow names none.
    pub const DEFAULT_LOCK_TTL: Duration = Duration::from_secs(15 * 60);
}

mod duration_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_secs)
    }
}
