//! `POST /v1/ingest/cloudevents/{name}`: CloudEvents 1.0 over HTTP (structured and binary
//! mode). Authenticated before parsing, by a Standard Webhooks signature over the raw body or
//! the daemon's API token; translated by the CloudEvents adapter; answered after the commit.
//! Batched mode and requests that are no CloudEvent are 415, recorded nowhere.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use switchyard_core::Outcome;
use uuid::Uuid;

use super::intake_answer::{self, Style};
use super::{ApiError, AppState};
use crate::config::{ResolvedSource, Scope};
use crate::intake::{Answer, Delivery, DeliveryBody, Raw, digest_id};

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/ingest/cloudevents/{name}", post(ingest))
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
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let live = state.live.current();
    let Some(ResolvedSource::CloudEvents { config, key }) = live.source("cloudevents", &name)
    else {
        return ApiError::NotFound(format!("no cloudevents source named `{name}`")).into_response();
    };
    let body = match intake_answer::body(body, &state) {
        Ok(body) => body,
        Err(error) => return error.into_response(),
    };
    let pairs = header_pairs(&headers);
    let unauthorized = |detail: String| {
        tracing::warn!(source = %name, %detail, outcome = "unauthorized_source", "cloudevents delivery refused");
        intake_answer::refuse(Outcome::UnauthorizedSource, detail, Style::Standard)
    };
    // A token with `events:write` for the source's tenant, or the source's signature; a
    // token that is wrong or lacks the right is refused outright, never retried as a signature.
    // Who sent it, as a resume's actor is bound to: the token, or the signed source.
    let caller = match (super::auth::bearer_principal(&headers, &live), key) {
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
            principal.name
        }
        (Some(None), _) => return unauthorized("bad_token: unknown bearer token".into()),
        (None, Some(key)) => {
            let now = chrono::Utc::now().timestamp();
            if let Err(error) = switchyard_cloudevents::verify(
                &pairs[..],
                &body,
                key,
                config.timestamp_tolerance,
                now,
            ) {
                return unauthorized(format!("{}: {error}", error.detail()));
            }
            format!("source:{name}")
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
        Err(error) => Delivery::new(
            intake_id,
            name,
            digest_id(&body),
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
            match switchyard_cloudevents::normalize(&event, config, &Delivery::raw_ref(intake_id)) {
                Ok(normalized) => Delivery::new(
                    intake_id,
                    name,
                    normalized.delivery_id,
                    normalized.disposition.into(),
                ),
                Err(error) if error.is_unauthorized() => {
                    return unauthorized(format!("{}: {error}", error.detail()));
                }
                Err(error) => Delivery::new(
                    intake_id,
                    name,
                    switchyard_cloudevents::delivery_id(&event.source, &event.id),
                    DeliveryBody::Invalid {
                        detail: format!("{}: {error}", error.detail()),
                    },
                ),
            }
        }
    };
    delivery.raw = Some(Raw {
        content_type,
        bytes: body,
    });
    super::waits::resume_or_submit(&state, delivery, &["data"], &caller, Style::Standard).await
}
