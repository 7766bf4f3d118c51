//! The dispatch outbox after intake wrote it: claiming due rows (push dispatchers and pull
//! workers), recording attempts, dead letters and redispatch, and the entity-lease keep-alive
//! of runs that still wait for delivery.
//!
//! Invariant: a dispatch changes state only in a transaction that also writes the run's new
//! status and its history entry, and only while the caller still holds the claim it made
//! (`claimed_by` and the attempt count match), so a late or duplicate record never overrides a
//! newer claim. Claims on PostgreSQL/MySQL use `FOR UPDATE SKIP LOCKED`, so replicas share the
//! work; SQLite serialises writers with `BEGIN IMMEDIATE`.

use sea_orm::sea_query::{Expr, ExprTrait, LockBehavior, LockType};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbErr, EntityTrait,
    QueryFilter, QueryOrder, QuerySelect, Statement,
};
use uuid::Uuid;

use crate::Millis;
use crate::by_key;
use crate::entities::dispatch::{self, DispatchStatus};
use crate::entities::run::{self, RunStatus};
use crate::entities::{dispatch_attempt, entity_lock, run_history};
use crate::runs::{RunError, begin_write};

/// A dispatch claimed for one attempt, with what its message needs.
#[derive(Debug, Clone)]
pub struct ClaimedRun {
    pub dispatch: dispatch::Model,
    pub run: run::Model,
    /// The entity lease's expiry as the claim left it.
    pub lease_expires_at: Millis,
}

/// Who claims: a push dispatcher (its replica id) or a pull worker.
pub const PULL_CLAIMANT: &str = "pull";

async fn lock_due<C: ConnectionTrait>(
    txn: &C,
    filter: sea_orm::Condition,
    now: Millis,
    limit: u64,
) -> Result<Vec<dispatch::Model>, DbErr> {
    due(filter, now, limit)
        .lock_with_behavior(LockType::Update, LockBehavior::SkipLocked)
        .all(txn)
        .await
}

/// The first `limit` pending dispatches due by `now` that match `filter`, as a claim reads
/// them (before its row locks).
pub fn due(
    filter: sea_orm::Condition,
    now: Millis,
    limit: u64,
) -> sea_orm::Select<dispatch::Entity> {
    dispatch::Entity::find()
        .filter(dispatch::Column::Status.eq(DispatchStatus::Pending))
        .filter(dispatch::Column::DueAt.lte(now))
        .filter(filter)
        // In `dispatches_due` order, so the claim reads `limit` index entries. No tie-break
        // by id: PostgreSQL then sorted every due row for each claim (an external merge sort
        // of 25,000 rows, 30 ms, behind a receiver outage's backlog; 1 ms without). Ties (the
        // runs of one intake batch are due at the same millisecond) come in index order:
        // insertion order on SQLite (rowid) and MySQL (the UUIDv7 key), heap order on
        // PostgreSQL.
        .order_by_asc(dispatch::Column::DueAt)
        .limit(limit)
}

async fn runs_of<C: ConnectionTrait>(
    txn: &C,
    rows: &[dispatch::Model],
) -> Result<std::collections::HashMap<String, run::Model>, DbErr> {
    Ok(run::Entity::find()
        .filter(run::Column::Id.is_in(rows.iter().map(|d| d.run_id.clone())))
        .all(txn)
        .await?
        .into_iter()
        .map(|run| (run.id.clone(), run))
        .collect())
}

/// The lease expiry of each of `runs` that still holds its lease, by run id: one query per
/// tenant, not one per run (a claim batch is up to 256 runs, and on PostgreSQL each query is
/// a round trip).
async fn lease_expiries<C: ConnectionTrait>(
    txn: &C,
    runs: &[&run::Model],
) -> Result<std::collections::HashMap<String, Millis>, DbErr> {
    let mut by_tenant: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for run in runs {
        by_tenant
            .entry(run.tenant_id.as_str())
            .or_default()
            .push(run.target_entity_id.clone());
    }
    let mut expiries = std::collections::HashMap::new();
    for (tenant, entities) in by_tenant {
        let leases = entity_lock::Entity::find()
            .filter(entity_lock::Column::TenantId.eq(tenant))
            .filter(entity_lock::Column::TargetEntityId.is_in(entities))
            .all(txn)
            .await?;
        for lease in leases {
            if let Some(run_id) = lease.run_id {
                expiries.insert(run_id, lease.expires_at);
            }
        }
    }
    Ok(expiries)
}

async fn lease_expiry<C: ConnectionTrait>(txn: &C, run: &run::Model) -> Result<Millis, DbErr> {
    Ok(
        entity_lock::Entity::find_by_id((run.tenant_id.clone(), run.target_entity_id.clone()))
            .one(txn)
            .await?
            .filter(|lease| lease.run_id.as_deref() == Some(run.id.as_str()))
            .map_or(0, |lease| lease.expires_at),
    )
}

