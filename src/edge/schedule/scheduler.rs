//! The scheduler: one task per daemon that fires every schedule of the revision in force when
//! it is due, through a [`FireSink`] (the intake pipeline). Every replica fires every fire;
//! the ledger's `(source, delivery_id)` identity keeps one, so there is no leader to elect.
//!
//! Invariant: a fire is submitted for every instant the timing names, in order, each exactly
//! as `Due`, `CaughtUp` or `Missed`; a fire due while this task runs is submitted `Due` within
//! its wake-up (a second at most when the store answers), and fires due while no replica was
//! up (older than [`GRACE`] when a schedule starts) are handled by its `catch_up` policy.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use switchyard_core::Outcome;
use tokio::sync::watch;

use super::clock::Clock;
use crate::config::schedules::{ScheduleConfig, Timing, fire_id};

/// How late a fire may be recorded and still count as fired on time: a replica that is up
/// fires within a second, so a fire older than this when a schedule starts was missed.
pub const GRACE: Duration = Duration::from_secs(2);

/// How far a running scheduler may fall behind (the store down, the process stopped) before
/// the fires it has not recorded count as missed, handled by `catch_up` as at a start.
pub const LAG_LIMIT: Duration = Duration::from_secs(60);

/// Most missed fires of one schedule recorded one row each when it starts; older ones are
/// logged as a count.
pub const MAX_MISSED_ROWS: usize = 1000;

/// How long the scheduler waits before trying again after the store failed.
const RETRY: Duration = Duration::from_secs(1);

/// How a fire is submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FireKind {
    /// Due now: routed.
    Due,
    /// Missed while no replica was up, and run by the `catch_up` policy: routed, and its
    /// payload says `caught_up`.
    CaughtUp,
    /// Missed while no replica was up: recorded `ineligible`, detail `missed`; nothing runs.
    Missed,
}

/// Where fires go, and what has been recorded of a schedule.
#[async_trait::async_trait]
pub trait FireSink: Send + Sync + std::fmt::Debug + 'static {
    /// The latest fire recorded for `schedule`, by any replica.
    async fn latest(&self, schedule: &ScheduleConfig) -> Result<Option<DateTime<Utc>>, String>;

    /// Records one fire; the outcome its ledger row has (`duplicate`: another replica's).
    async fn record(
        &self,
        schedule: &ScheduleConfig,
        at: DateTime<Utc>,
        kind: FireKind,
    ) -> Result<Outcome, String>;
}

/// One schedule as the task keeps it.
#[derive(Debug)]
struct Entry {
    config: ScheduleConfig,
    timing: Timing,
    /// Whether what it missed has been looked at (its start: at the daemon's start, when it
    /// is added, after falling behind by more than [`LAG_LIMIT`]).
    started: bool,
    /// Its next fire (once started); `None` when its timing names no more.
    next: Option<DateTime<Utc>>,
    /// The latest fire this task submitted or found recorded.
    last: Option<DateTime<Utc>>,
    /// When to try again after the store failed.
    retry_at: Option<DateTime<Utc>>,
}

impl Entry {
    fn new(config: ScheduleConfig) -> Option<Self> {
        let timing = match config.timing() {
            Ok(timing) => timing,
            // `check` refuses such a file; a revision in force has none.
            Err(error) => {
                tracing::error!(schedule = %config.id, %error, "schedule cannot fire");
                return None;
            }
        };
        Some(Self {
            config,
            timing,
            started: false,
            next: None,
            last: None,
            retry_at: None,
        })
    }

    /// When the task must look at it again.
    fn wake_at(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match (self.retry_at, self.started) {
            (Some(at), _) => Some(at),
            (None, false) => Some(now),
            (None, true) => self.next,
        }
    }
}

