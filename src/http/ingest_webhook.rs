//! `POST /v1/ingest/webhook/{name}`: Zendesk-shaped ticket webhooks. Verified before parsing;
//! translated by the webhook adapter; answered after the ledger commit.

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use switchyard_core::Outcome;
use switchyard_webhook::INVOCATION_ID_HEADER;
use uuid::Uuid;

use super::intake_answer::{self, Style};
use super::{ApiError, AppState};
use crate::config::ResolvedSource;
use crate::intake::{Delivery, DeliveryBody, Raw, digest_id};

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/ingest/webhook/{name}", post(ingest))
}

async fn ingest(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let live = state.live.current();
    let Some(ResolvedSource::Webhook { config, secret }) = live.source("webhook", &name) else {
        return ApiError::NotFound(format!("no webhook source named `{name}`")).into_response();
    };
    let body = match intake_answer::body(body, &state) {
        Ok(body) => body,
        Err(error) => return error.into_response(),
    };
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(secret) = secret {
        let verified = switchyard_webhook::verify(
            header,
            &body,
            secret.as_bytes(),
            config.timestamp_tolerance,
            chrono::Utc::now(),
        );
        if let Err(error) = verified {
            tracing::warn!(source = %name, detail = error.detail(), %error, outcome = "unauthorized_source", "webhook delivery refused");
            return intake_answer::refuse(
                Outcome::UnauthorizedSource,
                format!("{}: {error}", error.detail()),
                Style::Standard,
            );
        }
    }
    let intake_id = Uuid::now_v7();
    let invocation_id = header(INVOCATION_ID_HEADER);
    let mut delivery = match switchyard_webhook::normalize(
        &body,
        invocation_id,
        config,
        &Delivery::raw_ref(intake_id),
    ) {
        Ok(normalized) => Delivery::new(
            intake_id,
            name,
            normalized.delivery_id,
            normalized.disposition.into(),
        ),
        Err(error) if error.is_unauthorized() => {
            tracing::warn!(source = %name, detail = error.detail(), %error, outcome = "unauthorized_source", "webhook delivery refused");
            return intake_answer::refuse(
                Outcome::UnauthorizedSource,
                format!("{}: {error}", error.detail()),
                Style::Standard,
            );
        }
        Err(error) => Delivery::new(
            intake_id,
            name,
            invocation_id.map_or_else(|| digest_id(&body), str::to_owned),
            DeliveryBody::Invalid {
                detail: format!("{}: {error}", error.detail()),
            },
        ),
    };
    delivery.raw = Some(Raw {
        content_type: "application/json".into(),
        bytes: body,
    });
    intake_answer::submit(&state, delivery, Style::Webhook).await
}
