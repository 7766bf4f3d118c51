//! A pull worker's hold on its claim: extending it, and giving it back.
//!
//! Invariant: only a live claim (its token known, still pending, not lapsed) is changed, read
//! under its row lock in the changing transaction; a lapsed or released token is
//! [`ClaimError::Lost`].

use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QuerySelect,
};

use super::{apply, machine};
use crate::Millis;
use crate::entities::dispatch::{self, DispatchStatus};
use crate::runs::begin_write;

/// Why a claim operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error("claim token is unknown, expired or already released")]
    Lost,
    #[error(transparent)]
    Db(#[from] DbErr),
}

async fn live_claim<C: ConnectionTrait>(
    txn: &C,
    token: &str,
    now: Millis,
) -> Result<dispatch::Model, ClaimError> {
    dispatch::Entity::find()
        .filter(dispatch::Column::ClaimToken.eq(token))
        .filter(dispatch::Column::Status.eq(DispatchStatus::Pending))
        .filter(dispatch::Column::DueAt.gt(now))
        .lock_exclusive()
        .one(txn)
        .await?
        .ok_or(ClaimError::Lost)
}

/// Extends a live pull claim by `ttl_ms` from `now`; returns the new expiry.
pub async fn extend_claim(
    db: &DatabaseConnection,
    token: &str,
    ttl_ms: i64,
    now: Millis,
) -> Result<(dispatch::Model, Millis), ClaimError> {
    let txn = begin_write(db).await?;
    let row = live_claim(&txn, token, now).await?;
    let expires_at = now.saturating_add(ttl_ms);
    apply::apply(&txn, &[machine::extended(&row, expires_at, now)]).await?;
    txn.commit().await?;
    Ok((row, expires_at))
}

/// Gives a live pull claim back: the run is pending again after `delay_ms` (the claim counts
/// as an attempt).
pub async fn release_claim(
    db: &DatabaseConnection,
    token: &str,
    delay_ms: i64,
    now: Millis,
) -> Result<(dispatch::Model, Millis), ClaimError> {
    let txn = begin_write(db).await?;
    let row = live_claim(&txn, token, now).await?;
    let due_at = now.saturating_add(delay_ms);
    apply::apply(&txn, &[machine::released(&row, due_at, now)]).await?;
    txn.commit().await?;
    Ok((row, due_at))
}
