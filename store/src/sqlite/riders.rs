//! Outbox work that rides in the SQLite intake writer's transaction: claims of a push target's
//! due dispatches and the attempts the dispatcher finished. On SQLite a write transaction of the
//! dispatcher's own waited for the one write lock in turn with intake's, and intake waited for
//! it in turn; carried by the writer, they cost no turn of their own.
//!
//! Invariant: a rider is answered once: with what its transaction did after that transaction
//! committed, or given back (the caller then does the work itself) when it did not; a rider the
//! writer did not take within [`TAKE_WITHIN`] is withdrawn by its caller. Claims are applied
//! before the batch's own steps, so the backlog's oldest rows take slots before new runs.

use std::sync::Mutex;
use std::time::Duration;

use rusqlite::Transaction;
use tokio::sync::{Notify, oneshot};

use super::outbox::writer;
use crate::Millis;
use crate::outbox::{ClaimedRun, Recorded, Verdict};

/// How long a caller waits for the writer to take its rider before doing the work itself (a
/// writer that is up takes it at its next batch, or at once when idle: a rider wakes it).
pub(crate) const TAKE_WITHIN: Duration = Duration::from_millis(200);

/// What the caller of a record rider hears: how many attempts still held their claim, or why
/// nothing was recorded, with the attempts given back.
type RecordAnswer = Result<usize, (String, Vec<Recorded>)>;
/// What the caller of a claim rider hears: the dispatches claimed, with their runs, or why not.
type ClaimAnswer = Result<Vec<ClaimedRun>, String>;

#[derive(Debug)]
struct RecordRider {
    id: u64,
    attempts: Vec<Recorded>,
    answer: oneshot::Sender<RecordAnswer>,
}

/// A push target's due dispatches to claim for `owner`, at most `limit`, until `claim_until`.
#[derive(Debug)]
pub(crate) struct ClaimRequest {
    pub target: String,
    pub owner: String,
    pub limit: usize,
    pub claim_until: Millis,
}

#[derive(Debug)]
struct ClaimRider {
    id: u64,
    request: ClaimRequest,
    answer: oneshot::Sender<ClaimAnswer>,
}

#[derive(Debug, Default)]
struct State {
    /// Whether the writer thread runs and takes riders.
    open: bool,
    next_id: u64,
    records: Vec<RecordRider>,
    claims: Vec<ClaimRider>,
}

/// Shared by callers (offer, withdraw) and the writer thread (open, take, close).
#[derive(Debug, Default)]
pub(crate) struct Riders {
    state: Mutex<State>,
    /// Something was offered (wakes an idle writer).
    wake: Notify,
}

impl Riders {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn open(&self) {
        self.state().open = true;
    }

    /// The writer stopped: riders left waiting are dropped, so their callers do the work.
    pub fn close(&self) {
        let mut state = self.state();
        state.open = false;
        state.records.clear();
        state.claims.clear();
    }

    pub async fn woken(&self) {
        self.wake.notified().await;
    }

    /// Everything offered so far (the writer, at the start of a transaction).
    pub fn take(&self) -> Taken {
        let mut state = self.state();
        Taken {
            records: std::mem::take(&mut state.records),
            claims: std::mem::take(&mut state.claims),
        }
    }

    /// Offers a rider: `offer` adds it under the lock with its id and answer channel (or
    /// refuses at once, giving back what it carries), the writer is woken, and the answer is
    /// awaited. A rider the writer did not take within [`TAKE_WITHIN`] is withdrawn (`withdraw`
    /// removes it by id and gives back what it carried), unless the writer took it meanwhile.
    async fn ride<A, B>(
        &self,
        offer: impl FnOnce(&mut State, u64, oneshot::Sender<A>) -> Result<(), B>,
        withdraw: impl FnOnce(&mut State, u64) -> Option<B>,
    ) -> Result<Result<A, oneshot::error::RecvError>, B> {
        let (id, mut answer) = {
            let mut state = self.state();
            state.next_id += 1;
            let id = state.next_id;
            let (tx, rx) = oneshot::channel();
            offer(&mut state, id, tx)?;
            (id, rx)
        };
        self.wake.notify_one();
        match tokio::time::timeout(TAKE_WITHIN, &mut answer).await {
            Ok(answered) => Ok(answered),
            Err(_) => {
                let withdrawn = withdraw(&mut self.state(), id);
                match withdrawn {
                    Some(back) => Err(back),
                    None => Ok(answer.await),
                }
            }
        }
    }

