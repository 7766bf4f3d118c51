//! `/v1/claims`: the pull API. Workers long-poll for runs of named workflows on pull targets,
//! then extend or release their claim; finishing the run (`/v1/runs/{id}/finish`) ends it.
//! A claim not extended before it expires goes back to pending; one run is claimed by one
//! worker at a time, across replicas (`SKIP LOCKED`).

use std::time::Duration;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use switchyard_router::now_millis;
use switchyard_router::outbox::{self, ClaimError, ClaimedRun, PullClaim, PullTarget};

use super::auth::Principal;
use super::{ApiError, AppState, millis_to_rfc3339};
use crate::config::{ResolvedTarget, Scope};
use crate::dispatcher::message;
use crate::telemetry::DispatchSpan;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/claims", post(claim))
        .route("/v1/claims/{token}/extend", post(extend))
        .route("/v1/claims/{token}/release", post(release))
}

/// Longest a claim request may wait for work.
const MAX_WAIT: Duration = Duration::from_secs(60);
/// Most runs one claim request may take.
const MAX_CLAIM: u64 = 100;
/// How often a waiting claim looks again without a wake-up (work routed by another replica).
const RECHECK: Duration = Duration::from_millis(200);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClaimRequest {
    /// Workflows whose runs this worker executes.
    workflows: Vec<String>,
    /// Most runs to return (default 1, at most 100).
    #[serde(default)]
    max: Option<u64>,
    /// How long to wait for a run when none is due (default 0: answer at once; at most 60s).
    #[serde(default, with = "humantime_serde")]
    wait: Option<Duration>,
}

async fn claim(
    State(state): State<AppState>,
    principal: Principal,
    body: Result<Json<ClaimRequest>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::RunsWrite)?;
    let Json(mut request) = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    if request.workflows.is_empty() {
        return Err(ApiError::BadRequest(
            "`workflows` must name at least one workflow".into(),
        ));
    }
    if principal.tenants().is_some() {
        // Runs are claimed by workflow; a tenant-limited worker gets only its tenants'
        // workflows (others claim nothing, as unknown workflows do).
        let live = state.live.current();
        request.workflows.retain(|id| {
            live.workflows
                .iter()
                .any(|w| &w.id == id && principal.sees(&w.tenant_id))
        });
        if request.workflows.is_empty() {
            return Ok(Json(json!({ "claims": [] })));
        }
    }
    let max = request.max.unwrap_or(1);
    if !(1..=MAX_CLAIM).contains(&max) {
        return Err(ApiError::BadRequest(format!(
            "`max` must be from 1 to {MAX_CLAIM}, not {max}"
        )));
    }
    let wait = request.wait.unwrap_or_default();
    if wait > MAX_WAIT {
        return Err(ApiError::BadRequest(format!(
            "`wait` must be at most {}",
            humantime::format_duration(MAX_WAIT)
        )));
    }
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        // Registered before looking, so a commit between the look and the wait still wakes us.
        let woken = state.wake.pull.notified();
        let targets = pull_targets(&state);
        let now = now_millis();
        let claimed = outbox::claim_pull(&state.db, &targets, &request.workflows, max, now).await?;
        let any_claimed = !claimed.is_empty();
        // The principal is checked again before the worker sees the run (`authority_revoked`).
        let live = state.live.current();
        let mut claims = Vec::with_capacity(claimed.len());
        for claim in claimed {
            let revoked = crate::authority::revoke_if_refused(
                &state.db,
                &live.authority,
                &claim.claimed.run,
                now,
            )
            .await
            .map_err(super::runs::run_error)?;
            if revoked {
                continue;
            }
            // The run's own `max_attempts` budget, when lower than the target's `max_claims`.
            let budget = crate::bounds::budgets_of(&claim.claimed.run)
                .get(crate::config::MAX_ATTEMPTS)
                .and_then(Value::as_i64)
                .unwrap_or(i64::MAX);
            if i64::from(claim.claimed.dispatch.attempts) > budget {
                let detail = format!("claimed {budget} times without finishing (its budget)");
                switchyard_router::bounded::end(
                    &state.db,
                    &claim.claimed.run.id,
                    switchyard_router::entities::run::RunStatus::DeadLettered,
                    "max_attempts",
                    Some(detail),
                    now,
                )
                .await
                .map_err(super::runs::run_error)?;
                crate::metrics::metrics().run_finished("dead_lettered");
                continue;
            }
            claims.push(claim);
        }
        if any_claimed && claims.is_empty() {
            // Every run claimed was revoked: look again at once for others.
            continue;
        }
        if !claims.is_empty() {
            return Ok(Json(
                json!({ "claims": claim_views(&state, claims).await? }),
            ));
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Ok(Json(json!({ "claims": [] })));
        }
        let _ = tokio::time::timeout((deadline - now).min(RECHECK), woken).await;
    }
}

