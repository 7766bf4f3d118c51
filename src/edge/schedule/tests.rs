//! The scheduler under a clock the test moves: fires at the instants its timing names (across
//! DST changes too), once across two replicas, missed fires by `catch_up` policy, reloads.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use switchyard_core::Outcome;

use super::clock::ManualClock;
use super::scheduler::{FireKind, FireSink, Scheduler};
use crate::config::schedules::{CatchUp, ScheduleConfig, fire_id};

/// A ledger in memory keyed as the real one is: one row per (schedule, instant).
#[derive(Debug, Default)]
struct Ledger {
    rows: Mutex<BTreeMap<(String, DateTime<Utc>), FireKind>>,
    duplicates: Mutex<usize>,
}

#[async_trait::async_trait]
impl FireSink for Ledger {
    async fn latest(&self, schedule: &ScheduleConfig) -> Result<Option<DateTime<Utc>>, String> {
        let rows = self.rows.lock().unwrap();
        Ok(rows
            .keys()
            .filter(|(id, _)| *id == schedule.id)
            .map(|(_, at)| *at)
            .max())
    }

    async fn record(
        &self,
        schedule: &ScheduleConfig,
        at: DateTime<Utc>,
        kind: FireKind,
    ) -> Result<Outcome, String> {
        let mut rows = self.rows.lock().unwrap();
        if rows.contains_key(&(schedule.id.clone(), at)) {
            *self.duplicates.lock().unwrap() += 1;
            return Ok(Outcome::Duplicate);
        }
        rows.insert((schedule.id.clone(), at), kind);
        Ok(match kind {
            FireKind::Missed => Outcome::Ineligible,
            _ => Outcome::Routed,
        })
    }
}

impl Ledger {
    fn fires(&self, id: &str) -> Vec<(String, FireKind)> {
        self.rows
            .lock()
            .unwrap()
            .iter()
            .filter(|((schedule, _), _)| schedule == id)
            .map(|((_, at), kind)| (fire_id(*at), *kind))
            .collect()
    }

    fn ids(&self, id: &str) -> Vec<String> {
        self.fires(id).into_iter().map(|(at, _)| at).collect()
    }

