//! Shared by the intake endpoints: reading a bounded body, submitting a delivery, and turning
//! its [`Answer`] into the HTTP status DESIGN.md section 4 gives each outcome.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use switchyard_core::Outcome;

use super::{ApiError, AppState};
use crate::intake::{Answer, Delivery, StoreUnavailable};

/// How a sender wants outcomes mapped to statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `invalid_event` is 400.
    Standard,
    /// Slack retries every non-2xx and a retry cannot fix a malformed body: `invalid_event` is 200.
    /// A 429 makes Slack disable the app: `rate_limited` is 200 (recorded, listed for replay).
    Slack,
    /// Zendesk-shaped webhooks: `invalid_event` is 400, but a 429 trips Zendesk's circuit
    /// breaker, so `rate_limited` is 200 (recorded, listed for replay).
    Webhook,
}

pub fn status_of(outcome: Outcome, style: Style) -> StatusCode {
    match outcome {
        Outcome::InvalidEvent if style == Style::Slack => StatusCode::OK,
        Outcome::InvalidEvent => StatusCode::BAD_REQUEST,
        Outcome::UnauthorizedSource => StatusCode::UNAUTHORIZED,
        Outcome::RateLimited if style != Style::Standard => StatusCode::OK,
        Outcome::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        Outcome::DeadLettered => StatusCode::INTERNAL_SERVER_ERROR,
        Outcome::Routed
        | Outcome::NoTriggerMatch
        | Outcome::EntityLocked
        | Outcome::Duplicate
        | Outcome::Ineligible
        | Outcome::Coalesced
        | Outcome::AuthorityUnavailable
        | Outcome::Resumed
        | Outcome::NoWaitMatch
        | Outcome::WaitExpired
        | Outcome::ReapprovalRequired => StatusCode::OK,
    }
}

/// The answer as a response. A duplicate answers with its first copy's status, so a sender
/// that retries a refused delivery is refused the same way again.
pub fn respond(answer: Answer, style: Style) -> Response {
    let decided = match (answer.outcome, answer.first_outcome) {
        (Outcome::Duplicate, Some(first)) => first,
        (outcome, _) => outcome,
    };
    let outcome = answer.outcome;
    let ids = crate::telemetry::enabled().then(|| crate::telemetry::spans::AnswerIds {
        intake_id: answer.intake_id.clone(),
        run_id: answer.run_id.clone(),
    });
    let status = status_of(decided, style);
    let retry_after = answer.retry_after;
    let mut response = (status, Json(answer)).into_response();
    if status == StatusCode::TOO_MANY_REQUESTS {
        let seconds = retry_after.unwrap_or(1).max(1);
        response.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from(seconds),
        );
    }
    response.extensions_mut().insert(outcome);
    if let Some(ids) = ids {
        response.extensions_mut().insert(ids);
    }
    response
}

/// Counts every answer of an intake endpoint of `source_kind` (its outcome, or a 503) and
/// how long it took; reads the delivery's trace context (from the headers `trace_headers`
/// prefix) and, with tracing on, wraps it in its `intake.delivery` span
/// (`telemetry::traced_intake`).
pub async fn measured(
    source_kind: &'static str,
    trace_headers: &'static [&'static str],
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let started = std::time::Instant::now();
    // `/v1/ingest/<kind>/<source>`: the answer counts toward that source's sender.
    let source = request
        .uri()
        .path()
        .strip_prefix("/v1/ingest/")
        .and_then(|rest| rest.split('/').nth(1))
        .map(str::to_owned);
    let response = crate::telemetry::traced_intake(source_kind, trace_headers, request, next).await;
    if let Some(source) = source {
        crate::alerts::answers::record(
            &source,
            response.status().is_success(),
            started.elapsed(),
            switchyard_store::now_millis(),
        );
    }
    let outcome = response.extensions().get::<Outcome>().copied();
    if outcome.is_some() || response.status() == StatusCode::SERVICE_UNAVAILABLE {
        crate::metrics::metrics().delivery(source_kind, outcome, started.elapsed());
    }
    response
}

/// A refusal decided before the store (bad signature, malformed request): nothing is recorded.
pub fn refuse(outcome: Outcome, detail: impl Into<String>, style: Style) -> Response {
    respond(Answer::refused(outcome, detail), style)
}

/// Submits the delivery and answers once it is committed: 503 if the store refused it or did
/// not commit within `server.intake_timeout`. A sender that goes away (or times out) once its
/// delivery is queued does not stop it, and its decision is still logged (`Intake::submit`), so
/// the submission needs no task of its own (a spawn per answer cost a task, a wake-up of
/// another worker and a join: BENCHMARKS.md round 23).
pub async fn submit(state: &AppState, delivery: Delivery, style: Style) -> Response {
    let timeout = state
        .live
        .current()
        .settings
        .loaded
        .config
        .server
        .intake_timeout;
    match tokio::time::timeout(timeout, state.intake.submit(delivery)).await {
        Ok(Ok(answer)) => respond(answer, style),
        Ok(Err(unavailable)) => ApiError::from(unavailable).into_response(),
        Err(_) => ApiError::from(StoreUnavailable(format!(
            "not committed within {} (server.intake_timeout)",
            humantime::format_duration(timeout)
        )))
        .into_response(),
    }
}

/// The request body read by axum's `Bytes` extractor (`/v1/events`, `/v1/waits/resume`), or 413
/// when it is over the configured limit. A body cut off at its deadline is answered 408 by
/// `body_deadline`, whatever this makes of it. The signed ingest endpoints read theirs through
/// `edge::body` instead, which reserves budget first.
pub fn body(result: Result<Bytes, BytesRejection>, state: &AppState) -> Result<Bytes, ApiError> {
    result.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge {
                limit: state
                    .live
                    .current()
                    .settings
                    .loaded
                    .config
                    .server
                    .body_limit,
            }
        } else {
            ApiError::from(rejection)
        }
    })
}
