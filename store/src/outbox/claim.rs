//! Claiming due dispatches: push dispatchers (for one attempt, until the claim lapses) and pull
//! workers (with a claim token), each only with a free slot under the workflow's
//! `max_running`; and reading back rows another writer claimed for a dispatcher.
//!
//! Invariant: the rows a claim takes are read by the driver's [`OutboxDriver::lock_due`] in the
//! claim's own write transaction, decided by `machine` and written by `apply` before it
//! commits, so two claimers never take one row.

use std::collections::{BTreeMap, HashMap};

use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect,
};
use uuid::Uuid;

use super::apply;
use super::machine::{self, PullStep, PushStep};
use crate::Millis;
use crate::ceilings::{MaxRunning, Slots, free_slots};
use crate::driver::OutboxDriver;
use crate::entities::dispatch::{self, DispatchStatus};
use crate::entities::{entity_lock, run};
use crate::runs::begin_write;

/// A dispatch claimed for one attempt, with what its message needs.
#[derive(Debug, Clone)]
pub struct ClaimedRun {
    pub dispatch: dispatch::Model,
    pub run: run::Model,
    /// The entity lease's expiry as the claim left it.
    pub lease_expires_at: Millis,
}

/// Who claims: a push dispatcher (its replica id) or a pull worker.
pub const PULL_CLAIMANT: &str = "pull";

/// A pull target as claims see it.
#[derive(Debug, Clone)]
pub struct PullTarget {
    pub name: String,
    pub claim_ttl_ms: i64,
    pub max_claims: i32,
}

/// A pull claim handed to a worker.
#[derive(Debug, Clone)]
pub struct PullClaim {
    pub claimed: ClaimedRun,
    pub token: String,
    pub expires_at: Millis,
}

/// The first `limit` pending dispatches due by `now` that match `filter`, as a claim reads
/// them (before its row locks).
pub fn due(
    filter: sea_orm::Condition,
    now: Millis,
    limit: u64,
) -> sea_orm::Select<dispatch::Entity> {
    dispatch::Entity::find()
        .filter(dispatch::Column::Status.eq(DispatchStatus::Pending))
        .filter(dispatch::Column::DueAt.lte(now))
        .filter(filter)
        // In `dispatches_due` order, so the claim reads `limit` index entries. No tie-break
        // by id: PostgreSQL then sorted every due row for each claim (an external merge sort
        // of 25,000 rows, 30 ms, behind a receiver outage's backlog; 1 ms without). Ties (the
        // runs of one intake batch are due at the same millisecond) come in index order:
        // insertion order on SQLite (rowid) and MySQL (the UUIDv7 key), heap order on
        // PostgreSQL.
        .order_by_asc(dispatch::Column::DueAt)
        .limit(limit)
}

/// The runs of `rows`, by id.
async fn runs_of<C: ConnectionTrait>(
    txn: &C,
    rows: &[dispatch::Model],
) -> Result<HashMap<String, run::Model>, DbErr> {
    Ok(run::Entity::find()
        .filter(run::Column::Id.is_in(rows.iter().map(|d| d.run_id.clone())))
        .all(txn)
        .await?
        .into_iter()
        .map(|run| (run.id.clone(), run))
        .collect())
}

/// Sets each claim's lease expiry: that of the lease its run still holds, else 0. One query
/// per tenant, not one per run (a claim batch is up to 256 runs, and on PostgreSQL each query
/// is a round trip).
async fn with_lease_expiries<'a, C: ConnectionTrait>(
    txn: &C,
    claims: impl Iterator<Item = &'a mut ClaimedRun>,
) -> Result<(), DbErr> {
    let claims: Vec<&mut ClaimedRun> = claims.collect();
    let mut by_tenant: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for claim in &claims {
        by_tenant
            .entry(claim.run.tenant_id.as_str())
            .or_default()
            .push(claim.run.target_entity_id.clone());
    }
    let mut expiries = HashMap::new();
    for (tenant, entities) in by_tenant {
        let leases = entity_lock::Entity::find()
            .filter(entity_lock::Column::TenantId.eq(tenant))
            .filter(entity_lock::Column::TargetEntityId.is_in(entities))
            .all(txn)
            .await?;
        for lease in leases {
            if let Some(run_id) = lease.run_id {
                expiries.insert(run_id, lease.expires_at);
            }
        }
    }
    for claim in claims {
        claim.lease_expires_at = expiries.get(&claim.run.id).copied().unwrap_or(0);
    }
    Ok(())
}

/// Claims up to `limit` due dispatches of the push target `target` for one attempt each, until
/// `claim_until` (after which another dispatcher may claim them again: a crash between
/// delivery and record re-delivers under the same id). Dispatches of runs that ended meanwhile
/// are cancelled instead.
///
/// Workflows in `capped` (their `max_running`) get only as many claims as they have free
/// slots (`ceilings`); their other dispatches stay pending, oldest due first.
#[allow(clippy::too_many_arguments)]
pub async fn claim_push(
    db: &DatabaseConnection,
    target: &str,
    owner: &str,
    limit: u64,
    now: Millis,
    claim_until: Millis,
    capped: &[MaxRunning],
) -> Result<Vec<ClaimedRun>, DbErr> {
    super::pooled(db)
        .claim_push(db, target, owner, limit, now, claim_until, capped)
        .await
}

