//! `POST /v1/events`: canonical events from trusted senders (web forms, chat bridges), with an
//! `Idempotency-Key` header as the delivery id. Source `api`.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Deserialize;
use switchyard_core::{Channel, Event, Outcome};
use uuid::Uuid;

use super::AppState;
use super::auth::Principal;
use super::intake_answer::{self, Style};
use crate::config::Scope;
use crate::intake::{Delivery, DeliveryBody, Raw};
use crate::store::MAX_KEY_LEN;

/// The source name of deliveries to this endpoint.
pub use crate::config::API_SOURCE;

/// A canonical event as a sender posts it: `raw_ref` may be left out (it then points at the
/// stored request body); a sender's own `raw_ref` is a reference outside Switchyard, never one
/// to stored bytes ([`STORED_BYTES`]).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct EventRequest {
    #[schema(value_type = PostedChannel, inline)]
    channel: Channel,
    event_type: String,
    tenant_id: String,
    target_entity_id: String,
    payload: serde_json::Value,
    #[serde(default)]
    raw_ref: Option<String>,
}

/// A channel in the OpenAPI document: one a caller may post ([`Channel::may_be_posted`]).
#[derive(Debug)]
struct PostedChannel;

impl utoipa::PartialSchema for PostedChannel {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(
                Channel::ALL
                    .into_iter()
                    .filter(|channel| channel.may_be_posted())
                    .map(Channel::as_str),
            ))
            .into()
    }
}

impl utoipa::ToSchema for PostedChannel {}

/// The prefix of a `raw_ref` naming bytes Switchyard stored. Only Switchyard writes one: a
/// sender naming another delivery's bytes (another tenant's, say) as its event's original is
/// refused (DESIGN.md promise 9).
const STORED_BYTES: &str = "raw:";

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/events", post(post_event))
}

#[utoipa::path(post, path = "/v1/events", tag = "events", params(("Idempotency-Key" = String, Header, description = "The delivery id: a copy answers `duplicate`")), request_body(content = EventRequest, content_type = "application/json"), responses((status = 200, description = "The delivery's outcome (routed, duplicate, no_trigger_match, entity_locked, ...)", body = crate::intake::Answer), (status = "default", description = "A refusal: the delivery's outcome (invalid_event 400, rate_limited 429, ...) or a refusal before intake", body = super::openapi::IntakeRefusal)))]
async fn post_event(
    State(state): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if let Err(error) = principal.require(Scope::EventsWrite) {
        return error.into_response();
    }
    if !super::error::declares_json(&headers) {
        return super::ApiError::unsupported_media_type().into_response();
    }
    let body = match intake_answer::body(body, &state) {
        Ok(body) => body,
        Err(error) => return error.into_response(),
    };
    let intake_id = Uuid::now_v7();
    let (key, event) = match read_event(&headers, &body, intake_id) {
        Ok(read) => read,
        Err(Unread::Invalid(key, detail)) => {
            return record_invalid(&state, &principal, intake_id, key, detail, body).await;
        }
        Err(Unread::Unrecorded(detail)) => {
            return intake_answer::refuse(Outcome::InvalidEvent, detail, Style::Standard);
        }
    };
    if !principal.sees(&event.tenant_id) {
        // Refused before the ledger: nothing is recorded for a tenant the token may not touch.
        return super::ApiError::Refused {
            status: axum::http::StatusCode::FORBIDDEN,
            error: "tenant_forbidden",
            detail: format!(
                "token `{}` may not send events for tenant `{}`",
                principal.name, event.tenant_id
            ),
        }
        .into_response();
    }
    for (field, value) in [
        ("event_type", &event.event_type),
        ("tenant_id", &event.tenant_id),
        ("target_entity_id", &event.target_entity_id),
    ] {
        if value.len() > MAX_KEY_LEN {
            let detail = format!("`{field}` is longer than {MAX_KEY_LEN} bytes");
            return record_invalid(&state, &principal, intake_id, Some(key), detail, body).await;
        }
    }
    let tenant = event.tenant_id.clone();
    let mut delivery =
        Delivery::new(intake_id, API_SOURCE, key, DeliveryBody::Route(event)).scoped_to(&tenant);
    delivery.raw = Some(Raw {
        content_type: "application/json".into(),
        bytes: body,
    });
    super::waits::resume_or_submit(&state, delivery, &[], &principal.name, Style::Standard).await
}

