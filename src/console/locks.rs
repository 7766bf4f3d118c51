//! Locks: the entity leases held now, of the tenants the viewer sees.

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
    Router::new().route("/ui/locks", get(list))
}

/// Most locks shown at once.
const SHOWN: u64 = 500;

#[derive(Debug, Default, Deserialize)]
struct Filters {
    tenant: Option<String>,
}

#[derive(Debug)]
struct Row {
    tenant: String,
    entity: String,
    run_id: String,
    fencing_token: i64,
    expires: String,
}

#[derive(askama::Template)]
#[template(path = "locks.html")]
struct Page {
    chrome: Chrome,
    tenant: String,
    rows: Vec<Row>,
    truncated: bool,
}

async fn list(
    viewer: Viewer,
    State(state): State<AppState>,
    Query(q): Query<Filters>,
) -> Result<Response, ConsoleError> {
    viewer.require(Scope::Read)?;
    let tenants = viewer.principal.tenant_filter(given(&q.tenant));
    let locks = state
        .store
        .held_leases(tenants.as_deref(), now_millis(), SHOWN)
        .await?;
    let page = Page {
        chrome: viewer.chrome("locks"),
        tenant: given(&q.tenant).unwrap_or_default().to_owned(),
        truncated: locks.len() as u64 == SHOWN,
        rows: locks
            .into_iter()
            .map(|l| Row {
                tenant: l.tenant_id,
                entity: l.target_entity_id,
                run_id: l.run_id.unwrap_or_default(),
                fencing_token: l.fencing_token,
                expires: stamp(l.expires_at),
            })
            .collect(),
    };
    Ok(render(&page))
}
