//! The lock order of the transactions that change a run and its dispatch: the run's row first,
//! then its dispatch. The dispatcher's recording of an attempt runs beside a worker's finish or
//! heartbeat (a fast worker finishes right after it is handed the run): taken in the opposite
//! order, the two wait for each other until the database refuses one of them.

use std::time::Duration;

use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QuerySelect};
use switchyard_store::entities::dispatch;
use switchyard_store::entities::run::{self, RunStatus};
use switchyard_store::outbox::Verdict;
use switchyard_store::runs::begin_write;

use super::fixtures::*;
use crate::harness::TestStore;

#[tokio::test]
async fn recording_an_attempt_while_a_worker_finishes_the_run_waits_for_it_instead_of_deadlocking()
{
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let r = routed(store, 1, WORKFLOW, HOOK, now).await;
        let claimed = store
            .claim_push(HOOK, "replica-a", 10, now, now + 30_000, &[])
            .await
            .expect("claim");
        let mine = claimed
            .into_iter()
            .find(|c| c.run.id == r.run.id)
            .expect("claimed");

        // A worker's finish, in the order `runs::finish` takes its locks: the run first ...
        let finishing = begin_write(store.connection()).await.expect("begin");
        run::Entity::find_by_id(r.run.id.as_str())
            .lock_exclusive()
            .one(&finishing)
            .await
            .expect("lock the run");
        let recording = {
            let store = store.clone();
            let delivered = attempt(&mine, "replica-a", Verdict::Delivered, now + 1);
            tokio::spawn(async move { store.record_attempts(&[delivered], now + 1).await })
        };
        // (long enough for the recording to reach its first lock)
        tokio::time::sleep(Duration::from_millis(300)).await;
        // ... then its dispatch.
        let closed = dispatch::Entity::update_many()
            .col_expr(dispatch::Column::UpdatedAt, (now + 2).into())
            .filter(dispatch::Column::RunId.eq(r.run.id.as_str()))
            .exec(&finishing)
            .await;
        assert!(
            closed.is_ok(),
            "{backend:?}: the finish was refused: {closed:?}"
        );
        finishing.commit().await.expect("commit the finish");

        let recorded = recording.await.expect("join");
        assert!(
            matches!(recorded.as_deref(), Ok([true])),
            "{backend:?}: the recording was refused or lost its claim: {recorded:?}"
        );
        assert_eq!(
            run_of(store, &r.run.id).await.status,
            RunStatus::Dispatched,
            "{backend:?}"
        );
    }
}