/// The running task's handle: what it fires, and how it stops.
#[derive(Debug)]
pub struct Scheduler {
    schedules: watch::Sender<Arc<Vec<ScheduleConfig>>>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Scheduler {
    /// Starts the task with `schedules` in force.
    pub fn start(
        clock: Arc<dyn Clock>,
        sink: Arc<dyn FireSink>,
        schedules: Vec<ScheduleConfig>,
    ) -> Self {
        let (schedules, wanted) = watch::channel(Arc::new(schedules));
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(run(clock, sink, wanted, stopped));
        Self {
            schedules,
            stop,
            task,
        }
    }

    /// Puts `schedules` in force: a changed one fires on its new timing from its next fire
    /// (never twice for one instant), a removed one stops, an added one starts.
    pub fn apply(&self, schedules: Vec<ScheduleConfig>) {
        self.schedules.send_if_modified(|current| {
            let changed = **current != schedules;
            if changed {
                *current = Arc::new(schedules);
            }
            changed
        });
    }

    /// Stops the task (a fire being submitted is finished first).
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

async fn run(
    clock: Arc<dyn Clock>,
    sink: Arc<dyn FireSink>,
    mut wanted: watch::Receiver<Arc<Vec<ScheduleConfig>>>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut entries: BTreeMap<String, Entry> = BTreeMap::new();
    let schedules = wanted.borrow_and_update().clone();
    put_in_force(&mut entries, &schedules, clock.now());
    loop {
        if *stopped.borrow() {
            return;
        }
        for entry in entries.values_mut() {
            if entry.retry_at.is_some_and(|at| at > clock.now()) {
                continue;
            }
            entry.retry_at = None;
            if let Err(error) = fire_due(entry, &*sink, &*clock).await {
                tracing::warn!(
                    schedule = %entry.config.id,
                    %error,
                    "cannot record a schedule's fire; trying again in a second"
                );
                entry.retry_at = Some(clock.now() + RETRY);
            }
        }
        let now = clock.now();
        let wake = entries.values().filter_map(|e| e.wake_at(now)).min();
        let sleep = async {
            match wake {
                Some(at) => clock.sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = sleep => {}
            changed = wanted.changed() => {
                if changed.is_err() {
                    return;
                }
                let schedules = wanted.borrow_and_update().clone();
                put_in_force(&mut entries, &schedules, clock.now());
            }
            _ = stopped.changed() => return,
        }
    }
}

/// Makes `schedules` the ones in force: removed ones go, added ones start (looking at what
/// they missed), changed ones keep their last fire and go on from the first fire of their new
/// timing after it and after `now`.
fn put_in_force(
    entries: &mut BTreeMap<String, Entry>,
    schedules: &[ScheduleConfig],
    now: DateTime<Utc>,
) {
    let mut kept = BTreeMap::new();
    for config in schedules {
        match entries.remove(&config.id) {
            Some(entry) if entry.config == *config => {
                kept.insert(config.id.clone(), entry);
            }
            Some(old) => {
                let Some(mut entry) = Entry::new(config.clone()) else {
                    continue;
                };
                // Started already: what it missed was looked at under its old timing.
                let from = old.last.map_or(now, |last| last.max(now));
                entry.started = old.started;
                entry.last = old.last;
                entry.next = entry.timing.next_after(from);
                tracing::info!(
                    schedule = %config.id,
                    next = entry.next.map(fire_id).as_deref(),
                    "schedule changed; it fires on its new timing from its next fire"
                );
                kept.insert(config.id.clone(), entry);
            }
            None => {
                if let Some(entry) = Entry::new(config.clone()) {
                    kept.insert(config.id.clone(), entry);
                }
            }
        }
    }
    for id in entries.keys() {
        tracing::info!(schedule = %id, "schedule removed; it fires no more");
    }
    *entries = kept;
}

/// Starts `entry` if it has not, then submits every fire of it that is due.
async fn fire_due(entry: &mut Entry, sink: &dyn FireSink, clock: &dyn Clock) -> Result<(), String> {
    if !entry.started {
        start(entry, sink, clock.now()).await?;
    }
    while let Some(next) = entry.next.filter(|next| *next <= clock.now()) {
        if (clock.now() - next)
            .to_std()
            .is_ok_and(|late| late > LAG_LIMIT)
        {
            tracing::warn!(
                schedule = %entry.config.id,
                due = %fire_id(next),
                "the scheduler fell behind; fires not recorded by now are handled as missed"
            );
            start(entry, sink, clock.now()).await?;
            continue;
        }
        let outcome = sink.record(&entry.config, next, FireKind::Due).await?;
        crate::metrics::metrics().schedule_fire(&entry.config.id, outcome);
        entry.last = Some(next);
        entry.next = entry.timing.next_after(next);
    }
    Ok(())
}

/// Looks at the fires `entry` missed: those after its latest recorded fire that were due
/// before `now` less [`GRACE`], handled by its `catch_up` policy; then its next fire is the
/// first after them. A schedule never fired before misses nothing: it starts from `now`.
async fn start(entry: &mut Entry, sink: &dyn FireSink, now: DateTime<Utc>) -> Result<(), String> {
    let config = &entry.config;
    let Some(latest) = sink.latest(config).await? else {
        entry.next = entry
            .timing
            .next_after(entry.last.map_or(now, |last| last.max(now)));
        entry.started = true;
        return Ok(());
    };
    let latest = entry.last.map_or(latest, |last| last.max(latest));
    let cutoff = now - GRACE;
    let (missed, left_out) = entry.timing.fires_between(latest, cutoff, MAX_MISSED_ROWS);
    if left_out > 0 {
        tracing::warn!(
            schedule = %config.id,
            left_out,
            after = %fire_id(latest),
            "more fires were missed than are recorded one by one; the oldest are only counted here"
        );
    }
    if let (Some(first), Some(last)) = (missed.first(), missed.last()) {
        tracing::info!(
            schedule = %config.id,
            missed = missed.len(),
            first = %fire_id(*first),
            last = %fire_id(*last),
            catch_up = config.catch_up.as_str(),
            "schedule missed fires while no replica was up"
        );
    }
    let runs = config.catch_up.runs(config.max_catch_up).min(missed.len());
    for (i, at) in missed.iter().enumerate() {
        let kind = if i >= missed.len() - runs {
            FireKind::CaughtUp
        } else {
            FireKind::Missed
        };
        let outcome = sink.record(config, *at, kind).await?;
        crate::metrics::metrics().schedule_fire(&config.id, outcome);
        entry.last = Some(*at);
    }
    entry.next = entry.timing.next_after(latest.max(cutoff));
    entry.last = Some(entry.last.map_or(latest, |last| last.max(latest)));
    entry.started = true;
    Ok(())
}
