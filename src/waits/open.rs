//! Opening a wait: a dispatched run (the holder of its current fencing token) pauses for input.
//! The wait row, the run's `needs_input` status, its history entry and the expiry timer (the
//! wait's `deadline`) commit in one transaction; the resume token exists only from that commit.

use std::time::Duration;

use sea_orm::{
    ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QuerySelect, SqlErr,
};
use switchyard_store::entities::dispatch::{self, DispatchStatus};
use switchyard_store::entities::run::{self, RunStatus};
use switchyard_store::entities::wait::{self, WaitStatus};
use switchyard_store::runs::begin_write;
use switchyard_store::{Millis, millis_rfc3339};
use uuid::Uuid;

/// Longest deadline a wait may have.
pub const MAX_DEADLINE: Duration = Duration::from_secs(366 * 24 * 3600);

/// What the worker asks for, checked ([`OpenRequest::check`]).
#[derive(Debug, Clone)]
pub struct OpenRequest {
    pub fencing_token: i64,
    pub wait_id: String,
    pub expects: String,
    pub proposal_id: String,
    pub proposal_digest: String,
    pub deadline: Duration,
    /// `fail` or `resume`.
    pub on_timeout: OnTimeout,
}

/// What happens when a wait's deadline passes without a resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnTimeout {
    /// The run fails (`wait_expired`) and releases its entity.
    Fail,
    /// The run resumes with decision `timeout`.
    Resume,
}

impl OnTimeout {
    pub fn as_str(self) -> &'static str {
        match self {
            OnTimeout::Fail => "fail",
            OnTimeout::Resume => "resume",
        }
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "fail" => Ok(OnTimeout::Fail),
            "resume" => Ok(OnTimeout::Resume),
            other => Err(format!(
                "`on_timeout` must be \"fail\" or \"resume\", not {other:?}"
            )),
        }
    }
}

/// Whether `digest` is a proposal digest this daemon accepts: `sha256:` and 64 lowercase hex
/// digits.
pub fn valid_digest(digest: &str) -> bool {
    digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// A field holding an id: 1 to 255 bytes, no control characters.
pub fn check_id(field: &str, value: &str) -> Result<(), String> {
    if value.trim().is_empty() || value.len() > crate::store::MAX_KEY_LEN {
        return Err(format!(
            "`{field}` must be 1 to {} bytes",
            crate::store::MAX_KEY_LEN
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(format!("`{field}` must not contain control characters"));
    }
    Ok(())
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

/// An opened wait and its token (shown once; only its hash is stored).
#[derive(Debug, Clone)]
pub struct Opened {
    pub wait: wait::Model,
    pub resume_token: String,
    pub run: run::Model,
}

/// Opens a wait on `run_id` (which the caller may see: tenancy is checked by the handler).
pub async fn open(
    db: &DatabaseConnection,
    run_id: &str,
    request: &OpenRequest,
    now: Millis,
) -> Result<Opened, OpenError> {
    let txn = begin_write(db).await?;
    let mut run = run::Entity::find_by_id(run_id)
        .lock_exclusive()
        .one(&txn)
        .await?
        .ok_or_else(|| OpenError::NotFound(run_id.to_owned()))?;
    if run.fencing_token != request.fencing_token {
        return Err(OpenError::StaleToken {
            run_id: run.id,
            given: request.fencing_token,
        });
    }
    // A push worker may open its wait before the dispatcher recorded the delivery (the run is
    // still `queued` with its start in flight): the wait's own commit records it as delivered.
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
        .filter(wait::Column::WaitId.eq(request.wait_id.as_str()))
        .one(&txn)
        .await?
        .is_some()
    {
        return Err(OpenError::DuplicateWait {
            run_id: run.id,
            wait_id: request.wait_id.clone(),
        });
    }
    let deadline = now.saturating_add(request.deadline.as_millis() as i64);
    // The lease is held while the wait is open: at least until a timeout resume could renew it.
    if !super::extend_lease(&txn, &run, deadline.saturating_add(run.lock_ttl_ms), now).await? {
        return Err(OpenError::LeaseLost(run.id));
    }
    let resume_token = super::new_token();
    let row = wait::Model {
        id: Uuid::now_v7().to_string(),
        tenant_id: run.tenant_id.clone(),
        run_id: run.id.clone(),
        workflow_id: run.workflow_id.clone(),
        wait_id: request.wait_id.clone(),
        expects: request.expects.clone(),
        proposal_id: request.proposal_id.clone(),
        proposal_digest: request.proposal_digest.clone(),
        token_hash: super::token_hash(&resume_token),
        status: WaitStatus::Open,
        on_timeout: request.on_timeout.as_str().to_owned(),
        deadline,
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
                wait_id: request.wait_id.clone(),
            });
        }
        return Err(error.into());
    }
    // The start (or an earlier resume) reached the worker, which is now waiting: a pull claim
    // or a push attempt still in flight is done, so it is not handed out again.
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
    switchyard_store::outbox::history(
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
            millis_rfc3339(deadline),
            row.on_timeout
        )),
        now,
    )
    .await?;
    txn.commit().await?;
    run.status = RunStatus::NeedsInput;
    run.updated_at = now;
    Ok(Opened {
        wait: row,
        resume_token,
        run,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha256_hex() {
        let good = format!("sha256:{}", "ab".repeat(32));
        assert!(valid_digest(&good));
        assert!(!valid_digest("sha256:abc"));
        assert!(!valid_digest(&good.to_uppercase()));
        assert!(!valid_digest(&format!("md5:{}", "ab".repeat(32))));
        assert!(!valid_digest(&format!("sha256:{}", "zz".repeat(32))));
    }
}
