//! What each polled source last reported (its poller's status), kept for `/readyz`,
//! `GET /v1/sources`, `/metrics` and the console. Below the edge and the HTTP surface alike:
//! pollers write it, the API and the console read it.
//!
//! Invariant: a source's entry is its poller's latest report, replaced whole; a source whose
//! poller stopped has none.

use std::collections::BTreeMap;
use std::sync::Mutex;

use switchyard_email::SourceStatus;

/// Latest status per email source, as its poller reported it.
#[derive(Debug, Default)]
pub struct SourceStatuses(Mutex<BTreeMap<String, SourceStatus>>);

/// Consecutive failures after which a mailbox makes the daemon not ready.
pub const UNHEALTHY_AFTER_FAILURES: u32 = 3;

impl SourceStatuses {
    pub fn set(&self, source: &str, status: &SourceStatus) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(source.to_owned(), status.clone());
    }

    pub fn remove(&self, source: &str) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(source);
    }

    pub fn snapshot(&self) -> BTreeMap<String, SourceStatus> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Sources failing repeatedly, with their last error.
    pub fn unhealthy(&self) -> Vec<(String, SourceStatus)> {
        self.snapshot()
            .into_iter()
            .filter(|(_, status)| status.consecutive_failures >= UNHEALTHY_AFTER_FAILURES)
            .collect()
    }
}
