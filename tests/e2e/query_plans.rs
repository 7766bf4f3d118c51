//! The outbox statements that run behind a backlog are planned by key (or by the due index, in
//! its order) on SQLite and PostgreSQL without statistics, as a freshly migrated database has
//! none: never by walking every row of one status (`switchyard_store::by_key`). Each check is
//! paired with the statement shape it replaced, which the same planner does walk, so a planner
//! that chose keys anyway would fail the test rather than pass it unseen.

use sea_orm::{
    ColumnTrait, ConnectionTrait, Database, DatabaseConnection, DbBackend, QueryFilter, QueryTrait,
    Statement,
};
use sea_orm_migration::MigratorTrait;
use switchyard_store::by_key;
use switchyard_store::entities::dispatch::{self, DispatchStatus};
use switchyard_store::entities::run::{self, RunStatus};
use switchyard_store::outbox;

use super::harness::{Backend, TestDb};

/// Indexes led by `status`: a plan through one of them for a key list reads every row in
/// that status.
const STATUS_INDEXES: [&str; 4] = [
    "dispatches_due",
    "dispatches_claim",
    "runs_status",
    "runs_deadline",
];

/// 256 keys, a claim batch.
fn keys() -> Vec<String> {
    (0..256)
        .map(|i| format!("01a23800-0000-7000-8000-{i:012x}"))
        .collect()
}

pub(super) async fn plan(db: &DatabaseConnection, statement: Statement) -> String {
    let backend = db.get_database_backend();
    let explain = match backend {
        DbBackend::Sqlite => "EXPLAIN QUERY PLAN",
        _ => "EXPLAIN",
    };
    let rows = db
        .query_all_raw(Statement {
            sql: format!("{explain} {}", statement.sql),
            ..statement
        })
        .await
        .expect("EXPLAIN");
    rows.iter()
        .map(|row| {
            let column = if backend == DbBackend::Sqlite { 3 } else { 0 };
            row.try_get_by_index::<String>(column).expect("plan text")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn status_index(plan: &str) -> Option<&'static str> {
    // Longest names first: `runs_status` is a prefix of the others.
    let mut names = STATUS_INDEXES;
    names.sort_by_key(|name| std::cmp::Reverse(name.len()));
    names.into_iter().find(|name| {
        plan.match_indices(name).any(|(at, _)| {
            // A whole name, not a prefix of a longer one.
            !plan[at + name.len()..].starts_with(|c: char| c == '_' || c.is_alphanumeric())
        })
    })
}

/// A new database of `backend`, connected and migrated; `None` where the backend is skipped.
pub(super) async fn migrated(backend: Backend) -> Option<(TestDb, DatabaseConnection)> {
    let test_db = TestDb::create(backend).await?;
    let db = Database::connect(&test_db.url).await.expect("connect");
    switchyard_migrations::Migrator::up(&db, None)
        .await
        .expect("migrate");
    Some((test_db, db))
}

#[tokio::test]
async fn statements_over_key_lists_are_planned_by_key() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some((test_db, db)) = migrated(backend).await else {
            continue;
        };
        let kind = db.get_database_backend();
        let checked = [
            ("dispatches by id", by_key::dispatches(keys()).build(kind)),
            (
                "dispatches of runs",
                by_key::dispatches_of_runs(keys()).build(kind),
            ),
            ("runs by id", by_key::runs(keys()).build(kind)),
            (
                "queued runs dispatched",
                by_key::runs_dispatched(keys(), 1).build(kind),
            ),
            ("runs expired", by_key::runs_expired(keys(), 1).build(kind)),
            (
                "pending dispatches cancelled",
                by_key::pending_dispatches_cancelled(keys(), "lease_expired", 1).build(kind),
            ),
        ];
        for (what, statement) in checked {
            let plan = plan(&db, statement).await;
            assert_eq!(
                status_index(&plan),
                None,
                "{backend:?}: {what} walks a status index:\n{plan}"
            );
        }
        // The shapes these replaced: a status filter beside the key list.
        let replaced = [
            by_key::dispatches(keys())
                .filter(dispatch::Column::Status.eq(DispatchStatus::Pending))
                .build(kind),
            by_key::runs_dispatched(keys(), 1)
                .filter(run::Column::Status.eq(RunStatus::Queued))
                .build(kind),
        ];
        for statement in replaced {
            let plan = plan(&db, statement).await;
            assert!(
                status_index(&plan).is_some(),
                "{backend:?}: this planner would not walk a status index here, so the check above proves nothing:\n{plan}"
            );
        }
        // A claim reads the due index in its order: no sort of every due row.
        let claim = outbox::due(
            sea_orm::Condition::all().add(dispatch::Column::Target.eq("worker")),
            1,
            256,
        )
        .build(kind);
        let plan = plan(&db, claim).await;
        assert!(
            plan.contains("dispatches_due")
                && !plan.contains("Sort")
                && !plan.contains("TEMP B-TREE"),
            "{backend:?}: a claim sorts the due rows:\n{plan}"
        );
        drop(db);
        test_db.drop_database().await;
    }
}

