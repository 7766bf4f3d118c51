//! The deadline timer: ends active runs past their deadline as `failed` (`deadline_exceeded`),
//! releasing their entities. Durable because the deadline is a column of the run
//! (`runs_deadline (status, deadline_at)` index): the first pass runs at start, so a deadline that
//! passed while every daemon was down is applied then; replicas share the rows with
//! `SKIP LOCKED` and a run ends only from an active status, so each deadline fires once.

use std::time::Duration;

use switchyard_store::{Store, now_millis};
use tokio::sync::watch;

/// How often active runs are looked at for passed deadlines.
const EVERY: Duration = Duration::from_secs(1);
/// Most runs ended in one transaction.
const BATCH: u64 = 200;

pub async fn run(store: Store, mut stopped: watch::Receiver<bool>) {
    while !*stopped.borrow() {
        loop {
            match store.expire_deadlines(now_millis(), BATCH).await {
                Ok(ended) => {
                    for run_id in &ended {
                        crate::metrics::metrics().run_finished("failed");
                        tracing::warn!(run_id = %run_id, reason = "deadline_exceeded", "run ended: its deadline passed");
                    }
                    if ended.len() < BATCH as usize {
                        break;
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot end runs past their deadline; trying again shortly");
                    break;
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = stopped.changed() => {}
        }
    }
}
