//! The Events API envelope: `url_verification`, `event_callback`, `app_rate_limited`, and what
//! the daemon should do with each.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;
use slack_morphism::events::SlackPushEvent;
use switchyard_core::{Disposition, Normalized};

use crate::fields::Obj;
use crate::grid::{Workspace, event_workspace, foreign_author};
use crate::message::{Context, read_event};
use crate::{SlackError, SlackSourceConfig};

/// What one verified Slack request asks of the daemon.
#[derive(Debug, Clone, PartialEq)]
pub enum SlackIntake {
    /// `url_verification`: answer `200 text/plain` with `challenge` as the body. Slack sends it
    /// (signed) when the request URL is configured; it belongs to no team, so nothing is routed.
    UrlVerification { challenge: String },
    /// `event_callback`: route or record [`SlackEvent::normalized`].
    Event(SlackEvent),
    /// `app_rate_limited`: Slack is dropping this team's events for the rest of the minute. Log
    /// it, record it, answer 200.
    AppRateLimited(AppRateLimited),
}

/// One `event_callback`, normalised.
#[derive(Debug, Clone, PartialEq)]
pub struct SlackEvent {
    /// The workspace the event happened in (`context_team_id`, else the envelope's `team_id`),
    /// already mapped to the event's tenant.
    pub team_id: String,
    /// `delivery_id` is the envelope's `event_id`, Slack's key for retries of one delivery.
    pub normalized: Normalized,
    /// The message's identity, `slack:<channel>:<ts>` plus `:edited:<edit ts>` for an edit or
    /// `:deleted` for a deletion, when the event is about a message. The same message arrives
    /// as both `message` and `app_mention`, with different `event_id`s; this key is equal for
    /// both. See the crate docs for how the daemon uses it.
    pub message_key: Option<String>,
}

/// An `app_rate_limited` notice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppRateLimited {
    /// Stable for one notice (`app_rate_limited:<team_id>:<minute>`), so a redelivery of it is
    /// a `duplicate`: Slack sends no event id with it.
    pub delivery_id: String,
    pub team_id: String,
    pub tenant_id: String,
    pub api_app_id: String,
    /// The minute from which Slack is dropping events.
    pub minute_rate_limited: DateTime<Utc>,
}

/// Reads one verified Events API request body.
///
/// Call [`verify`](crate::verify) first: this function trusts the body. `raw_ref` is the
/// daemon's pointer to the stored bytes and goes into the event unchanged. Errors:
/// [`SlackError::UnknownTeam`] when no tenant claims the callback's `team_id`
/// (`unauthorized_source`), [`SlackError::Invalid`] with a specific detail when the body cannot
/// be read (`invalid_event`; Slack retries every non-2xx, so the daemon answers 200).
pub fn normalize(
    body: &[u8],
    source: &SlackSourceConfig,
    raw_ref: &str,
) -> Result<SlackIntake, SlackError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| SlackError::Invalid {
        detail: "not_json".into(),
        source: Some(e),
    })?;
    let root = Obj::root(&value)?;
    match root.req_str("type")? {
        "event_callback" => event_callback(&value, root, source, raw_ref),
        "url_verification" => {
            root.req_str("challenge")?;
            match typed(&value, "url_verification")? {
                SlackPushEvent::UrlVerification(v) => Ok(SlackIntake::UrlVerification {
                    challenge: v.challenge,
                }),
                _ => Err(SlackError::invalid("malformed_url_verification")),
            }
        }
        "app_rate_limited" => app_rate_limited(&value, root, source),
        other => Err(SlackError::invalid(format!(
            "unsupported_callback_type:{other}"
        ))),
    }
}

/// slack-morphism's envelope types model the two small callbacks exactly; the checks before
/// this give the stable details, this gives the types.
fn typed(value: &Value, kind: &str) -> Result<SlackPushEvent, SlackError> {
    SlackPushEvent::deserialize(value).map_err(|e| SlackError::Invalid {
        detail: format!("malformed_{kind}"),
        source: Some(e),
    })
}

fn app_rate_limited(
    value: &Value,
    root: Obj<'_>,
    source: &SlackSourceConfig,
) -> Result<SlackIntake, SlackError> {
    root.req_str("team_id")?;
    let Workspace { team_id, tenant_id } = event_workspace(source, value)?;
    root.req_str("api_app_id")?;
    // Read as plain seconds: slack-morphism's time type depends on its features (jiff or chrono).
    let minute = match root.get("minute_rate_limited") {
        None => return Err(root.missing("minute_rate_limited")),
        Some(minute) => minute.as_i64(),
    };
    let minute_rate_limited = minute
        .and_then(|secs| DateTime::from_timestamp(secs, 0))
        .ok_or_else(|| SlackError::invalid("wrong_type:minute_rate_limited"))?;
    let minute = minute_rate_limited.timestamp();
    let SlackPushEvent::AppRateLimited(notice) = typed(value, "app_rate_limited")? else {
        return Err(SlackError::invalid("malformed_app_rate_limited"));
    };
    Ok(SlackIntake::AppRateLimited(AppRateLimited {
        delivery_id: format!("app_rate_limited:{team_id}:{minute}"),
        team_id: team_id.to_owned(),
        tenant_id: tenant_id.to_owned(),
        api_app_id: notice.api_app_id,
        minute_rate_limited,
    }))
}

/// The envelope is read from raw JSON rather than slack-morphism's `SlackPushEventCallback`:
/// that type requires `authorizations[].user_id`, which Slack's own documented `bot_message`
/// callback omits, and a delivery must not be refused over a field nothing here uses.
fn event_callback(
    value: &Value,
    root: Obj<'_>,
    source: &SlackSourceConfig,
    raw_ref: &str,
) -> Result<SlackIntake, SlackError> {
    root.req_str("team_id")?;
    // Tenancy before anything else, from the envelope's context (Enterprise Grid included): an
    // unknown team is refused whatever its payload says.
    let workspace = event_workspace(source, value)?;
    let Workspace { team_id, tenant_id } = workspace;
    let event_id = root.req_str("event_id")?;
    let event = root.req_obj("event", "event")?;
    let ctx = Context {
        config: source,
        tenant_id,
        team_id,
        event_id,
        raw_ref,
    };
    let mut reading = read_event(&ctx, event)?;
    if let Some(detail) = foreign_author(source, value, &workspace) {
        let event = match reading.disposition {
            Disposition::Route(event) => Some(event),
            Disposition::Ineligible { event, .. } => event,
        };
        reading.disposition = Disposition::Ineligible { detail, event };
    }
    Ok(SlackIntake::Event(SlackEvent {
        team_id: team_id.to_owned(),
        normalized: Normalized {
            delivery_id: event_id.to_owned(),
            disposition: reading.disposition,
        },
        message_key: reading.message_key,
    }))
}
