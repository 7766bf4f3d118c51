//! Deciding a batch of deliveries from what the store holds for them: no I/O. The store looks
//! up what [`keys`] names inside the batch's transaction, then [`decide`] gives the answers and
//! the rows it writes before committing (`switchyard_store::intake::order`).

use std::collections::HashMap;

use switchyard_core::{Event, Outcome};
use switchyard_router::{Choice, Decision, LockBatch};
use switchyard_store::Millis;
use switchyard_store::entities::dispatch::{self, DispatchStatus};
use switchyard_store::entities::run::RunStatus;
use switchyard_store::entities::run_history;
use switchyard_store::intake::{DeliveryKey, Found, Keys, StoredAnswer, Writes};
use switchyard_store::leases::LockChanges;

use super::flow::Admit;
use super::{Answer, Delivery, DeliveryBody};
use crate::authority::Refusal;
use crate::live::Live;
use crate::store::entities::{intake, mailbox_cursor, raw_delivery};

/// `(source, key)`: how claimed messages (and mailboxes) are identified.
pub(super) type SourceKey = (String, String);

/// Each delivery's routing choice (workflow, or why none), in batch order, made before the
/// batch's lookups.
pub(super) struct Choices {
    choices: Vec<Choice>,
    /// Deliveries (by batch index) whose chosen workflow's principal may not act: recorded
    /// `authority_unavailable`, no lease looked up. Empty (no allocation) while all are fine.
    refused: Vec<(usize, std::sync::Arc<str>, Refusal)>,
}

/// What a batch must look up before it can be decided, and its deliveries' choices.
pub(super) fn keys<'a>(deliveries: &[&'a Delivery], live: &Live) -> (Keys<'a>, Choices) {
    // Conditions are evaluated here, after the index lookup, on the normalised payload.
    let mut choices: Vec<Choice> = deliveries
        .iter()
        .map(|d| match &d.body {
            DeliveryBody::Route(event) => live.index.choose_for(
                &event.tenant_id,
                event.channel,
                &event.event_type,
                &event.payload,
            ),
            _ => Choice::NoTrigger,
        })
        .collect();
    let refused = refuse_unauthorised(&mut choices, live);
    let leases = deliveries
        .iter()
        .zip(&choices)
        .filter_map(|(d, choice)| match (&d.body, choice) {
            (DeliveryBody::Route(event), Choice::Chosen(_)) => {
                Some((event.tenant_id.clone(), event.target_entity_id.clone()))
            }
            _ => None,
        })
        .collect();
    let flow = super::flow::needs(deliveries, &choices, &live.flow);
    let keys = Keys {
        flow,
        deliveries: deliveries
            .iter()
            .map(|d| (d.source.as_str(), d.scope.as_str(), d.delivery_id.as_str()))
            .collect(),
        messages: deliveries
            .iter()
            .filter_map(|d| Some((d.source.as_str(), d.message_key.as_deref()?)))
            .collect(),
        leases,
    };
    (keys, Choices { choices, refused })
}

/// Takes the choice away from every delivery whose winning workflow's principal may not act
/// now (the next candidate is not tried: the winner is not started, and says why).
fn refuse_unauthorised(
    choices: &mut [Choice],
    live: &Live,
) -> Vec<(usize, std::sync::Arc<str>, Refusal)> {
    let now = switchyard_store::now_millis();
    let mut refused = Vec::new();
    for (i, choice) in choices.iter_mut().enumerate() {
        if let Choice::Chosen(candidate) = choice
            && let Some(refusal) = live
                .authority
                .refusal_at_routing(&candidate.workflow_id, now)
        {
            refused.push((i, candidate.workflow_id.clone(), refusal));
            *choice = Choice::NoTrigger;
        }
    }
    refused
}

