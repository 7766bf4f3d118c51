//! Entity leases: the rows a batch reads row-locked ([`lock_leases`]) and the changes the lock
//! decision (`switchyard_router::LockBatch`) hands back to be written ([`LockChanges`]).
//!
//! Invariant: a lease row that did not exist is created with a plain `INSERT`, so a replica
//! that created it meanwhile makes the insert fail and the caller's batch retry, which then
//! sees that replica's lease; rows that existed were row-locked by [`lock_leases`] and are
//! overwritten. Lease rows are never deleted: fencing tokens only grow.

use std::collections::{BTreeMap, BTreeSet};

use sea_orm::sea_query::OnConflict;
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect};

use crate::Millis;
use crate::entities::{entity_lock, run};

/// Everything a batch decided, to be written in its transaction (by [`LockChanges::persist`],
/// or by a caller that writes these tables itself).
#[derive(Debug, Default)]
pub struct LockChanges {
    /// When the batch was decided: `updated_at` and `finished_at` of the expired runs.
    pub now: Millis,
    /// Lease rows that did not exist: a plain insert, so a concurrent creator makes it fail.
    pub created: Vec<entity_lock::Model>,
    /// Lease rows that existed (row-locked by the load) and now have another holder.
    pub changed: Vec<entity_lock::Model>,
    /// Runs created, status `queued`.
    pub new_runs: Vec<run::Model>,
    /// Active runs whose expired lease another run took over: now `expired`, their pending
    /// dispatch `cancelled`.
    pub expired_runs: Vec<String>,
}

/// The statuses of runs that may hold a lease (what a takeover expires).
pub const ACTIVE: [&str; 3] = ["queued", "dispatched", "needs_input"];

/// Bounds one `IN (...)` list; well under every backend's parameter limit.
const LOAD_CHUNK: usize = 200;

/// Reads (and on PostgreSQL/MySQL row-locks until the transaction ends) the lease rows of
/// `keys`, `(tenant_id, target_entity_id)` pairs: what [`LockBatch::from_rows`] takes.
pub async fn lock_leases<C: ConnectionTrait>(
    db: &C,
    keys: &[(String, String)],
) -> Result<Vec<entity_lock::Model>, DbErr> {
    // One `tenant_id = ? AND target_entity_id IN (...)` per tenant: index probes on the
    // primary key on every database, with or without table statistics.
    let mut by_tenant: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (tenant_id, entity_id) in keys {
        by_tenant.entry(tenant_id).or_default().insert(entity_id);
    }
    let mut rows = Vec::new();
    for (tenant_id, entities) in by_tenant {
        let entities: Vec<&str> = entities.into_iter().collect();
        for chunk in entities.chunks(LOAD_CHUNK) {
            rows.extend(
                entity_lock::Entity::find()
                    .filter(entity_lock::Column::TenantId.eq(tenant_id))
                    .filter(entity_lock::Column::TargetEntityId.is_in(chunk.iter().copied()))
                    .lock_exclusive()
                    .all(db)
                    .await?,
            );
        }
    }
    Ok(rows)
}

impl LockChanges {
    /// Writes the batch's new runs, lease changes and expired holders.
    pub async fn persist<C: ConnectionTrait>(self, db: &C) -> Result<(), DbErr> {
        if !self.created.is_empty() {
            // A plain insert: a concurrent creator makes this fail and the batch retry.
            entity_lock::Entity::insert_many(
                self.created.into_iter().map(entity_lock::ActiveModel::from),
            )
            .exec_without_returning(db)
            .await?;
        }
        if !self.changed.is_empty() {
            // These rows are row-locked by `load`, so overwriting them is safe.
            entity_lock::Entity::insert_many(
                self.changed.into_iter().map(entity_lock::ActiveModel::from),
            )
            .on_conflict(
                OnConflict::columns([
                    entity_lock::Column::TenantId,
                    entity_lock::Column::TargetEntityId,
                ])
                .update_columns([
                    entity_lock::Column::RunId,
                    entity_lock::Column::FencingToken,
                    entity_lock::Column::ExpiresAt,
                    entity_lock::Column::UpdatedAt,
                ])
                .to_owned(),
            )
            .exec_without_returning(db)
            .await?;
        }
        if !self.new_runs.is_empty() {
            run::Entity::insert_many(self.new_runs.into_iter().map(run::ActiveModel::from))
                .exec_without_returning(db)
                .await?;
        }
        if !self.expired_runs.is_empty() {
            // By key alone ([`crate::by_key`]): active runs expire, and nothing is left to
            // deliver for a run that lost its entity.
            crate::by_key::runs_expired(self.expired_runs.iter().cloned(), self.now)
                .exec(db)
                .await?;
            crate::by_key::pending_dispatches_cancelled(
                self.expired_runs,
                "lease_expired",
                self.now,
            )
            .exec(db)
            .await?;
        }
        Ok(())
    }
}
