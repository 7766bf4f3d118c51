//! Slack interactivity: a button click (`block_actions`) posted to the app's Interactivity
//! Request URL as `application/x-www-form-urlencoded` with one field, `payload`, holding JSON.
//! Signed exactly like Events API requests ([`crate::verify`] over the raw form body).
//!
//! [`normalize_interaction`] turns the body into a [`BlockAction`]: the team's tenant (from the
//! source's `teams`, never the payload), who clicked, the clicked action (`action_id`, `value`)
//! and a canonical [`Event`] (channel `slack`, event type `block_actions`, entity
//! `<channel>:<message ts>` of the message the button sits on). The delivery id is Slack's
//! `trigger_id`, unique per click.

use serde_json::{Value, json};
use switchyard_core::{Channel, Event};

use crate::grid::{Workspace, interaction_workspace};
use crate::{SlackError, SlackSourceConfig};

/// One button click.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockAction {
    /// Identifies the click: Slack's `trigger_id` (or `action_ts` when there is none).
    pub delivery_id: String,
    pub team_id: String,
    /// The Slack user who clicked.
    pub user_id: String,
    /// The clicked action's `action_id` (e.g. `approve`, `reject`).
    pub action_id: String,
    /// The clicked action's `value` (up to 2,000 characters), as set when the button was posted.
    pub value: String,
    /// The canonical event; its payload holds the fields above, the container's channel and
    /// message ts, and `value` as sent.
    pub event: Event,
}

/// Reads a signed interactivity body. Errors: `UnknownTeam` (`unauthorized_source`) for a team no
/// tenant claims; `Invalid` (`invalid_event`: `not_form`, `missing_field:payload`, `not_json`,
/// `unsupported_interaction:<type>`, `missing_field:actions`, ...) otherwise.
pub fn normalize_interaction(
    body: &[u8],
    config: &SlackSourceConfig,
    raw_ref: &str,
) -> Result<BlockAction, SlackError> {
    let text = std::str::from_utf8(body).map_err(|_| SlackError::invalid("not_form"))?;
    let payload = form_field(text, "payload")
        .ok_or_else(|| SlackError::invalid("missing_field:payload"))??;
    let payload: Value = serde_json::from_str(&payload).map_err(|error| SlackError::Invalid {
        detail: "not_json".into(),
        source: Some(error),
    })?;
    interaction_of(&payload, config, raw_ref)
}

/// Reads an interaction payload already decoded from its form field (or from a Socket Mode
/// `interactive` envelope, which carries the same JSON). Errors as [`normalize_interaction`].
pub fn interaction_of(
    payload: &Value,
    config: &SlackSourceConfig,
    raw_ref: &str,
) -> Result<BlockAction, SlackError> {
    let kind =
        str_at(payload, &["type"]).ok_or_else(|| SlackError::invalid("missing_field:type"))?;
    let Workspace {
        team_id,
        tenant_id: tenant,
    } = interaction_workspace(config, payload)?;
    if kind != "block_actions" {
        return Err(SlackError::invalid(format!(
            "unsupported_interaction:{kind}"
        )));
    }
    let user_id = str_at(payload, &["user", "id"])
        .ok_or_else(|| SlackError::invalid("missing_field:user.id"))?;
    let action = payload
        .get("actions")
        .and_then(Value::as_array)
        .and_then(|actions| actions.first())
        .ok_or_else(|| SlackError::invalid("missing_field:actions"))?;
    let action_id = str_at(action, &["action_id"])
        .ok_or_else(|| SlackError::invalid("missing_field:actions.0.action_id"))?;
    let value = str_at(action, &["value"])
        .ok_or_else(|| SlackError::invalid("missing_field:actions.0.value"))?;
    let delivery_id = str_at(payload, &["trigger_id"])
        .or_else(|| str_at(action, &["action_ts"]))
        .ok_or_else(|| SlackError::invalid("missing_field:trigger_id"))?;
    let channel_id = str_at(payload, &["container", "channel_id"])
        .or_else(|| str_at(payload, &["channel", "id"]));
    let message_ts = str_at(payload, &["container", "message_ts"])
        .or_else(|| str_at(payload, &["message", "ts"]));
    let target_entity_id = match (channel_id, message_ts) {
        (Some(channel), Some(ts)) => format!("{channel}:{ts}"),
        _ => format!("user:{user_id}"),
    };
    let event = Event {
        channel: Channel::Slack,
        event_type: "block_actions".into(),
        tenant_id: tenant.to_owned(),
        target_entity_id,
        payload: json!({
            "team_id": team_id,
            "user_id": user_id,
            "action_id": action_id,
            "value": value,
            "channel_id": channel_id,
            "message_ts": message_ts,
            "trigger_id": str_at(payload, &["trigger_id"]),
            "action_ts": str_at(action, &["action_ts"]),
        }),
        raw_ref: raw_ref.to_owned(),
    };
    Ok(BlockAction {
        delivery_id: delivery_id.to_owned(),
        team_id: team_id.to_owned(),
        user_id: user_id.to_owned(),
        action_id: action_id.to_owned(),
        value: value.to_owned(),
        event,
    })
}

