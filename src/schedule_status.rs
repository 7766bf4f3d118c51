//! What `/v1/schedules` and the console show of each schedule: its timing, its next fire (from
//! the revision in force and the clock) and its latest recorded fire (from the ledger, with its
//! outcome and run). Below the API and the console, beside the edge that fires them.
//!
//! Invariant: only schedules of the tenants asked for are read or shown.

use chrono::{DateTime, Utc};
use serde::Serialize;
use switchyard_store::{DbErr, Store};

use crate::config::ScheduleConfig;
use crate::config::schedules::fire_id;

/// One schedule as shown.
#[derive(Debug, Clone, Serialize)]
pub struct ScheduleStatus {
    pub id: String,
    pub tenant: String,
    /// The source its fires are recorded under (`schedule:<id>`).
    pub source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    pub time_zone: String,
    pub event_type: String,
    pub target_entity_id: String,
    pub catch_up: &'static str,
    pub max_catch_up: usize,
    /// The next fire after now, in UTC (RFC 3339 with `Z`); absent when none comes.
    pub next_fire: Option<String>,
    /// The same instant in the schedule's time zone.
    pub next_fire_local: Option<String>,
    /// Its latest recorded fire, by whichever replica.
    pub last_fire: Option<LastFire>,
}

/// A schedule's latest recorded fire.
#[derive(Debug, Clone, Serialize)]
pub struct LastFire {
    pub scheduled_for: String,
    pub outcome: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    pub intake_id: String,
    /// When it was recorded (RFC 3339, UTC).
    pub recorded_at: Option<String>,
}

/// The status of each of `schedules` whose tenant `visible` admits, in config order.
pub async fn statuses(
    store: &Store,
    schedules: &[ScheduleConfig],
    visible: impl Fn(&str) -> bool,
    now: DateTime<Utc>,
) -> Result<Vec<ScheduleStatus>, DbErr> {
    let mut shown = Vec::new();
    for schedule in schedules.iter().filter(|s| visible(&s.tenant)) {
        let next = schedule.timing().ok().and_then(|timing| {
            let next = timing.next_after(now)?;
            let local = next.with_timezone(&timing.zone());
            Some((
                fire_id(next),
                local.format("%Y-%m-%dT%H:%M:%S%:z %Z").to_string(),
            ))
        });
        let last_fire = store
            .latest_delivery(&schedule.source())
            .await?
            .map(|row| LastFire {
                scheduled_for: row.delivery_id,
                outcome: row.outcome,
                detail: row.detail,
                run_id: row.run_id,
                intake_id: row.id,
                recorded_at: DateTime::from_timestamp_millis(row.received_at)
                    .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
            });
        shown.push(ScheduleStatus {
            id: schedule.id.clone(),
            tenant: schedule.tenant.clone(),
            source: schedule.source(),
            cron: schedule.cron.clone(),
            every: schedule
                .every
                .map(|every| humantime::format_duration(every).to_string()),
            time_zone: schedule.time_zone.clone(),
            event_type: schedule.event_type.clone(),
            target_entity_id: schedule.entity().to_owned(),
            catch_up: schedule.catch_up.as_str(),
            max_catch_up: schedule.max_catch_up,
            next_fire_local: next.as_ref().map(|(_, local)| local.clone()),
            next_fire: next.map(|(utc, _)| utc),
            last_fire,
        });
    }
    Ok(shown)
}
