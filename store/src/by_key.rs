//! Statements over a list of keys, which filter on the key alone.
//!
//! Invariant: a statement given a list of ids (or run ids) never also filters on `status` in
//! its WHERE clause. Without planner statistics (SQLite always; PostgreSQL until `ANALYZE`,
//! and never when autovacuum is off) both planners prefer an index led by `status` to a list
//! of more than a few keys and walk every row in that status: behind a receiver outage's
//! 160,000 queued runs, one `UPDATE runs ... WHERE id IN (256 ids) AND status = 'queued'` read
//! all of them (40 ms on PostgreSQL), and on SQLite reading back 256 claimed dispatches took
//! 100-270 ms behind 300,000 pending ones. Reads check the status on the rows they get back;
//! updates set each column through a `CASE` on the status, so a row in another status keeps
//! its values.
//! The e2e test `query_plans` asks both databases for the plan of every statement here.

use sea_orm::sea_query::{Expr, SimpleExpr};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, Select, UpdateMany, Value};

use crate::ACTIVE;
use crate::Millis;
use crate::entities::dispatch::{self, DispatchStatus};
use crate::entities::run::{self, RunStatus};

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
    update_where_status(
        run::Column::Id,
        ids,
        run::Column::Status,
        &[RunStatus::Queued.as_str()],
        [
            (run::Column::Status, RunStatus::Dispatched.as_str().into()),
            (run::Column::UpdatedAt, now.into()),
        ],
    )
}

/// Those of these runs still active expire (they lost their entity lease).
pub fn runs_expired(ids: impl IntoIterator<Item = String>, now: Millis) -> UpdateMany<run::Entity> {
    update_where_status(
        run::Column::Id,
        ids,
        run::Column::Status,
        &ACTIVE,
        [
            (run::Column::Status, RunStatus::Expired.as_str().into()),
            (run::Column::UpdatedAt, now.into()),
            (run::Column::FinishedAt, now.into()),
        ],
    )
}

/// The pending dispatches of these runs are cancelled with `reason` (nothing is left to deliver
/// for a run that ended); delivered or dead-lettered ones stay as they are.
pub fn pending_dispatches_cancelled(
    run_ids: impl IntoIterator<Item = String>,
    reason: &str,
    now: Millis,
) -> UpdateMany<dispatch::Entity> {
    update_where_status(
        dispatch::Column::RunId,
        run_ids,
        dispatch::Column::Status,
        &[DispatchStatus::Pending.as_str()],
        [
            (
                dispatch::Column::Status,
                DispatchStatus::Cancelled.as_str().into(),
            ),
            (dispatch::Column::Reason, reason.into()),
            (dispatch::Column::ClaimToken, Option::<String>::None.into()),
            (dispatch::Column::UpdatedAt, now.into()),
        ],
    )
}

/// An update of the rows whose `key` is one of `keys` that applies `changes` only to those whose
/// `status` is one of `statuses`: the WHERE clause names the key alone, and each column is set
/// through a `CASE` that leaves a row in another status as it is (the status itself last).
pub(crate) fn update_where_status<E: EntityTrait>(
    key: E::Column,
    keys: impl IntoIterator<Item = String>,
    status: E::Column,
    statuses: &[&str],
    changes: impl IntoIterator<Item = (E::Column, Value)>,
) -> UpdateMany<E> {
    let changed = |column: E::Column, value: Value| -> SimpleExpr {
        Expr::case(status.is_in(statuses.iter().copied()), Expr::val(value))
            .finally(Expr::col(column))
            .into()
    };
    // The status is set last: MySQL evaluates a SET list left to right, so a CASE after the
    // status's own would see the new status and leave its row as it was.
    let (mut changes, status_last): (Vec<_>, Vec<_>) = changes
        .into_iter()
        .partition(|(column, _)| std::mem::discriminant(column) != std::mem::discriminant(&status));
    changes.extend(status_last);
    changes
        .into_iter()
        .fold(E::update_many(), |update, (column, value)| {
            update.col_expr(column, changed(column, value))
        })
        .filter(key.is_in(keys))
}
