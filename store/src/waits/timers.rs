//! Wait timeouts: the wait row is the timer (`waits (status, deadline)`). Firing is a
//! conditional update from `open` in the transaction that applies `on_timeout`, so a wait fires
//! once across replicas, and a deadline that passed while no daemon ran fires at the first
//! pass after start.

use sea_orm::{
    ColumnTrait, DatabaseTransaction, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
};

use crate::entities::dispatch::{self, DispatchStatus};
use crate::entities::run::{self, RunStatus};
use crate::entities::wait::{self, WaitStatus};
use crate::runs::begin_write;
use crate::{Millis, Store, millis_rfc3339};

/// What firing a wait did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitEnd {
    /// `on_timeout = "resume"`: the run was resumed with decision `timeout`.
    Resumed,
    /// `on_timeout = "fail"`: the run failed (`wait_expired`) and released its entity.
    Failed,
    /// The run had already ended: the wait was closed with it.
    Cancelled,
}

impl Store {
    /// Open waits whose deadline is at or before `now`, earliest first (at most `limit`).
    pub async fn due_waits(&self, now: Millis, limit: u64) -> Result<Vec<wait::Model>, DbErr> {
        wait::Entity::find()
            .filter(wait::Column::Status.eq(WaitStatus::Open))
            .filter(wait::Column::Deadline.lte(now))
            .order_by_asc(wait::Column::Deadline)
            .limit(limit)
            .all(self.db())
            .await
    }

    /// Fires the due `wait` in a transaction of its own: with its run still active, as its
    /// `on_timeout` says (resumed with decision `timeout`, the resume dispatched to `target`;
    /// or the run failed, `wait_expired`); else it is closed with its run. `None` when it was
    /// no longer open (another replica or a resume ended it first): each wait fires once.
    pub async fn fire_wait(
        &self,
        wait: &wait::Model,
        target: &str,
        now: Millis,
    ) -> Result<Option<WaitEnd>, DbErr> {
        let txn = begin_write(self.db()).await?;
        let run = run::Entity::find_by_id(wait.run_id.as_str())
            .lock_exclusive()
            .one(&txn)
            .await?;
        let active = run.as_ref().is_some_and(|r| r.status.is_active());
        let to = match (active, wait.on_timeout.as_str()) {
            (false, _) => WaitStatus::Cancelled,
            (true, "resume") => WaitStatus::TimedOut,
            (true, _) => WaitStatus::Expired,
        };
        let mut update = wait::Entity::update_many()
            .col_expr(wait::Column::Status, to.as_str().into())
            .col_expr(wait::Column::EndedAt, now.into());
        if to == WaitStatus::TimedOut {
            update = update
                .col_expr(wait::Column::Decision, "timeout".into())
                .col_expr(
                    wait::Column::DispatchId,
                    super::resume_dispatch_id(&wait.run_id, &wait.wait_id).into(),
                );
        }
        // The conditional update is what makes the timer fire once: on another replica (or
        // after a resume won the race) it changes nothing and this pass leaves the wait alone.
        let ended = update
            .filter(wait::Column::Id.eq(wait.id.as_str()))
            .filter(wait::Column::Status.eq(WaitStatus::Open))
            .exec(&txn)
            .await?;
        if ended.rows_affected != 1 {
            txn.rollback().await?;
            return Ok(None);
        }
        let Some(run) = run.filter(|_| active) else {
            txn.commit().await?;
            return Ok(Some(WaitEnd::Cancelled));
        };
        let deadline = millis_rfc3339(wait.deadline);
        if to == WaitStatus::TimedOut {
            let detail = format!(
                "wait {} timed out at {deadline}: resumed with decision timeout",
                wait.wait_id
            );
            super::resume_run(&txn, &run, wait, target, detail, now).await?;
            txn.commit().await?;
            return Ok(Some(WaitEnd::Resumed));
        }
        fail_run(&txn, &run, wait, &deadline, now).await?;
        txn.commit().await?;
        Ok(Some(WaitEnd::Failed))
    }
}

/// Ends `run` as `failed` (cause `wait_expired`): its lease is released, its pending dispatches
/// cancelled, its other open waits cancelled.
async fn fail_run(
    txn: &DatabaseTransaction,
    run: &run::Model,
    wait: &wait::Model,
    deadline: &str,
    now: Millis,
) -> Result<(), DbErr> {
    run::Entity::update_many()
        .col_expr(run::Column::Status, RunStatus::Failed.as_str().into())
        .col_expr(run::Column::UpdatedAt, now.into())
        .col_expr(run::Column::FinishedAt, now.into())
        .filter(run::Column::Id.eq(run.id.as_str()))
        .exec(txn)
        .await?;
    crate::runs::release_lease(txn, run, now).await?;
    dispatch::Entity::update_many()
        .col_expr(
            dispatch::Column::Status,
            DispatchStatus::Cancelled.as_str().into(),
        )
        .col_expr(dispatch::Column::Reason, "wait_expired".into())
        .col_expr(dispatch::Column::ClaimToken, Option::<String>::None.into())
        .col_expr(dispatch::Column::ClaimedBy, Option::<String>::None.into())
        .col_expr(dispatch::Column::UpdatedAt, now.into())
        .filter(dispatch::Column::RunId.eq(run.id.as_str()))
        .filter(dispatch::Column::Status.eq(DispatchStatus::Pending))
        .exec(txn)
        .await?;
    wait::Entity::update_many()
        .col_expr(wait::Column::Status, WaitStatus::Cancelled.as_str().into())
        .col_expr(wait::Column::EndedAt, now.into())
        .filter(wait::Column::RunId.eq(run.id.as_str()))
        .filter(wait::Column::Status.eq(WaitStatus::Open))
        .exec(txn)
        .await?;
    crate::outbox::history(
        txn,
        &run.id,
        RunStatus::Failed,
        "wait_expired",
        Some(format!(
            "wait {} expired at {deadline} without a resume (on_timeout fail)",
            wait.wait_id
        )),
        now,
    )
    .await
}
