//! The order of a batch's transaction, written once for every database, and what a writer
//! does with a batch that failed.
//!
//! 1. lock the `flow_gates` rows the batch names (sorted by name; created if missing), so
//!    that everything counted after sees every run the gate's previous holder committed;
//! 2. read the stored answer of every delivery and claimed message (duplicates);
//! 3. read the batch's entity leases, row-locked until the commit (sorted, so replicas lock
//!    shared rows in the same order);
//! 4. count each capped workflow's runs (at most its ceiling's worth);
//! 5. read the lease holders' dispatches as coalescing windows (row-locked);
//! 6. decide every delivery (the daemon, in memory);
//! 7. claim new runs' dispatches for this daemon's dispatcher where a slot is free;
//! 8. write: replaced `rate_limited` refusals out first, then leases, runs and expired
//!    holders, dispatches, history, raw bytes, ledger rows, mailbox cursors, and flow
//!    control's rows last;
//! 9. commit.
//!
//! A driver may serve several steps with one statement (PostgreSQL reads 1-3 in one, 4-5 in
//! another, writes 8 in a third) but takes them in this order.

use super::flow::{FlowFound, FlowKeys};
use super::{Batch, Batches, Committed, Failure, Found, Keys, Writes};
use crate::Millis;
use crate::entities::entity_lock;

/// Whether another batch is queued behind this one, asked at the commit (PostgreSQL's writer
/// then sends the next `BEGIN` with this `COMMIT`).
pub(crate) type MoreWaiting<'a> = &'a (dyn Fn() -> bool + Send + Sync);

/// One batch transaction's steps on one database.
pub(crate) trait Steps {
    type Error;

    /// Before step 1: whatever the database needs before the transaction (PostgreSQL creates
    /// the gates the batch names that do not exist yet, and begins it).
    async fn begin(&mut self, _keys: &Keys<'_>, _now: Millis) -> Result<(), Self::Error> {
        Ok(())
    }

    /// Steps 1-3.
    async fn look_up(&mut self, keys: &Keys<'_>, now: Millis) -> Result<Found, Self::Error>;

    /// Steps 4-5 (nothing when flow control needs nothing).
    async fn counts_and_windows(
        &mut self,
        flow: &FlowKeys,
        leases: &[entity_lock::Model],
        now: Millis,
        found: &mut FlowFound,
    ) -> Result<(), Self::Error>;

    /// Step 8.
    async fn write(&mut self, writes: Writes, now: Millis) -> Result<(), Self::Error>;

    /// An error the batch itself raised after the writes (a test hook).
    fn refused(detail: String) -> Self::Error;
}

/// Steps 1-8 of one batch; the caller commits (step 9).
pub(crate) async fn decide_batch<S: Steps>(
    steps: &mut S,
    batch: &mut dyn Batch,
    now: Millis,
) -> Result<Committed, S::Error> {
    let keys = batch.keys(now);
    steps.begin(&keys, now).await?;
    let mut found = steps.look_up(&keys, now).await?;
    steps
        .counts_and_windows(&keys.flow, &found.leases, now, &mut found.flow)
        .await?;
    drop(keys);
    let mut writes = batch.decide(found, now);
    batch.claim(&mut writes, now);
    let committed = Committed {
        expired_runs: writes.locks.expired_runs.len(),
    };
    steps.write(writes, now).await?;
    batch.written().map_err(S::refused)?;
    Ok(committed)
}

/// A writer on one database: commits one batch (retrying a lost race itself).
pub(crate) trait Writer {
    /// Begins, decides ([`decide_batch`]) and commits `batch`; `more_waiting` says, when asked
    /// at the commit, whether another batch is queued behind it.
    async fn commit(
        &mut self,
        batch: &mut dyn Batch,
        more_waiting: MoreWaiting<'_>,
    ) -> Result<Committed, Failure>;
}

/// Decides `batch` and answers it. If the batch as a whole fails, each delivery is decided
/// alone, so one poisonous delivery cannot refuse its neighbours.
pub(crate) async fn decide<W: Writer>(
    writer: &mut W,
    mut batch: Box<dyn Batch>,
    more_waiting: MoreWaiting<'_>,
) {
    batch.starting();
    match writer.commit(batch.as_mut(), more_waiting).await {
        Ok(committed) => batch.committed(committed),
        Err(failure @ (Failure::Unstorable(_) | Failure::Other(_))) if batch.len() > 1 => {
            tracing::warn!(error = %failure, size = batch.len(), "a batch failed; deciding its deliveries one by one");
            for one in batch.split() {
                Box::pin(decide(writer, one, more_waiting)).await;
            }
        }
        Err(failure) => batch.failed(failure),
    }
}

/// Takes batches from `batches` and decides them until it ends. A panic on one batch drops
/// its replies (its senders answer 503, retry safe) and the writer goes on.
pub(crate) async fn serve<W: Writer>(writer: &mut W, mut batches: Box<dyn Batches>) {
    use futures::FutureExt;
    while let Some(batch) = batches.next().await {
        let more_waiting = || batches.more_waiting();
        let decided = std::panic::AssertUnwindSafe(decide(writer, batch, &more_waiting))
            .catch_unwind()
            .await;
        if decided.is_err() {
            batches.panicked();
            tracing::error!(
                "an intake writer panicked on a batch; its senders were answered 503 and it goes on"
            );
        }
    }
}

/// Tries of one batch that lost a race with another writer (unique key, deadlock, busy).
pub(crate) const ATTEMPTS: u32 = 5;

/// How long to wait before trying a lost batch again: growing, with jitter so that two
/// writers that collided do not collide again.
pub(crate) fn backoff(attempt: u32) -> std::time::Duration {
    let jitter = u64::from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
            % 5_000,
    );
    std::time::Duration::from_micros((2_000 << attempt.min(6)) + jitter)
}
