//! Runs: a listing filtered by status, workflow, entity and tenant; one run with its history,
//! lease and fencing token, dispatch and attempts, durable waits; finish, cancel and redispatch buttons for
//! tokens with `runs:write` (CSRF-checked POSTs).

use axum::extract::rejection::FormRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;
use switchyard_store::entities::run::{self, RunStatus};
use switchyard_store::now_millis;
use switchyard_store::outbox::Redispatched;
use switchyard_store::runs::{RunFilter, RunRecord};

use super::session::Viewer;
use super::{Chrome, ConsoleError, PAGE, given, query_string, render, stamp};
use crate::config::Scope;
use crate::http::AppState;
use crate::http::runs::{finish_run, parse_status, run_error, visible_run};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui/runs", get(list))
        .route("/ui/runs/{id}", get(one))
        .route("/ui/runs/{id}/finish", get(confirm_finish).post(finish))
        .route("/ui/runs/{id}/redispatch", post(redispatch))
}

#[derive(Debug, Default, Deserialize)]
struct Filters {
    status: Option<String>,
    workflow: Option<String>,
    entity: Option<String>,
    tenant: Option<String>,
    before: Option<String>,
}

#[derive(Debug)]
struct Row {
    id: String,
    status: String,
    workflow: String,
    tenant: String,
    entity: String,
    created: String,
    updated: String,
}

impl Row {
    fn of(run: &run::Model) -> Self {
        Self {
            id: run.id.clone(),
            status: run.status.as_str().to_owned(),
            workflow: run.workflow_id.clone(),
            tenant: run.tenant_id.clone(),
            entity: run.target_entity_id.clone(),
            created: stamp(run.created_at),
            updated: stamp(run.updated_at),
        }
    }
}

const STATUSES: [&str; 9] = [
    "queued",
    "dispatched",
    "needs_input",
    "completed",
    "failed",
    "cancelled",
    "expired",
    "superseded",
    "dead_lettered",
];

#[derive(askama::Template)]
#[template(path = "runs.html")]
struct ListPage {
    chrome: Chrome,
    workflow: String,
    entity: String,
    tenant: String,
    statuses: Vec<(&'static str, &'static str)>,
    rows: Vec<Row>,
    refresh: String,
    next: String,
}