    /// Records `attempts` in the writer's next transaction; gives them back when no writer
    /// takes riders, one is a dead letter (those release leases: recorded by the caller), or
    /// the writer did not take them in time or could not record them.
    pub async fn record(&self, attempts: Vec<Recorded>) -> Result<usize, Vec<Recorded>> {
        let answered = self
            .ride(
                |state, id, answer| {
                    if !state.open
                        || attempts.is_empty()
                        || attempts
                            .iter()
                            .any(|a| matches!(a.verdict, Verdict::DeadLetter { .. }))
                    {
                        return Err(attempts);
                    }
                    state.records.push(RecordRider {
                        id,
                        attempts,
                        answer,
                    });
                    Ok(())
                },
                |state, id| {
                    let at = state.records.iter().position(|r| r.id == id)?;
                    Some(state.records.remove(at).attempts)
                },
            )
            .await?;
        match answered {
            Ok(Ok(applied)) => Ok(applied),
            Ok(Err((why, back))) => {
                tracing::debug!(
                    why,
                    size = back.len(),
                    "the intake writer did not record these attempts; recording them elsewhere"
                );
                Err(back)
            }
            Err(_) => {
                tracing::warn!(
                    "the intake writer stopped holding attempts to record; their claims lapse and they are sent again"
                );
                Ok(0)
            }
        }
    }

    /// Claims in the writer's next transaction; `None` when no writer takes riders (or it did
    /// not take this one in time).
    pub async fn claim(&self, request: ClaimRequest) -> Option<ClaimAnswer> {
        let answered = self
            .ride(
                |state, id, answer| {
                    if !state.open || request.limit == 0 {
                        return Err(());
                    }
                    state.claims.push(ClaimRider {
                        id,
                        request,
                        answer,
                    });
                    Ok(())
                },
                |state, id| {
                    let at = state.claims.iter().position(|c| c.id == id)?;
                    state.claims.remove(at);
                    Some(())
                },
            )
            .await
            .ok()?;
        // A writer that dropped the rider mid-transaction: nothing was claimed for sure.
        Some(answered.unwrap_or_else(|_| Err("the intake writer stopped".into())))
    }
}

/// The riders one transaction carries.
#[derive(Debug, Default)]
pub(crate) struct Taken {
    records: Vec<RecordRider>,
    claims: Vec<ClaimRider>,
}

/// What a transaction did for its riders: per claim rider what it claimed, per attempt
/// whether it still held its claim.
#[derive(Debug)]
pub(crate) struct Carried {
    claimed: Vec<Vec<ClaimedRun>>,
    held: Vec<bool>,
}

impl Taken {
    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.claims.is_empty()
    }

    /// Claims, then records, in `txn`. May run again in a retried transaction.
    pub fn apply(&self, txn: &Transaction<'_>, now: Millis) -> rusqlite::Result<Carried> {
        let mut claimed = Vec::with_capacity(self.claims.len());
        for rider in &self.claims {
            let request = &rider.request;
            claimed.push(writer::claim_push(
                txn,
                &request.target,
                &request.owner,
                request.limit,
                now,
                request.claim_until,
            )?);
        }
        let attempts: Vec<Recorded> = self
            .records
            .iter()
            .flat_map(|r| r.attempts.iter().cloned())
            .collect();
        let held = writer::record(txn, &attempts, now)?;
        Ok(Carried { claimed, held })
    }

    /// After the commit.
    pub fn answer(mut self, carried: Carried) {
        for (rider, claimed) in std::mem::take(&mut self.claims)
            .into_iter()
            .zip(carried.claimed)
        {
            let _ = rider.answer.send(Ok(claimed));
        }
        let mut from = 0;
        for rider in std::mem::take(&mut self.records) {
            let n = rider.attempts.len();
            let applied = carried
                .held
                .get(from..from + n)
                .map_or(0, |h| h.iter().filter(|&&h| h).count());
            from += n;
            let _ = rider.answer.send(Ok(applied));
        }
    }

    /// Nothing was done: each rider goes back to its caller.
    pub fn failed(mut self, why: &str) {
        self.give_back(why);
    }

    fn give_back(&mut self, why: &str) {
        for rider in std::mem::take(&mut self.claims) {
            let _ = rider.answer.send(Err(why.to_owned()));
        }
        for rider in std::mem::take(&mut self.records) {
            let _ = rider.answer.send(Err((why.to_owned(), rider.attempts)));
        }
    }
}

