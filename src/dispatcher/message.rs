//! The run message a worker receives, built from a claimed dispatch and its ledger row: the
//! same CloudEvents envelope for every transport and for pull claims.

use std::collections::HashMap;

use switchyard_core::{Channel, Event};
use switchyard_dispatch::{PrincipalInfo, RunInfo, RunMessage};
use switchyard_store::outbox::ClaimedRun;
use switchyard_store::{DbErr, Millis, Store, millis_rfc3339};

use crate::authority::Authority;
use crate::store::entities::intake;
use crate::telemetry::DispatchSpan;

/// What a run message carries from the ledger: the event and the revision that routed it.
#[derive(Debug, Clone)]
pub struct Routed {
    pub event: Event,
    pub config_revision: String,
    /// A coalesced run's members (the event is the newest one's); empty otherwise.
    pub members: Vec<String>,
}

/// The ledger rows (the events) of claimed runs, by the run's intake id. A coalesced run
/// gets its newest member's event and the list of its members.
pub async fn events_of(
    store: &Store,
    claimed: &[&ClaimedRun],
) -> Result<HashMap<String, Routed>, DbErr> {
    if claimed.is_empty() {
        return Ok(HashMap::new());
    }
    let mut members = super::members::of(store, claimed).await?;
    // The ledger row each run is dispatched with -> (the run's intake id, its members).
    let mut basis: HashMap<String, (String, Vec<String>)> = claimed
        .iter()
        .map(|c| match members.remove(&c.run.id) {
            Some(m) => (m.newest, (c.run.intake_id.clone(), m.ids)),
            None => (
                c.run.intake_id.clone(),
                (c.run.intake_id.clone(), Vec::new()),
            ),
        })
        .collect();
    let ids: Vec<&str> = basis.keys().map(String::as_str).collect();
    let rows = store.ledger_rows(&ids).await?;
    Ok(rows
        .into_iter()
        .filter_map(|row| {
            let (run_intake_id, members) = basis.remove(&row.id)?;
            let config_revision = row.config_revision.clone();
            Some((
                run_intake_id,
                Routed {
                    event: event_of(row)?,
                    config_revision,
                    members,
                },
            ))
        })
        .collect())
}

/// The six-field event a routed ledger row recorded.
pub(crate) fn event_of(row: intake::Model) -> Option<Event> {
    Some(Event {
        channel: row.channel.as_deref()?.parse::<Channel>().ok()?,
        event_type: row.event_type?,
        tenant_id: row.tenant_id?,
        target_entity_id: row.target_entity_id?,
        payload: row
            .payload
            .as_deref()
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_else(|| serde_json::json!({})),
        raw_ref: row.raw_ref.unwrap_or_default(),
    })
}

/// The message for one claimed dispatch, carrying `trace` as its CloudEvents
/// distributed-tracing extension: `switchyard.run.start`, or `switchyard.run.resume` when the
/// dispatch carries the resume of a wait (`resume`, from `resumes::resumes_of`).
pub fn run_start(
    claimed: &ClaimedRun,
    routed: Routed,
    resume: Option<switchyard_dispatch::ResumeInfo>,
    now: Millis,
    trace: &DispatchSpan,
    authority: &Authority,
) -> RunMessage {
    let run = &claimed.run;
    let principal = run
        .principal_id
        .as_deref()
        .and_then(|id| authority.principal(id))
        .map(|p| PrincipalInfo {
            id: p.id.clone(),
            tenant: p.tenant.clone(),
            kind: p.kind.as_str().to_owned(),
            capabilities: p.capabilities.clone(),
        });
    let budgets = crate::bounds::budgets_of(run);
    let info = RunInfo {
        id: run.id.clone(),
        workflow_id: run.workflow_id.clone(),
        tenant_id: run.tenant_id.clone(),
        target_entity_id: run.target_entity_id.clone(),
        fencing_token: run.fencing_token,
        lease_expires_at: millis_rfc3339(claimed.lease_expires_at),
        config_revision: routed.config_revision,
        intake_id: run.intake_id.clone(),
        attempt: u32::try_from(claimed.dispatch.attempts).unwrap_or(0),
        members: routed.members,
        principal,
        deadline: run.deadline_at.map(millis_rfc3339),
        budgets: (!budgets.is_empty()).then_some(budgets),
    };
    let mut message = RunMessage::run_start(
        &claimed.dispatch.id,
        &format!("/switchyard/workflows/{}", run.workflow_id),
        now,
        info,
        routed.event,
        trace.traceparent.clone(),
    );
    message.tracestate = trace.tracestate.clone();
    match resume {
        Some(resume) => message.into_resume(resume),
        None => message,
    }
}