    /// Waits (real time, 5 s at most) until `id` has `count` rows.
    async fn wait_for(&self, id: &str, count: usize) {
        for _ in 0..1000 {
            if self.fires(id).len() >= count {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!(
            "{id}: {} rows, not {count}: {:?}",
            self.fires(id).len(),
            self.fires(id)
        );
    }
}

/// Lets started schedulers look at the clock before the test moves it (a schedule never
/// fired before starts from the first fire after its start).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(20)).await;
}

fn at(text: &str) -> DateTime<Utc> {
    text.parse().expect("an RFC 3339 instant")
}

fn schedule(id: &str, rule: &str, zone: &str) -> ScheduleConfig {
    let (cron, every) = match rule.strip_prefix("every:") {
        Some(every) => (None, Some(humantime::parse_duration(every).unwrap())),
        None => (Some(rule.to_owned()), None),
    };
    ScheduleConfig {
        id: id.into(),
        tenant: "acme".into(),
        cron,
        every,
        time_zone: zone.into(),
        event_type: "sweep".into(),
        target_entity_id: None,
        payload: Default::default(),
        catch_up: CatchUp::None,
        max_catch_up: 10,
    }
}

/// Moves the clock to each expected fire in turn; the scheduler records exactly those.
async fn fires_exactly(rule: &str, zone: &str, from: &str, expected: &[&str]) {
    let clock = Arc::new(ManualClock::at(at(from)));
    let ledger = Arc::new(Ledger::default());
    let scheduler = Scheduler::start(
        clock.clone(),
        ledger.clone(),
        vec![schedule("s", rule, zone)],
    );
    settle().await;
    for (n, fire) in expected.iter().enumerate() {
        clock.set(at(fire));
        ledger.wait_for("s", n + 1).await;
    }
    scheduler.shutdown().await;
    assert_eq!(ledger.ids("s"), expected, "{rule} in {zone} from {from}");
}

#[tokio::test]
async fn fires_follow_both_dst_changes_of_2027() {
    // Berlin: 02:00-02:45 do not exist on 2027-03-28 and fire once at 03:00 CEST (01:00Z).
    fires_exactly(
        "0 */15 * * * *",
        "Europe/Berlin",
        "2027-03-28T00:40:00Z",
        &[
            "2027-03-28T00:45:00Z",
            "2027-03-28T01:00:00Z",
            "2027-03-28T01:15:00Z",
        ],
    )
    .await;
    // Berlin: 02:00-02:59 happen twice on 2027-10-31 and fire on their first pass only.
    fires_exactly(
        "0 */30 * * * *",
        "Europe/Berlin",
        "2027-10-31T00:10:00Z",
        &[
            "2027-10-31T00:30:00Z",
            "2027-10-31T02:00:00Z",
            "2027-10-31T02:30:00Z",
        ],
    )
    .await;
    // New York: 02:30 does not exist on 2027-03-14; 01:30 happens twice on 2027-11-07.
    fires_exactly(
        "0 30 2 * * *",
        "America/New_York",
        "2027-03-13T12:00:00Z",
        &["2027-03-14T07:00:00Z", "2027-03-15T06:30:00Z"],
    )
    .await;
    fires_exactly(
        "0 30 1 * * *",
        "America/New_York",
        "2027-11-06T12:00:00Z",
        &["2027-11-07T05:30:00Z", "2027-11-08T06:30:00Z"],
    )
    .await;
    // Weekdays only, across a weekend.
    fires_exactly(
        "0 0 9 * * Mon-Fri",
        "Europe/Berlin",
        "2027-01-08T12:00:00Z",
        &["2027-01-11T08:00:00Z", "2027-01-12T08:00:00Z"],
    )
    .await;
    fires_exactly(
        "every:15m",
        "Europe/Berlin",
        "2027-03-28T00:50:00Z",
        &["2027-03-28T01:00:00Z", "2027-03-28T01:15:00Z"],
    )
    .await;
}

#[tokio::test]
async fn two_replicas_record_each_fire_once() {
    let clock = Arc::new(ManualClock::at(at("2027-01-01T00:00:00.500Z")));
    let ledger = Arc::new(Ledger::default());
    let schedules = vec![schedule("tick", "every:1s", "UTC")];
    let a = Scheduler::start(clock.clone(), ledger.clone(), schedules.clone());
    let b = Scheduler::start(clock.clone(), ledger.clone(), schedules);
    settle().await;
    for second in 1..=15 {
        clock.set(at("2027-01-01T00:00:00.500Z") + chrono::Duration::seconds(second));
        ledger.wait_for("tick", second as usize).await;
    }
    // Let both replicas finish the last second.
    tokio::time::sleep(Duration::from_millis(50)).await;
    a.shutdown().await;
    b.shutdown().await;
    let expected: Vec<String> = (1..=15)
        .map(|s| fire_id(at("2027-01-01T00:00:00Z") + chrono::Duration::seconds(s)))
        .collect();
    assert_eq!(ledger.ids("tick"), expected);
    assert!(
        ledger
            .fires("tick")
            .iter()
            .all(|(_, kind)| *kind == FireKind::Due)
    );
    assert_eq!(
        *ledger.duplicates.lock().unwrap(),
        15,
        "the other replica's tries"
    );
}

#[tokio::test]
async fn missed_fires_follow_the_catch_up_policy() {
    for (policy, max, caught_up) in [
        (CatchUp::None, 10, 0),
        (CatchUp::Latest, 10, 1),
        (CatchUp::All, 3, 3),
        (CatchUp::All, 10, 8),
    ] {
        let ledger = Arc::new(Ledger::default());
        let mut config = schedule("sweep", "every:1s", "UTC");
        config.catch_up = policy;
        config.max_catch_up = max;
        let last = at("2027-01-01T00:00:00Z");
        ledger
            .rows
            .lock()
            .unwrap()
            .insert(("sweep".into(), last), FireKind::Due);
        // Every replica was down for 10 s: fires 1..=8 are older than the grace, 9 and 10 not.
        let clock = Arc::new(ManualClock::at(last + chrono::Duration::seconds(10)));
        let scheduler = Scheduler::start(clock.clone(), ledger.clone(), vec![config]);
        ledger.wait_for("sweep", 11).await;
        scheduler.shutdown().await;
        let kinds: Vec<FireKind> = ledger.fires("sweep").into_iter().map(|(_, k)| k).collect();
        let mut expected = vec![FireKind::Due];
        expected.extend(std::iter::repeat_n(FireKind::Missed, 8 - caught_up));
        expected.extend(std::iter::repeat_n(FireKind::CaughtUp, caught_up));
        expected.extend([FireKind::Due, FireKind::Due]);
        assert_eq!(kinds, expected, "{policy:?} max {max}");
    }
}

#[tokio::test]
async fn reload_changes_removes_and_adds_schedules() {
    let start = at("2027-01-01T00:00:00.500Z");
    let clock = Arc::new(ManualClock::at(start));
    let ledger = Arc::new(Ledger::default());
    let every_2s = schedule("changed", "every:2s", "UTC");
    let gone = schedule("gone", "every:1s", "UTC");
    let scheduler = Scheduler::start(clock.clone(), ledger.clone(), vec![every_2s, gone.clone()]);
    settle().await;
    let second = |s: i64| start + chrono::Duration::seconds(s);
    clock.set(second(2));
    ledger.wait_for("changed", 1).await;
    ledger.wait_for("gone", 2).await;
    // The change: every 3 s from now on, one removed, one added with catch_up none.
    let mut added = schedule("added", "every:1s", "UTC");
    added.catch_up = CatchUp::None;
    scheduler.apply(vec![schedule("changed", "every:3s", "UTC"), added]);
    tokio::time::sleep(Duration::from_millis(20)).await;
    for s in 3..=7 {
        clock.set(second(s));
        ledger.wait_for("added", (s - 2) as usize).await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    scheduler.shutdown().await;
    // 00:00:02 under the old timing, then 03 and 06 under the new: no fire twice, none extra.
    assert_eq!(
        ledger.ids("changed"),
        [
            "2027-01-01T00:00:02Z",
            "2027-01-01T00:00:03Z",
            "2027-01-01T00:00:06Z"
        ]
    );
    assert_eq!(
        ledger.ids("gone"),
        ["2027-01-01T00:00:01Z", "2027-01-01T00:00:02Z"]
    );
    assert_eq!(
        ledger.ids("added"),
        (3..=7)
            .map(|s| fire_id(at("2027-01-01T00:00:00Z") + chrono::Duration::seconds(s)))
            .collect::<Vec<_>>()
    );
}
