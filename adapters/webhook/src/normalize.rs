//! Turns one verified Zendesk webhook body into the canonical [`Event`], whichever way the
//! webhook is connected (event subscription or trigger/automation).

use serde_json::error::Category;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use switchyard_core::{Channel, Disposition, Event, Normalized, Outcome};

use crate::WebhookSourceConfig;
use crate::fields;
use crate::object::Object;
use crate::payload::{self, CommentPayload, Connection, TicketFields, TicketPayload};
use crate::signature::Signed;

/// Prefix of every Zendesk event-subscription `type`.
const EVENT_TYPE_PREFIX: &str = "zen:event-type:";
/// Longest id kept as a delivery or ticket id; longer ones are not Zendesk's.
const MAX_ID_LEN: usize = 255;

/// Why a verified body could not become an event. [`NormalizeError::outcome`] says how the
/// daemon answers: `unauthorized_source` for a foreign account, `invalid_event` otherwise.
#[derive(Debug, thiserror::Error)]
pub enum NormalizeError {
    #[error("the payload names account {received}, but this source is for account {configured}")]
    AccountMismatch { configured: u64, received: String },
    #[error("the body is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("the body is JSON but not an object")]
    NotObject,
    #[error(
        "the body is neither a Zendesk event (with `type: \"zen:event-type:...\"`) nor a trigger \
         body (with `event_type` and `ticket`)"
    )]
    UnrecognisedShape,
    #[error("non-ticket event type `{0}`: only `ticket.*` events are accepted")]
    NonTicketEventType(String),
    #[error("the trigger body has no `event_type` string (expected e.g. \"ticket.updated\")")]
    MissingEventType,
    #[error(
        "malformed event type `{0}`: expected `ticket.<name>` with letters, digits, `_`, `.` or `-`"
    )]
    MalformedEventType(String),
    #[error("no ticket id: {0}")]
    MissingTicketId(&'static str),
    #[error("malformed ticket id `{value}`: {reason}")]
    MalformedTicketId { value: String, reason: &'static str },
    #[error("ambiguous ticket id: `detail.id` is {detail} but `subject` names ticket {subject}")]
    TicketIdConflict { detail: String, subject: String },
    #[error("malformed event id: longer than {MAX_ID_LEN} characters")]
    MalformedEventId,
}

impl NormalizeError {
    /// A stable machine-readable reason, for the ledger and the HTTP answer.
    pub fn detail(&self) -> &'static str {
        match self {
            NormalizeError::AccountMismatch { .. } => "account_mismatch",
            NormalizeError::NotJson(_) => "not_json",
            NormalizeError::NotObject => "not_object",
            NormalizeError::UnrecognisedShape => "unrecognised_shape",
            NormalizeError::NonTicketEventType(_) => "non_ticket_event_type",
            NormalizeError::MissingEventType => "missing_event_type",
            NormalizeError::MalformedEventType(_) => "malformed_event_type",
            NormalizeError::MissingTicketId(_) => "missing_ticket_id",
            NormalizeError::MalformedTicketId { .. } => "malformed_ticket_id",
            NormalizeError::TicketIdConflict { .. } => "ticket_id_conflict",
            NormalizeError::MalformedEventId => "malformed_event_id",
        }
    }

    /// Whether the delivery is from somewhere this source does not speak for.
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, NormalizeError::AccountMismatch { .. })
    }

    /// The intake outcome: `unauthorized_source` or `invalid_event`.
    pub fn outcome(&self) -> Outcome {
        if self.is_unauthorized() {
            Outcome::UnauthorizedSource
        } else {
            Outcome::InvalidEvent
        }
    }
}

/// What names one request's delivery besides its body, for [`normalize`].
///
/// An event-subscription body names itself (its `id`, which is signed). A trigger body carries
/// no id, so a signed request is identified by its signed parts ([`Signed::delivery_id`]): a
/// captured request resent with a new `X-Zendesk-Webhook-Invocation-Id` is the same delivery.
/// Zendesk may sign a retry afresh (new timestamp, same invocation), so the invocation is kept
/// as a second identity, [`RequestIds::retry_key`], which the daemon records as the message the
/// delivery is about: once one copy has routed, a retry of its invocation is a duplicate too.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestIds<'a> {
    /// The accepted signature, when the source checks one.
    pub signed: Option<&'a Signed>,
    /// The `X-Zendesk-Webhook-Invocation-Id` header. Not signed: it names a trigger delivery
    /// only when the source checks no signature.
    pub invocation_id: Option<&'a str>,
}

