//! `/v1/runs`: list and read runs (with their dispatch, attempts, history and waits), extend a run's
//! lease, finish a run, redispatch a dead letter. Heartbeat and finish carry the fencing token
//! the run was dispatched with.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use switchyard_store::bounded::{Report, Usage};
use switchyard_store::entities::run::{self, RunStatus};
use switchyard_store::now_millis;
use switchyard_store::outbox::Redispatched;
use switchyard_store::runs::{RunError, RunFilter, RunRecord};

use super::admin::{millis_to_rfc3339, parse_limit};
use super::auth::Principal;
use super::{ApiError, AppState};
use crate::config::Scope;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/runs", get(list_runs))
        .route("/v1/runs/{id}", get(get_run))
        .route("/v1/runs/{id}/heartbeat", post(heartbeat))
        .route("/v1/runs/{id}/finish", post(finish))
        .route("/v1/runs/{id}/redispatch", post(redispatch))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct RunsQuery {
    tenant: Option<String>,
    status: Option<String>,
    workflow: Option<String>,
    entity: Option<String>,
    limit: Option<String>,
    /// Only runs older than this run id: the next page's cursor (`next_before`).
    before: Option<String>,
}

/// A run as the API shows it.
#[derive(Debug, Serialize)]
struct RunView {
    id: String,
    tenant_id: String,
    workflow_id: String,
    target_entity_id: String,
    intake_id: String,
    status: RunStatus,
    fencing_token: i64,
    lock_ttl_ms: i64,
    created_at: String,
    updated_at: String,
    finished_at: Option<String>,
    /// The W3C trace context the run's dispatches carry (absent when it has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    traceparent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tracestate: Option<String>,
    /// The config revision that routed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    config_revision: Option<String>,
    /// Whose authority it acts under: the principal id and the revision that defined it.
    #[serde(skip_serializing_if = "Option::is_none")]
    principal: Option<Value>,
    /// When it must have finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    deadline: Option<String>,
    /// Its budgets, recorded at creation.
    #[serde(skip_serializing_if = "Option::is_none")]
    budgets: Option<Value>,
    /// What its worker reported using (running totals).
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Value>,
    /// Why it ended, when the daemon ended it or the worker said.
    #[serde(skip_serializing_if = "Option::is_none")]
    end_reason: Option<String>,
    /// The worker's version, as reported on finish.
    #[serde(skip_serializing_if = "Option::is_none")]
    worker_version: Option<String>,
    /// For a superseded run: the subject version that made it unnecessary.
    #[serde(skip_serializing_if = "Option::is_none")]
    subject_version: Option<String>,
}

impl From<run::Model> for RunView {
    fn from(run: run::Model) -> Self {
        let json = |text: &Option<String>| {
            text.as_deref()
                .and_then(|t| serde_json::from_str::<Value>(t).ok())
        };
        Self {
            principal: run
                .principal_id
                .as_ref()
                .map(|id| json!({"id": id, "config_revision": run.config_revision})),
            deadline: run.deadline_at.map(millis_to_rfc3339),
            budgets: json(&run.budgets),
            usage: json(&run.run_usage),
            config_revision: run.config_revision,
            end_reason: run.end_reason,
            worker_version: run.worker_version,
            subject_version: run.subject_version,
            created_at: millis_to_rfc3339(run.created_at),
            updated_at: millis_to_rfc3339(run.updated_at),
            finished_at: run.finished_at.map(millis_to_rfc3339),
            id: run.id,
            tenant_id: run.tenant_id,
            workflow_id: run.workflow_id,
            target_entity_id: run.target_entity_id,
            intake_id: run.intake_id,
            status: run.status,
            fencing_token: run.fencing_token,
            lock_ttl_ms: run.lock_ttl_ms,
            traceparent: run.traceparent,
            tracestate: run.tracestate,
        }
    }
}

pub(crate) fn parse_status(status: &str) -> Result<RunStatus, ApiError> {
    status.parse().map_err(ApiError::BadRequest)
}

#[utoipa::path(get, path = "/v1/runs", tag = "runs", params(RunsQuery), responses((status = 200, description = "A page of runs", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn list_runs(
    State(state): State<AppState>,
    principal: Principal,
    query: Result<Query<RunsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::Read)?;
    let Query(query) = query.map_err(ApiError::from)?;
    let status = query.status.as_deref().map(parse_status).transpose()?;
    let limit = parse_limit(query.limit.as_deref())?;
    let tenants = principal.tenant_filter(query.tenant.as_deref());
    let filter = RunFilter {
        tenants: tenants.as_deref(),
        status,
        workflow_id: query.workflow.as_deref(),
        target_entity_id: query.entity.as_deref(),
        before: query.before.as_deref(),
    };
    let runs = state.store.runs(&filter, limit).await?;
    let next_before = (runs.len() as u64 == limit)
        .then(|| runs.last().map(|run| run.id.clone()))
        .flatten();
    let runs: Vec<RunView> = runs.into_iter().map(RunView::from).collect();
    Ok(Json(json!({ "runs": runs, "next_before": next_before })))
}

