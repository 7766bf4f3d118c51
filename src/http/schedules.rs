//! `/v1/schedules`: each schedule of the revision in force that the caller's tenants may see,
//! with its next fire and its latest recorded fire (outcome and run).

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use super::auth::Principal;
use super::{ApiError, AppState};
use crate::config::Scope;
use crate::schedule_status::statuses;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/schedules", get(list))
}

#[utoipa::path(get, path = "/v1/schedules", operation_id = "list_schedules", tag = "config", responses((status = 200, description = "The schedules and their next firings", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn list(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::Read)?;
    let live = state.live.current();
    let shown = statuses(
        &state.store,
        &live.settings.loaded.config.schedules,
        |tenant| principal.sees(tenant),
        chrono::Utc::now(),
    )
    .await?;
    Ok(Json(json!({
        "config_revision": live.revision(),
        "schedules": shown,
    })))
}
