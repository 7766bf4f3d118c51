//! The redispatch of a dead-lettered run: a new attempt series under the same dispatch id,
//! with its entity lease retaken.

use crate::Millis;
use crate::entities::dispatch::{self, DispatchStatus};
use crate::entities::entity_lock;
use crate::entities::run::{self, RunStatus};

use super::change::{
    Attempts, Change, DispatchSet, Expect, Finished, LeaseChange, RunChange, entry,
};

/// What a redispatch does.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one value per redispatch, matched at once and never stored"
)]
pub enum RedispatchStep {
    /// The run is `queued` again, with its lease and the fencing token it carries.
    Queued {
        change: Change,
        run: Box<run::Model>,
    },
    /// Another active run holds the entity.
    EntityLocked { held_by_run_id: String },
}

/// A new attempt series for the dead-lettered `run` (both read under lock), under the same
/// dispatch id, after retaking its entity lease over `stored` with the next fencing token. The
/// history names who asked (`actor`, `token:<name>`), as a finish or cancel does.
pub fn redispatch(
    run: &run::Model,
    dispatch: &dispatch::Model,
    stored: Option<&entity_lock::Model>,
    actor: Option<&str>,
    now: Millis,
) -> RedispatchStep {
    let lease = match entity_lock::Model::retaken(stored, run, now) {
        Ok(lease) => lease,
        Err(held_by_run_id) => return RedispatchStep::EntityLocked { held_by_run_id },
    };
    let token = lease.fencing_token;
    let series = dispatch.series + 1;
    let set = DispatchSet {
        status: Some(DispatchStatus::Pending),
        attempts: Some(Attempts::Reset),
        series: Some(series),
        due_at: Some(now),
        claimed_by: Some(None),
        claim_token: Some(None),
        reason: Some(None),
        ..DispatchSet::at(now)
    };
    let mut change = Change::new(&dispatch.id, Expect::AsRead, set);
    change.run = Some(RunChange {
        finished: Finished::Reopened,
        fencing_token: Some(token),
        ..RunChange::status(&run.id, &[RunStatus::DeadLettered], RunStatus::Queued, now)
    });
    change.lease = Some(LeaseChange::Retaken {
        lease,
        existed: stored.is_some(),
    });
    change.history = vec![entry(
        &run.id,
        RunStatus::Queued,
        "redispatched",
        match actor {
            Some(actor) => format!(
                "series {series} of dispatch {} with fencing token {token}; by {actor}",
                dispatch.id
            ),
            None => format!(
                "series {series} of dispatch {} with fencing token {token}",
                dispatch.id
            ),
        },
        now,
    )];
    let mut run = run.clone();
    run.status = RunStatus::Queued;
    run.fencing_token = token;
    run.updated_at = now;
    run.finished_at = None;
    run.end_reason = None;
    RedispatchStep::Queued {
        change,
        run: Box::new(run),
    }
}
