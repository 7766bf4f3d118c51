//! The run lifecycle after routing: heartbeat (extend the lease), finish (release it), and
//! ([`reads`]) the reads of runs and leases. Both writes carry the fencing token the run was
//! dispatched with: a stale holder is refused with [`RunError::StaleToken`] (or
//! [`RunError::LeaseLost`]) and changes nothing, never silently accepted.

mod reads;

pub use reads::{
    RunFilter, RunRecord, get, held_locks, held_locks_of, held_locks_select, list, list_filtered,
    lock_of,
};

use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend,
    DbErr, EntityTrait, IsolationLevel, QueryFilter, QuerySelect, SqliteTransactionMode,
    TransactionOptions, TransactionTrait,
};

use crate::bounded::{Overrun, Report, Usage, account, end_active, past_deadline};
use crate::entities::dispatch::{self, DispatchStatus};
use crate::entities::entity_lock;
use crate::entities::run::{self, RunStatus};
use crate::lost_race::{is_lost_race, retried};
use crate::{Millis, Store};

/// Why a run operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("no run with id `{0}`")]
    NotFound(String),
    #[error("run `{run_id}` is already {}", status.as_str())]
    AlreadyFinished { run_id: String, status: RunStatus },
    #[error("`{}` is not a status a worker can finish with (use completed, failed, cancelled or superseded)", .0.as_str())]
    NotFinal(RunStatus),
    #[error(
        "a `superseded` finish needs `subject_version`: the version of the subject that made the run unnecessary"
    )]
    SupersededWithoutVersion,
    #[error("`usage.{key}` names no budget of this run (its budgets: {})", if known.is_empty() { "none".to_owned() } else { known.join(", ") })]
    UnknownUsage { key: String, known: Vec<String> },
    #[error("`usage.{key}` must be a finite number of at least 0, not {amount}")]
    BadUsage { key: String, amount: f64 },
    /// The daemon ended the run (now or before) because it passed a bound: `budget_exhausted`
    /// or `deadline_exceeded`.
    #[error("run `{run_id}` ended {reason}: {detail}")]
    Overrun {
        run_id: String,
        reason: &'static str,
        detail: String,
        /// Whether this call ended it (else it had ended before).
        ended_now: bool,
    },
    #[error("run `{0}` no longer holds its entity lease")]
    LeaseLost(String),
    /// The current token is not named: a stale holder must not learn it and act anyway.
    #[error("fencing token {given} is not the one run `{run_id}` holds now: this holder is stale")]
    StaleToken { run_id: String, given: i64 },
    #[error("run `{run_id}` is {} (only dead_lettered runs can be redispatched)", status.as_str())]
    NotDeadLettered { run_id: String, status: RunStatus },
    #[error(transparent)]
    Db(#[from] DbErr),
}

/// Starts a transaction that may write: `BEGIN IMMEDIATE` on SQLite (a deferred transaction that
/// reads then writes can fail with SQLITE_BUSY), READ COMMITTED elsewhere so row-locking reads
/// see the latest committed lease.
pub async fn begin_write(db: &DatabaseConnection) -> Result<DatabaseTransaction, DbErr> {
    if db.get_database_backend() == DbBackend::Sqlite {
        // Queue for the write lock here instead of in SQLite's coarse busy handler.
        let _turn = crate::write_turn::take().await;
        let options = TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
            ..Default::default()
        };
        return db.begin_with_options(options).await;
    }
    let options = TransactionOptions {
        isolation_level: Some(IsolationLevel::ReadCommitted),
        ..Default::default()
    };
    db.begin_with_options(options).await
}

/// The lease a heartbeat extended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub fencing_token: i64,
    pub expires_at: Millis,
}

async fn active_run<C: ConnectionTrait>(
    db: &C,
    run_id: &str,
    fencing_token: i64,
) -> Result<run::Model, RunError> {
    let run = run::Entity::find_by_id(run_id)
        .lock_exclusive()
        .one(db)
        .await?
        .ok_or_else(|| RunError::NotFound(run_id.to_owned()))?;
    if run.fencing_token != fencing_token {
        return Err(RunError::StaleToken {
            run_id: run.id,
            given: fencing_token,
        });
    }
    if run.status.is_finished() {
        return Err(RunError::AlreadyFinished {
            run_id: run.id,
            status: run.status,
        });
    }
    Ok(run)
}

