//! `/v1/replays`: start a replay (scope `admin`), list them, read one's progress and report,
//! cancel or rerun it. A replay runs in the background (`replay::Replayer`); a tenant-limited
//! caller replays, and sees, only its tenants' deliveries.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use switchyard_store::{DbErr, Store};

use super::admin::{millis_to_rfc3339, parse_limit, parse_time, query};
use super::auth::Principal;
use super::{ApiError, AppState};
use crate::config::Scope;
use crate::replay::report::{Example, Tally};
use crate::replay::runner::StartError;
use crate::replay::{Filters, Mode, Request, RevisionChoice};
use crate::store::entities::{replay, replay_result};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/replays", post(create).get(list))
        .route("/v1/replays/{id}", get(one))
        .route("/v1/replays/{id}/cancel", post(cancel))
        .route("/v1/replays/{id}/rerun", post(rerun))
}

/// `POST /v1/replays`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct CreateReplay {
    /// `diagnostic` (default) or `live`.
    #[serde(default = "diagnostic")]
    #[schema(value_type = String, example = "diagnostic")]
    mode: Mode,
    /// `original` (default), `current` or `candidate`.
    #[serde(default = "original")]
    #[schema(value_type = String, example = "original")]
    revision: RevisionChoice,
    /// The candidate config file's text, with `revision = "candidate"`.
    candidate: Option<String>,
    since: Option<String>,
    until: Option<String>,
    source: Option<String>,
    outcome: Option<String>,
    tenant: Option<String>,
    entity: Option<String>,
    delivery: Option<String>,
}

fn diagnostic() -> Mode {
    Mode::Diagnostic
}

fn original() -> RevisionChoice {
    RevisionChoice::Original
}

fn start_error(error: StartError) -> ApiError {
    match error {
        StartError::Invalid(detail) => ApiError::BadRequest(detail),
        StartError::Store(error) => ApiError::Database(error),
    }
}

#[utoipa::path(post, path = "/v1/replays", operation_id = "create_replay", tag = "replays", request_body = CreateReplay, responses((status = 202, description = "The replay, started", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn create(
    State(state): State<AppState>,
    principal: Principal,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    principal.require(Scope::Admin)?;
    if !super::error::declares_json(&headers) {
        return Err(ApiError::unsupported_media_type());
    }
    let body = body.map_err(ApiError::from)?;
    let request: CreateReplay = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("invalid replay request: {e}")))?;
    if let Some(outcome) = &request.outcome
        && outcome.parse::<switchyard_core::Outcome>().is_err()
    {
        return Err(ApiError::BadRequest(format!(
            "`outcome`: `{outcome}` is not an outcome"
        )));
    }
    let filters = Filters {
        since: request
            .since
            .as_deref()
            .map(|t| parse_time("since", t))
            .transpose()?,
        until: request
            .until
            .as_deref()
            .map(|t| parse_time("until", t))
            .transpose()?,
        source: request.source,
        outcome: request.outcome,
        tenants: principal.tenant_filter(request.tenant.as_deref()),
        tenant: request.tenant,
        entity: request.entity,
        delivery: request.delivery,
    };
    let live = state.live.current();
    let prepared = state
        .replays
        .prepare(
            Request {
                mode: request.mode,
                revision: request.revision,
                candidate: request.candidate,
                filters,
                actor: format!("token:{}", principal.name),
            },
            &live.settings.loaded,
        )
        .await
        .map_err(start_error)?;
    let row = prepared.row.clone();
    tracing::info!(replay_id = %row.id, mode = %row.mode, revision = %row.revision, actor = %row.actor, total = row.total, "replay started");
    state.replays.spawn(prepared);
    Ok((StatusCode::ACCEPTED, Json(view(&row))))
}

/// Whether the caller may see a replay: every tenant it covered must be one the caller sees.
pub(crate) fn visible(principal: &Principal, row: &replay::Model) -> bool {
    let filters: Filters = serde_json::from_str(&row.filters).unwrap_or_default();
    match filters.tenants {
        None => principal.sees_every_tenant(),
        Some(tenants) => tenants.iter().all(|t| principal.sees(t)),
    }
}

/// A replay with its progress.
pub(crate) fn view(row: &replay::Model) -> Value {
    let filters: Value = serde_json::from_str(&row.filters).unwrap_or(Value::Null);
    let percent = if row.total > 0 {
        (row.done as f64 * 100.0 / row.total as f64).min(100.0)
    } else {
        100.0
    };
    json!({
        "id": row.id,
        "actor": row.actor,
        "mode": row.mode,
        "revision": row.revision,
        "candidate_revision": row.candidate_revision,
        "filters": filters,
        "status": row.status,
        "progress": {
            "total": row.total,
            "done": row.done,
            "differ": row.differ,
            "percent": (percent * 10.0).round() / 10.0,
        },
        "error": row.error,
        "created_at": millis_to_rfc3339(row.created_at),
        "started_at": row.started_at.map(millis_to_rfc3339),
        "finished_at": row.finished_at.map(millis_to_rfc3339),
    })
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    limit: Option<String>,
    before: Option<String>,
}