/// Why a request carries no event.
#[derive(Debug)]
enum Unread {
    /// Recorded `invalid_event` (with its delivery id when it has a usable one).
    Invalid(Option<String>, String),
    /// Refused before the ledger.
    Unrecorded(String),
}

/// The delivery id and the event a request carries, or why it carries none.
fn read_event(
    headers: &HeaderMap,
    body: &[u8],
    intake_id: Uuid,
) -> Result<(String, Event), Unread> {
    let Some(key) = headers.get("idempotency-key") else {
        return Err(Unread::Invalid(
            None,
            "missing `Idempotency-Key` header: it is the delivery id".into(),
        ));
    };
    // Any UTF-8 key is an id (HeaderValue::to_str accepts only visible ASCII).
    let Ok(key) = std::str::from_utf8(key.as_bytes()) else {
        return Err(Unread::Invalid(
            None,
            "`Idempotency-Key` must be UTF-8 text".into(),
        ));
    };
    if key.trim().is_empty() || key.len() > MAX_KEY_LEN {
        return Err(Unread::Invalid(
            None,
            format!("`Idempotency-Key` must be 1 to {MAX_KEY_LEN} characters"),
        ));
    }
    let invalid = |detail: String| Err(Unread::Invalid(Some(key.to_owned()), detail));
    let request: EventRequest = match serde_json::from_slice(body) {
        Ok(request) => request,
        Err(error) => return invalid(format!("invalid event JSON: {error}")),
    };
    if !request.channel.may_be_posted() {
        // Such a run acts for its workflow's principal because the daemon, not a caller,
        // started it: no caller may make its events.
        return invalid(format!(
            "channel `{}` events are made only by the daemon's config, never posted",
            request.channel
        ));
    }
    if request
        .raw_ref
        .as_deref()
        .is_some_and(|r| r.starts_with(STORED_BYTES))
    {
        // Not recorded: the request names bytes stored for a delivery (perhaps another
        // tenant's), and a row carrying it would link them.
        return Err(Unread::Unrecorded(format!(
            "`raw_ref` may not name stored bytes (`{STORED_BYTES}...`): Switchyard points it at \
             this request's own body when it is left out"
        )));
    }
    let event = Event {
        channel: request.channel,
        event_type: request.event_type,
        tenant_id: request.tenant_id,
        target_entity_id: request.target_entity_id,
        payload: request.payload,
        raw_ref: request
            .raw_ref
            .unwrap_or_else(|| Delivery::raw_ref(intake_id)),
    };
    if let Err(error) = event.validate() {
        return invalid(error.to_string());
    }
    Ok((key.to_owned(), event))
}

/// A request from a token that may send events which carries none: recorded `invalid_event`
/// with its bytes, like a bad webhook delivery, so an operator finds it (`/v1/intake`, its
/// `raw_ref` in `/v1/raw`), and answered 400 with the row's `intake_id`. Its delivery id is
/// its `Idempotency-Key` (one that cannot be, a fresh one), in the calling token's own
/// namespace (`caller:<token>`): the same bad request again is its `duplicate`, a corrected
/// one (in its tenant's namespace) is new work, and no other token's key can meet it.
async fn record_invalid(
    state: &AppState,
    principal: &Principal,
    intake_id: Uuid,
    key: Option<String>,
    detail: String,
    body: Bytes,
) -> Response {
    let key = key.unwrap_or_else(|| format!("unkeyed:{intake_id}"));
    let mut delivery = Delivery::new(intake_id, API_SOURCE, key, DeliveryBody::Invalid { detail })
        .scoped_to(&format!("caller:{}", principal.name));
    delivery.raw = Some(Raw {
        content_type: "application/json".into(),
        bytes: body,
    });
    intake_answer::submit(state, delivery, Style::Standard).await
}
