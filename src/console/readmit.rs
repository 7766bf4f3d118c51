//! Re-admitting deliveries from the console: one delivery, or the set a Deliveries filter
//! names, sent through intake again under the revision in force as a live replay (the same
//! `Replayer` as `POST /v1/replays`, so the new rows are linked to their originals and the
//! replay to the token that started it). Each is a confirmation page (how many, and what)
//! and then a CSRF-checked POST that needs the `admin` scope.

use axum::extract::rejection::FormRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Form, Router};
use serde::Deserialize;
use switchyard_store::entities::intake;

use super::session::Viewer;
use super::{Confirm, ConsoleError, given, render};
use crate::config::Scope;
use crate::http::AppState;
use crate::http::admin::parse_time;
use crate::replay::{Filters, Mode, Request, RevisionChoice};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui/deliveries/{id}/readmit", get(confirm_one).post(one))
        .route("/ui/readmit", get(confirm_set).post(set))
}

/// The replay filters that take exactly this ledger row: its source, delivery id, tenant
/// and the millisecond it was received.
fn filters_of(row: &intake::Model, tenants: Option<Vec<String>>) -> Filters {
    Filters {
        since: Some(row.received_at),
        until: Some(row.received_at + 1),
        source: Some(row.source.clone()),
        outcome: None,
        tenant: row.tenant_id.clone(),
        entity: None,
        delivery: Some(row.delivery_id.clone()),
        tenants,
    }
}

/// The row, visible to the viewer, and an original delivery (a re-admission is not
/// re-admitted again: its original is).
async fn original(
    viewer: &Viewer,
    state: &AppState,
    id: &str,
) -> Result<intake::Model, ConsoleError> {
    let tenants = viewer.principal.tenant_filter(None);
    let row = state
        .store
        .ledger_row(id, tenants.as_deref())
        .await?
        .ok_or_else(|| ConsoleError::not_found("delivery"))?;
    if let Some(of) = &row.replay_of {
        return Err(ConsoleError::new(
            StatusCode::CONFLICT,
            &format!(
                "This delivery is itself a re-admission (of delivery {of}); re-admit the original instead."
            ),
        ));
    }
    Ok(row)
}

