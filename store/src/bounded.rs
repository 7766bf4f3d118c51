//! Bounded runs: the daemon ending a run that outlived its authority, deadline or budget, the
//! running usage totals a worker reports, and the durable deadline timer.
//!
//! Invariant: a run is ended at most once, by whoever first changes its row from an active
//! status under a row lock (`end_active`); the end writes the run's status and reason, releases
//! its lease, closes its pending dispatch and appends one history entry, in one transaction. The
//! deadline timer is the `runs_deadline (status, deadline_at)` index scanned with `SKIP LOCKED`, so it
//! survives restarts and fires once across replicas.

use std::collections::BTreeMap;

use sea_orm::sea_query::{LockBehavior, LockType};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Select,
};

use crate::entities::dispatch::{self, DispatchStatus};
use crate::entities::run::{self, RunStatus};
use crate::runs::{RunError, begin_write, release_lease};
use crate::{Millis, Store};

/// Usage a worker reports: amounts by budget key, added to the run's running totals.
pub type Usage = BTreeMap<String, f64>;

/// The budget key that bounds dispatch attempts: the daemon counts those, not the worker.
pub const MAX_ATTEMPTS: &str = "max_attempts";

/// What a worker reports when it finishes a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Added to the run's running totals.
    pub usage: Usage,
    /// The worker's own version (which code ran).
    pub worker_version: Option<String>,
    /// For `superseded`: the subject version that made the run unnecessary.
    pub subject_version: Option<String>,
    /// Who finished it (`token:<name>`), written in the run's history.
    pub actor: Option<String>,
}

/// Why the daemon ends a run that a worker is still working on.
#[derive(Debug, Clone, PartialEq)]
pub enum Overrun {
    /// Its deadline (Unix ms) passed.
    Deadline(Millis),
    /// Its running total of `key` passed the budget.
    Budget { key: String, used: f64, limit: f64 },
}

impl Overrun {
    /// The run's `end_reason` and history cause.
    pub fn reason(&self) -> &'static str {
        match self {
            Overrun::Deadline(_) => "deadline_exceeded",
            Overrun::Budget { .. } => "budget_exhausted",
        }
    }

    pub fn detail(&self) -> String {
        match self {
            Overrun::Deadline(at) => format!("its deadline {} passed", crate::millis_rfc3339(*at)),
            Overrun::Budget { key, used, limit } => {
                format!("usage of `{key}` reached {used}, past its budget of {limit}")
            }
        }
    }
}

/// The deadline overrun of `run` at `now`, if any.
pub fn past_deadline(run: &run::Model, now: Millis) -> Option<Overrun> {
    run.deadline_at
        .filter(|deadline| *deadline <= now)
        .map(Overrun::Deadline)
}

fn object(text: Option<&str>) -> BTreeMap<String, f64> {
    text.and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default()
}

/// The run's totals with `usage` added, as stored text, and the first budget they pass.
/// A key the run has no budget for (or `max_attempts`, which the daemon counts) is refused.
pub fn account(
    run: &run::Model,
    usage: &Usage,
) -> Result<(Option<String>, Option<Overrun>), RunError> {
    if usage.is_empty() {
        return Ok((run.run_usage.clone(), None));
    }
    let budgets = object(run.budgets.as_deref());
    let mut totals = object(run.run_usage.as_deref());
    for (key, amount) in usage {
        if key == MAX_ATTEMPTS || !budgets.contains_key(key) {
            return Err(RunError::UnknownUsage {
                key: key.clone(),
                known: budgets
                    .keys()
                    .filter(|k| *k != MAX_ATTEMPTS)
                    .cloned()
                    .collect(),
            });
        }
        if !amount.is_finite() || *amount < 0.0 {
            return Err(RunError::BadUsage {
                key: key.clone(),
                amount: *amount,
            });
        }
        *totals.entry(key.clone()).or_default() += amount;
    }
    let overrun = totals.iter().find_map(|(key, used)| {
        let limit = *budgets.get(key)?;
        (*used > limit).then(|| Overrun::Budget {
            key: key.clone(),
            used: *used,
            limit,
        })
    });
    let text = serde_json::to_string(&totals).unwrap_or_default();
    Ok((Some(text), overrun))
}

