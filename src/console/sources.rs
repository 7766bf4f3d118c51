//! Sources and targets: each configured source (with its tenants, the ingest URL to paste into
//! its provider, its last delivery and, for mailboxes, the poller's health) and each target's
//! delivery health and backlog. A tenant-limited viewer
//! sees the sources of its tenants, each with only its tenants named.

use axum::Form;
use axum::Router;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use switchyard_store::now_millis;

use super::session::Viewer;
use super::{Chrome, ConsoleError, render};
use crate::config::Scope;
use crate::http::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui/sources", get(page))
        .route("/ui/sources/{name}/test", post(send_test))
}

#[derive(Debug)]
struct SourceRow {
    kind: String,
    name: String,
    tenants: String,
    health: String,
    healthy: bool,
    /// For a mailbox: where reading started and how many messages were left behind.
    started: String,
    /// Where its sender posts (`None`: a polled source).
    ingest_url: Option<String>,
    /// Its newest ledger row the viewer may see: when, outcome, detail.
    last_delivery: Option<LastDelivery>,
    /// Its deliveries of the last 24 hours, hourly: routed up, refused down.
    spark: super::chart::Spark,
    /// How it authenticates deliveries: the secret's variable, or why it has none.
    secret: String,
    /// Whether its secret is set (a signed source whose variable was read at load).
    secret_set: bool,
    /// Whether the console can send it a signed test event.
    can_test: bool,
}

#[derive(Debug)]
struct LastDelivery {
    id: String,
    at: String,
    outcome: String,
    detail: String,
}

#[derive(Debug)]
struct TargetRow {
    kind: String,
    name: String,
    /// Pending dispatches as the bounded probe counts them (`≥ 10000` past its cap).
    pending: String,
    oldest: String,
    last_success: String,
    last_failure: String,
    last_error: String,
    failures: u32,
    healthy: bool,
}

#[derive(askama::Template)]
#[template(path = "sources.html")]
struct Page {
    chrome: Chrome,
    sources: Vec<SourceRow>,
    targets: Vec<TargetRow>,
}

/// A Socket Mode source's connections in one line: how many are open, each one's envelopes,
/// reconnects, the last envelope and the last error.
fn socket_health(socket: &crate::socket_status::SocketSourceStatus) -> String {
    let at = |millis: i64| {
        chrono::DateTime::from_timestamp_millis(millis).map_or(String::new(), |t| {
            t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
        })
    };
    let connections: Vec<String> = socket
        .connections
        .iter()
        .map(|(id, c)| {
            format!(
                "#{id} {} since {}, {} envelope{}",
                match c.state {
                    crate::socket_status::ConnectionState::Open => "open",
                    crate::socket_status::ConnectionState::Draining => "draining",
                },
                at(c.opened_at),
                c.envelopes,
                if c.envelopes == 1 { "" } else { "s" }
            )
        })
        .collect();
    format!(
        "Socket Mode: {} of {} connections open{}{}; {} reconnect{}; last envelope {}{}",
        socket.open(),
        socket.wanted,
        if connections.is_empty() { "" } else { " (" },
        if connections.is_empty() {
            String::new()
        } else {
            connections.join("; ") + ")"
        },
        socket.reconnects,
        if socket.reconnects == 1 { "" } else { "s" },
        socket.last_envelope_at.map_or("never".into(), at),
        match (&socket.last_error, socket.link_disabled) {
            (_, true) => "; link_disabled: Socket Mode is off for the app".to_owned(),
            (Some(error), false) => format!("; last error: {error}"),
            (None, false) => String::new(),
        }
    )
}

