//! Claims: push and pull claimers on two stores never share a row; a lapsed pull claim comes
//! back with new tokens; `max_running` caps claims; dispatches of ended runs are cancelled.

use std::collections::BTreeSet;

use switchyard_store::Store;
use switchyard_store::ceilings::MaxRunning;
use switchyard_store::entities::dispatch::DispatchStatus;
use switchyard_store::entities::run::RunStatus;
use switchyard_store::outbox::{ClaimError, PULL_CLAIMANT, Verdict};

use super::fixtures::*;
use crate::harness::TestStore;

/// Claims on `store` until a claim finds nothing: the dispatch ids it got.
async fn push_until_empty(store: Store, owner: String, now: i64) -> Vec<String> {
    let mut ids = Vec::new();
    loop {
        let claimed = store
            .claim_push(HOOK, &owner, 5, now, now + 30_000, &[])
            .await
            .expect("claim");
        if claimed.is_empty() {
            return ids;
        }
        ids.extend(claimed.into_iter().map(|c| c.dispatch.id));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_push_claimers_never_get_one_row() {
    for test in TestStore::all().await {
        let now = start();
        let routed = many(&test.store, 0..120, HOOK, now).await;
        let replica = test.replica().await;
        let mut tasks = Vec::new();
        for n in 0..8 {
            let store = if n % 2 == 0 {
                test.store.clone()
            } else {
                replica.clone()
            };
            tasks.push(tokio::spawn(push_until_empty(
                store,
                format!("replica-{n}"),
                now,
            )));
        }
        let mut ids = Vec::new();
        for task in tasks {
            ids.extend(task.await.expect("task"));
        }
        let unique: BTreeSet<&String> = ids.iter().collect();
        assert_eq!(
            unique.len(),
            ids.len(),
            "{:?}: a row was claimed twice",
            test.backend
        );
        assert_eq!(
            ids.len(),
            routed.len(),
            "{:?}: every row claimed",
            test.backend
        );
        for r in &routed {
            let row = dispatch_of(&test.store, &r.dispatch.id).await;
            assert_eq!((row.status, row.attempts), (DispatchStatus::Pending, 1));
            assert_eq!(row.due_at, now + 30_000);
            assert!(
                row.claimed_by
                    .is_some_and(|owner| owner.starts_with("replica-"))
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_pull_claimers_never_get_one_row() {
    for test in TestStore::all().await {
        let now = start();
        let routed = many(&test.store, 0..60, PULL, now).await;
        let replica = test.replica().await;
        let mut tasks = Vec::new();
        for n in 0..6 {
            let store = if n % 2 == 0 {
                test.store.clone()
            } else {
                replica.clone()
            };
            tasks.push(tokio::spawn(async move {
                let mut claims = Vec::new();
                loop {
                    let claimed = store
                        .claim_pull(&[pull_target(30_000, 5)], &[WORKFLOW.into()], 4, now, &[])
                        .await
                        .expect("claim");
                    if claimed.is_empty() {
                        return claims;
                    }
                    claims.extend(
                        claimed
                            .into_iter()
                            .map(|c| (c.claimed.dispatch.id, c.token)),
                    );
                }
            }));
        }
        let mut claims = Vec::new();
        for task in tasks {
            claims.extend(task.await.expect("task"));
        }
        let ids: BTreeSet<&String> = claims.iter().map(|(id, _)| id).collect();
        let tokens: BTreeSet<&String> = claims.iter().map(|(_, token)| token).collect();
        assert_eq!(
            ids.len(),
            claims.len(),
            "{:?}: a row was claimed twice",
            test.backend
        );
        assert_eq!(tokens.len(), claims.len(), "{:?}", test.backend);
        assert_eq!(claims.len(), routed.len(), "{:?}", test.backend);
        for r in &routed {
            let run = run_of(&test.store, &r.run.id).await;
            assert_eq!((run.status, run.fencing_token), (RunStatus::Dispatched, 1));
            let row = dispatch_of(&test.store, &r.dispatch.id).await;
            assert_eq!(row.claimed_by.as_deref(), Some(PULL_CLAIMANT));
            assert_eq!(row.due_at, now + 30_000);
        }
    }
}

#[tokio::test]
async fn a_lapsed_pull_claim_comes_back_pending_and_its_next_claim_has_new_tokens() {
    for test in TestStore::all().await {
        let store = &test.store;
        let now = start();
        let r = routed(store, 1, WORKFLOW, PULL, now).await;
        let target = [pull_target(1_000, 5)];
        let workflows = [WORKFLOW.to_owned()];
        let first = store
            .claim_pull(&target, &workflows, 1, now, &[])
            .await
            .expect("claim")
            .pop()
            .expect("claimed");
        assert_eq!(first.expires_at, now + 1_000);
        assert_eq!(first.claimed.run.fencing_token, 1);
        assert_eq!(first.claimed.lease_expires_at, now + TTL);
        // Nothing more to claim while it is held.
        assert!(
            store
                .claim_pull(&target, &workflows, 1, now + 999, &[])
                .await
                .expect("claim")
                .is_empty()
        );

        let lapsed_at = now + 1_001;
        let (_, lapsed) = store.keep_alive(lapsed_at, false).await.expect("sweep");
        assert_eq!(lapsed, 1, "{:?}", test.backend);
        let row = dispatch_of(store, &r.dispatch.id).await;
        assert_eq!(
            (row.status, row.due_at),
            (DispatchStatus::Pending, lapsed_at)
        );
        assert_eq!((row.claim_token, row.claimed_by), (None, None));
        assert_eq!(run_of(store, &r.run.id).await.status, RunStatus::Queued);
        assert!(matches!(
            store.extend_claim(&first.token, 1_000, lapsed_at).await,
            Err(ClaimError::Lost)
        ));

        let second = store
            .claim_pull(&target, &workflows, 1, lapsed_at + 1, &[])
            .await
            .expect("claim")
            .pop()
            .expect("claimed again");
        assert_ne!(second.token, first.token);
        assert_eq!(second.claimed.dispatch.attempts, 2);
        assert_eq!(second.claimed.run.fencing_token, 2, "{:?}", test.backend);
        assert_eq!(run_of(store, &r.run.id).await.fencing_token, 2);
        assert_eq!(lease_of(store, &r.run).await.fencing_token, 2);
        assert_eq!(
            history_of(store, &r.run.id).await,
            causes(&[
                ("claimed", RunStatus::Dispatched),
                ("claim_expired", RunStatus::Queued),
                ("claimed", RunStatus::Dispatched),
            ])
        );
    }
}

#[tokio::test]
async fn a_pull_claim_taken_over_before_the_sweep_is_recorded_as_lapsed() {
    for test in TestStore::all().await {
        let store = &test.store;
        let now = start();
        let r = routed(store, 1, WORKFLOW, PULL, now).await;
        let target = [pull_target(1_000, 5)];
        let workflows = [WORKFLOW.to_owned()];
        let first = store
            .claim_pull(&target, &workflows, 1, now, &[])
            .await
            .expect("claim");
        let second = store
            .claim_pull(&target, &workflows, 1, now + 1_000, &[])
            .await
            .expect("claim")
            .pop()
            .expect("claimed again once lapsed");
        assert_ne!(second.token, first[0].token);
        assert_eq!(second.claimed.run.fencing_token, 2);
        let history = history_rows(store, &r.run.id).await;
        let last = history
            .last()
            .and_then(|h| h.detail.clone())
            .unwrap_or_default();
        assert!(last.ends_with("(the previous claim lapsed)"), "{last}");
        assert_eq!(history[1].cause, "claim_expired");
    }
}

#[tokio::test]
async fn a_pull_claim_past_max_claims_dead_letters_the_run() {
    for test in TestStore::all().await {
        let store = &test.store;
        let now = start();
        let r = routed(store, 1, WORKFLOW, PULL, now).await;
        let target = [pull_target(100, 2)];
        let workflows = [WORKFLOW.to_owned()];
        for at in [now, now + 100] {
            assert_eq!(
                store
                    .claim_pull(&target, &workflows, 1, at, &[])
                    .await
                    .expect("claim")
                    .len(),
                1
            );
        }
        let third = store
            .claim_pull(&target, &workflows, 1, now + 200, &[])
            .await
            .expect("claim");
        assert!(third.is_empty());
        let row = dispatch_of(store, &r.dispatch.id).await;
        assert_eq!(row.status, DispatchStatus::DeadLettered);
        assert_eq!(row.reason.as_deref(), Some("max_attempts"));
        assert_eq!(row.claim_token, None);
        assert_eq!(
            run_of(store, &r.run.id).await.status,
            RunStatus::DeadLettered
        );
        assert_eq!(lease_of(store, &r.run).await.run_id, None);
    }
}

#[tokio::test]
async fn claims_of_a_run_that_ended_cancel_its_dispatch() {
    for test in TestStore::all().await {
        let store = &test.store;
        let now = start();
        let push = many(store, 0..3, HOOK, now).await;
        let pull = many(store, 3..6, PULL, now).await;
        for r in [&push[1], &pull[1]] {
            set_run_status(store, &r.run.id, RunStatus::Completed, now).await;
        }
        set_run_status(store, &push[2].run.id, RunStatus::Expired, now).await;
        let claimed = store
            .claim_push(HOOK, "replica-a", 10, now, now + 1_000, &[])
            .await
            .expect("claim");
        let ids: Vec<&str> = claimed.iter().map(|c| c.dispatch.id.as_str()).collect();
        assert_eq!(ids, [push[0].dispatch.id.as_str()]);
        let pulled = store
            .claim_pull(&[pull_target(1_000, 5)], &[WORKFLOW.into()], 10, now, &[])
            .await
            .expect("claim");
        assert_eq!(pulled.len(), 2);
        for r in [&push[1], &push[2], &pull[1]] {
            let row = dispatch_of(store, &r.dispatch.id).await;
            assert_eq!(row.status, DispatchStatus::Cancelled, "{:?}", test.backend);
            assert_eq!(row.reason.as_deref(), Some("run_ended"));
            assert_eq!((row.attempts, row.claim_token), (0, None));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn max_running_caps_claims_and_a_run_that_ends_frees_its_slot() {
    for test in TestStore::all().await {
        let now = start();
        let routed = many(&test.store, 0..8, HOOK, now).await;
        let capped = vec![MaxRunning {
            workflow_id: WORKFLOW.into(),
            target: HOOK.into(),
            max: 2,
        }];
        let replica = test.replica().await;
        let mut tasks = Vec::new();
        for n in 0..6 {
            let store = if n % 2 == 0 {
                test.store.clone()
            } else {
                replica.clone()
            };
            let capped = capped.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .claim_push(HOOK, &format!("replica-{n}"), 3, now, now + 30_000, &capped)
                    .await
                    .expect("claim")
            }));
        }
        let mut claimed = Vec::new();
        for task in tasks {
            claimed.extend(task.await.expect("task"));
        }
        assert_eq!(claimed.len(), 2, "{:?}: the ceiling held", test.backend);
        let oldest: Vec<&str> = routed[..2].iter().map(|r| r.dispatch.id.as_str()).collect();
        let mut got: Vec<&str> = claimed.iter().map(|c| c.dispatch.id.as_str()).collect();
        got.sort();
        assert_eq!(got, oldest, "oldest due first");
        let store = &test.store;
        assert_eq!(
            store.free_slots(&capped, now + 1).await.expect("slots")[WORKFLOW],
            0
        );

        // Delivered: dispatched and not finished, it still holds its slot.
        let owner = claimed[0].dispatch.claimed_by.clone().expect("owner");
        let held = store
            .record_attempts(
                &[attempt(&claimed[0], &owner, Verdict::Delivered, now + 1)],
                now + 1,
            )
            .await
            .expect("record");
        assert_eq!(held, [true]);
        assert!(
            store
                .claim_push(HOOK, "replica-x", 3, now + 2, now + 30_000, &capped)
                .await
                .expect("claim")
                .is_empty()
        );
        set_run_status(store, &claimed[0].run.id, RunStatus::Completed, now + 3).await;
        assert_eq!(
            store.free_slots(&capped, now + 4).await.expect("slots")[WORKFLOW],
            1
        );
        let next = store
            .claim_push(HOOK, "replica-x", 3, now + 4, now + 30_000, &capped)
            .await
            .expect("claim");
        assert_eq!(
            next.len(),
            1,
            "{:?}: the ended run freed one slot",
            test.backend
        );
        assert_eq!(next[0].dispatch.id, routed[2].dispatch.id);
    }
}
