//! Retention: a background task that has the store delete expired ledger rows (emptying their
//! raw bytes earlier) and finished runs (with their dispatch, attempts and history) in batches,
//! and give the space back where the database does not (SQLite). The statements, and what is
//! kept, are the store's (`switchyard_store::retention`); the schedule and the pacing are here.
//!
//! *Invariant: never deletes an active run or the rows it needs; never holds one long
//! transaction.* Every batch is its own short write transaction of at most `retention.batch`
//! rows per table, with a pause before the next, so the intake writer waits at most one batch.

use std::time::Duration;

use switchyard_store::retention::{Batch, FINAL_STATUSES};
use switchyard_store::{DbErr, Millis, Store};
use tokio::sync::watch;

pub use switchyard_store::retention::Deleted;

use crate::background::Background;
use crate::config::RetentionConfig;
use crate::live::LiveConfig;

/// Pause between two batches, so the intake writer gets the write lock in between.
const BATCH_PAUSE: Duration = Duration::from_millis(20);

/// Pause between two steps of giving space back: about one checkpoint pass of the intake
/// writer's checkpointer (`sqlite_checkpoint::PAUSE`, 100 ms), so the WAL is checkpointed and
/// starts over between them instead of growing by the whole shrink.
const VACUUM_PAUSE: Duration = Duration::from_millis(150);

/// The running task.
#[derive(Debug)]
pub struct Retention(Background);

impl Retention {
    /// Starts pruning every `retention.interval` of the revision in force (a reload changes
    /// the windows from the next pass on).
    pub fn start(store: Store, live: LiveConfig) -> Self {
        Self(Background::spawn(|stopped| run(store, live, stopped)))
    }

    /// Stops after the batch in progress (which commits or rolls back on its own).
    pub async fn shutdown(&self) {
        if !self.0.stop(Duration::from_secs(10)).await {
            tracing::warn!("the retention task did not stop in time");
        }
    }
}

/// The id from which the next pass empties raw bytes: every ledger row before it had its bytes
/// emptied by an earlier pass of this process (they are kept in their rows, which stay longer;
/// `Store::prune_raw`). A new process starts from the oldest row.
#[derive(Debug, Default)]
pub struct RawProgress(String);

async fn run(store: Store, live: LiveConfig, mut stopped: watch::Receiver<bool>) {
    let mut raw_from = RawProgress::default();
    loop {
        let config = live.current().settings.loaded.config.retention.clone();
        let now = switchyard_store::now_millis();
        match pass(&store, &config, now, &mut raw_from, &stopped).await {
            Ok(deleted) if deleted.any() => {
                tracing::info!(
                    raw_deliveries = deleted.raw_deliveries,
                    intake = deleted.intake,
                    runs = deleted.runs,
                    dispatches = deleted.dispatches,
                    dispatch_attempts = deleted.dispatch_attempts,
                    run_history = deleted.run_history,
                    waits = deleted.waits,
                    slack_messages = deleted.slack_messages,
                    "retention deleted expired rows"
                );
                if let Err(error) = give_back_space(&store, &stopped).await {
                    tracing::warn!(%error, "incremental vacuum failed; the next pass retries it");
                }
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "retention pass failed; the next pass retries it");
            }
        }
        if *stopped.borrow() {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(config.interval) => {}
            _ = stopped.changed() => return,
        }
    }
}

/// One pass: finished runs first (their ledger rows may then go in the same pass), then the
/// ledger, then raw bytes. Stops early, between batches, when asked to.
pub async fn pass(
    store: &Store,
    config: &RetentionConfig,
    now: Millis,
    raw_from: &mut RawProgress,
    stopped: &watch::Receiver<bool>,
) -> Result<Deleted, DbErr> {
    let mut deleted = Deleted::default();
    let before = |window: Duration| now.saturating_sub(window.as_millis() as i64);
    let runs_before = before(config.finished_runs);
    for status in FINAL_STATUSES {
        while !*stopped.borrow() {
            let n = store
                .prune_finished_runs(status, runs_before, config.batch, &mut deleted)
                .await?;
            if n < config.batch {
                break;
            }
            tokio::time::sleep(BATCH_PAUSE).await;
        }
    }
    let ledger_before = before(config.ledger);
    deleted.intake = batches(config.batch, stopped, || {
        store.prune_ledger(ledger_before, config.batch)
    })
    .await?;
    let raw_before = before(config.raw);
    while !*stopped.borrow() {
        let (done, next) = store
            .prune_raw(&raw_from.0, raw_before, config.batch)
            .await?;
        deleted.raw_deliveries += done.deleted;
        raw_from.0 = next;
        if done.selected < config.batch {
            break;
        }
        tokio::time::sleep(BATCH_PAUSE).await;
    }
    Ok(deleted)
}

/// Runs `batch_of` until a batch selects fewer than `batch` rows (or a stop is asked for),
/// pausing between batches; returns how many rows they deleted.
async fn batches<F, Fut>(
    batch: usize,
    stopped: &watch::Receiver<bool>,
    batch_of: F,
) -> Result<u64, DbErr>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Batch, DbErr>>,
{
    let mut total = 0;
    while !*stopped.borrow() {
        let done = batch_of().await?;
        total += done.deleted;
        if done.selected < batch {
            break;
        }
        tokio::time::sleep(BATCH_PAUSE).await;
    }
    Ok(total)
}

/// Gives the space a pass freed back to the file system, a step at a time (each a short write
/// transaction of its own), paced; nothing to do on a server.
async fn give_back_space(store: &Store, stopped: &watch::Receiver<bool>) -> Result<(), DbErr> {
    while !*stopped.borrow() {
        if !store.give_back_space().await? {
            break;
        }
        tokio::time::sleep(VACUUM_PAUSE).await;
    }
    Ok(())
}
