//! The dispatcher: hands every routed run to its push target (http, nats) from the outbox the
//! intake writers fill, records every attempt, retries on the target's schedule and
//! dead-letters what cannot be delivered. Pull targets are served by `POST /v1/claims`.
//!
//! Invariant: a delivery is claimed before it is sent and recorded after (a crash in between
//! re-delivers under the same dispatch id once the claim lapses); nothing is ever dropped.
//! Each daemon runs one; replicas share the outbox through `SKIP LOCKED` claims.

mod deadlines;
mod handover;
mod members;
pub mod message;
pub mod resumes;
pub mod preclaim;
pub mod pull_waiters;
mod transports;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use switchyard_dispatch::schedule::jitter;
use switchyard_dispatch::{AttemptResult, Outbound};
use switchyard_store::outbox::{ClaimedRun, Recorded, Verdict};
use switchyard_store::{Millis, Store, millis_rfc3339, now_millis};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, watch};

use crate::background::Background;
use crate::live::{Live, LiveConfig};
use crate::telemetry::DispatchSpan;
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

/// Health of one target, for `/readyz`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TargetHealth {
    pub last_success: Option<String>,
    pub last_failure: Option<String>,
    pub last_error: Option<String>,
    pub consecutive_failures: u32,
    /// Set when the target answered 410 Gone.
    pub gone: bool,
}

/// Latest health per target.
#[derive(Debug, Default)]
pub struct TargetHealths(Mutex<BTreeMap<String, TargetHealth>>);

impl TargetHealths {
    fn record(&self, target: &str, delivered: bool, gone: bool, error: Option<String>) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let health = map.entry(target.to_owned()).or_default();
        let now = millis_rfc3339(now_millis());
        if delivered {
            health.last_success = Some(now);
            health.consecutive_failures = 0;
            health.gone = false;
        } else {
            health.last_failure = Some(now);
            health.last_error = error;
            health.consecutive_failures += 1;
            health.gone |= gone;
        }
    }

    pub fn snapshot(&self) -> BTreeMap<String, TargetHealth> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

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
    let recorder = tokio::spawn(record_all(store.clone(), queue, healths));
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
            match claim(&store, target, &owner, free, &current, wake_label).await {
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
                    let recorded = deliver(&target, claimed, message, trace, owner).await;
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

/// Claims due dispatches of one push target and builds their messages; says who claimed
/// them (`metrics::ClaimLabels`). An uncapped target's are claimed in the intake writer's
/// next transaction where the database has one writer that carries claims (SQLite), else in
/// a claim transaction of the dispatcher's own (counted by what started it).
async fn claim(
    store: &Store,
    target: &PushTarget,
    owner: &str,
    limit: usize,
    live: &Live,
    wake: &'static str,
) -> anyhow::Result<(&'static str, Vec<(ClaimedRun, Vec<u8>, DispatchSpan)>)> {
    let now = now_millis();
    let claim_until = now.saturating_add(millis(target.claim_for));
    let capped = live.max_running.iter().any(|m| m.target == target.name);
    if !capped
        && let Some(claimed) = store
            .claim_in_intake(&target.name, owner, limit, claim_until)
            .await
    {
        let built = messages(store, target, claimed?, live, now).await?;
        return Ok(("intake_backlog", built));
    }
    crate::metrics::metrics()
        .dispatch_claim_passes
        .get_or_create(&crate::metrics::ClaimPassLabels {
            target: target.name.clone(),
            wake,
        })
        .inc();
    let claimed = store
        .claim_push(
            &target.name,
            owner,
            limit as u64,
            now,
            claim_until,
            &live.max_running,
        )
        .await?;
    let built = messages(store, target, claimed, live, now).await?;
    Ok(("dispatcher", built))
}

/// Builds the messages of claimed dispatches, each in the trace of its run (with tracing on,
/// the message names its attempt's span).
async fn messages(
    store: &Store,
    target: &PushTarget,
    mut claimed: Vec<ClaimedRun>,
    live: &Live,
    now: Millis,
) -> anyhow::Result<Vec<(ClaimedRun, Vec<u8>, DispatchSpan)>> {
    // The principal is checked again against the revision in force, before any worker sees
    // the run: one whose principal was suspended meanwhile ends here, `authority_revoked`.
    let mut allowed = Vec::with_capacity(claimed.len());
    for run in claimed.drain(..) {
        if !crate::authority::revoke_if_refused(store, &live.authority, &run.run, now).await? {
            allowed.push(run);
        }
    }
    let claimed = allowed;
    let refs: Vec<&ClaimedRun> = claimed.iter().collect();
    let events = message::events_of(store, &refs).await?;
    let mut resumes = crate::dispatcher::resumes::resumes_of(store, &refs).await?;
    Ok(claimed
        .into_iter()
        .filter_map(|claimed| {
            // Cloned, not taken: a run's start and resumes share its event.
            let Some(routed) = events.get(&claimed.run.intake_id).cloned() else {
                tracing::error!(run_id = %claimed.run.id, intake_id = %claimed.run.intake_id, "a routed run has no ledger event; it stays pending");
                return None;
            };
            let trace = DispatchSpan::start(&claimed.run, &target.name, claimed.dispatch.attempts);
            let resume = resumes.remove(&claimed.dispatch.id);
            let body = message::run_start(&claimed, routed, resume, now, &trace, &live.authority)
                .to_json();
            Some((claimed, body, trace))
        })
        .collect())
}

/// One attempt, and what it means for the dispatch.
async fn deliver(
    target: &PushTarget,
    claimed: ClaimedRun,
    body: Vec<u8>,
    trace: DispatchSpan,
    owner: String,
) -> Recorded {
    let started_at = now_millis();
    let attempt = target
        .transport
        .deliver(Outbound {
            id: &claimed.dispatch.id,
            tenant_id: &claimed.run.tenant_id,
            workflow_id: &claimed.run.workflow_id,
            body: &body,
            traceparent: trace.traceparent.as_deref(),
            tracestate: trace.tracestate.as_deref(),
        })
        .await;
    let failed_attempts = u32::try_from(claimed.dispatch.attempts).unwrap_or(u32::MAX);
    let (verdict, result) = match &attempt.result {
        AttemptResult::Delivered => (Verdict::Delivered, "delivered".to_owned()),
        AttemptResult::Retry(_) if failed_attempts >= budgeted_attempts(&claimed.run) => (
            Verdict::DeadLetter {
                reason: "max_attempts",
            },
            "retry".to_owned(),
        ),
        AttemptResult::Retry(hint) => {
            match target.schedule.next_delay(failed_attempts, hint, jitter()) {
                Some(delay) => (
                    Verdict::Retry {
                        next_due: now_millis().saturating_add(millis(delay)),
                    },
                    "retry".to_owned(),
                ),
                None => (
                    Verdict::DeadLetter {
                        reason: "max_attempts",
                    },
                    "retry".to_owned(),
                ),
            }
        }
        AttemptResult::Rejected(rejection) => (
            Verdict::DeadLetter {
                reason: rejection.as_str(),
            },
            rejection.as_str().to_owned(),
        ),
    };
    // A delivery is routine (its run history keeps it); a failure is news, a dead letter a warning.
    macro_rules! log_attempt {
        ($level:ident) => {
            tracing::event!(
                tracing::Level::$level,
                run_id = %claimed.run.id,
                dispatch_id = %claimed.dispatch.id,
                target = %target.name,
                attempt = claimed.dispatch.attempts,
                result = %result,
                status = attempt.status,
                error = attempt.error.as_deref(),
                "dispatch attempt"
            )
        };
    }
    match verdict {
        Verdict::Delivered => log_attempt!(DEBUG),
        Verdict::Retry { .. } => log_attempt!(INFO),
        Verdict::DeadLetter { .. } => log_attempt!(WARN),
    }
    trace.finish(&result, attempt.status);
    Recorded {
        claimed,
        owner,
        verdict,
        result,
        status_code: attempt.status.map(i32::from),
        response: attempt.response_excerpt,
        error: attempt.error,
        started_at,
        duration_ms: millis(attempt.duration),
    }
}

/// Records finished attempts in batches gathered for up to [`GATHER`]: deliveries and retries
/// in the intake writer's next transaction where the database has one writer that carries
/// them (`Store::record_in_intake`), the rest in a transaction of their own, retried while the
/// store is down (a claim that lapses meanwhile is delivered again).
async fn record_all(
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
            metrics.run_finished("dead_lettered");
        }
        let delivered = recorded.verdict == Verdict::Delivered;
        let gone = recorded.result == "target_gone";
        let error = recorded
            .error
            .clone()
            .or_else(|| recorded.status_code.map(|code| format!("HTTP {code}")));
        healths.record(target, delivered, gone, error);
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

/// The run's `max_attempts` budget (no bound for runs that recorded none).
fn budgeted_attempts(run: &switchyard_store::entities::run::Model) -> u32 {
    crate::bounds::budgets_of(run)
        .get(crate::config::MAX_ATTEMPTS)
        .and_then(serde_json::Value::as_u64)
        .map_or(u32::MAX, |n| u32::try_from(n).unwrap_or(u32::MAX))
}

fn millis(duration: Duration) -> Millis {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX / 4)
}