fn pull_targets(state: &AppState) -> Vec<PullTarget> {
    state
        .live
        .current()
        .settings
        .targets
        .iter()
        .filter_map(|target| match target {
            ResolvedTarget::Pull(pull) => Some(PullTarget {
                name: pull.name.clone(),
                claim_ttl_ms: millis(pull.claim_ttl),
                max_claims: i32::try_from(pull.max_claims).unwrap_or(i32::MAX),
            }),
            _ => None,
        })
        .collect()
}

async fn claim_views(state: &AppState, claims: Vec<PullClaim>) -> Result<Vec<Value>, ApiError> {
    let refs: Vec<&ClaimedRun> = claims.iter().map(|c| &c.claimed).collect();
    let events = message::events_of(&state.db, &refs).await?;
    let mut resumes = crate::waits::message::resumes_of(&state.db, &refs).await?;
    let now = now_millis();
    let live = state.live.current();
    let mut views = Vec::with_capacity(claims.len());
    for claim in claims {
        // Cloned, not taken: a run's start and resumes share its event.
        let Some(routed) = events.get(&claim.claimed.run.intake_id).cloned() else {
            tracing::error!(run_id = %claim.claimed.run.id, "a claimed run has no ledger event");
            continue;
        };
        // A claim is the pull target's dispatch attempt: with tracing on, the worker's spans
        // become children of its span.
        let trace = DispatchSpan::start(
            &claim.claimed.run,
            &claim.claimed.dispatch.target,
            claim.claimed.dispatch.attempts,
        );
        let resume = resumes.remove(&claim.claimed.dispatch.id);
        let run_message =
            message::run_start(&claim.claimed, routed, resume, now, &trace, &live.authority);
        trace.finish("claimed", None);
        tracing::info!(run_id = %claim.claimed.run.id, dispatch_id = %claim.claimed.dispatch.id, attempt = claim.claimed.dispatch.attempts, "run claimed by a pull worker");
        views.push(json!({
            "token": claim.token,
            "expires_at": millis_to_rfc3339(claim.expires_at),
            "message": run_message,
        }));
    }
    Ok(views)
}

fn claim_ttl(state: &AppState, target: &str) -> i64 {
    pull_targets(state)
        .into_iter()
        .find(|t| t.name == target)
        .map_or(60_000, |t| t.claim_ttl_ms)
}

async fn extend(
    State(state): State<AppState>,
    principal: Principal,
    Path(token): Path<String>,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::RunsWrite)?;
    let now = now_millis();
    // The ttl of the claim's own target; looked up after the row is found.
    let row = find_claim(&state, &principal, &token).await?;
    let ttl = claim_ttl(&state, &row);
    let (dispatch, expires_at) = outbox::extend_claim(&state.db, &token, ttl, now)
        .await
        .map_err(claim_error)?;
    Ok(Json(json!({
        "run_id": dispatch.run_id,
        "expires_at": millis_to_rfc3339(expires_at),
    })))
}

/// The target of the claim `token`, if the caller may see its run's tenant (a claim of
/// another tenant is `claim_lost`, like an unknown one).
async fn find_claim(
    state: &AppState,
    principal: &Principal,
    token: &str,
) -> Result<String, ApiError> {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    use switchyard_router::entities::dispatch;
    let row = dispatch::Entity::find()
        .filter(dispatch::Column::ClaimToken.eq(token))
        .one(&state.db)
        .await?
        .ok_or_else(|| claim_error(ClaimError::Lost))?;
    if principal.tenants().is_some() {
        let run = switchyard_router::runs::get(&state.db, &row.run_id).await?;
        if !run.is_some_and(|run| principal.sees(&run.tenant_id)) {
            return Err(claim_error(ClaimError::Lost));
        }
    }
    Ok(row.target)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReleaseRequest {
    /// When the run may be claimed again (default at once).
    #[serde(default, with = "humantime_serde")]
    delay: Option<Duration>,
}

async fn release(
    State(state): State<AppState>,
    principal: Principal,
    Path(token): Path<String>,
    body: Result<Option<Json<ReleaseRequest>>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::RunsWrite)?;
    find_claim(&state, &principal, &token).await?;
    let body = body.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let request = body.map(|Json(r)| r).unwrap_or_default();
    let delay = millis(request.delay.unwrap_or_default());
    let (dispatch, due_at) = outbox::release_claim(&state.db, &token, delay, now_millis())
        .await
        .map_err(claim_error)?;
    state.wake.pull.notify_waiters();
    Ok(Json(json!({
        "run_id": dispatch.run_id,
        "pending_again_at": millis_to_rfc3339(due_at),
    })))
}

fn claim_error(error: ClaimError) -> ApiError {
    match error {
        ClaimError::Lost => ApiError::Refused {
            status: StatusCode::CONFLICT,
            error: "claim_lost",
            detail: error.to_string(),
        },
        ClaimError::Db(db) => ApiError::Database(db),
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX / 4)
}
