//! Durable waits: a dispatched run pauses for input (an approval, an answer) and resumes only on
//! the delivery meant for it.
//!
//! - [`open`]: `POST /v1/runs/{id}/waits` writes the wait row, the run's `needs_input` status,
//!   its history entry and the expiry timer (the wait row's `deadline`) in one transaction, and
//!   hands out a resume token whose SHA-256 is all that is stored.
//! - [`resume`]: every resume attempt (API, canonical event, CloudEvent, Slack button) is one
//!   authenticated delivery decided in one transaction that also writes its ledger row, with one
//!   named outcome: `no_wait_match`, `duplicate`, `wait_expired`, `reapproval_required`,
//!   `unauthorized_source` or `resumed`.
//! - [`timers`]: the background task that fires due waits (`on_timeout`: fail or resume).
//! - [`message`]: what a `switchyard.run.resume` message carries.
//!
//! *Invariant: a wait ends once.* Every change to a wait is a conditional update from `open`
//! inside the transaction that writes its effects (the run's status, its resume dispatch, its
//! history, the delivery's ledger row), so racing resumes, timers on several replicas and a
//! resume racing the opening all resolve in the database: one wins, the others see it ended.

pub mod message;
pub mod open;
pub mod resume;
pub mod timers;

use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect};
use switchyard_store::Millis;
use switchyard_store::entities::dispatch::{self, DispatchStatus};
use switchyard_store::entities::entity_lock;
use switchyard_store::entities::run::{self, RunStatus};
use switchyard_store::entities::wait::{self, WaitStatus};
use uuid::Uuid;

/// A new resume token: opaque, 244 random bits (two v4 UUIDs), prefixed so it is recognisable
/// in logs and secret scanners.
pub fn new_token() -> String {
    format!(
        "swyw_{}{}",
        Uuid::new_v4().simple(),
        Uuid::new_v4().simple()
    )
}

/// What is stored of a token: its SHA-256, hex.
pub fn token_hash(token: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// The dispatch id (and so the CloudEvents id) of the resume message of `wait_id` of `run_id`:
/// derived from both, so it is the same on every attempt, replica and restart, and a second
/// resume row for the same wait cannot exist (primary key).
pub fn resume_dispatch_id(run_id: &str, wait_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("switchyard.run.resume\n{run_id}\n{wait_id}").as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes)
        .into_uuid()
        .to_string()
}

/// Resumes `run` after `wait` ended with `decision`: writes the resume dispatch (due now, to the
/// run's target), extends the lease by the run's TTL, and moves the run back to `dispatched`
/// unless another of its waits is still open. The caller has already ended the wait with a
/// conditional update. Returns the dispatch id.
pub(crate) async fn resume_run<C: ConnectionTrait>(
    txn: &C,
    run: &run::Model,
    wait: &wait::Model,
    target: &str,
    history_detail: String,
    now: Millis,
) -> Result<String, DbErr> {
    let dispatch_id = resume_dispatch_id(&run.id, &wait.wait_id);
    dispatch::Entity::insert(dispatch::ActiveModel::from(dispatch::Model {
        id: dispatch_id.clone(),
        run_id: run.id.clone(),
        tenant_id: run.tenant_id.clone(),
        workflow_id: run.workflow_id.clone(),
        target: target.to_owned(),
        status: DispatchStatus::Pending,
        attempts: 0,
        series: 1,
        due_at: now,
        claimed_by: None,
        claim_token: None,
        reason: None,
        last_error: None,
        created_at: now,
        updated_at: now,
        delivered_at: None,
        wait_id: Some(wait.wait_id.clone()),
    }))
    .exec_without_returning(txn)
    .await?;
    let still_open = wait::Entity::find()
        .filter(wait::Column::RunId.eq(run.id.as_str()))
        .filter(wait::Column::Status.eq(WaitStatus::Open))
        .limit(1)
        .one(txn)
        .await?
        .is_some();
    let status = if still_open {
        RunStatus::NeedsInput
    } else {
        RunStatus::Dispatched
    };
    run::Entity::update_many()
        .col_expr(run::Column::Status, status.as_str().into())
        .col_expr(run::Column::UpdatedAt, now.into())
        .filter(run::Column::Id.eq(run.id.as_str()))
        .filter(run::Column::Status.is_in(switchyard_store::ACTIVE))
        .exec(txn)
        .await?;
    extend_lease(txn, run, now.saturating_add(run.lock_ttl_ms), now).await?;
    switchyard_store::outbox::history(txn, &run.id, status, "resumed", Some(history_detail), now)
        .await
        .map(|_| dispatch_id)
}

/// Moves `run`'s lease expiry to at least `until`, if the run still holds it (same holder and
/// fencing token); whether it does.
pub(crate) async fn extend_lease<C: ConnectionTrait>(
    txn: &C,
    run: &run::Model,
    until: Millis,
    now: Millis,
) -> Result<bool, DbErr> {
    let Some(lease) =
        entity_lock::Entity::find_by_id((run.tenant_id.clone(), run.target_entity_id.clone()))
            .lock_exclusive()
            .one(txn)
            .await?
    else {
        return Ok(false);
    };
    if lease.run_id.as_deref() != Some(run.id.as_str()) || lease.fencing_token != run.fencing_token
    {
        return Ok(false);
    }
    if lease.expires_at < until {
        entity_lock::Entity::update_many()
            .col_expr(entity_lock::Column::ExpiresAt, until.into())
            .col_expr(entity_lock::Column::UpdatedAt, now.into())
            .filter(entity_lock::Column::TenantId.eq(run.tenant_id.as_str()))
            .filter(entity_lock::Column::TargetEntityId.eq(run.target_entity_id.as_str()))
            .filter(entity_lock::Column::RunId.eq(run.id.as_str()))
            .filter(entity_lock::Column::FencingToken.eq(run.fencing_token))
            .exec(txn)
            .await?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_random_and_only_their_hash_is_kept() {
        let (a, b) = (new_token(), new_token());
        assert_ne!(a, b);
        assert!(a.starts_with("swyw_") && a.len() == 5 + 64, "{a}");
        assert_eq!(token_hash(&a).len(), 64);
        assert_ne!(token_hash(&a), token_hash(&b));
        assert!(!token_hash(&a).contains(&a[5..]));
    }

    #[test]
    fn resume_ids_are_stable_per_run_and_wait() {
        let id = resume_dispatch_id("r1", "approve");
        assert_eq!(id, resume_dispatch_id("r1", "approve"));
        assert_ne!(id, resume_dispatch_id("r1", "approve-2"));
        assert_ne!(id, resume_dispatch_id("r2", "approve"));
        assert_eq!(id.len(), 36);
        assert!(Uuid::parse_str(&id).is_ok());
    }
}