#[cfg(test)]
mod tests {
    use switchyard_store::outbox::Verdict;
    use tokio::sync::mpsc;

    use switchyard_store::entities::dispatch::{self, DispatchStatus};
    use switchyard_store::entities::run::{self, RunStatus};
    use switchyard_store::outbox::{ClaimedRun, Recorded};

    use super::{CLAIM_BATCH, gather};

    /// A finished attempt of run `n` (dispatch id `dispatch-{n}`).
    fn attempt(n: usize, verdict: Verdict) -> Recorded {
        let run = run::Model {
            id: format!("run-{n}"),
            tenant_id: "acme".into(),
            workflow_id: "triage".into(),
            target_entity_id: format!("ticket-{n}"),
            intake_id: format!("intake-{n}"),
            status: RunStatus::Queued,
            fencing_token: 1,
            lock_ttl_ms: 60_000,
            created_at: 0,
            updated_at: 0,
            finished_at: None,
            traceparent: None,
            tracestate: None,
            config_revision: None,
            principal_id: None,
            deadline_at: None,
            budgets: None,
            run_usage: None,
            end_reason: None,
            worker_version: None,
            subject_version: None,
        };
        let dispatch = dispatch::Model {
            id: format!("dispatch-{n}"),
            run_id: run.id.clone(),
            tenant_id: "acme".into(),
            workflow_id: "triage".into(),
            target: "worker".into(),
            status: DispatchStatus::Pending,
            attempts: 1,
            series: 1,
            due_at: 0,
            claimed_by: Some("replica".into()),
            claim_token: None,
            reason: None,
            last_error: None,
            created_at: 0,
            updated_at: 0,
            delivered_at: None,
            wait_id: None,
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
