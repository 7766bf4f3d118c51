//! Records: what a delivery, a retry and a dead letter change, and that a record of a claim
//! that is no longer the caller's changes nothing but its attempt row.

use switchyard_store::entities::dispatch::DispatchStatus;
use switchyard_store::entities::run::RunStatus;
use switchyard_store::outbox::{ClaimedRun, Verdict};

use super::fixtures::*;
use crate::harness::TestStore;

/// Claims the due rows of [`HOOK`] for `owner` until `until`.
async fn claim(
    store: &switchyard_store::Store,
    owner: &str,
    now: i64,
    until: i64,
) -> Vec<ClaimedRun> {
    store
        .claim_push(HOOK, owner, 10, now, until, &[])
        .await
        .expect("claim")
}

#[tokio::test]
async fn a_delivery_dispatches_the_run_with_its_history() {
    for test in TestStore::all().await {
        let store = &test.store;
        let now = start();
        let r = routed(store, 1, WORKFLOW, HOOK, now).await;
        let claimed = claim(store, "replica-a", now, now + 30_000).await;
        let held = store
            .record_attempts(
                &[attempt(
                    &claimed[0],
                    "replica-a",
                    Verdict::Delivered,
                    now + 5,
                )],
                now + 10,
            )
            .await
            .expect("record");
        assert_eq!(held, [true]);
        let row = dispatch_of(store, &r.dispatch.id).await;
        assert_eq!(row.status, DispatchStatus::Delivered);
        assert_eq!((row.claimed_by, row.delivered_at), (None, Some(now + 10)));
        let run = run_of(store, &r.run.id).await;
        assert_eq!(
            (run.status, run.updated_at),
            (RunStatus::Dispatched, now + 10)
        );
        let history = history_rows(store, &r.run.id).await;
        assert_eq!(history.len(), 1);
        assert_eq!(
            (history[0].cause.as_str(), history[0].status),
            ("delivered", RunStatus::Dispatched)
        );
        assert_eq!(
            history[0].detail.as_deref(),
            Some("attempt 1 of series 1: delivered (HTTP 204)")
        );
        let attempts = attempts_of(store, &r.dispatch.id).await;
        assert_eq!(attempts.len(), 1);
        assert_eq!(
            (attempts[0].attempt, attempts[0].result.as_str()),
            (1, "delivered")
        );
        // Nothing left to claim.
        assert!(
            claim(store, "replica-a", now + 60_000, now + 90_000)
                .await
                .is_empty()
        );
    }
}

#[tokio::test]
async fn a_retry_is_due_at_next_due_with_its_claim_given_up() {
    for test in TestStore::all().await {
        let store = &test.store;
        let now = start();
        let r = routed(store, 1, WORKFLOW, HOOK, now).await;
        let claimed = claim(store, "replica-a", now, now + 30_000).await;
        let next_due = now + 2_000;
        let retry = attempt(
            &claimed[0],
            "replica-a",
            Verdict::Retry { next_due },
            now + 5,
        );
        assert_eq!(
            store
                .record_attempts(&[retry], now + 10)
                .await
                .expect("record"),
            [true]
        );
        let row = dispatch_of(store, &r.dispatch.id).await;
        assert_eq!(
            (row.status, row.due_at, row.claimed_by),
            (DispatchStatus::Pending, next_due, None)
        );
        assert_eq!(
            row.last_error.as_deref(),
            Some("attempt 1 of series 1: retry (HTTP 503): unavailable")
        );
        assert_eq!(run_of(store, &r.run.id).await.status, RunStatus::Queued);
        assert_eq!(
            history_of(store, &r.run.id).await,
            causes(&[("attempt_failed", RunStatus::Queued)])
        );
        assert!(
            claim(store, "replica-b", next_due - 1, next_due + 30_000)
                .await
                .is_empty()
        );
        let again = claim(store, "replica-b", next_due, next_due + 30_000).await;
        assert_eq!(again.len(), 1, "{:?}: due again at next_due", test.backend);
        assert_eq!(again[0].dispatch.attempts, 2);
    }
}

#[tokio::test]
async fn a_dead_letter_ends_the_run_and_releases_its_lease() {
    for test in TestStore::all().await {
        let store = &test.store;
        let now = start();
        let r = routed(store, 1, WORKFLOW, HOOK, now).await;
        let claimed = claim(store, "replica-a", now, now + 30_000).await;
        let dead = attempt(
            &claimed[0],
            "replica-a",
            Verdict::DeadLetter {
                reason: "target_gone",
            },
            now + 5,
        );
        assert_eq!(
            store
                .record_attempts(&[dead], now + 10)
                .await
                .expect("record"),
            [true]
        );
        let row = dispatch_of(store, &r.dispatch.id).await;
        assert_eq!(row.status, DispatchStatus::DeadLettered);
        assert_eq!(
            (row.reason.as_deref(), row.claimed_by),
            (Some("target_gone"), None)
        );
        let run = run_of(store, &r.run.id).await;
        assert_eq!(
            (run.status, run.finished_at),
            (RunStatus::DeadLettered, Some(now + 10))
        );
        let lease = lease_of(store, &r.run).await;
        assert_eq!(
            (lease.run_id, lease.expires_at, lease.fencing_token),
            (None, now + 10, 1)
        );
        let history = history_rows(store, &r.run.id).await;
        assert_eq!(history.len(), 1);
        assert_eq!(history[0].status, RunStatus::DeadLettered);
        assert_eq!(
            history[0].detail.as_deref(),
            Some("target_gone: attempt 1 of series 1: target_gone (HTTP 410)")
        );
    }
}

