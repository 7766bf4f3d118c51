//! Durable waits over HTTP: `POST /v1/runs/{id}/waits` (a worker opens a wait with its fencing
//! token), `GET /v1/runs/{id}/waits`, and `POST /v1/waits/resume` (a resume by API). Canonical
//! events and CloudEvents whose payload carries `resume` come here through
//! [`resume_or_submit`]; Slack buttons through the Slack channel's interactivity endpoint
//! (`edge`).

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Deserialize;
use serde_json::{Value, json};
use switchyard_core::{Channel, Event, Outcome};
use switchyard_store::entities::wait;
use switchyard_store::now_millis;
use uuid::Uuid;

use super::admin::millis_to_rfc3339;
use super::auth::Principal;
use super::intake_answer::{self, Style};
use super::{ApiError, AppState};
use crate::config::Scope;
use crate::intake::{Delivery, DeliveryBody, Raw, StoreUnavailable};
use crate::store::MAX_KEY_LEN;
use crate::waits::open::{self, OnTimeout, OpenError, OpenRequest};
use crate::waits::resume::{self, ResumeClaim};

/// The source name of resumes posted to `POST /v1/waits/resume` (the same as `/v1/events`, so
/// one `Idempotency-Key` of a tenant identifies a delivery on either).
const API_SOURCE: &str = super::events::API_SOURCE;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/runs/{id}/waits", post(open_wait).get(list_waits))
}