/// Decides every delivery in arrival order: duplicates (stored or earlier in the batch) point at
/// their first copy; the others route, lock or record why not.
pub(super) fn decide(
    deliveries: &[&Delivery],
    choices: Choices,
    found: Found,
    live: &Live,
    now: Millis,
) -> (Vec<Answer>, Writes) {
    super::failpoint::check(deliveries);
    let Found {
        seen,
        claimed,
        leases,
        flow,
    } = found;
    let mut seen: HashMap<DeliveryKey, Answer> = seen
        .into_iter()
        .map(|(key, stored)| (key, stored_answer(stored)))
        .collect();
    let mut claimed: HashMap<SourceKey, Answer> = claimed
        .into_iter()
        .map(|(key, stored)| (key, stored_answer(stored)))
        .collect();
    let lease_keys: Vec<(String, String)> = leases
        .iter()
        .map(|l| (l.tenant_id.clone(), l.target_entity_id.clone()))
        .collect();
    let mut gate = super::flow::Gate::new(&live.flow, flow, now);
    // Mailboxes with a `rate_limited` message in this batch: their cursor stays before it.
    let mut stalled: Vec<SourceKey> = Vec::new();
    // Keys the store found no row for were never locked: `route` takes them as such.
    let mut locks = LockBatch::from_rows(lease_keys, leases, now);
    let mut answers = Vec::with_capacity(deliveries.len());
    let mut ledger = Vec::with_capacity(deliveries.len());
    let mut raw = Vec::new();
    let mut cursors: HashMap<SourceKey, mailbox_cursor::Model> = HashMap::new();
    let mut refused = choices.refused.iter().peekable();
    for (i, (delivery, choice)) in deliveries.iter().zip(&choices.choices).enumerate() {
        let mut advance = |limited: bool| {
            let Some(cursor) = &delivery.cursor else {
                return;
            };
            let mailbox = (delivery.source.clone(), cursor.mailbox.clone());
            if limited {
                stalled.push(mailbox);
            } else if !stalled.contains(&mailbox) {
                cursors.insert(
                    mailbox,
                    mailbox_cursor::Model {
                        source: delivery.source.clone(),
                        mailbox: cursor.mailbox.clone(),
                        uidvalidity: cursor.uidvalidity.into(),
                        last_uid: cursor.uid.into(),
                        updated_at: now,
                    },
                );
            }
        };
        let key = (
            delivery.source.clone(),
            delivery.scope.clone(),
            delivery.delivery_id.clone(),
        );
        if let Some(first) = seen.get(&key) {
            // A stored refusal by a ceiling is no answer to keep: its retry is decided anew
            // and replaces it.
            match (&first.outcome, first.intake_id.as_deref()) {
                (Outcome::RateLimited, Some(refused))
                    if !ledger.iter().any(|r: &intake::Model| r.id == refused) =>
                {
                    gate.replaced.push(refused.to_owned());
                }
                _ => {
                    advance(false);
                    answers.push(duplicate_of(first));
                    continue;
                }
            }
        }
        let message_key = delivery
            .message_key
            .as_ref()
            .map(|message| (delivery.source.clone(), message.clone()));
        if let Some(first) = message_key.as_ref().and_then(|k| claimed.get(k)) {
            advance(false);
            answers.push(duplicate_of(first));
            continue;
        }
        let intake_id = delivery.intake_id.to_string();
        let mut deferred = false;
        let mut retry_after = None;
        let mut row = match &delivery.body {
            DeliveryBody::Route(event) if refused.peek().is_some_and(|(at, ..)| *at == i) => {
                let (_, workflow_id, refusal) = refused.next().expect("peeked");
                let fields = Fields {
                    outcome: Outcome::AuthorityUnavailable,
                    detail: Some(format!(
                        "workflow `{workflow_id}` runs as {refusal} ({})",
                        refusal.reason_word()
                    )),
                    run_id: None,
                    workflow_id: Some(workflow_id.to_string()),
                    held_by_run_id: None,
                };
                ledger_row(delivery, Some(event), fields, live, now)
            }
            DeliveryBody::Route(event) => match gate.admit(delivery, event, choice, &locks) {
                Admit::Route { deferred: waits } => {
                    let decision = locks.route(
                        &event.tenant_id,
                        &event.target_entity_id,
                        choice.candidate(),
                        &intake_id,
                    );
                    let mut fields = decision_fields(&decision);
                    match choice {
                        Choice::NoConditionHeld(detail) => fields.detail = Some(detail.clone()),
                        Choice::NoTrigger => {
                            fields.detail = Some(format!(
                                "no live workflow of tenant `{}` triggers on ({}, {})",
                                event.tenant_id, event.channel, event.event_type
                            ));
                        }
                        _ => {}
                    }
                    if let Decision::Routed {
                        run_id,
                        workflow_id,
                        ..
                    } = &decision
                    {
                        gate.routed(run_id, workflow_id, event);
                        if let Some(waits) = waits {
                            deferred = true;
                            fields.detail = Some(match fields.detail.take() {
                                Some(detail) => format!("{detail}; {waits}"),
                                None => waits,
                            });
                        }
                    }
                    let mut row = ledger_row(delivery, Some(event), fields, live, now);
                    if let Some(shadows) = &live.shadows {
                        row.shadow = crate::shadow::evaluate(shadows, event, choice.candidate())
                            .map(|verdicts| crate::shadow::stored(&verdicts));
                    }
                    row
                }
                Admit::Refuse { detail, retry_at } => {
                    retry_after = Some(super::flow::retry_after(retry_at, now));
                    let mut fields = Fields::outcome(Outcome::RateLimited, Some(detail));
                    fields.workflow_id = choice.candidate().map(|c| c.workflow_id.to_string());
                    ledger_row(delivery, Some(event), fields, live, now)
                }
                Admit::Join { run_id, due_at } => {
                    let fields = Fields {
                        outcome: Outcome::Coalesced,
                        detail: Some(format!(
                            "joined run {run_id}, which waits for further events until {}",
                            switchyard_store::millis_rfc3339(due_at)
                        )),
                        workflow_id: choice.candidate().map(|c| c.workflow_id.to_string()),
                        run_id: Some(run_id),
                        held_by_run_id: None,
                    };
                    ledger_row(delivery, Some(event), fields, live, now)
                }
            },
            DeliveryBody::Ineligible { detail, event } => ledger_row(
                delivery,
                event.as_ref(),
                Fields::outcome(Outcome::Ineligible, Some(detail.clone())),
                live,
                now,
            ),
            DeliveryBody::Invalid { detail } => ledger_row(
                delivery,
                None,
                Fields::outcome(Outcome::InvalidEvent, Some(detail.clone())),
                live,
                now,
            ),
            DeliveryBody::Refused {
                outcome,
                detail,
                event,
            } => ledger_row(
                delivery,
                event.as_ref(),
                Fields::outcome(*outcome, Some(detail.clone())),
                live,
                now,
            ),
        };
        // The first delivery of a message that routes claims it.
        let claims_message = row.outcome == Outcome::Routed.as_str();
        if claims_message {
            row.message_key = message_key.as_ref().map(|(_, key)| key.clone());
        }
        let limited = row.outcome == Outcome::RateLimited.as_str();
        advance(limited);
        let mut answer = first_answer(&row);
        answer.deferred = deferred;
        answer.retry_after = retry_after;
        if claims_message && let Some(message_key) = message_key {
            claimed.insert(message_key, answer.clone());
        }
        if let Some(bytes) = &delivery.raw {
            raw.push(raw_delivery::Model {
                id: intake_id,
                source: delivery.source.clone(),
                content_type: bytes.content_type.clone(),
                body: bytes.bytes.to_vec(),
                received_at: delivery.received_at,
            });
        }
        // A later copy of this delivery in the same batch is its duplicate.
        seen.insert(key, answer.clone());
        answers.push(answer);
        ledger.push(row);
    }
    let mut locks = locks.into_changes();
    carry_trace(&mut locks, deliveries);
    crate::bounds::stamp(&mut locks.new_runs, live.revision(), &live.bounds, now);
    let (mut dispatches, history) = outbox(&locks, live, now);
    if gate.has_new_windows() {
        for dispatch in &mut dispatches {
            if let Some(due_at) = gate.due_of(&dispatch.run_id) {
                dispatch.due_at = due_at;
            }
        }
    }
    let writes = Writes {
        flow: gate.into_writes(),
        ledger,
        raw,
        cursors: cursors.into_values().collect(),
        locks,
        dispatches,
        history,
    };
    (answers, writes)
}

