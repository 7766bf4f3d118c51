//! The channels that pull rather than being called (email's mailboxes, schedules' clocks):
//! each one's pollers, started, changed and stopped with the config revision in force
//! (`Pollers`), and the mailboxes' latest status, reported into `SourceStatuses`
//! (`crate::source_status`) for `/readyz`, `GET /v1/sources` and the console.
//!
//! Invariant: the daemon reaches every channel that pulls through [`Pollers`] alone; a channel
//! says it pulls by returning how its pollers start from `Channel::pollers`.

use std::sync::Arc;

use switchyard_store::Store;

use super::CHANNELS;
use crate::config::Settings;
use crate::intake::Intake;
pub use crate::source_status::SourceStatuses;

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
