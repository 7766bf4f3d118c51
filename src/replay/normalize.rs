//! A stored delivery's raw bytes back through the adapter of its source: the same pure
//! `normalize` the ingest handlers call, with the source settings of the revision the replay
//! runs under. Signatures are not checked again: the delivery was authenticated when it was
//! received, and the secret that signed it may have rotated since.
//!
//! When the bytes alone cannot be normalised again (no stored bytes, a source no longer
//! configured, a binary-mode CloudEvent whose `ce-*` headers are not stored), the event the
//! ledger row recorded is used instead, and the replay says so.

use switchyard_core::{Channel, Event, Outcome};
use switchyard_slack::SlackIntake;

use crate::config::SourceConfig;
use crate::http::API_SOURCE;
use crate::intake::DeliveryBody;
use crate::store::entities::{intake, raw_delivery};

/// A delivery as its adapter makes it again.
#[derive(Debug)]
pub struct Renormalized {
    pub body: DeliveryBody,
    /// The message identity (Slack), for duplicate claims.
    pub message_key: Option<String>,
    /// How the event was obtained when not from the raw bytes (a note for the report).
    pub note: Option<String>,
    /// An outcome decided before routing (`unauthorized_source` under settings that no
    /// longer admit it).
    pub refused: Option<(Outcome, String)>,
}

impl Renormalized {
    fn of(body: DeliveryBody) -> Self {
        Self {
            body,
            message_key: None,
            note: None,
            refused: None,
        }
    }

    fn refused(outcome: Outcome, detail: String) -> Self {
        Self {
            refused: Some((outcome, detail)),
            ..Self::of(DeliveryBody::Invalid {
                detail: String::new(),
            })
        }
    }
}

/// Normalises `row`'s own raw bytes (`raw`, stored under the row's id) again with `sources`
/// (the settings of the revision replayed under); falls back to the stored event. An event
/// that comes out for another tenant than the row's is refused (`unauthorized_source`): a
/// replay acts only for the tenant the delivery was recorded for.
pub fn renormalize(
    row: &intake::Model,
    raw: Option<&raw_delivery::Model>,
    sources: &[SourceConfig],
) -> Renormalized {
    let renormalized = normalize_again(row, raw, sources);
    let recorded_for = row
        .tenant_id
        .as_deref()
        .or((!row.scope.is_empty()).then_some(row.scope.as_str()));
    let tenant = renormalized
        .body
        .event()
        .map(|event| event.tenant_id.as_str());
    match (recorded_for, tenant) {
        (Some(recorded_for), Some(tenant)) if tenant != recorded_for => {
            tracing::warn!(
                intake_id = %row.id,
                source = %row.source,
                tenant_id = recorded_for,
                replayed_tenant_id = tenant,
                "a replayed delivery came out for another tenant than its own; refused"
            );
            Renormalized::refused(
                Outcome::UnauthorizedSource,
                format!(
                    "tenant_mismatch: replayed, the delivery is for tenant `{tenant}`, but it \
                     was recorded for `{recorded_for}`; a replay acts only for the tenant a \
                     delivery was recorded for"
                ),
            )
        }
        _ => renormalized,
    }
}