/// Claims up to `limit` due dispatches of the push target `target` for one attempt each, until
/// `claim_until` (after which another dispatcher may claim them again: a crash between
/// delivery and record re-delivers under the same id). Dispatches of runs that ended meanwhile
/// are cancelled instead.
///
/// Workflows in `capped` (their `max_running`) get only as many claims as they have free
/// slots (`ceilings`); their other dispatches stay pending, oldest due first.
#[allow(clippy::too_many_arguments)]
pub async fn claim_push(
    db: &DatabaseConnection,
    target: &str,
    owner: &str,
    limit: u64,
    now: Millis,
    claim_until: Millis,
    capped: &[crate::ceilings::MaxRunning],
) -> Result<Vec<ClaimedRun>, DbErr> {
    let txn = begin_write(db).await?;
    let capped: Vec<_> = capped
        .iter()
        .filter(|c| c.target == target)
        .cloned()
        .collect();
    let mut slots =
        crate::ceilings::Slots::new(crate::ceilings::free_slots(&txn, &capped, now).await?);
    let mut filter = sea_orm::Condition::all().add(dispatch::Column::Target.eq(target));
    let full = slots.full();
    if !full.is_empty() {
        filter = filter.add(dispatch::Column::WorkflowId.is_not_in(full));
    }
    let mut rows = lock_due(&txn, filter, now, limit).await?;
    rows.retain(|row| slots.take(&row.workflow_id));
    if rows.is_empty() {
        txn.commit().await?;
        return Ok(Vec::new());
    }
    let runs = runs_of(&txn, &rows).await?;
    let mut claimed = Vec::with_capacity(rows.len());
    let mut ids = Vec::with_capacity(rows.len());
    for mut row in rows {
        let Some(run) = runs.get(&row.run_id).filter(|r| r.status.is_active()) else {
            cancel(&txn, &row.id, "run_ended", now).await?;
            continue;
        };
        ids.push(row.id.clone());
        row.attempts += 1;
        row.claimed_by = Some(owner.to_owned());
        row.due_at = claim_until;
        claimed.push(ClaimedRun {
            dispatch: row,
            run: run.clone(),
            lease_expires_at: 0,
        });
    }
    let expiries =
        lease_expiries(&txn, &claimed.iter().map(|c| &c.run).collect::<Vec<_>>()).await?;
    for claim in &mut claimed {
        claim.lease_expires_at = expiries.get(&claim.run.id).copied().unwrap_or(0);
    }
    if !ids.is_empty() {
        dispatch::Entity::update_many()
            .col_expr(
                dispatch::Column::Attempts,
                Expr::col(dispatch::Column::Attempts).add(1),
            )
            .col_expr(dispatch::Column::ClaimedBy, owner.into())
            .col_expr(dispatch::Column::DueAt, claim_until.into())
            .col_expr(dispatch::Column::UpdatedAt, now.into())
            .filter(dispatch::Column::Id.is_in(ids))
            .exec(&txn)
            .await?;
    }
    txn.commit().await?;
    Ok(claimed)
}

/// Reads back dispatches another writer claimed for `owner` (the SQLite intake writer claims
/// backlog rows for its daemon's dispatcher): those still pending under that claim, with their
/// runs and lease expiries, as [`claim_push`] returns them.
pub async fn claimed_rows<C: ConnectionTrait>(
    db: &C,
    ids: &[String],
    owner: &str,
) -> Result<Vec<ClaimedRun>, DbErr> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    // By key only ([`crate::by_key`]); the claim is checked here.
    let mut rows: Vec<dispatch::Model> = by_key::dispatches(ids.iter().cloned())
        .all(db)
        .await?
        .into_iter()
        .filter(|d| d.status == DispatchStatus::Pending && d.claimed_by.as_deref() == Some(owner))
        .collect();
    rows.sort_by(|a, b| (a.due_at, &a.id).cmp(&(b.due_at, &b.id)));
    let runs = runs_of(db, &rows).await?;
    let mut claimed: Vec<ClaimedRun> = rows
        .into_iter()
        .filter_map(|row| {
            let run = runs.get(&row.run_id)?.clone();
            Some(ClaimedRun {
                dispatch: row,
                run,
                lease_expires_at: 0,
            })
        })
        .collect();
    let expiries = lease_expiries(db, &claimed.iter().map(|c| &c.run).collect::<Vec<_>>()).await?;
    for claim in &mut claimed {
        claim.lease_expires_at = expiries.get(&claim.run.id).copied().unwrap_or(0);
    }
    Ok(claimed)
}

async fn cancel<C: ConnectionTrait>(
    txn: &C,
    dispatch_id: &str,
    reason: &str,
    now: Millis,
) -> Result<(), DbErr> {
    dispatch::Entity::update_many()
        .col_expr(
            dispatch::Column::Status,
            DispatchStatus::Cancelled.as_str().into(),
        )
        .col_expr(dispatch::Column::Reason, reason.into())
        .col_expr(dispatch::Column::ClaimToken, Option::<String>::None.into())
        .col_expr(dispatch::Column::UpdatedAt, now.into())
        .filter(dispatch::Column::Id.eq(dispatch_id))
        .exec(txn)
        .await
        .map(|_| ())
}

/// What one attempt came to, as the dispatcher decided from the transport's answer and the
/// retry schedule.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Delivered,
    /// Try again at `next_due`.
    Retry {
        next_due: Millis,
    },
    /// Dead-letter with this reason (`max_attempts`, `rejected_4xx`, `target_gone`).
    DeadLetter {
        reason: &'static str,
    },
}

/// One attempt to record.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub claimed: ClaimedRun,
    /// The replica that claimed it.
    pub owner: String,
    pub verdict: Verdict,
    /// `delivered`, `retry`, `rejected_4xx`, `target_gone`.
    pub result: String,
    pub status_code: Option<i32>,
    pub response: Option<String>,
    pub error: Option<String>,
    pub started_at: Millis,
    pub duration_ms: i64,
}

