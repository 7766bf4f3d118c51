//! Redispatch: a dead-lettered run starts a new attempt series under the same dispatch id,
//! once it holds its entity again.
//!
//! Invariant: the run, its dispatch and its lease row are read under lock in one transaction;
//! the lease is retaken with the next fencing token, or the redispatch is refused while another
//! active run holds the entity.

use sea_orm::{ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

use super::apply;
use super::machine::{self, RedispatchStep};
use crate::Millis;
use crate::entities::dispatch::{self, DispatchStatus};
use crate::entities::run::{self, RunStatus};
use crate::runs::{RunError, begin_write};

/// What a redispatch did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redispatched {
    /// The run holds its entity again and its dispatch is pending under the same id.
    Queued {
        /// Boxed: a run row is much larger than the other variant.
        run: Box<run::Model>,
        dispatch_id: String,
    },
    /// Another active run holds the entity.
    EntityLocked { held_by_run_id: String },
}

/// Starts a new attempt series for a dead-lettered run, under the same dispatch id, after
/// re-taking its entity lease (with a new fencing token); its history names `actor`
/// (`token:<name>`, the operator who asked).
pub async fn redispatch(
    db: &DatabaseConnection,
    run_id: &str,
    actor: Option<&str>,
    now: Millis,
) -> Result<Redispatched, RunError> {
    let txn = begin_write(db).await?;
    let run = run::Entity::find_by_id(run_id)
        .lock_exclusive()
        .one(&txn)
        .await?
        .ok_or_else(|| RunError::NotFound(run_id.to_owned()))?;
    if run.status != RunStatus::DeadLettered {
        return Err(RunError::NotDeadLettered {
            run_id: run.id,
            status: run.status,
        });
    }
    // A run has one start row and one row per resumed wait: the dead-lettered one is sent again.
    let dispatch = dispatch::Entity::find()
        .filter(dispatch::Column::RunId.eq(run_id))
        .filter(dispatch::Column::Status.eq(DispatchStatus::DeadLettered))
        .order_by_desc(dispatch::Column::CreatedAt)
        .lock_exclusive()
        .one(&txn)
        .await?
        .ok_or_else(|| RunError::NotFound(format!("{run_id} (no dispatch)")))?;
    let key = (run.tenant_id.clone(), run.target_entity_id.clone());
    let stored = crate::leases::lock_leases(&txn, std::slice::from_ref(&key))
        .await?
        .pop();
    match machine::redispatch(&run, &dispatch, stored.as_ref(), actor, now) {
        RedispatchStep::EntityLocked { held_by_run_id } => {
            Ok(Redispatched::EntityLocked { held_by_run_id })
        }
        RedispatchStep::Queued { change, run } => {
            apply::apply(&txn, std::slice::from_ref(&change)).await?;
            txn.commit().await?;
            Ok(Redispatched::Queued {
                run,
                dispatch_id: dispatch.id,
            })
        }
    }
}