/// The daemon's PostgreSQL connections plan every execution for its own values
/// (`plan_cache_mode = force_custom_plan`, set in `store::connect`). With the default, in a
/// bench at 256 concurrent requests the recorder's key-list statements (`id IN (...)`, 256 keys)
/// ran 1.5 s each against 500,000 row versions, on CPU in `texteq` under `ExecEvalScalarArrayOp`,
/// i.e. a whole-table scan, and the backlog stopped draining; the same statements with their
/// values in the text are planned through the primary key. A cached generic plan is the one
/// way such a statement scans: so the daemon's connections must never use one. (A test table
/// was replanned as it grew instead of keeping its generic plan, so this checks the setting
/// rather than reproducing the scan.)
#[tokio::test]
async fn postgres_connections_plan_each_execution_for_its_values() {
    let Some(test_db) = TestDb::create(Backend::Postgres).await else {
        return;
    };
    let one = switchyard_store::connect::Options {
        max_connections: Some(1),
        ..Default::default()
    };
    let db = switchyard_store::connect(&test_db.url, &one)
        .await
        .expect("connect");
    let rows = db
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            "SHOW plan_cache_mode",
        ))
        .await
        .expect("SHOW");
    let mode: String = rows[0].try_get_by_index(0).expect("setting");
    assert_eq!(mode, "force_custom_plan");
    drop(db);
    test_db.drop_database().await;
}

/// The names of `runs`' indexes, sorted, as the database lists them.
/// The names of `table`'s indexes other than its primary key, sorted.
pub(super) async fn indexes(db: &DatabaseConnection, table: &str) -> Vec<String> {
    let kind = db.get_database_backend();
    let sql = match kind {
        DbBackend::Sqlite => format!(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = '{table}' \
             AND name NOT LIKE 'sqlite_autoindex%'"
        ),
        DbBackend::Postgres => format!(
            "SELECT indexname FROM pg_indexes WHERE tablename = '{table}' \
             AND indexname <> '{table}_pkey'"
        ),
        _ => format!(
            "SELECT DISTINCT index_name FROM information_schema.statistics \
             WHERE table_schema = DATABASE() AND table_name = '{table}' \
             AND index_name <> 'PRIMARY'"
        ),
    };
    let rows = db
        .query_all_raw(Statement::from_string(kind, sql))
        .await
        .expect("list indexes");
    let mut names: Vec<String> = rows
        .iter()
        .map(|row| row.try_get_by_index::<String>(0).expect("index name"))
        .collect();
    names.sort();
    names
}

async fn run_indexes(db: &DatabaseConnection) -> Vec<String> {
    indexes(db, "runs").await
}

/// m0011 swaps two `runs` indexes for lighter ones on every database, and back on the way
/// down: a status change moves a run's entry in `runs_status` and `runs_workflow_status` only.
#[tokio::test]
async fn the_light_run_indexes_migrate_up_down_and_up_again() {
    let light = [
        "runs_deadline",
        "runs_entity",
        "runs_status",
        "runs_tenant",
        "runs_workflow_status",
    ];
    let before = [
        "runs_entity",
        "runs_status",
        "runs_status_deadline_at",
        "runs_tenant_status",
        "runs_workflow_status",
    ];
    // Down to just before m0011, however many migrations come after it.
    let m0011_and_newer = switchyard_migrations::Migrator::migrations()
        .iter()
        .rev()
        .position(|m| m.name() == "m0011_light_run_indexes")
        .expect("m0011 is a migration") as u32
        + 1;
    for backend in Backend::ALL {
        let Some((test_db, db)) = migrated(backend).await else {
            continue;
        };
        assert_eq!(run_indexes(&db).await, light, "{backend:?} after m0011");
        switchyard_migrations::Migrator::down(&db, Some(m0011_and_newer))
            .await
            .expect("m0011 down");
        assert_eq!(
            run_indexes(&db).await,
            before,
            "{backend:?} after m0011 down"
        );
        switchyard_migrations::Migrator::up(&db, None)
            .await
            .expect("m0011 up again");
        assert_eq!(
            run_indexes(&db).await,
            light,
            "{backend:?} after m0011 up again"
        );
        drop(db);
        test_db.drop_database().await;
    }
}

