//! `[[schedule]]`: time as a trigger. Each entry names when it fires (a cron expression in an
//! IANA time zone, or a fixed interval) and the event each fire carries; `timing` turns that
//! into instants.
//!
//! Invariant: a schedule that loads has a timing that parses, a time zone that exists, an id
//! that is unique and fit for a source name (`schedule:<id>`), and a payload that leaves
//! `scheduled_for` to the fire.

mod timing;

use std::collections::HashSet;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

pub use timing::{Timing, fire_id};

/// The source prefix of every schedule's deliveries: `schedule:<id>`.
pub const SOURCE_PREFIX: &str = "schedule:";

/// The payload field each fire adds: the instant it was scheduled for (RFC 3339, UTC).
pub const SCHEDULED_FOR: &str = "scheduled_for";

/// One `[[schedule]]` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleConfig {
    /// Unique among schedules (letters, digits, `.`, `_`, `-`); its fires' source is
    /// `schedule:<id>`.
    pub id: String,
    /// The tenant its events belong to.
    pub tenant: String,
    /// When it fires: a cron expression with the seconds field first
    /// (`sec min hour day-of-month month day-of-week`), read in `time_zone`. Set this or `every`.
    #[serde(default)]
    pub cron: Option<String>,
    /// Or a fixed interval (`1s`, `15m`, `1h`, whole seconds): fires at every whole multiple of
    /// it since 1970-01-01T00:00:00Z, whatever the time zone.
    #[serde(default, with = "humantime_serde")]
    pub every: Option<Duration>,
    /// The IANA time zone `cron` is read in (default `UTC`).
    #[serde(default = "ScheduleConfig::default_time_zone")]
    pub time_zone: String,
    /// The event type of each fire, what workflows trigger on with channel `schedule`.
    pub event_type: String,
    /// What the entity lock keys on (default: the schedule's id): a fire while the last run
    /// on it is active is `entity_locked`.
    #[serde(default)]
    pub target_entity_id: Option<String>,
    /// Static payload fields; each fire adds `scheduled_for`.
    #[serde(default)]
    pub payload: Map<String, Value>,
    /// What a starting daemon does with fires due while no replica was up: `none` records
    /// them as missed, `latest` runs the latest, `all` runs up to `max_catch_up` of them.
    #[serde(default)]
    pub catch_up: CatchUp,
    /// Most missed fires `catch_up = "all"` runs (default 10); the older ones are recorded as
    /// missed.
    #[serde(default = "ScheduleConfig::default_max_catch_up")]
    pub max_catch_up: usize,
}

/// What happens to fires that were due while no replica was up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// Each is recorded `ineligible` (`missed`); nothing runs.
    #[default]
    None,
    /// The latest runs; the others are recorded as missed.
    Latest,
    /// The latest `max_catch_up` run, oldest first; the older ones are recorded as missed.
    All,
}

impl CatchUp {
    /// Its word in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            CatchUp::None => "none",
            CatchUp::Latest => "latest",
            CatchUp::All => "all",
        }
    }

    /// How many of the latest missed fires run.
    pub fn runs(self, max_catch_up: usize) -> usize {
        match self {
            CatchUp::None => 0,
            CatchUp::Latest => 1,
            CatchUp::All => max_catch_up,
        }
    }
}

/// The most missed fires `max_catch_up` may name.
pub const MAX_CATCH_UP_LIMIT: usize = 1000;

impl ScheduleConfig {
    fn default_time_zone() -> String {
        "UTC".into()
    }

    fn default_max_catch_up() -> usize {
        10
    }

    /// The source its fires are recorded under.
    pub fn source(&self) -> String {
        format!("{SOURCE_PREFIX}{}", self.id)
    }

    /// The entity its fires lock.
    pub fn entity(&self) -> &str {
        self.target_entity_id.as_deref().unwrap_or(&self.id)
    }

    /// When it fires; an error says why it cannot.
    pub fn timing(&self) -> Result<Timing, String> {
        Timing::of(self.cron.as_deref(), self.every, &self.time_zone)
    }

    /// What is wrong with this entry, each problem naming it.
    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut problem = |text: String| problems.push(format!("schedule `{}`: {text}", self.id));
        if self.id.is_empty()
            || !self
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            problem("`id` must be letters, digits, `.`, `_` or `-` (and not empty)".into());
        }
        if self.id.len() > 100 {
            problem("`id` must be at most 100 bytes".into());
        }
        for (key, value) in [("tenant", &self.tenant), ("event_type", &self.event_type)] {
            if value.trim().is_empty() {
                problem(format!("`{key}` must not be empty"));
            }
        }
        if self
            .target_entity_id
            .as_deref()
            .is_some_and(|e| e.trim().is_empty())
        {
            problem("`target_entity_id` must not be empty".into());
        }
        if let Err(why) = self.timing() {
            problem(why);
        }
        if self.payload.contains_key(SCHEDULED_FOR) {
            problem(format!(
                "`payload` must not set `{SCHEDULED_FOR}`: each fire sets it to its instant"
            ));
        }
        if self.max_catch_up == 0 || self.max_catch_up > MAX_CATCH_UP_LIMIT {
            problem(format!(
                "`max_catch_up` must be from 1 to {MAX_CATCH_UP_LIMIT}, not {}",
                self.max_catch_up
            ));
        }
        problems
    }
}

/// Every schedule's problems, and ids used twice.
pub fn problems(schedules: &[ScheduleConfig]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut ids = HashSet::new();
    for schedule in schedules {
        if !ids.insert(schedule.id.as_str()) {
            problems.push(format!(
                "schedule `{}` is defined more than once",
                schedule.id
            ));
        }
        problems.extend(schedule.problems());
    }
    problems
}

#[cfg(test)]
mod tests;
