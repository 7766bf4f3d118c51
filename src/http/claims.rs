//! `/v1/claims`: the pull API. Workers long-poll for runs of named workflows on pull targets,
//! then extend or release their claim; finishing the run (`/v1/runs/{id}/finish`) ends it.
//! A claim not extended before it expires goes back to pending; one run is claimed by one
//! worker at a time, across replicas (`SKIP LOCKED`).
//!
//! A waiting claim is woken only by work of its own workflows ([`crate::dispatcher::pull_waiters`])
//! and runs a claim transaction only when woken or when a read finds a run due.

use std::time::Duration;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use switchyard_dispatch::schedule::jitter;
use switchyard_store::outbox::{ClaimError, ClaimedRun, PullClaim, PullTarget};
use switchyard_store::{Millis, now_millis};
use tokio::time::Instant;

use super::auth::Principal;
use super::{ApiError, AppState, millis_to_rfc3339};
use crate::config::{ResolvedTarget, Scope};
use crate::dispatcher::message;
use crate::dispatcher::pull_waiters::CannotWait;
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
/// Most distinct workflows one claim request may name. Far more than a worker runs; every name
/// is a bound variable of the claim's query (40,000 were past SQLite's limit, a 503).
const MAX_WORKFLOWS: usize = 1_000;
/// Most claim requests of one token that may wait for work at once: each holds a connection
/// and a task. Past it a token gets 429 (`too_many_waiting_claims`); a claim without `wait`
/// is never refused for it.
const MAX_WAITING_PER_TOKEN: usize = 64;
/// How often waiting claims look for work nobody woke them for: runs another replica routed,
/// a claim that lapsed or a release delay that ended there, a run a wait's timer resumed, a
/// `max_running` slot a run's end freed. Each workflow is looked at by one of its waiters per
/// period, with a read; a claim transaction only when the read finds a run due. Runs of this
/// daemon's own intake, resumes, releases and redispatches wake the waiters of their workflow
/// at once.
const RECHECK: Duration = Duration::from_secs(2);
/// Longest a released run may be kept from being claimed again: a worker's back-off, not a
/// way to park an entity (its lease is kept alive while the run waits).
const MAX_RELEASE_DELAY: Duration = Duration::from_secs(3600);

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ClaimRequest {
    /// Workflows whose runs this worker executes.
    workflows: Vec<String>,
    /// Most runs to return (default 1, at most 100).
    #[serde(default)]
    max: Option<u64>,
    /// How long to wait for a run when none is due (default 0: answer at once; at most 60s).
    #[serde(default, with = "humantime_serde")]
    #[schema(value_type = Option<String>, example = "10s")]
    wait: Option<Duration>,
}

#[utoipa::path(post, path = "/v1/claims", tag = "claims", request_body = ClaimRequest, responses((status = 200, description = "The runs claimed (possibly none)", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn claim(
    State(state): State<AppState>,
    principal: Principal,
    body: Result<Json<ClaimRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    principal.require(Scope::RunsWrite)?;
    let Json(request) = body.map_err(ApiError::from)?;
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
    let workflows = claimable_workflows(&state, &principal, request.workflows)?;
    let looker = Looker {
        state: &state,
        token: &principal.name,
        workflows: &workflows,
        max,
    };
    if workflows.is_empty() {
        return Ok(Json(json!({ "claims": [] })).into_response());
    }
    let look_once = async || {
        let (claims, _) = looker.look("request").await?;
        answer(&state, claims).await
    };
    if wait.is_zero() {
        return look_once().await;
    }
    let pull = &state.wake.pull;
    let waiting = match pull.wait_on(&principal.name, workflows.clone(), MAX_WAITING_PER_TOKEN) {
        Ok(waiting) => waiting,
        Err(CannotWait::AtCap { cap }) => return Ok(too_many_waiting(&principal.name, cap)),
        // The daemon is stopping: no request waits through the shutdown drain.
        Err(CannotWait::Closed) => return look_once().await,
    };
    let deadline = Instant::now() + wait;
    let mut cause = "request";
    loop {
        // Registered before the first look: work committed during a look wakes the next wait.
        waiting.take_wake();
        let (claims, took_max) = looker.look(cause).await?;
        if !claims.is_empty() {
            if took_max {
                waiting.pass_on();
            }
            return answer(&state, claims).await;
        }
        cause = loop {
            if waiting.closed() {
                // The daemon is stopping: answer now, so the worker claims again (from
                // another replica) instead of this request holding its connection through
                // the shutdown drain.
                return Ok(Json(json!({ "claims": [] })).into_response());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            // Spread, so waiters that came together do not all wake together.
            let recheck = RECHECK.mul_f64(1.0 + 0.25 * jitter());
            if waiting.woken(left.min(recheck)).await {
                if waiting.closed() {
                    continue; // answered above
                }
                break "woken";
            }
            let unlooked = waiting.to_look_at(RECHECK);
            if !unlooked.is_empty() && looker.work_due(&unlooked).await? {
                break "recheck";
            }
            if Instant::now() >= deadline {
                return Ok(Json(json!({ "claims": [] })).into_response());
            }
        };
    }
}