/// Each new run carries the trace context of the delivery that caused it.
fn carry_trace(locks: &mut LockChanges, deliveries: &[&Delivery]) {
    if deliveries.iter().all(|d| d.trace.is_none()) {
        return;
    }
    let traces: HashMap<String, &crate::telemetry::TraceContext> = deliveries
        .iter()
        .filter_map(|d| Some((d.intake_id.to_string(), d.trace.as_ref()?)))
        .collect();
    for run in &mut locks.new_runs {
        if let Some(trace) = traces.get(&run.intake_id) {
            run.traceparent = Some(trace.traceparent.clone());
            run.tracestate = trace.tracestate.clone();
        }
    }
}

/// The dispatch row and history entries the batch's new and expired runs need.
fn outbox(
    locks: &LockChanges,
    live: &Live,
    now: Millis,
) -> (Vec<dispatch::Model>, Vec<run_history::Model>) {
    let mut history = Vec::with_capacity(locks.new_runs.len() + locks.expired_runs.len());
    let dispatches = locks
        .new_runs
        .iter()
        .map(|run| {
            // No `routed` history row: the run row itself records its creation
            // (`outbox::trail` shows it first), one row less per routed event.
            dispatch::Model {
                id: uuid::Uuid::now_v7().to_string(),
                run_id: run.id.clone(),
                tenant_id: run.tenant_id.clone(),
                workflow_id: run.workflow_id.clone(),
                target: live.target_of(&run.workflow_id).to_owned(),
                status: DispatchStatus::Pending,
                attempts: 0,
                series: 1,
                due_at: now,
                claimed_by: None,
                claim_token: None,
                reason: None,
                last_error: None,
                created_at: now,
                updated_at: now,
                delivered_at: None,
                wait_id: None,
            }
        })
        .collect();
    for expired in &locks.expired_runs {
        history.push(run_history::Model::entry(
            expired,
            RunStatus::Expired,
            "lease_expired",
            Some("its lease ran out and another event took the entity over".into()),
            now,
        ));
    }
    (dispatches, history)
}

