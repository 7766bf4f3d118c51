//! Opening a wait: a dispatched run (the holder of its current fencing token) pauses for input.
//! The wait row, the run's `needs_input` status, its history entry and the expiry timer (the
//! wait's `deadline`) commit in one transaction; the lease is held at least until a timeout
//! resume could renew it.

use sea_orm::{ColumnTrait, DbErr, EntityTrait, QueryFilter, QuerySelect, SqlErr};
use uuid::Uuid;

use crate::entities::dispatch::{self, DispatchStatus};
use crate::entities::run::{self, RunStatus};
use crate::entities::wait::{self, WaitStatus};
use crate::runs::begin_write;
use crate::{Millis, Store, millis_rfc3339};

/// A wait to open, checked by the caller.
#[derive(Debug, Clone)]
pub struct NewWait {
    /// The token the opening worker holds the run with.
    pub fencing_token: i64,
    pub wait_id: String,
    pub expects: String,
    pub proposal_id: String,
    pub proposal_digest: String,
    /// SHA-256 (hex) of the resume token: the token itself is never stored.
    pub token_hash: String,
    /// When it times out.
    pub deadline: Millis,
    /// `fail` or `resume`.
    pub on_timeout: String,
    /// An approval message to post to Slack for it, written with it (`slack_messages`).
    pub notify: Option<crate::slack_messages::NewSlackMessage>,
}

/// Why a wait could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("no run with id `{0}`")]
    NotFound(String),
    /// The current token is not named: a stale holder must not learn it and act anyway.
    #[error("fencing token {given} is not the one run `{run_id}` holds now: this holder is stale")]
    StaleToken { run_id: String, given: i64 },
    #[error("run `{0}` no longer holds its entity lease")]
    LeaseLost(String),
    #[error("run `{run_id}` is {status}: only a dispatched run can open a wait")]
    NotDispatched {
        run_id: String,
        status: &'static str,
    },
    #[error("run `{run_id}` already has a wait `{wait_id}` (each wait id is used once per run)")]
    DuplicateWait { run_id: String, wait_id: String },
    #[error(transparent)]
    Db(#[from] DbErr),
}

impl Store {
    /// Opens the wait `new` on `run_id` as the holder of its fencing token: the wait row, the
    /// run's `needs_input` status (a start still in flight is recorded delivered), the lease
    /// held until the deadline plus the run's TTL, one history entry. A stale token, a run not
    /// dispatched, a wait id used before or a lost lease is refused and changes nothing.
    /// Returns the wait and the run as they are now.
    pub async fn open_wait(
        &self,
        run_id: &str,
        new: &NewWait,
        now: Millis,
    ) -> Result<(wait::Model, run::Model), OpenError> {
        let txn = begin_write(self.db()).await?;
        let mut run = run::Entity::find_by_id(run_id)
            .lock_exclusive()
            .one(&txn)
            .await?
            .ok_or_else(|| OpenError::NotFound(run_id.to_owned()))?;
        if run.fencing_token != new.fencing_token {
            return Err(OpenError::StaleToken {
                run_id: run.id,
                given: new.fencing_token,
            });
        }
        // A push worker may open its wait before the dispatcher recorded the delivery (the run
        // is still `queued` with its start in flight): the wait's own commit records it as
        // delivered.
        let in_flight = run.status == RunStatus::Queued
            && dispatch::Entity::find()
                .filter(dispatch::Column::RunId.eq(run.id.as_str()))
                .filter(dispatch::Column::Status.eq(DispatchStatus::Pending))
                .filter(dispatch::Column::ClaimedBy.is_not_null())
                .limit(1)
                .one(&txn)
                .await?
                .is_some();
        if !matches!(run.status, RunStatus::Dispatched | RunStatus::NeedsInput) && !in_flight {
            return Err(OpenError::NotDispatched {
                run_id: run.id,
                status: run.status.as_str(),
            });
        }
        if wait::Entity::find()
            .filter(wait::Column::RunId.eq(run.id.as_str()))
            .filter(wait::Column::WaitId.eq(new.wait_id.as_str()))
            .one(&txn)
            .await?
            .is_some()
        {
            return Err(OpenError::DuplicateWait {
                run_id: run.id,
                wait_id: new.wait_id.clone(),
            });
        }
        let until = new.deadline.saturating_add(run.lock_ttl_ms);
        if !super::extend_lease(&txn, &run, until, now).await? {
            return Err(OpenError::LeaseLost(run.id));
        }
        let row = wait::Model {
            id: Uuid::now_v7().to_string(),
            tenant_id: run.tenant_id.clone(),
            run_id: run.id.clone(),
            workflow_id: run.workflow_id.clone(),
            wait_id: new.wait_id.clone(),
            expects: new.expects.clone(),
            proposal_id: new.proposal_id.clone(),
            proposal_digest: new.proposal_digest.clone(),
            token_hash: new.token_hash.clone(),
            status: WaitStatus::Open,
            on_timeout: new.on_timeout.clone(),
            deadline: new.deadline,
            decision: None,
            actor: None,
            resumed_by: None,
            dispatch_id: None,
            created_at: now,
            ended_at: None,
        };
        if let Err(error) = wait::Entity::insert(wait::ActiveModel::from(row.clone()))
            .exec_without_returning(&txn)
            .await
        {
            // Two opens of one wait id racing: the loser is told as if it came second.
            if matches!(error.sql_err(), Some(SqlErr::UniqueConstraintViolation(_))) {
                return Err(OpenError::DuplicateWait {
                    run_id: run.id,
                    wait_id: new.wait_id.clone(),
                });
            }
            return Err(error.into());
        }
        if let Some(notify) = &new.notify {
            crate::entities::slack_message::Entity::insert(crate::slack_messages::row_for(
                notify, &row, now,
            ))
            .exec_without_returning(&txn)
            .await?;
        }
        // The start (or an earlier resume) reached the worker, which is now waiting: a pull
        // claim or a push attempt still in flight is done, so it is not handed out again.
        dispatch::Entity::update_many()
            .col_expr(
                dispatch::Column::Status,
                DispatchStatus::Delivered.as_str().into(),
            )
            .col_expr(dispatch::Column::ClaimToken, Option::<String>::None.into())
            .col_expr(dispatch::Column::ClaimedBy, Option::<String>::None.into())
            .col_expr(dispatch::Column::DeliveredAt, now.into())
            .col_expr(dispatch::Column::UpdatedAt, now.into())
            .filter(dispatch::Column::RunId.eq(run.id.as_str()))
            .filter(dispatch::Column::Status.eq(DispatchStatus::Pending))
            .filter(dispatch::Column::ClaimedBy.is_not_null())
            .exec(&txn)
            .await?;
        run::Entity::update_many()
            .col_expr(run::Column::Status, RunStatus::NeedsInput.as_str().into())
            .col_expr(run::Column::UpdatedAt, now.into())
            .filter(run::Column::Id.eq(run.id.as_str()))
            .exec(&txn)
            .await?;
        crate::outbox::history(
            &txn,
            &run.id,
            RunStatus::NeedsInput,
            "wait_opened",
            Some(format!(
                "wait {} expects {} on proposal {} ({}) until {}; on timeout: {}",
                row.wait_id,
                row.expects,
                row.proposal_id,
                row.proposal_digest,
                millis_rfc3339(new.deadline),
                row.on_timeout
            )),
            now,
        )
        .await?;
        txn.commit().await?;
        run.status = RunStatus::NeedsInput;
        run.updated_at = now;
        Ok((row, run))
    }
}