/// The distinct workflows of a claim request the caller may claim: at most
/// [`MAX_WORKFLOWS`], each a workflow in force (that the caller's tenants own) on a pull target.
fn claimable_workflows(
    state: &AppState,
    principal: &Principal,
    mut workflows: Vec<String>,
) -> Result<Vec<String>, ApiError> {
    if workflows.is_empty() {
        return Err(ApiError::BadRequest(
            "`workflows` must name at least one workflow".into(),
        ));
    }
    workflows.sort_unstable();
    workflows.dedup();
    if workflows.len() > MAX_WORKFLOWS {
        return Err(ApiError::BadRequest(format!(
            "`workflows` names {} distinct workflows; a claim may name at most {MAX_WORKFLOWS}",
            workflows.len()
        )));
    }
    // A name no worker could ever claim from is refused, naming it, never answered with an
    // empty list forever: a workflow that is not configured (or, for a tenant-limited token,
    // is another tenant's: the same words, so nothing says it exists) or whose runs go to a
    // push target.
    let live = state.live.current();
    for id in &workflows {
        let Some(workflow) = live
            .workflows
            .iter()
            .find(|w| &w.id == id && principal.sees(&w.tenant_id))
        else {
            return Err(ApiError::BadRequest(format!(
                "`workflows` names `{id}`, which is no workflow in force"
            )));
        };
        let target = live.target_of(&workflow.id);
        if !matches!(live.target(target), Some(ResolvedTarget::Pull(_))) {
            return Err(ApiError::BadRequest(format!(
                "`workflows` names `{id}`, whose runs go to `{target}`, which is not a pull \
                 target: its runs are pushed, never claimed"
            )));
        }
    }
    Ok(workflows)
}

/// 429: `token` already has `cap` claim requests waiting.
fn too_many_waiting(token: &str, cap: usize) -> Response {
    tracing::info!(
        token,
        cap,
        "a claim request was refused: its token has too many waiting"
    );
    let detail = format!(
        "token `{token}` already has {cap} claim requests waiting for work, the most one token \
         may have; retry when one returns, or claim without `wait`"
    );
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, "1")],
        Json(json!({ "error": "too_many_waiting_claims", "detail": detail })),
    )
        .into_response()
}

async fn answer(state: &AppState, claims: Vec<PullClaim>) -> Result<Response, ApiError> {
    let metrics = crate::metrics::metrics();
    for claim in &claims {
        metrics.pull_claimed(&claim.claimed.run.workflow_id, 1);
    }
    Ok(Json(json!({ "claims": claim_views(state, claims).await? })).into_response())
}

/// One claim request's looks for work.
struct Looker<'a> {
    state: &'a AppState,
    token: &'a str,
    workflows: &'a [String],
    max: u64,
}

