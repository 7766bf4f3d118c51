//! What each intake writer reports about itself, for `/readyz`: when it last committed, how
//! many batches in a row it could not commit, and whether it is still running. A writer that
//! panics on a batch answers that batch's senders 503 (retry safe) and goes on; one that stops
//! makes the daemon unready, loudly.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

use serde::Serialize;

use crate::dispatcher::Wake;

/// Consecutive failed batches after which a writer makes the daemon unready.
pub const UNHEALTHY_AFTER_FAILURES: u32 = 3;

/// One writer's health, updated by the writer after every batch.
#[derive(Debug)]
pub struct WriterHealth {
    last_commit_ms: AtomicI64,
    consecutive_failures: AtomicU32,
    panics: AtomicU64,
}

impl Default for WriterHealth {
    fn default() -> Self {
        Self {
            last_commit_ms: AtomicI64::new(0),
            consecutive_failures: AtomicU32::new(0),
            panics: AtomicU64::new(0),
        }
    }
}

impl WriterHealth {
    pub fn committed(&self) {
        self.last_commit_ms
            .store(switchyard_store::now_millis(), Ordering::Relaxed);
        self.consecutive_failures.store(0, Ordering::Relaxed);
    }

    pub fn failed(&self) {
        self.consecutive_failures.fetch_add(1, Ordering::Relaxed);
    }

    pub fn panicked(&self) {
        self.panics.fetch_add(1, Ordering::Relaxed);
        self.failed();
    }

    /// The writer as `/readyz` shows it, with its queue depth; `alive` is false once the
    /// writer has stopped taking deliveries.
    pub fn status(&self, queue_depth: usize, alive: bool) -> WriterStatus {
        let last = self.last_commit_ms.load(Ordering::Relaxed);
        let consecutive_failures = self.consecutive_failures.load(Ordering::Relaxed);
        WriterStatus {
            healthy: alive && consecutive_failures < UNHEALTHY_AFTER_FAILURES,
            alive,
            last_commit: (last > 0).then(|| switchyard_store::millis_rfc3339(last)),
            consecutive_failures,
            panics: self.panics.load(Ordering::Relaxed),
            queue_depth,
        }
    }
}

/// One writer in `/readyz`.
#[derive(Debug, Clone, Serialize)]
pub struct WriterStatus {
    pub healthy: bool,
    pub alive: bool,
    pub last_commit: Option<String>,
    pub consecutive_failures: u32,
    pub panics: u64,
    pub queue_depth: usize,
}

/// What a writer tells the rest of the daemon after each batch.
#[derive(Debug, Clone)]
pub struct Signals {
    /// New runs are in the outbox.
    pub wake: Arc<Wake>,
    pub health: Arc<WriterHealth>,
}