/// The deadline timer reads `runs_deadline`, which on SQLite and PostgreSQL holds only runs
/// that have a deadline (the timer's `deadline_at <= ?` implies `deadline_at IS NOT NULL`, so
/// both planners may use the partial index; one that would not would scan by status instead).
#[tokio::test]
async fn the_deadline_timer_reads_the_partial_deadline_index() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some((test_db, db)) = migrated(backend).await else {
            continue;
        };
        let kind = db.get_database_backend();
        let definition = match kind {
            DbBackend::Sqlite => "SELECT sql FROM sqlite_master WHERE name = 'runs_deadline'",
            _ => "SELECT indexdef FROM pg_indexes WHERE indexname = 'runs_deadline'",
        };
        let rows = db
            .query_all_raw(Statement::from_string(kind, definition))
            .await
            .expect("index definition");
        let definition: String = rows[0].try_get_by_index(0).expect("definition");
        assert!(
            definition.contains("WHERE") && definition.contains("IS NOT NULL"),
            "{backend:?}: runs_deadline is not partial: {definition}"
        );
        let statement = switchyard_store::bounded::past_deadlines(1_000, 256).build(kind);
        let plan = plan(&db, statement).await;
        assert_eq!(
            status_index(&plan),
            Some("runs_deadline"),
            "{backend:?}: the deadline timer does not read runs_deadline:\n{plan}"
        );
        drop(db);
        test_db.drop_database().await;
    }
}

/// The console's searches by entity or delivery id prefix read the index led by that column
/// (`intake_target_entity`, `intake_delivery_scope`) on SQLite and PostgreSQL, not the whole
/// ledger; and a delivery's replays are read through `replay_results_intake`.
#[tokio::test]
async fn ledger_prefix_searches_read_their_indexes() {
    use sea_orm::{EntityTrait, QueryOrder, QuerySelect};
    use switchyard_store::entities::replay_result;
    use switchyard_store::ledger::{Filter, Prefixes, select};
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some((_test_db, db)) = migrated(backend).await else {
            continue;
        };
        let db_backend = db.get_database_backend();
        for (prefixes, index) in [
            (
                Prefixes {
                    target_entity_id: Some("TCK-55"),
                    delivery_id: None,
                },
                "intake_target_entity",
            ),
            (
                Prefixes {
                    target_entity_id: None,
                    delivery_id: Some("zd-evt"),
                },
                "intake_delivery_scope",
            ),
        ] {
            let statement = select(Filter::default(), prefixes, 50)
                .expect("a statement")
                .build(db_backend);
            let plan = plan(&db, statement).await;
            assert!(plan.contains(index), "{backend:?}: {index} in\n{plan}");
        }
        let statement = replay_result::Entity::find()
            .filter(replay_result::Column::IntakeId.eq("0193-x"))
            .order_by_desc(replay_result::Column::ReplayId)
            .limit(20)
            .build(db_backend);
        let plan = plan(&db, statement).await;
        assert!(
            plan.contains("replay_results_intake"),
            "{backend:?}: replay_results_intake in\n{plan}"
        );
    }
}

/// The Workflows page's dispatch lag reads each workflow's earliest-due pending dispatch
/// through `dispatches_workflow_due` (m0021) on SQLite and PostgreSQL, not the backlog.
#[tokio::test]
async fn a_workflows_dispatch_lag_reads_its_index() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some((_test_db, db)) = migrated(backend).await else {
            continue;
        };
        let statement = outbox::lag::head_select("triage").build(db.get_database_backend());
        let plan = plan(&db, statement).await;
        assert!(
            plan.contains("dispatches_workflow_due"),
            "{backend:?}: dispatches_workflow_due in\n{plan}"
        );
    }
}
/// `/readyz` and `/metrics` read each target's backlog by a bounded probe
/// (`outbox::pending_probe`): a range of `dispatches_due`, never a scan of `dispatches`.
#[tokio::test]
async fn the_pending_probe_reads_no_whole_table() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some((test_db, db)) = migrated(backend).await else {
            continue;
        };
        let kind = db.get_database_backend();
        let plan = plan(&db, outbox::pending_probe(kind, "worker")).await;
        assert!(
            plan.contains("dispatches_due")
                && !plan.contains("SCAN dispatches")
                && !plan.contains("Seq Scan"),
            "{backend:?}: the pending probe reads more than its index range:\n{plan}"
        );
        drop(db);
        test_db.drop_database().await;
    }
}

