//! `GET /healthz` (the process is up) and `GET /readyz` (the database answers and no mailbox is
//! failing repeatedly). Neither needs a token, so load balancers can call them.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use super::AppState;
use crate::store;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    let database = match store::ping(&state.db).await {
        Ok(()) => json!({"ok": true}),
        Err(error) => json!({"ok": false, "error": error.to_string()}),
    };
    let sources = state.sources.snapshot();
    let unhealthy = state.sources.unhealthy();
    let ready = database["ok"] == json!(true) && unhealthy.is_empty();
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(json!({
            "ready": ready,
            "config_revision": state.live.current().revision(),
            "database": database,
            "sources": sources,
            "unhealthy_sources": unhealthy.into_iter().map(|(name, _)| name).collect::<Vec<_>>(),
        })),
    )
}
