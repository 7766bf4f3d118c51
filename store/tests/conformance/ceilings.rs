//! Conformance of `max_running`'s free slots: a run holds a slot while it is handed to its
//! worker and not finished, or while a push claim on it is in flight; nothing else does.

use sea_orm::{ConnectionTrait, Statement};
use switchyard_store::Store;
use switchyard_store::ceilings::{MaxRunning, gate_name};
use switchyard_store::entities::run::RunStatus;

use crate::fixtures::*;
use crate::harness::TestStore;

fn capped(workflow: &str, max: u32) -> MaxRunning {
    MaxRunning {
        workflow_id: workflow.into(),
        target: HOOK.into(),
        max,
    }
}

/// Whether the gate row of `workflow` exists.
async fn gate_exists(store: &Store, workflow: &str) -> bool {
    let db = store.connection();
    let backend = db.get_database_backend();
    let sql = if backend == sea_orm::DbBackend::Postgres {
        "SELECT name FROM flow_gates WHERE name = $1"
    } else {
        "SELECT name FROM flow_gates WHERE name = ?"
    };
    db.query_one_raw(Statement::from_sql_and_values(
        backend,
        sql,
        [gate_name(workflow).into()],
    ))
    .await
    .expect("read gate")
    .is_some()
}

#[tokio::test]
async fn free_slots_count_dispatched_runs_and_push_claims_in_flight_and_nothing_else() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let ceilings = [capped(WORKFLOW, 5), capped("billing", 1)];
        let free = store.free_slots(&ceilings, now).await.expect("slots");
        assert_eq!((free[WORKFLOW], free["billing"]), (5, 1), "{backend:?}");
        assert!(
            gate_exists(store, WORKFLOW).await,
            "{backend:?}: the gate row"
        );

        let runs = many(store, 1..9, HOOK, now).await;
        // 1: queued, not claimed. 2: dispatched. 3: needs input. 4: a push claim in flight.
        set_run_status(store, &runs[1].run.id, RunStatus::Dispatched, now).await;
        set_run_status(store, &runs[2].run.id, RunStatus::NeedsInput, now).await;
        let claimed = store
            .claim_push(HOOK, "replica-a", 1, now, now + 30_000, &[])
            .await
            .expect("claim");
        assert_eq!(claimed[0].dispatch.id, runs[0].dispatch.id);
        // 5: completed. 6: a pull claim (counted once its run is dispatched, not before).
        set_run_status(store, &runs[4].run.id, RunStatus::Completed, now).await;
        set_claim(store, &runs[5].dispatch.id, "pull", 1).await;
        // 7 and 8 stay queued and unclaimed.
        routed(store, 20, "billing", HOOK, now).await;
        let billing = routed(store, 21, "billing", HOOK, now).await;
        set_run_status(store, &billing.run.id, RunStatus::Dispatched, now).await;

        let free = store.free_slots(&ceilings, now + 1).await.expect("slots");
        assert_eq!(free[WORKFLOW], 5 - 3, "{backend:?}: {free:?}");
        assert_eq!(free["billing"], 0, "{backend:?}");
        // Once the push claim lapses, its slot is free again.
        let lapsed = store
            .free_slots(&ceilings, now + 30_000)
            .await
            .expect("slots");
        assert_eq!(lapsed[WORKFLOW], 5 - 2, "{backend:?}");
        assert_eq!(free.len(), 2);
    }
}
