//! Deliveries: the ledger newest first with filters (tenant, source, outcome, entity id and
//! delivery id prefixes, a payload field, time range), its chart and a cursor. One delivery's
//! page is `delivery.rs`.

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use serde::Deserialize;
use switchyard_core::Outcome;

use super::session::Viewer;
use super::{Chrome, ConsoleError, PAGE, given, query_string, render};

use crate::config::Scope;
use crate::http::AppState;
use crate::http::admin::parse_time;
use crate::store::entities::intake;
use crate::store::ledger;

pub fn router() -> Router<AppState> {
    Router::new().route("/ui/deliveries", get(list))
}

#[derive(Debug, Default, Deserialize)]
struct Filters {
    tenant: Option<String>,
    source: Option<String>,
    outcome: Option<String>,
    entity: Option<String>,
    delivery: Option<String>,
    /// `path = value` over the normalised payload.
    payload: Option<String>,
    since: Option<String>,
    until: Option<String>,
    before: Option<String>,
    /// `on`: the page reloads itself.
    auto: Option<String>,
}

/// A ledger row as a table line.
#[derive(Debug)]
struct Row {
    id: String,
    received: String,
    outcome: String,
    reason: String,
    tenant: String,
    source: String,
    entity: String,
    event_type: String,
    delivery_id: String,
    workflow: String,
}

impl Row {
    fn of(row: &intake::Model) -> Self {
        Self {
            id: row.id.clone(),
            received: super::stamp_ms(row.received_at),
            outcome: row.outcome.clone(),
            reason: reason(row),
            tenant: row.tenant_id.clone().unwrap_or_default(),
            source: row.source.clone(),
            entity: row.target_entity_id.clone().unwrap_or_default(),
            event_type: row.event_type.clone().unwrap_or_default(),
            delivery_id: row.delivery_id.clone(),
            workflow: row.workflow_id.clone().unwrap_or_default(),
        }
    }
}

/// The outcome's one line for the table: the stored detail, or what the row's own fields say.
fn reason(row: &intake::Model) -> String {
    if let Some(detail) = row.detail.as_deref().filter(|d| !d.is_empty()) {
        return detail.lines().next().unwrap_or_default().to_owned();
    }
    match row.outcome.as_str() {
        "routed" => format!(
            "run {} created",
            super::short_id(row.run_id.as_deref().unwrap_or("?"))
        ),
        "entity_locked" => format!(
            "held by run {}",
            super::short_id(row.held_by_run_id.as_deref().unwrap_or("?"))
        ),
        "no_trigger_match" => format!(
            "no live workflow triggers on ({}, {})",
            row.channel.as_deref().unwrap_or("?"),
            row.event_type.as_deref().unwrap_or("?")
        ),
        _ => String::new(),
    }
}

/// A payload search: `path = value`, the value compared with the field's text (a string as
/// is, a number or boolean as JSON writes it).
#[derive(Debug)]
pub(super) struct PayloadMatch {
    path: switchyard_core::FieldPath,
    value: String,
}

impl PayloadMatch {
    pub(super) fn parse(text: &str) -> Result<Self, ConsoleError> {
        let bad = |why: String| {
            ConsoleError::new(
                StatusCode::BAD_REQUEST,
                &format!("Payload search `{text}`: {why}"),
            )
        };
        let (path, value) = text
            .split_once('=')
            .ok_or_else(|| bad("write it as `path = value`, e.g. `priority = urgent`".into()))?;
        let path =
            switchyard_core::FieldPath::parse(path.trim()).map_err(|e| bad(e.to_string()))?;
        let value = value.trim().trim_matches('"').to_owned();
        Ok(Self { path, value })
    }

    pub(super) fn holds(&self, row: &intake::Model) -> bool {
        let Some(payload) = row
            .payload
            .as_deref()
            .and_then(|p| serde_json::from_str::<serde_json::Value>(p).ok())
        else {
            return false;
        };
        match self.path.resolve(&payload) {
            Some(serde_json::Value::String(s)) => *s == self.value,
            Some(serde_json::Value::Null) | None => false,
            // A number or boolean as JSON writes it (`7`, `true`).
            Some(other) => {
                let text = other.to_string();
                text == self.value
            }
        }
    }
}

/// At most this many ledger rows are read for one page of a payload search (the payload is
/// not indexed): the page says so, and its "Older" link goes on from the last row read.
pub(super) const PAYLOAD_SCAN: usize = 2_000;

#[derive(askama::Template)]
#[template(path = "deliveries.html")]
struct ListPage {
    chrome: Chrome,
    tenant: String,
    source: String,
    entity: String,
    delivery: String,
    payload: String,
    since: String,
    until: String,
    /// (value, ` selected` or nothing)
    outcomes: Vec<(&'static str, &'static str)>,
    rows: Vec<Row>,
    refresh: String,
    auto: super::AutoRefresh,
    next: String,
    paged: bool,
    scan_note: String,
    chart: super::chart::Chart,
    /// The confirmation page that re-admits this filter's set (`admin` tokens), or empty.
    readmit: String,
}

