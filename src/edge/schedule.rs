//! The schedule channel: `[[schedule]]` entries fire as deliveries of source `schedule:<id>`
//! (delivery id: the instant, RFC 3339 UTC). Reached by one scheduler task per daemon
//! (`scheduler`), started and changed with the revision in force like a poller; never over
//! HTTP.
//!
//! Invariant: every replica fires every fire through intake; the ledger's delivery identity
//! keeps one row per fire, so no replica needs to know of another.

mod clock;
pub mod fire;
mod scheduler;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex};

use super::pollers::{Handles, Poll};
use super::{Again, Channel, StartPollers, Stored};
use crate::config::{Settings, SourceConfig};
pub use clock::{Clock, SystemClock};
pub use scheduler::{FireKind, FireSink, GRACE, Scheduler};

const KIND: &str = "schedule";

/// The content type a fire's bytes (`{"schedule", "scheduled_for"}`) are stored under.
const CONTENT_TYPE: &str = "application/vnd.switchyard.schedule+json";

/// The schedule channel's registration.
#[derive(Debug)]
pub struct Schedule;

impl Channel for Schedule {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn config_table(&self) -> &'static str {
        "schedule"
    }

    fn pollers(&self) -> Option<StartPollers> {
        Some(|handles| Box::new(Schedules::new(handles)))
    }

    /// A fire is no source's delivery: replay uses the event its ledger row recorded.
    fn renormalize(&self, _source: &SourceConfig, _stored: &Stored<'_>) -> Option<Again> {
        None
    }

    fn stored_here(&self, content_type: &str) -> bool {
        content_type == CONTENT_TYPE
    }
}

/// The daemon's scheduler, started with the first revision put in force.
#[derive(Debug)]
struct Schedules {
    sink: fire::IntakeSink,
    running: Mutex<Option<Scheduler>>,
}

impl Schedules {
    fn new(handles: &Handles) -> Self {
        Self {
            sink: fire::IntakeSink {
                store: handles.store.clone(),
                intake: handles.intake.clone(),
            },
            running: Mutex::new(None),
        }
    }
}

#[async_trait::async_trait]
impl Poll for Schedules {
    async fn apply(&self, settings: &Settings) {
        let schedules = settings.loaded.config.schedules.clone();
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        match running.as_ref() {
            Some(scheduler) => scheduler.apply(schedules),
            None => {
                *running = Some(Scheduler::start(
                    Arc::new(SystemClock),
                    Arc::new(self.sink.clone()),
                    schedules,
                ));
            }
        }
    }

    async fn shutdown(&self) {
        let running = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(scheduler) = running {
            scheduler.shutdown().await;
        }
    }
}
