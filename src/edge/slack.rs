//! The Slack channel: Events API callbacks on `POST /v1/ingest/slack/{name}`, and button clicks
//! that resume waits on `POST /v1/ingest/slack/{name}/interactivity` (`interactivity`). Verified
//! before anything else; translated by the Slack adapter; answered after the ledger commit, well
//! inside Slack's 3 s.
//!
//! Slack retries every non-2xx, so an authenticated but malformed callback is recorded as
//! `invalid_event` and answered 200. The same message delivered as both `message` and
//! `app_mention` carries one `message_key`: the first copy that routes claims it and the other
//! is a `duplicate`, so one message makes at most one run.

mod interactivity;

use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use switchyard_core::{Channel as EventChannel, Outcome};
use switchyard_slack::{AppRateLimited, SlackError, SlackIntake, SlackSourceConfig};
use uuid::Uuid;

use super::body::Unverified;
use super::ingest::{Endpoint, Step, Submit, serve};
use super::{Again, Channel, DryRun, DryRunResult, Stored};
use crate::config::{EnvLookup, ResolvedSource, SourceConfig, SourceSettings};
use crate::http::AppState;
use crate::http::intake_answer::{self, Style};
use crate::intake::{Delivery, DeliveryBody, digest_id};
use crate::live::Live;

const KIND: &str = "slack";

/// The Slack channel's registration.
pub struct Slack;

impl Channel for Slack {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn routes(&self) -> Option<Router<AppState>> {
        Some(
            Router::new()
                .route("/v1/ingest/slack/{name}", post(serve::<Slack>))
                .route(
                    "/v1/ingest/slack/{name}/interactivity",
                    post(serve::<interactivity::Interactivity>),
                ),
        )
    }

    fn signed_only(&self) -> bool {
        true
    }

    /// The Events API endpoint's (a button click's form body is no Events API request).
    fn dry_run(&self, source: &ResolvedSource, run: &DryRun<'_>) -> Option<DryRunResult> {
        super::ingest::dry_run::<Slack>(source, run.name, run.request, run.live, run.skip_verify)
    }

    fn renormalize(&self, source: &SourceConfig, stored: &Stored<'_>) -> Option<Again> {
        let SourceConfig::Slack(config) = source else {
            return None;
        };
        Some(
            match switchyard_slack::normalize(stored.body, config, stored.raw_ref) {
                Ok(SlackIntake::Event(event)) => Again::Normalized {
                    body: event.normalized.disposition.into(),
                    message_key: event.message_key,
                },
                Ok(SlackIntake::AppRateLimited(notice)) => Again::of(rate_limited(&notice)),
                Ok(SlackIntake::UrlVerification { .. }) => Again::of(DeliveryBody::Invalid {
                    detail: "url_verification is answered, never recorded".into(),
                }),
                Err(error) if error.outcome() == Some(Outcome::InvalidEvent) => {
                    Again::of(DeliveryBody::Invalid {
                        detail: error.detail(),
                    })
                }
                Err(error) => Again::unauthorized(error.detail()),
            },
        )
    }
}

impl SourceSettings for SlackSourceConfig {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn tenants(&self) -> Vec<&str> {
        self.teams.values().map(String::as_str).collect()
    }

    fn validate(&self) -> Result<(), String> {
        SlackSourceConfig::validate(self).map_err(|e| e.to_string())
    }

    fn resolve(&self, env: EnvLookup<'_>) -> Result<ResolvedSource, String> {
        Ok(ResolvedSource::Slack {
            secret: self.secret(env, &self.signing_secret_env)?,
            config: self.clone(),
        })
    }

    fn signing_secret_env(&self) -> Option<&str> {
        Some(self.signing_secret_env.as_str())
    }

    fn retry_window(&self) -> Option<(Duration, &'static str)> {
        Some((
            Duration::from_secs(5 * 60),
            "Slack retries for about 5 minutes",
        ))
    }