fn str_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut at = value;
    for key in path {
        at = at.get(*key)?;
    }
    at.as_str().filter(|s| !s.is_empty())
}

/// The decoded value of field `name` of an `application/x-www-form-urlencoded` body: `None`
/// when absent, `Some(Err)` when its percent-encoding is broken.
fn form_field(body: &str, name: &str) -> Option<Result<String, SlackError>> {
    body.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (decode(key).ok()? == name).then(|| decode(value))
    })
}

fn decode(text: &str) -> Result<String, SlackError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| SlackError::invalid("not_form"))?;
                out.push(hex);
                i += 2;
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| SlackError::invalid("not_form"))
}

/// `application/x-www-form-urlencoded` encoding of one value (for tests and senders).
pub fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len() * 3);
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(byte as char)
            }
            b' ' => out.push('+'),
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> SlackSourceConfig {
        toml::from_str(
            r#"
            name = "ws"
            signing_secret_env = "S"
            teams = { T9TEAM = "acme" }
            "#,
        )
        .unwrap()
    }

    fn click(team: &str, kind: &str) -> String {
        let payload = json!({
            "type": kind,
            "team": {"id": team, "domain": "acme"},
            "user": {"id": "U777", "username": "dana"},
            "api_app_id": "A1",
            "trigger_id": "123.456.abc",
            "container": {"type": "message", "channel_id": "C42", "message_ts": "1700000000.000100"},
            "actions": [{"action_id": "approve", "value": "swyw_tok+en/=&x", "action_ts": "1700000001.1"}],
            "response_url": "https://hooks.slack.com/actions/T9TEAM/1/x",
        });
        format!("payload={}", form_encode(&payload.to_string()))
    }

    #[test]
    fn a_button_click_becomes_a_block_action_of_the_teams_tenant() {
        let action = normalize_interaction(
            click("T9TEAM", "block_actions").as_bytes(),
            &config(),
            "raw:1",
        )
        .unwrap();
        assert_eq!(action.delivery_id, "123.456.abc");
        assert_eq!(action.user_id, "U777");
        assert_eq!(action.action_id, "approve");
        assert_eq!(
            action.value, "swyw_tok+en/=&x",
            "form decoding keeps every byte"
        );
        assert_eq!(action.event.tenant_id, "acme");
        assert_eq!(action.event.target_entity_id, "C42:1700000000.000100");
        assert_eq!(action.event.event_type, "block_actions");
    }

    #[test]
    fn refusals_name_their_reason() {
        let unknown =
            normalize_interaction(click("TOTHER", "block_actions").as_bytes(), &config(), "r")
                .unwrap_err();
        assert_eq!(
            unknown.outcome(),
            Some(switchyard_core::Outcome::UnauthorizedSource)
        );
        let modal = normalize_interaction(
            click("T9TEAM", "view_submission").as_bytes(),
            &config(),
            "r",
        )
        .unwrap_err();
        assert_eq!(modal.detail(), "unsupported_interaction:view_submission");
        for (body, detail) in [
            ("other=1", "missing_field:payload"),
            ("payload=%7Bnot", "not_json"),
            ("payload=%zz", "not_form"),
        ] {
            let error = normalize_interaction(body.as_bytes(), &config(), "r").unwrap_err();
            assert_eq!(error.detail(), detail, "{body}");
            assert_eq!(
                error.outcome(),
                Some(switchyard_core::Outcome::InvalidEvent)
            );
        }
    }
}
