//! The channels that pull rather than being called (email's mailboxes, schedules' clocks):
//! each one's pollers, started, changed and stopped with the config revision in force
//! (`Pollers`), and the mailboxes' latest status, for `/readyz`, `GET /v1/sources` and the
//! console (`SourceStatuses`).
//!
//! Invariant: the daemon reaches every channel that pulls through [`Pollers`] alone; a channel
//! says it pulls by returning how its pollers start from `Channel::pollers`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use switchyard_email::SourceStatus;
use switchyard_store::Store;

use super::CHANNELS;
use crate::config::Settings;
use crate::intake::Intake;

/// One polled channel's pollers: one per source of its kind.
#[async_trait::async_trait]
pub trait Poll: Send + Sync + std::fmt::Debug {
    /// Starts pollers for its new or changed entries of `settings` (the revision in force:
    /// sources, schedules) and stops those removed or changed.
    async fn apply(&self, settings: &Settings);

    /// Stops every poller.
    async fn shutdown(&self);
}

/// How a polled channel's pollers start (`Channel::pollers`): none running until `apply`.
pub type StartPollers = fn(&Handles) -> Box<dyn Poll>;

/// What a channel's pollers record through: the daemon's handles.
#[derive(Debug, Clone)]
pub struct Handles {
    /// The store, for the pollers' cursors and leases.
    pub store: Store,
    /// Where each fetched message is recorded.
    pub intake: Intake,
    /// Where each poller reports its status.
    pub statuses: Arc<SourceStatuses>,
    /// This replica's identity in poller leases (see `LoadedConfig::replica_id`).
    pub replica_id: String,
}

/// The pollers of every channel that pulls.
#[derive(Debug, Clone)]
pub struct Pollers(Arc<[Box<dyn Poll>]>);

impl Pollers {
    /// Each polled channel's pollers, none running until [`Pollers::apply`].
    pub fn new(
        store: Store,
        intake: Intake,
        statuses: Arc<SourceStatuses>,
        replica_id: String,
    ) -> Self {
        let handles = Handles {
            store,
            intake,
            statuses,
            replica_id,
        };
        Self(
            CHANNELS
                .iter()
                .filter_map(|channel| Some(channel.pollers()?(&handles)))
                .collect(),
        )
    }

    /// Puts the sources and schedules of a revision in force: new or changed ones start,
    /// removed or changed ones stop.
    pub async fn apply(&self, settings: &Settings) {
        for pollers in self.0.iter() {
            pollers.apply(settings).await;
        }
    }

    /// Stops every poller.
    pub async fn shutdown(&self) {
        for pollers in self.0.iter() {
            pollers.shutdown().await;
        }
    }
}

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
