//! Warnings of a failure that a loop may meet on every turn (a checkpoint on a failing disk,
//! up to twenty times a second). Invariant: the first failure of a streak is logged at once,
//! later ones at most once per [`EVERY`], each such warning counting the failures not logged
//! before it, and the first success after a streak is logged with its length: a persistent
//! failure neither floods the log nor goes unreported.

use std::fmt::Display;
use std::time::{Duration, Instant};

/// Least time between two warnings of one streak.
const EVERY: Duration = Duration::from_secs(60);

/// One kind of failure's current streak.
#[derive(Debug, Default)]
pub(crate) struct FailureStreak {
    /// Failures in a row.
    failures: u64,
    /// Failures since the last warning that were not logged.
    unlogged: u64,
    last_warned: Option<Instant>,
}

impl FailureStreak {
    /// A failure at `now`: `Some(unlogged)` when it is to be logged, with the number of
    /// failures since the last warning that were not; `None` when it is only counted.
    pub fn failed(&mut self, now: Instant) -> Option<u64> {
        self.failures += 1;
        if self
            .last_warned
            .is_some_and(|at| now.saturating_duration_since(at) < EVERY)
        {
            self.unlogged += 1;
            return None;
        }
        self.last_warned = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }

    /// A success: `Some(failures)` when it ends a streak of that many failures in a row.
    pub fn succeeded(&mut self) -> Option<u64> {
        let failures = std::mem::take(&mut self.failures);
        self.unlogged = 0;
        self.last_warned = None;
        (failures > 0).then_some(failures)
    }

    /// Logs one turn of `what`: a failure as a warning (saying `then`, what happens next) when
    /// [`Self::failed`] says so, the success that ends a streak as information.
    pub fn log<T, E: Display>(&mut self, turn: &Result<T, E>, what: &str, then: &str) {
        match turn {
            Ok(_) => {
                if let Some(failures) = self.succeeded() {
                    tracing::info!(failures, "{what} succeeds again");
                }
            }
            Err(error) => {
                if let Some(unlogged) = self.failed(Instant::now()) {
                    tracing::warn!(%error, unlogged, "{what} failed; {then}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_is_logged_and_repeats_within_a_minute_are_counted() {
        let start = Instant::now();
        let mut streak = FailureStreak::default();
        assert_eq!(streak.failed(start), Some(0));
        for pass in 1..=20 {
            let at = start + Duration::from_millis(50 * pass);
            assert_eq!(streak.failed(at), None, "pass {pass} logged again");
        }
        assert_eq!(streak.failed(start + EVERY), Some(20));
        assert_eq!(streak.failed(start + EVERY + Duration::from_secs(1)), None);
        assert_eq!(streak.succeeded(), Some(23));
    }

    #[test]
    fn a_success_without_failures_says_nothing_and_a_new_streak_warns_at_once() {
        let start = Instant::now();
        let mut streak = FailureStreak::default();
        assert_eq!(streak.succeeded(), None);
        assert_eq!(streak.failed(start), Some(0));
        assert_eq!(streak.succeeded(), Some(1));
        assert_eq!(streak.succeeded(), None);
        // Right after the recovery: a new streak, logged although the last warning is recent.
        assert_eq!(streak.failed(start + Duration::from_millis(50)), Some(0));
    }

    /// The log lines a closure writes, as the daemon's text format prints them.
    fn lines_of(turns: impl FnOnce()) -> Vec<String> {
        let written = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = written.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        tracing::subscriber::with_default(subscriber, turns);
        let text = String::from_utf8(written.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_owned).collect()
    }

    struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn twenty_failing_turns_write_one_warning_and_the_recovery_one_line_with_the_count() {
        let lines = lines_of(|| {
            let mut streak = FailureStreak::default();
            for _ in 0..20 {
                let failed: Result<(), &str> = Err("disk I/O error");
                streak.log(&failed, "a WAL checkpoint", "the next commit retries it");
            }
            streak.log(
                &Ok::<(), &str>(()),
                "a WAL checkpoint",
                "the next commit retries it",
            );
        });
        assert_eq!(lines.len(), 2, "{lines:#?}");
        let expected: [&[&str]; 2] = [
            &[
                "WARN",
                "a WAL checkpoint failed; the next commit retries it",
                "error=disk I/O error",
                "unlogged=0",
            ],
            &["INFO", "a WAL checkpoint succeeds again", "failures=20"],
        ];
        for (line, parts) in lines.iter().zip(expected) {
            for part in parts {
                assert!(line.contains(part), "`{part}` not in {line}");
            }
        }
    }
}