#[tokio::test]
async fn a_record_of_a_claim_that_is_no_longer_the_callers_changes_nothing_but_its_attempt_row() {
    for test in TestStore::all().await {
        let store = &test.store;
        let now = start();
        let r = routed(store, 1, WORKFLOW, HOOK, now).await;
        let late = claim(store, "replica-a", now, now + 100).await;
        // replica-a's claim lapses; replica-b claims it again.
        let current = claim(store, "replica-b", now + 100, now + 30_000).await;
        assert_eq!(current[0].dispatch.attempts, 2);
        for verdict in [
            Verdict::Delivered,
            Verdict::Retry {
                next_due: now + 500,
            },
            Verdict::DeadLetter {
                reason: "rejected_4xx",
            },
        ] {
            let stale = attempt(&late[0], "replica-a", verdict, now + 150);
            assert_eq!(
                store
                    .record_attempts(&[stale], now + 200)
                    .await
                    .expect("record"),
                [false]
            );
        }
        let row = dispatch_of(store, &r.dispatch.id).await;
        assert_eq!((row.status, row.attempts), (DispatchStatus::Pending, 2));
        assert_eq!(
            (row.claimed_by.as_deref(), row.due_at),
            (Some("replica-b"), now + 30_000)
        );
        assert_eq!(
            (row.last_error, row.reason, row.delivered_at),
            (None, None, None)
        );
        let run = run_of(store, &r.run.id).await;
        assert_eq!(run, r.run, "{:?}: the run is untouched", test.backend);
        assert_eq!(
            lease_of(store, &r.run).await.run_id.as_deref(),
            Some(r.run.id.as_str())
        );
        assert!(history_of(store, &r.run.id).await.is_empty());
        let attempts = attempts_of(store, &r.dispatch.id).await;
        assert_eq!(attempts.len(), 3, "each attempt is recorded");
        assert!(attempts.iter().all(|a| a.attempt == 1));
        // replica-b's own record still applies.
        let mine = attempt(&current[0], "replica-b", Verdict::Delivered, now + 300);
        assert_eq!(
            store
                .record_attempts(&[mine], now + 300)
                .await
                .expect("record"),
            [true]
        );
    }
}

#[tokio::test]
async fn a_batch_applies_each_record_only_to_claims_still_held() {
    for test in TestStore::all().await {
        let store = &test.store;
        let now = start();
        let routed = many(store, 0..6, HOOK, now).await;
        let claimed = claim(store, "replica-a", now, now + 100).await;
        assert_eq!(claimed.len(), 6);
        // The claim on the third lapsed and replica-b took it.
        let taken = claimed[2].clone();
        set_claim(store, &taken.dispatch.id, "replica-b", 2).await;
        let verdicts = [
            Verdict::Delivered,
            Verdict::Delivered,
            Verdict::Delivered,
            Verdict::Delivered,
            Verdict::Retry {
                next_due: now + 1_000,
            },
            Verdict::DeadLetter {
                reason: "max_attempts",
            },
        ];
        let batch: Vec<_> = claimed
            .iter()
            .zip(verdicts)
            .map(|(c, verdict)| attempt(c, "replica-a", verdict, now + 5))
            .collect();
        let held = store
            .record_attempts(&batch, now + 10)
            .await
            .expect("record");
        assert_eq!(
            held,
            [true, true, false, true, true, true],
            "{:?}",
            test.backend
        );
        let statuses: Vec<(DispatchStatus, RunStatus)> = {
            let mut statuses = Vec::new();
            for r in &routed {
                statuses.push((
                    dispatch_of(store, &r.dispatch.id).await.status,
                    run_of(store, &r.run.id).await.status,
                ));
            }
            statuses
        };
        assert_eq!(
            statuses,
            [
                (DispatchStatus::Delivered, RunStatus::Dispatched),
                (DispatchStatus::Delivered, RunStatus::Dispatched),
                (DispatchStatus::Pending, RunStatus::Queued),
                (DispatchStatus::Delivered, RunStatus::Dispatched),
                (DispatchStatus::Pending, RunStatus::Queued),
                (DispatchStatus::DeadLettered, RunStatus::DeadLettered),
            ]
        );
        assert_eq!(
            dispatch_of(store, &routed[2].dispatch.id)
                .await
                .claimed_by
                .as_deref(),
            Some("replica-b")
        );
        for r in &routed {
            assert_eq!(attempts_of(store, &r.dispatch.id).await.len(), 1);
        }
        assert!(history_of(store, &routed[2].run.id).await.is_empty());
    }
}
