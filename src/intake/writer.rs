//! The intake writer: decides a batch of deliveries in one transaction and commits once.

use std::collections::HashMap;
use std::time::Duration;

use sea_orm::sea_query::OnConflict;
use sea_orm::{ActiveValue::Set, DatabaseConnection, DbErr, EntityTrait, SqlErr};
use switchyard_core::{Event, Outcome};
use switchyard_router::runs::begin_write;
use switchyard_router::{Decision, LockBatch, now_millis};
use tokio::sync::mpsc;

use super::{Answer, Delivery, DeliveryBody, Pending, StoreUnavailable};
use crate::live::{Live, LiveConfig};
use crate::store::entities::{intake, mailbox_cursor, raw_delivery};
use crate::store::ledger;

/// Most deliveries decided in one transaction; bounds statement size on every backend.
const MAX_BATCH: usize = 256;
/// Tries of one batch when it lost a race with another writer (unique key, deadlock).
const ATTEMPTS: u32 = 5;

/// Runs until every sender is gone.
pub(super) async fn run(
    db: DatabaseConnection,
    live: LiveConfig,
    mut queue: mpsc::Receiver<Pending>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while queue.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let revision = live.current();
        decide(&db, &revision, std::mem::take(&mut batch)).await;
    }
}

/// Decides and answers every delivery of `batch`. If the batch as a whole keeps failing, each
/// delivery is tried alone, so one poisonous delivery cannot refuse its neighbours.
async fn decide(db: &DatabaseConnection, live: &Live, batch: Vec<Pending>) {
    let deliveries: Vec<&Delivery> = batch.iter().map(|p| &p.delivery).collect();
    match commit_with_retries(db, live, &deliveries).await {
        Ok(answers) => {
            for (pending, answer) in batch.into_iter().zip(answers) {
                let _ = pending.reply.send(Ok(answer));
            }
        }
        Err(error) if batch.len() > 1 && !is_connection_error(&error) => {
            tracing::warn!(%error, size = batch.len(), "a batch failed; deciding its deliveries one by one");
            for pending in batch {
                Box::pin(decide(db, live, vec![pending])).await;
            }
        }
        Err(error) => {
            tracing::error!(%error, size = batch.len(), "the store refused deliveries; senders are told to retry");
            let refusal = StoreUnavailable(error.to_string());
            for pending in batch {
                let _ = pending.reply.send(Err(refusal.clone()));
            }
        }
    }
}

async fn commit_with_retries(
    db: &DatabaseConnection,
    live: &Live,
    deliveries: &[&Delivery],
) -> Result<Vec<Answer>, DbErr> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match commit_batch(db, live, deliveries).await {
            Err(error) if attempt < ATTEMPTS && is_lost_race(&error) => {
                tracing::debug!(%error, attempt, "batch lost a race with another writer; retrying");
                tokio::time::sleep(backoff(attempt)).await;
            }
            result => return result,
        }
    }
}