/// Records a batch of attempts in one transaction. Returns how many still held their claim
/// (the others were re-claimed after their claim lapsed; their attempt row is kept, their
/// verdict not applied).
pub async fn record(
    db: &DatabaseConnection,
    attempts: Vec<Recorded>,
    now: Millis,
) -> Result<usize, DbErr> {
    let txn = begin_write(db).await?;
    let mut applied = 0;
    let mut rows = Vec::with_capacity(attempts.len());
    for attempt in &attempts {
        let d = &attempt.claimed.dispatch;
        rows.push(dispatch_attempt::ActiveModel::from(
            dispatch_attempt::Model {
                id: Uuid::now_v7().to_string(),
                dispatch_id: d.id.clone(),
                run_id: d.run_id.clone(),
                series: d.series,
                attempt: d.attempts,
                target: d.target.clone(),
                result: attempt.result.clone(),
                status_code: attempt.status_code,
                response: attempt.response.clone(),
                error: attempt.error.clone(),
                started_at: attempt.started_at,
                duration_ms: attempt.duration_ms,
            },
        ));
    }
    // Deliveries, the common case, are applied set-wise: the rows still held by their claim
    // are read (and row-locked) in one query, then changed with one statement per table.
    let (delivered, others): (Vec<&Recorded>, Vec<&Recorded>) = attempts
        .iter()
        .partition(|a| a.verdict == Verdict::Delivered);
    applied += apply_delivered(&txn, &delivered, now).await?;
    for attempt in others {
        if apply(&txn, attempt, now).await? {
            applied += 1;
        }
    }
    if !rows.is_empty() {
        dispatch_attempt::Entity::insert_many(rows)
            .exec_without_returning(&txn)
            .await?;
    }
    txn.commit().await?;
    Ok(applied)
}

/// Applies delivered attempts: the dispatches still held by their claim become `delivered`,
/// their runs `dispatched`, each with a history entry. Returns how many were applied.
async fn apply_delivered(
    txn: &DatabaseTransaction,
    delivered: &[&Recorded],
    now: Millis,
) -> Result<usize, DbErr> {
    if delivered.is_empty() {
        return Ok(0);
    }
    let current: std::collections::HashMap<String, dispatch::Model> = dispatch::Entity::find()
        .filter(dispatch::Column::Id.is_in(delivered.iter().map(|a| a.claimed.dispatch.id.clone())))
        .lock_exclusive()
        .all(txn)
        .await?
        .into_iter()
        .map(|d| (d.id.clone(), d))
        .collect();
    let held: Vec<&Recorded> = delivered
        .iter()
        .copied()
        .filter(|attempt| {
            let claimed = &attempt.claimed.dispatch;
            current.get(&claimed.id).is_some_and(|now| {
                now.status == DispatchStatus::Pending
                    && now.claimed_by.as_deref() == Some(attempt.owner.as_str())
                    && now.attempts == claimed.attempts
                    && now.series == claimed.series
            })
        })
        .collect();
    if held.is_empty() {
        return Ok(0);
    }
    dispatch::Entity::update_many()
        .col_expr(
            dispatch::Column::Status,
            DispatchStatus::Delivered.as_str().into(),
        )
        .col_expr(dispatch::Column::ClaimedBy, Option::<String>::None.into())
        .col_expr(dispatch::Column::DeliveredAt, now.into())
        .col_expr(dispatch::Column::UpdatedAt, now.into())
        .filter(dispatch::Column::Id.is_in(held.iter().map(|a| a.claimed.dispatch.id.clone())))
        .exec(txn)
        .await?;
    by_key::runs_dispatched(held.iter().map(|a| a.claimed.run.id.clone()), now)
        .exec(txn)
        .await?;
    run_history::Entity::insert_many(held.iter().map(|attempt| {
        run_history::ActiveModel::from(run_history::Model::entry(
            &attempt.claimed.run.id,
            RunStatus::Dispatched,
            "delivered",
            Some(attempt_words(attempt)),
            now,
        ))
    }))
    .exec_without_returning(txn)
    .await?;
    Ok(held.len())
}

/// A failed attempt's dispatch update: the claim is given up and the error kept.
fn unclaimed(what: &str, now: Millis) -> sea_orm::UpdateMany<dispatch::Entity> {
    dispatch::Entity::update_many()
        .col_expr(dispatch::Column::ClaimedBy, Option::<String>::None.into())
        .col_expr(dispatch::Column::LastError, what.into())
        .col_expr(dispatch::Column::UpdatedAt, now.into())
}

/// Runs `update` on the dispatch row only as this claim left it (same owner, attempt and
/// series, still pending); whether the row was still ours.
async fn still_claimed_update(
    txn: &DatabaseTransaction,
    update: sea_orm::UpdateMany<dispatch::Entity>,
    d: &dispatch::Model,
    owner: &str,
) -> Result<bool, DbErr> {
    let updated = update
        .filter(dispatch::Column::Id.eq(d.id.as_str()))
        .filter(dispatch::Column::Status.eq(DispatchStatus::Pending))
        .filter(dispatch::Column::ClaimedBy.eq(owner))
        .filter(dispatch::Column::Attempts.eq(d.attempts))
        .filter(dispatch::Column::Series.eq(d.series))
        .exec(txn)
        .await?;
    Ok(updated.rows_affected > 0)
}

