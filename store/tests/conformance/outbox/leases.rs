//! The outbox and entity leases: redispatch retakes the lease, a takeover cancels the old
//! run's dispatch, the keep-alive extends leases of waiting runs, a pull worker extends and
//! releases its claim; and the reads (pending counts, a run's trail).

use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use switchyard_store::entities::dispatch::DispatchStatus;
use switchyard_store::entities::entity_lock;
use switchyard_store::entities::run::{self, RunStatus};
use switchyard_store::leases::LockChanges;
use switchyard_store::outbox::{ClaimError, KEEP_ALIVE_WINDOW_MS, Redispatched, Verdict};
use switchyard_store::runs::{RunError, begin_write};

use super::fixtures::*;
use crate::harness::TestStore;

/// Routes run `n` and dead-letters it at `now + 10`.
async fn dead_lettered(store: &switchyard_store::Store, n: usize, now: i64) -> Routed {
    let r = routed(store, n, WORKFLOW, HOOK, now).await;
    let claimed = store
        .claim_push(HOOK, "replica-a", 1, now, now + 30_000, &[])
        .await
        .expect("claim");
    let dead = attempt(
        &claimed[0],
        "replica-a",
        Verdict::DeadLetter {
            reason: "rejected_4xx",
        },
        now,
    );
    assert_eq!(
        store
            .record_attempts(&[dead], now + 10)
            .await
            .expect("record"),
        [true]
    );
    r
}

#[tokio::test]
async fn a_redispatch_keeps_the_id_starts_a_new_series_and_retakes_the_lease() {
    for test in TestStore::all().await {
        let store = &test.store;
        let now = start();
        let r = dead_lettered(store, 1, now).await;
        let at = now + 20;
        let Redispatched::Queued { run, dispatch_id } = store
            .redispatch(&r.run.id, Some("token:ops"), at)
            .await
            .expect("redispatch")
        else {
            panic!("{:?}: entity locked", test.backend);
        };
        assert_eq!(dispatch_id, r.dispatch.id);
        let lease = lease_of(store, &r.run).await;
        assert_eq!(lease.run_id.as_deref(), Some(r.run.id.as_str()));
        assert!(lease.fencing_token > 1, "a larger fencing token");
        assert_eq!(lease.expires_at, at + TTL);
        assert_eq!(
            (run.status, run.fencing_token, run.finished_at),
            (RunStatus::Queued, lease.fencing_token, None)
        );
        assert_eq!(*run, run_of(store, &r.run.id).await);
        let row = dispatch_of(store, &r.dispatch.id).await;
        assert_eq!(
            (row.status, row.series, row.attempts, row.due_at),
            (DispatchStatus::Pending, 2, 0, at)
        );
        assert_eq!(
            (row.reason, row.claimed_by, row.claim_token),
            (None, None, None)
        );
        assert_eq!(
            history_of(store, &r.run.id).await,
            causes(&[
                ("dead_lettered", RunStatus::DeadLettered),
                ("redispatched", RunStatus::Queued)
            ])
        );
        let detail = history_rows(store, &r.run.id)
            .await
            .pop()
            .and_then(|h| h.detail)
            .unwrap_or_default();
        assert!(
            detail.ends_with("; by token:ops"),
            "{:?}: the history names who redispatched: {detail}",
            test.backend
        );
        let again = store
            .claim_push(HOOK, "replica-a", 1, at, at + 30_000, &[])
            .await
            .expect("claim");
        assert_eq!(
            (again[0].dispatch.series, again[0].dispatch.attempts),
            (2, 1)
        );
        assert_eq!(again[0].run.fencing_token, lease.fencing_token);
    }
}

