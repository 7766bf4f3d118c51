//! `GET /metrics`: the Prometheus text exposition (OpenMetrics when the scraper asks for it,
//! else the classic format), behind the API token. Values that live in
//! the database or other components (pending dispatches and their age, writer queues, mailbox
//! pollers, the config revision) are read at scrape time; the pending figures by bounded probes
//! (`switchyard_store::outbox::pending_of_targets`: counted up to 10,000 per target, the age from
//! the first row of `dispatches_due`), so a scrape costs the same at any backlog.

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use switchyard_store::now_millis;

use super::{ApiError, AppState};
use crate::metrics::{
    AuthFailureLabels, RevisionLabel, SourceLabel, TargetLabel, WriterLabel, metrics,
};

/// `/metrics` without a token: what `server.metrics_listen` serves.
pub fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(scrape))
}

/// `/metrics` on the main listener: the `metrics` scope (or `read`, which covers every read),
/// and no tenant limit (the figures cover every tenant).
pub fn guarded_router() -> Router<AppState> {
    Router::new().route("/metrics", get(scrape_guarded))
}

#[utoipa::path(get, path = "/metrics", tag = "meta", responses((status = 200, description = "The Prometheus text exposition (OpenMetrics when asked for)", body = String, content_type = "text/plain"), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn scrape_guarded(
    state: State<AppState>,
    principal: super::auth::Principal,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    use crate::config::Scope;
    if !principal.has(Scope::Read) {
        principal.require(Scope::Metrics)?;
    }
    principal.require_every_tenant("/metrics")?;
    scrape(state, headers).await
}

async fn scrape(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    let metrics = metrics();
    let now = now_millis();
    let live = state.live.current();
    // Bounded probes: at most `PENDING_COUNT_CAP` per target, never a count of the backlog.
    let names: Vec<&str> = live.settings.targets.iter().map(|t| t.name()).collect();
    let pending = state.store.pending_of_targets(&names).await?;
    for target in &live.settings.targets {
        let label = TargetLabel {
            target: target.name().to_owned(),
        };
        let (count, oldest) = pending
            .iter()
            .find(|p| p.target == target.name())
            .map_or((0, now), |p| (p.count, p.oldest.unwrap_or(now)));
        metrics.pending_dispatches.get_or_create(&label).set(count);
        metrics
            .oldest_pending_seconds
            .get_or_create(&label)
            .set((now - oldest).max(0) / 1000);
    }
    for (index, writer) in state.intake.writers().iter().enumerate() {
        metrics
            .writer_queue_depth
            .get_or_create(&WriterLabel {
                writer: index.to_string(),
            })
            .set(i64::try_from(writer.queue_depth).unwrap_or(i64::MAX));
    }
    metrics.poller_auth_failing.clear();
    for (source, status) in state.sources.snapshot() {
        if let Some(reason) = &status.auth_failure {
            metrics
                .poller_auth_failing
                .get_or_create(&AuthFailureLabels {
                    source: source.clone(),
                    reason: reason.clone(),
                })
                .set(1);
        }
        if let Some(started) = &status.started {
            metrics
                .mailbox_left_behind
                .get_or_create(&SourceLabel {
                    source: source.clone(),
                })
                .set(i64::from(started.left_behind));
        }
        let label = SourceLabel { source };
        metrics
            .poller_up
            .get_or_create(&label)
            .set(i64::from(status.connected));
        metrics
            .poller_last_success
            .get_or_create(&label)
            .set(status.last_successful_poll.map_or(0, |at| at.timestamp()));
        metrics
            .poller_failures
            .get_or_create(&label)
            .set(i64::from(status.consecutive_failures));
    }
    metrics.socket_open.clear();
    for (source, status) in state.sockets.snapshot() {
        let label = SourceLabel { source };
        metrics
            .socket_open
            .get_or_create(&label)
            .set(i64::try_from(status.open()).unwrap_or(i64::MAX));
        metrics
            .socket_last_envelope
            .get_or_create(&label)
            .set(status.last_envelope_at.map_or(0, |at| at / 1000));
    }
    metrics.config_revision.clear();
    metrics
        .config_revision
        .get_or_create(&RevisionLabel {
            revision: live.revision().to_owned(),
        })
        .set(1);
    let openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|accept| accept.to_str().ok())
        .is_some_and(|accept| accept.contains("application/openmetrics-text"));
    Ok(if openmetrics {
        (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            metrics.encode(),
        )
            .into_response()
    } else {
        (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            metrics.encode_classic(),
        )
            .into_response()
    })
}
