//! Conformance of the runs operations: a heartbeat extends the lease only for the current
//! fencing token, a finish releases it once, and the reads of runs, leases and run records.

use switchyard_store::bounded::{Report, Usage};
use switchyard_store::entities::dispatch::DispatchStatus;
use switchyard_store::entities::run::{self, RunStatus};
use switchyard_store::runs::{RunError, RunFilter};

use crate::fixtures::*;
use crate::harness::TestStore;

/// What a worker reports when it has nothing to add.
fn report() -> Report {
    Report {
        worker_version: Some("worker-1.2".into()),
        ..Report::default()
    }
}

#[tokio::test]
async fn a_heartbeat_extends_the_lease_by_the_runs_ttl_and_refuses_a_stale_token() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let r = routed(store, 1, WORKFLOW, HOOK, now).await;
        set_run_status(store, &r.run.id, RunStatus::Dispatched, now).await;
        let at = now + 1_000;
        let lease = store
            .heartbeat(&r.run.id, 1, &Usage::new(), at)
            .await
            .expect("heartbeat");
        assert_eq!((lease.fencing_token, lease.expires_at), (1, at + TTL));
        let row = lease_of(store, &r.run).await;
        assert_eq!(
            (
                row.run_id.as_deref(),
                row.fencing_token,
                row.expires_at,
                row.updated_at
            ),
            (Some(r.run.id.as_str()), 1, at + TTL, at),
            "{backend:?}"
        );
        assert_eq!(run_of(store, &r.run.id).await.updated_at, at);
        let history = history_of(store, &r.run.id).await;
        assert_eq!(history, causes(&[("heartbeat", RunStatus::Dispatched)]));

        let stale = store.heartbeat(&r.run.id, 2, &Usage::new(), at + 500).await;
        assert!(
            matches!(stale, Err(RunError::StaleToken { given: 2, .. })),
            "{backend:?}: {stale:?}"
        );
        assert_eq!(
            lease_of(store, &r.run).await,
            row,
            "{backend:?}: lease unchanged"
        );
        assert_eq!(history_of(store, &r.run.id).await, history);
        let missing = store.heartbeat("run-none", 1, &Usage::new(), at).await;
        assert!(matches!(missing, Err(RunError::NotFound(_))), "{missing:?}");
    }
}

#[tokio::test]
async fn a_finish_releases_the_lease_closes_the_dispatch_and_a_second_finish_is_refused() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let r = routed(store, 1, WORKFLOW, HOOK, now).await;
        set_run_status(store, &r.run.id, RunStatus::Dispatched, now).await;
        let at = now + 2_000;
        let finished = store
            .finish_run(&r.run.id, 1, RunStatus::Completed, &report(), at)
            .await
            .expect("finish");
        let row = run_of(store, &r.run.id).await;
        assert_eq!(finished, row, "{backend:?}: returns the stored run");
        assert_eq!(
            (row.status, row.finished_at, row.updated_at),
            (RunStatus::Completed, Some(at), at)
        );
        assert_eq!(row.worker_version.as_deref(), Some("worker-1.2"));
        let lease = lease_of(store, &r.run).await;
        assert_eq!(
            (lease.run_id, lease.fencing_token, lease.expires_at),
            (None, 1, at),
            "{backend:?}: released, the row kept with its token"
        );
        let dispatch = dispatch_of(store, &r.dispatch.id).await;
        assert_eq!(dispatch.status, DispatchStatus::Cancelled);
        assert_eq!(
            history_of(store, &r.run.id).await,
            causes(&[("finished", RunStatus::Completed)])
        );

        let again = store
            .finish_run(&r.run.id, 1, RunStatus::Failed, &report(), at + 10)
            .await;
        assert!(
            matches!(
                again,
                Err(RunError::AlreadyFinished {
                    status: RunStatus::Completed,
                    ..
                })
            ),
            "{backend:?}: {again:?}"
        );
        assert_eq!(
            run_of(store, &r.run.id).await,
            row,
            "{backend:?}: unchanged"
        );
        assert_eq!(history_of(store, &r.run.id).await.len(), 1);
    }
}