/// The operator's lookups read an index on SQLite and PostgreSQL: `/v1/intake` by outcome
/// (with and without a time window), by entity, by delivery id; `/v1/runs` by status and by
/// workflow and status; `/v1/locks`.
#[tokio::test]
async fn operator_lookups_read_an_index() {
    use sea_orm::{EntityTrait, QueryOrder, QuerySelect};
    use switchyard_store::ledger::{Filter, Prefixes, select};
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some((test_db, db)) = migrated(backend).await else {
            continue;
        };
        let kind = db.get_database_backend();
        let ledger = [
            (
                Filter {
                    outcome: Some("entity_locked"),
                    ..Filter::default()
                },
                "intake_outcome",
            ),
            (
                Filter {
                    outcome: Some("entity_locked"),
                    since: Some(1_764_900_000_000),
                    until: Some(1_764_903_600_000),
                    ..Filter::default()
                },
                "intake_outcome",
            ),
            (
                Filter {
                    target_entity_id: Some("E-123"),
                    ..Filter::default()
                },
                "intake_target_entity",
            ),
            (
                Filter {
                    delivery_id: Some("zd-1"),
                    ..Filter::default()
                },
                "intake_delivery_scope",
            ),
        ];
        for (filter, index) in ledger {
            let statement = select(filter, Prefixes::default(), 50)
                .expect("a statement")
                .build(kind);
            let plan = plan(&db, statement).await;
            assert!(
                plan.contains(index) && !plan.contains("Seq Scan"),
                "{backend:?}: {filter:?} does not read {index}:\n{plan}"
            );
        }
        let runs = [
            (None, "runs_status"),
            (Some("triage"), "runs_workflow_status"),
        ];
        for (workflow, index) in runs {
            let mut query = run::Entity::find()
                .filter(run::Column::Status.eq(RunStatus::Queued))
                .order_by_desc(run::Column::Id)
                .limit(50);
            if let Some(workflow) = workflow {
                query = query.filter(run::Column::WorkflowId.eq(workflow));
            }
            let plan = plan(&db, query.build(kind)).await;
            assert!(
                (plan.contains("runs_status") || plan.contains(index))
                    && !plan.contains("SCAN runs")
                    && !plan.contains("Seq Scan"),
                "{backend:?}: runs by status (workflow {workflow:?}) read no index:\n{plan}"
            );
        }
        // `/v1/locks`: the held leases in their listing order, through the partial index. An
        // empty PostgreSQL table is estimated so small that sorting it wins: give it the
        // statistics of a backlog (20,000 held leases, ANALYZE), as the bench had.
        if kind == DbBackend::Postgres {
            for sql in [
                "INSERT INTO entity_locks (tenant_id, target_entity_id, run_id, fencing_token, \
                 expires_at, updated_at) SELECT 'acme', 'E-' || n, 'run-' || n, 1, 5000, 1 \
                 FROM generate_series(1, 20000) AS n",
                "ANALYZE entity_locks",
            ] {
                db.execute_raw(Statement::from_string(kind, sql))
                    .await
                    .expect("seed leases");
            }
        }
        let locks = switchyard_store::runs::held_locks_select(None, 1_000, 50)
            .expect("a statement")
            .build(kind);
        let plan = plan(&db, locks).await;
        assert!(
            plan.contains("entity_locks_held")
                && !plan.contains("TEMP B-TREE")
                && !plan.contains("Sort"),
            "{backend:?}: /v1/locks does not read entity_locks_held in order:\n{plan}"
        );
        drop(db);
        test_db.drop_database().await;
    }
}

/// m0020 adds `intake_outcome` and `entity_locks_held`: the PostgreSQL intake
/// writer's per-key lookup, planned generically (as a prepared statement may be; round 19 of
/// BENCHMARKS.md: a new `intake` index once made that plan read every row of a source), still
/// probes `intake` through its own keys and never through the new index.
#[tokio::test]
async fn the_intake_writers_generic_plan_keeps_its_own_indexes() {
    use sea_orm::TransactionTrait;
    let Some((test_db, db)) = migrated(Backend::Postgres).await else {
        return;
    };
    let txn = db.begin().await.expect("begin");
    for sql in [
        "SET LOCAL plan_cache_mode = force_generic_plan".to_owned(),
        format!(
            "PREPARE intake_look_up AS {}",
            switchyard_store::INTAKE_LOOK_UP
        ),
    ] {
        txn.execute_raw(Statement::from_string(DbBackend::Postgres, sql))
            .await
            .expect("prepare");
    }
    let rows = txn
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            "EXPLAIN EXECUTE intake_look_up('{zendesk}', '{d-1}', '{slack}', '{m-1}', \
             '{acme}', '{E-1}', '{}', '{acme}')",
        ))
        .await
        .expect("EXPLAIN EXECUTE");
    let plan = rows
        .iter()
        .map(|row| row.try_get_by_index::<String>(0).expect("plan text"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        plan.contains("intake_delivery_scope")
            && plan.contains("intake_message_key")
            && !plan.contains("intake_outcome")
            && !plan.contains("Seq Scan on intake")
            && !plan.contains("entity_locks_held"),
        "the intake writer's generic plan does not probe by key:\n{plan}"
    );
    txn.rollback().await.expect("rollback");
    drop(db);
    test_db.drop_database().await;
}
