//! The SQLite writer's appliers leave exactly the rows the portable ones leave: the same
//! changes applied to two copies of one database, one through `outbox::apply` on the pool, one
//! through `sqlite::outbox::apply` on a `rusqlite` transaction, then every outbox table compared.

use sea_orm::{DatabaseConnection, EntityTrait, QueryOrder};

use crate::connect::Options;
use crate::entities::dispatch::{self, DispatchStatus};
use crate::entities::run::{self, RunStatus};
use crate::entities::{dispatch_attempt, entity_lock, run_history};
use crate::outbox::machine::{self, Change, PullStep, PushStep, RedispatchStep};
use crate::outbox::{ClaimedRun, PULL_CLAIMANT, PullTarget, Recorded, Verdict};
use crate::{Millis, Store};

const NOW: Millis = 1_700_000_000_000;

fn run(n: u32, status: RunStatus) -> run::Model {
    run::Model {
        id: format!("run-{n:02}"),
        tenant_id: "acme".into(),
        workflow_id: "triage".into(),
        target_entity_id: format!("ticket-{n:02}"),
        intake_id: format!("intake-{n:02}"),
        status,
        fencing_token: 3,
        lock_ttl_ms: 60_000,
        created_at: NOW - 1_000,
        updated_at: NOW - 1_000,
        finished_at: None,
        traceparent: None,
        tracestate: None,
        config_revision: None,
        principal_id: None,
        deadline_at: None,
        budgets: Some(r#"{"max_attempts":5}"#.into()),
        run_usage: None,
        end_reason: None,
        worker_version: None,
        subject_version: None,
    }
}

fn dispatch(n: u32, target: &str) -> dispatch::Model {
    dispatch::Model {
        id: format!("dispatch-{n:02}"),
        run_id: format!("run-{n:02}"),
        tenant_id: "acme".into(),
        workflow_id: "triage".into(),
        target: target.into(),
        status: DispatchStatus::Pending,
        attempts: 0,
        series: 1,
        due_at: NOW - 100 + i64::from(n),
        claimed_by: None,
        claim_token: None,
        reason: None,
        last_error: None,
        created_at: NOW - 1_000,
        updated_at: NOW - 1_000,
        delivered_at: None,
        wait_id: None,
    }
}

fn lease(run: &run::Model) -> entity_lock::Model {
    entity_lock::Model {
        tenant_id: run.tenant_id.clone(),
        target_entity_id: run.target_entity_id.clone(),
        run_id: Some(run.id.clone()),
        fencing_token: run.fencing_token,
        expires_at: NOW + 30_000,
        updated_at: NOW - 1_000,
    }
}

/// Every row of the outbox's tables, in key order.
#[derive(Debug, PartialEq)]
struct Tables {
    dispatches: Vec<dispatch::Model>,
    runs: Vec<run::Model>,
    leases: Vec<entity_lock::Model>,
    history: Vec<run_history::Model>,
    attempts: Vec<dispatch_attempt::Model>,
}

async fn tables(db: &DatabaseConnection) -> Tables {
    Tables {
        dispatches: dispatch::Entity::find()
            .order_by_asc(dispatch::Column::Id)
            .all(db)
            .await
            .expect("dispatches"),
        runs: run::Entity::find()
            .order_by_asc(run::Column::Id)
            .all(db)
            .await
            .expect("runs"),
        leases: entity_lock::Entity::find()
            .order_by_asc(entity_lock::Column::TargetEntityId)
            .all(db)
            .await
            .expect("leases"),
        history: run_history::Entity::find()
            .order_by_asc(run_history::Column::Id)
            .all(db)
            .await
            .expect("history"),
        attempts: dispatch_attempt::Entity::find()
            .order_by_asc(dispatch_attempt::Column::Id)
            .all(db)
            .await
            .expect("attempts"),
    }
}

/// A migrated SQLite database at `path`, holding `runs`, their dispatches and leases.
async fn database(path: &std::path::Path, rows: &[Row]) -> Store {
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let store = Store::open(&url, &Options::default()).await.expect("open");
    store.migrate().await.expect("migrate");
    let db = store.connection();
    for (run, dispatch, lease) in rows {
        run::Entity::insert(run::ActiveModel::from(run.clone()))
            .exec_without_returning(db)
            .await
            .expect("run");
        dispatch::Entity::insert(dispatch::ActiveModel::from(dispatch.clone()))
            .exec_without_returning(db)
            .await
            .expect("dispatch");
        if let Some(lease) = lease {
            entity_lock::Entity::insert(entity_lock::ActiveModel::from(lease.clone()))
                .exec_without_returning(db)
                .await
                .expect("lease");
        }
    }
    store
}

fn claimed(mut d: dispatch::Model, owner: &str, attempts: i32) -> dispatch::Model {
    d.attempts = attempts;
    d.claimed_by = Some(owner.into());
    d.due_at = NOW + 30_000;
    d
}

fn recorded(
    claimed_run: (&run::Model, &dispatch::Model),
    owner: &str,
    verdict: Verdict,
) -> Recorded {
    Recorded {
        claimed: ClaimedRun {
            dispatch: claimed_run.1.clone(),
            run: claimed_run.0.clone(),
            lease_expires_at: NOW + 30_000,
        },
        owner: owner.into(),
        verdict,
        result: "retry".into(),
        status_code: Some(503),
        response: Some("busy".into()),
        error: None,
        started_at: NOW - 20,
        duration_ms: 20,
    }
}

type Row = (run::Model, dispatch::Model, Option<entity_lock::Model>);

/// Adds run `n` with dispatch `d` (and its lease if `leased`) to `rows`.
fn add(
    rows: &mut Vec<Row>,
    n: u32,
    status: RunStatus,
    d: dispatch::Model,
    leased: bool,
) -> (run::Model, dispatch::Model) {
    let r = run(n, status);
    let l = leased.then(|| lease(&r));
    rows.push((r.clone(), d.clone(), l));
    (r, d)
}

/// The fixture rows, and every kind of change over them.
fn scenario() -> (Vec<Row>, Vec<Change>) {
    let mut rows = Vec::new();
    let mut changes = Vec::new();
    // Deliveries, set-wise: two still held, one taken by another replica meanwhile.
    for n in 1..=2 {
        let (r, d) = add(
            &mut rows,
            n,
            RunStatus::Queued,
            claimed(dispatch(n, "hook"), "replica-a", 1),
            true,
        );
        changes.push(machine::recorded(
            &recorded((&r, &d), "replica-a", Verdict::Delivered),
            NOW,
        ));
    }
    let (r, d) = add(
        &mut rows,
        3,
        RunStatus::Queued,
        claimed(dispatch(3, "hook"), "replica-b", 2),
        true,
    );
    let stale = claimed(d.clone(), "replica-a", 1);
    changes.push(machine::recorded(
        &recorded((&r, &stale), "replica-a", Verdict::Delivered),
        NOW,
    ));
    // A retry, and a retry of a claim no longer held.
    let (r, d) = add(
        &mut rows,
        4,
        RunStatus::Queued,
        claimed(dispatch(4, "hook"), "replica-a", 1),
        true,
    );
    let retry = Verdict::Retry {
        next_due: NOW + 4_000,
    };
    changes.push(machine::recorded(
        &recorded((&r, &d), "replica-a", retry.clone()),
        NOW,
    ));
    let (r, d) = add(
        &mut rows,
        5,
        RunStatus::Queued,
        claimed(dispatch(5, "hook"), "replica-a", 2),
        true,
    );
    let stale = claimed(d, "replica-a", 1);
    changes.push(machine::recorded(
        &recorded((&r, &stale), "replica-a", retry),
        NOW,
    ));
    // Dead letters: an active run (ended, lease released), and one that ended meanwhile.
    let dead = Verdict::DeadLetter {
        reason: "rejected_4xx",
    };
    let (r, d) = add(
        &mut rows,
        6,
        RunStatus::Queued,
        claimed(dispatch(6, "hook"), "replica-a", 1),
        true,
    );
    changes.push(machine::recorded(
        &recorded((&r, &d), "replica-a", dead.clone()),
        NOW,
    ));
    let (r, d) = add(
        &mut rows,
        7,
        RunStatus::Completed,
        claimed(dispatch(7, "hook"), "replica-a", 1),
        false,
    );
    changes.push(machine::recorded(
        &recorded((&r, &d), "replica-a", dead),
        NOW,
    ));
    // Push claims: a due row, and a row of a run that ended.
    let (r, d) = add(&mut rows, 8, RunStatus::Queued, dispatch(8, "hook"), true);
    let PushStep::Claimed { change, .. } =
        machine::claim_push(d, Some(&r), "replica-a", NOW + 30_000, NOW)
    else {
        panic!("not claimed");
    };
    changes.push(change);
    let (r, d) = add(
        &mut rows,
        9,
        RunStatus::Cancelled,
        dispatch(9, "hook"),
        false,
    );
    let PushStep::Cancelled(change) =
        machine::claim_push(d, Some(&r), "replica-a", NOW + 30_000, NOW)
    else {
        panic!("not cancelled");
    };
    changes.push(change);
    // Pull: a claim after a lapse (new fencing token), a lapse, a release, an extension.
    let target = PullTarget {
        name: "pull".into(),
        claim_ttl_ms: 10_000,
        max_claims: 3,
    };
    let mut lapsed = claimed(dispatch(10, "pull"), PULL_CLAIMANT, 1);
    lapsed.claim_token = Some("token-10".into());
    lapsed.due_at = NOW - 1;
    let (r, d) = add(&mut rows, 10, RunStatus::Dispatched, lapsed, true);
    let PullStep::Claimed { change, .. } =
        machine::claim_pull(d, Some(&r), Some(&target), NOW, || "token-10b".into())
    else {
        panic!("not claimed");
    };
    changes.push(change);
    let mut lapsed = claimed(dispatch(11, "pull"), PULL_CLAIMANT, 1);
    lapsed.claim_token = Some("token-11".into());
    lapsed.due_at = NOW - 1;
    let (_, d) = add(&mut rows, 11, RunStatus::Dispatched, lapsed, true);
    changes.push(machine::lapsed(&d, NOW));
    let mut live = claimed(dispatch(12, "pull"), PULL_CLAIMANT, 2);
    live.claim_token = Some("token-12".into());
    let (_, d) = add(&mut rows, 12, RunStatus::Dispatched, live.clone(), true);
    changes.push(machine::released(&d, NOW + 1_500, NOW));
    live.id = "dispatch-13".into();
    live.run_id = "run-13".into();
    live.claim_token = Some("token-13".into());
    let (_, d) = add(&mut rows, 13, RunStatus::Dispatched, live, true);
    changes.push(machine::extended(&d, NOW + 20_000, NOW));
    // A pull claim past max_claims.
    let mut worn = claimed(dispatch(14, "pull"), PULL_CLAIMANT, 3);
    worn.claim_token = Some("token-14".into());
    let (r, d) = add(&mut rows, 14, RunStatus::Dispatched, worn, true);
    let PullStep::DeadLettered(change) =
        machine::claim_pull(d, Some(&r), Some(&target), NOW, || unreachable!())
    else {
        panic!("not dead-lettered");
    };
    changes.push(change);
    // Redispatches: over a released lease row, and with no lease row yet.
    for n in [15, 16] {
        let mut d = dispatch(n, "hook");
        d.status = DispatchStatus::DeadLettered;
        d.attempts = 5;
        d.reason = Some("max_attempts".into());
        let mut r = run(n, RunStatus::DeadLettered);
        r.finished_at = Some(NOW - 50);
        r.end_reason = Some("budget_exhausted".into());
        let stored = (n == 15).then(|| entity_lock::Model {
            run_id: None,
            expires_at: NOW - 50,
            ..lease(&r)
        });
        rows.push((r.clone(), d.clone(), stored.clone()));
        let RedispatchStep::Queued { change, .. } =
            machine::redispatch(&r, &d, stored.as_ref(), None, NOW)
        else {
            panic!("not redispatched");
        };
        changes.push(change);
    }
    // A takeover's cancellation.
    let (_, d) = add(
        &mut rows,
        17,
        RunStatus::Expired,
        dispatch(17, "hook"),
        false,
    );
    changes.push(machine::cancelled(&d.id, "lease_expired", NOW));
    (rows, changes)
}

#[tokio::test]
async fn the_writers_appliers_leave_the_rows_the_portable_ones_leave() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (rows, changes) = scenario();
    let portable = database(&dir.path().join("portable.db"), &rows).await;
    let writer = database(&dir.path().join("writer.db"), &rows).await;
    let before = tables(portable.connection()).await;

    let txn = crate::runs::begin_write(portable.connection())
        .await
        .expect("begin");
    let by_pool = crate::outbox::apply::apply(&txn, &changes)
        .await
        .expect("apply");
    txn.commit().await.expect("commit");

    let mut connection =
        rusqlite::Connection::open(dir.path().join("writer.db")).expect("open writer");
    let txn = connection.transaction().expect("begin");
    let by_writer: Vec<_> = changes
        .iter()
        .map(|change| super::apply::apply(&txn, change).expect("apply"))
        .collect();
    txn.commit().expect("commit");

    assert_eq!(by_pool, by_writer);
    let held: Vec<bool> = by_pool.iter().map(|a| a.held).collect();
    assert_eq!(
        held.iter().filter(|h| !**h).count(),
        2,
        "two stale records: {held:?}"
    );
    assert_eq!(by_pool.iter().filter(|a| a.token_moved).count(), 1);
    let after = tables(portable.connection()).await;
    assert_ne!(after, before, "the changes changed rows");
    assert_eq!(tables(writer.connection()).await, after);
}

