//! `/v1/revisions`: every config revision that came into force, and one revision's content
//! (workflows with triggers, source and target names), as a tenant-limited caller may see it.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use super::admin::{millis_to_rfc3339, parse_limit, query};
use super::auth::Principal;
use super::{ApiError, AppState};
use crate::config::Scope;
use crate::store::revisions::Revision;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/revisions", get(list))
        .route("/v1/revisions/{id}", get(one))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct RevisionsQuery {
    limit: Option<String>,
    /// Only revisions older than this revision id (`next_before`).
    before: Option<String>,
}

/// A revision as the API shows it (`content` only for one revision).
fn view(revision: Revision, principal: &Principal, with_content: bool) -> Value {
    let content = revision.content.visible_to(|t| principal.sees(t));
    let mut view = json!({
        "id": revision.id,
        "config_revision": revision.hash,
        "in_force_from": millis_to_rfc3339(revision.in_force_from),
        "in_force_until": revision.in_force_until.map(millis_to_rfc3339),
        "workflows": content.workflows.len(),
    });
    if with_content {
        view["content"] = serde_json::to_value(&content).unwrap_or(Value::Null);
    }
    view
}

#[utoipa::path(get, path = "/v1/revisions", operation_id = "list_revisions", tag = "config", params(RevisionsQuery), responses((status = 200, description = "A page of config revisions", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn list(
    State(state): State<AppState>,
    principal: Principal,
    q: Result<Query<RevisionsQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::Read)?;
    let q = query(q)?;
    let limit = parse_limit(q.limit.as_deref())?;
    let rows = state.store.revisions(q.before.as_deref(), limit).await?;
    let next_before = (rows.len() as u64 == limit)
        .then(|| rows.last().map(|r| r.id.clone()))
        .flatten();
    let rows: Vec<Value> = rows
        .into_iter()
        .map(|r| view(r, &principal, false))
        .collect();
    Ok(Json(
        json!({ "revisions": rows, "next_before": next_before }),
    ))
}

/// One revision by its id or by its `config_revision` hash (as ledger rows name it).
#[utoipa::path(get, path = "/v1/revisions/{id}", operation_id = "get_revision", tag = "config", params(("id" = String, Path, description = "The id")), responses((status = 200, description = "The revision", body = serde_json::Value), (status = "default", description = "A refusal", body = super::openapi::Problem)))]
async fn one(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::Read)?;
    let revision = state
        .store
        .revision(&id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no config revision `{id}`")))?;
    Ok(Json(view(revision, &principal, true)))
}
