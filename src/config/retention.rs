//! `[retention]`: how long the ledger, raw deliveries and finished runs are kept, and how the
//! background task that prunes them paces itself.

use std::time::Duration;

use serde::Deserialize;

/// Most rows one delete transaction may remove.
pub const MAX_BATCH: usize = 10_000;

const DAY: u64 = 24 * 60 * 60;

/// `[retention]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionConfig {
    /// How long a ledger row is kept (default 90d). Deduplication of redeliveries lasts as
    /// long as the row; rows of runs that still exist are kept with them.
    #[serde(default = "RetentionConfig::default_ledger", with = "humantime_serde")]
    pub ledger: Duration,
    /// How long the original bytes of a delivery are kept (default 30d); at most `ledger`.
    /// Afterwards `GET /v1/raw/{id}` answers 410 `expired` while the ledger row lasts.
    #[serde(default = "RetentionConfig::default_raw", with = "humantime_serde")]
    pub raw: Duration,
    /// How long a run in a final status is kept after it finished, with its dispatch,
    /// attempts and history (default 90d). Active runs are never pruned.
    #[serde(
        default = "RetentionConfig::default_finished_runs",
        with = "humantime_serde"
    )]
    pub finished_runs: Duration,
    /// How often the pruning task runs (default 1m).
    #[serde(
        default = "RetentionConfig::default_interval",
        with = "humantime_serde"
    )]
    pub interval: Duration,
    /// Most rows deleted per transaction (default 1000, at most 10000); each batch is its own
    /// short transaction, so the intake writer never waits long for one.
    #[serde(default = "RetentionConfig::default_batch")]
    pub batch: usize,
}

impl RetentionConfig {
    fn default_ledger() -> Duration {
        Duration::from_secs(90 * DAY)
    }
    fn default_raw() -> Duration {
        Duration::from_secs(30 * DAY)
    }
    fn default_finished_runs() -> Duration {
        Duration::from_secs(90 * DAY)
    }
    fn default_interval() -> Duration {
        Duration::from_secs(60)
    }
    fn default_batch() -> usize {
        1000
    }

    /// Every problem with these values, as `retention.<key> ...` sentences.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for (key, value) in [
            ("ledger", self.ledger),
            ("raw", self.raw),
            ("finished_runs", self.finished_runs),
            ("interval", self.interval),
        ] {
            if value.is_zero() {
                problems.push(format!("retention.{key} must be longer than 0s"));
            }
        }
        // A zero ledger is reported above; comparing with it would only repeat that.
        if !self.ledger.is_zero() && self.raw > self.ledger {
            problems.push(format!(
                "retention.raw ({}) must not be longer than retention.ledger ({}): the raw bytes \
                 of a pruned ledger row could no longer be found",
                format_window(self.raw),
                format_window(self.ledger)
            ));
        }
        if !(1..=MAX_BATCH).contains(&self.batch) {
            problems.push(format!(
                "retention.batch must be from 1 to {MAX_BATCH}, not {}",
                self.batch
            ));
        }
        problems
    }
}

/// A window as an admin writes it: `90d`, `24h`, `5m`, `3s` (humantime's format says
/// `2months 29days 2h 52m 48s` for 90 days).
pub fn format_window(window: Duration) -> String {
    let secs = window.as_secs();
    if window.subsec_nanos() != 0 || secs == 0 {
        return humantime::format_duration(window).to_string();
    }
    for (unit, size) in [("d", DAY), ("h", 3600), ("m", 60)] {
        if secs.is_multiple_of(size) {
            return format!("{}{unit}", secs / size);
        }
    }
    format!("{secs}s")
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            ledger: Self::default_ledger(),
            raw: Self::default_raw(),
            finished_runs: Self::default_finished_runs(),
            interval: Self::default_interval(),
            batch: Self::default_batch(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RetentionConfig, toml::de::Error> {
        toml::from_str(text)
    }

    #[test]
    fn defaults_are_documented_values() {
        let config = parse("").expect("empty section");
        assert_eq!(config, RetentionConfig::default());
        assert_eq!(config.ledger, Duration::from_secs(90 * DAY));
        assert_eq!(config.raw, Duration::from_secs(30 * DAY));
        assert_eq!(config.finished_runs, Duration::from_secs(90 * DAY));
        assert_eq!(config.interval, Duration::from_secs(60));
        assert_eq!(config.batch, 1000);
        assert!(config.problems().is_empty());
    }

    #[test]
    fn validation() {
        // (section text, expected problem fragments; empty = valid)
        let cases: &[(&str, &[&str])] = &[
            ("ledger = \"3s\"\nraw = \"2s\"\nfinished_runs = \"3s\"", &[]),
            ("raw = \"90d\"", &[]),
            ("ledger = \"7d\"\nraw = \"7d\"", &[]),
            ("batch = 1", &[]),
            ("batch = 10000", &[]),
            (
                "ledger = \"0s\"",
                &["retention.ledger must be longer than 0s"],
            ),
            (
                "ledger = \"0s\"\nraw = \"0s\"",
                &[
                    "retention.ledger must be longer",
                    "retention.raw must be longer",
                ],
            ),
            (
                "finished_runs = \"0s\"",
                &["retention.finished_runs must be"],
            ),
            ("interval = \"0s\"", &["retention.interval must be"]),
            (
                "ledger = \"1d\"\nraw = \"2d\"",
                &["must not be longer than retention.ledger"],
            ),
            (
                "raw = \"91d\"",
                &["retention.raw (91d) must not be longer than retention.ledger (90d)"],
            ),
            (
                "batch = 0",
                &["retention.batch must be from 1 to 10000, not 0"],
            ),
            ("batch = 10001", &["not 10001"]),
        ];
        for (text, expected) in cases {
            let problems = parse(text)
                .unwrap_or_else(|e| panic!("{text:?} does not parse: {e}"))
                .problems();
            assert_eq!(problems.len(), expected.len(), "{text:?}: {problems:?}");
            for (problem, fragment) in problems.iter().zip(expected.iter()) {
                assert!(problem.contains(fragment), "{text:?}: {problem}");
            }
        }
    }

    #[test]
    fn windows_read_as_written() {
        for (text, shown) in [
            ("90d", "90d"),
            ("24h", "1d"),
            ("36h", "36h"),
            ("5m", "5m"),
            ("90s", "90s"),
            ("200ms", "200ms"),
        ] {
            let window = humantime::parse_duration(text).expect("duration");
            assert_eq!(format_window(window), shown);
        }
    }

    #[test]
    fn unknown_keys_and_bad_durations_are_errors() {
        for text in ["ledgr = \"1d\"", "ledger = \"soon\"", "batch = -1"] {
            assert!(parse(text).is_err(), "{text:?} parsed");
        }
    }
}