impl Looker<'_> {
    /// One claim transaction (again at once if every run it claimed ended at the checks):
    /// the runs claimed, and whether it took as many as asked (then more may be due).
    async fn look(&self, cause: &'static str) -> Result<(Vec<PullClaim>, bool), ApiError> {
        let state = self.state;
        loop {
            crate::metrics::metrics().pull_claim_transaction(self.token, cause);
            let targets = pull_targets(state);
            let now = now_millis();
            let live = state.live.current();
            let claimed = state
                .store
                .claim_pull(&targets, self.workflows, self.max, now, &live.max_running)
                .await?;
            let took_max = claimed.len() as u64 == self.max;
            let any_claimed = !claimed.is_empty();
            let claims = checked(state, claimed, now).await?;
            // Every run claimed ended at the checks: look again at once for others.
            if any_claimed && claims.is_empty() {
                continue;
            }
            return Ok((claims, took_max));
        }
    }

    /// Whether a run of `workflows` is due on a pull target: a read, so a waiter that nobody
    /// woke costs no write transaction when there is nothing to claim.
    async fn work_due(&self, workflows: &[String]) -> Result<bool, ApiError> {
        let targets: Vec<String> = pull_targets(self.state)
            .into_iter()
            .map(|t| t.name)
            .collect();
        Ok(self
            .state
            .store
            .any_due(&targets, workflows, now_millis())
            .await?)
    }
}

/// The principal is checked again before the worker sees a run (`authority_revoked`), and the
/// run's own `max_attempts` budget: the runs claimed that pass both.
async fn checked(
    state: &AppState,
    claimed: Vec<PullClaim>,
    now: Millis,
) -> Result<Vec<PullClaim>, ApiError> {
    let live = state.live.current();
    let mut claims = Vec::with_capacity(claimed.len());
    for claim in claimed {
        let revoked = crate::authority::revoke_if_refused(
            &state.store,
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
            state
                .store
                .end_run(
                    &claim.claimed.run.id,
                    switchyard_store::entities::run::RunStatus::DeadLettered,
                    "max_attempts",
                    Some(detail),
                    now,
                )
                .await
                .map_err(super::runs::run_error)?;
            crate::metrics::metrics()
                .workflow_run_finished(&claim.claimed.run.workflow_id, "dead_lettered");
            continue;
        }
        claims.push(claim);
    }
    Ok(claims)
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
    let events = message::events_of(&state.store, &refs).await?;
    let mut resumes = crate::dispatcher::resumes::resumes_of(&state.store, &refs).await?;
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

#[utoipa::path(post, path = "/v1/claims/{token}/extend", tag = "claims", params(("token" = String, Path, description = "The claim token")), responses((status = 200, description = "The lease, extended", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
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
    let (dispatch, expires_at) = state
        .store
        .extend_claim(&token, ttl, now)
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
    let row = state
        .store
        .dispatch_of_claim(token)
        .await?
        .ok_or_else(|| claim_error(ClaimError::Lost))?;
    if principal.tenants().is_some() {
        let run = state.store.run(&row.run_id).await?;
        if !run.is_some_and(|run| principal.sees(&run.tenant_id)) {
            return Err(claim_error(ClaimError::Lost));
        }
    }
    Ok(row.target)
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ReleaseRequest {
    /// When the run may be claimed again (default at once; at most 1h).
    #[serde(default, with = "humantime_serde")]
    #[schema(value_type = Option<String>, example = "10s")]
    delay: Option<Duration>,
}

#[utoipa::path(post, path = "/v1/claims/{token}/release", tag = "claims", params(("token" = String, Path, description = "The claim token")), request_body(content = Option<ReleaseRequest>, content_type = "application/json"), responses((status = 200, description = "The claim, released", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn release(
    State(state): State<AppState>,
    principal: Principal,
    Path(token): Path<String>,
    body: Result<Option<Json<ReleaseRequest>>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::RunsWrite)?;
    let body = body.map_err(ApiError::from)?;
    let request = body.map(|Json(r)| r).unwrap_or_default();
    let delay = request.delay.unwrap_or_default();
    if delay > MAX_RELEASE_DELAY {
        return Err(ApiError::BadRequest(format!(
            "`delay` must be at most {}, not {}",
            humantime::format_duration(MAX_RELEASE_DELAY),
            humantime::format_duration(delay)
        )));
    }
    find_claim(&state, &principal, &token).await?;
    let (dispatch, due_at) = state
        .store
        .release_claim(&token, millis(delay), now_millis())
        .await
        .map_err(claim_error)?;
    // The run is claimable again once the delay is over: a waiter of its workflow is woken then.
    let wake = state.wake.clone();
    let workflow = dispatch.workflow_id.clone();
    if delay.is_zero() {
        wake.pull.work_for([workflow.as_str()]);
    } else {
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            wake.pull.work_for([workflow.as_str()]);
        });
    }
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
