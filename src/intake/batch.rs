//! A batch of deliveries as the store's intake writers take it: the deliveries waiting in one
//! writer's queue ([`Queue`]), decided by [`decide`](super::decide) in the store's transaction
//! and answered after it ([`DeliveryBatch`]).
//!
//! Invariant: every sender of a batch is answered exactly once, after the transaction ended:
//! its decision once committed, `invalid_event` when the store can never hold it, 503 when the
//! store refused or failed it (dropping a batch answers its senders 503 too).

use std::sync::Arc;
use std::time::Instant;

use switchyard_core::Outcome;
use switchyard_store::Millis;
use switchyard_store::intake::{Batch, Batches, Committed, Failure, Found, Keys, Writes};
use tokio::sync::mpsc;

use super::decide::{self, Choices};
use super::health::Signals;
use super::preclaim::{self, Claimed};
use super::{Answer, Delivery, MAX_BATCH, Pending, StoreUnavailable};
use crate::live::{Live, LiveConfig};

/// One writer's queue of deliveries, as batches.
pub(super) struct Queue {
    pub queue: mpsc::Receiver<Pending>,
    pub live: LiveConfig,
    pub signals: Signals,
}

#[async_trait::async_trait]
impl Batches for Queue {
    async fn next(&mut self) -> Option<Box<dyn Batch>> {
        let mut pending = Vec::with_capacity(MAX_BATCH);
        if self.queue.recv_many(&mut pending, MAX_BATCH).await == 0 {
            return None;
        }
        Some(Box::new(DeliveryBatch::new(
            pending,
            self.live.current(),
            self.signals.clone(),
        )))
    }

    fn more_waiting(&self) -> bool {
        !self.queue.is_empty()
    }

    fn panicked(&self) {
        self.signals.health.panicked();
    }
}

/// Deliveries decided in one transaction.
pub(super) struct DeliveryBatch {
    pending: Vec<Pending>,
    /// The revision in force when the batch was taken: every delivery is decided under it.
    live: Arc<Live>,
    signals: Signals,
    /// The choices of the current attempt (made with its keys).
    choices: Option<Choices>,
    /// The answers of the current attempt, in batch order.
    answers: Vec<Answer>,
    /// The current attempt's pre-claims, handed to the dispatcher after the commit.
    claimed: Vec<Claimed>,
    started: Option<(Instant, Option<tracing::Span>)>,
}

impl DeliveryBatch {
    fn new(pending: Vec<Pending>, live: Arc<Live>, signals: Signals) -> Self {
        Self {
            pending,
            live,
            signals,
            choices: None,
            answers: Vec::new(),
            claimed: Vec::new(),
            started: None,
        }
    }

    fn deliveries(&self) -> Vec<&Delivery> {
        self.pending.iter().map(|p| &p.delivery).collect()
    }
}

impl Batch for DeliveryBatch {
    fn len(&self) -> usize {
        self.pending.len()
    }

    fn starting(&mut self) {
        let span = crate::telemetry::batch_commit(
            self.pending.len(),
            self.pending
                .iter()
                .filter_map(|p| p.delivery.trace.as_ref()),
        );
        self.started = Some((Instant::now(), span));
    }

    fn keys(&mut self, _now: Millis) -> Keys<'_> {
        let deliveries: Vec<&Delivery> = self.pending.iter().map(|p| &p.delivery).collect();
        let (keys, choices) = decide::keys(&deliveries, &self.live);
        self.choices = Some(choices);
        keys
    }

    fn decide(&mut self, found: Found, now: Millis) -> Writes {
        let choices = self
            .choices
            .take()
            .expect("the store asks for a batch's keys before deciding it");
        let deliveries: Vec<&Delivery> = self.pending.iter().map(|p| &p.delivery).collect();
        let (answers, writes) = decide::decide(&deliveries, choices, found, &self.live, now);
        self.answers = answers;
        writes
    }

    fn claim(&mut self, writes: &mut Writes, now: Millis) {
        let deliveries: Vec<&Delivery> = self.pending.iter().map(|p| &p.delivery).collect();
        self.claimed = preclaim::claim(writes, &deliveries, &self.signals.wake.preclaims, now);
    }

    fn written(&self) -> Result<(), String> {
        super::failpoint::error_after_write(&self.deliveries())
    }

    fn committed(self: Box<Self>, committed: Committed) {
        let DeliveryBatch {
            mut pending,
            signals,
            answers,
            claimed,
            started,
            ..
        } = *self;
        if let Some((started, span)) = started {
            crate::metrics::metrics().batch(answers.len(), started.elapsed());
            tracing::debug!(
                size = answers.len(),
                micros = started.elapsed().as_micros() as u64,
                "batch committed"
            );
            drop(span);
        }
        signals.health.committed();
        let metrics = crate::metrics::metrics();
        for _ in 0..committed.expired_runs {
            metrics.run_finished("expired");
        }
        let routed = answers
            .iter()
            .filter(|a| a.outcome == Outcome::Routed)
            .count();
        let handed_over = preclaim::hand_over(claimed, &mut pending, &signals.wake.preclaims);
        if routed > 0 {
            metrics.runs_created.inc_by(routed as u64);
            // Runs the writer claimed for this daemon's dispatcher need no claim pass; pull
            // waiters are woken by the workflows that got new runs.
            if routed > handed_over {
                signals.wake.runs_created_in(
                    answers
                        .iter()
                        .filter(|a| a.outcome == Outcome::Routed)
                        .filter_map(|a| a.workflow_id.as_deref()),
                );
            }
        }
        for (pending, answer) in pending.into_iter().zip(answers) {
            // By name: a delivery's source is a configured one (or `api`), which bounds them.
            metrics.source_delivery(&pending.delivery.source, answer.outcome);
            if answer.outcome == Outcome::Routed
                && let Some(workflow) = answer.workflow_id.as_deref()
            {
                metrics.workflow_run_created(workflow);
            }
            pending.answer(Ok(answer));
        }
    }

    fn failed(self: Box<Self>, failure: Failure) {
        match failure {
            // A value no column can take: `invalid_event`, never a 503 that the sender would
            // retry forever. Nothing was recorded.
            Failure::Unstorable(error) => {
                tracing::warn!(%error, size = self.pending.len(), "the store cannot hold a delivery; answering invalid_event");
                for pending in self.pending {
                    pending.answer(Ok(Answer::refused(
                        Outcome::InvalidEvent,
                        format!("the store cannot hold this delivery: {error}"),
                    )));
                }
            }
            Failure::Connection(error) | Failure::Other(error) => {
                self.signals.health.failed();
                tracing::error!(%error, size = self.pending.len(), "the store refused deliveries; senders are told to retry");
                let refusal = StoreUnavailable(error);
                for pending in self.pending {
                    pending.answer(Err(refusal.clone()));
                }
            }
        }
    }

    fn split(self: Box<Self>) -> Vec<Box<dyn Batch>> {
        let DeliveryBatch {
            pending,
            live,
            signals,
            ..
        } = *self;
        pending
            .into_iter()
            .map(|one| {
                Box::new(DeliveryBatch::new(vec![one], live.clone(), signals.clone()))
                    as Box<dyn Batch>
            })
            .collect()
    }
}
