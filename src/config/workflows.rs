//! `[[workflow]]` entries as admins write them.

use std::time::Duration;

use serde::Deserialize;
use switchyard_core::{Channel, Condition, Trigger, Workflow, WorkflowStatus};

use crate::store::MAX_KEY_LEN;

/// One workflow.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowConfig {
    /// Unique across the file; runs and the ledger name it.
    pub id: String,
    /// The tenant whose events may trigger it.
    pub tenant: String,
    /// `draft` and `disabled` workflows never match a real event.
    pub status: WorkflowStatus,
    /// How long a run holds its entity lock without a heartbeat (default 15m).
    #[serde(default, with = "humantime_serde")]
    pub lock_ttl: Option<Duration>,
    /// The `[[target]]` its runs are delivered to (default: the built-in pull target, claimed
    /// with `POST /v1/claims`).
    #[serde(default)]
    pub target: Option<String>,
    /// The (channel, event_type) pairs it reacts to, each with a priority.
    pub triggers: Vec<TriggerConfig>,
}

/// One trigger of a workflow.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerConfig {
    /// `email | chat | slack | web_form | webhook`.
    pub channel: String,
    /// The event type to match exactly, e.g. `ticket.created`.
    pub event_type: String,
    /// Higher wins; ties break by workflow id (and `switchyard check` warns).
    #[serde(default)]
    pub priority: i32,
    /// Only events whose normalised payload satisfies this condition are claimed, e.g.
    /// `{ field = "priority", equals = "urgent" }` (see `switchyard_core::Condition`). Checked
    /// when the file is loaded.
    #[serde(default)]
    pub when: Option<Condition>,
}

impl WorkflowConfig {
    /// Everything wrong with this workflow, each naming it.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let id = &self.id;
        for (field, value) in [("id", id), ("tenant", &self.tenant)] {
            if value.trim().is_empty() {
                problems.push(format!("workflow `{id}`: `{field}` must not be empty"));
            } else if value.len() > MAX_KEY_LEN || value.contains('\u{1f}') {
                problems.push(format!(
                    "workflow `{id}`: `{field}` must be at most {MAX_KEY_LEN} bytes of printable text"
                ));
            }
        }
        if self.lock_ttl == Some(Duration::ZERO) {
            problems.push(format!(
                "workflow `{id}`: `lock_ttl` must be longer than 0s"
            ));
        }
        // A shadow is evaluated on live traffic as if it were live: the same rules hold.
        let evaluated = matches!(self.status, WorkflowStatus::Live | WorkflowStatus::Shadow);
        if evaluated && self.triggers.is_empty() {
            problems.push(format!(
                "workflow `{id}` is {} but has no triggers",
                self.status.as_str()
            ));
        }
        for trigger in &self.triggers {
            if let Err(error) = trigger.channel.parse::<Channel>() {
                // Drafts may name channels not built yet; a live or shadow workflow may not.
                if evaluated {
                    problems.push(format!("workflow `{id}`: {error}"));
                }
            }
            if trigger.event_type.trim().is_empty() || trigger.event_type.len() > MAX_KEY_LEN {
                problems.push(format!(
                    "workflow `{id}`: trigger event_type must be 1 to {MAX_KEY_LEN} bytes"
                ));
            }
        }
        problems
    }

    /// The domain form; triggers on unknown channels (drafts only) are left out.
    pub fn to_workflow(&self) -> Workflow {
        Workflow {
            id: self.id.clone(),
            tenant_id: self.tenant.clone(),
            status: self.status,
            lock_ttl: self.lock_ttl.unwrap_or(Workflow::DEFAULT_LOCK_TTL),
            triggers: self
                .triggers
                .iter()
                .filter_map(|t| {
                    Some(Trigger {
                        channel: t.channel.parse().ok()?,
                        event_type: t.event_type.clone(),
                        priority: t.priority,
                        when: t.when.clone(),
                    })
                })
                .collect(),
        }
    }
}
