//! Flow control as admins declare it: a `rate` (per tenant or source) and a trigger's
//! `coalesce` window, checked when deserialised, and the rate's arithmetic (no I/O).
//!
//! ```toml
//! rate = { limit = 100, per = "1m", burst = 20 }
//! coalesce = { quiet = "30s", max_wait = "5m" }
//! ```
//!
//! A rate is a GCRA (generic cell rate algorithm) over one stored number per key, the
//! theoretical arrival time `tat` in microseconds: each admission moves it one interval
//! (`per / limit`) past `max(tat, now)`, and an event is admitted only while the moved `tat`
//! stays within `burst` intervals of now. Invariant: after every admission
//! `tat - now <= burst * interval`, so at most `burst` events are admitted at once and no more
//! than `limit` per `per` in the long run; a refusal names the instant from which the next
//! event would be admitted and changes nothing.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A checked rate: `limit` events per `per`, up to `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RateSpec", into = "RateSpec")]
pub struct Rate {
    limit: u32,
    per: Duration,
    burst: u32,
}

/// A rate as written: `{ limit = 100, per = "1m", burst = 20 }` (`burst` defaults to `limit`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateSpec {
    /// Events admitted per `per`.
    pub limit: u32,
    /// The window `limit` is counted over, e.g. `"1m"`.
    #[serde(with = "humantime_serde")]
    pub per: Duration,
    /// Most events admitted at once (default: `limit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
}

/// Why a `rate` or `coalesce` table was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlowError {
    #[error("`limit` must be at least 1")]
    ZeroLimit,
    #[error("`per` must be at least 1ms and at most a day")]
    BadWindow,
    #[error("`burst` must be at least 1")]
    ZeroBurst,
    #[error("`quiet` must be longer than 0s")]
    ZeroQuiet,
    #[error("`max_wait` ({max_wait}) must be at least `quiet` ({quiet}) and at most a day")]
    BadMaxWait { quiet: String, max_wait: String },
}

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

impl TryFrom<RateSpec> for Rate {
    type Error = FlowError;

    fn try_from(spec: RateSpec) -> Result<Self, FlowError> {
        if spec.limit == 0 {
            return Err(FlowError::ZeroLimit);
        }
        if spec.per < Duration::from_millis(1) || spec.per > DAY {
            return Err(FlowError::BadWindow);
        }
        let burst = spec.burst.unwrap_or(spec.limit);
        if burst == 0 {
            return Err(FlowError::ZeroBurst);
        }
        Ok(Rate {
            limit: spec.limit,
            per: spec.per,
            burst,
        })
    }
}

impl From<Rate> for RateSpec {
    fn from(rate: Rate) -> Self {
        RateSpec {
            limit: rate.limit,
            per: rate.per,
            burst: Some(rate.burst),
        }
    }
}

impl Rate {
    /// `limit` per `per`, `burst` at once (both at least 1; `per` at least 1ms).
    pub fn new(limit: u32, per: Duration, burst: u32) -> Result<Self, FlowError> {
        Rate::try_from(RateSpec {
            limit,
            per,
            burst: Some(burst),
        })
    }

    /// Microseconds between two admissions in the long run (at least 1).
    fn interval_us(&self) -> i64 {
        let per = i64::try_from(self.per.as_micros()).unwrap_or(i64::MAX);
        (per / i64::from(self.limit)).max(1)
    }

    /// Decides one event at `now_us` against the stored `tat_us` (0 for a key never used):
    /// `Ok(new tat)` to store when admitted, or `Err(instant)` from which an event would be
    /// admitted (nothing changes).
    pub fn admit(&self, tat_us: i64, now_us: i64) -> Result<i64, i64> {
        let interval = self.interval_us();
        let tolerance = interval.saturating_mul(i64::from(self.burst));
        let next = tat_us.max(now_us).saturating_add(interval);
        if next - now_us <= tolerance {
            Ok(next)
        } else {
            Err(next - tolerance)
        }
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} per {}, burst {}",
            self.limit,
            humantime::format_duration(self.per),
            self.burst
        )
    }
}

/// A checked coalescing window: the run waits `quiet` after the latest member, never more than
/// `max_wait` after the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "CoalesceSpec", into = "CoalesceSpec")]
pub struct Coalesce {
    pub quiet: Duration,
    pub max_wait: Duration,
}

