//! The durable retry schedule: how long to wait before the next attempt. The daemon stores the
//! resulting due time in its rows; nothing here sleeps.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Share of a step that jitter may add or remove.
const JITTER_SHARE: f64 = 0.2;

/// Delays between attempts: `steps[n]` follows the `n+1`-th failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrySchedule {
    steps: Vec<Duration>,
}

/// What the last attempt said about when to come back.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RetryHint {
    /// The receiver's `Retry-After`, honoured within `[base, 2 * base]`.
    pub retry_after: Option<Duration>,
    /// A floor for the delay (429 and timeouts ask for 60 s).
    pub at_least: Option<Duration>,
}

/// A retry step that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// The step is not a humantime duration such as `5s` or `2h`.
    #[error("retry step {index} (`{text}`) is not a duration such as `30s` or `2h`")]
    Unparsable {
        /// Position in the list, from 0.
        index: usize,
        /// The step as written.
        text: String,
        /// humantime's reason.
        #[source]
        source: humantime::DurationError,
    },
    /// A zero step would retry in a tight loop.
    #[error("retry step {index} (`{text}`) is zero; every step must be longer than 0")]
    Zero {
        /// Position in the list, from 0.
        index: usize,
        /// The step as written.
        text: String,
    },
}

impl RetrySchedule {
    /// Svix's schedule after the first try: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h.
    pub fn default_steps() -> Self {
        const MIN: u64 = 60;
        const HOUR: u64 = 60 * MIN;
        RetrySchedule::new(
            [
                5,
                5 * MIN,
                30 * MIN,
                2 * HOUR,
                5 * HOUR,
                10 * HOUR,
                10 * HOUR,
            ]
            .into_iter()
            .map(Duration::from_secs)
            .collect(),
        )
    }

    /// Parses humantime steps (`"5s"`, `"30m"`); an empty list means no retries.
    pub fn parse(steps: &[String]) -> Result<Self, ScheduleError> {
        let steps = steps
            .iter()
            .enumerate()
            .map(|(index, text)| {
                let step = humantime::parse_duration(text.trim()).map_err(|source| {
                    ScheduleError::Unparsable {
                        index,
                        text: text.clone(),
                        source,
                    }
                })?;
                if step.is_zero() {
                    return Err(ScheduleError::Zero {
                        index,
                        text: text.clone(),
                    });
                }
                Ok(step)
            })
            .collect::<Result<_, _>>()?;
        Ok(RetrySchedule { steps })
    }

    /// A schedule with these steps, as given.
    pub fn new(steps: Vec<Duration>) -> Self {
        RetrySchedule { steps }
    }

    /// The steps, in order.
    pub fn steps(&self) -> &[Duration] {
        &self.steps
    }

    /// Attempts in a series: the first try plus one per step.
    pub fn max_attempts(&self) -> u32 {
        u32::try_from(self.steps.len())
            .unwrap_or(u32::MAX)
            .saturating_add(1)
    }

    /// Delay before the next attempt after `failed_attempts` failures (>=1), or None when
    /// exhausted. `failed_attempts == 0` is read as 1.
    ///
    /// base = steps[failed_attempts-1] with +-20% jitter (`jitter` in [-1.0, 1.0], clamped;
    /// NaN counts as 0); `hint.retry_after` is honoured but clamped to [base, 2*base];
    /// `hint.at_least` raises the delay to at least that.
    pub fn next_delay(
        &self,
        failed_attempts: u32,
        hint: &RetryHint,
        jitter: f64,
    ) -> Option<Duration> {
        let index = usize::try_from(failed_attempts.max(1) - 1).ok()?;
        let step = *self.steps.get(index)?;
        let jitter = if jitter.is_nan() {
            0.0
        } else {
            jitter.clamp(-1.0, 1.0)
        };
        let base = step.mul_f64(1.0 + JITTER_SHARE * jitter);
        let mut delay = match hint.retry_after {
            Some(asked) => asked.clamp(base, base.saturating_mul(2)),
            None => base,
        };
        if let Some(floor) = hint.at_least {
            delay = delay.max(floor);
        }
        Some(delay)
    }
}

/// A value in [-1, 1] for [`RetrySchedule::next_delay`]: cheap and non-cryptographic (the
/// clock's nanoseconds and a call counter through splitmix64), enough to spread retries of
/// many dispatches that failed together.
pub fn jitter() -> f64 {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default();
    let calls = CALLS.fetch_add(1, Ordering::Relaxed);
    let mixed = splitmix64(nanos ^ calls.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    // 53 random bits -> [0, 1] -> [-1, 1].
    let unit = (mixed >> 11) as f64 / ((1u64 << 53) - 1) as f64;
    unit * 2.0 - 1.0
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_in_range_and_varies() {
        let values: Vec<f64> = (0..1000).map(|_| jitter()).collect();
        assert!(values.iter().all(|v| (-1.0..=1.0).contains(v)));
        assert!(values.iter().any(|v| *v < -0.5));
        assert!(values.iter().any(|v| *v > 0.5));
    }
}
