//! A schedule's fire as a delivery: source `schedule:<id>`, delivery id the instant it was
//! scheduled for, submitted through intake like any channel's delivery, so the ledger keeps
//! one row per fire however many replicas submit it.
//!
//! Invariant: a fire's identity depends only on its schedule and instant, never on the replica
//! or the moment it is submitted.

use chrono::{DateTime, Utc};
use serde_json::Value;
use switchyard_core::{Channel as EventChannel, Event, Outcome};
use switchyard_store::Store;
use uuid::Uuid;

use super::scheduler::{FireKind, FireSink};
use super::{CONTENT_TYPE, KIND};
use crate::config::schedules::{SCHEDULED_FOR, ScheduleConfig, fire_id};
use crate::intake::{Delivery, DeliveryBody, Intake, Raw};

/// The detail of a fire recorded as missed.
pub const MISSED: &str = "missed";

/// The payload field a fire run by `catch_up` carries (`true`).
pub const CAUGHT_UP: &str = "caught_up";

/// Fires recorded through the daemon's intake, read back from its ledger.
#[derive(Debug, Clone)]
pub struct IntakeSink {
    pub store: Store,
    pub intake: Intake,
}

#[async_trait::async_trait]
impl FireSink for IntakeSink {
    async fn latest(&self, schedule: &ScheduleConfig) -> Result<Option<DateTime<Utc>>, String> {
        let row = self
            .store
            .latest_delivery(&schedule.source())
            .await
            .map_err(|error| error.to_string())?;
        Ok(row.and_then(|row| instant_of(&row.delivery_id)))
    }

    async fn record(
        &self,
        schedule: &ScheduleConfig,
        at: DateTime<Utc>,
        kind: FireKind,
    ) -> Result<Outcome, String> {
        let started = std::time::Instant::now();
        let answer = self.intake.submit(delivery(schedule, at, kind)).await;
        crate::metrics::metrics().delivery(
            KIND,
            answer.as_ref().ok().map(|a| a.outcome),
            started.elapsed(),
        );
        answer
            .map(|answer| answer.outcome)
            .map_err(|error| error.to_string())
    }
}

/// The instant a fire's delivery id names.
pub fn instant_of(delivery_id: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(delivery_id)
        .ok()
        .map(|at| at.with_timezone(&Utc))
}

/// The event a fire of `schedule` at `at` carries.
pub fn event(
    schedule: &ScheduleConfig,
    at: DateTime<Utc>,
    kind: FireKind,
    intake_id: Uuid,
) -> Event {
    let mut payload = schedule.payload.clone();
    payload.insert(SCHEDULED_FOR.into(), Value::String(fire_id(at)));
    if kind == FireKind::CaughtUp {
        payload.insert(CAUGHT_UP.into(), Value::Bool(true));
    }
    Event {
        channel: EventChannel::Schedule,
        event_type: schedule.event_type.clone(),
        tenant_id: schedule.tenant.clone(),
        target_entity_id: schedule.entity().to_owned(),
        payload: Value::Object(payload),
        raw_ref: Delivery::raw_ref(intake_id),
    }
}

/// The delivery of a fire: routed, or (missed) recorded `ineligible` with its event.
fn delivery(schedule: &ScheduleConfig, at: DateTime<Utc>, kind: FireKind) -> Delivery {
    let intake_id = Uuid::now_v7();
    let event = event(schedule, at, kind, intake_id);
    let raw = serde_json::json!({"schedule": schedule.id, SCHEDULED_FOR: fire_id(at)});
    let body = match kind {
        FireKind::Due | FireKind::CaughtUp => DeliveryBody::Route(event),
        FireKind::Missed => DeliveryBody::Ineligible {
            detail: MISSED.into(),
            event: Some(event),
        },
    };
    let mut delivery = Delivery::new(intake_id, schedule.source(), fire_id(at), body);
    delivery.raw = Some(Raw {
        content_type: CONTENT_TYPE.into(),
        bytes: raw.to_string().into(),
    });
    // Every replica submits every fire: all but one are duplicates by design.
    delivery
}
