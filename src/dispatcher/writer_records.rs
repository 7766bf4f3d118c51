//! Delivered and failed (to be retried) attempts offered to the SQLite intake writer, which records them in its next
//! batch transaction: on SQLite a record transaction of the dispatcher's own waited for the one
//! write lock in turn with intake's, and intake waited for it in turn (pre-claims, the same
//! idea for claims, are in [`super::preclaim`]).
//!
//! Invariant: an offer is recorded once, by the writer or by the dispatcher's recorder. The
//! writer answers every offer it took: recorded, or not, with its attempts given back (a failed
//! transaction, a panic) for the recorder to record itself; an offer the writer did not take
//! within [`TAKE_WITHIN`] is withdrawn and recorded by the recorder. Only a writer thread that
//! dies loses what it held: those claims lapse and their runs are delivered again, same id.

use std::sync::Mutex;
use std::time::Duration;

use switchyard_store::outbox::{Recorded, Verdict};
use tokio::sync::{Notify, oneshot};

/// How long the recorder waits for the writer to take an offer before recording it itself (a
/// writer that is up takes it at its next batch, or at once when idle: an offer wakes it).
pub const TAKE_WITHIN: Duration = Duration::from_millis(200);

/// The writer's answer to an offer: how many attempts still held their claim, or why nothing
/// was recorded, with the attempts given back.
pub type Answer = Result<usize, (String, Vec<Recorded>)>;

#[derive(Debug)]
struct Offer {
    id: u64,
    attempts: Vec<Recorded>,
    answer: oneshot::Sender<Answer>,
}

#[derive(Debug, Default)]
struct State {
    /// Whether a SQLite intake writer takes offers (none runs on PostgreSQL or MySQL).
    open: bool,
    next_id: u64,
    offers: Vec<Offer>,
}

/// Shared by the recorder (offer, withdraw) and the SQLite intake writer (open, take, close).
#[derive(Debug, Default)]
pub struct Inbox {
    state: Mutex<State>,
    /// Something was offered, or backlog rows are wanted (wakes an idle writer).
    wake_writer: Notify,
}

/// An offer waiting for the writer.
#[derive(Debug)]
pub struct Offered {
    id: u64,
    pub answer: oneshot::Receiver<Answer>,
}

/// What the writer took from the inbox: attempts to record in its transaction, then answer.
#[derive(Debug, Default)]
pub struct Taken {
    attempts: Vec<Recorded>,
    /// Each offer's answer channel, with how many of `attempts` it holds.
    answers: Vec<(oneshot::Sender<Answer>, usize)>,
}

impl Inbox {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a SQLite intake writer is running: it takes offers, and claims backlog rows
    /// when asked (`PreClaims::want_backlog`).
    pub fn is_open(&self) -> bool {
        self.state().open
    }

    /// A SQLite intake writer is running and takes offers.
    pub fn open(&self) {
        self.state().open = true;
    }

    /// The writer stopped: offers left waiting are answered (dropped) so their recorder records
    /// them itself.
    pub fn close(&self) {
        let mut state = self.state();
        state.open = false;
        state.offers.clear();
    }

    /// Offers `attempts` to the writer, or gives them back if no writer takes offers (or one
    /// of them is a dead letter: the writer records deliveries and retries only).
    pub fn offer(&self, attempts: Vec<Recorded>) -> Result<Offered, Vec<Recorded>> {
        let mut state = self.state();
        if !state.open
            || attempts.is_empty()
            || attempts
                .iter()
                .any(|a| matches!(a.verdict, Verdict::DeadLetter { .. }))
        {
            return Err(attempts);
        }
        state.next_id += 1;
        let id = state.next_id;
        let (answer, answered) = oneshot::channel();
        state.offers.push(Offer {
            id,
            attempts,
            answer,
        });
        drop(state);
        self.wake_writer();
        Ok(Offered {
            id,
            answer: answered,
        })
    }

    /// Takes an offer back if the writer has not taken it yet.
    pub fn withdraw(&self, offered: &Offered) -> Option<Vec<Recorded>> {
        let mut state = self.state();
        let at = state.offers.iter().position(|o| o.id == offered.id)?;
        Some(state.offers.remove(at).attempts)
    }

    /// Wakes the writer (if idle) to look at the inbox and for backlog rows wanted.
    pub fn wake_writer(&self) {
        self.wake_writer.notify_one();
    }

    /// Completes when the writer was woken since it last waited.
    pub async fn woken(&self) {
        self.wake_writer.notified().await;
    }