#[tokio::test]
async fn a_redispatch_answers_entity_locked_while_another_run_holds_the_entity() {
    for test in TestStore::all().await {
        let store = &test.store;
        let now = start();
        let r = dead_lettered(store, 1, now).await;
        // Another run took the entity meanwhile.
        entity_lock::Entity::update_many()
            .col_expr(entity_lock::Column::RunId, "run-other".into())
            .col_expr(entity_lock::Column::FencingToken, 2.into())
            .col_expr(entity_lock::Column::ExpiresAt, (now + TTL).into())
            .filter(entity_lock::Column::TargetEntityId.eq(r.run.target_entity_id.as_str()))
            .exec(store.connection())
            .await
            .expect("take over");
        let answer = store
            .redispatch(&r.run.id, None, now + 20)
            .await
            .expect("redispatch");
        assert_eq!(
            answer,
            Redispatched::EntityLocked {
                held_by_run_id: "run-other".into()
            }
        );
        assert_eq!(
            dispatch_of(store, &r.dispatch.id).await.status,
            DispatchStatus::DeadLettered
        );
        assert_eq!(
            run_of(store, &r.run.id).await.status,
            RunStatus::DeadLettered
        );

        let active = routed(store, 2, WORKFLOW, HOOK, now).await;
        assert!(matches!(
            store.redispatch(&active.run.id, None, now + 20).await,
            Err(RunError::NotDeadLettered {
                status: RunStatus::Queued,
                ..
            })
        ));
        assert!(matches!(
            store.redispatch("run-none", None, now).await,
            Err(RunError::NotFound(_))
        ));
    }
}

#[tokio::test]
async fn a_takeover_cancels_the_old_runs_pending_dispatch() {
    for test in TestStore::all().await {
        let store = &test.store;
        let now = start();
        let old = routed(store, 1, WORKFLOW, HOOK, now).await;
        let at = now + TTL + 1;
        // Intake's lock decision: the old run's lease ran out, a new run takes the entity.
        let new_run = run::Model {
            id: "run-new".into(),
            created_at: at,
            updated_at: at,
            fencing_token: 2,
            ..old.run.clone()
        };
        let changes = LockChanges {
            now: at,
            changed: vec![entity_lock::Model {
                tenant_id: old.run.tenant_id.clone(),
                target_entity_id: old.run.target_entity_id.clone(),
                run_id: Some(new_run.id.clone()),
                fencing_token: 2,
                expires_at: at + TTL,
                updated_at: at,
            }],
            new_runs: vec![new_run],
            expired_runs: vec![old.run.id.clone()],
            ..Default::default()
        };
        let txn = begin_write(store.connection()).await.expect("begin");
        switchyard_store::leases::lock_leases(
            &txn,
            &[(old.run.tenant_id.clone(), old.run.target_entity_id.clone())],
        )
        .await
        .expect("lock");
        changes.persist(&txn).await.expect("persist");
        txn.commit().await.expect("commit");

        let row = dispatch_of(store, &old.dispatch.id).await;
        assert_eq!(
            (row.status, row.reason.as_deref(), row.claim_token),
            (DispatchStatus::Cancelled, Some("lease_expired"), None)
        );
        let run = run_of(store, &old.run.id).await;
        assert_eq!(
            (run.status, run.finished_at),
            (RunStatus::Expired, Some(at))
        );
        assert!(
            store
                .claim_push(HOOK, "replica-a", 10, at, at + 30_000, &[])
                .await
                .expect("claim")
                .is_empty(),
            "{:?}: nothing left to deliver",
            test.backend
        );
    }
}

