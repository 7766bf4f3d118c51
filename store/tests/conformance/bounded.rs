//! Conformance of bounded runs: a run past its deadline or budget is ended `failed` once (by a
//! heartbeat, a finish or the deadline timer), its lease released and its dispatch closed.

use std::collections::BTreeSet;

use switchyard_store::bounded::{Report, Usage};
use switchyard_store::entities::dispatch::DispatchStatus;
use switchyard_store::entities::run::{self, RunStatus};
use switchyard_store::runs::RunError;
use switchyard_store::{Millis, Store};

use crate::fixtures::*;
use crate::harness::TestStore;

/// Routes run `n`, dispatched, with `deadline` and `budgets` (JSON text).
async fn bounded(
    store: &Store,
    n: usize,
    now: Millis,
    deadline: Option<Millis>,
    budgets: Option<&str>,
) -> Routed {
    let r = routed(store, n, WORKFLOW, HOOK, now).await;
    set_run_status(store, &r.run.id, RunStatus::Dispatched, now).await;
    set_run_column(store, &r.run.id, run::Column::DeadlineAt, deadline.into()).await;
    set_run_column(
        store,
        &r.run.id,
        run::Column::Budgets,
        budgets.map(str::to_owned).into(),
    )
    .await;
    r
}

/// Asserts that `r` ended `failed` for `reason` at `at`: lease released, dispatch cancelled
/// with the reason, one history entry of that cause.
async fn assert_ended(store: &Store, r: &Routed, reason: &str, at: Millis) {
    let row = run_of(store, &r.run.id).await;
    assert_eq!(
        (row.status, row.end_reason.as_deref(), row.finished_at),
        (RunStatus::Failed, Some(reason), Some(at))
    );
    let lease = lease_of(store, &r.run).await;
    assert_eq!((lease.run_id, lease.expires_at), (None, at));
    let dispatch = dispatch_of(store, &r.dispatch.id).await;
    assert_eq!(
        (dispatch.status, dispatch.reason.as_deref()),
        (DispatchStatus::Cancelled, Some(reason))
    );
    let ends: Vec<_> = history_of(store, &r.run.id)
        .await
        .into_iter()
        .filter(|(cause, _)| cause == reason)
        .collect();
    assert_eq!(ends, causes(&[(reason, RunStatus::Failed)]));
}

#[tokio::test]
async fn a_heartbeat_after_the_deadline_ends_the_run_deadline_exceeded() {
    for test in TestStore::all().await {
        let store = &test.store;
        let now = start();
        let r = bounded(store, 1, now, Some(now + 100), None).await;
        store
            .heartbeat(&r.run.id, 1, &Usage::new(), now + 99)
            .await
            .expect("before the deadline");
        let late = store
            .heartbeat(&r.run.id, 1, &Usage::new(), now + 100)
            .await;
        assert!(
            matches!(
                late,
                Err(RunError::Overrun {
                    reason: "deadline_exceeded",
                    ended_now: true,
                    ..
                })
            ),
            "{:?}: {late:?}",
            test.backend
        );
        assert_ended(store, &r, "deadline_exceeded", now + 100).await;
    }
}

