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
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventRequest {
    channel: Channel,
    event_type: String,
    tenant_id: String,
    target_entity_id: String,
    payload: serde_json::Value,
    #[serde(default)]
    raw_ref: Option<String>,
}

/// The prefix of a `raw_ref` naming bytes Switchyard stored. Only Switchyard writes one: a
/// sender naming another delivery's bytes (another tenant's, say) as its event's original is
/// refused (DESIGN.md promise 9).
const STORED_BYTES: &str = "raw:";

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/events", post(post_event))
}

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
    let invalid =
        |detail: String| intake_answer::refuse(Outcome::InvalidEvent, detail, Style::Standard);
    let Some(key) = headers.get("idempotency-key") else {
        return invalid("missing `Idempotency-Key` header: it is the delivery id".into());
    };
    // Any UTF-8 key is an id (HeaderValue::to_str accepts only visible ASCII).
    let Ok(key) = std::str::from_utf8(key.as_bytes()) else {
        return invalid("`Idempotency-Key` must be UTF-8 text".into());
    };
    if key.trim().is_empty() || key.len() > MAX_KEY_LEN {
        return invalid(format!(
            "`Idempotency-Key` must be 1 to {MAX_KEY_LEN} characters"
        ));
    }
    let request: EventRequest = match serde_json::from_slice(&body) {
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
        return invalid(format!(
            "`raw_ref` may not name stored bytes (`{STORED_BYTES}...`): Switchyard points it at \
             this request's own body when it is left out"
        ));
    }
    let intake_id = Uuid::now_v7();
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
            return invalid(format!("`{field}` is longer than {MAX_KEY_LEN} bytes"));
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
