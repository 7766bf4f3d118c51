//! The retry schedule as a table of cases.

use std::time::Duration;

use switchyard_dispatch::schedule::{ScheduleError, jitter};
use switchyard_dispatch::{RetryHint, RetrySchedule};

const fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

#[test]
fn default_steps_are_svix_schedule() {
    let schedule = RetrySchedule::default_steps();
    assert_eq!(
        schedule.steps(),
        &[s(5), s(300), s(1800), s(7200), s(18000), s(36000), s(36000)]
    );
    assert_eq!(schedule.max_attempts(), 8);
    assert_eq!(RetrySchedule::new(vec![]).max_attempts(), 1);
}

#[test]
fn next_delay_table() {
    let schedule = RetrySchedule::new(vec![s(10), s(100)]);
    let none = RetryHint::default();
    let after = |secs| RetryHint {
        retry_after: Some(s(secs)),
        at_least: None,
    };
    let floor = |secs| RetryHint {
        retry_after: None,
        at_least: Some(s(secs)),
    };
    #[rustfmt::skip]
    let cases: &[(&str, u32, RetryHint, f64, Option<Duration>)] = &[
        ("first failure, no jitter",        1, none, 0.0, Some(s(10))),
        ("second failure",                  2, none, 0.0, Some(s(100))),
        ("exhausted",                       3, none, 0.0, None),
        ("far past the end",                u32::MAX, none, 0.0, None),
        ("zero failures read as one",       0, none, 0.0, Some(s(10))),
        ("jitter +1 is +20%",               1, none, 1.0, Some(s(12))),
        ("jitter -1 is -20%",               1, none, -1.0, Some(s(8))),
        ("jitter +0.5 is +10%",             2, none, 0.5, Some(s(110))),
        ("jitter beyond 1 clamps",          1, none, 7.0, Some(s(12))),
        ("jitter NaN is none",              1, none, f64::NAN, Some(s(10))),
        ("retry-after inside range",        1, after(15), 0.0, Some(s(15))),
        ("retry-after below base clamps",   1, after(1), 0.0, Some(s(10))),
        ("retry-after above 2x clamps",     1, after(3600), 0.0, Some(s(20))),
        ("retry-after with jittered base",  1, after(3600), -1.0, Some(s(16))),
        ("at_least raises",                 1, floor(60), 0.0, Some(s(60))),
        ("at_least below base is moot",     2, floor(60), 0.0, Some(s(100))),
        ("at_least beats clamped retry-after", 1,
            RetryHint { retry_after: Some(s(7)), at_least: Some(s(60)) }, 0.0, Some(s(60))),
        ("exhausted even with hints",       3,
            RetryHint { retry_after: Some(s(7)), at_least: Some(s(60)) }, 0.0, None),
    ];
    for (name, failed, hint, jitter, expect) in cases {
        assert_eq!(
            schedule.next_delay(*failed, hint, *jitter),
            *expect,
            "{name}"
        );
    }
}

#[test]
fn empty_schedule_never_retries() {
    let schedule = RetrySchedule::parse(&[]).unwrap();
    assert_eq!(schedule.next_delay(1, &RetryHint::default(), 0.0), None);
}

#[test]
fn real_jitter_stays_within_twenty_percent() {
    let schedule = RetrySchedule::default_steps();
    for _ in 0..2000 {
        let delay = schedule
            .next_delay(2, &RetryHint::default(), jitter())
            .unwrap();
        assert!(delay >= s(240) && delay <= s(360), "{delay:?}");
    }
}

#[test]
fn parse_accepts_humantime() {
    let steps: Vec<String> = ["5s", "5m", " 1h 30m ", "250ms"].map(String::from).into();
    let schedule = RetrySchedule::parse(&steps).unwrap();
    assert_eq!(
        schedule.steps(),
        &[s(5), s(300), s(5400), Duration::from_millis(250)]
    );
}

#[test]
fn parse_errors_name_index_and_text() {
    let steps: Vec<String> = ["5s", "soon"].map(String::from).into();
    let err = RetrySchedule::parse(&steps).unwrap_err();
    assert!(
        matches!(&err, ScheduleError::Unparsable { index: 1, text, .. } if text == "soon"),
        "{err:?}"
    );
    assert!(err.to_string().contains("step 1 (`soon`)"), "{err}");

    let steps: Vec<String> = ["5s", "1m", "0s"].map(String::from).into();
    let err = RetrySchedule::parse(&steps).unwrap_err();
    assert!(
        matches!(&err, ScheduleError::Zero { index: 2, text } if text == "0s"),
        "{err:?}"
    );
    assert!(err.to_string().contains("step 2 (`0s`)"), "{err}");
}