#[tokio::test]
async fn the_writers_claims_and_records_are_the_pooled_ones() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut rows = Vec::new();
    for n in 1..=6 {
        let status = if n == 3 {
            RunStatus::Failed
        } else {
            RunStatus::Queued
        };
        let r = run(n, status);
        let l = (n != 5).then(|| lease(&r));
        rows.push((r, dispatch(n, "hook"), l));
    }
    // Not due yet, and another target's.
    let mut later = dispatch(7, "hook");
    later.due_at = NOW + 1;
    rows.push((run(7, RunStatus::Queued), later, None));
    rows.push((run(8, RunStatus::Queued), dispatch(8, "other"), None));
    let portable = database(&dir.path().join("portable.db"), &rows).await;
    let writer = database(&dir.path().join("writer.db"), &rows).await;

    let by_pool = crate::outbox::claim_push(
        portable.connection(),
        "hook",
        "replica-a",
        4,
        NOW,
        NOW + 30_000,
        &[],
    )
    .await
    .expect("claim");
    let mut connection =
        rusqlite::Connection::open(dir.path().join("writer.db")).expect("open writer");
    let txn = connection.transaction().expect("begin");
    let by_writer =
        super::writer::claim_push(&txn, "hook", "replica-a", 4, NOW, NOW + 30_000).expect("claim");
    txn.commit().expect("commit");
    let view = |claims: &[ClaimedRun]| -> Vec<(dispatch::Model, run::Model, Millis)> {
        claims
            .iter()
            .map(|c| (c.dispatch.clone(), c.run.clone(), c.lease_expires_at))
            .collect()
    };
    assert_eq!(view(&by_writer), view(&by_pool));
    let ids: Vec<&str> = by_pool.iter().map(|c| c.dispatch.id.as_str()).collect();
    assert_eq!(
        ids,
        ["dispatch-01", "dispatch-02", "dispatch-04"],
        "dispatch-03's run ended"
    );
    assert_eq!(by_pool[2].lease_expires_at, NOW + 30_000);
    assert_eq!(
        tables(writer.connection()).await,
        tables(portable.connection()).await
    );

    // Their records (ids aside: each side makes its own).
    let attempts: Vec<Recorded> = by_pool
        .iter()
        .zip([
            Verdict::Delivered,
            Verdict::Retry {
                next_due: NOW + 9_000,
            },
            Verdict::DeadLetter {
                reason: "target_gone",
            },
        ])
        .map(|(claim, verdict)| recorded((&claim.run, &claim.dispatch), "replica-a", verdict))
        .chain([recorded(
            (&rows[5].0, &claimed(rows[5].1.clone(), "replica-a", 1)),
            "replica-a",
            Verdict::Delivered,
        )])
        .collect();
    let held_by_pool =
        crate::outbox::record::record_with(portable.connection(), &attempts, NOW + 100)
            .await
            .expect("record");
    let txn = connection.transaction().expect("begin");
    let held_by_writer = super::writer::record(&txn, &attempts, NOW + 100).expect("record");
    txn.commit().expect("commit");
    assert_eq!(held_by_pool, [true, true, true, false]);
    assert_eq!(held_by_writer, held_by_pool);
    let without_ids = |mut t: Tables| {
        t.history.iter_mut().for_each(|h| h.id.clear());
        t.attempts.iter_mut().for_each(|a| a.id.clear());
        t
    };
    assert_eq!(
        without_ids(tables(writer.connection()).await),
        without_ids(tables(portable.connection()).await)
    );
}
