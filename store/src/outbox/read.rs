//! Reads of the outbox: a run's trail (dispatch, attempts, history) and the pending counts per
//! target that `/readyz`, the metrics and the console show.
//!
//! Invariant: reads only; each is one statement per table, bounded.

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
