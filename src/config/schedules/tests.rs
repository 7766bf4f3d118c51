//! The timing of schedules as a table of cases: both of 2027's DST changes in Europe/Berlin and
//! America/New_York, a Monday-to-Friday cron across a week boundary, `every` intervals.

use chrono::{DateTime, Utc};

use super::{Timing, fire_id};

/// (cron or `every:<interval>`, time zone, from, the next fires in UTC).
const CASES: &[(&str, &str, &str, &[&str])] = &[
    // Berlin springs forward on 2027-03-28 at 02:00 CET: 02:30 does not exist that day.
    (
        "0 30 2 * * *",
        "Europe/Berlin",
        "2027-03-27T00:00:00Z",
        &[
            "2027-03-27T01:30:00Z",
            "2027-03-28T01:00:00Z",
            "2027-03-29T00:30:00Z",
        ],
    ),
    // Every 15 minutes across the gap: 02:00..02:45 all fall in it and fire once, at 03:00.
    (
        "0 */15 * * * *",
        "Europe/Berlin",
        "2027-03-28T00:40:00Z",
        &[
            "2027-03-28T00:45:00Z",
            "2027-03-28T01:00:00Z",
            "2027-03-28T01:15:00Z",
        ],
    ),
    // Berlin falls back on 2027-10-31 at 03:00 CEST: 02:30 happens twice and fires once.
    (
        "0 30 2 * * *",
        "Europe/Berlin",
        "2027-10-30T00:00:00Z",
        &[
            "2027-10-30T00:30:00Z",
            "2027-10-31T00:30:00Z",
            "2027-11-01T01:30:00Z",
        ],
    ),
    // Every 30 minutes across the repeated hour: its second pass fires nothing.
    (
        "0 */30 * * * *",
        "Europe/Berlin",
        "2027-10-31T00:00:00Z",
        &[
            "2027-10-31T00:30:00Z",
            "2027-10-31T02:00:00Z",
            "2027-10-31T02:30:00Z",
        ],
    ),
    // From inside the second pass of the repeated hour, the next fire is after it.
    (
        "0 */30 * * * *",
        "Europe/Berlin",
        "2027-10-31T01:10:00Z",
        &["2027-10-31T02:00:00Z"],
    ),
    // New York springs forward on 2027-03-14 at 02:00 EST.
    (
        "0 30 2 * * *",
        "America/New_York",
        "2027-03-13T12:00:00Z",
        &["2027-03-14T07:00:00Z", "2027-03-15T06:30:00Z"],
    ),
    // New York falls back on 2027-11-07 at 02:00 EDT: 01:30 happens twice.
    (
        "0 30 1 * * *",
        "America/New_York",
        "2027-11-06T12:00:00Z",
        &["2027-11-07T05:30:00Z", "2027-11-08T06:30:00Z"],
    ),
    // Monday to Friday, from a Friday afternoon: the next is Monday.
    (
        "0 0 9 * * Mon-Fri",
        "Europe/Berlin",
        "2027-01-08T12:00:00Z",
        &["2027-01-11T08:00:00Z", "2027-01-12T08:00:00Z"],
    ),
    // The example: every 15 minutes from 08:00 to 18:45 on weekdays.
    (
        "0 */15 8-18 * * Mon-Fri",
        "Europe/Berlin",
        "2027-01-08T17:40:00Z",
        &[
            "2027-01-08T17:45:00Z",
            "2027-01-11T07:00:00Z",
            "2027-01-11T07:15:00Z",
        ],
    ),
    // `every` counts from the epoch in UTC, whatever the zone and its changes.
    (
        "every:15m",
        "Europe/Berlin",
        "2027-03-28T00:50:00Z",
        &[
            "2027-03-28T01:00:00Z",
            "2027-03-28T01:15:00Z",
            "2027-03-28T01:30:00Z",
        ],
    ),
    (
        "every:1s",
        "UTC",
        "2027-03-28T00:59:58.500Z",
        &["2027-03-28T00:59:59Z", "2027-03-28T01:00:00Z"],
    ),
];

fn timing(rule: &str, zone: &str) -> Timing {
    let timing = match rule.strip_prefix("every:") {
        Some(every) => Timing::of(None, Some(humantime::parse_duration(every).unwrap()), zone),
        None => Timing::of(Some(rule), None, zone),
    };
    timing.unwrap_or_else(|error| panic!("{rule} in {zone}: {error}"))
}

#[test]
fn fires_are_the_instants_each_case_names() {
    for (rule, zone, from, expected) in CASES {
        let timing = timing(rule, zone);
        let mut at: DateTime<Utc> = from.parse().unwrap();
        let mut fires = Vec::new();
        for _ in 0..expected.len() {
            at = timing.next_after(at).expect("a next fire");
            fires.push(fire_id(at));
        }
        assert_eq!(&fires, expected, "{rule} in {zone} from {from}");
    }
}

#[test]
fn fires_between_keeps_the_latest_and_counts_the_rest() {
    let timing = timing("every:1s", "UTC");
    let after: DateTime<Utc> = "2027-01-01T00:00:00Z".parse().unwrap();
    let until: DateTime<Utc> = "2027-01-01T00:00:10Z".parse().unwrap();
    let (fires, left_out) = timing.fires_between(after, until, 4);
    let ids: Vec<_> = fires.into_iter().map(fire_id).collect();
    assert_eq!(
        ids,
        [
            "2027-01-01T00:00:07Z",
            "2027-01-01T00:00:08Z",
            "2027-01-01T00:00:09Z",
            "2027-01-01T00:00:10Z"
        ]
    );
    assert_eq!(left_out, 6);
}

#[test]
fn bad_timings_are_refused_with_the_reason() {
    for (cron, every, zone, expect) in [
        (Some("*/5 * * * *"), None, "UTC", "seconds field first"),
        (Some("0 0 25 * * *"), None, "UTC", "not a cron expression"),
        (
            Some("0 0 9 * * *"),
            None,
            "Europe/Atlantis",
            "no IANA time zone",
        ),
        (None, Some("500ms"), "UTC", "whole number of seconds"),
        (Some("0 0 9 * * *"), Some("1m"), "UTC", "not both"),
        (None, None, "UTC", "set `cron`"),
    ] {
        let every = every.map(|e| humantime::parse_duration(e).unwrap());
        let error = Timing::of(cron, every, zone).expect_err("refused");
        assert!(error.contains(expect), "{cron:?} {every:?} {zone}: {error}");
    }
}