fn normalize_again(
    row: &intake::Model,
    raw: Option<&raw_delivery::Model>,
    sources: &[SourceConfig],
) -> Renormalized {
    let Some(raw) = raw else {
        return stored(row, "no raw bytes are stored for it (pruned by retention?)");
    };
    let raw_ref = format!("raw:{}", row.id);
    let body = raw.body.as_slice();
    let named: Vec<&SourceConfig> = sources.iter().filter(|s| s.name() == row.source).collect();
    let source = match named.as_slice() {
        [] if row.source == API_SOURCE => return canonical(row, body, &raw_ref),
        [] => {
            return stored(
                row,
                &format!("source `{}` is not configured here", row.source),
            );
        }
        [one] => *one,
        several => several
            .iter()
            .copied()
            .find(|s| match s {
                SourceConfig::Email(_) => raw.content_type == "message/rfc822",
                SourceConfig::CloudEvents(_) => raw.content_type.contains("cloudevents"),
                _ => false,
            })
            .unwrap_or(several[0]),
    };
    match source {
        SourceConfig::Webhook(config) => {
            // The request's headers are not stored; the recorded delivery id names it.
            let ids = switchyard_webhook::RequestIds {
                signed: None,
                invocation_id: Some(&row.delivery_id),
            };
            match switchyard_webhook::normalize(body, ids, config, &raw_ref) {
                Ok(normalized) => Renormalized::of(normalized.disposition.into()),
                Err(error) if error.is_unauthorized() => Renormalized::refused(
                    Outcome::UnauthorizedSource,
                    format!("{}: {error}", error.detail()),
                ),
                Err(error) => Renormalized::of(DeliveryBody::Invalid {
                    detail: format!("{}: {error}", error.detail()),
                }),
            }
        }
        SourceConfig::Slack(config) => match switchyard_slack::normalize(body, config, &raw_ref) {
            Ok(SlackIntake::Event(event)) => Renormalized {
                message_key: event.message_key,
                ..Renormalized::of(event.normalized.disposition.into())
            },
            Ok(SlackIntake::AppRateLimited(notice)) => Renormalized::of(DeliveryBody::Ineligible {
                detail: format!(
                    "app_rate_limited: Slack dropped team {}'s events from {}",
                    notice.team_id, notice.minute_rate_limited
                ),
                event: None,
            }),
            Ok(SlackIntake::UrlVerification { .. }) => Renormalized::of(DeliveryBody::Invalid {
                detail: "url_verification is answered, never recorded".into(),
            }),
            Err(error) if error.outcome() == Some(Outcome::InvalidEvent) => {
                Renormalized::of(DeliveryBody::Invalid {
                    detail: error.detail(),
                })
            }
            Err(error) => Renormalized::refused(Outcome::UnauthorizedSource, error.detail()),
        },
        SourceConfig::Email(config) => {
            let (uidvalidity, uid) = imap_position(row);
            match switchyard_email::normalize(body, config, uidvalidity, uid, &raw_ref) {
                Ok(normalized) => Renormalized::of(normalized.disposition.into()),
                Err(error) => Renormalized::of(DeliveryBody::Invalid {
                    detail: format!("{}: {error}", error.detail()),
                }),
            }
        }
        SourceConfig::CloudEvents(config) => {
            let headers = [("content-type", raw.content_type.as_str())];
            let event = match switchyard_cloudevents::parse(&headers[..], body) {
                Ok(event) => event,
                Err(_) if !raw.content_type.contains("cloudevents") => {
                    return stored(
                        row,
                        "a binary-mode CloudEvent: its ce-* headers are not stored",
                    );
                }
                Err(error) => {
                    return Renormalized::of(DeliveryBody::Invalid {
                        detail: format!("{}: {error}", error.detail()),
                    });
                }
            };
            match switchyard_cloudevents::normalize(&event, config, &raw_ref) {
                Ok(normalized) => Renormalized::of(normalized.disposition.into()),
                Err(error) if error.is_unauthorized() => Renormalized::refused(
                    Outcome::UnauthorizedSource,
                    format!("{}: {error}", error.detail()),
                ),
                Err(error) => Renormalized::of(DeliveryBody::Invalid {
                    detail: format!("{}: {error}", error.detail()),
                }),
            }
        }
    }
}

/// A `/v1/events` body: the canonical event itself.
fn canonical(row: &intake::Model, body: &[u8], raw_ref: &str) -> Renormalized {
    #[derive(serde::Deserialize)]
    struct EventRequest {
        channel: Channel,
        event_type: String,
        tenant_id: String,
        target_entity_id: String,
        payload: serde_json::Value,
        #[serde(default)]
        raw_ref: Option<String>,
    }
    match serde_json::from_slice::<EventRequest>(body) {
        Ok(request) => Renormalized::of(DeliveryBody::Route(Event {
            channel: request.channel,
            event_type: request.event_type,
            tenant_id: request.tenant_id,
            target_entity_id: request.target_entity_id,
            payload: request.payload,
            // A sender's own reference outside Switchyard is kept; one naming stored bytes
            // (refused at intake since, possible on older rows) never is.
            raw_ref: request
                .raw_ref
                .filter(|r| !r.starts_with("raw:"))
                .unwrap_or_else(|| raw_ref.to_owned()),
        })),
        Err(_) => stored(row, "the stored body is not a canonical event"),
    }
}

/// The mailbox position an email was fetched at, as its payload recorded it.
fn imap_position(row: &intake::Model) -> (u32, u32) {
    let payload: Option<serde_json::Value> = row
        .payload
        .as_deref()
        .and_then(|p| serde_json::from_str(p).ok());
    let read = |key: &str| {
        payload
            .as_ref()
            .and_then(|p| p.pointer(&format!("/imap/{key}")))
            .and_then(serde_json::Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0)
    };
    (read("uidvalidity"), read("uid"))
}

/// The event the ledger row recorded, for a delivery whose bytes cannot be normalised again.
fn stored(row: &intake::Model, why: &str) -> Renormalized {
    let note = Some(format!("replayed from the recorded event: {why}"));
    let event = stored_event(row);
    let body = match (row.outcome.as_str(), event) {
        ("invalid_event", _) | (_, None) => DeliveryBody::Invalid {
            detail: row.detail.clone().unwrap_or_else(|| "invalid_event".into()),
        },
        ("ineligible", event) => DeliveryBody::Ineligible {
            detail: row.detail.clone().unwrap_or_default(),
            event,
        },
        (_, Some(event)) => DeliveryBody::Route(event),
    };
    Renormalized {
        note,
        message_key: row.message_key.clone(),
        ..Renormalized::of(body)
    }
}

/// The six fields a ledger row keeps of its event.
pub fn stored_event(row: &intake::Model) -> Option<Event> {
    Some(Event {
        channel: row.channel.as_deref()?.parse().ok()?,
        event_type: row.event_type.clone()?,
        tenant_id: row.tenant_id.clone()?,
        target_entity_id: row.target_entity_id.clone()?,
        payload: row
            .payload
            .as_deref()
            .and_then(|p| serde_json::from_str(p).ok())
            .unwrap_or_else(|| serde_json::json!({})),
        raw_ref: row.raw_ref.clone().unwrap_or_default(),
    })
}
