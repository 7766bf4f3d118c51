//! Rows for the conformance tests, written with the entities: routed runs with their lease and
//! pending dispatch, and reads of what the operations left.

use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use switchyard_store::entities::dispatch::{self, DispatchStatus};
use switchyard_store::entities::run::{self, RunStatus};
use switchyard_store::entities::{
    dispatch_attempt, entity_lock, intake, raw_delivery, run_history,
};
use switchyard_store::outbox::{ClaimedRun, PullTarget, Recorded, Verdict};
use switchyard_store::{Millis, Store};

/// The push target of these tests.
pub const HOOK: &str = "hook";
/// The pull target of these tests.
pub const PULL: &str = "pull";
pub const WORKFLOW: &str = "triage";
/// Every run's lease TTL.
pub const TTL: i64 = 60_000;

/// A time the tests start from (now, so a database's own clock never disagrees).
pub fn start() -> Millis {
    switchyard_store::now_millis()
}

/// A routed run and its pending dispatch.
#[derive(Debug, Clone)]
pub struct Routed {
    pub run: run::Model,
    pub dispatch: dispatch::Model,
}

/// Inserts run `n` of `workflow` (queued, holding its entity's lease with fencing token 1
/// until `now + TTL`) and its dispatch to `target`, pending and due at `now`.
pub async fn routed(store: &Store, n: usize, workflow: &str, target: &str, now: Millis) -> Routed {
    routed_as(store, &format!("run-{n:05}"), n, workflow, target, now).await
}

/// [`routed`], with the run id `id` (a UUIDv7 for retention, which reads its age from it).
pub async fn routed_as(
    store: &Store,
    id: &str,
    n: usize,
    workflow: &str,
    target: &str,
    now: Millis,
) -> Routed {
    let run = run::Model {
        id: id.to_owned(),
        tenant_id: "acme".into(),
        workflow_id: workflow.into(),
        target_entity_id: format!("ticket-{n:05}"),
        intake_id: format!("intake-{n:05}"),
        status: RunStatus::Queued,
        fencing_token: 1,
        lock_ttl_ms: TTL,
        created_at: now,
        updated_at: now,
        finished_at: None,
        traceparent: None,
        tracestate: None,
        config_revision: None,
        principal_id: None,
        deadline_at: None,
        budgets: None,
        run_usage: None,
        end_reason: None,
        worker_version: None,
        subject_version: None,
    };
    let dispatch = dispatch::Model {
        id: format!("dispatch-{n:05}"),
        run_id: run.id.clone(),
        tenant_id: run.tenant_id.clone(),
        workflow_id: workflow.into(),
        target: target.into(),
        status: DispatchStatus::Pending,
        attempts: 0,
        series: 1,
        due_at: now,
        claimed_by: None,
        claim_token: None,
        reason: None,
        last_error: None,
        created_at: now,
        updated_at: now,
        delivered_at: None,
        wait_id: None,
    };
    let lease = entity_lock::Model {
        tenant_id: run.tenant_id.clone(),
        target_entity_id: run.target_entity_id.clone(),
        run_id: Some(run.id.clone()),
        fencing_token: 1,
        expires_at: now + TTL,
        updated_at: now,
    };
    let db = store.connection();
    run::Entity::insert(run::ActiveModel::from(run.clone()))
        .exec_without_returning(db)
        .await
        .expect("insert run");
    dispatch::Entity::insert(dispatch::ActiveModel::from(dispatch.clone()))
        .exec_without_returning(db)
        .await
        .expect("insert dispatch");
    entity_lock::Entity::insert(entity_lock::ActiveModel::from(lease))
        .exec_without_returning(db)
        .await
        .expect("insert lease");
    Routed { run, dispatch }
}

/// Runs `range` routed to `target`.
pub async fn many(
    store: &Store,
    range: std::ops::Range<usize>,
    target: &str,
    now: Millis,
) -> Vec<Routed> {
    let mut routed_runs = Vec::with_capacity(range.len());
    for n in range {
        routed_runs.push(routed(store, n, WORKFLOW, target, now).await);
    }
    routed_runs
}

/// Sets a run's status (and `finished_at` if it is final), as an ending elsewhere would.
pub async fn set_run_status(store: &Store, run_id: &str, status: RunStatus, now: Millis) {
    let mut update = run::Entity::update_many()
        .col_expr(run::Column::Status, status.as_str().into())
        .col_expr(run::Column::UpdatedAt, now.into())
        .filter(run::Column::Id.eq(run_id));
    if status.is_finished() {
        update = update.col_expr(run::Column::FinishedAt, now.into());
    }
    update
        .exec(store.connection())
        .await
        .expect("set run status");
}

pub async fn dispatch_of(store: &Store, id: &str) -> dispatch::Model {
    dispatch::Entity::find_by_id(id)
        .one(store.connection())
        .await
        .expect("read dispatch")
        .expect("dispatch exists")
}

pub async fn run_of(store: &Store, id: &str) -> run::Model {
    run::Entity::find_by_id(id)
        .one(store.connection())
        .await
        .expect("read run")
        .expect("run exists")
}

pub async fn lease_of(store: &Store, run: &run::Model) -> entity_lock::Model {
    entity_lock::Entity::find_by_id((run.tenant_id.clone(), run.target_entity_id.clone()))
        .one(store.connection())
        .await
        .expect("read lease")
        .expect("lease exists")
}

/// A run's history, oldest first: `(cause, status)`.
pub async fn history_of(store: &Store, run_id: &str) -> Vec<(String, RunStatus)> {
    history_rows(store, run_id)
        .await
        .into_iter()
        .map(|h| (h.cause, h.status))
        .collect()
}

