//! `POST /v1/ingest/cloudevents/{name}`: CloudEvents 1.0 over HTTP (structured and binary
//! mode). Authenticated before parsing, by a Standard Webhooks signature over the raw body or
//! the daemon's API token; translated by the CloudEvents adapter; answered after the commit.
//! Batched mode and requests that are no CloudEvent are 415, recorded nowhere.
//!
//! A signed request is identified by its signed `webhook-id` (`switchyard_cloudevents::identity`):
//! binary mode's `ce-*` headers are outside the signature, so a captured request resent with
//! new ones is a `duplicate`, never a second run.

use axum::extract::{Extension, Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use switchyard_cloudevents::{CloudEventsSourceConfig, Signed};
use switchyard_core::Outcome;
use switchyard_core::standard_webhooks::SigningKey;
use uuid::Uuid;

use super::ingest_body::{self, UnverifiedBudget};
use super::intake_answer::{self, Style};
use super::{ApiError, AppState};
use crate::config::{ResolvedSource, Scope};
use crate::intake::{Answer, Delivery, DeliveryBody, Raw, digest_id};

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/ingest/cloudevents/{name}", post(ingest))
}

/// The settings of a CloudEvents source.
fn cloudevents_source(
    source: &ResolvedSource,
) -> Option<(&CloudEventsSourceConfig, &Option<SigningKey>)> {
    match source {
        ResolvedSource::CloudEvents { config, key } => Some((config, key)),
        _ => None,
    }
}

/// The request's headers as the adapter reads them. The whole map stays in the handler, so
/// intake-wide concerns (trace context) can read it too.
fn header_pairs(headers: &HeaderMap) -> Vec<(&str, &str)> {
    headers
        .iter()
        .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
        .collect()
}

async fn ingest(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Extension(budget): Extension<UnverifiedBudget>,
    request: Request,
) -> Response {
    let live = state.live.current();
    let received = ingest_body::receive(
        &budget,
        &live,
        "cloudevents",
        &name,
        request,
        cloudevents_source,
    )
    .await;
    let ((config, key), request) = match received {
        Ok(received) => received,
        Err(refused) => return refused,
    };
    let (headers, body) = (&request.headers, request.body.clone());
    let pairs = header_pairs(headers);
    let unauthorized = |detail: String| {
        tracing::warn!(source = %name, %detail, outcome = "unauthorized_source", "cloudevents delivery refused");
        intake_answer::refuse(Outcome::UnauthorizedSource, detail, Style::Standard)
    };
    // A token with `events:write` for the source's tenant, or the source's signature; a
    // token that is wrong or lacks the right is refused outright, never retried as a signature.
    // Who sent it, as a resume's actor is bound to: the token, or the signed source.
    let (signed, caller) = match (super::auth::bearer_principal(headers, &live), key) {
        (Some(Some(principal)), _) => {
            if let Err(error) = principal.require(Scope::EventsWrite) {
                return error.into_response();
            }
            if !principal.sees(&config.tenant) {
                return ApiError::Refused {
                    status: StatusCode::FORBIDDEN,
                    error: "tenant_forbidden",
                    detail: format!(
                        "token `{}` may not send events for tenant `{}` (source `{name}`)",
                        principal.name, config.tenant
                    ),
                }
                .into_response();
            }
            (None, principal.name)
        }
        (Some(None), _) => return unauthorized("bad_token: unknown bearer token".into()),
        (None, Some(key)) => {
            let now = chrono::Utc::now().timestamp();
            match switchyard_cloudevents::verify(
                &pairs[..],
                &body,
                key,
                config.timestamp_tolerance,
                now,
            ) {
                Ok(signed) => (Some(signed), format!("source:{name}")),
                Err(error) => return unauthorized(format!("{}: {error}", error.detail())),
            }
        }
        (None, None) => {
            return unauthorized(format!(
                "missing_credentials: cloudevents source `{name}` has no signing secret, so only \
                 requests with a token that has `events:write` for its tenant \
                 (Authorization: Bearer) are accepted"
            ));
        }
    };
    let intake_id = Uuid::now_v7();
    let parsed = switchyard_cloudevents::parse(&pairs[..], &body);
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/octet-stream")
        .to_owned();
    let mut delivery = match parsed {
        Err(error) if error.is_unsupported_media_type() => {
            let mut response = (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                Json(Answer::refused(
                    Outcome::InvalidEvent,
                    format!("{}: {error}", error.detail()),
                )),
            )
                .into_response();
            response.extensions_mut().insert(Outcome::InvalidEvent);
            return response;
        }
        // Unreadable: a signed request is still its message, whatever its headers say.
        Err(error) => Delivery::new(
            intake_id,
            name,
            signed
                .as_ref()
                .map_or_else(|| digest_id(&body), Signed::delivery_id),
            DeliveryBody::Invalid {
                detail: format!("{}: {error}", error.detail()),
            },
        ),
        Ok(event) => {
            // A structured event carries its trace context as extension attributes in the body
            // (binary mode's `ce-traceparent` header was read on the way in).
            if let Some(traceparent) = event.extensions.get("traceparent").and_then(|v| v.as_str())
            {
                let tracestate = event.extensions.get("tracestate").and_then(|v| v.as_str());
                crate::telemetry::adopt(traceparent, tracestate);
            }
            let identity = switchyard_cloudevents::identity(&event, signed.as_ref());
            let body = match switchyard_cloudevents::normalize(
                &event,
                config,
                &Delivery::raw_ref(intake_id),
            ) {
                Ok(normalized) => normalized.disposition.into(),
                Err(error) if error.is_unauthorized() => {
                    return unauthorized(format!("{}: {error}", error.detail()));
                }
                Err(error) => DeliveryBody::Invalid {
                    detail: format!("{}: {error}", error.detail()),
                },
            };
            let mut delivery = Delivery::new(intake_id, name, identity.delivery_id, body);
            delivery.message_key = identity.message_key.map(ingest_body::stored_message_key);
            delivery
        }
    };
    delivery.raw = Some(Raw {
        content_type,
        bytes: body,
    });
    super::waits::resume_or_submit(&state, delivery, &["data"], &caller, Style::Standard).await
}