async fn apply(txn: &DatabaseTransaction, attempt: &Recorded, now: Millis) -> Result<bool, DbErr> {
    let d = &attempt.claimed.dispatch;
    let run = &attempt.claimed.run;
    let what = attempt_words(attempt);
    match &attempt.verdict {
        Verdict::Delivered => {
            return Ok(apply_delivered(txn, &[attempt], now).await? == 1);
        }
        Verdict::Retry { next_due } => {
            let retry = unclaimed(&what, now).col_expr(dispatch::Column::DueAt, (*next_due).into());
            if !still_claimed_update(txn, retry, d, &attempt.owner).await? {
                return Ok(false);
            }
            let detail = format!(
                "{what}; next attempt at {}",
                crate::millis_rfc3339(*next_due)
            );
            history(
                txn,
                &run.id,
                RunStatus::Queued,
                "attempt_failed",
                Some(detail),
                now,
            )
            .await?;
        }
        Verdict::DeadLetter { reason } => {
            let dead = unclaimed(&what, now)
                .col_expr(
                    dispatch::Column::Status,
                    DispatchStatus::DeadLettered.as_str().into(),
                )
                .col_expr(dispatch::Column::Reason, (*reason).into());
            if !still_claimed_update(txn, dead, d, &attempt.owner).await? {
                return Ok(false);
            }
            dead_letter_run(txn, run, reason, &what, now).await?;
        }
    }
    Ok(true)
}

/// How an attempt reads in its run's history.
pub fn attempt_words(attempt: &Recorded) -> String {
    let mut words = format!(
        "attempt {} of series {}: {}",
        attempt.claimed.dispatch.attempts, attempt.claimed.dispatch.series, attempt.result
    );
    if let Some(code) = attempt.status_code {
        words.push_str(&format!(" (HTTP {code})"));
    }
    if let Some(error) = &attempt.error {
        words.push_str(&format!(": {error}"));
    }
    words
}

/// Ends an active run as `dead_lettered` and releases its lease (if it still holds it).
async fn dead_letter_run<C: ConnectionTrait>(
    txn: &C,
    run: &run::Model,
    reason: &str,
    what: &str,
    now: Millis,
) -> Result<(), DbErr> {
    let ended = run::Entity::update_many()
        .col_expr(run::Column::Status, RunStatus::DeadLettered.as_str().into())
        .col_expr(run::Column::UpdatedAt, now.into())
        .col_expr(run::Column::FinishedAt, now.into())
        .filter(run::Column::Id.eq(run.id.as_str()))
        .filter(run::Column::Status.is_in(crate::ACTIVE))
        .exec(txn)
        .await?;
    if ended.rows_affected == 0 {
        return Ok(());
    }
    crate::runs::release_lease(txn, run, now).await?;
    history(
        txn,
        &run.id,
        RunStatus::DeadLettered,
        "dead_lettered",
        Some(format!("{reason}: {what}")),
        now,
    )
    .await
}

async fn set_status<C: ConnectionTrait>(
    txn: &C,
    run_id: &str,
    from: RunStatus,
    to: RunStatus,
    now: Millis,
) -> Result<bool, DbErr> {
    let updated = run::Entity::update_many()
        .col_expr(run::Column::Status, to.as_str().into())
        .col_expr(run::Column::UpdatedAt, now.into())
        .filter(run::Column::Id.eq(run_id))
        .filter(run::Column::Status.eq(from))
        .exec(txn)
        .await?;
    Ok(updated.rows_affected > 0)
}

/// Appends one entry to a run's history.
pub async fn history<C: ConnectionTrait>(
    txn: &C,
    run_id: &str,
    status: RunStatus,
    cause: &str,
    detail: Option<String>,
    now: Millis,
) -> Result<(), DbErr> {
    run_history::Entity::insert(run_history::ActiveModel::from(run_history::Model::entry(
        run_id, status, cause, detail, now,
    )))
    .exec_without_returning(txn)
    .await
    .map(|_| ())
}

/// A pull target as claims see it.
#[derive(Debug, Clone)]
pub struct PullTarget {
    pub name: String,
    pub claim_ttl_ms: i64,
    pub max_claims: i32,
}

/// A pull claim handed to a worker.
#[derive(Debug, Clone)]
pub struct PullClaim {
    pub claimed: ClaimedRun,
    pub token: String,
    pub expires_at: Millis,
}