/// A run with its dispatch, every attempt and its history.
#[utoipa::path(get, path = "/v1/runs/{id}", tag = "runs", params(("id" = String, Path, description = "The id")), responses((status = 200, description = "The run", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn get_run(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::Read)?;
    // One snapshot: the run, its dispatch and its history as of one moment, never torn.
    let tenants = principal.tenant_filter(None);
    let record = state
        .store
        .run_record(&id, tenants.as_deref())
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no run with id `{id}`")))?;
    let audit = crate::audit::of(&record);
    let RunRecord {
        run,
        dispatch,
        attempts,
        history,
        waits,
        ..
    } = record;
    let mut view = serde_json::to_value(RunView::from(run)).unwrap_or_default();
    // The five questions of an audit, each answered from what was recorded at the time.
    view["audit"] = serde_json::to_value(audit).unwrap_or_default();
    view["dispatch"] = dispatch.map_or(Value::Null, |d| {
        json!({
            "id": d.id,
            "target": d.target,
            "status": d.status,
            "series": d.series,
            "attempts": d.attempts,
            "due_at": millis_to_rfc3339(d.due_at),
            "claimed": d.claimed_by.is_some(),
            "reason": d.reason,
            "last_error": d.last_error,
            "delivered_at": d.delivered_at.map(millis_to_rfc3339),
        })
    });
    view["attempts"] = attempts
        .into_iter()
        .map(|a| {
            json!({
                "series": a.series,
                "attempt": a.attempt,
                "target": a.target,
                "result": a.result,
                "status_code": a.status_code,
                "response": a.response,
                "error": a.error,
                "started_at": millis_to_rfc3339(a.started_at),
                "duration_ms": a.duration_ms,
            })
        })
        .collect();
    view["waits"] = waits.iter().map(super::waits::wait_view).collect();
    view["history"] = history
        .into_iter()
        .map(|h| {
            json!({
                "at": millis_to_rfc3339(h.at),
                "status": h.status,
                "cause": h.cause,
                "detail": h.detail,
            })
        })
        .collect();
    Ok(Json(view))
}

/// What a worker proves it is the current holder with.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct HeartbeatRequest {
    /// The fencing token from the run message.
    fencing_token: i64,
    /// What the worker used since its last report, by budget key; added to the run's totals.
    #[serde(default)]
    #[schema(value_type = std::collections::BTreeMap<String, f64>)]
    usage: Usage,
}

#[utoipa::path(post, path = "/v1/runs/{id}/heartbeat", tag = "runs", params(("id" = String, Path, description = "The id")), request_body = HeartbeatRequest, responses((status = 200, description = "The lease, extended", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn heartbeat(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    body: Result<Json<HeartbeatRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::RunsWrite)?;
    visible_run(&state, &principal, &id).await?;
    let Json(request) = body.map_err(ApiError::from)?;
    let lease = state
        .store
        .heartbeat(&id, request.fencing_token, &request.usage, now_millis())
        .await
        .map_err(ended_by_daemon)?;
    tracing::info!(run_id = %id, expires_at = lease.expires_at, "run heartbeat extended its lease");
    Ok(Json(json!({
        "run_id": id,
        "fencing_token": lease.fencing_token,
        "expires_at": millis_to_rfc3339(lease.expires_at),
    })))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct FinishRequest {
    /// `completed`, `failed`, `cancelled` or `superseded`.
    status: String,
    /// The fencing token from the run message.
    fencing_token: i64,
    /// What the worker used since its last report, by budget key.
    #[serde(default)]
    #[schema(value_type = std::collections::BTreeMap<String, f64>)]
    usage: Usage,
    /// The worker's own version: which code ran.
    #[serde(default)]
    worker_version: Option<String>,
    /// For `superseded` (required there): the subject version that made the run unnecessary.
    #[serde(default)]
    subject_version: Option<String>,
}

#[utoipa::path(post, path = "/v1/runs/{id}/finish", tag = "runs", params(("id" = String, Path, description = "The id")), request_body = FinishRequest, responses((status = 200, description = "The run, finished", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn finish(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    body: Result<Json<FinishRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<RunView>, ApiError> {
    principal.require(Scope::RunsWrite)?;
    visible_run(&state, &principal, &id).await?;
    let Json(request) = body.map_err(ApiError::from)?;
    let status = parse_status(&request.status)?;
    for (field, value) in [
        ("worker_version", &request.worker_version),
        ("subject_version", &request.subject_version),
    ] {
        if value
            .as_ref()
            .is_some_and(|v| v.is_empty() || v.len() > 256)
        {
            return Err(ApiError::BadRequest(format!(
                "`{field}` must be 1 to 256 bytes"
            )));
        }
    }
    let report = Report {
        usage: request.usage,
        worker_version: request.worker_version,
        subject_version: request.subject_version,
        actor: None,
    };
    let run = finish_run(
        &state,
        &principal,
        &id,
        request.fencing_token,
        status,
        &report,
    )
    .await?;
    Ok(Json(RunView::from(run)))
}

