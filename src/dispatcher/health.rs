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
}

/// Latest health per target.
#[derive(Debug, Default)]
pub struct TargetHealths(Mutex<BTreeMap<String, TargetHealth>>);

impl TargetHealths {
    pub(super) fn record(&self, target: &str, delivered: bool, gone: bool, error: Option<String>) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let health = map.entry(target.to_owned()).or_default();
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