#[utoipa::path(get, path = "/v1/replays", operation_id = "list_replays", tag = "replays", params(ListQuery), responses((status = 200, description = "A page of replays", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn list(
    State(state): State<AppState>,
    principal: Principal,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::Read)?;
    let q = query(q)?;
    let limit = parse_limit(q.limit.as_deref())?;
    let rows = state.store.replays(q.before.as_deref(), limit).await?;
    let next_before = (rows.len() as u64 == limit)
        .then(|| rows.last().map(|r| r.id.clone()))
        .flatten();
    let rows: Vec<Value> = rows
        .iter()
        .filter(|r| visible(&principal, r))
        .map(view)
        .collect();
    Ok(Json(json!({ "replays": rows, "next_before": next_before })))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct OneQuery {
    limit: Option<String>,
    /// Results after this original intake id (`next_after`).
    after: Option<String>,
    /// `true`: only the deliveries that came out differently.
    differing: Option<bool>,
}

/// The stored report of a replay: the moves table and its examples.
pub(crate) async fn report(store: &Store, replay_id: &str) -> Result<Tally, DbErr> {
    let mut tally = Tally::default();
    for (event_type, from, from_wf, to, to_wf, n) in store.replay_moves(replay_id).await? {
        tally.add(
            event_type.as_deref(),
            (&from, from_wf.as_deref()),
            (&to, to_wf.as_deref()),
            n.max(0) as u64,
            None,
        );
    }
    // Examples: the first differing deliveries of each changed cell.
    let mut examples = Tally::default();
    for r in store.replay_results(replay_id, true, None, 500).await? {
        examples.add(
            r.event_type.as_deref(),
            (&r.original_outcome, r.original_workflow_id.as_deref()),
            (&r.replayed_outcome, r.replayed_workflow_id.as_deref()),
            0,
            Some(Example {
                intake_id: r.intake_id.clone(),
                delivery_id: r.delivery_id.clone(),
            }),
        );
    }
    tally.take_examples(examples);
    Ok(tally)
}

pub(crate) fn result_view(r: &replay_result::Model) -> Value {
    json!({
        "intake_id": r.intake_id,
        "source": r.source,
        "delivery_id": r.delivery_id,
        "tenant_id": r.tenant_id,
        "event_type": r.event_type,
        "received_at": millis_to_rfc3339(r.received_at),
        "original": {"outcome": r.original_outcome, "workflow_id": r.original_workflow_id},
        "replayed": {"outcome": r.replayed_outcome, "workflow_id": r.replayed_workflow_id},
        "differs": r.differs,
        "why": r.why,
        "new_intake_id": r.new_intake_id,
        "new_run_id": r.new_run_id,
    })
}

#[utoipa::path(get, path = "/v1/replays/{id}", operation_id = "get_replay", tag = "replays", params(("id" = String, Path, description = "The id"), OneQuery), responses((status = 200, description = "The replay and its report", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn one(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    q: Result<Query<OneQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::Read)?;
    let q = query(q)?;
    let limit = parse_limit(q.limit.as_deref())?;
    let row = state
        .store
        .replay(&id)
        .await?
        .filter(|r| visible(&principal, r))
        .ok_or_else(|| ApiError::NotFound(format!("no replay `{id}`")))?;
    let results = state
        .store
        .replay_results(&id, q.differing.unwrap_or(false), q.after.as_deref(), limit)
        .await?;
    let next_after = (results.len() as u64 == limit)
        .then(|| results.last().map(|r| r.intake_id.clone()))
        .flatten();
    let tally = report(&state.store, &id).await?;
    let mut answer = view(&row);
    answer["report"] = json!({
        "table": tally.lines(),
        "text": tally.render(),
        "changed": tally.changed(),
    });
    answer["results"] = results.iter().map(result_view).collect();
    answer["next_after"] = json!(next_after);
    Ok(Json(answer))
}

#[utoipa::path(post, path = "/v1/replays/{id}/cancel", operation_id = "cancel_replay", tag = "replays", params(("id" = String, Path, description = "The id")), responses((status = 202, description = "Cancelling", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn cancel(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    principal.require(Scope::Admin)?;
    let row = state
        .store
        .replay(&id)
        .await?
        .filter(|r| visible(&principal, r))
        .ok_or_else(|| ApiError::NotFound(format!("no replay `{id}`")))?;
    if !state.replays.cancel(&id) {
        return Err(ApiError::Conflict(format!(
            "replay `{id}` is not running in this daemon (status `{}`)",
            row.status
        )));
    }
    tracing::info!(replay_id = %id, actor = %principal.name, "replay cancel requested");
    Ok((StatusCode::ACCEPTED, Json(view(&row))))
}

#[utoipa::path(post, path = "/v1/replays/{id}/rerun", operation_id = "rerun_replay", tag = "replays", params(("id" = String, Path, description = "The id")), responses((status = 202, description = "The replay, started again", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn rerun(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    principal.require(Scope::Admin)?;
    state
        .store
        .replay(&id)
        .await?
        .filter(|r| visible(&principal, r))
        .ok_or_else(|| ApiError::NotFound(format!("no replay `{id}`")))?;
    let live = state.live.current();
    let prepared = state
        .replays
        .prepare_rerun(&id, &live.settings.loaded)
        .await
        .map_err(start_error)?;
    let row = prepared.row.clone();
    tracing::info!(replay_id = %id, actor = %principal.name, "replay rerun");
    state.replays.spawn(prepared);
    Ok((StatusCode::ACCEPTED, Json(view(&row))))
}
