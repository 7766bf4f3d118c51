//! The dispatcher's sweep: entity leases of runs still waiting for delivery are kept alive, and
//! pull claims that lapsed go back to pending.
//!
//! Invariant: each pass costs what is about to expire, never the whole backlog (leases are
//! found by `entity_locks (expires_at)`, lapsed claims by the claim-token index), and a lease
//! is extended only while the same run holds it with the same token.

use std::collections::{HashMap, HashSet};

use sea_orm::{
    ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
};

use super::{apply, machine};
use crate::Millis;
use crate::by_key;
use crate::driver::OutboxDriver;
use crate::entities::dispatch::{self, DispatchStatus};
use crate::entities::entity_lock;
use crate::entities::run::RunStatus;
use crate::runs::begin_write;

/// How far ahead the keep-alive looks for leases about to run out, and how far back for ones
/// that just did (a sweep every half second finds each in time).
pub const KEEP_ALIVE_WINDOW_MS: i64 = 5_000;
/// Most leases one keep-alive pass looks at; a full pass loops.
const KEEP_ALIVE_BATCH: u64 = 1_000;
/// Most claim-token index entries read per page by [`reset_lapsed_claims_with`].
const LAPSED_PAGE: u64 = 500;

/// Keeps the entity leases of runs still waiting for delivery alive, and puts lapsed pull
/// claims back to pending. Returns `(leases extended, claims lapsed)`.
///
/// A lease is extended to a full TTL when it runs out within [`KEEP_ALIVE_WINDOW_MS`] (or ran
/// out no longer ago than that) and its run's dispatch is pending and unclaimed (a run a pull
/// worker holds is kept alive by that worker's heartbeats instead). With `everything`, every
/// lease that ran out at any time is looked at too, a pass that costs the backlog: the
/// dispatcher runs it once at start, after a downtime in which waiting runs' leases ran out.
pub async fn keep_alive(
    db: &DatabaseConnection,
    now: Millis,
    everything: bool,
) -> Result<(u64, u64), DbErr> {
    let extended = extend_leases(db, now, everything).await?;
    let lapsed = reset_lapsed_claims_with(super::pooled(db), db, now).await?;
    Ok((extended, lapsed))
}

/// The leases part of [`keep_alive`]: how many were extended.
pub(crate) async fn extend_leases(
    db: &DatabaseConnection,
    now: Millis,
    everything: bool,
) -> Result<u64, DbErr> {
    let from = if everything {
        i64::MIN
    } else {
        now - KEEP_ALIVE_WINDOW_MS
    };
    let mut extended = 0;
    let mut after = from;
    loop {
        let expiring = entity_lock::Entity::find()
            .filter(entity_lock::Column::RunId.is_not_null())
            .filter(entity_lock::Column::ExpiresAt.gte(after))
            .filter(entity_lock::Column::ExpiresAt.lt(now + KEEP_ALIVE_WINDOW_MS))
            .order_by_asc(entity_lock::Column::ExpiresAt)
            .limit(KEEP_ALIVE_BATCH)
            .all(db)
            .await?;
        let full = expiring.len() as u64 == KEEP_ALIVE_BATCH;
        extended += extend_waiting(db, &expiring, now).await?;
        match expiring.last() {
            Some(last) if full && last.expires_at > after => after = last.expires_at,
            _ => break,
        }
    }
    Ok(extended)
}

/// Extends those of `leases` whose run still waits for delivery.
async fn extend_waiting(
    db: &DatabaseConnection,
    leases: &[entity_lock::Model],
    now: Millis,
) -> Result<u64, DbErr> {
    let holders: Vec<String> = leases.iter().filter_map(|l| l.run_id.clone()).collect();
    if holders.is_empty() {
        return Ok(0);
    }
    // By `run_id` alone ([`crate::by_key`]).
    let waiting: HashSet<String> = by_key::dispatches_of_runs(holders.iter().cloned())
        .all(db)
        .await?
        .into_iter()
        .filter(|d| d.status == DispatchStatus::Pending && d.claim_token.is_none())
        .map(|d| d.run_id)
        .collect();
    if waiting.is_empty() {
        return Ok(0);
    }
    let ttls: HashMap<String, i64> = by_key::runs(waiting.iter().cloned())
        .all(db)
        .await?
        .into_iter()
        // A dispatched run with a pending unclaimed dispatch waits for its resume message.
        .filter(|r| matches!(r.status, RunStatus::Queued | RunStatus::Dispatched))
        .map(|r| (r.id, r.lock_ttl_ms))
        .collect();
    if ttls.is_empty() {
        return Ok(0);
    }
    let txn = begin_write(db).await?;
    let mut extended = 0;
    for lease in leases {
        let Some(ttl) = lease.run_id.as_ref().and_then(|id| ttls.get(id)) else {
            continue;
        };
        // Still the same holder with the same token: nobody took it over meanwhile.
        extended += entity_lock::Entity::update_many()
            .col_expr(
                entity_lock::Column::ExpiresAt,
                now.saturating_add(*ttl).into(),
            )
            .col_expr(entity_lock::Column::UpdatedAt, now.into())
            .filter(entity_lock::Column::TenantId.eq(lease.tenant_id.as_str()))
            .filter(entity_lock::Column::TargetEntityId.eq(lease.target_entity_id.as_str()))
            .filter(entity_lock::Column::RunId.eq(lease.run_id.clone()))
            .filter(entity_lock::Column::FencingToken.eq(lease.fencing_token))
            .exec(&txn)
            .await?
            .rows_affected;
    }
    txn.commit().await?;
    Ok(extended)
}

/// Puts pull claims whose time ran out back to pending; how many. The candidates are read from
/// the claim-token index alone, in its order and by pages (only a claim in hand has a token:
/// every way a dispatch leaves `pending` clears it), and filtered here: with `status` and
/// `due_at` in the query, PostgreSQL's plans read `dispatches_due` instead, every pending
/// dispatch (153,753 rows, 12-18 ms a sweep behind a backlog of unclaimed pull runs).
pub(crate) async fn reset_lapsed_claims_with<D: OutboxDriver + ?Sized>(
    driver: &D,
    db: &DatabaseConnection,
    now: Millis,
) -> Result<u64, DbErr> {
    let mut candidates = Vec::new();
    let mut after = String::new();
    loop {
        let page = dispatch::Entity::find()
            .filter(dispatch::Column::ClaimToken.gt(after.as_str()))
            .order_by_asc(dispatch::Column::ClaimToken)
            .limit(LAPSED_PAGE)
            .all(db)
            .await?;
        let full = page.len() as u64 == LAPSED_PAGE;
        if let Some(token) = page.last().and_then(|d| d.claim_token.clone()) {
            after = token;
        }
        candidates.extend(
            page.into_iter()
                .filter(|d| d.status == DispatchStatus::Pending && d.due_at <= now)
                .map(|d| d.id),
        );
        if !full || candidates.len() as u64 >= LAPSED_PAGE {
            break;
        }
    }
    if candidates.is_empty() {
        return Ok(0);
    }
    let txn = begin_write(db).await?;
    // Locked by key alone, checked again here ([`crate::by_key`]).
    let changes: Vec<machine::Change> = driver
        .lock_by_id(&txn, candidates)
        .await?
        .iter()
        .filter(|d| {
            d.claim_token.is_some() && d.status == DispatchStatus::Pending && d.due_at <= now
        })
        .map(|row| machine::lapsed(row, now))
        .collect();
    apply::apply(&txn, &changes).await?;
    txn.commit().await?;
    Ok(changes.len() as u64)
}