async fn list(
    viewer: Viewer,
    State(state): State<AppState>,
    q: Result<Query<Filters>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ConsoleError> {
    viewer.require(Scope::Read)?;
    let Query(q) = q.map_err(|e| ConsoleError::new(StatusCode::BAD_REQUEST, &e.body_text()))?;
    let status = given(&q.status).map(parse_status).transpose()?;
    let tenants = viewer.principal.tenant_filter(given(&q.tenant));
    let filter = RunFilter {
        tenants: tenants.as_deref(),
        status,
        workflow_id: given(&q.workflow),
        target_entity_id: given(&q.entity),
        before: given(&q.before),
    };
    let runs = state.store.runs(&filter, PAGE).await?;
    let filters = [
        ("status", given(&q.status)),
        ("workflow", given(&q.workflow)),
        ("entity", given(&q.entity)),
        ("tenant", given(&q.tenant)),
    ];
    let ids: Vec<&str> = runs.iter().map(|row| row.id.as_str()).collect();
    let next = super::next_page("/ui/runs", &filters, &ids);
    let mut refresh = filters.to_vec();
    refresh.push(("before", given(&q.before)));
    let text = |v: &Option<String>| given(v).unwrap_or_default().to_owned();
    let page = ListPage {
        chrome: viewer.chrome("runs"),
        workflow: text(&q.workflow),
        entity: text(&q.entity),
        tenant: text(&q.tenant),
        statuses: super::deliveries::selectable(&STATUSES, given(&q.status)),
        rows: runs.iter().map(Row::of).collect(),
        refresh: format!("/ui/runs{}", query_string(&refresh)),
        next,
    };
    Ok(render(&page))
}

#[derive(Debug)]
struct AttemptView {
    series: i32,
    attempt: i32,
    target: String,
    result: String,
    status_code: String,
    error: String,
    started: String,
    duration_ms: String,
}

#[derive(Debug)]
struct HistoryView {
    at: String,
    status: String,
    cause: String,
    detail: String,
}

/// One durable wait of the run (never its token).
#[derive(Debug)]
struct WaitView {
    wait_id: String,
    expects: String,
    proposal: String,
    status: String,
    deadline: String,
    on_timeout: String,
    decision: String,
}

#[derive(askama::Template)]
#[template(path = "run.html")]
struct OnePage {
    chrome: Chrome,
    id: String,
    status: String,
    facts: Vec<(&'static str, String)>,
    intake_id: String,
    lease: String,
    dispatch: Vec<(&'static str, String)>,
    attempts: Vec<AttemptView>,
    history: Vec<HistoryView>,
    waits: Vec<WaitView>,
    /// The five audit questions, each with its answers.
    audit: Vec<(&'static str, Vec<(&'static str, String)>)>,
    can_write: bool,
    active: bool,
    dead_lettered: bool,
    notice: String,
}

#[derive(Debug, Deserialize)]
struct Notice {
    done: Option<String>,
}

async fn one(
    viewer: Viewer,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(notice): Query<Notice>,
) -> Result<Response, ConsoleError> {
    viewer.require(Scope::Read)?;
    // One snapshot: the run, its dispatch, history, waits and lease as of one moment.
    let tenants = viewer.principal.tenant_filter(None);
    let record = state
        .store
        .run_record(&id, tenants.as_deref())
        .await?
        .ok_or_else(|| ConsoleError::not_found("run"))?;
    let audit = crate::audit::of(&record).sections();
    let RunRecord {
        run,
        dispatch,
        attempts,
        history,
        waits,
        lease: lock,
        ..
    } = record;
    let now = now_millis();
    let lease = match &lock {
        Some(lock) if lock.held_at(now) == Some(run.id.as_str()) => format!(
            "holds {} until {} UTC (fencing token {})",
            run.target_entity_id,
            stamp(lock.expires_at),
            lock.fencing_token
        ),
        Some(lock) => match lock.held_at(now) {
            Some(other) => format!(
                "does not hold {}; run {other} holds it now",
                run.target_entity_id
            ),
            None => format!("does not hold {}; it is free", run.target_entity_id),
        },
        None => format!("does not hold {}", run.target_entity_id),
    };
    let active = matches!(run.status, RunStatus::Queued | RunStatus::Dispatched)
        || run.status.as_str() == "needs_input";
    let facts = vec![
        ("Status", run.status.as_str().to_owned()),
        ("Workflow", run.workflow_id.clone()),
        ("Tenant", run.tenant_id.clone()),
        ("Entity", run.target_entity_id.clone()),
        ("Fencing token", run.fencing_token.to_string()),
        ("Lock TTL", format!("{} s", run.lock_ttl_ms / 1000)),
        ("Created", format!("{} UTC", stamp(run.created_at))),
        ("Updated", format!("{} UTC", stamp(run.updated_at))),
        (
            "Finished",
            run.finished_at
                .map(|t| format!("{} UTC", stamp(t)))
                .unwrap_or_else(|| "not yet".into()),
        ),
    ];
    let dispatch = dispatch
        .map(|d| {
            vec![
                ("Dispatch id", d.id.clone()),
                ("Target", d.target.clone()),
                ("Status", d.status.as_str().to_owned()),
                ("Series", d.series.to_string()),
                ("Attempts", d.attempts.to_string()),
                ("Due", format!("{} UTC", stamp(d.due_at))),
                (
                    "Claimed",
                    if d.claimed_by.is_some() { "yes" } else { "no" }.into(),
                ),
                ("Reason", d.reason.clone().unwrap_or_default()),
                ("Last error", d.last_error.clone().unwrap_or_default()),
                (
                    "Delivered",
                    d.delivered_at
                        .map(|t| format!("{} UTC", stamp(t)))
                        .unwrap_or_default(),
                ),
            ]
        })
        .unwrap_or_default();
    let attempts = attempts
        .into_iter()
        .map(|a| AttemptView {
            series: a.series,
            attempt: a.attempt,
            target: a.target,
            result: a.result,
            status_code: a.status_code.map(|c| c.to_string()).unwrap_or_default(),
            error: a.error.unwrap_or_default(),
            started: stamp(a.started_at),
            duration_ms: a.duration_ms.to_string(),
        })
        .collect();
    let history = history
        .into_iter()
        .map(|h| HistoryView {
            at: stamp(h.at),
            status: h.status.as_str().to_owned(),
            cause: h.cause,
            detail: h.detail.unwrap_or_default(),
        })
        .collect();
    let waits = waits
        .into_iter()
        .map(|w| WaitView {
            proposal: format!("{} ({})", w.proposal_id, w.proposal_digest),
            status: w.status.as_str().to_owned(),
            deadline: stamp(w.deadline),
            decision: match (&w.decision, &w.actor) {
                (Some(decision), Some(actor)) => format!("{decision} by {actor}"),
                (Some(decision), None) => decision.clone(),
                _ => String::new(),
            },
            wait_id: w.wait_id,
            expects: w.expects,
            on_timeout: w.on_timeout,
        })
        .collect();
    let notice = match notice.done.as_deref() {
        Some("completed") => "Run finished as completed; its entity is free.".into(),
        Some("failed") => "Run finished as failed; its entity is free.".into(),
        Some("cancelled") => "Run cancelled; its entity is free.".into(),
        Some("redispatched") => "Run redispatched: a new attempt series is queued.".into(),
        _ => String::new(),
    };
    let page = OnePage {
        chrome: viewer.chrome("runs"),
        status: run.status.as_str().to_owned(),
        intake_id: run.intake_id.clone(),
        id: run.id,
        facts,
        lease,
        dispatch,
        attempts,
        history,
        waits,
        audit,
        can_write: viewer.principal.has(Scope::RunsWrite),
        active,
        dead_lettered: run.status == RunStatus::DeadLettered,
        notice,
    };
    Ok(render(&page))
}

#[derive(Debug, Deserialize)]
struct FinishQuery {
    #[serde(default)]
    status: String,
}

/// What finishing (or cancelling) the run will do, before it is done.
async fn confirm_finish(
    viewer: Viewer,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<FinishQuery>,
) -> Result<Response, ConsoleError> {
    viewer.require(Scope::RunsWrite)?;
    let run = visible_run(&state, &viewer.principal, &id).await?;
    let status = parse_status(&q.status)?;
    let (title, button, danger) = match status {
        RunStatus::Cancelled => ("Cancel this run?", "Cancel the run", true),
        RunStatus::Failed => ("Finish this run as failed?", "Finish as failed", true),
        RunStatus::Completed => (
            "Finish this run as completed?",
            "Finish as completed",
            false,
        ),
        other => {
            return Err(ConsoleError::new(
                StatusCode::BAD_REQUEST,
                &format!(
                    "A run is finished as completed, failed or cancelled, not {}.",
                    other.as_str()
                ),
            ));
        }
    };
    let page = super::Confirm {
        chrome: viewer.chrome("runs"),
        title: title.into(),
        lines: vec![
            format!(
                "Run {} of workflow {} on entity {} (tenant {}) is {} now.",
                run.id,
                run.workflow_id,
                run.target_entity_id,
                run.tenant_id,
                run.status.as_str()
            ),
            format!(
                "It ends {}: its entity lock is released (the next event about {} can start a run), its open waits end, and a worker still on it is refused with `lease_lost` at its next heartbeat.",
                status.as_str(),
                run.target_entity_id
            ),
            format!(
                "The run's history records it as finished by token:{}.",
                viewer.principal.name
            ),
        ],
        action: format!("/ui/runs/{}/finish", run.id),
        fields: vec![("status".into(), status.as_str().into())],
        button: button.into(),
        danger,
        back: format!("/ui/runs/{}", run.id),
    };
    Ok(render(&page))
}

#[derive(Debug, Deserialize)]
struct FinishForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    status: String,
}

/// Finishes the run as its current holder (the operator overrides the worker).
async fn finish(
    viewer: Viewer,
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: Result<Form<FinishForm>, FormRejection>,
) -> Result<Response, ConsoleError> {
    let form = form.map(|Form(f)| f).unwrap_or(FinishForm {
        csrf: String::new(),
        status: String::new(),
    });
    viewer.check_csrf(&form.csrf)?;
    viewer.require(Scope::RunsWrite)?;
    let run = visible_run(&state, &viewer.principal, &id).await?;
    let status = parse_status(&form.status)?;
    let finished = finish_run(
        &state,
        &viewer.principal,
        &id,
        run.fencing_token,
        status,
        &switchyard_store::bounded::Report::default(),
    )
    .await?;
    Ok(Redirect::to(&format!(
        "/ui/runs/{}?done={}",
        finished.id,
        finished.status.as_str()
    ))
    .into_response())
}

async fn redispatch(
    viewer: Viewer,
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: Result<Form<super::session::CsrfForm>, FormRejection>,
) -> Result<Response, ConsoleError> {
    viewer.check_csrf_form(form)?;
    viewer.require(Scope::RunsWrite)?;
    visible_run(&state, &viewer.principal, &id).await?;
    match state
        .store
        .redispatch(
            &id,
            Some(&format!("token:{}", viewer.principal.name)),
            now_millis(),
        )
        .await
        .map_err(run_error)?
    {
        Redispatched::Queued { run, dispatch_id } => {
            state.wake.runs_created_in([run.workflow_id.as_str()]);
            tracing::info!(run_id = %run.id, %dispatch_id, token = %viewer.principal.name, "dead-lettered run redispatched from the console");
            Ok(Redirect::to(&format!("/ui/runs/{}?done=redispatched", run.id)).into_response())
        }
        Redispatched::EntityLocked { held_by_run_id } => Err(ConsoleError::new(
            StatusCode::CONFLICT,
            &format!("Run {held_by_run_id} holds the entity now; redispatch after it ends."),
        )),
    }
}
