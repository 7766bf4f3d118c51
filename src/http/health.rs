//! `GET /healthz` (the process is up) and `GET /readyz` (the database answers, every intake
//! writer is running and committing, and no mailbox is failing repeatedly). Neither needs a
//! token, so load balancers can call them; without one `/readyz` answers only
//! `{"status": "ready"}` (200) or `{"status": "not_ready"}` (503). With a token that has `read`
//! and sees every tenant it also says why: the database, each writer and source, each dispatch
//! target (last success, consecutive failures, pending runs and the age of the oldest) and the
//! degraded workflows, whose names and errors are not for anyone who can reach the port. A
//! struggling worker never makes intake unready: the outbox holds its runs, and refusing
//! deliveries would only lose them upstream. The pending figures are bounded probes (at most
//! `PENDING_COUNT_CAP` index entries per target and the first row of `dispatches_due`, never a
//! count of the backlog), and `/readyz` reads them at most once per [`PENDING_FRESH`] however
//! often it is polled ([`PendingCache`]).

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use switchyard_store::now_millis;

use super::auth::bearer_principal;
use super::{ApiError, AppState};
use crate::config::Scope;

/// How long `/readyz` answers with the pending counts it last read.
pub const PENDING_FRESH: std::time::Duration = std::time::Duration::from_secs(1);

/// Pending dispatches per target as last read, and when: `/readyz` is polled often (load
/// balancers; the bench every 100 ms, which once slowed a drain behind 180,000 pending runs to
/// 500-700 runs/s when each poll counted every pending row). Concurrent pollers wait for one
/// read.
#[derive(Debug, Default)]
pub struct PendingCache(tokio::sync::Mutex<Option<(std::time::Instant, Pending)>>);

/// Each configured target's bounded backlog figure.
type Pending = Vec<switchyard_store::outbox::PendingFigure>;

impl PendingCache {
    async fn get(&self, store: &switchyard_store::Store, targets: &[&str]) -> Pending {
        let mut cached = self.0.lock().await;
        if let Some((at, pending)) = cached.as_ref()
            && at.elapsed() < PENDING_FRESH
            && pending.len() == targets.len()
            && pending.iter().zip(targets).all(|(p, t)| p.target == *t)
        {
            return pending.clone();
        }
        match store.pending_of_targets(targets).await {
            Ok(pending) => {
                *cached = Some((std::time::Instant::now(), pending.clone()));
                pending
            }
            Err(_) => Vec::new(),
        }
    }
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

#[utoipa::path(get, path = "/healthz", tag = "meta", security(()), responses((status = 200, description = "The process is up", body = serde_json::Value)))]
async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// Whether a `/readyz` caller may read the detail: a configured token with `read` that sees
/// every tenant. No token is a probe (the bare status); a wrong one is 401, counted like any
/// refused token.
fn shows_detail(headers: &HeaderMap, state: &AppState) -> Result<bool, ApiError> {
    match bearer_principal(headers, &state.live.current()) {
        None => Ok(false),
        Some(None) => Err(ApiError::Unauthorized("wrong bearer token")),
        Some(Some(principal)) => Ok(principal.has(Scope::Read) && principal.sees_every_tenant()),
    }
}

#[utoipa::path(get, path = "/readyz", tag = "meta", security((), ("bearer" = [])), responses((status = 200, description = "Ready (the detail with a `read` token that sees every tenant)", body = serde_json::Value), (status = 503, description = "Not ready, and why", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn readyz(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let detail = shows_detail(&headers, &state)?;
    let database = match state.store.ping().await {
        Ok(()) => json!({"ok": true}),
        Err(error) => json!({"ok": false, "error": error.to_string()}),
    };
    let unhealthy = state.sources.unhealthy();
    let writers = state.intake.writers();
    let writers_ok = writers.iter().all(|w| w.healthy);
    // A Socket Mode source none of whose connections is open receives nothing.
    let sockets_down = state.sockets.down();
    let ready = database["ok"] == json!(true)
        && unhealthy.is_empty()
        && writers_ok
        && sockets_down.is_empty();
    let (status, word) = if ready {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not_ready")
    };
    let reload_refused = state.alerts.reload_refused();
    if !detail {
        // A refused reload is no unreadiness (the revision before it serves), but a probe
        // should see that the file on disk is not what runs.
        if reload_refused.is_some() {
            return Ok((
                status,
                Json(json!({"status": word, "config_reload_refused": true})),
            ));
        }
        return Ok((status, Json(json!({"status": word}))));
    }
    let config_reload = match reload_refused {
        Some((at, error)) => json!({
            "refused": true,
            "at": super::millis_to_rfc3339(at),
            "error": error,
        }),
        None => json!({"refused": false}),
    };
    Ok((
        status,
        Json(json!({
            "status": word,
            "ready": ready,
            "config_revision": state.live.current().revision(),
            "config_reload": config_reload,
            "database": database,
            "intake": {"ok": writers_ok, "writers": writers},
            "sources": state.sources.snapshot(),
            "targets": targets(&state).await,
            "unhealthy_sources": unhealthy.into_iter().map(|(name, _)| name).collect::<Vec<_>>(),
            "socket_mode": state.sockets.snapshot(),
            "unready_socket_sources": sockets_down,
            "degraded_workflows": degraded_workflows(&state),
            "notifiers": notifiers(&state),
            "failing_notifiers": state.alerts.notifiers().into_iter().filter(|(_, h)| h.failing()).map(|(name, _)| name).collect::<Vec<_>>(),
        })),
    ))
}

