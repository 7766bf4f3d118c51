//! A parsed CloudEvent -> the canonical `Event` of its source's tenant.

use serde_json::{Map, Value, json};
use switchyard_core::{Disposition, Event, Normalized};

use crate::config::CloudEventsSourceConfig;
use crate::parse::{CloudEvent, Data};
use crate::signature::Signed;

/// The extension that may name a tenant; it must agree with the source's.
pub const TENANT_EXTENSION: &str = "tenantid";

/// Why a parsed CloudEvent cannot become an `Event`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NormalizeError {
    /// No `subject`: the entity a run would lock is unknown.
    #[error(
        "the event has no `subject`: it names the entity (ticket, conversation) a run locks, \
         so it is required here"
    )]
    MissingSubject,
    /// A `tenantid` extension naming a tenant other than the source's.
    #[error(
        "the `tenantid` extension says `{given}`, but this source belongs to tenant `{configured}`"
    )]
    TenantMismatch { given: String, configured: String },
}

impl NormalizeError {
    /// A stable machine-readable code for the answer's detail.
    pub fn detail(&self) -> &'static str {
        match self {
            NormalizeError::MissingSubject => "missing_subject",
            NormalizeError::TenantMismatch { .. } => "tenant_mismatch",
        }
    }

    /// `unauthorized_source` (refused before the store) rather than `invalid_event`.
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, NormalizeError::TenantMismatch { .. })
    }
}

/// The delivery id of an event: `(source, id)` identifies a CloudEvent, written as the JSON
/// array `["<source>","<id>"]` so no choice of separator can make two pairs collide.
pub fn delivery_id(source: &str, id: &str) -> String {
    Value::Array(vec![source.into(), id.into()]).to_string()
}

/// How a delivery is recorded: by what authenticates it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// A second request with the same one is a `duplicate`, whatever the first one's outcome.
    pub delivery_id: String,
    /// The event's `(source, id)` when it is not the delivery id: the first copy that routes
    /// claims it, and a later copy of the same event under another message is a `duplicate`.
    pub message_key: Option<String>,
}

/// The identity of a delivery of `event`, from what authenticated the request.
///
/// A signed request is the signed message: its `webhook-id` ([`Signed::delivery_id`]). In
/// binary mode the attributes that route the event (`ce-id`, `ce-type`, `ce-subject`, ...) are
/// headers outside the signature, so a captured request resent with new ones must still be the
/// same delivery; in structured mode they are inside the signed body, and the message id
/// identifies it just as well. The event's own `(source, id)` is kept as the message key.
/// A request a bearer token authenticated is the event's `(source, id)` ([`delivery_id`]).
pub fn identity(event: &CloudEvent, signed: Option<&Signed>) -> Identity {
    let event_id = delivery_id(&event.source, &event.id);
    match signed {
        Some(signed) => Identity {
            delivery_id: signed.delivery_id(),
            message_key: Some(event_id),
        },
        None => Identity {
            delivery_id: event_id,
            message_key: None,
        },
    }
}

/// The canonical event: `type` is the event type, `subject` the entity, the tenant and the
/// channel come from `source`; the payload is the event's attributes and data (see the crate
/// documentation).
pub fn normalize(
    event: &CloudEvent,
    source: &CloudEventsSourceConfig,
    raw_ref: &str,
) -> Result<Normalized, NormalizeError> {
    if let Some(given) = event.extensions.get(TENANT_EXTENSION) {
        let given = match given {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        if given != source.tenant {
            return Err(NormalizeError::TenantMismatch {
                given,
                configured: source.tenant.clone(),
            });
        }
    }
    let subject = event
        .subject
        .as_ref()
        .filter(|s| !s.trim().is_empty())
        .ok_or(NormalizeError::MissingSubject)?;
    Ok(Normalized {
        delivery_id: delivery_id(&event.source, &event.id),
        disposition: Disposition::Route(Event {
            channel: source.channel,
            event_type: event.event_type.clone(),
            tenant_id: source.tenant.clone(),
            target_entity_id: subject.clone(),
            payload: payload(event),
            raw_ref: raw_ref.to_owned(),
        }),
    })
}

/// The payload: every attribute but `specversion`, with `data` (JSON or text) or
/// `data_base64` (binary), and the extensions under `extensions`.
fn payload(event: &CloudEvent) -> Value {
    let text = |v: &Option<String>| v.clone().map_or(Value::Null, Value::String);
    let mut object = Map::new();
    object.insert("id".into(), event.id.clone().into());
    object.insert("source".into(), event.source.clone().into());
    object.insert("type".into(), event.event_type.clone().into());
    object.insert("subject".into(), text(&event.subject));
    object.insert("time".into(), text(&event.time));
    object.insert("datacontenttype".into(), text(&event.datacontenttype));
    object.insert("dataschema".into(), text(&event.dataschema));
    object.insert("mode".into(), json!(event.mode));
    object.insert("extensions".into(), Value::Object(event.extensions.clone()));
    let data = match &event.data {
        Data::None => Value::Null,
        Data::Json(value) => value.clone(),
        Data::Text(text) => Value::String(text.clone()),
        Data::Base64(encoded) => {
            object.insert("data_base64".into(), Value::String(encoded.clone()));
            Value::Null
        }
    };
    object.insert("data".into(), data);
    Value::Object(object)
}