/// [`claim_push`] in a transaction of the pool, with `driver`'s claim reads.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn claim_push_with<D: OutboxDriver + ?Sized>(
    driver: &D,
    db: &DatabaseConnection,
    target: &str,
    owner: &str,
    limit: u64,
    now: Millis,
    claim_until: Millis,
    capped: &[MaxRunning],
) -> Result<Vec<ClaimedRun>, DbErr> {
    let txn = begin_write(db).await?;
    let capped: Vec<_> = capped
        .iter()
        .filter(|c| c.target == target)
        .cloned()
        .collect();
    let mut slots = Slots::new(free_slots(&txn, &capped, now).await?);
    let mut filter = sea_orm::Condition::all().add(dispatch::Column::Target.eq(target));
    let full = slots.full();
    if !full.is_empty() {
        filter = filter.add(dispatch::Column::WorkflowId.is_not_in(full));
    }
    let mut rows = driver.lock_due(&txn, filter, now, limit).await?;
    rows.retain(|row| slots.take(&row.workflow_id));
    if rows.is_empty() {
        txn.commit().await?;
        return Ok(Vec::new());
    }
    let runs = runs_of(&txn, &rows).await?;
    let mut changes = Vec::with_capacity(rows.len());
    let mut claimed = Vec::with_capacity(rows.len());
    for row in rows {
        let run = runs.get(&row.run_id);
        match machine::claim_push(row, run, owner, claim_until, now) {
            PushStep::Claimed { change, claimed: c } => {
                changes.push(change);
                claimed.push(*c);
            }
            PushStep::Cancelled(change) => changes.push(change),
        }
    }
    apply::apply(&txn, &changes).await?;
    with_lease_expiries(&txn, claimed.iter_mut()).await?;
    txn.commit().await?;
    Ok(claimed)
}

/// Claims up to `limit` due runs of `workflows` on pull targets for a worker. A run past its
/// target's `max_claims` is dead-lettered instead of handed out again.
///
/// Workflows in `capped` get only as many claims as they have free slots, as in
/// [`claim_push`].
pub async fn claim_pull(
    db: &DatabaseConnection,
    targets: &[PullTarget],
    workflows: &[String],
    limit: u64,
    now: Millis,
    capped: &[MaxRunning],
) -> Result<Vec<PullClaim>, DbErr> {
    claim_pull_with(
        super::pooled(db),
        db,
        targets,
        workflows,
        limit,
        now,
        capped,
    )
    .await
}

/// [`claim_pull`] with `driver`'s claim reads.
pub(crate) async fn claim_pull_with<D: OutboxDriver + ?Sized>(
    driver: &D,
    db: &DatabaseConnection,
    targets: &[PullTarget],
    workflows: &[String],
    limit: u64,
    now: Millis,
    capped: &[MaxRunning],
) -> Result<Vec<PullClaim>, DbErr> {
    if targets.is_empty() || workflows.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let txn = begin_write(db).await?;
    let capped: Vec<_> = capped
        .iter()
        .filter(|c| {
            workflows.contains(&c.workflow_id) && targets.iter().any(|t| t.name == c.target)
        })
        .cloned()
        .collect();
    let mut slots = Slots::new(free_slots(&txn, &capped, now).await?);
    let full = slots.full();
    let open: Vec<String> = workflows
        .iter()
        .filter(|w| !full.contains(w))
        .cloned()
        .collect();
    if open.is_empty() {
        txn.commit().await?;
        return Ok(Vec::new());
    }
    let filter = sea_orm::Condition::all()
        .add(dispatch::Column::Target.is_in(targets.iter().map(|t| t.name.clone())))
        .add(dispatch::Column::WorkflowId.is_in(open));
    let mut rows = driver.lock_due(&txn, filter, now, limit).await?;
    rows.retain(|row| slots.take(&row.workflow_id));
    if rows.is_empty() {
        txn.commit().await?;
        return Ok(Vec::new());
    }
    let runs = runs_of(&txn, &rows).await?;
    let mut changes = Vec::with_capacity(rows.len());
    // Each claim with the index of its change.
    let mut claims = Vec::with_capacity(rows.len());
    for row in rows {
        let run = runs.get(&row.run_id);
        let target = targets.iter().find(|t| t.name == row.target);
        match machine::claim_pull(row, run, target, now, claim_token) {
            PullStep::Skipped => {}
            PullStep::Cancelled(change) | PullStep::DeadLettered(change) => changes.push(change),
            PullStep::Claimed { change, claim } => {
                claims.push((changes.len(), *claim));
                changes.push(change);
            }
        }
    }
    let applied = apply::apply(&txn, &changes).await?;
    let mut claims: Vec<PullClaim> = claims
        .into_iter()
        .map(|(at, mut claim)| {
            if applied.get(at).is_some_and(|a| a.token_moved) {
                claim.claimed.run.fencing_token += 1;
            }
            claim
        })
        .collect();
    with_lease_expiries(&txn, claims.iter_mut().map(|c| &mut c.claimed)).await?;
    txn.commit().await?;
    Ok(claims)
}

/// An opaque, unguessable claim token: 64 hex digits, 244 random bits.
fn claim_token() -> String {
    format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple())
}