async fn page(
    viewer: Viewer,
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ConsoleError> {
    viewer.require(Scope::Read)?;
    let live = state.live.current();
    let statuses = state.sources.snapshot();
    let sockets = state.sockets.snapshot();
    let base = base_url(&headers);
    let mut sources: Vec<SourceRow> = live
        .settings
        .loaded
        .config
        .sources
        .iter()
        .filter(|s| s.tenants().iter().any(|t| viewer.principal.sees(t)))
        .map(|s| {
            let (health, healthy) = match (s.kind(), statuses.get(s.name())) {
                ("email", Some(status)) => (
                    format!(
                        "{}{}; last poll {}; {} failure{} in a row{}{}",
                        if status.connected {
                            "connected"
                        } else {
                            "not connected"
                        },
                        if status.holds_lease {
                            ""
                        } else {
                            " (another replica polls)"
                        },
                        status.last_successful_poll.map_or("never".into(), |t| t
                            .format("%Y-%m-%d %H:%M:%S UTC")
                            .to_string()),
                        status.consecutive_failures,
                        if status.consecutive_failures == 1 {
                            ""
                        } else {
                            "s"
                        },
                        status
                            .auth_failure
                            .as_ref()
                            .map_or(String::new(), |kind| format!("; cannot sign in: {kind}")),
                        status
                            .last_error
                            .as_ref()
                            .map_or(String::new(), |e| format!("; last error: {e}"))
                    ),
                    status.consecutive_failures == 0,
                ),
                ("email", None) => ("poller not started".into(), false),
                _ => match sockets.get(s.name()) {
                    Some(socket) => (socket_health(socket), socket.open() > 0),
                    None => ("receives signed HTTP deliveries".into(), true),
                },
            };
            let started = statuses
                .get(s.name())
                .and_then(|status| status.started.as_ref())
                .map_or(String::new(), |p| {
                    format!(
                        "{} (from UID {}, {}); {} message{} left behind",
                        p.start_from,
                        p.first_uid,
                        p.started_at.format("%Y-%m-%d %H:%M:%S UTC"),
                        p.left_behind,
                        if p.left_behind == 1 { "" } else { "s" }
                    )
                });
            SourceRow {
                started,
                kind: s.kind().to_owned(),
                name: s.name().to_owned(),
                // A shared Slack source serves several tenants: name only the viewer's.
                tenants: viewer.principal.visible_tenants(s.tenants()).join(", "),
                health,
                healthy,
                ingest_url: crate::edge::channel_of(s)
                    .filter(|channel| channel.pollers().is_none())
                    .map(|_| format!("{base}/v1/ingest/{}/{}", s.kind(), s.name())),
                last_delivery: None,
                spark: Default::default(),
                secret: match (s.settings().signing_secret_env(), s.settings().unsigned()) {
                    (_, Some(why)) => format!("not signed ({why})"),
                    (Some(var), None) => format!("from ${var}"),
                    (None, None) => "not a signed source".into(),
                },
                secret_set: s.settings().signing_secret_env().is_some()
                    && s.settings().unsigned().is_none(),
                can_test: viewer.principal.has(Scope::Admin)
                    && live
                        .source(s.kind(), s.name())
                        .is_some_and(|r| super::test_events::untestable(r).is_none()),
            }
        })
        .collect();
    let tenants = viewer.principal.tenant_filter(None);
    let mut sparks = super::chart::per_item(
        &state,
        tenants.as_deref(),
        switchyard_store::ledger::ChartBy::Source,
    )
    .await?;
    for row in &mut sources {
        row.spark = sparks.remove(&row.name).unwrap_or_default();
        let filter = switchyard_store::ledger::Filter {
            tenants: tenants.as_deref(),
            source: Some(&row.name),
            ..Default::default()
        };
        row.last_delivery = state
            .store
            .ledger_page(filter, 1)
            .await?
            .into_iter()
            .next()
            .map(|last| LastDelivery {
                id: last.id,
                at: crate::http::millis_to_rfc3339(last.received_at),
                outcome: last.outcome,
                detail: last.detail.unwrap_or_default(),
            });
    }
    // Targets serve every tenant's workflows; a tenant-limited viewer sees those its
    // workflows use.
    let used: Vec<&str> = live
        .workflows
        .iter()
        .filter(|w| viewer.principal.sees(&w.tenant_id))
        .map(|w| live.target_of(&w.id))
        .collect();
    let limited = viewer.principal.tenants().is_some();
    let shown: Vec<&str> = live
        .settings
        .targets
        .iter()
        .map(|t| t.name())
        .filter(|name| !limited || used.contains(name))
        .collect();
    // The bounded probe `/readyz` reads, never a count of the whole backlog.
    let pending = state.store.pending_of_targets(&shown).await?;
    let healths = state.targets.snapshot();
    let now = now_millis();
    let targets = live
        .settings
        .targets
        .iter()
        .filter(|t| !limited || used.contains(&t.name()))
        .map(|t| {
            let (count, oldest) = pending
                .iter()
                .find(|figure| figure.target == t.name())
                .map_or((String::from("0"), None), |figure| {
                    let count = if figure.capped {
                        format!("≥ {}", figure.count)
                    } else {
                        figure.count.to_string()
                    };
                    (count, figure.oldest)
                });
            let health = healths.get(t.name()).cloned().unwrap_or_default();
            TargetRow {
                kind: t.kind().to_owned(),
                name: t.name().to_owned(),
                pending: count,
                oldest: oldest.map_or(String::new(), |at| {
                    humantime::format_duration(std::time::Duration::from_secs(
                        u64::try_from((now - at).max(0) / 1000).unwrap_or(0),
                    ))
                    .to_string()
                }),
                last_success: health.last_success.unwrap_or_default(),
                last_failure: health.last_failure.unwrap_or_default(),
                last_error: health.last_error.unwrap_or_default(),
                failures: health.consecutive_failures,
                healthy: health.consecutive_failures == 0 && !health.gone,
            }
        })
        .collect();
    let page = Page {
        chrome: viewer.chrome("sources"),
        sources,
        targets,
    };
    Ok(render(&page))
}

/// Sends a signed sample (`super::test_events`) to the source named `name` through its real
/// ingest route (in process: the same handler, verification and ledger as a delivery from its
/// sender), then shows the recorded delivery.
async fn send_test(
    viewer: Viewer,
    State(state): State<AppState>,
    Path(name): Path<String>,
    form: Result<Form<super::session::CsrfForm>, FormRejection>,
) -> Result<Response, ConsoleError> {
    use tower::ServiceExt as _;
    viewer.check_csrf_form(form)?;
    viewer.require(Scope::Admin)?;
    let live = state.live.current();
    let Some(kind) = live
        .settings
        .loaded
        .config
        .sources
        .iter()
        .find(|s| s.name() == name && s.tenants().iter().any(|t| viewer.principal.sees(t)))
        .map(|s| s.kind())
    else {
        return Err(ConsoleError::not_found("source"));
    };
    let Some(source) = live.source(kind, &name) else {
        return Err(ConsoleError::not_found("source"));
    };
    let delivery_id = format!("switchyard-test-{}", uuid::Uuid::now_v7());
    let sample = super::test_events::sample(
        source,
        kind,
        &name,
        &delivery_id,
        chrono::Utc::now(),
        |tenant| viewer.principal.sees(tenant),
    )
    .map_err(|why| {
        ConsoleError::new(
            StatusCode::BAD_REQUEST,
            &format!("No test event for the {kind} source `{name}`: {why}."),
        )
    })?;
    let mut request = axum::http::Request::post(&sample.path)
        .header(axum::http::header::CONTENT_TYPE, sample.content_type);
    for (header, value) in &sample.headers {
        request = request.header(header.as_str(), value.as_str());
    }
    let request = request
        .body(axum::body::Body::from(sample.body))
        .map_err(|e| ConsoleError::new(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()))?;
    let routes = crate::edge::routes(&live.settings.loaded.config.server).with_state(state.clone());
    let answer = match routes.oneshot(request).await {
        Ok(answer) => answer,
        Err(never) => match never {},
    };
    let status = answer.status();
    let bytes = axum::body::to_bytes(answer.into_body(), 64 * 1024)
        .await
        .unwrap_or_default();
    let answer: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    tracing::info!(source = %name, kind, %delivery_id, status = status.as_u16(), outcome = %answer["outcome"], token = %viewer.principal.name, "test event sent from the console");
    match answer["intake_id"].as_str() {
        Some(intake_id) => Ok(Redirect::to(&format!("/ui/deliveries/{intake_id}")).into_response()),
        None => Err(ConsoleError::new(
            StatusCode::BAD_GATEWAY,
            &format!(
                "The test event to `{name}` was answered {status} without a recorded delivery: {}",
                String::from_utf8_lossy(&bytes)
            ),
        )),
    }
}

/// The daemon's address as the viewer reached it (`X-Forwarded-Proto` and `Host`, as a
/// reverse proxy passes them), for ingest URLs to paste into a provider.
fn base_url(headers: &HeaderMap) -> String {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let scheme = header("x-forwarded-proto").unwrap_or("http");
    match header("host") {
        Some(host) => format!("{scheme}://{host}"),
        None => String::new(),
    }
}
