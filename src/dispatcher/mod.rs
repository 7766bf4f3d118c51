//! The dispatcher: hands every routed run to its push target (http, nats) from the outbox the
//! intake writers fill, records every attempt, retries on the target's schedule and
//! dead-letters what cannot be delivered. Pull targets are served by `POST /v1/claims`.
//!
//! Invariant: a delivery is claimed before it is sent and recorded after (a crash in between
//! re-delivers under the same dispatch id once the claim lapses); nothing is ever dropped.
//! Each daemon runs one; replicas share the outbox through `SKIP LOCKED` claims.

mod attempt;
mod claim;
mod deadlines;
mod handover;
mod health;
mod members;
pub mod message;
pub mod preclaim;
pub mod pull_waiters;
mod recorder;
pub mod resumes;
mod transports;

use std::sync::Arc;
use std::time::Duration;

use switchyard_store::outbox::{ClaimedRun, Recorded};
use switchyard_store::{Millis, Store, now_millis};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, watch};

use crate::background::Background;
use crate::live::LiveConfig;
use crate::telemetry::DispatchSpan;
pub use health::{TargetHealth, TargetHealths};
use transports::{PushTarget, Transports};

/// Wake-ups from the intake writers: a commit created runs.
#[derive(Debug, Default)]
pub struct Wake {
    /// The push dispatcher (one waiter; a wake-up while it is busy is kept for later).
    pub dispatcher: Notify,
    /// Pull workers long-polling `POST /v1/claims`, woken by workflow.
    pub pull: pull_waiters::PullWaiters,
    /// Dispatches the intake writers claimed for this dispatcher ([`preclaim`]).
    pub preclaims: preclaim::PreClaims,
}

impl Wake {
    /// New runs are in the outbox, of workflows this caller does not know (a wait timer's
    /// pass): the dispatcher looks. No pull waiter is woken, since it might be another
    /// tenant's; waiters find such runs on their periodic look.
    pub fn runs_created(&self) {
        self.dispatcher.notify_one();
    }

    /// New runs are in the outbox, one entry of `workflows` per run: the dispatcher looks,
    /// and only pull waiters of those workflows are woken, one per run.
    pub fn runs_created_in<'a>(&self, workflows: impl IntoIterator<Item = &'a str>) {
        self.dispatcher.notify_one();
        self.pull.work_for(workflows);
    }
}

/// Deliveries in flight at once, over all push targets (each http target also has its own
/// `max_in_flight`).
const IN_FLIGHT: usize = 1024;
/// Most rows claimed in one transaction.
const CLAIM_BATCH: usize = 256;
/// How long finished attempts are gathered before they are recorded. At a moderate rate
/// deliveries finish one at a time, and each would otherwise be a transaction and a WAL flush
/// of its own beside intake's (PostgreSQL at 1,000 events/s: 692-1,158 commits a second in the
/// http daemon's database, 455-669 with intake alone; 364-658 with this, BENCHMARKS round 13).
/// Only the recorded status waits: a delivery's slots are freed once its record is queued.
const GATHER: Duration = Duration::from_millis(10);
/// How often the outbox is looked at without a wake-up (work of other replicas, retries due).
const POLL: Duration = Duration::from_millis(250);
/// How often leases of runs waiting for delivery are kept alive and lapsed pull claims reset.
const KEEP_ALIVE: Duration = Duration::from_millis(500);
/// How long shutdown waits for deliveries in flight to finish and be recorded.
const DRAIN: Duration = Duration::from_secs(20);

/// A running dispatcher.
#[derive(Debug)]
pub struct Dispatcher(Background);

impl Dispatcher {
    /// Starts dispatching the outbox of `store` as replica `owner`.
    pub fn start(
        store: Store,
        live: LiveConfig,
        owner: String,
        wake: Arc<Wake>,
        healths: Arc<TargetHealths>,
    ) -> Self {
        Self(Background::spawn(|stopped| {
            run(store, live, owner, wake, healths, stopped)
        }))
    }

    /// Stops claiming, lets deliveries in flight finish and be recorded (bounded), and returns.
    /// What is left unrecorded stays claimed until its claim lapses, then is delivered again.
    pub async fn shutdown(&self) {
        if !self.0.stop(DRAIN + Duration::from_secs(5)).await {
            tracing::warn!(
                "the dispatcher did not stop in time; unrecorded deliveries will be sent again"
            );
        }
    }
}