/// Releases `run`'s entity lease if it still holds it (same run, same token). The row stays,
/// so the next holder's fencing token is larger.
pub async fn release_lease<C: ConnectionTrait>(
    txn: &C,
    run: &run::Model,
    now: Millis,
) -> Result<(), DbErr> {
    entity_lock::Entity::update_many()
        .col_expr(entity_lock::Column::RunId, Option::<String>::None.into())
        .col_expr(entity_lock::Column::ExpiresAt, now.into())
        .col_expr(entity_lock::Column::UpdatedAt, now.into())
        .filter(lease_of(run))
        .exec(txn)
        .await
        .map(|_| ())
}

fn lease_of(run: &run::Model) -> Condition {
    Condition::all()
        .add(entity_lock::Column::TenantId.eq(run.tenant_id.as_str()))
        .add(entity_lock::Column::TargetEntityId.eq(run.target_entity_id.as_str()))
        .add(entity_lock::Column::RunId.eq(run.id.as_str()))
        .add(entity_lock::Column::FencingToken.eq(run.fencing_token))
}

/// Ends `run` for `overrun` in `txn`, commits, and returns the refusal the worker gets.
async fn overrun(
    txn: DatabaseTransaction,
    run: &run::Model,
    overrun: Overrun,
    now: Millis,
) -> Result<Lease, RunError> {
    let detail = overrun.detail();
    end_active(
        &txn,
        run,
        RunStatus::Failed,
        overrun.reason(),
        Some(detail.clone()),
        now,
    )
    .await?;
    txn.commit().await?;
    Err(RunError::Overrun {
        run_id: run.id.clone(),
        reason: overrun.reason(),
        detail,
        ended_now: true,
    })
}

/// Extends an active run's lease by its workflow's lock TTL from `now`, adding `usage` to its
/// running totals. A run past its deadline, or whose totals pass a budget, is ended `failed`
/// instead ([`RunError::Overrun`]).
pub async fn heartbeat(
    db: &DatabaseConnection,
    run_id: &str,
    fencing_token: i64,
    usage: &Usage,
    now: Millis,
) -> Result<Lease, RunError> {
    let txn = begin_write(db).await?;
    let run = active_run(&txn, run_id, fencing_token).await?;
    if let Some(late) = past_deadline(&run, now) {
        return overrun(txn, &run, late, now).await;
    }
    let (totals, exhausted) = account(&run, usage)?;
    if totals != run.run_usage {
        run::Entity::update_many()
            .col_expr(run::Column::RunUsage, totals.clone().into())
            .filter(run::Column::Id.eq(run.id.as_str()))
            .exec(&txn)
            .await?;
    }
    if let Some(exhausted) = exhausted {
        return overrun(txn, &run, exhausted, now).await;
    }
    let mut expires_at = now.saturating_add(run.lock_ttl_ms);
    if run.status == RunStatus::NeedsInput {
        // An open wait holds the lease to its deadline: a heartbeat never shortens that.
        expires_at = expires_at.max(
            lock_of(&txn, &run.tenant_id, &run.target_entity_id)
                .await?
                .filter(|lease| lease.run_id.as_deref() == Some(run.id.as_str()))
                .map_or(0, |lease| lease.expires_at),
        );
    }
    let updated = entity_lock::Entity::update_many()
        .col_expr(entity_lock::Column::ExpiresAt, expires_at.into())
        .col_expr(entity_lock::Column::UpdatedAt, now.into())
        .filter(lease_of(&run))
        .exec(&txn)
        .await?;
    if updated.rows_affected == 0 {
        return Err(RunError::LeaseLost(run.id));
    }
    run::Entity::update_many()
        .col_expr(run::Column::UpdatedAt, now.into())
        .filter(run::Column::Id.eq(run.id.as_str()))
        .exec(&txn)
        .await?;
    // A heartbeating pull worker keeps its claim as long as its lease: it is alive and working.
    dispatch::Entity::update_many()
        .col_expr(dispatch::Column::DueAt, expires_at.into())
        .col_expr(dispatch::Column::UpdatedAt, now.into())
        .filter(dispatch::Column::RunId.eq(run.id.as_str()))
        .filter(dispatch::Column::Status.eq(DispatchStatus::Pending))
        .filter(dispatch::Column::ClaimToken.is_not_null())
        .filter(dispatch::Column::DueAt.gt(now))
        .filter(dispatch::Column::DueAt.lt(expires_at))
        .exec(&txn)
        .await?;
    crate::outbox::history(
        &txn,
        &run.id,
        run.status,
        "heartbeat",
        Some(format!("lease until {}", crate::millis_rfc3339(expires_at))),
        now,
    )
    .await?;
    txn.commit().await?;
    Ok(Lease {
        fencing_token: run.fencing_token,
        expires_at,
    })
}