/// A conflict another transaction caused: trying again will see its committed result.
fn is_lost_race(error: &DbErr) -> bool {
    if matches!(error.sql_err(), Some(SqlErr::UniqueConstraintViolation(_))) {
        return true;
    }
    let text = error.to_string().to_ascii_lowercase();
    [
        "deadlock",
        "40001",
        "40p01",
        "serialize",
        "database is locked",
        "lock wait timeout",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

fn is_connection_error(error: &DbErr) -> bool {
    matches!(error, DbErr::Conn(_) | DbErr::ConnectionAcquire(_))
}

fn backoff(attempt: u32) -> Duration {
    // Jitter from the clock's low bits keeps two writers that collided from colliding again.
    let jitter = u64::from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
            % 5_000,
    );
    Duration::from_micros((2_000 << attempt.min(6)) + jitter)
}

/// One transaction: dedup, route, lock, and write everything the batch decided.
async fn commit_batch(
    db: &DatabaseConnection,
    live: &Live,
    deliveries: &[&Delivery],
) -> Result<Vec<Answer>, DbErr> {
    let now = now_millis();
    let txn = begin_write(db).await?;

    let keys: Vec<(&str, &str)> = deliveries
        .iter()
        .map(|d| (d.source.as_str(), d.delivery_id.as_str()))
        .collect();
    let mut seen = ledger::existing_deliveries(&txn, &keys).await?;
    let message_keys: Vec<(&str, &str)> = deliveries
        .iter()
        .filter_map(|d| Some((d.source.as_str(), d.message_key.as_deref()?)))
        .collect();
    let mut claimed = if message_keys.is_empty() {
        HashMap::new()
    } else {
        ledger::claimed_messages(&txn, &message_keys).await?
    };

    let choices: Vec<_> = deliveries
        .iter()
        .map(|d| match &d.body {
            DeliveryBody::Route(event) => {
                live.index
                    .choose(&event.tenant_id, event.channel, &event.event_type)
            }
            _ => None,
        })
        .collect();
    let lock_keys =
        deliveries
            .iter()
            .zip(&choices)
            .filter_map(|(d, choice)| match (&d.body, choice) {
                (DeliveryBody::Route(event), Some(_)) => {
                    Some((event.tenant_id.clone(), event.target_entity_id.clone()))
                }
                _ => None,
            });
    let mut locks = LockBatch::load(&txn, lock_keys, now).await?;

    let mut answers = Vec::with_capacity(deliveries.len());
    let mut ledger_rows = Vec::new();
    let mut raw_rows = Vec::new();
    let mut cursors: HashMap<(String, String), mailbox_cursor::ActiveModel> = HashMap::new();
    for (delivery, choice) in deliveries.iter().zip(&choices) {
        if let Some(cursor) = &delivery.cursor {
            cursors.insert(
                (delivery.source.clone(), cursor.mailbox.clone()),
                mailbox_cursor::ActiveModel {
                    source: Set(delivery.source.clone()),
                    mailbox: Set(cursor.mailbox.clone()),
                    uidvalidity: Set(cursor.uidvalidity.into()),
                    last_uid: Set(cursor.uid.into()),
                    updated_at: Set(now),
                },
            );
        }
        let key = (delivery.source.clone(), delivery.delivery_id.clone());
        if let Some(first) = seen.get(&key) {
            answers.push(duplicate_of(first));
            continue;
        }
        let message_key = delivery
            .message_key
            .as_ref()
            .map(|message| (delivery.source.clone(), message.clone()));
        if let Some(first) = message_key.as_ref().and_then(|k| claimed.get(k)) {
            answers.push(duplicate_of(first));
            continue;
        }
        let intake_id = delivery.intake_id.to_string();
        let mut row = match &delivery.body {
            DeliveryBody::Route(event) => {
                let decision = locks.route(
                    &event.tenant_id,
                    &event.target_entity_id,
                    choice.as_ref(),
                    &intake_id,
                );
                ledger_row(delivery, Some(event), decision_fields(&decision), live, now)
            }
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
        };
        if row.outcome == Outcome::Routed.as_str()
            && let Some(message_key) = message_key
        {
            row.message_key = Some(message_key.1.clone());
            claimed.insert(message_key, row.clone());
        }
        answers.push(answer_of(&row));
        if let Some(raw) = &delivery.raw {
            raw_rows.push(raw_delivery::ActiveModel {
                id: Set(intake_id),
                source: Set(delivery.source.clone()),
                content_type: Set(raw.content_type.clone()),
                body: Set(raw.bytes.to_vec()),
                received_at: Set(delivery.received_at),
            });
        }
        // A later copy of this delivery in the same batch is its duplicate.
        seen.insert(key, row.clone());
        ledger_rows.push(intake::ActiveModel::from(row));
    }

    locks.persist(&txn).await?;
    if !raw_rows.is_empty() {
        raw_delivery::Entity::insert_many(raw_rows)
            .exec_without_returning(&txn)
            .await?;
    }
    if !ledger_rows.is_empty() {
        intake::Entity::insert_many(ledger_rows)
            .exec_without_returning(&txn)
            .await?;
    }
    if !cursors.is_empty() {
        mailbox_cursor::Entity::insert_many(cursors.into_values())
            .on_conflict(
                OnConflict::columns([
                    mailbox_cursor::Column::Source,
                    mailbox_cursor::Column::Mailbox,
                ])
                .update_columns([
                    mailbox_cursor::Column::Uidvalidity,
                    mailbox_cursor::Column::LastUid,
                    mailbox_cursor::Column::UpdatedAt,
                ])
                .to_owned(),
            )
            .exec_without_returning(&txn)
            .await?;
    }
    txn.commit().await?;
    Ok(answers)
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
        } => Fields {
            outcome: Outcome::EntityLocked,
            detail: None,
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
        outcome: fields.outcome.as_str().to_owned(),
        detail: fields.detail,
        channel: event.map(|e| e.channel.as_str().to_owned()),
        event_type: event.map(|e| e.event_type.clone()),
        tenant_id: event.map(|e| e.tenant_id.clone()),
        target_entity_id: event.map(|e| e.target_entity_id.clone()),
        payload: event.map(|e| e.payload.to_string()),
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
    }
}

fn answer_of(row: &intake::Model) -> Answer {
    Answer {
        outcome: row.outcome.parse().unwrap_or(Outcome::DeadLettered),
        detail: row.detail.clone(),
        run_id: row.run_id.clone(),
        workflow_id: row.workflow_id.clone(),
        held_by_run_id: row.held_by_run_id.clone(),
        intake_id: Some(row.id.clone()),
        first_outcome: None,
    }
}

fn duplicate_of(first: &intake::Model) -> Answer {
    let first_answer = answer_of(first);
    Answer {
        outcome: Outcome::Duplicate,
        detail: Some(format!(
            "delivery already recorded as {} by intake {}",
            first.outcome, first.id
        )),
        first_outcome: Some(first_answer.outcome),
        ..first_answer
    }
}