async fn run(
    store: Store,
    live: LiveConfig,
    owner: String,
    wake: Arc<Wake>,
    healths: Arc<TargetHealths>,
    mut stopped: watch::Receiver<bool>,
) {
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    let (records, queue) = mpsc::channel(IN_FLIGHT * 2);
    let recorder = tokio::spawn(recorder::record_all(store.clone(), queue, healths));
    let mut transports = Transports::default();
    let sender = Sender {
        records,
        owner: owner.clone(),
        wake: wake.clone(),
        store: store.clone(),
        live: live.clone(),
    };
    let (targets, handed_over) = watch::channel(Arc::<[PushTarget]>::from([]));
    let handover = tokio::spawn(handover::run(sender.clone(), handed_over, stopped.clone()));
    let keeper = tokio::spawn(keep_alive(store.clone(), stopped.clone()));
    let timer = tokio::spawn(deadlines::run(store.clone(), stopped.clone()));
    // What makes this pass claim from the outbox (`None`: nothing), and whether due rows may
    // be waiting for a free slot (then a freed slot means a claim pass).
    let (mut claim_now, mut backlog): (Option<&'static str>, bool) = (Some("start"), true);
    let mut published = String::new();
    loop {
        if *stopped.borrow() {
            break;
        }
        let current = live.current();
        transports.refresh(&current).await;
        if published != current.revision() {
            published = current.revision().to_owned();
            // The hand-over task knows the targets before the writers may claim for them.
            targets.send_replace(transports.push().into());
            wake.preclaims.publish(
                &owner,
                &in_flight,
                transports
                    .push()
                    .iter()
                    .map(|t| (t.name.clone(), t.in_flight.clone(), millis(t.claim_for))),
                current
                    .max_running
                    .iter()
                    .map(|m| (m.workflow_id.clone(), m.target.clone())),
            );
        }
        let mut more = false;
        if claim_now.is_some() {
            // This pass looks at every target's due rows, so what a pre-claim left waiting for
            // a slot is looked at now (a claim that finds no slot from here on flags it again).
            // Left set, every delivery that ends would start a claim pass of its own.
            backlog = false;
            wake.preclaims.set_backlog_left(false);
        }
        for (target, wake_label) in transports
            .push()
            .iter()
            .filter_map(|t| Some((t, claim_now?)))
        {
            // Claim only what can be sent now: a claimed row waiting for a free slot would
            // see its claim lapse and be claimed (and sent) again. A full target is looked at
            // again when one of its deliveries ends (it wakes the loop).
            let free = in_flight
                .available_permits()
                .min(target.in_flight.available_permits())
                .min(CLAIM_BATCH);
            if free == 0 {
                backlog = true;
                continue;
            }
            // The slots are taken before the claim, never awaited after it: the intake writer
            // takes them too (pre-claims), and a claim waiting for a slot that a pre-claim
            // waiting for this loop holds would never be sent.
            let Some(mut slots) = Slots::take(&in_flight, &target.in_flight, free) else {
                backlog = true;
                continue;
            };
            match claim::claim(&store, target, &owner, free, &current, wake_label).await {
                Ok((claimed_by, claimed)) => {
                    more |= claimed.len() == free;
                    backlog |= claimed.len() == free;
                    for (claimed, message, trace) in claimed {
                        let Some(permits) = slots.one() else {
                            break;
                        };
                        sender.send(target, claimed_by, claimed, message, trace, permits);
                    }
                }
                Err(error) => {
                    backlog = true;
                    tracing::warn!(target = %target.name, %error, "cannot claim dispatches; trying again shortly");
                }
            }
        }
        if more {
            tokio::task::yield_now().await;
            claim_now = Some("more");
            continue;
        }
        claim_now = tokio::select! {
            _ = wake.dispatcher.notified() => Some("new_runs"),
            _ = wake.preclaims.slot_freed.notified() => {
                (backlog || wake.preclaims.backlog_left()).then_some("slot_freed")
            }
            _ = tokio::time::sleep(POLL) => Some("poll"),
            _ = stopped.changed() => None,
        };
    }
    wake.preclaims.close();
    let _ = handover.await;
    // Drain: every permit back means every delivery has sent its record.
    let drained = tokio::time::timeout(DRAIN, in_flight.acquire_many(IN_FLIGHT as u32)).await;
    if drained.is_err() {
        tracing::warn!(
            "deliveries still in flight at shutdown are left claimed; they will be sent again"
        );
    }
    // The recorder ends when the last sender of records is gone (the hand-over task's ended).
    drop(sender);
    let _ = recorder.await;
    let _ = keeper.await;
    let _ = timer.await;
}

/// Slots taken for one claim pass: the dispatcher's and the target's, `n` of each; what the
/// claim does not use goes back when this is dropped.
struct Slots {
    all: OwnedSemaphorePermit,
    target: OwnedSemaphorePermit,
}

impl Slots {
    fn take(all: &Arc<Semaphore>, target: &Arc<Semaphore>, n: usize) -> Option<Self> {
        let n = u32::try_from(n).ok()?;
        Some(Self {
            all: all.clone().try_acquire_many_owned(n).ok()?,
            target: target.clone().try_acquire_many_owned(n).ok()?,
        })
    }

    /// One delivery's slots.
    fn one(&mut self) -> Option<preclaim::Permits> {
        Some(preclaim::Permits::new(
            self.all.split(1)?,
            self.target.split(1)?,
        ))
    }
}

/// What a delivery task needs: where its record goes, the claimant, the store and config.
#[derive(Clone)]
struct Sender {
    records: mpsc::Sender<Recorded>,
    owner: String,
    wake: Arc<Wake>,
    store: Store,
    live: LiveConfig,
}

impl Sender {
    /// Sends one claimed dispatch on its own task, holding its slots until its record is
    /// queued; a send is counted by who claimed it (`metrics::ClaimLabels`).
    fn send(
        &self,
        target: &PushTarget,
        claimed_by: &'static str,
        claimed: ClaimedRun,
        message: Vec<u8>,
        trace: DispatchSpan,
        permits: preclaim::Permits,
    ) {
        let target = target.clone();
        let records = self.records.clone();
        let owner = self.owner.to_owned();
        let wake = self.wake.clone();
        let (store, live) = (self.store.clone(), self.live.clone());
        tokio::spawn(async move {
            // Checked again at the last moment, against the revision in force now: a
            // suspension that came into force after the claim still stops the run before its
            // worker sees it. If the check cannot be made, nothing is sent and the claim lapses
            // (checked again then).
            let current = live.current();
            match crate::authority::revoke_if_refused(
                &store,
                &current.authority,
                &claimed.run,
                now_millis(),
            )
            .await
            {
                Ok(false) => {
                    crate::metrics::metrics()
                        .dispatch_claims
                        .get_or_create(&crate::metrics::ClaimLabels {
                            target: target.name.clone(),
                            by: claimed_by,
                        })
                        .inc();
                    let recorded = attempt::deliver(&target, claimed, message, trace, owner).await;
                    let _ = records.send(recorded).await;
                }
                Ok(true) => trace.finish(crate::authority::REVOKED, None),
                Err(error) => {
                    tracing::warn!(run_id = %claimed.run.id, %error, "cannot check the run's principal before delivery; it is sent once its claim lapses and the check succeeds");
                }
            }
            drop(permits);
            wake.preclaims.slot_freed.notify_one();
        });
    }
}

/// Keeps leases of runs waiting for delivery alive and resets lapsed pull claims, on its own
/// task so deliveries never wait for it. The first pass looks at every lease (after a downtime
/// the waiting runs' leases may have run out); later ones only at those about to run out.
async fn keep_alive(store: Store, mut stopped: watch::Receiver<bool>) {
    let mut everything = true;
    while !*stopped.borrow() {
        match store.keep_alive(now_millis(), everything).await {
            Ok((extended, lapsed)) => {
                everything = false;
                if extended + lapsed > 0 {
                    tracing::debug!(extended, lapsed, "kept leases of waiting runs alive");
                }
            }
            Err(error) => tracing::warn!(%error, "cannot keep leases of waiting runs alive"),
        }
        tokio::select! {
            _ = tokio::time::sleep(KEEP_ALIVE) => {}
            _ = stopped.changed() => {}
        }
    }
}

fn millis(duration: Duration) -> Millis {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX / 4)
}
