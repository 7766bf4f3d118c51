//! The scheduler's clock: the system's, or one a test moves by hand.
//!
//! Invariant: the scheduler reads time and waits for it only through [`Clock`].

use chrono::{DateTime, Utc};

/// What the scheduler asks of time.
#[async_trait::async_trait]
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// Now.
    fn now(&self) -> DateTime<Utc>;

    /// Returns at `at` or soon after (never before, as [`Clock::now`] tells it).
    async fn sleep_until(&self, at: DateTime<Utc>);
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

#[async_trait::async_trait]
impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    async fn sleep_until(&self, at: DateTime<Utc>) {
        loop {
            let left = at - Utc::now();
            let Ok(left) = left.to_std() else {
                return;
            };
            if left.is_zero() {
                return;
            }
            // Timers may wake a little early; the loop sleeps the rest.
            tokio::time::sleep(left).await;
        }
    }
}

/// A clock that stands still until a test moves it.
#[cfg(test)]
#[derive(Debug)]
pub struct ManualClock {
    now: std::sync::Mutex<DateTime<Utc>>,
    moved: tokio::sync::watch::Sender<DateTime<Utc>>,
}

#[cfg(test)]
impl ManualClock {
    /// A clock showing `at`.
    pub fn at(at: DateTime<Utc>) -> Self {
        Self {
            now: std::sync::Mutex::new(at),
            moved: tokio::sync::watch::Sender::new(at),
        }
    }

    /// Moves the clock to `at` (never back).
    pub fn set(&self, at: DateTime<Utc>) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        if at > *now {
            *now = at;
            self.moved.send_replace(at);
        }
    }
}

#[cfg(test)]
#[async_trait::async_trait]
impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn sleep_until(&self, at: DateTime<Utc>) {
        let mut moved = self.moved.subscribe();
        let _ = moved.wait_for(|now| *now >= at).await;
    }
}