impl RequestIds<'_> {
    /// The invocation header, when usable as an id.
    fn invocation(&self) -> Option<&str> {
        self.invocation_id
            .map(str::trim)
            .filter(|id| !id.is_empty() && id.chars().count() <= MAX_ID_LEN)
    }

    /// The delivery id of a body that [`normalize`] refused as `invalid_event`. It routes
    /// nothing, so a signed one is named by its signed bytes alone: a copy, or a retry Zendesk
    /// signed afresh, is the same delivery. Unsigned: the invocation, else the body's digest.
    pub fn invalid_delivery_id(&self, body: &[u8]) -> String {
        match (self.signed, self.invocation()) {
            (None, Some(invocation)) => invocation.to_owned(),
            _ => body_digest(body),
        }
    }

    /// The delivery id of a trigger body: the signed parts, else the invocation, else the
    /// body's digest.
    fn trigger_delivery_id(&self, body: &[u8]) -> String {
        match (self.signed, self.invocation()) {
            (Some(signed), _) => signed.delivery_id(),
            (None, Some(invocation)) => invocation.to_owned(),
            (None, None) => body_digest(body),
        }
    }

    /// The invocation of a signed request, `invocation:<id>`: a retry Zendesk signed afresh
    /// shares it with the first copy. `None` without a signature (the invocation is then the
    /// delivery id itself) or without the header.
    pub fn retry_key(&self) -> Option<String> {
        self.signed?;
        self.invocation().map(|id| format!("invocation:{id}"))
    }
}

/// Normalises a verified delivery of `source` into an event to route.
///
/// `ids` name the delivery of a trigger body, which carries no id of its own ([`RequestIds`]);
/// `raw_ref` points at the stored raw bytes. The tenant is always `source.tenant`; a payload
/// `account_id` other than the configured one is refused before anything else is read.
pub fn normalize(
    body: &[u8],
    ids: RequestIds<'_>,
    source: &WebhookSourceConfig,
    raw_ref: &str,
) -> Result<Normalized, NormalizeError> {
    let root = Object::parse(body).map_err(|error| match error.classify() {
        Category::Data => NormalizeError::NotObject,
        _ => NormalizeError::NotJson(error),
    })?;
    let account_id = account(&root, source)?;

    let read = match root.string("type") {
        Some(kind) if kind.starts_with("zen:") => read_subscription(&root, &kind, body)?,
        _ if root.contains_key("ticket") || root.contains_key("event_type") => {
            read_trigger(&root, ids, body)?
        }
        _ => return Err(NormalizeError::UnrecognisedShape),
    };

    let payload = TicketPayload {
        ticket_id: read.ticket_id.clone(),
        ticket: read.ticket,
        occurred_at: read.occurred_at,
        event: read.event,
        source_event_type: read.source_event_type,
        account_id,
        connection: read.connection,
    };
    let event = Event {
        channel: Channel::Webhook,
        event_type: read.event_type,
        tenant_id: source.tenant.clone(),
        target_entity_id: read.ticket_id,
        payload: payload.into_value(),
        raw_ref: raw_ref.to_owned(),
    };
    Ok(Normalized {
        delivery_id: read.delivery_id,
        disposition: Disposition::Route(event),
    })
}

/// What each connection style contributes before the common payload is assembled.
struct Read {
    delivery_id: String,
    event_type: String,
    source_event_type: String,
    ticket_id: String,
    ticket: TicketFields,
    event: Value,
    occurred_at: Option<String>,
    connection: Connection,
}

fn read_subscription(root: &Object<'_>, kind: &str, body: &[u8]) -> Result<Read, NormalizeError> {
    let event_type = kind
        .strip_prefix(EVENT_TYPE_PREFIX)
        .ok_or_else(|| NormalizeError::NonTicketEventType(clip(kind)))
        .and_then(|name| ticket_event_type(kind, name))?;

    let detail = root.object("detail").unwrap_or_default();
    let from_detail = ticket_id(detail.get("id").as_ref())?;
    let subject = root.string("subject");
    let from_subject = subject
        .as_deref()
        .and_then(ticket_in_subject)
        .map(|id| ticket_id(Some(&Value::String(id.to_owned()))))
        .transpose()?
        .flatten();
    let ticket_id = match (from_detail, from_subject) {
        (Some(detail), Some(subject)) if detail != subject => {
            return Err(NormalizeError::TicketIdConflict { detail, subject });
        }
        (Some(id), _) | (None, Some(id)) => id,
        (None, None) => {
            return Err(NormalizeError::MissingTicketId(
                "neither `detail.id` nor a `subject` of the form `zen:ticket:<id>`",
            ));
        }
    };

    // The event id is Zendesk's dedup key for retries of the same event.
    let delivery_id = match fields::id(root.get("id").as_ref()) {
        Some(id) if id.chars().count() > MAX_ID_LEN => {
            return Err(NormalizeError::MalformedEventId);
        }
        Some(id) => id,
        None => body_digest(body),
    };

    // Zendesk's `event` object, owned here: kept as delivered unless the type has a shape.
    let event = match (event_type.as_str(), root.get("event")) {
        ("ticket.comment_added", Some(Value::Object(event))) => match event.get("comment") {
            Some(Value::Object(comment)) => CommentPayload::read(comment).to_event(),
            _ => Value::Object(event),
        },
        ("ticket.status_changed", Some(Value::Object(event))) => {
            payload::change(&event, fields::status)
        }
        ("ticket.priority_changed", Some(Value::Object(event))) => {
            payload::change(&event, fields::lower)
        }
        (_, Some(Value::Object(event))) => Value::Object(event),
        _ => Value::Object(Map::new()),
    };

    Ok(Read {
        delivery_id,
        event_type,
        source_event_type: kind.to_owned(),
        ticket_id,
        ticket: TicketFields::read(&detail),
        event,
        occurred_at: fields::time(root.get("time").as_ref()),
        connection: Connection::EventSubscription,
    })
}

