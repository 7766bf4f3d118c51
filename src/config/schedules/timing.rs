//! When a schedule fires, as instants: a cron expression matched against the wall clock of its
//! time zone, or a fixed interval since the Unix epoch.
//!
//! Invariant: fires are strictly increasing instants, and every local time the cron names maps
//! to one instant: a time skipped by a spring-forward change fires at the first instant after
//! the gap; a time that happens twice (fall back) fires once, on its first occurrence.

use std::time::Duration;

use chrono::{DateTime, LocalResult, NaiveDateTime, SecondsFormat, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};

/// Most wall-clock matches looked at to find one fire (a repeated hour of a per-second cron is
/// 3,600 matches that map to instants already past).
const MAX_STEPS: usize = 20_000;

/// A schedule's timing.
#[derive(Debug, Clone)]
pub struct Timing {
    zone: Tz,
    rule: Rule,
}

#[derive(Debug, Clone)]
enum Rule {
    Cron(Box<Cron>),
    /// The interval, in milliseconds (a whole number of seconds).
    Every(i64),
}

impl Timing {
    /// The timing of `cron` or `every` (exactly one), read in `time_zone`.
    pub fn of(
        cron: Option<&str>,
        every: Option<Duration>,
        time_zone: &str,
    ) -> Result<Self, String> {
        let zone: Tz = time_zone.parse().map_err(|_| {
            format!("`time_zone` `{time_zone}` is no IANA time zone (e.g. `Europe/Berlin`, `UTC`)")
        })?;
        let rule = match (cron, every) {
            (Some(expression), None) => {
                let parsed = CronParser::builder()
                    .seconds(Seconds::Required)
                    .build()
                    .parse(expression)
                    .map_err(|error| {
                        format!(
                            "`cron` `{expression}` is not a cron expression with the seconds \
                             field first (`sec min hour day-of-month month day-of-week`): {error}"
                        )
                    })?;
                Rule::Cron(Box::new(parsed))
            }
            (None, Some(every)) => {
                if every < Duration::from_secs(1) || every.subsec_nanos() != 0 {
                    return Err(format!(
                        "`every` must be a whole number of seconds, at least 1s, not {}",
                        humantime::format_duration(every)
                    ));
                }
                let millis = i64::try_from(every.as_millis())
                    .ok()
                    .filter(|m| *m <= 366 * 86_400_000)
                    .ok_or("`every` must be at most a year")?;
                Rule::Every(millis)
            }
            (Some(_), Some(_)) => return Err("set `cron` or `every`, not both".into()),
            (None, None) => return Err("set `cron` (seconds field first) or `every`".into()),
        };
        let timing = Self { zone, rule };
        if timing.next_after(Utc::now()).is_none() {
            return Err("its `cron` names no time that comes again".into());
        }
        Ok(timing)
    }

    /// The time zone it is read in.
    pub fn zone(&self) -> Tz {
        self.zone
    }

    /// The first fire strictly after `after`; `None` when none comes (a cron naming a date
    /// that never comes again).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.rule {
            Rule::Every(period) => {
                let millis = after.timestamp_millis();
                let next = millis
                    .div_euclid(*period)
                    .checked_add(1)?
                    .checked_mul(*period)?;
                DateTime::from_timestamp_millis(next)
            }
            Rule::Cron(cron) => {
                let mut local = after.with_timezone(&self.zone).naive_local();
                for _ in 0..MAX_STEPS {
                    local = cron.find_next_occurrence(&local, false).ok()?;
                    let instant = self.instant_of(local)?;
                    if instant > after {
                        return Some(instant);
                    }
                }
                None
            }
        }
    }

    /// Every fire after `after` up to and including `until`, oldest first, at most `limit`
    /// of the latest ones, and how many older ones were left out.
    pub fn fires_between(
        &self,
        after: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: usize,
    ) -> (Vec<DateTime<Utc>>, u64) {
        let mut fires = std::collections::VecDeque::new();
        let mut left_out = 0u64;
        let mut at = after;
        while let Some(next) = self.next_after(at).filter(|next| *next <= until) {
            if fires.len() == limit {
                fires.pop_front();
                left_out += 1;
            }
            fires.push_back(next);
            at = next;
        }
        (fires.into(), left_out)
    }

    /// The instant a wall-clock time of the zone names: itself; in a gap, the first instant
    /// after the gap; when it happens twice, its first occurrence.
    fn instant_of(&self, local: NaiveDateTime) -> Option<DateTime<Utc>> {
        match self.zone.from_local_datetime(&local) {
            LocalResult::Single(at) => Some(at.with_timezone(&Utc)),
            LocalResult::Ambiguous(first, _) => Some(first.with_timezone(&Utc)),
            LocalResult::None => {
                // Gaps begin and end on whole minutes in every zone in use: the first minute
                // that exists again is where the gap ends.
                let minute = local.with_second(0)?;
                (1..=24 * 60).find_map(|step| {
                    let later = minute + chrono::Duration::minutes(step);
                    match self.zone.from_local_datetime(&later) {
                        LocalResult::Single(at) | LocalResult::Ambiguous(at, _) => {
                            Some(at.with_timezone(&Utc))
                        }
                        LocalResult::None => None,
                    }
                })
            }
        }
    }
}

/// A fire's delivery id: its instant in RFC 3339, UTC, whole seconds (`2027-03-28T01:00:00Z`).
/// Ids of one schedule sort as their instants do.
pub fn fire_id(instant: DateTime<Utc>) -> String {
    instant.to_rfc3339_opts(SecondsFormat::Secs, true)
}