/// Claims up to `limit` due runs of `workflows` on pull targets for a worker. A run past its
/// target's `max_claims` is dead-lettered instead of handed out again.
///
/// Workflows in `capped` get only as many claims as they have free slots, as in
/// [`claim_push`].
pub async fn claim_pull(
    db: &DatabaseConnection,
    targets: &[PullTarget],
    workflows: &[String],
    limit: u64,
    now: Millis,
    capped: &[crate::ceilings::MaxRunning],
) -> Result<Vec<PullClaim>, DbErr> {
    if targets.is_empty() || workflows.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let txn = begin_write(db).await?;
    let capped: Vec<_> = capped
        .iter()
        .filter(|c| {
            workflows.contains(&c.workflow_id) && targets.iter().any(|t| t.name == c.target)
        })
        .cloned()
        .collect();
    let mut slots =
        crate::ceilings::Slots::new(crate::ceilings::free_slots(&txn, &capped, now).await?);
    let full = slots.full();
    let open: Vec<String> = workflows
        .iter()
        .filter(|w| !full.contains(w))
        .cloned()
        .collect();
    if open.is_empty() {
        txn.commit().await?;
        return Ok(Vec::new());
    }
    let filter = sea_orm::Condition::all()
        .add(dispatch::Column::Target.is_in(targets.iter().map(|t| t.name.clone())))
        .add(dispatch::Column::WorkflowId.is_in(open));
    let mut rows = lock_due(&txn, filter, now, limit).await?;
    rows.retain(|row| slots.take(&row.workflow_id));
    if rows.is_empty() {
        txn.commit().await?;
        return Ok(Vec::new());
    }
    let runs = runs_of(&txn, &rows).await?;
    let mut claims = Vec::with_capacity(rows.len());
    for mut row in rows {
        let Some(run) = runs.get(&row.run_id).filter(|r| r.status.is_active()) else {
            cancel(&txn, &row.id, "run_ended", now).await?;
            continue;
        };
        let Some(target) = targets.iter().find(|t| t.name == row.target) else {
            continue;
        };
        let reclaimed = row.claim_token.is_some();
        if reclaimed {
            // Taken over before the keep-alive sweep reset it: recorded as the sweep would.
            history(
                &txn,
                &run.id,
                RunStatus::Queued,
                "claim_expired",
                Some(format!(
                    "claim {} expired without extend, release or finish",
                    row.attempts
                )),
                now,
            )
            .await?;
        }
        if row.attempts >= target.max_claims {
            dispatch::Entity::update_many()
                .col_expr(
                    dispatch::Column::Status,
                    DispatchStatus::DeadLettered.as_str().into(),
                )
                .col_expr(dispatch::Column::Reason, "max_attempts".into())
                .col_expr(dispatch::Column::ClaimToken, Option::<String>::None.into())
                .col_expr(dispatch::Column::ClaimedBy, Option::<String>::None.into())
                .col_expr(dispatch::Column::UpdatedAt, now.into())
                .filter(dispatch::Column::Id.eq(row.id.as_str()))
                .exec(&txn)
                .await?;
            let what = format!("claimed {} times without finishing", row.attempts);
            dead_letter_run(&txn, run, "max_attempts", &what, now).await?;
            continue;
        }
        let token = claim_token();
        let expires_at = now.saturating_add(target.claim_ttl_ms);
        row.attempts += 1;
        row.claimed_by = Some(PULL_CLAIMANT.to_owned());
        row.claim_token = Some(token.clone());
        row.due_at = expires_at;
        dispatch::Entity::update_many()
            .col_expr(dispatch::Column::Attempts, row.attempts.into())
            .col_expr(dispatch::Column::ClaimedBy, PULL_CLAIMANT.into())
            .col_expr(dispatch::Column::ClaimToken, token.clone().into())
            .col_expr(dispatch::Column::DueAt, expires_at.into())
            .col_expr(dispatch::Column::UpdatedAt, now.into())
            .filter(dispatch::Column::Id.eq(row.id.as_str()))
            .exec(&txn)
            .await?;
        let mut run = run.clone();
        if run.status == RunStatus::Queued {
            set_status(&txn, &run.id, RunStatus::Queued, RunStatus::Dispatched, now).await?;
            run.status = RunStatus::Dispatched;
        }
        // Every claim after the first goes to a new holder, who gets a new fencing token: the
        // worker whose claim lapsed can no longer heartbeat or finish the run.
        if row.attempts > 1 {
            run.fencing_token = new_fencing_token(&txn, &run, now).await?;
        }
        let detail = format!(
            "claim {} of series {} until {}{}",
            row.attempts,
            row.series,
            crate::millis_rfc3339(expires_at),
            if reclaimed {
                " (the previous claim lapsed)"
            } else {
                ""
            }
        );
        history(
            &txn,
            &run.id,
            RunStatus::Dispatched,
            "claimed",
            Some(detail),
            now,
        )
        .await?;
        let lease_expires_at = lease_expiry(&txn, &run).await?;
        claims.push(PullClaim {
            claimed: ClaimedRun {
                dispatch: row,
                run,
                lease_expires_at,
            },
            token,
            expires_at,
        });
    }
    txn.commit().await?;
    Ok(claims)
}

/// Moves `run`'s lease (if it still holds it) and the run to the next fencing token.
async fn new_fencing_token<C: ConnectionTrait>(
    txn: &C,
    run: &run::Model,
    now: Millis,
) -> Result<i64, DbErr> {
    let next = run.fencing_token + 1;
    let moved = entity_lock::Entity::update_many()
        .col_expr(entity_lock::Column::FencingToken, next.into())
        .col_expr(entity_lock::Column::UpdatedAt, now.into())
        .filter(entity_lock::Column::TenantId.eq(run.tenant_id.as_str()))
        .filter(entity_lock::Column::TargetEntityId.eq(run.target_entity_id.as_str()))
        .filter(entity_lock::Column::RunId.eq(run.id.as_str()))
        .filter(entity_lock::Column::FencingToken.eq(run.fencing_token))
        .exec(txn)
        .await?;
    if moved.rows_affected == 0 {
        return Ok(run.fencing_token);
    }
    run::Entity::update_many()
        .col_expr(run::Column::FencingToken, next.into())
        .col_expr(run::Column::UpdatedAt, now.into())
        .filter(run::Column::Id.eq(run.id.as_str()))
        .exec(txn)
        .await?;
    Ok(next)
}

/// An opaque, unguessable claim token: 64 hex digits, 244 random bits.
fn claim_token() -> String {
    format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple())
}

/// Why a claim operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error("claim token is unknown, expired or already released")]
    Lost,
    #[error(transparent)]
    Db(#[from] DbErr),
}

async fn live_claim<C: ConnectionTrait>(
    txn: &C,
    token: &str,
    now: Millis,
) -> Result<dispatch::Model, ClaimError> {
    dispatch::Entity::find()
        .filter(dispatch::Column::ClaimToken.eq(token))
        .filter(dispatch::Column::Status.eq(DispatchStatus::Pending))
        .filter(dispatch::Column::DueAt.gt(now))
        .lock_exclusive()
        .one(txn)
        .await?
        .ok_or(ClaimError::Lost)
}

