//! The read side of the admin API: the intake ledger, raw deliveries, held locks, the live
//! workflow index and the sources' status.

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::Response;
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use switchyard_core::Outcome;
use switchyard_store::now_millis;

use super::auth::Principal;
use super::{ApiError, AppState};
use crate::config::Scope;
use crate::store::entities::intake;
use crate::store::ledger;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/intake", get(list_intake))
        .route("/v1/raw/{id}", get(raw))
        .route("/v1/locks", get(locks))
        .route("/v1/workflows", get(workflows))
        .route("/v1/sources", get(sources))
}

/// Default and largest page of a listing.
const DEFAULT_LIMIT: u64 = 100;
const MAX_LIMIT: u64 = 1000;

pub fn parse_limit(limit: Option<&str>) -> Result<u64, ApiError> {
    match limit {
        None => Ok(DEFAULT_LIMIT),
        Some(text) => match text.parse::<u64>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
            _ => Err(ApiError::BadRequest(format!(
                "`limit` must be a whole number from 1 to {MAX_LIMIT}, not `{text}`"
            ))),
        },
    }
}

/// An RFC 3339 time (`2026-12-01T10:42:00Z`) or a date (`2026-12-01`, midnight UTC) as epoch
/// milliseconds, for the `since`/`until` filters.
pub fn parse_time(key: &str, text: &str) -> Result<i64, ApiError> {
    if let Ok(time) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(time.timestamp_millis());
    }
    for format in ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"] {
        if let Ok(time) = chrono::NaiveDateTime::parse_from_str(text, format) {
            return Ok(time.and_utc().timestamp_millis());
        }
    }
    if let Ok(date) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Ok(date
            .and_time(chrono::NaiveTime::MIN)
            .and_utc()
            .timestamp_millis());
    }
    Err(ApiError::BadRequest(format!(
        "`{key}` must be an RFC 3339 time (2026-12-01T10:42:00Z) or a date (2026-12-01), not `{text}`"
    )))
}

