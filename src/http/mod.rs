//! The HTTP server: one module per resource, each ending in `router()`, merged here behind the
//! bearer-token check (ingest endpoints authenticate by signature instead).

pub(crate) mod admin;
mod auth;
mod claims;
mod error;
mod events;
mod health;
mod ingest_slack;
mod ingest_webhook;
mod intake_answer;
mod runs;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use sea_orm::DatabaseConnection;

pub use admin::millis_to_rfc3339;
pub use error::ApiError;

use crate::dispatcher::{TargetHealths, Wake};
use crate::intake::Intake;
use crate::live::LiveConfig;
use crate::sources::SourceStatuses;

/// What every handler can reach.
#[derive(Debug, Clone)]
pub struct AppState {
    pub db: DatabaseConnection,
    pub live: LiveConfig,
    pub intake: Intake,
    pub sources: Arc<SourceStatuses>,
    /// Wake-ups for the dispatcher and for pull workers waiting in `POST /v1/claims`.
    pub wake: Arc<Wake>,
    /// Push targets' delivery health, for `/readyz`.
    pub targets: Arc<TargetHealths>,
}

/// The whole HTTP surface.
pub fn router(state: AppState, body_limit: usize) -> Router {
    let admin = Router::new()
        .merge(events::router())
        .merge(runs::router())
        .merge(claims::router())
        .merge(admin::router())
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_api_token,
        ));
    Router::new()
        .merge(admin)
        .merge(ingest_webhook::router())
        .merge(ingest_slack::router())
        .merge(health::router())
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn(move |request, next| {
            refuse_declared_oversize(request, next, body_limit)
        }))
        .with_state(state)
}

/// Answers 413 before reading a byte of a body whose declared `Content-Length` is over the
/// limit (the body limit alone would read up to the limit first).
async fn refuse_declared_oversize(
    request: axum::extract::Request,
    next: axum::middleware::Next,
    limit: usize,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let declared = request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    match declared {
        Some(length) if length > limit as u64 => ApiError::TooLarge { limit }.into_response(),
        _ => next.run(request).await,
    }
}
