//! Alerts: what is firing and what resolved lately (the viewer's tenants' alerts; alerts about
//! the daemon itself for viewers who see every tenant), each notifier's delivery health, and
//! acknowledging or silencing an alert (`admin`, with the session's CSRF token).

use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;
use switchyard_store::alerts::{AlertChangeError, AlertFilter};
use switchyard_store::now_millis;

use super::session::Viewer;
use super::{Chrome, ConsoleError, render, stamp};
use crate::config::Scope;
use crate::http::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui/alerts", get(list))
        .route("/ui/alerts/{id}/ack", post(acknowledge))
        .route("/ui/alerts/{id}/silence", post(silence))
}

/// Most alerts shown at once.
const SHOWN: u64 = 200;

#[derive(Debug)]
struct Row {
    id: String,
    rule: String,
    kind: String,
    scope: String,
    state: String,
    summary: String,
    numbers: String,
    since: String,
    fired: String,
    resolved: String,
    acknowledged: String,
    silenced_until: String,
}

#[derive(Debug)]
struct NotifierRow {
    name: String,
    kind: String,
    ok: bool,
    last_success: String,
    last_error: String,
    failures: u32,
}

#[derive(askama::Template)]
#[template(path = "alerts.html")]
struct Page {
    chrome: Chrome,
    rows: Vec<Row>,
    notifiers: Vec<NotifierRow>,
    can_change: bool,
}

async fn list(viewer: Viewer, State(state): State<AppState>) -> Result<Response, ConsoleError> {
    viewer.require(Scope::Read)?;
    let filter = AlertFilter {
        state: None,
        tenants: viewer.principal.tenant_filter(None),
        limit: SHOWN,
    };
    let now = now_millis();
    let alerts = state.store.list_alerts(&filter).await?;
    let healths = state.alerts.notifiers();
    let live = state.live.current();
    // Notifier health is about the daemon, not a tenant: only for viewers of every tenant.
    let notifiers = if viewer.principal.sees_every_tenant() {
        live.settings
            .notifiers
            .iter()
            .map(|n| {
                let health = healths.get(n.name()).cloned().unwrap_or_default();
                NotifierRow {
                    name: n.name().to_owned(),
                    kind: n.kind().to_owned(),
                    ok: !health.failing(),
                    last_success: health.last_success.unwrap_or_default(),
                    last_error: health.last_error.unwrap_or_default(),
                    failures: health.consecutive_failures,
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    let page = Page {
        chrome: viewer.chrome("alerts"),
        can_change: viewer.principal.has(Scope::Admin),
        notifiers,
        rows: alerts
            .into_iter()
            .map(|a| Row {
                acknowledged: a
                    .acknowledged_at
                    .map(|at| {
                        format!(
                            "{} by {}",
                            stamp(at),
                            a.acknowledged_by.clone().unwrap_or_default()
                        )
                    })
                    .unwrap_or_default(),
                silenced_until: a
                    .silenced_until
                    .filter(|u| *u > now)
                    .map(stamp)
                    .unwrap_or_default(),
                since: stamp(a.since),
                fired: stamp(a.fired_at),
                resolved: a.resolved_at.map(stamp).unwrap_or_default(),
                id: a.id,
                rule: a.rule,
                kind: a.kind,
                scope: a.scope,
                state: a.state,
                summary: a.summary,
                numbers: a.numbers,
            })
            .collect(),
    };
    Ok(render(&page))
}

#[derive(Debug, Deserialize)]
struct SilenceForm {
    #[serde(default)]
    csrf: String,
    /// How long, e.g. `2h`.
    #[serde(default, rename = "for")]
    duration: String,
}

fn changed(
    result: Result<switchyard_store::entities::alert::Model, AlertChangeError>,
) -> Result<Response, ConsoleError> {
    match result {
        Ok(alert) => Ok(Redirect::to(&format!("/ui/alerts#{}", alert.id)).into_response()),
        Err(AlertChangeError::NotFound) => Err(ConsoleError::not_found("alert")),
        Err(AlertChangeError::Db(error)) => Err(error.into()),
    }
}

async fn acknowledge(
    viewer: Viewer,
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: Result<Form<super::session::CsrfForm>, FormRejection>,
) -> Result<Response, ConsoleError> {
    viewer.check_csrf_form(form)?;
    viewer.require(Scope::Admin)?;
    let tenants = viewer.principal.tenant_filter(None);
    changed(
        state
            .store
            .acknowledge_alert(
                &id,
                tenants.as_deref(),
                &viewer.principal.name,
                now_millis(),
            )
            .await,
    )
}

async fn silence(
    viewer: Viewer,
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: Result<Form<SilenceForm>, FormRejection>,
) -> Result<Response, ConsoleError> {
    let form = form.map(|Form(f)| f).unwrap_or(SilenceForm {
        csrf: String::new(),
        duration: String::new(),
    });
    viewer.check_csrf(&form.csrf)?;
    viewer.require(Scope::Admin)?;
    let duration = humantime::parse_duration(form.duration.trim())
        .ok()
        .filter(|d| *d <= std::time::Duration::from_secs(30 * 86_400))
        .ok_or_else(|| {
            ConsoleError::new(
                StatusCode::BAD_REQUEST,
                "Silence for a duration such as 30m, 2h or 1d (at most 30 days).",
            )
        })?;
    let now = now_millis();
    let tenants = viewer.principal.tenant_filter(None);
    changed(
        state
            .store
            .silence_alert(
                &id,
                tenants.as_deref(),
                now + duration.as_millis() as i64,
                &viewer.principal.name,
                now,
            )
            .await,
    )
}