fn read_trigger(
    root: &Object<'_>,
    ids: RequestIds<'_>,
    body: &[u8],
) -> Result<Read, NormalizeError> {
    let given = root.string("event_type");
    let given = given
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or(NormalizeError::MissingEventType)?;
    // Admins may copy the event-subscription spelling; both name the same event.
    let event_type = ticket_event_type(
        given,
        given.strip_prefix(EVENT_TYPE_PREFIX).unwrap_or(given),
    )?;

    let ticket = root
        .object("ticket")
        .ok_or(NormalizeError::MissingTicketId(
            "the body has no `ticket` object",
        ))?;
    let ticket_id = ticket_id(ticket.get("id").as_ref())?.ok_or(
        NormalizeError::MissingTicketId("the body's `ticket` has no `id`"),
    )?;

    let delivery_id = ids.trigger_delivery_id(body);

    let event = match root.get("comment") {
        Some(Value::Object(comment)) => CommentPayload::read(&comment).to_event(),
        _ => Value::Object(Map::new()),
    };

    Ok(Read {
        delivery_id,
        event_type,
        source_event_type: given.to_owned(),
        ticket_id,
        ticket: TicketFields::read(&ticket),
        event,
        occurred_at: None,
        connection: Connection::Trigger,
    })
}

/// The payload's account, refused when it is not the configured one. Fail closed: an account
/// id that cannot be read is not the configured account either.
fn account(
    root: &Object<'_>,
    source: &WebhookSourceConfig,
) -> Result<Option<String>, NormalizeError> {
    let received = match root.get("account_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.trim().is_empty() => None,
        Some(value) => Some(fields::id(Some(&value)).unwrap_or_else(|| value.to_string())),
    };
    if let (Some(configured), Some(received)) = (source.account_id, &received)
        && received.parse::<u64>().ok() != Some(configured)
    {
        return Err(NormalizeError::AccountMismatch {
            configured,
            received: clip(received),
        });
    }
    Ok(received.or_else(|| source.account_id.map(|id| id.to_string())))
}

/// `ticket.<name>` with a conservative alphabet: event types end up in trigger config keys.
fn ticket_event_type(given: &str, name: &str) -> Result<String, NormalizeError> {
    let Some(rest) = name.strip_prefix("ticket.") else {
        return Err(NormalizeError::NonTicketEventType(clip(given)));
    };
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    if rest.is_empty() || name.len() > 128 || !rest.chars().all(allowed) {
        return Err(NormalizeError::MalformedEventType(clip(given)));
    }
    Ok(name.to_owned())
}

/// A present ticket id, as a string; `None` when absent, null or blank.
fn ticket_id(value: Option<&Value>) -> Result<Option<String>, NormalizeError> {
    let malformed = |value: &str, reason| NormalizeError::MalformedTicketId {
        value: clip(value),
        reason,
    };
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(id) => Ok(Some(id.to_string())),
            None => Err(malformed(&n.to_string(), "not a non-negative integer")),
        },
        Some(Value::String(s)) => {
            let s = s.trim();
            if s.is_empty() {
                Ok(None)
            } else if s.contains("{{") {
                Err(malformed(s, "an unrendered Zendesk placeholder"))
            } else if s.chars().count() > MAX_ID_LEN {
                Err(malformed(s, "too long"))
            } else if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
                Err(malformed(s, "contains whitespace"))
            } else {
                Ok(Some(s.to_owned()))
            }
        }
        Some(other) => Err(malformed(&other.to_string(), "not a string or number")),
    }
}

/// The ticket id in an event `subject` such as `zen:ticket:5158`.
fn ticket_in_subject(subject: &str) -> Option<&str> {
    subject.split('/').find_map(|segment| {
        segment
            .strip_prefix("zen:")
            .unwrap_or(segment)
            .strip_prefix("ticket:")
    })
}

/// The delivery id of an unsigned body that carries none: identical bodies are one delivery.
fn body_digest(body: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(body)))
}

/// Payload values end up in error messages: keep them short.
fn clip(value: &str) -> String {
    const MAX: usize = 80;
    match value.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}...", &value[..end]),
        None => value.to_owned(),
    }
}
