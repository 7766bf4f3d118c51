//! A stored delivery's raw bytes back through the adapter of its source: its channel's
//! registration (`edge::Channel::renormalize`, reached through the replayer's [`Rereader`])
//! calls the same pure `normalize` its ingest endpoint does, with the source settings of the
//! revision the replay runs under (`api`'s bodies are read by `reread::api_body`). Signatures are not checked again: the delivery was
//! authenticated when it was received, and the secret that signed it may have rotated since.
//!
//! When the bytes alone cannot be normalised again (no stored bytes, a source no longer
//! configured, a binary-mode CloudEvent whose `ce-*` headers are not stored), the event the
//! ledger row recorded is used instead, and the replay says so.

use switchyard_core::{Event, Outcome};

use super::reread::{Again, Rereader, Stored, api_body};
use crate::config::API_SOURCE;
use crate::config::SourceConfig;
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
    channels: &dyn Rereader,
) -> Renormalized {
    let renormalized = normalize_again(row, raw, sources, channels);
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
    channels: &dyn Rereader,
) -> Renormalized {
    let Some(raw) = raw else {
        return stored(row, "no raw bytes are stored for it (pruned by retention?)");
    };
    let raw_ref = format!("raw:{}", row.id);
    let again = Stored {
        body: raw.body.as_slice(),
        content_type: &raw.content_type,
        delivery_id: &row.delivery_id,
        payload: row.payload.as_deref(),
        raw_ref: &raw_ref,
    };
    let named: Vec<&SourceConfig> = sources.iter().filter(|s| s.name() == row.source).collect();
    let source = match named.as_slice() {
        [] if row.source == API_SOURCE => return from(row, api_body(&again)),
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
            .find(|s| channels.stored_here(s, &raw.content_type))
            .unwrap_or(several[0]),
    };
    match channels.renormalize(source, &again) {
        Some(normalized) => from(row, normalized),
        None => stored(row, &format!("no channel reads {} sources", source.kind())),
    }
}

/// Replay's account of what the channel made of the bytes.
fn from(row: &intake::Model, again: Again) -> Renormalized {
    match again {
        Again::Normalized { body, message_key } => Renormalized {
            message_key,
            ..Renormalized::of(body)
        },
        Again::Refused(outcome, detail) => Renormalized::refused(outcome, detail),
        Again::Unreadable(why) => stored(row, why),
    }
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
