//! Statements over a list of keys, which filter on the key alone.
//!
//! Invariant: a statement given a list of ids (or run ids) never also filters on `status` in
//! its WHERE clause. Without planner statistics (SQLite always; PostgreSQL until `ANALYZE`,
//! and never when autovacuum is off) both planners prefer an index led by `status` to a list
//! of more than a few keys and walk every row in that status: behind a receiver outage's
//! 160,000 queued runs, one `UPDATE runs ... WHERE id IN (256 ids) AND status = 'queued'` read
//! all of them (40 ms on PostgreSQL), and on SQLite reading back 256 claimed dispatches took
//! 100-270 ms behind 300,000 pending ones. Reads check the status on the rows they get back;
//! updates set each column through [`if_status`], so a row in another status keeps its values.
//! The e2e test `query_plans` asks both databases for the plan of every statement here.

use sea_orm::sea_query::{Expr, SimpleExpr};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, Select, UpdateMany, Value};

use crate::Millis;
use crate::entities::dispatch::{self, DispatchStatus};
use crate::entities::run::{self, RunStatus};
use crate::lock_batch::ACTIVE;

/// The dispatches with these ids.
pub fn dispatches(ids: impl IntoIterator<Item = String>) -> Select<dispatch::Entity> {
    dispatch::Entity::find().filter(dispatch::Column::Id.is_in(ids))
}

/// The dispatches of these runs.
pub fn dispatches_of_runs(run_ids: impl IntoIterator<Item = String>) -> Select<dispatch::Entity> {
    dispatch::Entity::find().filter(dispatch::Column::RunId.is_in(run_ids))
}

/// The runs with these ids.
pub fn runs(ids: impl IntoIterator<Item = String>) -> Select<run::Entity> {
    run::Entity::find().filter(run::Column::Id.is_in(ids))
}

/// Those of these runs still queued become dispatched (a run that ended meanwhile keeps its
/// status).
pub fn runs_dispatched(
    ids: impl IntoIterator<Item = String>,
    now: Millis,
) -> UpdateMany<run::Entity> {
    let queued = [RunStatus::Queued.as_str()];
    let set = |column, value: Value| if_status(run::Column::Status, &queued, column, value);
    run::Entity::update_many()
        .col_expr(
            run::Column::Status,
            set(run::Column::Status, RunStatus::Dispatched.as_str().into()),
        )
        .col_expr(
            run::Column::UpdatedAt,
            set(run::Column::UpdatedAt, now.into()),
        )
        .filter(run::Column::Id.is_in(ids))
}

/// Those of these runs still active expire (they lost their entity lease).
pub fn runs_expired(ids: impl IntoIterator<Item = String>, now: Millis) -> UpdateMany<run::Entity> {
    let set = |column, value: Value| if_status(run::Column::Status, &ACTIVE, column, value);
    run::Entity::update_many()
        .col_expr(
            run::Column::Status,
            set(run::Column::Status, RunStatus::Expired.as_str().into()),
        )
        .col_expr(
            run::Column::UpdatedAt,
            set(run::Column::UpdatedAt, now.into()),
        )
        .col_expr(
            run::Column::FinishedAt,
            set(run::Column::FinishedAt, now.into()),
        )
        .filter(run::Column::Id.is_in(ids))
}

/// The pending dispatches of these runs are cancelled with `reason` (nothing is left to deliver
/// for a run that ended); delivered or dead-lettered ones stay as they are.
pub fn pending_dispatches_cancelled(
    run_ids: impl IntoIterator<Item = String>,
    reason: &str,
    now: Millis,
) -> UpdateMany<dispatch::Entity> {
    let pending = [DispatchStatus::Pending.as_str()];
    let set = |column, value: Value| if_status(dispatch::Column::Status, &pending, column, value);
    dispatch::Entity::update_many()
        .col_expr(
            dispatch::Column::Status,
            set(
                dispatch::Column::Status,
                DispatchStatus::Cancelled.as_str().into(),
            ),
        )
        .col_expr(
            dispatch::Column::Reason,
            set(dispatch::Column::Reason, reason.into()),
        )
        .col_expr(
            dispatch::Column::ClaimToken,
            set(dispatch::Column::ClaimToken, Option::<String>::None.into()),
        )
        .col_expr(
            dispatch::Column::UpdatedAt,
            set(dispatch::Column::UpdatedAt, now.into()),
        )
        .filter(dispatch::Column::RunId.is_in(run_ids))
}

/// `value` where `status_column` is one of `statuses`, else `column` as it is: a conditional
/// SET for an update whose WHERE clause names only keys.
pub fn if_status<S, C>(status_column: S, statuses: &[&str], column: C, value: Value) -> SimpleExpr
where
    S: ColumnTrait,
    C: ColumnTrait,
{
    Expr::case(
        status_column.is_in(statuses.iter().copied()),
        Expr::val(value),
    )
    .finally(Expr::col(column))
    .into()
}