async fn list(
    viewer: Viewer,
    State(state): State<AppState>,
    q: Result<Query<Filters>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ConsoleError> {
    viewer.require(Scope::Read)?;
    let Query(q) = q.map_err(|e| ConsoleError::new(StatusCode::BAD_REQUEST, &e.body_text()))?;
    if let Some(outcome) = given(&q.outcome) {
        outcome
            .parse::<Outcome>()
            .map_err(|e| ConsoleError::new(StatusCode::BAD_REQUEST, &e))?;
    }
    let since = given(&q.since)
        .map(|t| parse_time("since", t))
        .transpose()?;
    let until = given(&q.until)
        .map(|t| parse_time("until", t))
        .transpose()?;
    let payload = given(&q.payload).map(PayloadMatch::parse).transpose()?;
    let tenants = viewer.principal.tenant_filter(given(&q.tenant));
    let filter = ledger::Filter {
        tenants: tenants.as_deref(),
        outcome: given(&q.outcome),
        source: given(&q.source),
        target_entity_id: None,
        delivery_id: None,
        since,
        until,
        before: given(&q.before),
    };
    let prefixes = ledger::Prefixes {
        target_entity_id: given(&q.entity),
        delivery_id: given(&q.delivery),
    };
    let (rows, last_read, scanned) = search(&state, filter, prefixes, payload.as_ref()).await?;
    let filters = [
        ("tenant", given(&q.tenant)),
        ("source", given(&q.source)),
        ("outcome", given(&q.outcome)),
        ("entity", given(&q.entity)),
        ("delivery", given(&q.delivery)),
        ("payload", given(&q.payload)),
        ("since", given(&q.since)),
        ("until", given(&q.until)),
    ];
    let next = match &last_read {
        Some(last) => {
            let mut pairs = filters.to_vec();
            pairs.push(("before", Some(last.as_str())));
            format!("/ui/deliveries{}", query_string(&pairs))
        }
        None => String::new(),
    };
    let mut refresh_pairs = filters.to_vec();
    refresh_pairs.push(("before", given(&q.before)));
    let auto = super::AutoRefresh::new("/ui/deliveries", &refresh_pairs, given(&q.auto));
    let chart = super::chart::deliveries(&state, tenants.as_deref(), since, until).await?;
    let text = |v: &Option<String>| given(v).unwrap_or_default().to_owned();
    let scan_note = match (&payload, scanned) {
        (Some(_), Some(n)) => format!(
            "The payload is not indexed: this page read the {n} newest deliveries that match the other filters. “Older” reads on from there."
        ),
        _ => String::new(),
    };
    let page = ListPage {
        chrome: viewer.chrome("deliveries"),
        tenant: text(&q.tenant),
        source: text(&q.source),
        entity: text(&q.entity),
        delivery: text(&q.delivery),
        payload: text(&q.payload),
        since: text(&q.since),
        until: text(&q.until),
        outcomes: selectable(&OUTCOMES, given(&q.outcome)),
        rows: rows.iter().map(Row::of).collect(),
        refresh: format!("/ui/deliveries{}", query_string(&refresh_pairs)),
        auto,
        next,
        paged: given(&q.before).is_some(),
        scan_note,
        chart,
        readmit: if viewer.principal.has(Scope::Admin) {
            format!("/ui/readmit{}", query_string(&filters))
        } else {
            String::new()
        },
    };
    Ok(render(&page))
}

/// One page of ledger rows: at most [`PAGE`] that pass the payload search too, the id to read
/// on from when there may be more, and how many rows were read when a payload search
/// filtered them.
async fn search(
    state: &AppState,
    filter: ledger::Filter<'_>,
    prefixes: ledger::Prefixes<'_>,
    payload: Option<&PayloadMatch>,
) -> Result<(Vec<intake::Model>, Option<String>, Option<usize>), ConsoleError> {
    let Some(payload) = payload else {
        let rows = state.store.ledger_search(filter, prefixes, PAGE).await?;
        let last = (rows.len() as u64 == PAGE)
            .then(|| rows.last().map(|r| r.id.clone()))
            .flatten();
        return Ok((rows, last, None));
    };
    const CHUNK: u64 = 200;
    let mut found = Vec::new();
    let mut scanned = 0;
    let mut cursor: Option<String> = filter.before.map(str::to_owned);
    loop {
        let page = ledger::Filter {
            before: cursor.as_deref(),
            ..filter
        };
        let chunk = state.store.ledger_search(page, prefixes, CHUNK).await?;
        let full = chunk.len() as u64 == CHUNK;
        for row in chunk {
            scanned += 1;
            cursor = Some(row.id.clone());
            if payload.holds(&row) {
                found.push(row);
                if found.len() as u64 == PAGE {
                    return Ok((found, cursor, Some(scanned)));
                }
            }
        }
        if !full {
            return Ok((found, None, Some(scanned)));
        }
        if scanned >= PAYLOAD_SCAN {
            return Ok((found, cursor, Some(scanned)));
        }
    }
}

/// The outcomes a ledger row can carry, for the filter. (`duplicate` is an answer, never a
/// row: a redelivery gets its first copy's outcome back and records nothing.)
const OUTCOMES: [&str; 13] = [
    "routed",
    "no_trigger_match",
    "entity_locked",
    "ineligible",
    "invalid_event",
    "rate_limited",
    "authority_unavailable",
    "coalesced",
    "dead_lettered",
    "resumed",
    "no_wait_match",
    "wait_expired",
    "reapproval_required",
];

/// Options of a `<select>`: each value with ` selected` on the one chosen.
pub(super) fn selectable(
    values: &[&'static str],
    chosen: Option<&str>,
) -> Vec<(&'static str, &'static str)> {
    values
        .iter()
        .map(|v| (*v, if Some(*v) == chosen { " selected" } else { "" }))
        .collect()
}
