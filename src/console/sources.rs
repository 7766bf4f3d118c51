//! Sources and targets: each configured source (with its tenants, the ingest URL to paste into
//! its provider, its last delivery and, for mailboxes, the poller's health) and each target's
//! delivery health and backlog. A tenant-limited viewer
//! sees the sources of its tenants, each with only its tenants named.

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use switchyard_store::now_millis;

use super::session::Viewer;
use super::{Chrome, ConsoleError, render};
use crate::config::Scope;
use crate::http::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/ui/sources", get(page))
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
    pending: i64,
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

async fn page(
    viewer: Viewer,
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ConsoleError> {
    viewer.require(Scope::Read)?;
    let live = state.live.current();
    let statuses = state.sources.snapshot();
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
                _ => ("receives signed HTTP deliveries".into(), true),
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
            }
        })
        .collect();
    let tenants = viewer.principal.tenant_filter(None);
    for row in &mut sources {
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
    let pending = state.store.pending_by_target().await?;
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
                .find(|(name, _, _)| name == t.name())
                .map_or((0, None), |(_, count, oldest)| (*count, Some(*oldest)));
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