pub fn millis_to_rfc3339(millis: i64) -> String {
    chrono::DateTime::from_timestamp_millis(millis)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

pub(crate) fn query<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    query.map(|Query(q)| q).map_err(ApiError::from)
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct IntakeQuery {
    tenant: Option<String>,
    outcome: Option<String>,
    source: Option<String>,
    /// Only deliveries about this target entity (ticket, thread).
    entity: Option<String>,
    delivery_id: Option<String>,
    /// Received at or after this time (RFC 3339 or a date).
    since: Option<String>,
    /// Received before this time.
    until: Option<String>,
    limit: Option<String>,
    /// Only rows older than this intake id: the cursor of the next page (`next_before`).
    before: Option<String>,
    /// `payload` to include each event's payload (pages are then at most 100 rows).
    include: Option<String>,
}

/// Largest page when payloads are included: a payload may be up to the body limit.
const MAX_LIMIT_WITH_PAYLOADS: u64 = 100;

/// A ledger row as the API shows it.
#[derive(Debug, Serialize)]
struct IntakeView {
    id: String,
    source: String,
    delivery_id: String,
    outcome: String,
    detail: Option<String>,
    event: Option<Value>,
    /// Where the original bytes are (`GET /v1/raw/{raw_ref}`), also for deliveries that never
    /// became an event (invalid ones, say).
    raw_ref: Option<String>,
    run_id: Option<String>,
    workflow_id: Option<String>,
    held_by_run_id: Option<String>,
    config_revision: String,
    received_at: String,
    decided_at: String,
    /// The W3C trace context stored with the delivery (absent when it had none).
    #[serde(skip_serializing_if = "Option::is_none")]
    traceparent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tracestate: Option<String>,
    /// What each shadow workflow would have done (absent without shadows on its key).
    #[serde(skip_serializing_if = "Option::is_none")]
    shadow: Option<Value>,
    /// For a delivery a live replay re-admitted: the replay and the original intake id.
    #[serde(skip_serializing_if = "Option::is_none")]
    replay_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    replay_of: Option<String>,
}

impl IntakeView {
    /// The row as shown, with its payload only when asked for.
    fn of(row: intake::Model, with_payload: bool) -> Self {
        let event = row.channel.as_ref().map(|channel| {
            let mut event = json!({
                "channel": channel,
                "event_type": row.event_type,
                "tenant_id": row.tenant_id,
                "target_entity_id": row.target_entity_id,
                "raw_ref": row.raw_ref,
            });
            if with_payload {
                event["payload"] = row
                    .payload
                    .as_deref()
                    .and_then(|p| serde_json::from_str::<Value>(p).ok())
                    .unwrap_or(Value::Null);
            }
            event
        });
        Self {
            received_at: millis_to_rfc3339(row.received_at),
            decided_at: millis_to_rfc3339(row.decided_at),
            id: row.id,
            source: row.source,
            delivery_id: row.delivery_id,
            outcome: row.outcome,
            detail: row.detail,
            event,
            raw_ref: row.raw_ref,
            run_id: row.run_id,
            workflow_id: row.workflow_id,
            held_by_run_id: row.held_by_run_id,
            config_revision: row.config_revision,
            traceparent: row.traceparent,
            tracestate: row.tracestate,
            shadow: row
                .shadow
                .as_deref()
                .and_then(|s| serde_json::from_str(s).ok()),
            replay_id: row.replay_id,
            replay_of: row.replay_of,
        }
    }
}

#[utoipa::path(get, path = "/v1/intake", tag = "ledger", params(IntakeQuery), responses((status = 200, description = "A page of ledger rows", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn list_intake(
    State(state): State<AppState>,
    principal: Principal,
    q: Result<Query<IntakeQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::Read)?;
    let q = query(q)?;
    if let Some(outcome) = &q.outcome {
        outcome.parse::<Outcome>().map_err(ApiError::BadRequest)?;
    }
    let with_payload = match q.include.as_deref() {
        None => false,
        Some("payload") => true,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "`include` may only be `payload`, not `{other}`"
            )));
        }
    };
    let limit = parse_limit(q.limit.as_deref())?;
    if with_payload && limit > MAX_LIMIT_WITH_PAYLOADS {
        return Err(ApiError::BadRequest(format!(
            "`limit` must be at most {MAX_LIMIT_WITH_PAYLOADS} with `include=payload`"
        )));
    }
    let since = q
        .since
        .as_deref()
        .map(|t| parse_time("since", t))
        .transpose()?;
    let until = q
        .until
        .as_deref()
        .map(|t| parse_time("until", t))
        .transpose()?;
    let tenants = principal.tenant_filter(q.tenant.as_deref());
    let rows = state
        .store
        .ledger_page(
            ledger::Filter {
                tenants: tenants.as_deref(),
                outcome: q.outcome.as_deref(),
                source: q.source.as_deref(),
                target_entity_id: q.entity.as_deref(),
                delivery_id: q.delivery_id.as_deref(),
                since,
                until,
                before: q.before.as_deref(),
            },
            limit,
        )
        .await?;
    let next_before = (rows.len() as u64 == limit)
        .then(|| rows.last().map(|row| row.id.clone()))
        .flatten();
    let rows: Vec<IntakeView> = rows
        .into_iter()
        .map(|row| IntakeView::of(row, with_payload))
        .collect();
    Ok(Json(json!({ "intake": rows, "next_before": next_before })))
}

#[utoipa::path(get, path = "/v1/raw/{id}", tag = "ledger", params(("id" = String, Path, description = "The id")), responses((status = 200, description = "The stored bytes of a delivery, with their content type", body = String, content_type = "application/octet-stream"), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn raw(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    principal.require(Scope::RawRead)?;
    let id = id.strip_prefix("raw:").unwrap_or(&id);
    if principal.tenants().is_some() {
        // The raw id is its ledger row's id; the row says whose bytes they are.
        let tenants = principal.tenant_filter(None);
        if state
            .store
            .ledger_row(id, tenants.as_deref())
            .await?
            .is_none()
        {
            return Err(ApiError::NotFound(format!(
                "no raw delivery with id `{id}`"
            )));
        }
    }
    let Some(raw) = state.store.raw_delivery(id).await? else {
        return Err(missing_raw(&state, id).await?);
    };
    // The bytes are the sender's, not ours: served under the sender's type, HTML or SVG would
    // run in the reader's browser as this origin. The type it declared stays visible.
    let mut response = Response::builder()
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        .header(header::CONTENT_DISPOSITION, "attachment")
        .header("x-switchyard-source", raw.source)
        .body(Body::from(raw.body))
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    if let Ok(declared) = header::HeaderValue::from_str(&raw.content_type) {
        response
            .headers_mut()
            .insert("x-switchyard-content-type", declared);
    }
    Ok(response)
}