/// The decision-specific columns of a ledger row.
struct Fields {
    outcome: Outcome,
    detail: Option<String>,
    run_id: Option<String>,
    workflow_id: Option<String>,
    held_by_run_id: Option<String>,
}

impl Fields {
    fn outcome(outcome: Outcome, detail: Option<String>) -> Self {
        Self {
            outcome,
            detail,
            run_id: None,
            workflow_id: None,
            held_by_run_id: None,
        }
    }
}

fn decision_fields(decision: &Decision) -> Fields {
    match decision {
        Decision::Routed {
            run_id,
            workflow_id,
            took_over_from,
            ..
        } => Fields {
            outcome: Outcome::Routed,
            detail: took_over_from
                .as_ref()
                .map(|old| format!("took over the expired lease of run {old}")),
            run_id: Some(run_id.clone()),
            workflow_id: Some(workflow_id.to_string()),
            held_by_run_id: None,
        },
        Decision::NoTriggerMatch => Fields::outcome(Outcome::NoTriggerMatch, None),
        Decision::EntityLocked {
            held_by_run_id,
            workflow_id,
            until,
        } => Fields {
            outcome: Outcome::EntityLocked,
            detail: Some(format!(
                "run {held_by_run_id} holds the entity until {} (its lease: extended while the \
                 run heartbeats, freed when it finishes)",
                switchyard_store::millis_rfc3339(*until)
            )),
            run_id: None,
            workflow_id: Some(workflow_id.to_string()),
            held_by_run_id: Some(held_by_run_id.clone()),
        },
    }
}

