//! The dispatch outbox after intake wrote it: claiming due rows (push dispatchers and pull
//! workers), recording attempts, dead letters and redispatch, lapsed pull claims, and the
//! entity-lease keep-alive of runs that still wait for delivery.
//!
//! Every transition is decided once, in [`machine`], as row changes; [`apply`] writes them on
//! any database (and `sqlite::outbox` on the SQLite writer's own connection). The claim reads
//! are the drivers' ([`crate::driver::OutboxDriver`]): `FOR UPDATE SKIP LOCKED` on PostgreSQL
//! and MySQL, so replicas share the work; SQLite serialises writers with `BEGIN IMMEDIATE`.
//!
//! Invariant: a dispatch changes state only in a transaction that also writes the run's new
//! status and its history entry, and only while the caller still holds the claim it made
//! (`claimed_by`, the attempt count and series match), so a late or duplicate record never
//! overrides a newer claim.
//!
//! The free functions taking a pool (`claim_push(db, ...)`, `record(db, ...)`, ...) are the
//! daemon's entry points until its callers use [`crate::Store`]'s operations (`operations`).

pub(crate) mod apply;
pub(crate) mod claim;
pub(crate) mod keep_alive;
pub mod lag;
pub mod machine;
mod operations;
mod pull;
mod read;
pub(crate) mod record;
mod redispatch;
pub(crate) mod skip_locked;

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, EntityTrait};

pub use claim::{ClaimedRun, PULL_CLAIMANT, PullClaim, PullTarget, claim_pull, claim_push, due};
pub use keep_alive::{KEEP_ALIVE_WINDOW_MS, keep_alive};
pub use lag::PendingHead;
pub use pull::{ClaimError, extend_claim, release_claim};
pub use read::{
    PENDING_COUNT_CAP, PendingFigure, pending_by_target, pending_of_targets, pending_probe, trail,
};
pub use record::{Recorded, Verdict, attempt_words, record};
pub use redispatch::{Redispatched, redispatch};

use crate::Millis;
use crate::driver::OutboxDriver;
use crate::entities::run::RunStatus;
use crate::entities::run_history;

/// Appends one entry to a run's history.
pub async fn history<C: ConnectionTrait>(
    txn: &C,
    run_id: &str,
    status: RunStatus,
    cause: &str,
    detail: Option<String>,
    now: Millis,
) -> Result<(), DbErr> {
    run_history::Entity::insert(run_history::ActiveModel::from(run_history::Model::entry(
        run_id, status, cause, detail, now,
    )))
    .exec_without_returning(txn)
    .await
    .map(|_| ())
}

/// The outbox statements of the database behind `db`, for the free functions that get a pool
/// rather than a [`crate::Store`]. Transitional: gone once every caller uses the store's
/// operations.
fn pooled(db: &DatabaseConnection) -> &'static dyn OutboxDriver {
    match db.get_database_backend() {
        DbBackend::Sqlite => &crate::sqlite::outbox::Statements,
        _ => &skip_locked::SkipLocked,
    }
}
