//! Wait timeouts: a background task in every daemon fires the waits whose deadline has passed.
//! The wait row is the timer (`waits (status, deadline)`); firing is a conditional update from
//! `open` in the transaction that applies `on_timeout`, so a wait fires once across replicas, and
//! a deadline that passed while no daemon ran fires at the first pass after start.

use std::time::Duration;

use sea_orm::{
    ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
};
use switchyard_store::entities::dispatch::{self, DispatchStatus};
use switchyard_store::entities::run::{self, RunStatus};
use switchyard_store::entities::wait::{self, WaitStatus};
use switchyard_store::runs::begin_write;
use switchyard_store::{Millis, millis_rfc3339, now_millis};
use tokio::sync::watch;

use crate::background::Background;
use crate::dispatcher::Wake;
use crate::live::LiveConfig;

/// How often the timer task looks for due waits.
const PASS_EVERY: Duration = Duration::from_millis(500);
/// Most waits one pass fires.
const BATCH: u64 = 100;

/// The timer task of this daemon.
#[derive(Debug)]
pub struct WaitTimers(Background);

impl WaitTimers {
    pub fn start(db: DatabaseConnection, live: LiveConfig, wake: std::sync::Arc<Wake>) -> Self {
        Self(Background::spawn(move |stopped| {
            run(db, live, wake, stopped)
        }))
    }

    pub async fn shutdown(&self) {
        if !self.0.stop(Duration::from_secs(5)).await {
            tracing::warn!("the wait timer task did not stop within 5 s");
        }
    }
}

async fn run(
    db: DatabaseConnection,
    live: LiveConfig,
    wake: std::sync::Arc<Wake>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        match fire_due(&db, &live, now_millis()).await {
            Ok(fired) if fired.resumed > 0 => wake.runs_created(),
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "wait timer pass failed; the next pass retries it")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(PASS_EVERY) => {}
            _ = stopped.changed() => return,
        }
    }
}

/// What one pass fired.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Fired {
    /// Runs resumed with decision `timeout`.
    pub resumed: usize,
    /// Runs failed (`on_timeout = "fail"`).
    pub failed: usize,
    /// Waits whose run had already ended.
    pub cancelled: usize,
}

/// Fires every wait due at `now` (up to one batch).
pub async fn fire_due(
    db: &DatabaseConnection,
    live: &LiveConfig,
    now: Millis,
) -> Result<Fired, DbErr> {
    let due = wait::Entity::find()
        .filter(wait::Column::Status.eq(WaitStatus::Open))
        .filter(wait::Column::Deadline.lte(now))
        .order_by_asc(wait::Column::Deadline)
        .limit(BATCH)
        .all(db)
        .await?;
    let mut fired = Fired::default();
    for wait in due {
        fire(db, live, &wait, now, &mut fired).await?;
    }
    Ok(fired)
}

async fn fire(
    db: &DatabaseConnection,
    live: &LiveConfig,
    wait: &wait::Model,
    now: Millis,
    fired: &mut Fired,
) -> Result<(), DbErr> {
    let txn = begin_write(db).await?;
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
    // The conditional update is what makes the timer fire once: on another replica (or after a
    // resume won the race) it changes nothing and this pass leaves the wait alone.
    let ended = update
        .filter(wait::Column::Id.eq(wait.id.as_str()))
        .filter(wait::Column::Status.eq(WaitStatus::Open))
        .exec(&txn)
        .await?;
    if ended.rows_affected != 1 {
        txn.rollback().await?;
        return Ok(());
    }
    let Some(run) = run.filter(|_| active) else {
        txn.commit().await?;
        fired.cancelled += 1;
        return Ok(());
    };
    let deadline = millis_rfc3339(wait.deadline);
    if to == WaitStatus::TimedOut {
        let target = live.current().target_of(&run.workflow_id).to_owned();
        let detail = format!(
            "wait {} timed out at {deadline}: resumed with decision timeout",
            wait.wait_id
        );
        super::resume_run(&txn, &run, wait, &target, detail, now).await?;
        txn.commit().await?;
        fired.resumed += 1;
        tracing::info!(run_id = %run.id, wait_id = %wait.wait_id, "wait timed out; run resumed with decision timeout");
        return Ok(());
    }
    fail_run(&txn, &run, wait, &deadline, now).await?;
    txn.commit().await?;
    fired.failed += 1;
    crate::metrics::metrics().run_finished(RunStatus::Failed.as_str());
    tracing::info!(run_id = %run.id, wait_id = %wait.wait_id, "wait timed out; run failed and released its entity");
    Ok(())
}

/// Ends `run` as `failed` (cause `wait_expired`): its lease is released, its pending dispatches
/// cancelled, its other open waits cancelled.
async fn fail_run(
    txn: &sea_orm::DatabaseTransaction,
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
    switchyard_store::runs::release_lease(txn, run, now).await?;
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
    switchyard_store::outbox::history(
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