/// Extends a live pull claim by `ttl_ms` from `now`; returns the new expiry.
pub async fn extend_claim(
    db: &DatabaseConnection,
    token: &str,
    ttl_ms: i64,
    now: Millis,
) -> Result<(dispatch::Model, Millis), ClaimError> {
    let txn = begin_write(db).await?;
    let row = live_claim(&txn, token, now).await?;
    let expires_at = now.saturating_add(ttl_ms);
    dispatch::Entity::update_many()
        .col_expr(dispatch::Column::DueAt, expires_at.into())
        .col_expr(dispatch::Column::UpdatedAt, now.into())
        .filter(dispatch::Column::Id.eq(row.id.as_str()))
        .exec(&txn)
        .await?;
    txn.commit().await?;
    Ok((row, expires_at))
}

/// Gives a live pull claim back: the run is pending again after `delay_ms` (the claim counts
/// as an attempt).
pub async fn release_claim(
    db: &DatabaseConnection,
    token: &str,
    delay_ms: i64,
    now: Millis,
) -> Result<(dispatch::Model, Millis), ClaimError> {
    let txn = begin_write(db).await?;
    let row = live_claim(&txn, token, now).await?;
    let due_at = now.saturating_add(delay_ms);
    unclaim(&txn, &row, due_at, now).await?;
    history(
        &txn,
        &row.run_id,
        RunStatus::Queued,
        "released",
        Some(format!(
            "claim {} released by the worker; pending again at {}",
            row.attempts,
            crate::millis_rfc3339(due_at)
        )),
        now,
    )
    .await?;
    dispatch_attempt::Entity::insert(dispatch_attempt::ActiveModel::from(
        dispatch_attempt::Model {
            id: Uuid::now_v7().to_string(),
            dispatch_id: row.id.clone(),
            run_id: row.run_id.clone(),
            series: row.series,
            attempt: row.attempts,
            target: row.target.clone(),
            result: "released".into(),
            status_code: None,
            response: None,
            error: None,
            started_at: now,
            duration_ms: 0,
        },
    ))
    .exec_without_returning(&txn)
    .await?;
    txn.commit().await?;
    Ok((row, due_at))
}

async fn unclaim<C: ConnectionTrait>(
    txn: &C,
    row: &dispatch::Model,
    due_at: Millis,
    now: Millis,
) -> Result<(), DbErr> {
    dispatch::Entity::update_many()
        .col_expr(dispatch::Column::ClaimToken, Option::<String>::None.into())
        .col_expr(dispatch::Column::ClaimedBy, Option::<String>::None.into())
        .col_expr(dispatch::Column::DueAt, due_at.into())
        .col_expr(dispatch::Column::UpdatedAt, now.into())
        .filter(dispatch::Column::Id.eq(row.id.as_str()))
        .exec(txn)
        .await?;
    set_status(
        txn,
        &row.run_id,
        RunStatus::Dispatched,
        RunStatus::Queued,
        now,
    )
    .await?;
    Ok(())
}

/// How far ahead the keep-alive looks for leases about to run out, and how far back for ones
/// that just did (a sweep every half second finds each in time).
pub const KEEP_ALIVE_WINDOW_MS: i64 = 5_000;
/// Most leases one keep-alive pass looks at; a full pass loops.
const KEEP_ALIVE_BATCH: u64 = 1_000;

/// Keeps the entity leases of runs still waiting for delivery alive, and puts lapsed pull
/// claims back to pending. Returns `(leases extended, claims lapsed)`.
///
/// A lease is extended to a full TTL when it runs out within [`KEEP_ALIVE_WINDOW_MS`] (or ran
/// out no longer ago than that) and its run's dispatch is pending and unclaimed (a run a pull
/// worker holds is kept alive by that worker's heartbeats instead). Each pass costs what is
/// about to expire, never the whole backlog: leases are found by `entity_locks (expires_at)`,
/// lapsed claims by the claim-token index. With `everything`, every lease that ran out at any
/// time is looked at too, a pass that costs the backlog: the dispatcher runs it once at start,
/// after a downtime in which waiting runs' leases ran out.
pub async fn keep_alive(
    db: &DatabaseConnection,
    now: Millis,
    everything: bool,
) -> Result<(u64, u64), DbErr> {
    let from = if everything {
        i64::MIN
    } else {
        now - KEEP_ALIVE_WINDOW_MS
    };
    let mut extended = 0;
    let mut after = from;
    loop {
        let expiring = entity_lock::Entity::find()
            .filter(entity_lock::Column::RunId.is_not_null())
            .filter(entity_lock::Column::ExpiresAt.gte(after))
            .filter(entity_lock::Column::ExpiresAt.lt(now + KEEP_ALIVE_WINDOW_MS))
            .order_by_asc(entity_lock::Column::ExpiresAt)
            .limit(KEEP_ALIVE_BATCH)
            .all(db)
            .await?;
        let full = expiring.len() as u64 == KEEP_ALIVE_BATCH;
        extended += extend_waiting(db, &expiring, now).await?;
        match expiring.last() {
            Some(last) if full && last.expires_at > after => after = last.expires_at,
            _ => break,
        }
    }
    let lapsed = reset_lapsed_claims(db, now).await?;
    Ok((extended, lapsed))
}