async fn confirm_one(
    viewer: Viewer,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ConsoleError> {
    viewer.require(Scope::Admin)?;
    let row = original(&viewer, &state, &id).await?;
    let revision = state.live.current().revision().to_owned();
    let page = Confirm {
        chrome: viewer.chrome("deliveries"),
        title: "Re-admit 1 delivery?".into(),
        lines: vec![
            format!(
                "Delivery {} from source {} (received {} UTC), recorded as {}{}.",
                row.delivery_id,
                row.source,
                super::stamp_ms(row.received_at),
                row.outcome,
                row.target_entity_id
                    .as_deref()
                    .map_or(String::new(), |e| format!(", about {e}"))
            ),
            format!(
                "It goes through intake again under the revision in force ({revision}), as a live replay of one: it may start a run and take its entity's lock."
            ),
            format!(
                "It is recorded as a new delivery `replay:<replay id>:{}` linked to this one; the replay records you as token:{}.",
                row.delivery_id, viewer.principal.name
            ),
        ],
        action: format!("/ui/deliveries/{}/readmit", row.id),
        fields: Vec::new(),
        button: "Re-admit 1 delivery".into(),
        danger: false,
        back: format!("/ui/deliveries/{}", row.id),
    };
    Ok(render(&page))
}

async fn one(
    viewer: Viewer,
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: Result<Form<super::session::CsrfForm>, FormRejection>,
) -> Result<Response, ConsoleError> {
    viewer.check_csrf_form(form)?;
    viewer.require(Scope::Admin)?;
    let row = original(&viewer, &state, &id).await?;
    let filters = filters_of(&row, viewer.principal.tenant_filter(None));
    let replay = start(&viewer, &state, filters).await?;
    Ok(Redirect::to(&format!("/ui/replays/{replay}")).into_response())
}

/// A Deliveries filter, as the set to re-admit.
#[derive(Debug, Default, Deserialize)]
struct SetFilters {
    tenant: Option<String>,
    source: Option<String>,
    outcome: Option<String>,
    entity: Option<String>,
    delivery: Option<String>,
    payload: Option<String>,
    since: Option<String>,
    until: Option<String>,
    #[serde(default)]
    csrf: String,
}

impl SetFilters {
    /// The replay's filters, or why this set cannot be re-admitted.
    fn replay_filters(&self, viewer: &Viewer) -> Result<Filters, ConsoleError> {
        let bad = |m: &str| ConsoleError::new(StatusCode::BAD_REQUEST, m);
        if given(&self.payload).is_some() {
            return Err(bad(
                "A set to re-admit is named by tenant, source, outcome, entity, delivery id and time; a payload field search cannot name one. Narrow the set with those filters instead.",
            ));
        }
        if let Some(outcome) = given(&self.outcome) {
            outcome
                .parse::<switchyard_core::Outcome>()
                .map_err(|e| bad(&e))?;
        }
        let since = given(&self.since)
            .map(|t| parse_time("since", t))
            .transpose()?;
        let until = given(&self.until)
            .map(|t| parse_time("until", t))
            .transpose()?;
        if since.is_none() && until.is_none() && given(&self.outcome).is_none() {
            return Err(bad(
                "Name the set to re-admit with an outcome or a time window (From/To): the whole ledger is not re-admitted from the console.",
            ));
        }
        Ok(Filters {
            since,
            until,
            source: given(&self.source).map(str::to_owned),
            outcome: given(&self.outcome).map(str::to_owned),
            tenant: given(&self.tenant).map(str::to_owned),
            entity: given(&self.entity).map(str::to_owned),
            delivery: given(&self.delivery).map(str::to_owned),
            tenants: viewer.principal.tenant_filter(given(&self.tenant)),
        })
    }

    fn pairs(&self) -> Vec<(String, String)> {
        [
            ("tenant", &self.tenant),
            ("source", &self.source),
            ("outcome", &self.outcome),
            ("entity", &self.entity),
            ("delivery", &self.delivery),
            ("since", &self.since),
            ("until", &self.until),
        ]
        .into_iter()
        .filter_map(|(k, v)| given(v).map(|v| (k.to_owned(), v.to_owned())))
        .collect()
    }
}

/// The set in words: "with outcome entity_locked, from source zendesk, received from … to …".
fn described(filters: &Filters) -> String {
    let mut words = Vec::new();
    if let Some(outcome) = &filters.outcome {
        words.push(format!("with outcome {outcome}"));
    }
    if let Some(source) = &filters.source {
        words.push(format!("from source {source}"));
    }
    if let Some(tenant) = &filters.tenant {
        words.push(format!("of tenant {tenant}"));
    }
    if let Some(entity) = &filters.entity {
        words.push(format!("about entity {entity} (exactly)"));
    }
    if let Some(delivery) = &filters.delivery {
        words.push(format!("with delivery id {delivery} (exactly)"));
    }
    match (filters.since, filters.until) {
        (Some(since), Some(until)) => words.push(format!(
            "received from {} to {} UTC",
            super::stamp(since),
            super::stamp(until)
        )),
        (Some(since), None) => words.push(format!("received since {} UTC", super::stamp(since))),
        (None, Some(until)) => words.push(format!("received before {} UTC", super::stamp(until))),
        (None, None) => {}
    }
    words.join(", ")
}

async fn confirm_set(
    viewer: Viewer,
    State(state): State<AppState>,
    q: Result<Query<SetFilters>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ConsoleError> {
    viewer.require(Scope::Admin)?;
    let Query(q) = q.map_err(|e| ConsoleError::new(StatusCode::BAD_REQUEST, &e.body_text()))?;
    let filters = q.replay_filters(&viewer)?;
    let upto = uuid::Uuid::now_v7().to_string();
    let count = state.store.replay_count(&filters, &upto, true).await?;
    let revision = state.live.current().revision().to_owned();
    let what = described(&filters);
    let page = Confirm {
        chrome: viewer.chrome("deliveries"),
        title: format!(
            "Re-admit {count} deliver{}?",
            if count == 1 { "y" } else { "ies" }
        ),
        lines: vec![
            format!(
                "{count} original deliver{} {what}.",
                if count == 1 { "y" } else { "ies" }
            ),
            format!(
                "Each goes through intake again under the revision in force ({revision}), as one live replay: they may start runs and take entity locks. Re-admissions already in the ledger are not taken again."
            ),
            format!(
                "Each is recorded as a new delivery `replay:<replay id>:<delivery id>` linked to its original; the replay records you as token:{}.",
                viewer.principal.name
            ),
        ],
        action: "/ui/readmit".into(),
        fields: q.pairs(),
        button: format!(
            "Re-admit {count} deliver{}",
            if count == 1 { "y" } else { "ies" }
        ),
        danger: count > 100,
        back: format!(
            "/ui/deliveries{}",
            super::query_string(
                &q.pairs()
                    .iter()
                    .map(|(k, v)| (k.as_str(), Some(v.as_str())))
                    .collect::<Vec<_>>()
            )
        ),
    };
    if count == 0 {
        return Err(ConsoleError::new(
            StatusCode::BAD_REQUEST,
            &format!("No original delivery {what}: nothing to re-admit."),
        ));
    }
    Ok(render(&page))
}

async fn set(
    viewer: Viewer,
    State(state): State<AppState>,
    form: Result<Form<SetFilters>, FormRejection>,
) -> Result<Response, ConsoleError> {
    let form = form.map(|Form(f)| f).unwrap_or_default();
    viewer.check_csrf(&form.csrf)?;
    viewer.require(Scope::Admin)?;
    let filters = form.replay_filters(&viewer)?;
    let replay = start(&viewer, &state, filters).await?;
    Ok(Redirect::to(&format!("/ui/replays/{replay}")).into_response())
}

/// Starts a live replay under the current revision as the viewer; its id.
async fn start(
    viewer: &Viewer,
    state: &AppState,
    filters: Filters,
) -> Result<String, ConsoleError> {
    let live = state.live.current();
    let prepared = state
        .replays
        .prepare(
            Request {
                mode: Mode::Live,
                revision: RevisionChoice::Current,
                candidate: None,
                filters,
                actor: format!("token:{}", viewer.principal.name),
            },
            &live.settings.loaded,
        )
        .await
        .map_err(|error| match error {
            crate::replay::runner::StartError::Invalid(why) => {
                ConsoleError::new(StatusCode::BAD_REQUEST, &why)
            }
            crate::replay::runner::StartError::Store(error) => error.into(),
        })?;
    let id = prepared.row.id.clone();
    tracing::info!(replay_id = %id, total = prepared.row.total, actor = %prepared.row.actor, "re-admission started from the console");
    state.replays.spawn(prepared);
    Ok(id)
}
