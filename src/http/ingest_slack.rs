//! `POST /v1/ingest/slack/{name}`: Slack Events API callbacks. Verified before anything else;
//! translated by the Slack adapter; answered after the ledger commit, well inside Slack's 3 s.
//!
//! Slack retries every non-2xx, so an authenticated but malformed callback is recorded as
//! `invalid_event` and answered 200. The same message delivered as both `message` and
//! `app_mention` carries one `message_key`: the first copy that routes claims it and the other
//! is a `duplicate`, so one message makes at most one run.

use axum::Router;
use axum::extract::{Extension, Path, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use switchyard_core::Outcome;
use switchyard_slack::{SlackIntake, SlackSourceConfig};
use uuid::Uuid;

use super::AppState;
use super::ingest_body::{self, UnverifiedBudget};
use super::intake_answer::{self, Style};
use crate::config::ResolvedSource;
use crate::intake::{Delivery, DeliveryBody, Raw, digest_id};

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/ingest/slack/{name}", post(ingest))
}

async fn ingest(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Extension(budget): Extension<UnverifiedBudget>,
    request: Request,
) -> Response {
    let live = state.live.current();
    let received =
        ingest_body::receive(&budget, &live, "slack", &name, request, slack_source).await;
    let ((config, secret), request) = match received {
        Ok(received) => received,
        Err(refused) => return refused,
    };
    let body = request.body.clone();
    let header = |name: &str| request.headers.get(name).and_then(|v| v.to_str().ok());
    if let Err(error) = switchyard_slack::verify(
        header("x-slack-request-timestamp"),
        header("x-slack-signature"),
        &body,
        secret,
        chrono::Utc::now(),
    ) {
        return unauthorized(&name, &error);
    }
    let retry = header("x-slack-retry-num");
    let intake_id = Uuid::now_v7();
    let mut delivery = match switchyard_slack::normalize(
        &body,
        config,
        &Delivery::raw_ref(intake_id),
    ) {
        Ok(SlackIntake::UrlVerification { challenge }) => {
            tracing::info!(source = %name, "answered Slack's url_verification challenge");
            return (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "text/plain")],
                challenge,
            )
                .into_response();
        }
        Ok(SlackIntake::Event(event)) => {
            let normalized = event.normalized;
            let mut delivery = Delivery::new(
                intake_id,
                name,
                normalized.delivery_id,
                normalized.disposition.into(),
            );
            delivery.message_key = event.message_key;
            delivery
        }
        Ok(SlackIntake::AppRateLimited(notice)) => {
            tracing::warn!(
                source = %name,
                team_id = %notice.team_id,
                tenant_id = %notice.tenant_id,
                minute = %notice.minute_rate_limited,
                "Slack is dropping this team's events for the rest of the minute (app_rate_limited)"
            );
            Delivery::new(
                intake_id,
                name,
                notice.delivery_id,
                DeliveryBody::Ineligible {
                    detail: format!(
                        "app_rate_limited: Slack dropped team {}'s events from {}",
                        notice.team_id, notice.minute_rate_limited
                    ),
                    event: None,
                },
            )
        }
        Err(error) if error.outcome() == Some(Outcome::InvalidEvent) => Delivery::new(
            intake_id,
            name,
            digest_id(&body),
            DeliveryBody::Invalid {
                detail: error.detail(),
            },
        ),
        Err(error) => return unauthorized(&name, &error),
    };
    if let Some(retry) = retry {
        tracing::info!(source = %delivery.source, delivery_id = %delivery.delivery_id, retry, "Slack redelivery");
    }
    delivery.raw = Some(Raw {
        content_type: "application/json".into(),
        bytes: body,
    });
    intake_answer::submit(&state, delivery, Style::Slack).await
}

/// The settings of a Slack source.
pub(super) fn slack_source(source: &ResolvedSource) -> Option<(&SlackSourceConfig, &String)> {
    match source {
        ResolvedSource::Slack { config, secret } => Some((config, secret)),
        _ => None,
    }
}

fn unauthorized(source: &str, error: &switchyard_slack::SlackError) -> Response {
    let detail = error.detail();
    tracing::warn!(
        source,
        detail,
        outcome = "unauthorized_source",
        "Slack delivery refused"
    );
    intake_answer::refuse(Outcome::UnauthorizedSource, detail, Style::Slack)
}