#[tokio::test]
async fn keep_alive_extends_the_leases_of_runs_still_waiting_for_delivery() {
    for test in TestStore::all().await {
        let store = &test.store;
        let now = start();
        // Their leases run out within the window at `at`.
        let at = now + TTL - 1_000;
        // Claimed by a push dispatcher that never recorded it: its claim lapsed, it waits.
        let waiting = routed(store, 1, WORKFLOW, HOOK, now).await;
        let pulled = routed(store, 2, WORKFLOW, PULL, now).await;
        let delivered = routed(store, 3, WORKFLOW, HOOK, now).await;
        let claimed = store
            .claim_pull(&[pull_target(TTL * 2, 5)], &[WORKFLOW.into()], 1, now, &[])
            .await
            .expect("claim");
        assert_eq!(claimed.len(), 1);
        let pushed = store
            .claim_push(HOOK, "replica-a", 10, now, now + 100, &[])
            .await
            .expect("claim");
        let mine = pushed
            .iter()
            .find(|c| c.run.id == delivered.run.id)
            .expect("claimed");
        store
            .record_attempts(
                &[attempt(mine, "replica-a", Verdict::Delivered, now)],
                now + 1,
            )
            .await
            .expect("record");
        // Routed long ago, its lease ran out during a downtime.
        let long_ago = routed(store, 4, WORKFLOW, HOOK, now - 10 * TTL).await;

        let (extended, lapsed) = store.keep_alive(at, false).await.expect("sweep");
        assert_eq!((extended, lapsed), (1, 0), "{:?}", test.backend);
        assert_eq!(lease_of(store, &waiting.run).await.expires_at, at + TTL);
        assert_eq!(
            lease_of(store, &pulled.run).await.expires_at,
            now + TTL,
            "its worker heartbeats"
        );
        assert_eq!(
            lease_of(store, &delivered.run).await.expires_at,
            now + TTL,
            "delivered"
        );
        assert_eq!(
            lease_of(store, &long_ago.run).await.expires_at,
            now - 9 * TTL
        );
        assert!(
            now - 9 * TTL < at - KEEP_ALIVE_WINDOW_MS,
            "outside the window"
        );

        let (extended, _) = store.keep_alive(at, true).await.expect("full sweep");
        assert_eq!(
            extended, 1,
            "{:?}: the full pass finds the old one",
            test.backend
        );
        assert_eq!(lease_of(store, &long_ago.run).await.expires_at, at + TTL);
    }
}

#[tokio::test]
async fn a_pull_worker_extends_and_releases_its_claim() {
    for test in TestStore::all().await {
        let store = &test.store;
        let now = start();
        let r = routed(store, 1, WORKFLOW, PULL, now).await;
        let claim = store
            .claim_pull(&[pull_target(1_000, 5)], &[WORKFLOW.into()], 1, now, &[])
            .await
            .expect("claim")
            .pop()
            .expect("claimed");
        let (row, expires_at) = store
            .extend_claim(&claim.token, 5_000, now + 500)
            .await
            .expect("extend");
        assert_eq!(
            (row.id.as_str(), expires_at),
            (r.dispatch.id.as_str(), now + 5_500)
        );
        assert_eq!(dispatch_of(store, &r.dispatch.id).await.due_at, now + 5_500);

        let (_, due_at) = store
            .release_claim(&claim.token, 2_000, now + 600)
            .await
            .expect("release");
        assert_eq!(due_at, now + 2_600);
        let row = dispatch_of(store, &r.dispatch.id).await;
        assert_eq!(
            (row.status, row.due_at, row.claim_token, row.claimed_by),
            (DispatchStatus::Pending, now + 2_600, None, None)
        );
        assert_eq!(run_of(store, &r.run.id).await.status, RunStatus::Queued);
        let attempts = attempts_of(store, &r.dispatch.id).await;
        assert_eq!(
            (
                attempts.len(),
                attempts[0].result.as_str(),
                attempts[0].attempt
            ),
            (1, "released", 1)
        );
        assert_eq!(
            history_of(store, &r.run.id).await,
            causes(&[
                ("claimed", RunStatus::Dispatched),
                ("released", RunStatus::Queued)
            ])
        );
        for result in [
            store
                .release_claim(&claim.token, 0, now + 700)
                .await
                .map(|_| ()),
            store
                .extend_claim(&claim.token, 1_000, now + 700)
                .await
                .map(|_| ()),
        ] {
            assert!(
                matches!(result, Err(ClaimError::Lost)),
                "{:?}",
                test.backend
            );
        }
    }
}