pub async fn history_rows(store: &Store, run_id: &str) -> Vec<run_history::Model> {
    run_history::Entity::find()
        .filter(run_history::Column::RunId.eq(run_id))
        .order_by_asc(run_history::Column::Id)
        .all(store.connection())
        .await
        .expect("read history")
}

pub async fn attempts_of(store: &Store, dispatch_id: &str) -> Vec<dispatch_attempt::Model> {
    dispatch_attempt::Entity::find()
        .filter(dispatch_attempt::Column::DispatchId.eq(dispatch_id))
        .order_by_asc(dispatch_attempt::Column::Id)
        .all(store.connection())
        .await
        .expect("read attempts")
}

/// `(cause, status)` pairs, for comparing with [`history_of`].
pub fn causes(pairs: &[(&str, RunStatus)]) -> Vec<(String, RunStatus)> {
    pairs.iter().map(|(c, s)| ((*c).to_owned(), *s)).collect()
}

/// The pull target of these tests: claims last `claim_ttl_ms`.
pub fn pull_target(claim_ttl_ms: i64, max_claims: i32) -> PullTarget {
    PullTarget {
        name: PULL.into(),
        claim_ttl_ms,
        max_claims,
    }
}

/// What the dispatcher records for `claimed` by `owner`.
pub fn attempt(claimed: &ClaimedRun, owner: &str, verdict: Verdict, now: Millis) -> Recorded {
    let (result, status_code, error) = match &verdict {
        Verdict::Delivered => ("delivered", Some(204), None),
        Verdict::Retry { .. } => ("retry", Some(503), Some("unavailable".to_owned())),
        Verdict::DeadLetter { reason } => (*reason, Some(410), None),
    };
    Recorded {
        claimed: claimed.clone(),
        owner: owner.into(),
        verdict,
        result: result.into(),
        status_code,
        response: None,
        error,
        started_at: now,
        duration_ms: 3,
    }
}

/// Moves a dispatch's claim to `owner` at `attempts`, as another replica's claim would.
pub async fn set_claim(store: &Store, dispatch_id: &str, owner: &str, attempts: i32) {
    dispatch::Entity::update_many()
        .col_expr(dispatch::Column::ClaimedBy, owner.into())
        .col_expr(dispatch::Column::Attempts, attempts.into())
        .filter(dispatch::Column::Id.eq(dispatch_id))
        .exec(store.connection())
        .await
        .expect("set claim");
}

/// Sets one column of a run, as the routing or an earlier step would have.
pub async fn set_run_column(
    store: &Store,
    run_id: &str,
    column: run::Column,
    value: sea_orm::Value,
) {
    run::Entity::update_many()
        .col_expr(column, value.into())
        .filter(run::Column::Id.eq(run_id))
        .exec(store.connection())
        .await
        .expect("set run column");
}

/// A UUIDv7 made at `millis`: an id retention and the ledger read its age from.
pub fn id_at(millis: Millis) -> String {
    let millis = u64::try_from(millis).expect("a time after 1970");
    let at = uuid::Timestamp::from_unix(
        uuid::NoContext,
        millis / 1000,
        (millis % 1000) as u32 * 1_000_000,
    );
    uuid::Uuid::new_v7(at).to_string()
}

/// A ledger row `id` of `tenant` received and decided at `at` with `outcome`, routed to
/// `run_id` when it has one; its delivery id is its id.
pub fn ledger_row(
    id: &str,
    tenant: Option<&str>,
    outcome: &str,
    run_id: Option<&str>,
    at: Millis,
) -> intake::Model {
    intake::Model {
        id: id.to_owned(),
        source: "github".into(),
        delivery_id: id.to_owned(),
        scope: String::new(),
        outcome: outcome.into(),
        detail: None,
        channel: Some("github".into()),
        event_type: Some("issues.opened".into()),
        tenant_id: tenant.map(str::to_owned),
        target_entity_id: Some("ticket-1".into()),
        payload: Some("{}".into()),
        raw_ref: None,
        run_id: run_id.map(str::to_owned),
        workflow_id: run_id.map(|_| WORKFLOW.to_owned()),
        held_by_run_id: None,
        message_key: None,
        config_revision: "rev-1".into(),
        received_at: at,
        decided_at: at,
        traceparent: None,
        tracestate: None,
        shadow: None,
        replay_id: None,
        replay_of: None,
    }
}

/// Inserts ledger rows as the intake writer would have.
/// Writes `raw`'s bytes into its ledger row (inserted before), as the writers do.
pub async fn write_raw(store: &Store, raw: &raw_delivery::Model) {
    let written = raw_delivery::Entity::update_many()
        .col_expr(
            raw_delivery::Column::ContentType,
            sea_orm::sea_query::Expr::value(raw.content_type.clone()),
        )
        .col_expr(
            raw_delivery::Column::Body,
            sea_orm::sea_query::Expr::value(raw.body.clone()),
        )
        .filter(raw_delivery::Column::Id.eq(&raw.id))
        .exec(store.connection())
        .await
        .expect("write raw");
    assert_eq!(written.rows_affected, 1, "no ledger row {}", raw.id);
}

pub async fn insert_ledger(store: &Store, rows: &[intake::Model]) {
    for row in rows {
        intake::Entity::insert(intake::ActiveModel::from(row.clone()))
            .exec_without_returning(store.connection())
            .await
            .expect("insert ledger row");
    }
}
