//! A worker's finish or heartbeat that the database refuses because it lost a race (a deadlock
//! with a transaction that took the same rows in the other order: intake's takeover of an
//! expired lease takes the lease, then the old run) is tried again, not answered as an error:
//! the worker did nothing wrong, and the retry sees the other transaction's result.

use std::time::Duration;

use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QuerySelect};
use switchyard_store::Store;
use switchyard_store::bounded::{Report, Usage};
use switchyard_store::entities::entity_lock;
use switchyard_store::entities::run::{self, RunStatus};
use switchyard_store::runs::begin_write;

use crate::fixtures::*;
use crate::harness::{Backend, TestStore};

/// Runs `worker` (a finish or a heartbeat of `run`, given the store and the run's id) while
/// another transaction holds `run`'s lease and then asks for the run itself, which the worker's
/// transaction locked first: the two wait for each other until the database refuses one.
/// Returns the worker's result.
async fn beside_a_takeover<T, F>(
    store: &Store,
    run: &run::Model,
    now: i64,
    worker: impl FnOnce(Store, String) -> F,
) -> T
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    // The other transaction, in intake's takeover order: the lease first ...
    let taking_over = begin_write(store.connection()).await.expect("begin");
    entity_lock::Entity::find()
        .filter(entity_lock::Column::TenantId.eq(run.tenant_id.as_str()))
        .filter(entity_lock::Column::TargetEntityId.eq(run.target_entity_id.as_str()))
        .lock_exclusive()
        .one(&taking_over)
        .await
        .expect("lock the lease");
    let working = tokio::spawn(worker(store.clone(), run.id.clone()));
    // (long enough for the worker to lock the run and wait for the lease)
    tokio::time::sleep(Duration::from_millis(300)).await;
    // ... then the run, which the worker holds: a deadlock. Whichever the database refuses,
    // the worker must end as if it had run alone after this transaction.
    let took_run = run::Entity::update_many()
        .col_expr(run::Column::UpdatedAt, (now + 1).into())
        .filter(run::Column::Id.eq(run.id.as_str()))
        .exec(&taking_over)
        .await;
    match took_run {
        Ok(_) => taking_over
            .commit()
            .await
            .expect("commit the other transaction"),
        Err(_) => taking_over
            .rollback()
            .await
            .expect("roll back the refused one"),
    }
    working.await.expect("join")
}

/// A routed run its worker has been handed, and when; `None` on SQLite, whose one writer at a
/// time means no transaction ever waits for another's row.
async fn dispatched(test: &TestStore) -> Option<(Routed, i64)> {
    if test.backend == Backend::Sqlite {
        return None;
    }
    let now = start();
    let r = routed(&test.store, 1, WORKFLOW, HOOK, now).await;
    set_run_status(&test.store, &r.run.id, RunStatus::Dispatched, now).await;
    Some((r, now))
}

#[tokio::test]
async fn a_finish_that_loses_a_deadlock_is_tried_again_and_the_run_ends() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let Some((r, now)) = dispatched(&test).await else {
            continue;
        };
        let finished = beside_a_takeover(store, &r.run, now, |worker, run_id| async move {
            let report = Report::default();
            worker
                .finish_run(&run_id, 1, RunStatus::Completed, &report, now + 2)
                .await
        })
        .await;
        assert!(
            matches!(&finished, Ok(run) if run.status == RunStatus::Completed),
            "{backend:?}: the finish was refused: {finished:?}"
        );
        assert_eq!(
            run_of(store, &r.run.id).await.status,
            RunStatus::Completed,
            "{backend:?}"
        );
        assert_eq!(
            lease_of(store, &r.run).await.run_id,
            None,
            "{backend:?}: lease released"
        );
    }
}

#[tokio::test]
async fn a_heartbeat_that_loses_a_deadlock_is_tried_again_and_extends_the_lease() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let Some((r, now)) = dispatched(&test).await else {
            continue;
        };
        let beat = beside_a_takeover(store, &r.run, now, |worker, run_id| async move {
            worker.heartbeat(&run_id, 1, &Usage::new(), now + 2).await
        })
        .await;
        assert!(
            matches!(&beat, Ok(lease) if lease.expires_at == now + 2 + TTL),
            "{backend:?}: the heartbeat was refused: {beat:?}"
        );
        assert_eq!(
            lease_of(store, &r.run).await.expires_at,
            now + 2 + TTL,
            "{backend:?}"
        );
    }
}