/// Ends `run` as `status` with `reason` if it is still active (the caller holds its row lock or
/// this conditional update decides): status, reason and `finished_at`, the lease released,
/// its pending dispatch closed with `reason` (dead-lettered with a dead-lettered run, so it can
/// be redispatched; else cancelled), one history entry. Whether it ended it.
pub async fn end_active<C: ConnectionTrait>(
    txn: &C,
    run: &run::Model,
    status: RunStatus,
    reason: &str,
    detail: Option<String>,
    now: Millis,
) -> Result<bool, DbErr> {
    let ended = run::Entity::update_many()
        .col_expr(run::Column::Status, status.as_str().into())
        .col_expr(run::Column::EndReason, reason.into())
        .col_expr(run::Column::UpdatedAt, now.into())
        .col_expr(run::Column::FinishedAt, now.into())
        .filter(run::Column::Id.eq(run.id.as_str()))
        .filter(run::Column::Status.is_in(crate::ACTIVE))
        .exec(txn)
        .await?;
    if ended.rows_affected == 0 {
        return Ok(false);
    }
    // Whatever fencing token the run holds now (a pull re-claim moves it).
    let current = run::Entity::find_by_id(run.id.as_str())
        .one(txn)
        .await?
        .unwrap_or_else(|| run.clone());
    release_lease(txn, &current, now).await?;
    let closed = if status == RunStatus::DeadLettered {
        DispatchStatus::DeadLettered
    } else {
        DispatchStatus::Cancelled
    };
    dispatch::Entity::update_many()
        .col_expr(dispatch::Column::Status, closed.as_str().into())
        .col_expr(dispatch::Column::Reason, reason.into())
        .col_expr(dispatch::Column::ClaimToken, Option::<String>::None.into())
        .col_expr(dispatch::Column::ClaimedBy, Option::<String>::None.into())
        .col_expr(dispatch::Column::UpdatedAt, now.into())
        .filter(dispatch::Column::RunId.eq(run.id.as_str()))
        .filter(dispatch::Column::Status.eq(DispatchStatus::Pending))
        .exec(txn)
        .await?;
    crate::outbox::history(txn, &run.id, status, reason, detail, now).await?;
    Ok(true)
}

/// Ends the run `run_id` (if still active) in a transaction of its own; whether it did.
pub async fn end(
    db: &DatabaseConnection,
    run_id: &str,
    status: RunStatus,
    reason: &str,
    detail: Option<String>,
    now: Millis,
) -> Result<bool, RunError> {
    let txn = begin_write(db).await?;
    let Some(run) = run::Entity::find_by_id(run_id)
        .lock_exclusive()
        .one(&txn)
        .await?
    else {
        return Err(RunError::NotFound(run_id.to_owned()));
    };
    let ended = end_active(&txn, &run, status, reason, detail, now).await?;
    txn.commit().await?;
    Ok(ended)
}

/// Active runs whose deadline is at or before `now`, earliest first: read through the
/// `runs_deadline (status, deadline_at)` index, which holds only runs with a deadline where the
/// database has partial indexes (`deadline_at <= ?` implies `deadline_at IS NOT NULL`).
pub fn past_deadlines(now: Millis, limit: u64) -> Select<run::Entity> {
    run::Entity::find()
        .filter(run::Column::Status.is_in(crate::ACTIVE))
        .filter(run::Column::DeadlineAt.lte(now))
        .order_by_asc(run::Column::DeadlineAt)
        .limit(limit)
}

/// One pass of the deadline timer: ends up to `limit` active runs whose deadline has passed as
/// `failed` (`deadline_exceeded`). Rows another replica is ending are skipped (`SKIP LOCKED`),
/// and a run is ended only from an active status: each fires once. Returns the ended run ids.
pub async fn expire_deadlines(
    db: &DatabaseConnection,
    now: Millis,
    limit: u64,
) -> Result<Vec<String>, DbErr> {
    // A plain read first: most passes find nothing, and on SQLite a write transaction would
    // take the one write lock from the intake writer every second for nothing.
    let any_due = run::Entity::find()
        .select_only()
        .column(run::Column::Id)
        .filter(run::Column::Status.is_in(crate::ACTIVE))
        .filter(run::Column::DeadlineAt.lte(now))
        .limit(1)
        .into_tuple::<String>()
        .one(db)
        .await?;
    if any_due.is_none() {
        return Ok(Vec::new());
    }
    let txn = begin_write(db).await?;
    let due = past_deadlines(now, limit)
        .lock_with_behavior(LockType::Update, LockBehavior::SkipLocked)
        .all(&txn)
        .await?;
    let mut ended = Vec::with_capacity(due.len());
    for run in due {
        let Some(overrun) = past_deadline(&run, now) else {
            continue;
        };
        if end_active(
            &txn,
            &run,
            RunStatus::Failed,
            overrun.reason(),
            Some(overrun.detail()),
            now,
        )
        .await?
        {
            ended.push(run.id);
        }
    }
    txn.commit().await?;
    Ok(ended)
}

impl Store {
    /// Ends the run `run_id` as `status` for `reason` if it is still active (its lease
    /// released, its pending dispatch closed, one history entry), in a transaction of its own;
    /// whether this call ended it (a run ends once, however many callers race).
    pub async fn end_run(
        &self,
        run_id: &str,
        status: RunStatus,
        reason: &str,
        detail: Option<String>,
        now: Millis,
    ) -> Result<bool, RunError> {
        end(self.db(), run_id, status, reason, detail, now).await
    }

    /// One pass of the deadline timer: ends up to `limit` active runs whose deadline is at or
    /// before `now` as `failed` (`deadline_exceeded`); each fires once across replicas.
    /// Returns the ended run ids.
    pub async fn expire_deadlines(&self, now: Millis, limit: u64) -> Result<Vec<String>, DbErr> {
        expire_deadlines(self.db(), now, limit).await
    }
}
