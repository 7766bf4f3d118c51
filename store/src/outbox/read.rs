//! Reads of the outbox: a run's trail (dispatch, attempts, history) and the pending counts per
//! target that `/readyz`, the metrics and the console show.
//!
//! Invariant: reads only; each is one statement per table, bounded. `/readyz` and `/metrics`
//! read [`pending_of_targets`]: per target at most [`PENDING_COUNT_CAP`] entries of
//! `dispatches_due` and its first row, so a probe costs the same at a backlog of ten or ten
//! million (a `COUNT(*)` of every pending dispatch took 76 ms at 645,000 rows and grew with them).

use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
    Statement,
};

use crate::entities::run::{self, RunStatus};
use crate::entities::{dispatch, dispatch_attempt, run_history};

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

/// Where [`pending_of_targets`] stops counting: a figure of this many means at least this many.
pub const PENDING_COUNT_CAP: i64 = 10_000;

/// A target's backlog as a bounded probe sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingFigure {
    pub target: String,
    /// Pending dispatches, counted up to [`PENDING_COUNT_CAP`].
    pub count: i64,
    /// `count` reached the cap: there are at least that many.
    pub capped: bool,
    /// The creation time (epoch ms) of the pending dispatch due first (the first row of
    /// `dispatches_due` for the target): the oldest one unless a retry pushed an older one's
    /// due time back. `None` when nothing is pending.
    pub oldest: Option<i64>,
}

/// The bounded probe of one target's backlog: a count of at most [`PENDING_COUNT_CAP`]
/// entries of `dispatches_due (status, target, due_at)` and the creation time of its first
/// row. Public so the query-plan tests can check that it reads no whole table.
pub fn pending_probe(backend: sea_orm::DbBackend, target: &str) -> Statement {
    let (first, second) = match backend {
        sea_orm::DbBackend::Postgres => ("$1", "$2"),
        _ => ("?", "?"),
    };
    Statement::from_sql_and_values(
        backend,
        format!(
            "SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM dispatches WHERE status = 'pending' \
             AND target = {first} LIMIT {PENDING_COUNT_CAP}) AS p) AS pending, \
             (SELECT created_at FROM dispatches WHERE status = 'pending' AND target = {second} \
             ORDER BY due_at LIMIT 1) AS oldest"
        ),
        [target.into(), target.into()],
    )
}

/// The backlog of each of `targets`, one bounded probe each ([`pending_probe`]).
pub async fn pending_of_targets<C: ConnectionTrait>(
    db: &C,
    targets: &[&str],
) -> Result<Vec<PendingFigure>, DbErr> {
    let backend = db.get_database_backend();
    let mut figures = Vec::with_capacity(targets.len());
    for &target in targets {
        let row = db.query_one_raw(pending_probe(backend, target)).await?;
        let (count, oldest) = match row {
            Some(row) => (
                row.try_get::<i64>("", "pending")?,
                row.try_get::<Option<i64>>("", "oldest")?,
            ),
            None => (0, None),
        };
        figures.push(PendingFigure {
            target: target.to_owned(),
            count,
            capped: count >= PENDING_COUNT_CAP,
            oldest,
        });
    }
    Ok(figures)
}

/// Pending dispatches per target: `(target, count, oldest created_at)`, every pending row
/// counted (the console's; `/readyz` and `/metrics` read [`pending_of_targets`]).
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