#[tokio::test]
async fn pending_counts_and_a_runs_trail() {
    for test in TestStore::all().await {
        let store = &test.store;
        let now = start();
        many(store, 0..3, HOOK, now).await;
        let pulled = routed(store, 3, WORKFLOW, PULL, now - 5).await;
        let mut pending = store.pending_by_target().await.expect("pending");
        pending.sort();
        assert_eq!(
            pending,
            [(HOOK.to_owned(), 3, now), (PULL.to_owned(), 1, now - 5)]
        );
        // The bounded probe `/readyz` and `/metrics` read agrees below its cap, on every
        // database, and names a target with nothing pending.
        let figures = store
            .pending_of_targets(&[HOOK, PULL, "idle"])
            .await
            .expect("pending figures");
        let figures: Vec<_> = figures
            .into_iter()
            .map(|f| (f.target, f.count, f.capped, f.oldest))
            .collect();
        assert_eq!(
            figures,
            [
                (HOOK.to_owned(), 3, false, Some(now)),
                (PULL.to_owned(), 1, false, Some(now - 5)),
                ("idle".to_owned(), 0, false, None),
            ],
            "{:?}",
            test.backend
        );

        let claim = store
            .claim_pull(&[pull_target(1_000, 5)], &[WORKFLOW.into()], 1, now, &[])
            .await
            .expect("claim");
        store
            .release_claim(&claim[0].token, 0, now + 1)
            .await
            .expect("release");
        let run = run_of(store, &pulled.run.id).await;
        let (dispatch, attempts, history) = store.trail(&run).await.expect("trail");
        assert_eq!(dispatch.map(|d| d.id), Some(pulled.dispatch.id.clone()));
        assert_eq!(attempts.len(), 1);
        let trail: Vec<&str> = history.iter().map(|h| h.cause.as_str()).collect();
        assert_eq!(
            trail,
            ["routed", "claimed", "released"],
            "{:?}",
            test.backend
        );
        assert_eq!(history[0].at, run.created_at);
    }
}

/// Dispatch lag: each workflow's earliest-due pending dispatch, by index; a claimed one is
/// due again only when its claim lapses, a workflow with nothing pending has none.
#[tokio::test]
async fn pending_heads_name_each_workflows_earliest_due_pending_dispatch() {
    for test in TestStore::all().await {
        let store = &test.store;
        let backend = test.backend;
        let now = start();
        let first = routed(store, 1, WORKFLOW, HOOK, now).await;
        routed(store, 2, WORKFLOW, HOOK, now + 100).await;
        routed(store, 3, "tagging", PULL, now + 50).await;
        let heads = store
            .pending_heads(&[WORKFLOW, "tagging", "idle"])
            .await
            .expect("heads");
        assert_eq!(heads.len(), 2, "{backend:?}: {heads:?}");
        assert_eq!(
            (heads[WORKFLOW].due_at, heads[WORKFLOW].created_at),
            (first.dispatch.due_at, first.dispatch.created_at),
            "{backend:?}"
        );
        assert_eq!(heads[WORKFLOW].lag(first.dispatch.due_at + 1_000), 1_000);
        assert_eq!(heads[WORKFLOW].lag(first.dispatch.due_at - 1_000), 0);
        assert_eq!(heads["tagging"].due_at, now + 50, "{backend:?}");

        // Claimed: due again only when the claim lapses, so the next one heads the queue.
        let claimed = store
            .claim_push(HOOK, "replica-a", 1, now + 200, now + 30_000, &[])
            .await
            .expect("claim");
        assert_eq!(claimed[0].dispatch.id, first.dispatch.id, "{backend:?}");
        let heads = store.pending_heads(&[WORKFLOW]).await.expect("heads");
        assert_eq!(heads[WORKFLOW].due_at, now + 100, "{backend:?}: {heads:?}");
        assert!(store.pending_heads(&[]).await.expect("none").is_empty());
    }
}
