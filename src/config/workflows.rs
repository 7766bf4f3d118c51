//! `[[workflow]]` entries as admins write them.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use switchyard_core::{Channel, Coalesce, Condition, Trigger, Workflow, WorkflowStatus};

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
    /// Most runs dispatched and not finished at once; past it, new runs are created (and hold
    /// their entity) but their dispatch waits for a free slot, in arrival order.
    #[serde(default)]
    pub max_running: Option<u32>,
    /// Most runs created and not yet dispatched; past it, deliveries are refused as
    /// `rate_limited` (`max_queued`).
    #[serde(default)]
    pub max_queued: Option<u32>,
    /// The (channel, event_type) pairs it reacts to, each with a priority.
    pub triggers: Vec<TriggerConfig>,
    /// The `[[principal]]` (of the same tenant) whose authority its runs act under; required
    /// for a live workflow.
    #[serde(default)]
    pub run_as: Option<toml::Spanned<String>>,
    /// Capabilities its principal must hold (e.g. `ticket:write`); checked at load, at
    /// routing and at dispatch.
    #[serde(default)]
    pub requires: Vec<String>,
    /// How long a run may take from routing to its finish (e.g. `1h`); past it the run ends
    /// `failed` with `deadline_exceeded`. Unset: no deadline.
    #[serde(default, with = "humantime_serde")]
    pub deadline: Option<Duration>,
    /// Limits recorded with each run and sent to its worker: `max_attempts` bounds dispatch
    /// attempts (default: the target's own bound); every other key (e.g. `steps`,
    /// `tool_calls`, `cost_usd`) is an opaque number the worker reports `usage` against.
    #[serde(default)]
    pub budgets: BTreeMap<String, f64>,
    /// Who may resume its runs' waits: the `actor` a resume names (a Slack user id for a
    /// Slack button). Absent: any actor of an authenticated resume; empty: nobody.
    #[serde(default)]
    pub approvers: Option<Vec<String>>,
}

/// The budget key that bounds dispatch attempts (the others are the worker's to report).
pub const MAX_ATTEMPTS: &str = "max_attempts";

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
    /// Coalescing: further events on the same entity before the run is dispatched join it
    /// (`coalesced`) instead of being `entity_locked`; the run is dispatched `quiet` after the
    /// latest, never later than `max_wait` after the first, e.g.
    /// `{ quiet = "30s", max_wait = "5m" }`. Refused on message-like event types.
    #[serde(default)]
    pub coalesce: Option<Coalesce>,
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
        for (key, value) in [
            ("max_running", self.max_running),
            ("max_queued", self.max_queued),
        ] {
            if value == Some(0) {
                problems.push(format!(
                    "workflow `{id}`: `{key}` must be at least 1 (leave it out for no ceiling)"
                ));
            }
        }
        if self.deadline == Some(Duration::ZERO) {
            problems.push(format!(
                "workflow `{id}`: `deadline` must be longer than 0s"
            ));
        }
        for (key, limit) in &self.budgets {
            if key.trim().is_empty() || key.len() > MAX_KEY_LEN {
                problems.push(format!(
                    "workflow `{id}`: budget names must be 1 to {MAX_KEY_LEN} bytes"
                ));
            } else if !limit.is_finite() || *limit <= 0.0 {
                problems.push(format!(
                    "workflow `{id}`: budget `{key}` must be a number greater than 0, not {limit}"
                ));
            } else if key == MAX_ATTEMPTS && (limit.fract() != 0.0 || *limit > f64::from(i32::MAX))
            {
                problems.push(format!(
                    "workflow `{id}`: budget `max_attempts` must be a whole number, not {limit}"
                ));
            }
        }
        if self.requires.iter().any(|c| c.trim().is_empty()) {
            problems.push(format!(
                "workflow `{id}`: a capability in `requires` must not be empty"
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
        for approver in self.approvers.iter().flatten() {
            if approver.trim().is_empty() || approver.len() > MAX_KEY_LEN {
                problems.push(format!(
                    "workflow `{id}`: each of `approvers` must be 1 to {MAX_KEY_LEN} bytes"
                ));
            }
        }
        for trigger in &self.triggers {
            if let Err(error) = trigger.channel.parse::<Channel>() {
                // Drafts may name channels not built yet; a live or shadow workflow may not.
                if evaluated {
                    problems.push(format!("workflow `{id}`: {error}"));
                }
            }
            if trigger.coalesce.is_some()
                && let Some(why) = super::coalesce_refusal(&trigger.channel, &trigger.event_type)
            {
                problems.push(format!("workflow `{id}`: {why}"));
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