/// Moves an active run to a final status and releases its lease (if it still holds it). The
/// lease row stays, so the next holder's fencing token is larger. A dispatch still pending is
/// closed: `delivered` if a pull worker holds a claim on it, else `cancelled`. The report's
/// usage is added to the run's totals, its versions recorded. A finish after the run's deadline
/// is recorded in its history as late and not applied ([`RunError::Overrun`]).
pub async fn finish(
    db: &DatabaseConnection,
    run_id: &str,
    fencing_token: i64,
    status: RunStatus,
    report: &Report,
    now: Millis,
) -> Result<run::Model, RunError> {
    if !matches!(
        status,
        RunStatus::Completed | RunStatus::Failed | RunStatus::Cancelled | RunStatus::Superseded
    ) {
        return Err(RunError::NotFinal(status));
    }
    if status == RunStatus::Superseded && report.subject_version.is_none() {
        return Err(RunError::SupersededWithoutVersion);
    }
    let txn = begin_write(db).await?;
    let mut run = match active_run(&txn, run_id, fencing_token).await {
        Err(RunError::AlreadyFinished {
            run_id,
            status: ended,
        }) => {
            return finished_late(txn, &run_id, ended, status, now).await;
        }
        other => other?,
    };
    if let Some(late) = past_deadline(&run, now) {
        let detail = late.detail();
        end_active(
            &txn,
            &run,
            RunStatus::Failed,
            late.reason(),
            Some(detail.clone()),
            now,
        )
        .await?;
        return finished_late(txn, &run.id, RunStatus::Failed, status, now)
            .await
            .map_err(|error| match error {
                RunError::Overrun {
                    run_id,
                    reason,
                    detail,
                    ..
                } => RunError::Overrun {
                    run_id,
                    reason,
                    detail,
                    ended_now: true,
                },
                other => other,
            });
    }
    let (totals, _) = account(&run, &report.usage)?;
    run::Entity::update_many()
        .col_expr(run::Column::Status, status.as_str().into())
        .col_expr(run::Column::UpdatedAt, now.into())
        .col_expr(run::Column::FinishedAt, now.into())
        .col_expr(run::Column::RunUsage, totals.clone().into())
        .col_expr(
            run::Column::WorkerVersion,
            report.worker_version.clone().into(),
        )
        .col_expr(
            run::Column::SubjectVersion,
            report.subject_version.clone().into(),
        )
        .filter(run::Column::Id.eq(run.id.as_str()))
        .exec(&txn)
        .await?;
    run.run_usage = totals;
    run.worker_version.clone_from(&report.worker_version);
    run.subject_version.clone_from(&report.subject_version);
    release_lease(&txn, &run, now).await?;
    close_dispatch(&txn, &run.id, now).await?;
    // Its open waits end with it: a later resume is `no_wait_match`, their timers never fire.
    crate::entities::wait::Entity::update_many()
        .col_expr(
            crate::entities::wait::Column::Status,
            crate::entities::wait::WaitStatus::Cancelled.as_str().into(),
        )
        .col_expr(crate::entities::wait::Column::EndedAt, now.into())
        .filter(crate::entities::wait::Column::RunId.eq(run.id.as_str()))
        .filter(crate::entities::wait::Column::Status.eq(crate::entities::wait::WaitStatus::Open))
        .exec(&txn)
        .await?;
    let detail = [
        report
            .subject_version
            .as_ref()
            .map(|version| format!("superseded by subject version {version}")),
        report.actor.as_ref().map(|actor| format!("by {actor}")),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join("; ");
    let detail = (!detail.is_empty()).then_some(detail);
    crate::outbox::history(&txn, &run.id, status, "finished", detail, now).await?;
    txn.commit().await?;
    run.status = status;
    run.updated_at = now;
    run.finished_at = Some(now);
    Ok(run)
}

/// Records a finish that came after the run ended for its deadline (now or before): a history
/// entry, the run unchanged. A run that ended otherwise is [`RunError::AlreadyFinished`].
async fn finished_late(
    txn: DatabaseTransaction,
    run_id: &str,
    ended: RunStatus,
    reported: RunStatus,
    now: Millis,
) -> Result<run::Model, RunError> {
    let run = get(&txn, run_id)
        .await?
        .ok_or_else(|| RunError::NotFound(run_id.to_owned()))?;
    let Some(deadline) = run.deadline_at.filter(|d| *d <= now) else {
        return Err(RunError::AlreadyFinished {
            run_id: run.id,
            status: ended,
        });
    };
    let detail = format!(
        "the worker finished it {} at {}, after its deadline {}: recorded, not applied",
        reported.as_str(),
        crate::millis_rfc3339(now),
        crate::millis_rfc3339(deadline)
    );
    crate::outbox::history(
        &txn,
        &run.id,
        ended,
        "finished_late",
        Some(detail.clone()),
        now,
    )
    .await?;
    txn.commit().await?;
    Err(RunError::Overrun {
        run_id: run.id,
        reason: "deadline_exceeded",
        detail,
        ended_now: false,
    })
}

/// Closes a run's pending dispatch when the run ends: nothing more to deliver.
async fn close_dispatch<C: ConnectionTrait>(
    txn: &C,
    run_id: &str,
    now: Millis,
) -> Result<(), DbErr> {
    for (claimed, status) in [
        (true, DispatchStatus::Delivered),
        (false, DispatchStatus::Cancelled),
    ] {
        let claim = if claimed {
            dispatch::Column::ClaimToken.is_not_null()
        } else {
            dispatch::Column::ClaimToken.is_null()
        };
        dispatch::Entity::update_many()
            .col_expr(dispatch::Column::Status, status.as_str().into())
            .col_expr(dispatch::Column::ClaimToken, Option::<String>::None.into())
            .col_expr(dispatch::Column::ClaimedBy, Option::<String>::None.into())
            .col_expr(dispatch::Column::UpdatedAt, now.into())
            .filter(dispatch::Column::RunId.eq(run_id))
            .filter(dispatch::Column::Status.eq(DispatchStatus::Pending))
            .filter(claim)
            .exec(txn)
            .await?;
    }
    Ok(())
}

impl Store {
    /// Extends an active run's lease by its workflow's lock TTL from `now`, as the holder of
    /// `fencing_token`, adding `usage` to its running totals. A stale token is refused and
    /// changes nothing; a run past its deadline, or whose totals pass a budget, is ended
    /// `failed` instead ([`RunError::Overrun`]).
    pub async fn heartbeat(
        &self,
        run_id: &str,
        fencing_token: i64,
        usage: &Usage,
        now: Millis,
    ) -> Result<Lease, RunError> {
        retried(WORKER_TRIES, lost_a_race, || {
            heartbeat(self.db(), run_id, fencing_token, usage, now)
        })
        .await
    }

    /// Moves an active run to a final `status` as the holder of `fencing_token` and releases
    /// its lease (the row stays, so the next holder's token is larger); closes its pending
    /// dispatch and open waits. A stale token is refused and changes nothing; a finish after
    /// the deadline is recorded, not applied ([`RunError::Overrun`]).
    pub async fn finish_run(
        &self,
        run_id: &str,
        fencing_token: i64,
        status: RunStatus,
        report: &Report,
        now: Millis,
    ) -> Result<run::Model, RunError> {
        retried(WORKER_TRIES, lost_a_race, || {
            finish(self.db(), run_id, fencing_token, status, report, now)
        })
        .await
    }
}

/// Tries of a worker's heartbeat or finish that keeps losing races.
const WORKER_TRIES: usize = 3;

/// A worker's heartbeat or finish refused because another transaction took the same rows in
/// the other order (intake's takeover of an expired lease takes the lease, then the old run) is
/// tried again ([`crate::lost_race`]): the worker did nothing wrong, and the next try sees the
/// other transaction's result (a lease lost, a run already ended) or goes through.
fn lost_a_race(error: &RunError) -> bool {
    matches!(error, RunError::Db(error) if is_lost_race(error))
}