#[tokio::test]
async fn a_finish_with_a_stale_token_or_a_status_that_is_not_final_changes_nothing() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let r = routed(store, 1, WORKFLOW, HOOK, now).await;
        let stale = store
            .finish_run(&r.run.id, 7, RunStatus::Completed, &report(), now + 1)
            .await;
        assert!(
            matches!(stale, Err(RunError::StaleToken { given: 7, .. })),
            "{backend:?}: {stale:?}"
        );
        let not_final = store
            .finish_run(&r.run.id, 1, RunStatus::Dispatched, &report(), now + 1)
            .await;
        assert!(
            matches!(not_final, Err(RunError::NotFinal(RunStatus::Dispatched))),
            "{not_final:?}"
        );
        let superseded = store
            .finish_run(&r.run.id, 1, RunStatus::Superseded, &report(), now + 1)
            .await;
        assert!(
            matches!(superseded, Err(RunError::SupersededWithoutVersion)),
            "{superseded:?}"
        );
        assert_eq!(
            run_of(store, &r.run.id).await,
            r.run,
            "{backend:?}: run unchanged"
        );
        let lease = lease_of(store, &r.run).await;
        assert_eq!(
            (lease.run_id.as_deref(), lease.expires_at),
            (Some(r.run.id.as_str()), now + TTL)
        );
        assert_eq!(dispatch_of(store, &r.dispatch.id).await, r.dispatch);
        assert!(history_of(store, &r.run.id).await.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_finishes_of_one_run_racing_finish_it_once() {
    for test in TestStore::all().await {
        let backend = test.backend;
        let now = start();
        let r = routed(&test.store, 1, WORKFLOW, HOOK, now).await;
        set_run_status(&test.store, &r.run.id, RunStatus::Dispatched, now).await;
        let replica = test.replica().await;
        let report = report();
        let (a, b) = tokio::join!(
            test.store
                .finish_run(&r.run.id, 1, RunStatus::Completed, &report, now + 5),
            replica.finish_run(&r.run.id, 1, RunStatus::Failed, &report, now + 5),
        );
        let won: Vec<RunStatus> = [&a, &b]
            .into_iter()
            .filter_map(|result| result.as_ref().ok().map(|run| run.status))
            .collect();
        assert_eq!(won.len(), 1, "{backend:?}: {a:?} / {b:?}");
        let lost = if a.is_ok() { &b } else { &a };
        assert!(
            matches!(lost, Err(RunError::AlreadyFinished { status, .. }) if *status == won[0]),
            "{backend:?}: {lost:?}"
        );
        assert_eq!(run_of(&test.store, &r.run.id).await.status, won[0]);
        assert_eq!(
            history_of(&test.store, &r.run.id).await,
            causes(&[("finished", won[0])]),
            "{backend:?}: one history entry"
        );
    }
}

/// Moves run `id` to `tenant`, as routing a delivery of that tenant would have.
async fn set_tenant(test: &TestStore, r: &Routed, tenant: &str) {
    set_run_column(&test.store, &r.run.id, run::Column::TenantId, tenant.into()).await;
}

fn ids(runs: &[run::Model]) -> Vec<&str> {
    runs.iter().map(|r| r.id.as_str()).collect()
}

#[tokio::test]
async fn runs_are_listed_newest_first_filtered_and_paged() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let all = many(store, 1..5, HOOK, now).await;
        set_tenant(&test, &all[3], "globex").await;
        set_run_status(store, &all[1].run.id, RunStatus::Completed, now).await;
        let other = routed(store, 9, "billing", HOOK, now).await;

        let every = store.runs(&RunFilter::default(), 10).await.expect("runs");
        assert_eq!(
            ids(&every),
            [
                "run-00009",
                "run-00004",
                "run-00003",
                "run-00002",
                "run-00001"
            ],
            "{backend:?}"
        );
        let page = store.runs(&RunFilter::default(), 2).await.expect("page");
        let next = RunFilter {
            before: Some(page[1].id.as_str()),
            ..RunFilter::default()
        };
        let next = store.runs(&next, 2).await.expect("next page");
        assert_eq!(ids(&next), ["run-00003", "run-00002"], "{backend:?}");

        let acme = ["acme".to_owned()];
        let filter = RunFilter {
            tenants: Some(&acme),
            workflow_id: Some(WORKFLOW),
            ..RunFilter::default()
        };
        let of_acme = store.runs(&filter, 10).await.expect("acme");
        assert_eq!(ids(&of_acme), ["run-00003", "run-00002", "run-00001"]);
        let completed = RunFilter {
            status: Some(RunStatus::Completed),
            ..RunFilter::default()
        };
        assert_eq!(
            ids(&store.runs(&completed, 10).await.expect("completed")),
            ["run-00002"]
        );
        let entity = RunFilter {
            target_entity_id: Some(other.run.target_entity_id.as_str()),
            ..RunFilter::default()
        };
        assert_eq!(
            ids(&store.runs(&entity, 10).await.expect("entity")),
            ["run-00009"]
        );
        let none = RunFilter {
            tenants: Some(&[]),
            ..RunFilter::default()
        };
        assert!(store.runs(&none, 10).await.expect("none").is_empty());

        assert_eq!(
            store.run(&all[0].run.id).await.expect("run"),
            Some(all[0].run.clone())
        );
        assert_eq!(store.run("run-none").await.expect("run"), None);
    }
}

