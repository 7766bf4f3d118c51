//! Durable waits: a dispatched run pauses for input and resumes only on the delivery meant for
//! it. [`open`] writes a wait, [`resume`] applies a resume the daemon judged, [`timers`] fires
//! waits whose deadline passed; this module holds what they share (the resume dispatch, the
//! lease kept while waiting) and the reads of waits.
//!
//! *Invariant: a wait ends once.* Every change to a wait is a conditional update from `open`
//! inside the transaction that writes its effects (the run's status, its resume dispatch, its
//! history, the delivery's ledger row), so racing resumes, timers on several replicas and a
//! resume racing the opening all resolve in the database: one wins, the others see it ended.

pub mod open;
pub mod resume;
pub mod timers;

use std::collections::HashMap;

use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect};

pub use open::{NewWait, OpenError};
pub use resume::{Resolution, Resume, ResumeKey, ResumeWrite};
pub use timers::WaitEnd;

use crate::entities::dispatch::{self, DispatchStatus};
use crate::entities::run::{self, RunStatus};
use crate::entities::wait::{self, WaitStatus};
use crate::entities::{entity_lock, intake};
use crate::{Millis, Store};

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

/// Resumes `run` after `wait` ended: writes the resume dispatch (due now, to `target`), extends
/// the lease by the run's TTL, and moves the run back to `dispatched` unless another of its
/// waits is still open. The caller has already ended the wait with a conditional update.
/// Returns the dispatch id.
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
        .filter(run::Column::Status.is_in(crate::ACTIVE))
        .exec(txn)
        .await?;
    extend_lease(txn, run, now.saturating_add(run.lock_ttl_ms), now).await?;
    crate::outbox::history(txn, &run.id, status, "resumed", Some(history_detail), now)
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

impl Store {
    /// The waits whose resume message the dispatches `dispatch_ids` carry, by dispatch id,
    /// each with the ledger row of the delivery that resumed it (none for a timeout): one
    /// query for the waits and one for the rows.
    pub async fn resumes_of(
        &self,
        dispatch_ids: Vec<String>,
    ) -> Result<HashMap<String, (wait::Model, Option<intake::Model>)>, DbErr> {
        if dispatch_ids.is_empty() {
            return Ok(HashMap::new());
        }
        let waits = wait::Entity::find()
            .filter(wait::Column::DispatchId.is_in(dispatch_ids))
            .all(self.db())
            .await?;
        let intake_ids: Vec<String> = waits.iter().filter_map(|w| w.resumed_by.clone()).collect();
        let mut rows: HashMap<String, intake::Model> = if intake_ids.is_empty() {
            HashMap::new()
        } else {
            intake::Entity::find()
                .filter(intake::Column::Id.is_in(intake_ids))
                .all(self.db())
                .await?
                .into_iter()
                .map(|row| (row.id.clone(), row))
                .collect()
        };
        Ok(waits
            .into_iter()
            .filter_map(|w| {
                let dispatch_id = w.dispatch_id.clone()?;
                let row = w.resumed_by.as_ref().and_then(|id| rows.remove(id));
                Some((dispatch_id, (w, row)))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resume_ids_are_stable_per_run_and_wait() {
        let id = resume_dispatch_id("r1", "approve");
        assert_eq!(id, resume_dispatch_id("r1", "approve"));
        assert_ne!(id, resume_dispatch_id("r1", "approve-2"));
        assert_ne!(id, resume_dispatch_id("r2", "approve"));
        assert_eq!(id.len(), 36);
        assert!(uuid::Uuid::parse_str(&id).is_ok());
    }
}