fn ledger_row(
    delivery: &Delivery,
    event: Option<&Event>,
    fields: Fields,
    live: &Live,
    now: i64,
) -> intake::Model {
    intake::Model {
        id: delivery.intake_id.to_string(),
        source: delivery.source.clone(),
        delivery_id: delivery.delivery_id.clone(),
        scope: delivery.scope.clone(),
        outcome: fields.outcome.as_str().to_owned(),
        // Adapters may quote what they refused; U+0000 is the one character PostgreSQL text
        // cannot hold.
        detail: fields.detail.map(|detail| match detail.contains('\0') {
            true => detail.replace('\0', "\u{fffd}"),
            false => detail,
        }),
        channel: event.map(|e| e.channel.as_str().to_owned()),
        event_type: event.map(|e| e.event_type.clone()),
        tenant_id: event.map(|e| e.tenant_id.clone()),
        target_entity_id: event.map(|e| e.target_entity_id.clone()),
        payload: event.and(delivery.payload_text.clone()),
        raw_ref: event.map(|e| e.raw_ref.clone()).or_else(|| {
            delivery
                .raw
                .as_ref()
                .map(|_| Delivery::raw_ref(delivery.intake_id))
        }),
        run_id: fields.run_id,
        workflow_id: fields.workflow_id,
        held_by_run_id: fields.held_by_run_id,
        message_key: None,
        config_revision: live.revision().to_owned(),
        received_at: delivery.received_at,
        decided_at: now,
        traceparent: delivery.trace.as_ref().map(|t| t.traceparent.clone()),
        tracestate: delivery.trace.as_ref().and_then(|t| t.tracestate.clone()),
        shadow: None,
        replay_id: delivery.replay.as_ref().map(|r| r.replay_id.clone()),
        replay_of: delivery.replay.as_ref().map(|r| r.original.clone()),
    }
}

/// The answer a stored ledger row gave: what its later copies are duplicates of.
pub(super) fn first_answer(row: &intake::Model) -> Answer {
    recorded_answer(
        row.id.clone(),
        &row.outcome,
        row.detail.clone(),
        row.run_id.clone(),
        row.workflow_id.clone(),
        row.held_by_run_id.clone(),
    )
}

/// The answer a stored row gave, as the store read it for a batch.
fn stored_answer(stored: StoredAnswer) -> Answer {
    recorded_answer(
        stored.intake_id,
        &stored.outcome,
        stored.detail,
        stored.run_id,
        stored.workflow_id,
        stored.held_by_run_id,
    )
}

/// The answer a ledger row with these columns gave (for a writer that reads only them).
pub(super) fn recorded_answer(
    intake_id: String,
    outcome: &str,
    detail: Option<String>,
    run_id: Option<String>,
    workflow_id: Option<String>,
    held_by_run_id: Option<String>,
) -> Answer {
    Answer {
        outcome: outcome.parse().unwrap_or(Outcome::DeadLettered),
        detail,
        run_id,
        workflow_id,
        held_by_run_id,
        intake_id: Some(intake_id),
        first_outcome: None,
        deferred: false,
        retry_after: None,
    }
}

pub(super) fn duplicate_of(first: &Answer) -> Answer {
    Answer {
        outcome: Outcome::Duplicate,
        detail: Some(format!(
            "delivery already recorded as {} by intake {}",
            first.outcome,
            first.intake_id.as_deref().unwrap_or("?")
        )),
        first_outcome: Some(first.outcome),
        ..first.clone()
    }
}
