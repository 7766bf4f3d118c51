//! The one message shape for every transport: a CloudEvents 1.0 event in structured JSON mode.

use serde::{Deserialize, Serialize};

/// CloudEvents `type` of the message that starts a run.
pub const RUN_START: &str = "switchyard.run.start";
/// CloudEvents `type` of the message that resumes a run after one of its waits ended.
pub const RUN_RESUME: &str = "switchyard.run.resume";
/// Content type of a structured-mode CloudEvent (the whole event is the body).
pub const CONTENT_TYPE: &str = "application/cloudevents+json";

/// The run as a worker sees it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunInfo {
    /// Run id.
    pub id: String,
    /// Workflow the run executes.
    pub workflow_id: String,
    /// Tenant that owns the run.
    pub tenant_id: String,
    /// Entity the run holds the lock on.
    pub target_entity_id: String,
    /// Monotonic token the worker presents with every write, so a stale holder is refused.
    pub fencing_token: i64,
    /// Lease expiry, RFC 3339 UTC with milliseconds.
    pub lease_expires_at: String,
    /// Revision of the configuration the run was decided under.
    pub config_revision: String,
    /// The intake (delivery) that caused the run.
    pub intake_id: String,
    /// 1 for the first attempt of this dispatch series, counting up.
    pub attempt: u32,
    /// The principal whose authority the run acts under, as the revision in force defines it
    /// at dispatch: the worker authorises each tool call against its capabilities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<PrincipalInfo>,
    /// When the run must have finished (RFC 3339 UTC with milliseconds); past it the run
    /// ends `failed` (`deadline_exceeded`) and a late finish is not applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
    /// Limits recorded when the run was created: `max_attempts` (dispatch) and the workflow's
    /// own numeric keys, which heartbeat and finish report `usage` against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budgets: Option<serde_json::Map<String, serde_json::Value>>,
}

/// A principal as a worker sees it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PrincipalInfo {
    /// Principal id (`run_as` of the workflow when the run was routed).
    pub id: String,
    /// Tenant it acts for (always the run's tenant).
    pub tenant: String,
    /// `service` or `delegated`.
    pub kind: String,
    /// Capability names it holds.
    pub capabilities: Vec<String>,
}

/// The `data` of a run message: the run and the event that started it (and, in a resume
/// message, how the wait ended).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunData {
    /// The run.
    pub run: RunInfo,
    /// The normalised event that triggered it.
    pub event: switchyard_core::Event,
    /// Set in a [`RUN_RESUME`] message only.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub resume: Option<ResumeInfo>,
}

/// How a wait ended, in a [`RUN_RESUME`] message.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ResumeInfo {
    /// The worker's name for the wait.
    pub wait_id: String,
    /// What the wait expected, e.g. `approval`.
    pub expects: String,
    /// The proposal the wait was bound to.
    pub proposal: Proposal,
    /// The decision the resume carried, or `timeout` when the deadline resumed it.
    pub decision: String,
    /// Who decided (absent for a timeout).
    pub actor: Option<String>,
    /// The event that resumed it (absent for a timeout).
    pub event: Option<switchyard_core::Event>,
    /// The ledger row (intake id) of that event.
    pub intake_id: Option<String>,
}

/// A proposal a wait is bound to.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Proposal {
    pub id: String,
    /// `sha256:<hex>`.
    pub digest: String,
}

/// A CloudEvents 1.0 envelope: specversion "1.0", id, source, type, subject (= target entity),
/// time (RFC 3339), datacontenttype "application/json", optional traceparent extension
/// (omitted when None), data.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunMessage {
    /// Always "1.0".
    pub specversion: String,
    /// The dispatch id, stable across attempts; `(source, id)` identifies the event.
    pub id: String,
    /// Who sent it, e.g. "switchyard://<host>".
    pub source: String,
    /// CloudEvents `type`, e.g. [`RUN_START`].
    #[serde(rename = "type")]
    pub kind: String,
    /// The target entity id.
    pub subject: String,
    /// When the message was built, RFC 3339 UTC with milliseconds.
    pub time: String,
    /// Content type of `data`: "application/json".
    pub datacontenttype: String,
    /// W3C trace context, the CloudEvents distributed-tracing extension.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub traceparent: Option<String>,
    /// W3C `tracestate` that goes with `traceparent` (same extension).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tracestate: Option<String>,
    /// The run and its event.
    pub data: RunData,
}

impl RunMessage {
    /// Builds a `switchyard.run.start` message.
    ///
    /// `id` is the dispatch id (stable across attempts); `source` e.g. "switchyard://<host>"
    /// chosen by the daemon; `time_ms` Unix ms.
    pub fn run_start(
        id: &str,
        source: &str,
        time_ms: i64,
        run: RunInfo,
        event: switchyard_core::Event,
        traceparent: Option<String>,
    ) -> Self {
        RunMessage {
            specversion: "1.0".to_owned(),
            id: id.to_owned(),
            source: source.to_owned(),
            kind: RUN_START.to_owned(),
            subject: run.target_entity_id.clone(),
            time: rfc3339_ms(time_ms),
            datacontenttype: "application/json".to_owned(),
            traceparent,
            tracestate: None,
            data: RunData {
                run,
                event,
                resume: None,
            },
        }
    }

    /// Turns a start message into the `switchyard.run.resume` message of `resume`. `id` stays
    /// what the caller built it with: the resume dispatch's id, derived from run and wait.
    pub fn into_resume(mut self, resume: ResumeInfo) -> Self {
        self.kind = RUN_RESUME.to_owned();
        self.data.resume = Some(resume);
        self
    }

    /// The structured-mode body.
    ///
    /// Serialising this type cannot fail: every field is a string, an integer or a
    /// `serde_json::Value`, and no map has non-string keys. Should serde_json ever report an
    /// error anyway, this returns `{}` (and logs it) rather than panicking in the dispatcher.
    pub fn to_json(&self) -> Vec<u8> {
        match serde_json::to_vec(self) {
            Ok(body) => body,
            Err(error) => {
                tracing::error!(%error, id = %self.id, "A run message could not be serialised.");
                b"{}".to_vec()
            }
        }
    }
}

/// Unix milliseconds as RFC 3339 UTC with milliseconds; out-of-range values clamp to the epoch.
fn rfc3339_ms(time_ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(time_ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_is_rfc3339_utc_millis() {
        assert_eq!(rfc3339_ms(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
    }
}
