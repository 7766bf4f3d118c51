//! Replays: the list (mode, revision, status, progress, who started it) and one replay's
//! report (how outcomes move, with example deliveries, and every delivery that came out
//! differently, linked to its ledger row).

use axum::Router;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::routing::get;

use super::session::Viewer;
use super::{Chrome, ConsoleError, render, stamp};
use crate::config::Scope;
use crate::http::AppState;
use crate::http::replays::{report, visible};
use crate::replay::report::{Line, thousands};
use crate::store::entities::replay;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui/replays", get(list))
        .route("/ui/replays/{id}", get(one))
}

#[derive(Debug)]
struct Summary {
    id: String,
    mode: String,
    revision: String,
    status: String,
    actor: String,
    filters: String,
    progress: String,
    percent: i64,
    differ: String,
    created: String,
}

impl Summary {
    fn of(row: &replay::Model) -> Self {
        let percent = if row.total > 0 {
            (row.done * 100 / row.total).min(100)
        } else {
            100
        };
        Self {
            id: row.id.clone(),
            mode: row.mode.clone(),
            revision: match &row.candidate_revision {
                Some(hash) => format!("candidate {hash}"),
                None => row.revision.clone(),
            },
            status: row.status.clone(),
            actor: row.actor.clone(),
            filters: filters_text(&row.filters),
            progress: format!(
                "{} / {}",
                thousands(row.done.max(0) as u64),
                thousands(row.total.max(0) as u64)
            ),
            percent,
            differ: thousands(row.differ.max(0) as u64),
            created: stamp(row.created_at),
        }
    }
}

/// The filters as `key=value` words (`all deliveries` when none).
fn filters_text(json: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    let words: Vec<String> = value
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| match (k.as_str(), v.as_i64()) {
                    ("since" | "until", Some(ms)) => format!("{k}={}", stamp(ms)),
                    _ => format!("{k}={}", v.as_str().map_or(v.to_string(), str::to_owned)),
                })
                .collect()
        })
        .unwrap_or_default();
    if words.is_empty() {
        "all deliveries".into()
    } else {
        words.join(" ")
    }
}

#[derive(askama::Template)]
#[template(path = "replays.html")]
struct ListPage {
    chrome: Chrome,
    rows: Vec<Summary>,
}

async fn list(viewer: Viewer, State(state): State<AppState>) -> Result<Response, ConsoleError> {
    viewer.require(Scope::Read)?;
    let rows = state.store.replays(None, 100).await?;
    let page = ListPage {
        chrome: viewer.chrome("replays"),
        rows: rows
            .iter()
            .filter(|r| visible(&viewer.principal, r))
            .map(Summary::of)
            .collect(),
    };
    Ok(render(&page))
}

#[derive(Debug)]
struct Different {
    intake_id: String,
    delivery_id: String,
    source: String,
    was: String,
    now: String,
    why: String,
    new_intake_id: String,
}

#[derive(askama::Template)]
#[template(path = "replay.html")]
struct OnePage {
    chrome: Chrome,
    replay: Summary,
    error: String,
    lines: Vec<Line>,
    differing: Vec<Different>,
    /// Its first deliveries, each original linked to what it became (a live replay's new row).
    taken: Vec<Different>,
}

async fn one(
    viewer: Viewer,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ConsoleError> {
    viewer.require(Scope::Read)?;
    let row = state
        .store
        .replay(&id)
        .await?
        .filter(|r| visible(&viewer.principal, r))
        .ok_or_else(|| ConsoleError::not_found("replay"))?;
    let tally = report(&state.store, &id).await?;
    let label =
        |outcome: &str, workflow: Option<&str>| crate::replay::engine::bucket(outcome, workflow);
    let different = |r: switchyard_store::entities::replay_result::Model| Different {
        was: label(&r.original_outcome, r.original_workflow_id.as_deref()),
        now: label(&r.replayed_outcome, r.replayed_workflow_id.as_deref()),
        why: r.why.unwrap_or_default(),
        new_intake_id: r.new_intake_id.unwrap_or_default(),
        intake_id: r.intake_id,
        delivery_id: r.delivery_id,
        source: r.source,
    };
    let differing = state
        .store
        .replay_results(&id, true, None, 200)
        .await?
        .into_iter()
        .map(different)
        .collect();
    let taken = state
        .store
        .replay_results(&id, false, None, 20)
        .await?
        .into_iter()
        .map(different)
        .collect();
    let page = OnePage {
        taken,
        chrome: viewer.chrome("replays"),
        replay: Summary::of(&row),
        error: row.error.clone().unwrap_or_default(),
        lines: tally.lines(),
        differing,
    };
    Ok(render(&page))
}