impl Drop for Taken {
    /// Riders dropped unanswered (the writer panicked) go back to their callers too.
    fn drop(&mut self) {
        self.give_back("the intake writer panicked on the transaction that carried them");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entities::{dispatch, run};

    const NOW: Millis = 1_700_000_000_000;

    fn attempt(id: &str, verdict: Verdict) -> Recorded {
        Recorded {
            claimed: ClaimedRun {
                dispatch: dispatch::Model {
                    id: id.into(),
                    run_id: format!("run-{id}"),
                    tenant_id: "acme".into(),
                    workflow_id: "triage".into(),
                    target: "worker".into(),
                    attempts: 1,
                    series: 1,
                    due_at: NOW,
                    claimed_by: Some("replica-a".into()),
                    created_at: NOW,
                    updated_at: NOW,
                    ..dispatch::Model::default()
                },
                run: run::Model {
                    id: format!("run-{id}"),
                    tenant_id: "acme".into(),
                    workflow_id: "triage".into(),
                    target_entity_id: "ticket-1".into(),
                    intake_id: "intake-1".into(),
                    fencing_token: 1,
                    lock_ttl_ms: 60_000,
                    created_at: NOW,
                    updated_at: NOW,
                    ..run::Model::default()
                },
                lease_expires_at: NOW + 60_000,
            },
            owner: "replica-a".into(),
            verdict,
            result: "delivered".into(),
            status_code: Some(200),
            response: None,
            error: None,
            started_at: NOW,
            duration_ms: 5,
        }
    }

    fn request(limit: usize) -> ClaimRequest {
        ClaimRequest {
            target: "worker".into(),
            owner: "replica-a".into(),
            limit,
            claim_until: NOW + 30_000,
        }
    }

    #[tokio::test]
    async fn without_a_writer_every_rider_goes_back_at_once() {
        let riders = Riders::default();
        let back = riders
            .record(vec![attempt("d1", Verdict::Delivered)])
            .await
            .expect_err("no writer takes riders");
        assert_eq!(back.len(), 1);
        assert!(riders.claim(request(4)).await.is_none());
    }

    #[tokio::test]
    async fn dead_letters_and_empty_claims_are_never_carried() {
        let riders = Riders::default();
        riders.open();
        let back = riders
            .record(vec![
                attempt("d1", Verdict::Delivered),
                attempt(
                    "d2",
                    Verdict::DeadLetter {
                        reason: "max_attempts",
                    },
                ),
            ])
            .await
            .expect_err("a dead letter releases leases: its caller records it");
        assert_eq!(back.len(), 2);
        assert!(riders.claim(request(0)).await.is_none());
        assert!(riders.take().is_empty(), "nothing was left offered");
    }

    #[tokio::test(start_paused = true)]
    async fn a_rider_not_taken_in_time_is_withdrawn_and_not_carried_later() {
        let riders = Riders::default();
        riders.open();
        let back = riders
            .record(vec![attempt("d1", Verdict::Delivered)])
            .await
            .expect_err("nobody took it");
        assert_eq!(back[0].claimed.dispatch.id, "d1");
        assert!(riders.claim(request(4)).await.is_none());
        assert!(
            riders.take().is_empty(),
            "a withdrawn rider must not also be carried by the next transaction"
        );
    }

    #[tokio::test]
    async fn a_transaction_answers_each_rider_with_its_own_share() {
        let riders = std::sync::Arc::new(Riders::default());
        riders.open();
        let first = tokio::spawn({
            let riders = riders.clone();
            async move {
                riders
                    .record(vec![
                        attempt("d1", Verdict::Delivered),
                        attempt("d2", Verdict::Delivered),
                    ])
                    .await
            }
        });
        let second = tokio::spawn({
            let riders = riders.clone();
            async move { riders.record(vec![attempt("d3", Verdict::Delivered)]).await }
        });
        let claim = tokio::spawn({
            let riders = riders.clone();
            async move { riders.claim(request(2)).await }
        });
        // The writer takes what was offered once all three are waiting.
        let taken = loop {
            tokio::task::yield_now().await;
            let state = riders.state();
            if state.records.len() == 2 && state.claims.len() == 1 {
                drop(state);
                break riders.take();
            }
        };
        let mut held = Vec::new();
        for rider in &taken.records {
            for a in &rider.attempts {
                // d2 lost its claim meanwhile; d1 and d3 held theirs.
                held.push(a.claimed.dispatch.id != "d2");
            }
        }
        taken.answer(Carried {
            claimed: vec![vec![attempt("d9", Verdict::Delivered).claimed]],
            held,
        });
        assert_eq!(first.await.expect("joined").ok(), Some(1));
        assert_eq!(second.await.expect("joined").ok(), Some(1));
        let claimed = claim
            .await
            .expect("joined")
            .expect("taken")
            .expect("claimed");
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].dispatch.id, "d9");
    }

    #[tokio::test]
    async fn riders_of_a_failed_or_dropped_transaction_go_back_to_their_callers() {
        for fail in [true, false] {
            let riders = std::sync::Arc::new(Riders::default());
            riders.open();
            let record = tokio::spawn({
                let riders = riders.clone();
                async move { riders.record(vec![attempt("d1", Verdict::Delivered)]).await }
            });
            let claim = tokio::spawn({
                let riders = riders.clone();
                async move { riders.claim(request(1)).await }
            });
            let taken = loop {
                tokio::task::yield_now().await;
                let state = riders.state();
                if state.records.len() == 1 && state.claims.len() == 1 {
                    drop(state);
                    break riders.take();
                }
            };
            if fail {
                taken.failed("database is locked");
            } else {
                drop(taken);
            }
            let back = record.await.expect("joined").expect_err("given back");
            assert_eq!(
                back.len(),
                1,
                "the attempt comes back to be recorded elsewhere"
            );
            assert!(matches!(claim.await.expect("joined"), Some(Err(_))));
        }
    }
}
