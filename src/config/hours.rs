//! Business hours of a `source_quiet` rule, parsed: a time zone, weekdays and a local span.
//! Quiet time is counted only inside them, so a support mailbox is not "quiet" over a weekend.

use chrono::{DateTime, Datelike, NaiveTime, TimeZone, Utc, Weekday};
use chrono_tz::Tz;

use super::alerts::BusinessHours;

/// Checked business hours.
#[derive(Debug, Clone)]
pub struct Hours {
    zone: Tz,
    days: Vec<Weekday>,
    start: NaiveTime,
    end: NaiveTime,
}

impl Hours {
    /// Parses the config form; a sentence says what is wrong.
    pub fn parse(hours: &BusinessHours) -> Result<Self, String> {
        let zone: Tz = hours
            .time_zone
            .parse()
            .map_err(|_| format!("`{}` is not an IANA time zone", hours.time_zone))?;
        let days = hours
            .days
            .iter()
            .map(|day| {
                day.parse::<Weekday>()
                    .map_err(|_| format!("`{day}` is not a weekday (mon .. sun)"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let time = |text: &str| {
            NaiveTime::parse_from_str(text, "%H:%M")
                .map_err(|_| format!("`{text}` is not a time of day (HH:MM)"))
        };
        let (start, end) = (time(&hours.start)?, time(&hours.end)?);
        if start >= end {
            return Err(format!(
                "`start` {} must be before `end` {}",
                hours.start, hours.end
            ));
        }
        Ok(Self {
            zone,
            days,
            start,
            end,
        })
    }

    /// Whether `at` falls inside the hours.
    pub fn contains(&self, at: DateTime<Utc>) -> bool {
        let local = self.zone.from_utc_datetime(&at.naive_utc());
        let time = local.time();
        self.days.contains(&local.weekday()) && time >= self.start && time < self.end
    }

    /// Milliseconds of `[from, to)` inside the hours, walked in minute steps (bounded: a
    /// rule asks about at most its `expect_within` plus a week).
    pub fn inside_millis(&self, from: i64, to: i64) -> i64 {
        const STEP: i64 = 60_000;
        let mut inside = 0;
        let mut at = from;
        while at < to {
            let next = (at + STEP).min(to);
            if DateTime::from_timestamp_millis(at).is_some_and(|t| self.contains(t)) {
                inside += next - at;
            }
            at = next;
        }
        inside
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn berlin() -> Hours {
        Hours::parse(&BusinessHours {
            time_zone: "Europe/Berlin".into(),
            days: vec!["mon".into(), "fri".into()],
            start: "09:00".into(),
            end: "17:00".into(),
        })
        .expect("valid")
    }

    #[test]
    fn hours_are_local_to_their_time_zone_and_days() {
        let hours = berlin();
        let at = |s: &str| s.parse::<DateTime<Utc>>().expect("time");
        // Monday 2026-12-07: 08:30 UTC is 09:30 in Berlin (CET, UTC+1).
        assert!(hours.contains(at("2026-12-07T08:30:00Z")));
        assert!(!hours.contains(at("2026-12-07T07:30:00Z")));
        assert!(!hours.contains(at("2026-12-07T16:00:00Z")));
        // Tuesday is not listed.
        assert!(!hours.contains(at("2026-12-08T10:00:00Z")));
        let from = at("2026-12-07T07:00:00Z").timestamp_millis();
        assert_eq!(
            hours.inside_millis(from, from + 3 * 3_600_000),
            2 * 3_600_000
        );
    }

    #[test]
    fn bad_hours_are_refused_with_a_reason() {
        let bad = |zone: &str, day: &str, start: &str, end: &str| {
            Hours::parse(&BusinessHours {
                time_zone: zone.into(),
                days: vec![day.into()],
                start: start.into(),
                end: end.into(),
            })
            .expect_err("refused")
        };
        assert!(bad("Mars/Olympus", "mon", "09:00", "17:00").contains("time zone"));
        assert!(bad("UTC", "someday", "09:00", "17:00").contains("weekday"));
        assert!(bad("UTC", "mon", "9am", "17:00").contains("HH:MM"));
        assert!(bad("UTC", "mon", "17:00", "09:00").contains("before"));
    }
}
