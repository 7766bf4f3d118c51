//! Workflows per config revision (live, shadow, draft, disabled; triggers and priorities;
//! target), with each workflow's outcomes over the last 24 hours (for a shadow: what it would
//! have taken, from which live workflow, with example deliveries), and the revisions that
//! came into force.

use std::collections::BTreeMap;

use axum::Router;
use axum::extract::{Query, State};
use axum::response::Response;
use axum::routing::get;
use serde::Deserialize;
use switchyard_store::now_millis;

use super::session::Viewer;
use super::{Chrome, ConsoleError, given, render, stamp};
use crate::config::Scope;
use crate::http::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/ui/workflows", get(page))
}

#[derive(Debug, Default, Deserialize)]
struct Filters {
    /// A revision id or hash; default the one in force.
    revision: Option<String>,
}

#[derive(Debug)]
struct Row {
    id: String,
    tenant: String,
    status: String,
    target: String,
    triggers: Vec<String>,
    lock_ttl: String,
    /// The principal it runs as (in the revision in force; empty for past revisions).
    run_as: String,
    /// Why it starts no runs now (revision in force only): `authority_unavailable`'s reason.
    degraded: Option<String>,
    /// (outcome, count) over the last 24 hours.
    outcomes: Vec<(String, i64)>,
    /// For a shadow workflow: what it would have done over the last 24 hours.
    shadow: Option<crate::shadow::ShadowStats>,
    /// (run status, count) of its runs created in the last 24 hours: `superseded` apart from
    /// `failed`.
    runs: Vec<(String, i64)>,
    /// Its deliveries of the last 24 hours, hourly: routed up, refused down.
    spark: super::chart::Spark,
    /// Its dispatch lag now: how long its earliest-due pending dispatch has been due, and
    /// since when it is pending (`None`: nothing pending).
    lag: Option<Lag>,
}

#[derive(Debug)]
struct Lag {
    /// How long it has been due without a dispatcher or worker taking it (`0s` when none is).
    waiting: String,
    /// Whether that is more than a minute.
    behind: bool,
    /// When the earliest-due pending dispatch was written (UTC).
    since: String,
    /// The same, short: the time of day within the last 24 hours, else the date.
    since_short: String,
}

#[derive(Debug)]
struct RevisionLink {
    id: String,
    hash: String,
    from: String,
    until: String,
    current: bool,
}

#[derive(askama::Template)]
#[template(path = "workflows.html")]
struct Page {
    chrome: Chrome,
    hash: String,
    from: String,
    until: String,
    in_force: bool,
    rows: Vec<Row>,
    unrouted: Vec<(String, i64)>,
    revisions: Vec<RevisionLink>,
}

async fn page(
    viewer: Viewer,
    State(state): State<AppState>,
    Query(q): Query<Filters>,
) -> Result<Response, ConsoleError> {
    viewer.require(Scope::Read)?;
    let live = state.live.current();
    let wanted = given(&q.revision).unwrap_or(live.revision()).to_owned();
    let revision = state
        .store
        .revision(&wanted)
        .await?
        .ok_or_else(|| ConsoleError::not_found("config revision"))?;
    let tenants = viewer.principal.tenant_filter(None);
    let counts = state
        .store
        .outcome_counts(tenants.as_deref(), now_millis() - 24 * 60 * 60 * 1000)
        .await?;
    let mut runs_by_workflow: BTreeMap<String, Vec<(String, i64)>> = BTreeMap::new();
    for (workflow, status, n) in state
        .store
        .run_status_counts(tenants.as_deref(), now_millis() - 24 * 60 * 60 * 1000)
        .await?
    {
        runs_by_workflow
            .entry(workflow)
            .or_default()
            .push((status, n));
    }
    let mut sparks = super::chart::per_item(
        &state,
        tenants.as_deref(),
        switchyard_store::ledger::ChartBy::Workflow,
    )
    .await?;
    let mut by_workflow: BTreeMap<Option<String>, Vec<(String, i64)>> = BTreeMap::new();
    for (workflow, outcome, n) in counts {
        by_workflow.entry(workflow).or_default().push((outcome, n));
    }
    let mut shadows = if revision
        .content
        .workflows
        .iter()
        .any(|w| w.workflow.status == switchyard_core::WorkflowStatus::Shadow)
    {
        crate::shadow::last_day(&state.store, tenants.as_deref(), now_millis()).await?
    } else {
        Default::default()
    };
    let content = revision
        .content
        .clone()
        .visible_to(|t| viewer.principal.sees(t));
    let in_force = revision.in_force_until.is_none() && revision.hash == live.revision();
    let degraded = live.authority.degraded(now_millis());
    let ids: Vec<&str> = content
        .workflows
        .iter()
        .map(|w| w.workflow.id.as_str())
        .collect();
    let heads = state.store.pending_heads(&ids).await?;
    let now = now_millis();
    let rows = content
        .workflows
        .iter()
        .map(|w| Row {
            run_as: if in_force {
                live.authority
                    .run_as(&w.workflow.id)
                    .map(|p| format!("{} ({})", p.id, p.kind.as_str()))
                    .unwrap_or_default()
            } else {
                String::new()
            },
            degraded: in_force
                .then(|| {
                    degraded
                        .get(w.workflow.id.as_str())
                        .map(ToString::to_string)
                })
                .flatten(),
            id: w.workflow.id.clone(),
            tenant: w.workflow.tenant_id.clone(),
            status: w.workflow.status.as_str().to_owned(),
            target: w.target.clone(),
            triggers: w
                .workflow
                .triggers
                .iter()
                .map(|t| format!("{} {} @ {}", t.channel, t.event_type, t.priority))
                .collect(),
            lock_ttl: humantime::format_duration(w.workflow.lock_ttl).to_string(),
            outcomes: by_workflow
                .get(&Some(w.workflow.id.clone()))
                .cloned()
                .unwrap_or_default(),
            shadow: (w.workflow.status == switchyard_core::WorkflowStatus::Shadow)
                .then(|| shadows.remove(&w.workflow.id).unwrap_or_default()),
            runs: runs_by_workflow
                .get(&w.workflow.id)
                .cloned()
                .unwrap_or_default(),
            spark: sparks.remove(&w.workflow.id).unwrap_or_default(),
            lag: heads.get(&w.workflow.id).map(|head| {
                let lag = head.lag(now);
                Lag {
                    waiting: humantime::format_duration(std::time::Duration::from_secs(
                        u64::try_from(lag / 1000).unwrap_or(0),
                    ))
                    .to_string(),
                    behind: lag > 60_000,
                    since: stamp(head.created_at),
                    since_short: {
                        let full = stamp(head.created_at);
                        let (date, time) = full.split_once(' ').unwrap_or((&full, ""));
                        if now - head.created_at < 24 * 60 * 60 * 1000 {
                            time.to_owned()
                        } else {
                            date.to_owned()
                        }
                    },
                }
            }),
        })
        .collect();
    let listed = state.store.revisions(None, 20).await?;
    let page = Page {
        chrome: viewer.chrome("workflows"),
        hash: revision.hash.clone(),
        from: stamp(revision.in_force_from),
        until: revision.in_force_until.map_or("now".into(), stamp),
        in_force: revision.in_force_until.is_none(),
        rows,
        unrouted: by_workflow.remove(&None).unwrap_or_default(),
        revisions: listed
            .into_iter()
            .map(|r| RevisionLink {
                current: r.id == revision.id,
                from: stamp(r.in_force_from),
                until: r.in_force_until.map_or("now".into(), stamp),
                id: r.id,
                hash: r.hash,
            })
            .collect(),
    };
    Ok(render(&page))
}