#[tokio::test]
async fn a_heartbeat_whose_usage_passes_a_budget_ends_the_run_budget_exhausted() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let r = bounded(store, 1, now, None, Some(r#"{"tokens":100.0}"#)).await;
        let usage = |amount: f64| Usage::from([("tokens".to_owned(), amount)]);
        store
            .heartbeat(&r.run.id, 1, &usage(60.0), now + 1)
            .await
            .expect("within budget");
        assert_eq!(
            run_of(store, &r.run.id).await.run_usage.as_deref(),
            Some(r#"{"tokens":60.0}"#),
            "{backend:?}"
        );
        let unknown = Usage::from([("dollars".to_owned(), 1.0)]);
        let refused = store.heartbeat(&r.run.id, 1, &unknown, now + 2).await;
        assert!(
            matches!(refused, Err(RunError::UnknownUsage { .. })),
            "{refused:?}"
        );
        let over = store.heartbeat(&r.run.id, 1, &usage(50.0), now + 3).await;
        assert!(
            matches!(
                over,
                Err(RunError::Overrun {
                    reason: "budget_exhausted",
                    ended_now: true,
                    ..
                })
            ),
            "{backend:?}: {over:?}"
        );
        assert_ended(store, &r, "budget_exhausted", now + 3).await;
        assert_eq!(
            run_of(store, &r.run.id).await.run_usage.as_deref(),
            Some(r#"{"tokens":110.0}"#),
            "{backend:?}: the usage that passed the budget is kept"
        );
    }
}

#[tokio::test]
async fn a_finish_after_the_deadline_ends_the_run_and_is_recorded_not_applied() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let r = bounded(store, 1, now, Some(now + 100), None).await;
        let late = store
            .finish_run(
                &r.run.id,
                1,
                RunStatus::Completed,
                &Report::default(),
                now + 150,
            )
            .await;
        assert!(
            matches!(
                late,
                Err(RunError::Overrun {
                    reason: "deadline_exceeded",
                    ended_now: true,
                    ..
                })
            ),
            "{backend:?}: {late:?}"
        );
        assert_ended(store, &r, "deadline_exceeded", now + 150).await;
        assert_eq!(
            history_of(store, &r.run.id).await,
            causes(&[
                ("deadline_exceeded", RunStatus::Failed),
                ("finished_late", RunStatus::Failed)
            ])
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_deadline_timers_end_each_overdue_run_once_and_no_other() {
    for test in TestStore::all().await {
        let backend = test.backend;
        let now = start();
        let mut due = Vec::new();
        for n in 0..6 {
            due.push(bounded(&test.store, n, now, Some(now + 10 + n as i64), None).await);
        }
        let later = bounded(&test.store, 6, now, Some(now + 1_000), None).await;
        let finished = bounded(&test.store, 7, now, Some(now + 10), None).await;
        set_run_status(&test.store, &finished.run.id, RunStatus::Completed, now + 5).await;
        assert!(
            test.store
                .expire_deadlines(now + 9, 10)
                .await
                .expect("none due")
                .is_empty()
        );

        let replica = test.replica().await;
        let at = now + 100;
        let (a, b) = tokio::join!(
            test.store.expire_deadlines(at, 10),
            replica.expire_deadlines(at, 10)
        );
        let (a, b) = (a.expect("timer a"), b.expect("timer b"));
        let ended: BTreeSet<&String> = a.iter().chain(&b).collect();
        assert_eq!(ended.len(), a.len() + b.len(), "{backend:?}: ended twice");
        let expected: BTreeSet<&String> = due.iter().map(|r| &r.run.id).collect();
        assert_eq!(ended, expected, "{backend:?}");
        for r in &due {
            assert_ended(&test.store, r, "deadline_exceeded", at).await;
        }
        assert_eq!(
            run_of(&test.store, &later.run.id).await.status,
            RunStatus::Dispatched
        );
        assert_eq!(
            run_of(&test.store, &finished.run.id).await.status,
            RunStatus::Completed
        );
        assert!(
            test.store
                .expire_deadlines(at, 10)
                .await
                .expect("again")
                .is_empty()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_ends_of_one_run_racing_end_it_once() {
    for test in TestStore::all().await {
        let backend = test.backend;
        let now = start();
        let r = bounded(&test.store, 1, now, None, None).await;
        let replica = test.replica().await;
        let (a, b) = tokio::join!(
            test.store
                .end_run(&r.run.id, RunStatus::Failed, "operator", None, now + 7),
            replica.end_run(&r.run.id, RunStatus::Failed, "operator", None, now + 7),
        );
        let (a, b) = (a.expect("end a"), b.expect("end b"));
        assert!(a ^ b, "{backend:?}: exactly one ended it ({a}, {b})");
        assert_ended(&test.store, &r, "operator", now + 7).await;
        assert_eq!(history_of(&test.store, &r.run.id).await.len(), 1);
    }
}