/// Extends those of `leases` whose run still waits for delivery.
async fn extend_waiting(
    db: &DatabaseConnection,
    leases: &[entity_lock::Model],
    now: Millis,
) -> Result<u64, DbErr> {
    let holders: Vec<String> = leases.iter().filter_map(|l| l.run_id.clone()).collect();
    if holders.is_empty() {
        return Ok(0);
    }
    // By `run_id` alone ([`crate::by_key`]).
    let waiting: std::collections::HashSet<String> =
        by_key::dispatches_of_runs(holders.iter().cloned())
            .all(db)
            .await?
            .into_iter()
            .filter(|d| d.status == DispatchStatus::Pending && d.claim_token.is_none())
            .map(|d| d.run_id)
            .collect();
    if waiting.is_empty() {
        return Ok(0);
    }
    let ttls: std::collections::HashMap<String, i64> = by_key::runs(waiting.iter().cloned())
        .all(db)
        .await?
        .into_iter()
        // A dispatched run with a pending unclaimed dispatch waits for its resume message.
        .filter(|r| matches!(r.status, RunStatus::Queued | RunStatus::Dispatched))
        .map(|r| (r.id, r.lock_ttl_ms))
        .collect();
    if ttls.is_empty() {
        return Ok(0);
    }
    let txn = begin_write(db).await?;
    let mut extended = 0;
    for lease in leases {
        let Some(ttl) = lease.run_id.as_ref().and_then(|id| ttls.get(id)) else {
            continue;
        };
        // Still the same holder with the same token: nobody took it over meanwhile.
        extended += entity_lock::Entity::update_many()
            .col_expr(
                entity_lock::Column::ExpiresAt,
                now.saturating_add(*ttl).into(),
            )
            .col_expr(entity_lock::Column::UpdatedAt, now.into())
            .filter(entity_lock::Column::TenantId.eq(lease.tenant_id.as_str()))
            .filter(entity_lock::Column::TargetEntityId.eq(lease.target_entity_id.as_str()))
            .filter(entity_lock::Column::RunId.eq(lease.run_id.clone()))
            .filter(entity_lock::Column::FencingToken.eq(lease.fencing_token))
            .exec(&txn)
            .await?
            .rows_affected;
    }
    txn.commit().await?;
    Ok(extended)
}

/// Most claim-token index entries read per page by [`reset_lapsed_claims`].
const LAPSED_PAGE: u64 = 500;

/// Puts pull claims whose time ran out back to pending. The candidates are read from the
/// claim-token index alone, in its order and by pages (only a claim in hand has a token:
/// every way a dispatch leaves `pending` clears it), and filtered here: with `status` and
/// `due_at` in the query, PostgreSQL's plans read `dispatches_due` instead, every pending
/// dispatch (153,753 rows, 12-18 ms a sweep behind a backlog of unclaimed pull runs).
async fn reset_lapsed_claims(db: &DatabaseConnection, now: Millis) -> Result<u64, DbErr> {
    let mut candidates = Vec::new();
    let mut after = String::new();
    loop {
        let page = dispatch::Entity::find()
            .filter(dispatch::Column::ClaimToken.gt(after.as_str()))
            .order_by_asc(dispatch::Column::ClaimToken)
            .limit(LAPSED_PAGE)
            .all(db)
            .await?;
        let full = page.len() as u64 == LAPSED_PAGE;
        if let Some(token) = page.last().and_then(|d| d.claim_token.clone()) {
            after = token;
        }
        candidates.extend(
            page.into_iter()
                .filter(|d| d.status == DispatchStatus::Pending && d.due_at <= now)
                .map(|d| d.id),
        );
        if !full || candidates.len() as u64 >= LAPSED_PAGE {
            break;
        }
    }
    if candidates.is_empty() {
        return Ok(0);
    }
    let txn = begin_write(db).await?;
    // Locked by key alone, checked again here ([`crate::by_key`]).
    let lapsed: Vec<dispatch::Model> = by_key::dispatches(candidates)
        .lock_with_behavior(LockType::Update, LockBehavior::SkipLocked)
        .all(&txn)
        .await?
        .into_iter()
        .filter(|d| {
            d.claim_token.is_some() && d.status == DispatchStatus::Pending && d.due_at <= now
        })
        .collect();
    for row in &lapsed {
        unclaim(&txn, row, now, now).await?;
        history(
            &txn,
            &row.run_id,
            RunStatus::Queued,
            "claim_expired",
            Some(format!(
                "claim {} expired without extend, release or finish",
                row.attempts
            )),
            now,
        )
        .await?;
    }
    txn.commit().await?;
    Ok(lapsed.len() as u64)
}

/// What a redispatch did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redispatched {
    /// The run holds its entity again and its dispatch is pending under the same id.
    Queued {
        /// Boxed: a run row is much larger than the other variant.
        run: Box<run::Model>,
        dispatch_id: String,
    },
    /// Another active run holds the entity.
    EntityLocked { held_by_run_id: String },
}

