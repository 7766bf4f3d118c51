//! The `/v1` API: one module per resource, each ending in `router()`, merged here behind the
//! bearer-token check, and what every handler can reach ([`AppState`]). The channels' ingest
//! endpoints (`edge::routes`) authenticate by signature instead; the composition root
//! (`crate::app`) puts both, and the console, behind the server's limits ([`with_limits`]).
//!
//! Invariant: this layer names no channel and no console page; the edge and the console are
//! built on it, never the reverse.

pub(crate) mod admin;
mod alerts;
pub(crate) mod auth;
pub(crate) mod body_deadline;
mod claims;
mod error;
pub(crate) mod events;
mod health;
pub(crate) mod intake_answer;
mod limits;
mod metrics;
pub(crate) mod openapi;
mod oversize;
pub(crate) mod replays;
mod revisions;
pub(crate) mod runs;
mod schedules;
pub(crate) mod waits;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;

pub use admin::millis_to_rfc3339;
pub use error::ApiError;
pub use events::API_SOURCE;

use crate::config::ServerConfig;
use crate::dispatcher::{TargetHealths, Wake};
use crate::intake::Intake;
use crate::live::LiveConfig;
use crate::source_status::SourceStatuses;
use crate::telemetry::spans::PLAIN_TRACE_HEADERS;

/// What every handler can reach: its parts behind one shared allocation. axum copies the state
/// for every handler and every middleware a request passes; a copy is one reference count, not
/// one per part (BENCHMARKS.md round 23).
#[derive(Debug, Clone)]
pub struct AppState(Arc<AppParts>);

impl AppState {
    pub fn new(parts: AppParts) -> Self {
        Self(Arc::new(parts))
    }
}

impl std::ops::Deref for AppState {
    type Target = AppParts;

    fn deref(&self) -> &AppParts {
        &self.0
    }
}

/// The parts of [`AppState`].
#[derive(Debug)]
pub struct AppParts {
    /// The database, as named operations.
    pub store: switchyard_store::Store,
    /// `/readyz`'s pending counts, read at most once a second.
    pub pending: Arc<health::PendingCache>,
    pub live: LiveConfig,
    pub intake: Intake,
    pub sources: Arc<SourceStatuses>,
    /// Slack Socket Mode connections, for `/readyz`, `/metrics` and the console.
    pub sockets: Arc<crate::socket_status::SocketStatuses>,
    /// Wake-ups for the dispatcher and for pull workers waiting in `POST /v1/claims`.
    pub wake: Arc<Wake>,
    /// Push targets' delivery health, for `/readyz`.
    pub targets: Arc<TargetHealths>,
    /// Open console sessions.
    pub console: Arc<auth::sessions::Sessions>,
    /// Replays started through this daemon.
    pub replays: crate::replay::Replayer,
    /// Notifier health and refused reloads, for `/readyz`, the console and alert rules.
    pub alerts: Arc<crate::alerts::AlertStatus>,
}

/// The `/v1` API behind the bearer-token check, and the health endpoints (which check tokens
/// their own way); the channels' ingest endpoints and the console are merged beside it by the
/// composition root (`crate::app`).
pub fn api(state: &AppState) -> Router<AppState> {
    let guarded = Router::new()
        .merge(
            events::router().route_layer(axum::middleware::from_fn(|request, next| {
                intake_answer::measured(API_SOURCE, PLAIN_TRACE_HEADERS, request, next)
            })),
        )
        .merge(
            waits::resume_router().route_layer(axum::middleware::from_fn(|request, next| {
                intake_answer::measured(API_SOURCE, PLAIN_TRACE_HEADERS, request, next)
            })),
        )
        .merge(metrics::guarded_router())
        .merge(runs::router())
        .merge(waits::router())
        .merge(claims::router())
        .merge(admin::router())
        .merge(revisions::router())
        .merge(schedules::router())
        .merge(replays::router())
        .merge(alerts::router())
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_api_token,
        ));
    guarded.merge(health::router())
}

/// `app` (the whole surface) behind the server's limits: a declared body over `body_limit` is
/// refused before it reaches a handler (`oversize`), every body must arrive whole within
/// `body_read_timeout` (`body_deadline`), and a client address failing tokens repeatedly is
/// throttled (`auth::throttle`), except on the endpoints `signed_only` names, whose senders
/// authenticate by signature alone.
pub fn with_limits(
    app: Router<AppState>,
    state: AppState,
    server: &ServerConfig,
    signed_only: fn(&str) -> bool,
) -> Router {
    let limits = Arc::new(limits::Limits {
        throttle: auth::FailureThrottle::new(state.live.clone(), signed_only),
        body_limit: server.body_limit,
        body_read_timeout: server.body_read_timeout,
    });
    app.layer(DefaultBodyLimit::max(server.body_limit))
        .layer(axum::middleware::from_fn_with_state(
            limits,
            limits::enforce,
        ))
        .with_state(state)
}

/// Only `GET /metrics`, without a token: what `server.metrics_listen` serves.
pub fn metrics_only(state: AppState) -> Router {
    metrics::router().with_state(state)
}