    /// Everything offered so far (the writer, at the start of a batch).
    pub fn take(&self) -> Taken {
        let offers = {
            let mut state = self.state();
            if state.offers.is_empty() {
                return Taken::default();
            }
            std::mem::take(&mut state.offers)
        };
        let mut taken = Taken {
            attempts: Vec::new(),
            answers: Vec::with_capacity(offers.len()),
        };
        for offer in offers {
            taken.answers.push((offer.answer, offer.attempts.len()));
            taken.attempts.extend(offer.attempts);
        }
        taken
    }
}

impl Taken {
    pub fn attempts(&self) -> &[Recorded] {
        &self.attempts
    }

    /// After the commit that recorded them; `held` says, per attempt, whether it still held
    /// its claim.
    pub fn recorded(self, held: &[bool]) {
        let mut from = 0;
        for (answer, n) in self.answers {
            let applied = held
                .get(from..from + n)
                .map_or(0, |h| h.iter().filter(|&&h| h).count());
            from += n;
            let _ = answer.send(Ok(applied));
        }
    }

    /// Nothing was recorded: each offer's attempts go back to its recorder.
    pub fn failed(self, why: &str) {
        let mut attempts = self.attempts.into_iter();
        for (answer, n) in self.answers {
            let back = attempts.by_ref().take(n).collect();
            let _ = answer.send(Err((why.to_owned(), back)));
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use switchyard_store::entities::dispatch::{self, DispatchStatus};
    use switchyard_store::entities::run::{self, RunStatus};
    use switchyard_store::outbox::{ClaimedRun, Recorded, Verdict};

    use super::Inbox;

    /// A finished attempt of run `n` (dispatch id `dispatch-{n}`).
    pub(in crate::dispatcher) fn attempt(n: usize, verdict: Verdict) -> Recorded {
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

    pub(in crate::dispatcher) fn ids(attempts: &[Recorded]) -> Vec<&str> {
        attempts
            .iter()
            .map(|a| a.claimed.dispatch.id.as_str())
            .collect()
    }

    #[test]
    fn without_a_writer_or_with_a_failure_in_them_offers_come_back() {
        let inbox = Inbox::default();
        let back = inbox
            .offer(vec![attempt(1, Verdict::Delivered)])
            .unwrap_err();
        assert_eq!(ids(&back), ["dispatch-1"]);
        inbox.open();
        let dead = Verdict::DeadLetter {
            reason: "max_attempts",
        };
        let back = inbox
            .offer(vec![attempt(1, Verdict::Delivered), attempt(2, dead)])
            .unwrap_err();
        assert_eq!(ids(&back), ["dispatch-1", "dispatch-2"], "no dead letters");
        inbox.close();
        assert!(inbox.offer(vec![attempt(3, Verdict::Delivered)]).is_err());
    }

    #[test]
    fn the_writer_answers_each_offer_with_its_own_count_or_its_own_attempts() {
        let inbox = Inbox::default();
        inbox.open();
        let mut first = inbox
            .offer(vec![
                attempt(1, Verdict::Delivered),
                attempt(2, Verdict::Delivered),
            ])
            .unwrap();
        let mut second = inbox.offer(vec![attempt(3, Verdict::Delivered)]).unwrap();
        let taken = inbox.take();
        assert_eq!(
            ids(taken.attempts()),
            ["dispatch-1", "dispatch-2", "dispatch-3"]
        );
        assert!(inbox.withdraw(&first).is_none(), "taken offers stay taken");
        taken.recorded(&[true, false, true]);
        assert_eq!(first.answer.try_recv().unwrap().ok(), Some(1));
        assert_eq!(second.answer.try_recv().unwrap().ok(), Some(1));

        let mut first = inbox.offer(vec![attempt(4, Verdict::Delivered)]).unwrap();
        let mut second = inbox
            .offer(vec![
                attempt(5, Verdict::Delivered),
                attempt(6, Verdict::Delivered),
            ])
            .unwrap();
        inbox.take().failed("rolled back");
        let (why, back) = first.answer.try_recv().unwrap().unwrap_err();
        assert_eq!(
            (why.as_str(), ids(&back)),
            ("rolled back", vec!["dispatch-4"])
        );
        let (_, back) = second.answer.try_recv().unwrap().unwrap_err();
        assert_eq!(ids(&back), ["dispatch-5", "dispatch-6"]);
    }

    #[test]
    fn an_offer_not_taken_yet_is_withdrawn_whole() {
        let inbox = Inbox::default();
        inbox.open();
        let offered = inbox.offer(vec![attempt(1, Verdict::Delivered)]).unwrap();
        let kept = inbox.offer(vec![attempt(2, Verdict::Delivered)]).unwrap();
        assert_eq!(ids(&inbox.withdraw(&offered).unwrap()), ["dispatch-1"]);
        assert!(inbox.withdraw(&offered).is_none());
        assert_eq!(ids(inbox.take().attempts()), ["dispatch-2"]);
        drop(kept);
    }
}