/// Starts a new attempt series for a dead-lettered run, under the same dispatch id, after
/// re-taking its entity lease (with a new fencing token).
pub async fn redispatch(
    db: &DatabaseConnection,
    run_id: &str,
    now: Millis,
) -> Result<Redispatched, RunError> {
    let txn = begin_write(db).await?;
    let mut run = run::Entity::find_by_id(run_id)
        .lock_exclusive()
        .one(&txn)
        .await?
        .ok_or_else(|| RunError::NotFound(run_id.to_owned()))?;
    if run.status != RunStatus::DeadLettered {
        return Err(RunError::NotDeadLettered {
            run_id: run.id,
            status: run.status,
        });
    }
    // A run has one start row and one row per resumed wait: the dead-lettered one is sent again.
    let dispatch = dispatch::Entity::find()
        .filter(dispatch::Column::RunId.eq(run_id))
        .filter(dispatch::Column::Status.eq(DispatchStatus::DeadLettered))
        .order_by_desc(dispatch::Column::CreatedAt)
        .lock_exclusive()
        .one(&txn)
        .await?
        .ok_or_else(|| RunError::NotFound(format!("{run_id} (no dispatch)")))?;
    let key = (run.tenant_id.clone(), run.target_entity_id.clone());
    let stored = crate::leases::lock_leases(&txn, std::slice::from_ref(&key))
        .await?
        .pop();
    let lease = match entity_lock::Model::retaken(stored.as_ref(), &run, now) {
        Ok(lease) => lease,
        Err(held_by_run_id) => return Ok(Redispatched::EntityLocked { held_by_run_id }),
    };
    let token = lease.fencing_token;
    let mut changes = crate::leases::LockChanges {
        now,
        ..Default::default()
    };
    match stored {
        None => changes.created.push(lease),
        Some(_) => changes.changed.push(lease),
    }
    changes.persist(&txn).await?;
    run::Entity::update_many()
        .col_expr(run::Column::Status, RunStatus::Queued.as_str().into())
        .col_expr(run::Column::FencingToken, token.into())
        .col_expr(run::Column::UpdatedAt, now.into())
        .col_expr(run::Column::FinishedAt, Option::<i64>::None.into())
        .col_expr(run::Column::EndReason, Option::<String>::None.into())
        .filter(run::Column::Id.eq(run_id))
        .exec(&txn)
        .await?;
    dispatch::Entity::update_many()
        .col_expr(
            dispatch::Column::Status,
            DispatchStatus::Pending.as_str().into(),
        )
        .col_expr(dispatch::Column::Attempts, 0.into())
        .col_expr(dispatch::Column::Series, (dispatch.series + 1).into())
        .col_expr(dispatch::Column::DueAt, now.into())
        .col_expr(dispatch::Column::ClaimedBy, Option::<String>::None.into())
        .col_expr(dispatch::Column::ClaimToken, Option::<String>::None.into())
        .col_expr(dispatch::Column::Reason, Option::<String>::None.into())
        .col_expr(dispatch::Column::UpdatedAt, now.into())
        .filter(dispatch::Column::Id.eq(dispatch.id.as_str()))
        .exec(&txn)
        .await?;
    history(
        &txn,
        run_id,
        RunStatus::Queued,
        "redispatched",
        Some(format!(
            "series {} of dispatch {} with fencing token {token}",
            dispatch.series + 1,
            dispatch.id
        )),
        now,
    )
    .await?;
    txn.commit().await?;
    run.status = RunStatus::Queued;
    run.fencing_token = token;
    run.updated_at = now;
    run.finished_at = None;
    run.end_reason = None;
    Ok(Redispatched::Queued {
        run: Box::new(run),
        dispatch_id: dispatch.id,
    })
}

/// A run's dispatch, attempts (oldest first) and history (oldest first).
/// The history starts with the run's creation (`routed`, from the run row itself: intake
/// writes no history row for it).
pub async fn trail<C: ConnectionTrait>(
    db: &C,
    run: &run::Model,
) -> Result<
    (
        Option<dispatch::Model>,
        Vec<dispatch_attempt::Model>,
        Vec<run_history::Model>,
    ),
    DbErr,
> {
    let run_id = run.id.as_str();
    // The latest of its dispatches (the start, or the resume of its last resumed wait).
    let dispatch = dispatch::Entity::find()
        .filter(dispatch::Column::RunId.eq(run_id))
        .order_by_desc(dispatch::Column::CreatedAt)
        .order_by_desc(dispatch::Column::Id)
        .one(db)
        .await?;
    let attempts = dispatch_attempt::Entity::find()
        .filter(dispatch_attempt::Column::RunId.eq(run_id))
        .order_by_asc(dispatch_attempt::Column::Id)
        .limit(1000)
        .all(db)
        .await?;
    let routed = run_history::Model {
        id: run.id.clone(),
        run_id: run.id.clone(),
        status: RunStatus::Queued,
        cause: "routed".into(),
        detail: Some(format!("by intake {}", run.intake_id)),
        at: run.created_at,
    };
    let mut history = vec![routed];
    history.extend(
        run_history::Entity::find()
            .filter(run_history::Column::RunId.eq(run_id))
            .order_by_asc(run_history::Column::Id)
            .limit(1000)
            .all(db)
            .await?,
    );
    Ok((dispatch, attempts, history))
}

/// Pending dispatches per target: `(target, count, oldest created_at)`.
pub async fn pending_by_target<C: ConnectionTrait>(
    db: &C,
) -> Result<Vec<(String, i64, i64)>, DbErr> {
    let backend = db.get_database_backend();
    let rows = db
        .query_all_raw(Statement::from_string(
            backend,
            "SELECT target, COUNT(*) AS pending, MIN(created_at) AS oldest FROM dispatches \
             WHERE status = 'pending' GROUP BY target",
        ))
        .await?;
    rows.iter()
        .map(|row| {
            Ok((
                row.try_get::<String>("", "target")?,
                row.try_get::<i64>("", "pending")?,
                row.try_get::<i64>("", "oldest")?,
            ))
        })
        .collect()
}
