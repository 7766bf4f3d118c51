//! One delivery: its outcome in words, the decision explained step by step against the
//! revision that made it, its bytes, its replays and re-admissions.

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::get;
use serde::Deserialize;
use switchyard_core::{Channel, WorkflowStatus};
use switchyard_store::now_millis;

use super::session::Viewer;
use super::{Chrome, ConsoleError, render, stamp};

use crate::config::Scope;
use crate::explain::explain;
use crate::http::AppState;
use crate::store::entities::intake;

pub fn router() -> Router<AppState> {
    Router::new().route("/ui/deliveries/{id}", get(one))
}

/// One candidate workflow as the decision saw it.
#[derive(Debug)]
struct CandidateView {
    workflow_id: String,
    priority: i32,
    status: String,
    verdict: String,
    won: bool,
}

/// One step of the explanation, with an optional link.
#[derive(Debug)]
struct Step {
    text: String,
    link: String,
    link_text: String,
}

impl Step {
    fn text(text: String) -> Self {
        Self {
            text,
            link: String::new(),
            link_text: String::new(),
        }
    }

    fn linked(text: String, link: String, link_text: String) -> Self {
        Self {
            text,
            link,
            link_text,
        }
    }
}

#[derive(askama::Template)]
#[template(path = "delivery.html")]
struct OnePage {
    chrome: Chrome,
    id: String,
    outcome: String,
    sentence: String,
    facts: Vec<(&'static str, String)>,
    revision_hash: String,
    revision_note: String,
    candidates: Vec<CandidateView>,
    steps: Vec<Step>,
    run_id: String,
    holder_id: String,
    event_json: String,
    can_raw: bool,
    revealed: bool,
    raw_text: String,
    raw_note: String,
    /// Whether the viewer may re-admit it (an original delivery, an `admin` token).
    can_readmit: bool,
    /// For a re-admission: its replay and the original delivery's ledger id.
    replay_id: String,
    replay_of: String,
    /// The replays that took this delivery, newest first.
    replays: Vec<ReplayOf>,
}

/// One replay that took a delivery, and what became of it there.
#[derive(Debug)]
struct ReplayOf {
    replay_id: String,
    outcome: String,
    /// The ledger row a live replay re-admitted it as (empty for a diagnostic one).
    new_intake_id: String,
}

#[derive(Debug, Deserialize)]
struct RevealQuery {
    reveal: Option<String>,
}

async fn one(
    viewer: Viewer,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(reveal): Query<RevealQuery>,
) -> Result<Response, ConsoleError> {
    viewer.require(Scope::Read)?;
    let tenants = viewer.principal.tenant_filter(None);
    let row = state
        .store
        .ledger_row(&id, tenants.as_deref())
        .await?
        .ok_or_else(|| ConsoleError::not_found("delivery"))?;
    let revealed = reveal.reveal.as_deref() == Some("raw");
    if revealed {
        viewer.require(Scope::RawRead)?;
    }
    let now = now_millis();

    // The holder of the entity, named by an entity_locked row.
    let holder = match &row.held_by_run_id {
        Some(held) => state.store.run(held).await?,
        None => None,
    };
    let lock = match (&row.tenant_id, &row.target_entity_id) {
        (Some(tenant), Some(entity)) => state.store.lease_of(tenant, entity).await?,
        _ => None,
    };
    let entity = row.target_entity_id.clone().unwrap_or_default();
    let tenant = row.tenant_id.clone().unwrap_or_default();
    let sentence = sentence(&row, holder.as_ref(), lock.as_ref(), now);

    let revision = state.store.revision_by_hash(&row.config_revision).await?;
    let mut steps = vec![Step::text(format!(
        "Received from source `{}` as delivery `{}` at {} UTC.",
        row.source,
        row.delivery_id,
        stamp(row.received_at)
    ))];
    let mut candidates = Vec::new();
    let revision_note;
    match (&row.channel, &row.event_type) {
        (Some(channel), Some(event_type)) => {
            steps.push(Step::text(format!(
                "Normalised to a {channel} `{event_type}` event of tenant `{tenant}` about `{entity}`."
            )));
            match &revision {
                Some(revision) => {
                    revision_note = format!(
                        "Decided under config revision {} (in force {} to {}).",
                        revision.hash,
                        stamp(revision.in_force_from),
                        revision.in_force_until.map_or("now".to_owned(), stamp)
                    );
                    if let Ok(channel) = channel.parse::<Channel>() {
                        let workflows = revision.content.domain_workflows();
                        let payload = row
                            .payload
                            .as_deref()
                            .and_then(|text| serde_json::from_str(text).ok())
                            .unwrap_or_default();
                        let explained = explain(
                            &revision.hash,
                            &workflows,
                            &tenant,
                            channel,
                            event_type,
                            &payload,
                        );
                        let live = explained.live().count();
                        candidates = explained
                            .candidates
                            .iter()
                            .map(|c| candidate_view(c, explained.winner(), &row))
                            .collect();
                        steps.push(Step::text(match explained.winner() {
                            Some(winner) => format!(
                                "{live} live workflow{} of tenant `{tenant}` trigger{} on ({channel}, {event_type}); `{}` has the highest priority ({}){}{}.",
                                plural(live),
                                if live == 1 { "s" } else { "" },
                                winner.workflow_id,
                                winner.priority,
                                if winner.rank == Some(1) { "" } else { " of those whose condition holds" },
                                if explained.tie { ", a tie broken by workflow id" } else { "" }
                            ),
                            None if live > 0 => format!(
                                "{live} live workflow{} of tenant `{tenant}` trigger{} on ({channel}, {event_type}), but no trigger's condition holds for this payload.",
                                plural(live),
                                if live == 1 { "s" } else { "" },
                            ),
                            None => format!(
                                "No live workflow of tenant `{tenant}` triggers on ({channel}, {event_type}) in this revision."
                            ),
                        }));
                    }
                }
                None => {
                    revision_note = format!(
                        "Decided under config revision {}, which is not stored (it came into force before revisions were kept), so its candidates cannot be shown.",
                        row.config_revision
                    );
                }
            }
        }
        _ => {
            revision_note = format!("Decided under config revision {}.", row.config_revision);
            steps.push(Step::text(format!(
                "Not normalised to an event: {}",
                row.detail.clone().unwrap_or_default()
            )));
        }
    }
    match row.outcome.as_str() {
        "routed" => {
            if let Some(run_id) = &row.run_id {
                steps.push(Step::linked(
                    format!(
                        "The entity `{entity}` was free: run {run_id} of workflow `{}` took its lock.",
                        row.workflow_id.clone().unwrap_or_default()
                    ),
                    format!("/ui/runs/{run_id}"),
                    "open the run".into(),
                ));
            }
        }
        "entity_locked" => {
            if let Some(held) = &row.held_by_run_id {
                let workflow = holder
                    .as_ref()
                    .map(|h| h.workflow_id.clone())
                    .unwrap_or_else(|| "?".into());
                steps.push(Step::linked(
                    format!(
                        "`{}` would have run, but `{entity}` was held by run {held} of workflow `{workflow}`: no run was created, and lower-priority candidates were not tried (the entity was busy, whichever workflow would run).",
                        row.workflow_id.clone().unwrap_or_default()
                    ),
                    format!("/ui/runs/{held}"),
                    "open the holder run".into(),
                ));
            }
        }
        "ineligible" | "invalid_event" => {
            if let Some(detail) = &row.detail {
                steps.push(Step::text(format!("Refused by rule: {detail}")));
            }
        }
        // A resume of a durable wait: the detail says which wait and why; the run it named.
        "resumed" | "no_wait_match" | "wait_expired" | "reapproval_required"
            if row.run_id.is_some() =>
        {
            let run_id = row.run_id.clone().unwrap_or_default();
            steps.push(Step::linked(
                row.detail.clone().unwrap_or_default(),
                format!("/ui/runs/{run_id}"),
                "open the waiting run".into(),
            ));
        }
        _ => {
            if let Some(detail) = &row.detail {
                steps.push(Step::text(detail.clone()));
            }
        }
    }
    steps.push(Step::text(format!(
        "Redeliveries of `{}` from `{}` are answered `duplicate` with this outcome and create nothing.",
        row.delivery_id, row.source
    )));

    let event_json = match &row.channel {
        Some(channel) => {
            let payload = row
                .payload
                .as_deref()
                .and_then(|p| serde_json::from_str::<serde_json::Value>(p).ok())
                .unwrap_or(serde_json::Value::Null);
            serde_json::to_string_pretty(&serde_json::json!({
                "channel": channel,
                "event_type": row.event_type,
                "tenant_id": row.tenant_id,
                "target_entity_id": row.target_entity_id,
                "payload": payload,
                "raw_ref": row.raw_ref,
            }))
            .unwrap_or_default()
        }
        None => String::new(),
    };
    let (raw_text, raw_note) =
        if revealed {
            match state.store.raw_delivery(&row.id).await? {
            Some(raw) => {
                const SHOWN: usize = 64 * 1024;
                let text = String::from_utf8_lossy(&raw.body[..raw.body.len().min(SHOWN)])
                    .into_owned();
                let note = format!(
                    "{} bytes of {}{}",
                    raw.body.len(),
                    raw.content_type,
                    if raw.body.len() > SHOWN { ", the first 64 KiB shown" } else { "" }
                );
                (text, note)
            }
            None => (
                String::new(),
                "The raw bytes are gone (deleted by retention, or never stored for this delivery)."
                    .into(),
            ),
        }
        } else {
            (String::new(), String::new())
        };
    let mut facts = vec![
        ("Outcome", row.outcome.clone()),
        ("Tenant", tenant.clone()),
        ("Entity", entity.clone()),
        ("Source", row.source.clone()),
        ("Delivery id", row.delivery_id.clone()),
        ("Workflow", row.workflow_id.clone().unwrap_or_default()),
        (
            "Received",
            format!("{} UTC", super::stamp_ms(row.received_at)),
        ),
        (
            "Decided",
            format!("{} UTC", super::stamp_ms(row.decided_at)),
        ),
        ("Ledger id", row.id.clone()),
    ];
    if let Some(shadow) = &row.shadow {
        facts.push(("Shadow workflows", shadow_sentence(shadow)));
    }
    if let (Some(replay), Some(original)) = (&row.replay_id, &row.replay_of) {
        facts.push((
            "Re-admitted by",
            format!("live replay {replay} of delivery {original}"),
        ));
    }
    let replays = state
        .store
        .replays_of_delivery(&row.id, 20)
        .await?
        .into_iter()
        .map(|r| ReplayOf {
            replay_id: r.replay_id,
            outcome: r.replayed_outcome,
            new_intake_id: r.new_intake_id.unwrap_or_default(),
        })
        .collect();
    let page = OnePage {
        chrome: viewer.chrome("deliveries"),
        id: row.id.clone(),
        outcome: row.outcome.clone(),
        sentence,
        facts,
        revision_hash: row.config_revision.clone(),
        revision_note,
        candidates,
        steps,
        run_id: row.run_id.clone().unwrap_or_default(),
        holder_id: row.held_by_run_id.clone().unwrap_or_default(),
        event_json,
        can_raw: viewer.principal.has(Scope::RawRead),
        revealed,
        raw_text,
        raw_note,
        can_readmit: viewer.principal.has(Scope::Admin) && row.replay_of.is_none(),
        replay_id: row.replay_id.clone().unwrap_or_default(),
        replay_of: row.replay_of.clone().unwrap_or_default(),
        replays,
    };
    Ok(render(&page))
}

/// What each shadow workflow would have done, in words.
fn shadow_sentence(stored: &str) -> String {
    use crate::shadow::Verdict;
    crate::shadow::parse(stored)
        .iter()
        .map(|v| match (v.verdict, v.live_workflow_id.as_deref()) {
            (Verdict::WouldWin, Some(live)) => {
                format!("{} would have taken it from {live}", v.workflow_id)
            }
            (Verdict::WouldWin, None) => format!("{} would have taken it", v.workflow_id),
            (Verdict::Outranked, live) => format!(
                "{} is outranked by {}",
                v.workflow_id,
                live.unwrap_or("the live winner")
            ),
            (Verdict::ConditionFailed, _) => format!(
                "{}: condition failed ({})",
                v.workflow_id,
                v.detail.as_deref().unwrap_or("")
            ),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn candidate_view(
    c: &crate::explain::Candidate,
    winner: Option<&crate::explain::Candidate>,
    row: &intake::Model,
) -> CandidateView {
    let winner_rank = winner.and_then(|w| w.rank);
    let chosen = row.workflow_id.as_deref() == Some(c.workflow_id.as_str());
    let verdict = match c.status {
        WorkflowStatus::Draft => "draft: never matches a real event".to_owned(),
        WorkflowStatus::Disabled => "disabled: not considered".to_owned(),
        _ if c.wins && row.outcome == "entity_locked" => {
            "won, but its entity was locked".to_owned()
        }
        _ if c.wins && chosen => "won".to_owned(),
        _ if c.wins => "highest priority whose condition holds".to_owned(),
        _ => match (&c.failed, winner_rank) {
            (_, Some(winner)) if c.rank > Some(winner) => {
                "not tried: a higher priority won".to_owned()
            }
            (Some(failed), _) => format!("its condition does not hold: {failed}"),
            (None, _) => "not tried".to_owned(),
        },
    };
    CandidateView {
        workflow_id: c.workflow_id.clone(),
        priority: c.priority,
        status: c.status.as_str().to_owned(),
        won: c.wins,
        verdict,
    }
}

/// The outcome in words: "entity_locked: run R of workflow triage holds TCK-5510 until 10:42".
fn sentence(
    row: &intake::Model,
    holder: Option<&switchyard_store::entities::run::Model>,
    lock: Option<&switchyard_store::entities::entity_lock::Model>,
    now: i64,
) -> String {
    let entity = row.target_entity_id.as_deref().unwrap_or("?");
    let tenant = row.tenant_id.as_deref().unwrap_or("?");
    match row.outcome.as_str() {
        "routed" => format!(
            "routed: run {} of workflow {} was created for {entity}",
            row.run_id.as_deref().unwrap_or("?"),
            row.workflow_id.as_deref().unwrap_or("?")
        ),
        "entity_locked" => {
            let held = row.held_by_run_id.as_deref().unwrap_or("?");
            let workflow = holder.map_or("?", |h| h.workflow_id.as_str());
            let held_now = lock.and_then(|l| l.held_at(now)) == Some(held);
            match (held_now, lock, holder.and_then(|h| h.finished_at)) {
                (true, Some(lock), _) => format!(
                    "entity_locked: run {held} of workflow {workflow} holds {entity} until {} UTC",
                    super::clock(lock.expires_at)
                ),
                (_, _, Some(finished)) => format!(
                    "entity_locked: run {held} of workflow {workflow} held {entity} (it released it at {} UTC)",
                    super::clock(finished)
                ),
                _ => format!("entity_locked: run {held} of workflow {workflow} held {entity}"),
            }
        }
        "no_trigger_match" => format!(
            "no_trigger_match: no live workflow of tenant {tenant} triggers on ({}, {})",
            row.channel.as_deref().unwrap_or("?"),
            row.event_type.as_deref().unwrap_or("?")
        ),
        outcome => match &row.detail {
            Some(detail) => format!("{outcome}: {detail}"),
            None => outcome.to_owned(),
        },
    }
}