/// Live workflows that start no runs because their principal may not act, with why (a
/// detail, not a readiness failure: the daemon still records every event).
fn degraded_workflows(state: &AppState) -> Value {
    let live = state.live.current();
    let mut degraded: Vec<(&str, String)> = live
        .authority
        .degraded(now_millis())
        .into_iter()
        .map(|(workflow, refusal)| (workflow, refusal.to_string()))
        .collect();
    degraded.sort();
    degraded
        .into_iter()
        .map(|(workflow, detail)| {
            json!({"workflow_id": workflow, "outcome": "authority_unavailable", "detail": detail})
        })
        .collect()
}

/// Each configured notifier with its delivery health (a notifier that cannot deliver is shown,
/// not made a readiness failure: intake is fine, and the alert is kept and retried).
fn notifiers(state: &AppState) -> Value {
    let healths = state.alerts.notifiers();
    let live = state.live.current();
    let mut notifiers = serde_json::Map::new();
    for notifier in &live.settings.notifiers {
        let health = healths.get(notifier.name()).cloned().unwrap_or_default();
        notifiers.insert(
            notifier.name().to_owned(),
            json!({
                "kind": notifier.kind(),
                "ok": !health.failing(),
                "last_success": health.last_success,
                "last_failure": health.last_failure,
                "last_error": health.last_error,
                "consecutive_failures": health.consecutive_failures,
            }),
        );
    }
    Value::Object(notifiers)
}

/// Each target in force with its delivery health and outbox backlog.
async fn targets(state: &AppState) -> Value {
    let now = now_millis();
    let live = state.live.current();
    let names: Vec<&str> = live.settings.targets.iter().map(|t| t.name()).collect();
    let pending = state.pending.get(&state.store, &names).await;
    let healths = state.targets.snapshot();
    let mut targets = serde_json::Map::new();
    for target in &live.settings.targets {
        let name = target.name();
        let (count, capped, oldest) = pending
            .iter()
            .find(|p| p.target == name)
            .map_or((0, false, None), |p| (p.count, p.capped, p.oldest));
        let health = healths.get(name).cloned().unwrap_or_default();
        targets.insert(
            name.to_owned(),
            json!({
                "kind": target.kind(),
                "pending": count,
                "pending_capped": capped,
                "oldest_pending_age_secs": oldest.map(|at| (now - at).max(0) / 1000),
                "last_success": health.last_success,
                "last_failure": health.last_failure,
                "last_error": health.last_error,
                "consecutive_failures": health.consecutive_failures,
                "gone": health.gone,
            }),
        );
    }
    Value::Object(targets)
}
