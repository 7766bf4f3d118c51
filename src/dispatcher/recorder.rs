//! The recorder: finished attempts, gathered briefly, recorded in batches.
//!
//! Invariant: every attempt is recorded once, by the intake writer or here; while the store is
//! down it retries, and a claim that lapses meanwhile is delivered again under the same id.

use std::sync::Arc;
use std::time::Duration;

use switchyard_store::outbox::{Recorded, Verdict};
use switchyard_store::{Store, now_millis};
use tokio::sync::mpsc;

use super::TargetHealths;
use super::{CLAIM_BATCH, GATHER};

/// Records finished attempts in batches gathered for up to [`GATHER`]: deliveries and retries
/// in the intake writer's next transaction where the database has one writer that carries
/// them (`Store::record_in_intake`), the rest in a transaction of their own, retried while the
/// store is down (a claim that lapses meanwhile is delivered again).
pub(super) async fn record_all(
    store: Store,
    mut queue: mpsc::Receiver<Recorded>,
    healths: Arc<TargetHealths>,
) {
    let mut batch = Vec::with_capacity(CLAIM_BATCH);
    while queue.recv_many(&mut batch, CLAIM_BATCH).await > 0 {
        gather(&mut queue, &mut batch).await;
        count(&batch, &healths);
        let (offered, mut others): (Vec<Recorded>, Vec<Recorded>) = batch
            .drain(..)
            .partition(|a| !matches!(a.verdict, Verdict::DeadLetter { .. }));
        if !offered.is_empty()
            && let Err(back) = store.record_in_intake(offered).await
        {
            others.extend(back);
        }
        if !others.is_empty() {
            record_with_retries(&store, others).await;
        }
    }
}

/// Adds to `batch` what else finishes within [`GATHER`] of its first attempt, up to
/// [`CLAIM_BATCH`], or until the queue closes.
async fn gather(queue: &mut mpsc::Receiver<Recorded>, batch: &mut Vec<Recorded>) {
    let until = tokio::time::Instant::now() + GATHER;
    while batch.len() < CLAIM_BATCH {
        let room = CLAIM_BATCH - batch.len();
        match tokio::time::timeout_at(until, queue.recv_many(batch, room)).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Metrics and target health for finished attempts.
fn count(batch: &[Recorded], healths: &TargetHealths) {
    let metrics = crate::metrics::metrics();
    for recorded in batch {
        let target = &recorded.claimed.dispatch.target;
        metrics
            .dispatch_attempts
            .get_or_create(&crate::metrics::AttemptLabels {
                target: target.clone(),
                result: recorded.result.clone(),
            })
            .inc();
        if matches!(recorded.verdict, Verdict::DeadLetter { .. }) {
            metrics
                .dead_letters
                .get_or_create(&crate::metrics::TargetLabel {
                    target: target.clone(),
                })
                .inc();
            metrics.workflow_run_finished(&recorded.claimed.run.workflow_id, "dead_lettered");
        }
        let delivered = recorded.verdict == Verdict::Delivered;
        let gone = recorded.result == "target_gone";
        let error = recorded
            .error
            .clone()
            .or_else(|| recorded.status_code.map(|code| format!("HTTP {code}")));
        let dead_lettered = matches!(recorded.verdict, Verdict::DeadLetter { .. });
        healths.record(target, delivered, gone, dead_lettered, error);
    }
}

async fn record_with_retries(store: &Store, batch: Vec<Recorded>) {
    let mut tries = 0u32;
    loop {
        match store.record_attempts(&batch, now_millis()).await {
            Ok(_) => break,
            Err(error) if tries < 20 => {
                tries += 1;
                tracing::warn!(%error, size = batch.len(), "cannot record dispatch attempts; retrying");
                tokio::time::sleep(Duration::from_millis(100 * u64::from(tries))).await;
            }
            Err(error) => {
                tracing::error!(%error, size = batch.len(), "giving up recording dispatch attempts; they will be delivered again when their claims lapse");
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use switchyard_store::outbox::Verdict;
    use tokio::sync::mpsc;

    use switchyard_store::entities::{dispatch, run};
    use switchyard_store::outbox::{ClaimedRun, Recorded};

    use super::gather;
    use crate::dispatcher::CLAIM_BATCH;

    /// A finished attempt of run `n` (dispatch id `dispatch-{n}`).
    fn attempt(n: usize, verdict: Verdict) -> Recorded {
        let run = run::Model {
            id: format!("run-{n}"),
            tenant_id: "acme".into(),
            workflow_id: "triage".into(),
            target_entity_id: format!("ticket-{n}"),
            intake_id: format!("intake-{n}"),
            fencing_token: 1,
            lock_ttl_ms: 60_000,
            ..run::Model::default()
        };
        let dispatch = dispatch::Model {
            id: format!("dispatch-{n}"),
            run_id: run.id.clone(),
            tenant_id: "acme".into(),
            workflow_id: "triage".into(),
            target: "worker".into(),
            attempts: 1,
            series: 1,
            claimed_by: Some("replica".into()),
            ..dispatch::Model::default()
        };
        Recorded {
            claimed: ClaimedRun {
                dispatch,
                run,
                lease_expires_at: 0,
            },
            owner: "replica".into(),
            verdict,
            result: "delivered".into(),
            status_code: Some(204),
            response: None,
            error: None,
            started_at: 0,
            duration_ms: 1,
        }
    }

    fn ids(attempts: &[Recorded]) -> Vec<&str> {
        attempts
            .iter()
            .map(|a| a.claimed.dispatch.id.as_str())
            .collect()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn attempts_finishing_while_it_gathers_join_the_batch() {
        let (records, mut queue) = mpsc::channel(16);
        records.send(attempt(1, Verdict::Delivered)).await.unwrap();
        let mut batch = Vec::new();
        queue.recv_many(&mut batch, CLAIM_BATCH).await;
        // Finishes while the first is being gathered: the task runs as soon as `gather` waits.
        let late = records.clone();
        tokio::spawn(async move {
            late.send(attempt(2, Verdict::Delivered)).await.unwrap();
            late.send(attempt(3, Verdict::Delivered)).await.unwrap();
        });
        gather(&mut queue, &mut batch).await;
        assert_eq!(ids(&batch), ["dispatch-1", "dispatch-2", "dispatch-3"]);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_batch_stops_at_the_limit_and_what_is_left_stays_queued() {
        let (records, mut queue) = mpsc::channel(CLAIM_BATCH + 8);
        for n in 0..CLAIM_BATCH + 5 {
            records.send(attempt(n, Verdict::Delivered)).await.unwrap();
        }
        let mut batch = Vec::new();
        queue.recv_many(&mut batch, 1).await;
        gather(&mut queue, &mut batch).await;
        assert_eq!(batch.len(), CLAIM_BATCH);
        assert_eq!(queue.len(), 5);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_closed_queue_ends_the_gathering_with_everything_it_held() {
        let (records, mut queue) = mpsc::channel(16);
        for n in 0..3 {
            records.send(attempt(n, Verdict::Delivered)).await.unwrap();
        }
        drop(records);
        let mut batch = Vec::new();
        queue.recv_many(&mut batch, 1).await;
        gather(&mut queue, &mut batch).await;
        assert_eq!(ids(&batch), ["dispatch-0", "dispatch-1", "dispatch-2"]);
    }
}