/// Finishes a run as the holder of `fencing_token`; the console calls this too.
pub(crate) async fn finish_run(
    state: &AppState,
    principal: &Principal,
    id: &str,
    fencing_token: i64,
    status: RunStatus,
    report: &Report,
) -> Result<run::Model, ApiError> {
    // The history names who finished it: the worker's token, or the operator's.
    let report = Report {
        actor: Some(format!("token:{}", principal.name)),
        ..report.clone()
    };
    let run = state
        .store
        .finish_run(id, fencing_token, status, &report, now_millis())
        .await
        .map_err(ended_by_daemon)?;
    crate::metrics::metrics().workflow_run_finished(&run.workflow_id, run.status.as_str());
    // Its end freed a `max_running` slot: a waiting pull worker of its workflow may claim.
    let capped = state
        .live
        .current()
        .max_running
        .iter()
        .any(|c| c.workflow_id == run.workflow_id);
    if capped {
        state.wake.pull.work_for([run.workflow_id.as_str()]);
    }
    tracing::info!(run_id = %run.id, tenant_id = %run.tenant_id, status = run.status.as_str(), token = %principal.name, "run finished and released its lock");
    Ok(run)
}

/// The run, if it exists and the caller may see its tenant; else 404 (a run of another
/// tenant is not revealed).
pub(crate) async fn visible_run(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<run::Model, ApiError> {
    state
        .store
        .run(id)
        .await?
        .filter(|run| principal.sees(&run.tenant_id))
        .ok_or_else(|| ApiError::NotFound(format!("no run with id `{id}`")))
}

/// Starts a new attempt series for a dead-lettered run (same dispatch id, new fencing token),
/// or answers `entity_locked` naming the run that holds its entity now.
#[utoipa::path(post, path = "/v1/runs/{id}/redispatch", tag = "runs", params(("id" = String, Path, description = "The id")), responses((status = 200, description = "A new attempt series", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn redispatch(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    principal.require(Scope::RunsWrite)?;
    visible_run(&state, &principal, &id).await?;
    match state
        .store
        .redispatch(
            &id,
            Some(&format!("token:{}", principal.name)),
            now_millis(),
        )
        .await
        .map_err(run_error)?
    {
        Redispatched::Queued { run, dispatch_id } => {
            state.wake.runs_created_in([run.workflow_id.as_str()]);
            tracing::info!(run_id = %run.id, %dispatch_id, fencing_token = run.fencing_token, token = %principal.name, "dead-lettered run redispatched");
            let mut view = serde_json::to_value(RunView::from(*run)).unwrap_or_default();
            view["dispatch_id"] = json!(dispatch_id);
            Ok((StatusCode::OK, Json(view)))
        }
        Redispatched::EntityLocked { held_by_run_id } => Ok((
            StatusCode::CONFLICT,
            Json(json!({
                "error": "entity_locked",
                "outcome": "entity_locked",
                "detail": format!("run {held_by_run_id} holds the entity now; redispatch after it ends"),
                "held_by_run_id": held_by_run_id,
            })),
        )),
    }
}

/// [`run_error`], counting the runs the daemon ended for a bound in the metrics.
fn ended_by_daemon(error: RunError) -> ApiError {
    if let RunError::Overrun {
        run_id,
        reason,
        ended_now,
        ..
    } = &error
    {
        if *ended_now {
            crate::metrics::metrics().run_finished("failed");
        }
        tracing::warn!(run_id = %run_id, reason, "run ended: {error}");
    }
    run_error(error)
}

pub(crate) fn run_error(error: RunError) -> ApiError {
    match error {
        RunError::Overrun { reason, .. } => ApiError::Refused {
            status: StatusCode::CONFLICT,
            error: reason,
            detail: error.to_string(),
        },
        RunError::SupersededWithoutVersion
        | RunError::UnknownUsage { .. }
        | RunError::BadUsage { .. } => ApiError::BadRequest(error.to_string()),
        RunError::NotFound(_) => ApiError::NotFound(error.to_string()),
        RunError::LeaseLost(_) | RunError::StaleToken { .. } => ApiError::Refused {
            status: StatusCode::CONFLICT,
            error: "lease_lost",
            detail: error.to_string(),
        },
        RunError::AlreadyFinished { .. } | RunError::NotDeadLettered { .. } => {
            ApiError::Conflict(error.to_string())
        }
        RunError::NotFinal(_) => ApiError::BadRequest(error.to_string()),
        RunError::Db(db) => ApiError::Database(db),
    }
}
