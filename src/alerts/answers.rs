//! How this replica answered each source's senders, per minute over the last hour: how many
//! answers, how many failed (non-2xx) and how many came later than the sender's ack bound.
//! `provider_disable_risk` reads the ratio a sender (Slack, Zendesk) would judge us by.
//!
//! Invariant: recording is a map lookup and three additions under a short lock, on the
//! answer's own task after it is built, so intake never waits on an alert.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Minutes kept (the longest sender window is Slack's hour).
const MINUTES: usize = 60;

/// One minute's answers of one source.
#[derive(Debug, Clone, Copy, Default)]
struct Minute {
    /// Minutes since the epoch this bucket counts.
    minute: i64,
    answers: u64,
    failed: u64,
    /// Answers slower than 1 s, 3 s and 10 s (the bounds senders use).
    slow_over_1s: u64,
    slow_over_3s: u64,
    slow_over_10s: u64,
}

/// The answers of one source, in a ring of minutes.
#[derive(Debug)]
struct Ring([Minute; MINUTES]);

impl Default for Ring {
    fn default() -> Self {
        Self([Minute::default(); MINUTES])
    }
}

/// Answers in a window, as a sender would count them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AnswerCounts {
    pub answers: u64,
    /// Failed or slower than the bound.
    pub bad: u64,
    pub failed: u64,
    pub slow: u64,
}

static ANSWERS: OnceLock<Mutex<HashMap<String, Ring>>> = OnceLock::new();

fn answers() -> &'static Mutex<HashMap<String, Ring>> {
    ANSWERS.get_or_init(Mutex::default)
}

/// Records one answer to a sender of `source`.
pub fn record(source: &str, ok: bool, took: Duration, now_ms: i64) {
    let minute = now_ms.div_euclid(60_000);
    let mut map = answers().lock().unwrap_or_else(|p| p.into_inner());
    if !map.contains_key(source) {
        map.insert(source.to_owned(), Ring::default());
    }
    let Some(ring) = map.get_mut(source) else {
        return;
    };
    let slot = &mut ring.0[minute.rem_euclid(MINUTES as i64) as usize];
    if slot.minute != minute {
        *slot = Minute {
            minute,
            ..Minute::default()
        };
    }
    slot.answers += 1;
    slot.failed += u64::from(!ok);
    slot.slow_over_1s += u64::from(took > Duration::from_secs(1));
    slot.slow_over_3s += u64::from(took > Duration::from_secs(3));
    slot.slow_over_10s += u64::from(took > Duration::from_secs(10));
}

/// `source`'s answers in the `window` up to `now_ms`, an answer counted slow past `ack_within`
/// (rounded to 1 s, 3 s or 10 s, the bounds senders use).
pub fn counts(source: &str, window: Duration, ack_within: Duration, now_ms: i64) -> AnswerCounts {
    let now_minute = now_ms.div_euclid(60_000);
    let minutes = (window.as_secs().div_ceil(60) as i64).clamp(1, MINUTES as i64);
    let map = answers().lock().unwrap_or_else(|p| p.into_inner());
    let Some(ring) = map.get(source) else {
        return AnswerCounts::default();
    };
    let mut counts = AnswerCounts::default();
    for minute in ring
        .0
        .iter()
        .filter(|m| m.minute > now_minute - minutes && m.minute <= now_minute)
    {
        let slow = match ack_within.as_secs() {
            0 | 1 => minute.slow_over_1s,
            2..=5 => minute.slow_over_3s,
            _ => minute.slow_over_10s,
        };
        counts.answers += minute.answers;
        counts.failed += minute.failed;
        counts.slow += slow;
        // An answer both failed and slow is one bad answer; the larger count is the floor.
        counts.bad += minute.failed.max(slow).min(minute.answers);
    }
    counts
}
