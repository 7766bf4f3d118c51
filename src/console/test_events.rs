//! The signed samples behind the Sources page's "Send a test event": one per kind of source the
//! daemon can sign for itself (Zendesk webhooks, Slack Events API, CloudEvents with a Standard
//! Webhooks key, `json_webhook` with its preset's secret), each to an event type no workflow is
//! expected to trigger on, so the delivery is recorded and no run starts.
//!
//! Invariant: a sample is only built, never sent, here (pure); the console sends it through the
//! source's real ingest route, so it is verified and recorded like any delivery.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value, json};
use switchyard_json_webhook::template::Part;

use crate::config::ResolvedSource;

/// A Zendesk test event's type: `ticket.*` as Zendesk's are.
pub const ZENDESK_TEST_EVENT_TYPE: &str = "ticket.switchyard_test";
/// The event type (or the text put where a mapping reads one) of the other kinds' test events.
pub const TEST_EVENT_TYPE: &str = "switchyard_test";
/// The entity a test event is about.
const TEST_ENTITY: &str = "switchyard-test";

/// One request to send: path, content type, headers (the signature's among them), body.
#[derive(Debug)]
pub struct Sample {
    pub path: String,
    pub content_type: &'static str,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Why the console cannot sign a test event for a source: one sentence for the admin.
pub fn untestable(source: &ResolvedSource) -> Option<String> {
    match source {
        ResolvedSource::Webhook { .. } => None,
        ResolvedSource::Slack { secret: None, .. } => {
            Some("it has no signing secret, so it takes no HTTP callbacks".into())
        }
        ResolvedSource::Slack { config, .. } if config.teams.is_empty() => {
            Some("it names no team (`teams`) a callback could come from".into())
        }
        ResolvedSource::Slack { .. } => None,
        ResolvedSource::CloudEvents { key: None, .. } => {
            Some("it has no signing key (only the API token admits its events)".into())
        }
        ResolvedSource::CloudEvents { .. } => None,
        ResolvedSource::JsonWebhook { config, .. } => {
            let fixed = config
                .event_type
                .parts()
                .iter()
                .all(|p| matches!(p, Part::Literal(_)));
            fixed.then(|| {
                format!(
                    "its event type is always `{}`, so a test event could start a run",
                    String::from(config.event_type.clone())
                )
            })
        }
        ResolvedSource::Email { .. } => Some("a mailbox is polled, not posted to".into()),
        ResolvedSource::WebForm { .. } => {
            Some("a web form is posted by a browser from an allowed page".into())
        }
    }
}

/// The signed sample for `source` (kind `kind`, named `name`), as delivery `id` at `now`;
/// `sees` says which tenants the admin may act for (a Slack team of another tenant is never
/// used). `Err` says why there is none.
pub fn sample(
    source: &ResolvedSource,
    kind: &str,
    name: &str,
    id: &str,
    now: DateTime<Utc>,
    sees: impl Fn(&str) -> bool,
) -> Result<Sample, String> {
    if let Some(why) = untestable(source) {
        return Err(why);
    }
    let path = format!("/v1/ingest/{kind}/{name}");
    let json = "application/json";
    let to_vec = |value: &Value| serde_json::to_vec(value).unwrap_or_default();
    match source {
        ResolvedSource::Webhook { config, secret } => {
            let body = to_vec(&json!({
                "type": format!("zen:event-type:{ZENDESK_TEST_EVENT_TYPE}"),
                "id": id,
                "account_id": config.account_id,
                "time": now.to_rfc3339_opts(SecondsFormat::Millis, true),
                "subject": "zen:ticket:switchyard-test",
                "zendesk_event_version": "2022-11-06",
                "detail": {
                    "id": TEST_ENTITY,
                    "subject": "A test event sent from the Switchyard console",
                    "status": "NEW",
                    "via": {"channel": "web_service"}
                },
                "event": {}
            }));
            let timestamp = now.to_rfc3339_opts(SecondsFormat::Secs, true);
            let headers = secret.as_ref().map_or_else(Vec::new, |secret| {
                vec![
                    (
                        switchyard_webhook::SIGNATURE_HEADER.to_owned(),
                        switchyard_webhook::sign(secret.as_bytes(), &timestamp, &body),
                    ),
                    (switchyard_webhook::TIMESTAMP_HEADER.to_owned(), timestamp),
                ]
            });
            Ok(Sample {
                path,
                content_type: json,
                headers,
                body,
            })
        }
        ResolvedSource::Slack {
            config,
            secret: Some(secret),
            ..
        } => {
            let team = config
                .teams
                .iter()
                .find(|(_, tenant)| sees(tenant))
                .map(|(team, _)| team.clone())
                .ok_or("none of its teams belongs to a tenant you may act for")?;
            // An `event_callback` whose event type no subscription names: recorded
            // `ineligible` (`unsupported_event_type:switchyard_test`), never routed.
            let body = to_vec(&json!({
                "token": "switchyard-test",
                "team_id": team,
                "api_app_id": "ASWITCHYARD",
                "type": "event_callback",
                "event_id": id,
                "event_time": now.timestamp(),
                "event": {
                    "type": TEST_EVENT_TYPE,
                    "text": "A test event sent from the Switchyard console",
                    "event_ts": format!("{}.000000", now.timestamp()),
                },
            }));
            let signature = switchyard_slack::sign(secret, now.timestamp(), &body);
            Ok(Sample {
                path,
                content_type: json,
                headers: vec![
                    (
                        "x-slack-request-timestamp".into(),
                        now.timestamp().to_string(),
                    ),
                    ("x-slack-signature".into(), signature),
                ],
                body,
            })
        }
        ResolvedSource::CloudEvents {
            key: Some(key),
            config,
        } => {
            let body = to_vec(&json!({
                "specversion": "1.0",
                "type": TEST_EVENT_TYPE,
                "source": format!("/switchyard/console/{}", config.name),
                "id": id,
                "subject": TEST_ENTITY,
                "time": now.to_rfc3339_opts(SecondsFormat::Millis, true),
                "datacontenttype": "application/json",
                "data": {"text": "A test event sent from the Switchyard console"},
            }));
            let headers = switchyard_cloudevents::sign(key, id, now.timestamp(), &body)
                .into_iter()
                .map(|(name, value)| (name.to_owned(), value))
                .collect();
            Ok(Sample {
                path,
                content_type: switchyard_cloudevents::STRUCTURED_CONTENT_TYPE,
                headers,
                body,
            })
        }
        ResolvedSource::JsonWebhook { config, verifier } => {
            let mut body = Value::Object(Map::new());
            let mut headers = Vec::new();
            let mut fill = |template: &switchyard_json_webhook::Template, value: Value| {
                for part in template.parts() {
                    match part {
                        Part::Literal(_) => {}
                        Part::Pointer(pointer) => put(&mut body, pointer, value.clone()),
                        Part::Header(header) => headers.push((
                            header.clone(),
                            value.as_str().unwrap_or(TEST_ENTITY).to_owned(),
                        )),
                    }
                }
            };
            fill(&config.event_type, json!(TEST_EVENT_TYPE));
            fill(&config.target_entity_id, json!(TEST_ENTITY));
            if let Some(delivery_id) = &config.delivery_id {
                fill(delivery_id, json!(id));
            }
            match &config.payload {
                Some(switchyard_json_webhook::mapping::PayloadSpec::Pointer(pointer)) => {
                    fill(pointer, json!({"switchyard_test": true}));
                }
                Some(switchyard_json_webhook::mapping::PayloadSpec::Table(table)) => {
                    for template in table.values() {
                        fill(template, json!("switchyard test"));
                    }
                }
                None => {}
            }
            let body = to_vec(&body);
            let signed = verifier.sign(&body, id, now.timestamp());
            if signed.is_empty() {
                return Err("no secret of its preset is in force".into());
            }
            headers.extend(signed);
            Ok(Sample {
                path,
                content_type: json,
                headers,
                body,
            })
        }
        _ => Err("the console cannot sign a test event for it".into()),
    }
}

/// Puts `value` at JSON Pointer `pointer` (RFC 6901) in `root`, making objects on the way; a
/// pointer into something that is not an object replaces it with one.
fn put(root: &mut Value, pointer: &str, value: Value) {
    let tokens: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    let Some((last, path)) = tokens.split_last() else {
        *root = value;
        return;
    };
    let mut at = root;
    for token in path {
        if !at.is_object() {
            *at = Value::Object(Map::new());
        }
        let Value::Object(map) = at else { return };
        at = map
            .entry(token.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !at.is_object() {
        *at = Value::Object(Map::new());
    }
    if let Value::Object(map) = at {
        map.insert(last.clone(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_makes_the_objects_a_pointer_walks_through() {
        let mut body = json!({});
        put(&mut body, "/event/type", json!("switchyard_test"));
        put(&mut body, "/event/id", json!(7));
        put(&mut body, "/a~1b/c~0d", json!(true));
        assert_eq!(
            body,
            json!({"event": {"type": "switchyard_test", "id": 7}, "a/b": {"c~d": true}})
        );
        put(&mut body, "/event/type/deeper", json!(1));
        assert_eq!(body["event"]["type"], json!({"deeper": 1}));
    }
}