/// `POST /v1/waits/resume`, measured as an intake endpoint.
pub fn resume_router() -> Router<AppState> {
    Router::new().route("/v1/waits/resume", post(post_resume))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct OpenBody {
    fencing_token: i64,
    wait_id: String,
    expects: String,
    proposal: ProposalBody,
    deadline: String,
    #[serde(default)]
    on_timeout: Option<String>,
    /// Where to post the proposal with Approve / Reject buttons.
    #[serde(default)]
    notify: Option<NotifyBody>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ProposalBody {
    id: String,
    digest: String,
    /// What the approval message says (Slack mrkdwn, at most 3,000 characters).
    #[serde(default)]
    summary: Option<String>,
}

/// `notify`: `{"slack": {"source": "<slack source>", "channel": "C..."}}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct NotifyBody {
    slack: SlackNotifyBody,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct SlackNotifyBody {
    source: String,
    channel: String,
}

/// Longest proposal summary an approval message shows (a Slack section's text limit).
const MAX_SUMMARY_CHARS: usize = 3000;

impl OpenBody {
    fn check(self) -> Result<OpenRequest, ApiError> {
        let bad = ApiError::BadRequest;
        open::check_id("wait_id", &self.wait_id).map_err(bad)?;
        open::check_id("expects", &self.expects).map_err(bad)?;
        open::check_id("proposal.id", &self.proposal.id).map_err(bad)?;
        if !open::valid_digest(&self.proposal.digest) {
            return Err(bad(format!(
                "`proposal.digest` must be `sha256:` and 64 lowercase hex digits, not {:?}",
                self.proposal.digest
            )));
        }
        let deadline = humantime::parse_duration(&self.deadline).map_err(|error| {
            bad(format!(
                "`deadline` must be a duration such as \"48h\" or \"30m\": {error}"
            ))
        })?;
        if deadline.is_zero() || deadline > open::MAX_DEADLINE {
            return Err(bad(format!(
                "`deadline` must be longer than 0s and at most {}",
                humantime::format_duration(open::MAX_DEADLINE)
            )));
        }
        let on_timeout = match self.on_timeout.as_deref() {
            None => OnTimeout::Fail,
            Some(text) => OnTimeout::parse(text).map_err(bad)?,
        };
        if let Some(summary) = &self.proposal.summary
            && (summary.trim().is_empty() || summary.chars().count() > MAX_SUMMARY_CHARS)
        {
            return Err(bad(format!(
                "`proposal.summary` must be 1 to {MAX_SUMMARY_CHARS} characters"
            )));
        }
        let notify = self.notify.map(|notify| open::Notify {
            body: self.proposal.summary.clone().unwrap_or_else(|| {
                format!(
                    "Approval needed for proposal `{}` (wait `{}`).",
                    self.proposal.id, self.wait_id
                )
            }),
            source: notify.slack.source,
            channel: notify.slack.channel,
        });
        Ok(OpenRequest {
            fencing_token: self.fencing_token,
            wait_id: self.wait_id,
            expects: self.expects,
            proposal_id: self.proposal.id,
            proposal_digest: self.proposal.digest,
            deadline,
            on_timeout,
            notify,
        })
    }
}

#[utoipa::path(post, path = "/v1/runs/{id}/waits", tag = "waits", params(("id" = String, Path, description = "The id")), request_body = OpenBody, responses((status = 201, description = "The wait, opened", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn open_wait(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    body: Result<Json<OpenBody>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    principal.require(Scope::RunsWrite)?;
    let run = super::runs::visible_run(&state, &principal, &id).await?;
    let Json(body) = body.map_err(ApiError::from)?;
    let request = body.check()?;
    if let Some(notify) = &request.notify {
        crate::config::check_approval_notify(
            &state.live.current().settings.sources,
            &notify.source,
            &run.tenant_id,
            &notify.channel,
        )
        .map_err(ApiError::BadRequest)?;
    }
    let opened = open::open(&state.store, &id, &request, now_millis())
        .await
        .map_err(open_error)?;
    tracing::info!(run_id = %id, wait_id = %opened.wait.wait_id, deadline = %millis_to_rfc3339(opened.wait.deadline), "run opened a wait");
    let mut view = wait_view(&opened.wait);
    view["resume_token"] = json!(opened.resume_token);
    view["run_status"] = json!(opened.run.status);
    Ok((StatusCode::CREATED, Json(view)))
}

fn open_error(error: OpenError) -> ApiError {
    match error {
        OpenError::NotFound(_) => ApiError::NotFound(error.to_string()),
        OpenError::StaleToken { .. } | OpenError::LeaseLost(_) => ApiError::Refused {
            status: StatusCode::CONFLICT,
            error: "lease_lost",
            detail: error.to_string(),
        },
        OpenError::NotDispatched { .. } => ApiError::Refused {
            status: StatusCode::CONFLICT,
            error: "run_not_dispatched",
            detail: error.to_string(),
        },
        OpenError::DuplicateWait { .. } => ApiError::Refused {
            status: StatusCode::CONFLICT,
            error: "duplicate_wait",
            detail: error.to_string(),
        },
        OpenError::Db(db) => ApiError::Database(db),
    }
}

pub(crate) fn wait_view(w: &wait::Model) -> Value {
    json!({
        "run_id": w.run_id,
        "wait_id": w.wait_id,
        "expects": w.expects,
        "proposal": {"id": w.proposal_id, "digest": w.proposal_digest},
        "status": w.status,
        "on_timeout": w.on_timeout,
        "deadline": millis_to_rfc3339(w.deadline),
        "decision": w.decision,
        "actor": w.actor,
        "resumed_by": w.resumed_by,
        "resume_dispatch_id": w.dispatch_id,
        "created_at": millis_to_rfc3339(w.created_at),
        "ended_at": w.ended_at.map(millis_to_rfc3339),
    })
}

/// A run's waits, oldest first (never their tokens).
#[utoipa::path(get, path = "/v1/runs/{id}/waits", tag = "waits", params(("id" = String, Path, description = "The id")), responses((status = 200, description = "The run's waits", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn list_waits(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::Read)?;
    super::runs::visible_run(&state, &principal, &id).await?;
    let waits = state.store.waits_of_run(&id).await?;
    Ok(Json(
        json!({ "waits": waits.iter().map(wait_view).collect::<Vec<_>>() }),
    ))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ResumeBody {
    tenant_id: String,
    token: String,
    proposal_digest: String,
    decision: String,
    /// Who decided: the calling token's name, which is also the default.
    #[serde(default)]
    actor: Option<String>,
}

#[utoipa::path(post, path = "/v1/waits/resume", tag = "waits", params(("Idempotency-Key" = String, Header, description = "The delivery id: a copy answers `duplicate`")), request_body(content = ResumeBody, content_type = "application/json"), responses((status = 200, description = "The delivery's outcome (routed, duplicate, no_trigger_match, entity_locked, ...)", body = crate::intake::Answer), (status = "default", description = "A refusal: the delivery's outcome (invalid_event 400, rate_limited 429, ...) or a refusal before intake", body = super::openapi::IntakeRefusal)))]
async fn post_resume(
    State(state): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if let Err(error) = principal.require(Scope::EventsWrite) {
        return error.into_response();
    }
    if !super::error::declares_json(&headers) {
        return ApiError::unsupported_media_type().into_response();
    }
    let body = match intake_answer::body(body, &state) {
        Ok(body) => body,
        Err(error) => return error.into_response(),
    };
    let invalid =
        |detail: String| intake_answer::refuse(Outcome::InvalidEvent, detail, Style::Standard);
    let key = match headers
        .get("idempotency-key")
        .map(|k| std::str::from_utf8(k.as_bytes()))
    {
        Some(Ok(key)) if !key.trim().is_empty() && key.len() <= MAX_KEY_LEN => key.to_owned(),
        Some(_) => {
            return invalid(format!(
                "`Idempotency-Key` must be 1 to {MAX_KEY_LEN} characters of UTF-8 text"
            ));
        }
        None => return invalid("missing `Idempotency-Key` header: it is the delivery id".into()),
    };
    let mut value: Value = match serde_json::from_slice(&body) {
        Ok(value) => value,
        Err(error) => return invalid(format!("invalid resume JSON: {error}")),
    };
    let request: ResumeBody = match serde_json::from_value(value.clone()) {
        Ok(request) => request,
        Err(error) => return invalid(format!("invalid resume: {error}")),
    };
    let actor = request.actor.unwrap_or_else(|| principal.name.clone());
    for (field, text) in [
        ("tenant_id", &request.tenant_id),
        ("token", &request.token),
        ("proposal_digest", &request.proposal_digest),
        ("decision", &request.decision),
        ("actor", &actor),
    ] {
        if let Err(detail) = open::check_id(field, text) {
            return invalid(detail);
        }
    }
    let claim = ResumeClaim {
        token: request.token,
        proposal_digest: Some(request.proposal_digest),
        decision: request.decision,
        actor: Some(actor),
        caller: Some(principal.name.clone()),
    };
    if !principal.sees(&request.tenant_id) {
        return ApiError::Refused {
            status: StatusCode::FORBIDDEN,
            error: "tenant_forbidden",
            detail: format!(
                "token `{}` may not resume waits of tenant `{}`",
                principal.name, request.tenant_id
            ),
        }
        .into_response();
    }
    if let Some(token) = value.get_mut("token") {
        *token = json!(redacted(&claim.token));
    }
    let intake_id = Uuid::now_v7();
    let event = Event {
        channel: Channel::Webhook,
        event_type: "wait.resume".into(),
        tenant_id: request.tenant_id,
        // Filled with the waiting run's entity when the token names one.
        target_entity_id: String::new(),
        payload: json!({ "resume": value }),
        raw_ref: Delivery::raw_ref(intake_id),
    };
    let tenant = event.tenant_id.clone();
    let mut delivery =
        Delivery::new(intake_id, API_SOURCE, key, DeliveryBody::Route(event)).scoped_to(&tenant);
    delivery.raw = Some(Raw {
        content_type: "application/json".into(),
        bytes: body,
    });
    submit_resume(&state, delivery, claim, Style::Standard).await
}

fn redacted(token: &str) -> String {
    format!("redacted:sha256:{}", &crate::waits::token_hash(token)[..16])
}

/// Submits `delivery` as a resume when its event's payload carries `resume` (at `at`: `[]` for
/// a canonical event, `["data"]` for a CloudEvent), else to the intake writers as usual. A
/// malformed `resume` is recorded `invalid_event`. `caller` is who sent it (a token's or a
/// source's name): the resume's actor must be the caller.
pub(crate) async fn resume_or_submit(
    state: &AppState,
    mut delivery: Delivery,
    at: &[&str],
    caller: &str,
    style: Style,
) -> Response {
    let found = match &delivery.body {
        DeliveryBody::Route(event) => {
            let mut node = Some(&event.payload);
            for key in at {
                node = node.and_then(|n| n.get(*key));
            }
            ResumeClaim::in_payload(node.and_then(|n| n.get("resume")), caller)
        }
        _ => None,
    };
    match found {
        None => intake_answer::submit(state, delivery, style).await,
        Some(Err(detail)) => {
            delivery.body = DeliveryBody::Invalid { detail };
            delivery.payload_text = None;
            intake_answer::submit(state, delivery, style).await
        }
        Some(Ok(claim)) => {
            if let DeliveryBody::Route(event) = &mut delivery.body {
                resume::redact_token(&mut event.payload, at);
                delivery.payload_text = Some(crate::intake::payload_text(&event.payload));
            }
            submit_resume(state, delivery, claim, style).await
        }
    }
}

/// Decides a resume delivery and answers once it is committed, within `server.intake_timeout`
/// like every intake answer (503 otherwise: retrying is safe, a copy answers `duplicate`).
pub(crate) async fn submit_resume(
    state: &AppState,
    delivery: Delivery,
    claim: ResumeClaim,
    style: Style,
) -> Response {
    let live = state.live.current();
    let timeout = live.settings.loaded.config.server.intake_timeout;
    let store = state.store.clone();
    let wake = state.wake.clone();
    let task = tokio::spawn(async move {
        let decided = resume::resume(&store, &live, &delivery, &claim, now_millis()).await;
        if let Ok(resolved) = &decided {
            if resolved.resumed {
                match resolved.answer.workflow_id.as_deref() {
                    Some(workflow) => wake.runs_created_in([workflow]),
                    None => wake.runs_created(),
                }
            }
            crate::intake::log_decision(
                &resolved.answer,
                &delivery.source,
                &delivery.delivery_id,
                delivery.body.event().map(|e| e.tenant_id.as_str()),
            );
        }
        decided
    });
    match tokio::time::timeout(timeout, task).await {
        Ok(Ok(Ok(resolved))) => intake_answer::respond(resolved.answer, style),
        Ok(Ok(Err(error))) => ApiError::from(StoreUnavailable(error.to_string())).into_response(),
        Ok(Err(panicked)) => {
            ApiError::from(StoreUnavailable(format!("resume task failed: {panicked}")))
                .into_response()
        }
        Err(_) => ApiError::from(StoreUnavailable(format!(
            "not committed within {} (server.intake_timeout)",
            humantime::format_duration(timeout)
        )))
        .into_response(),
    }
}