    fn produces(&self, tenant: &str, channel: EventChannel, event_type: &str) -> bool {
        channel == EventChannel::Slack
            && self.teams.values().any(|t| t == tenant)
            && matches!(
                event_type,
                "message"
                    | "urgent_message"
                    | "app_mention"
                    | "message_changed"
                    | "message_deleted"
            )
    }
}

/// Slack's settings of a source, for both of its endpoints.
fn slack_source(source: &ResolvedSource) -> Option<(&SlackSourceConfig, &str)> {
    match source {
        ResolvedSource::Slack { config, secret } => Some((config, secret)),
        _ => None,
    }
}

/// The v0 signature over the raw body, within Slack's 300 s window.
fn verify(secret: &str, request: &Unverified) -> Result<(), SlackError> {
    let header = |name: &str| request.headers.get(name).and_then(|v| v.to_str().ok());
    switchyard_slack::verify(
        header("x-slack-request-timestamp"),
        header("x-slack-signature"),
        &request.body,
        secret,
        chrono::Utc::now(),
    )
}

/// The refusal of an unauthenticated request, logged as `what` ("Slack delivery refused").
fn unauthorized(source: &str, error: &SlackError, what: &str) -> Response {
    let detail = error.detail();
    tracing::warn!(source, detail, outcome = "unauthorized_source", "{what}");
    intake_answer::refuse(Outcome::UnauthorizedSource, detail, Style::Slack)
}

/// What an `app_rate_limited` notice is recorded as.
fn rate_limited(notice: &AppRateLimited) -> DeliveryBody {
    DeliveryBody::Ineligible {
        detail: format!(
            "app_rate_limited: Slack dropped team {}'s events from {}",
            notice.team_id, notice.minute_rate_limited
        ),
        event: None,
    }
}

/// The Events API endpoint.
impl Endpoint for Slack {
    const KIND: &'static str = KIND;
    type Source<'l> = (&'l SlackSourceConfig, &'l str);
    type Verified<'r> = ();

    fn unverified(_request: &Unverified) -> Option<()> {
        Some(())
    }

    fn source(source: &ResolvedSource) -> Option<Self::Source<'_>> {
        slack_source(source)
    }

    fn verify(
        (_, secret): Self::Source<'_>,
        name: &str,
        request: &Unverified,
        _live: &Live,
    ) -> Step<()> {
        verify(secret, request)
            .map_err(|error| unauthorized(name, &error, "Slack delivery refused"))
    }

    fn normalize(
        (config, _): Self::Source<'_>,
        (): (),
        name: String,
        intake_id: Uuid,
        request: &Unverified,
    ) -> Step<(Delivery, Submit)> {
        let body = &request.body;
        let retry = request
            .headers
            .get("x-slack-retry-num")
            .and_then(|v| v.to_str().ok());
        let delivery = match switchyard_slack::normalize(
            body,
            config,
            &Delivery::raw_ref(intake_id),
        ) {
            Ok(SlackIntake::UrlVerification { challenge }) => {
                tracing::info!(source = %name, "answered Slack's url_verification challenge");
                return Err((
                    StatusCode::OK,
                    [(header::CONTENT_TYPE, "text/plain")],
                    challenge,
                )
                    .into_response());
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
                let body = rate_limited(&notice);
                Delivery::new(intake_id, name, notice.delivery_id, body)
            }
            Err(error) if error.outcome() == Some(Outcome::InvalidEvent) => Delivery::new(
                intake_id,
                name,
                digest_id(body),
                DeliveryBody::Invalid {
                    detail: error.detail(),
                },
            ),
            Err(error) => return Err(unauthorized(&name, &error, "Slack delivery refused")),
        };
        if let Some(retry) = retry {
            tracing::info!(source = %delivery.source, delivery_id = %delivery.delivery_id, retry, "Slack redelivery");
        }
        Ok((delivery, Submit::Intake(Style::Slack)))
    }
}