/// 410 when retention pruned the bytes but the ledger row naming them (its id is the raw
/// id) is kept; else 404.
async fn missing_raw(state: &AppState, id: &str) -> Result<ApiError, ApiError> {
    Ok(match state.store.raw_was_pruned(id).await? {
        true => ApiError::expired(format!(
            "the raw bytes of `raw:{id}` were deleted by retention (retention.raw); its ledger \
             row is kept"
        )),
        false => ApiError::NotFound(format!("no raw delivery with id `{id}`")),
    })
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct LocksQuery {
    tenant: Option<String>,
    limit: Option<String>,
}

#[utoipa::path(get, path = "/v1/locks", tag = "ledger", params(LocksQuery), responses((status = 200, description = "The entity locks held", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn locks(
    State(state): State<AppState>,
    principal: Principal,
    q: Result<Query<LocksQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::Read)?;
    let q = query(q)?;
    let limit = parse_limit(q.limit.as_deref())?;
    let tenants = principal.tenant_filter(q.tenant.as_deref());
    let locks = state
        .store
        .held_leases(tenants.as_deref(), now_millis(), limit)
        .await?;
    let locks: Vec<Value> = locks
        .into_iter()
        .map(|lock| {
            json!({
                "tenant_id": lock.tenant_id,
                "target_entity_id": lock.target_entity_id,
                "run_id": lock.run_id,
                "fencing_token": lock.fencing_token,
                "expires_at": millis_to_rfc3339(lock.expires_at),
            })
        })
        .collect();
    Ok(Json(json!({ "locks": locks })))
}

#[utoipa::path(get, path = "/v1/workflows", tag = "config", responses((status = 200, description = "The workflows in force", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn workflows(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::Read)?;
    let live = state.live.current();
    let mut shadows = if live.shadows.is_some() {
        let tenants = principal.tenant_filter(None);
        crate::shadow::last_day(&state.store, tenants.as_deref(), now_millis()).await?
    } else {
        Default::default()
    };
    let degraded = live.authority.degraded(switchyard_store::now_millis());
    let workflows: Vec<Value> = live
        .workflows
        .iter()
        .filter(|w| principal.sees(&w.tenant_id))
        .map(|w| {
            let mut view = serde_json::to_value(w).unwrap_or_default();
            if let Some(run_as) = live.authority.run_as(&w.id) {
                view["run_as"] = json!(run_as.id);
            }
            // A live workflow whose principal may not act starts nothing: say so, never
            // "live" alone.
            if let Some(refusal) = degraded.get(w.id.as_str()) {
                view["degraded"] = json!({
                    "outcome": "authority_unavailable",
                    "principal": refusal.principal,
                    "reason": refusal.reason_word(),
                    "detail": refusal.to_string(),
                });
            }
            if w.status == switchyard_core::WorkflowStatus::Shadow {
                view["shadow"] = serde_json::to_value(shadows.remove(&w.id).unwrap_or_default())
                    .unwrap_or(Value::Null);
            }
            view
        })
        .collect();
    Ok(Json(json!({
        "config_revision": live.revision(),
        "workflows": workflows,
    })))
}

#[utoipa::path(get, path = "/v1/sources", tag = "config", responses((status = 200, description = "The sources in force and their health", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn sources(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::Read)?;
    let live = state.live.current();
    let statuses = state.sources.snapshot();
    let sources: Vec<Value> = live
        .settings
        .loaded
        .config
        .sources
        .iter()
        .filter(|source| source.tenants().iter().any(|t| principal.sees(t)))
        .map(|source| {
            json!({
                "kind": source.kind(),
                "name": source.name(),
                "status": statuses.get(source.name()),
            })
        })
        .collect();
    Ok(Json(json!({ "sources": sources })))
}
