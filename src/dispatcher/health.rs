//! Each push target's delivery health (last success, last failure and error, consecutive
//! failures, gone), for `/readyz`.
//!
//! Invariant: updated from recorded attempts only, never from a guess.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Serialize;
use switchyard_store::{millis_rfc3339, now_millis};

/// Health of one target, for `/readyz`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TargetHealth {
    pub last_success: Option<String>,
    pub last_failure: Option<String>,
    pub last_error: Option<String>,
    pub consecutive_failures: u32,
    /// Set when the target answered 410 Gone.
    pub gone: bool,
    /// When its recent dead letters happened (at most [`DEAD_LETTERS_KEPT`], oldest first),
    /// for the `dead_letters` alert.
    #[serde(skip)]
    pub dead_letters: std::collections::VecDeque<i64>,
}

/// Dead-letter times kept per target.
pub const DEAD_LETTERS_KEPT: usize = 1000;

/// Latest health per target.
#[derive(Debug, Default)]
pub struct TargetHealths(Mutex<BTreeMap<String, TargetHealth>>);

impl TargetHealths {
    pub(super) fn record(
        &self,
        target: &str,
        delivered: bool,
        gone: bool,
        dead_lettered: bool,
        error: Option<String>,
    ) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let health = map.entry(target.to_owned()).or_default();
        if dead_lettered {
            if health.dead_letters.len() == DEAD_LETTERS_KEPT {
                health.dead_letters.pop_front();
            }
            health.dead_letters.push_back(now_millis());
        }
        let now = millis_rfc3339(now_millis());
        if delivered {
            health.last_success = Some(now);
            health.consecutive_failures = 0;
            health.gone = false;
        } else {
            health.last_failure = Some(now);
            health.last_error = error;
            health.consecutive_failures += 1;
            health.gone |= gone;
        }
    }

    pub fn snapshot(&self) -> BTreeMap<String, TargetHealth> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