/// A window as written: `{ quiet = "30s", max_wait = "5m" }`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoalesceSpec {
    /// How long the run waits after its latest member before it is dispatched.
    #[serde(with = "humantime_serde")]
    pub quiet: Duration,
    /// The longest it waits after its first member, however many follow.
    #[serde(with = "humantime_serde")]
    pub max_wait: Duration,
}

impl TryFrom<CoalesceSpec> for Coalesce {
    type Error = FlowError;

    fn try_from(spec: CoalesceSpec) -> Result<Self, FlowError> {
        if spec.quiet.is_zero() {
            return Err(FlowError::ZeroQuiet);
        }
        if spec.max_wait < spec.quiet || spec.max_wait > DAY {
            return Err(FlowError::BadMaxWait {
                quiet: humantime::format_duration(spec.quiet).to_string(),
                max_wait: humantime::format_duration(spec.max_wait).to_string(),
            });
        }
        Ok(Coalesce {
            quiet: spec.quiet,
            max_wait: spec.max_wait,
        })
    }
}

impl From<Coalesce> for CoalesceSpec {
    fn from(c: Coalesce) -> Self {
        CoalesceSpec {
            quiet: c.quiet,
            max_wait: c.max_wait,
        }
    }
}

impl Coalesce {
    /// When a run whose first member arrived at `first_ms` and latest at `now_ms` is due.
    pub fn due_at(&self, first_ms: i64, now_ms: i64) -> i64 {
        let quiet = i64::try_from(self.quiet.as_millis()).unwrap_or(i64::MAX);
        let max_wait = i64::try_from(self.max_wait.as_millis()).unwrap_or(i64::MAX);
        now_ms
            .saturating_add(quiet)
            .min(first_ms.saturating_add(max_wait))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_admitted_then_the_rate_holds() {
        // 10 per second (one per 100 ms), 3 at once.
        let rate = Rate::new(10, Duration::from_secs(1), 3).unwrap();
        let now = 1_000_000_000;
        let mut tat = 0;
        for _ in 0..3 {
            tat = rate.admit(tat, now).unwrap();
        }
        let retry = rate.admit(tat, now).unwrap_err();
        assert_eq!(
            retry,
            now + 100_000,
            "the next slot frees after one interval"
        );
        assert!(rate.admit(tat, retry - 1).is_err());
        let tat = rate.admit(tat, retry).unwrap();
        assert!(rate.admit(tat, retry).is_err());
        // Long idle: the bucket is full again, but never more than `burst`.
        let later = retry + 10_000_000;
        let mut tat = tat;
        for _ in 0..3 {
            tat = rate.admit(tat, later).unwrap();
        }
        assert!(rate.admit(tat, later).is_err());
    }

    #[test]
    fn specs_are_checked() {
        let parse = |text: &str| serde_json::from_str::<Rate>(text).map_err(|e| e.to_string());
        assert!(
            parse(r#"{"limit":0,"per":"1m"}"#)
                .unwrap_err()
                .contains("limit")
        );
        assert!(
            parse(r#"{"limit":5,"per":"0s"}"#)
                .unwrap_err()
                .contains("per")
        );
        assert!(
            parse(r#"{"limit":5,"per":"1m","burst":0}"#)
                .unwrap_err()
                .contains("burst")
        );
        assert!(parse(r#"{"limit":5,"per":"1m","brust":1}"#).is_err());
        assert_eq!(
            parse(r#"{"limit":5,"per":"1m"}"#).unwrap(),
            Rate::new(5, Duration::from_secs(60), 5).unwrap()
        );
        let window = |text: &str| serde_json::from_str::<Coalesce>(text).map_err(|e| e.to_string());
        assert!(window(r#"{"quiet":"0s","max_wait":"1m"}"#).is_err());
        assert!(
            window(r#"{"quiet":"2m","max_wait":"1m"}"#)
                .unwrap_err()
                .contains("max_wait")
        );
        let c = window(r#"{"quiet":"30s","max_wait":"5m"}"#).unwrap();
        assert_eq!(c.due_at(0, 10_000), 40_000);
        assert_eq!(c.due_at(0, 290_000), 300_000, "never past max_wait");
    }
}
