//! `/v1/alerts`: alerts newest first (`read`), and acknowledging or silencing one (`admin`).
//! A tenant-limited caller sees and changes only its tenants' alerts; alerts about the daemon
//! itself (no tenant) are for callers who see every tenant. Unknown or unseen ids are 404.
//! A listed alert says which replicas observe its fault (`observed_by`), for the kinds each
//! replica judges from its own health.

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use switchyard_store::alerts::{AlertChangeError, AlertFilter, FIRING, RESOLVED};
use switchyard_store::entities::alert;
use switchyard_store::now_millis;

use super::admin::{millis_to_rfc3339, parse_limit, query};
use super::auth::Principal;
use super::{ApiError, AppState};
use crate::config::Scope;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/alerts", get(list))
        .route("/v1/alerts/{id}/ack", post(acknowledge))
        .route("/v1/alerts/{id}/silence", post(silence))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct AlertsQuery {
    /// `firing` or `resolved`.
    state: Option<String>,
    limit: Option<String>,
}

/// An alert as the API shows it.
pub fn view(alert: &alert::Model) -> Value {
    let now = now_millis();
    json!({
        "id": alert.id,
        "rule": alert.rule,
        "kind": alert.kind,
        "scope": alert.scope,
        "tenant_id": alert.tenant_id,
        "state": alert.state,
        "episode": alert.episode,
        "summary": alert.summary,
        "numbers": serde_json::from_str::<Value>(&alert.numbers).unwrap_or(Value::Null),
        "since": millis_to_rfc3339(alert.since),
        "fired_at": millis_to_rfc3339(alert.fired_at),
        "resolved_at": alert.resolved_at.map(millis_to_rfc3339),
        "acknowledged_at": alert.acknowledged_at.map(millis_to_rfc3339),
        "acknowledged_by": alert.acknowledged_by,
        "silenced_until": alert.silenced_until.filter(|until| *until > now).map(millis_to_rfc3339),
        "silenced_by": alert.silenced_by.as_ref().filter(|_| alert.silenced_until.is_some_and(|u| u > now)),
    })
}

#[utoipa::path(get, path = "/v1/alerts", operation_id = "list_alerts", tag = "alerts", params(AlertsQuery), responses((status = 200, description = "The alerts", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn list(
    State(state): State<AppState>,
    principal: Principal,
    q: Result<Query<AlertsQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::Read)?;
    let q = query(q)?;
    if let Some(word) = q.state.as_deref()
        && word != FIRING
        && word != RESOLVED
    {
        return Err(ApiError::BadRequest(format!(
            "`state` must be `firing` or `resolved`, not `{word}`"
        )));
    }
    let filter = AlertFilter {
        state: q.state,
        tenants: principal.tenant_filter(None),
        limit: parse_limit(q.limit.as_deref())?,
    };
    let alerts = state.store.list_alerts(&filter).await?;
    let ids: Vec<&str> = alerts.iter().map(|a| a.id.as_str()).collect();
    let mut observers = state.store.alert_observers(&ids).await?;
    Ok(Json(json!({
        "alerts": alerts.iter().map(|alert| {
            let mut shown = view(alert);
            // Which replicas saw the fault of an alert fed by each replica's own health, and
            // when each last did (empty for alerts judged from the shared database).
            shown["observed_by"] = observers
                .remove(&alert.id)
                .unwrap_or_default()
                .into_iter()
                .map(|(replica, at)| json!({"replica": replica, "observed_at": millis_to_rfc3339(at)}))
                .collect();
            shown
        }).collect::<Vec<_>>(),
    })))
}

fn changed(
    result: Result<alert::Model, AlertChangeError>,
    id: &str,
) -> Result<Json<Value>, ApiError> {
    match result {
        Ok(alert) => Ok(Json(view(&alert))),
        Err(AlertChangeError::NotFound) => Err(ApiError::NotFound(format!("no alert `{id}`"))),
        Err(AlertChangeError::Db(error)) => Err(error.into()),
    }
}

#[utoipa::path(post, path = "/v1/alerts/{id}/ack", operation_id = "acknowledge_alert", tag = "alerts", params(("id" = String, Path, description = "The id")), responses((status = 200, description = "The alert, acknowledged", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn acknowledge(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::Admin)?;
    let tenants = principal.tenant_filter(None);
    let result = state
        .store
        .acknowledge_alert(&id, tenants.as_deref(), &principal.name, now_millis())
        .await;
    changed(result, &id)
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct SilenceBody {
    /// How long, e.g. `2h` (`0s` lifts a silence).
    #[serde(rename = "for")]
    duration: String,
}

/// The longest silence: past it, an alert must be looked at again.
const MAX_SILENCE: std::time::Duration = std::time::Duration::from_secs(30 * 86_400);

#[utoipa::path(post, path = "/v1/alerts/{id}/silence", operation_id = "silence_alert", tag = "alerts", params(("id" = String, Path, description = "The id")), request_body = SilenceBody, responses((status = 200, description = "The alert, silenced", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn silence(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::Admin)?;
    if !super::error::declares_json(&headers) {
        return Err(ApiError::unsupported_media_type());
    }
    let body: SilenceBody = serde_json::from_slice(&body).map_err(|error| {
        ApiError::BadRequest(format!("the body must be {{\"for\": \"2h\"}}: {error}"))
    })?;
    let duration = humantime::parse_duration(&body.duration).map_err(|error| {
        ApiError::BadRequest(format!(
            "`for` `{}` is not a duration: {error}",
            body.duration
        ))
    })?;
    if duration > MAX_SILENCE {
        return Err(ApiError::BadRequest("`for` may be at most 30 days".into()));
    }
    let now = now_millis();
    let tenants = principal.tenant_filter(None);
    let result = state
        .store
        .silence_alert(
            &id,
            tenants.as_deref(),
            now + duration.as_millis() as i64,
            &principal.name,
            now,
        )
        .await;
    changed(result, &id)
}
