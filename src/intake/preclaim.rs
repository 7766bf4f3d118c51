//! The SQLite writer's pre-claims (see `dispatcher::preclaim`): a batch's new push dispatches
//! that are due now are written claimed by this daemon's dispatcher, and handed to it after
//! the commit with the event their message carries.

use std::collections::HashMap;

use switchyard_router::Millis;
use switchyard_router::entities::dispatch::DispatchStatus;
use switchyard_router::outbox::ClaimedRun;

use super::decide::Decided;
use crate::dispatcher::message::{Routed, event_of};
use crate::dispatcher::preclaim::{PreClaimed, PreClaims};

/// Claims what may be claimed now, in `decided`'s dispatch rows; what to hand over once they
/// are committed.
pub(super) fn claim(decided: &mut Decided, claims: &PreClaims, now: Millis) -> Vec<PreClaimed> {
    let Decided {
        dispatches,
        locks,
        ledger,
        ..
    } = decided;
    let mut claimed = Vec::new();
    if dispatches.is_empty() {
        return claimed;
    }
    let runs: HashMap<&str, _> = locks.new_runs.iter().map(|r| (r.id.as_str(), r)).collect();
    let rows: HashMap<&str, _> = ledger.iter().map(|r| (r.id.as_str(), r)).collect();
    let leases: HashMap<&str, Millis> = locks
        .created
        .iter()
        .chain(&locks.changed)
        .filter_map(|lease| Some((lease.run_id.as_deref()?, lease.expires_at)))
        .collect();
    for dispatch in dispatches.iter_mut() {
        if dispatch.status != DispatchStatus::Pending
            || dispatch.due_at > now
            || dispatch.claimed_by.is_some()
            || dispatch.wait_id.is_some()
        {
            continue;
        }
        let Some(run) = runs.get(dispatch.run_id.as_str()) else {
            continue;
        };
        let Some(row) = rows.get(run.intake_id.as_str()) else {
            continue;
        };
        let Some(event) = event_of((*row).clone()) else {
            continue;
        };
        let Some(claim) = claims.try_claim(&dispatch.target, &dispatch.workflow_id, now) else {
            continue;
        };
        dispatch.attempts += 1;
        dispatch.claimed_by = Some(claim.owner);
        dispatch.due_at = claim.until;
        claimed.push(PreClaimed {
            claimed: ClaimedRun {
                dispatch: dispatch.clone(),
                run: (*run).clone(),
                lease_expires_at: leases.get(run.id.as_str()).copied().unwrap_or(0),
            },
            routed: Routed {
                event,
                config_revision: row.config_revision.clone(),
                members: Vec::new(),
            },
            permits: claim.permits,
        });
    }
    claimed
}
