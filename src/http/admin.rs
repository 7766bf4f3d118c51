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
use switchyard_router::now_millis;
use switchyard_router::runs as lifecycle;

use super::{ApiError, AppState};
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

pub fn millis_to_rfc3339(millis: i64) -> String {
    chrono::DateTime::from_timestamp_millis(millis)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

fn query<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    query
        .map(|Query(q)| q)
        .map_err(|e| ApiError::BadRequest(e.body_text()))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IntakeQuery {
    tenant: Option<String>,
    outcome: Option<String>,
    source: Option<String>,
    limit: Option<String>,
}

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
}

impl From<intake::Model> for IntakeView {
    fn from(row: intake::Model) -> Self {
        let event = row.channel.as_ref().map(|channel| {
            json!({
                "channel": channel,
                "event_type": row.event_type,
                "tenant_id": row.tenant_id,
                "target_entity_id": row.target_entity_id,
                "payload": row.payload.as_deref().and_then(|p| serde_json::from_str::<Value>(p).ok()),
                "raw_ref": row.raw_ref,
            })
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
        }
    }
}

async fn list_intake(
    State(state): State<AppState>,
    q: Result<Query<IntakeQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let q = query(q)?;
    if let Some(outcome) = &q.outcome {
        outcome.parse::<Outcome>().map_err(ApiError::BadRequest)?;
    }
    let limit = parse_limit(q.limit.as_deref())?;
    let rows = ledger::list(
        &state.db,
        q.tenant.as_deref(),
        q.outcome.as_deref(),
        q.source.as_deref(),
        limit,
    )
    .await?;
    let rows: Vec<IntakeView> = rows.into_iter().map(IntakeView::from).collect();
    Ok(Json(json!({ "intake": rows })))
}

async fn raw(State(state): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let id = id.strip_prefix("raw:").unwrap_or(&id);
    let raw = ledger::raw(&state.db, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no raw delivery with id `{id}`")))?;
    Response::builder()
        .header(header::CONTENT_TYPE, raw.content_type)
        .header("x-switchyard-source", raw.source)
        .body(Body::from(raw.body))
        .map_err(|e| ApiError::BadRequest(e.to_string()))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LocksQuery {
    tenant: Option<String>,
    limit: Option<String>,
}

async fn locks(
    State(state): State<AppState>,
    q: Result<Query<LocksQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let q = query(q)?;
    let limit = parse_limit(q.limit.as_deref())?;
    let locks = lifecycle::held_locks(&state.db, q.tenant.as_deref(), now_millis(), limit).await?;
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

async fn workflows(State(state): State<AppState>) -> Json<Value> {
    let live = state.live.current();
    Json(json!({
        "config_revision": live.revision(),
        "workflows": live.workflows,
    }))
}

async fn sources(State(state): State<AppState>) -> Json<Value> {
    let live = state.live.current();
    let statuses = state.sources.snapshot();
    let sources: Vec<Value> = live
        .settings
        .loaded
        .config
        .sources
        .iter()
        .map(|source| {
            json!({
                "kind": source.kind(),
                "name": source.name(),
                "status": statuses.get(source.name()),
            })
        })
        .collect();
    Json(json!({ "sources": sources }))
}