#[tokio::test]
async fn held_leases_are_the_unexpired_ones_with_a_holder_of_the_tenants_asked() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let all = many(store, 1..4, HOOK, now).await;
        // run 2 finishes (its lease released); run 3's lease is of another tenant.
        store
            .finish_run(&all[1].run.id, 1, RunStatus::Completed, &report(), now + 1)
            .await
            .expect("finish");
        entity_lock_tenant(&test, &all[2], "globex").await;
        let held = store.held_leases(None, now + 2, 10).await.expect("held");
        let entities: Vec<&str> = held.iter().map(|l| l.target_entity_id.as_str()).collect();
        assert_eq!(entities, ["ticket-00001", "ticket-00003"], "{backend:?}");
        let acme = ["acme".to_owned()];
        let of_acme = store
            .held_leases(Some(&acme), now + 2, 10)
            .await
            .expect("acme");
        assert_eq!(of_acme.len(), 1);
        assert_eq!(of_acme[0].run_id.as_deref(), Some(all[0].run.id.as_str()));
        assert!(
            store
                .held_leases(Some(&[]), now + 2, 10)
                .await
                .expect("none")
                .is_empty()
        );
        // At their expiry none is held any more.
        assert!(
            store
                .held_leases(None, now + TTL, 10)
                .await
                .expect("expired")
                .is_empty()
        );
        let released = store
            .lease_of("acme", "ticket-00002")
            .await
            .expect("lease")
            .expect("the row stays");
        assert_eq!((released.run_id, released.fencing_token), (None, 1));
        assert_eq!(
            store.lease_of("acme", "ticket-none").await.expect("lease"),
            None
        );
    }
}

/// Moves a run's lease row to `tenant` (as if the run were of that tenant).
async fn entity_lock_tenant(test: &TestStore, r: &Routed, tenant: &str) {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    use switchyard_store::entities::entity_lock;
    entity_lock::Entity::update_many()
        .col_expr(entity_lock::Column::TenantId, tenant.into())
        .filter(entity_lock::Column::RunId.eq(r.run.id.as_str()))
        .exec(test.store.connection())
        .await
        .expect("move lease");
    set_tenant(test, r, tenant).await;
}

#[tokio::test]
async fn a_run_record_reads_the_run_with_its_trail_and_lease_and_hides_other_tenants() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let now = start();
        let r = routed(store, 1, WORKFLOW, HOOK, now).await;
        insert_ledger(
            store,
            &[ledger_row(
                &r.run.intake_id,
                Some("acme"),
                "routed",
                Some(&r.run.id),
                now,
            )],
        )
        .await;
        set_run_status(store, &r.run.id, RunStatus::Dispatched, now).await;
        store
            .heartbeat(&r.run.id, 1, &Usage::new(), now + 1)
            .await
            .expect("heartbeat");
        let record = store
            .run_record(&r.run.id, None)
            .await
            .expect("record")
            .expect("the run");
        assert_eq!(record.run, run_of(store, &r.run.id).await, "{backend:?}");
        assert_eq!(
            record.dispatch,
            Some(dispatch_of(store, &r.dispatch.id).await)
        );
        assert!(record.attempts.is_empty());
        // Its creation first (from the run row: intake writes no history row), then the rows.
        let (created, stored) = record.history.split_first().expect("a history");
        assert_eq!(
            (created.cause.as_str(), created.at),
            ("routed", r.run.created_at)
        );
        assert_eq!(stored, history_rows(store, &r.run.id).await, "{backend:?}");
        assert_eq!(stored.len(), 1);
        assert!(record.waits.is_empty());
        assert_eq!(
            record.ledger_row.map(|row| row.id),
            Some(r.run.intake_id.clone())
        );
        assert_eq!(record.lease, Some(lease_of(store, &r.run).await));
        let acme = ["acme".to_owned()];
        assert!(
            store
                .run_record(&r.run.id, Some(&acme))
                .await
                .expect("acme")
                .is_some()
        );
        let globex = ["globex".to_owned()];
        assert!(
            store
                .run_record(&r.run.id, Some(&globex))
                .await
                .expect("globex")
                .is_none(),
            "{backend:?}: another tenant's run is not shown"
        );
        assert!(
            store
                .run_record("run-none", None)
                .await
                .expect("none")
                .is_none()
        );
    }
}
