//! `POST /v1/ingest/webhook/{name}`: Zendesk-shaped ticket webhooks. Verified before parsing;
//! translated by the webhook adapter; answered after the ledger commit.
//!
//! A signed trigger delivery is identified by what Zendesk signed, never by the unsigned
//! `X-Zendesk-Webhook-Invocation-Id`: a captured request resent with a new invocation id is a
//! `duplicate`. The invocation is recorded as the delivery's message key, so a retry Zendesk
//! signed afresh is a `duplicate` of a first copy that routed (`switchyard_webhook::RequestIds`).

use axum::Router;
use axum::extract::{Extension, Path, Request, State};
use axum::response::Response;
use axum::routing::post;
use switchyard_core::Outcome;
use switchyard_webhook::{INVOCATION_ID_HEADER, RequestIds, WebhookSourceConfig};
use uuid::Uuid;

use super::AppState;
use super::ingest_body::{self, UnverifiedBudget};
use super::intake_answer::{self, Style};
use crate::config::ResolvedSource;
use crate::intake::{Delivery, DeliveryBody, Raw};

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/ingest/webhook/{name}", post(ingest))
}

async fn ingest(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Extension(budget): Extension<UnverifiedBudget>,
    request: Request,
) -> Response {
    let live = state.live.current();
    let received =
        ingest_body::receive(&budget, &live, "webhook", &name, request, webhook_source).await;
    let ((config, secret), request) = match received {
        Ok(received) => received,
        Err(refused) => return refused,
    };
    let body = &request.body;
    let header = |name: &str| request.headers.get(name).and_then(|v| v.to_str().ok());
    let signed = match secret {
        Some(secret) => match switchyard_webhook::verify(
            header,
            body,
            secret.as_bytes(),
            config.timestamp_tolerance,
            chrono::Utc::now(),
        ) {
            Ok(signed) => Some(signed),
            Err(error) => {
                tracing::warn!(source = %name, detail = error.detail(), %error, outcome = "unauthorized_source", "webhook delivery refused");
                return intake_answer::refuse(
                    Outcome::UnauthorizedSource,
                    format!("{}: {error}", error.detail()),
                    Style::Standard,
                );
            }
        },
        None => None,
    };
    let ids = RequestIds {
        signed: signed.as_ref(),
        invocation_id: header(INVOCATION_ID_HEADER),
    };
    let intake_id = Uuid::now_v7();
    let mut delivery = match switchyard_webhook::normalize(
        body,
        ids,
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
            ids.invalid_delivery_id(body),
            DeliveryBody::Invalid {
                detail: format!("{}: {error}", error.detail()),
            },
        ),
    };
    delivery.message_key = ids.retry_key().map(ingest_body::stored_message_key);
    delivery.raw = Some(Raw {
        content_type: "application/json".into(),
        bytes: request.body.clone(),
    });
    intake_answer::submit(&state, delivery, Style::Webhook).await
}

/// The settings of a webhook source.
fn webhook_source(source: &ResolvedSource) -> Option<(&WebhookSourceConfig, &Option<String>)> {
    match source {
        ResolvedSource::Webhook { config, secret } => Some((config, secret)),
        _ => None,
    }
}
