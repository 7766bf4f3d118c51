//! Pre-claims (see `dispatcher::preclaim`), on every database: a batch's new push dispatches
//! that are due now are written claimed by this daemon's dispatcher, and handed to it after
//! the commit with their delivery's event, moved out of the batch (no copy, no parse).

use std::collections::HashMap;

use switchyard_store::Millis;
use switchyard_store::entities::dispatch::DispatchStatus;
use switchyard_store::outbox::ClaimedRun;
use uuid::Uuid;

use super::{Delivery, DeliveryBody, Pending};
use crate::dispatcher::message::Routed;
use crate::dispatcher::preclaim::{Permits, PreClaimed, PreClaims};
use switchyard_store::intake::Writes;

/// A dispatch claimed in a batch, waiting for the commit.
pub(super) struct Claimed {
    /// Its run's delivery, by position in the batch.
    delivery: usize,
    claimed: ClaimedRun,
    permits: Permits,
}

/// Claims what may be claimed now, in `decided`'s dispatch rows (nothing, and no allocation,
/// while the dispatcher has no push target).
pub(super) fn claim(
    decided: &mut Writes,
    deliveries: &[&Delivery],
    claims: &PreClaims,
    now: Millis,
) -> Vec<Claimed> {
    let Writes {
        dispatches, locks, ..
    } = decided;
    let mut claimed = Vec::new();
    if dispatches.is_empty() || !claims.has_targets() {
        return claimed;
    }
    let runs: HashMap<&str, _> = locks.new_runs.iter().map(|r| (r.id.as_str(), r)).collect();
    let positions: HashMap<Uuid, usize> = deliveries
        .iter()
        .enumerate()
        .map(|(i, d)| (d.intake_id, i))
        .collect();
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
        let Some(&delivery) = Uuid::parse_str(&run.intake_id)
            .ok()
            .and_then(|id| positions.get(&id))
        else {
            continue;
        };
        let Some(claim) = claims.try_claim(&dispatch.target, &dispatch.workflow_id, now) else {
            continue;
        };
        dispatch.attempts += 1;
        dispatch.claimed_by = Some(claim.owner);
        dispatch.due_at = claim.until;
        claimed.push(Claimed {
            delivery,
            claimed: ClaimedRun {
                dispatch: dispatch.clone(),
                run: (*run).clone(),
                lease_expires_at: leases.get(run.id.as_str()).copied().unwrap_or(0),
            },
            permits: claim.permits,
        });
    }
    claimed
}

/// After the commit: hands each claim over with its delivery's event, taken out of `batch`
/// (whose deliveries are answered and dropped next). Returns how many were handed over.
pub(super) fn hand_over(claimed: Vec<Claimed>, batch: &mut [Pending], claims: &PreClaims) -> usize {
    if claimed.is_empty() {
        return 0;
    }
    let ready: Vec<PreClaimed> = claimed
        .into_iter()
        .filter_map(|c| {
            let body = &mut batch.get_mut(c.delivery)?.delivery.body;
            let DeliveryBody::Route(event) = std::mem::replace(
                body,
                DeliveryBody::Invalid {
                    detail: String::new(),
                },
            ) else {
                return None;
            };
            Some(PreClaimed {
                routed: Routed {
                    event,
                    config_revision: c.claimed.run.config_revision.clone().unwrap_or_default(),
                    members: Vec::new(),
                },
                claimed: c.claimed,
                permits: c.permits,
            })
        })
        .collect();
    let handed_over = ready.len();
    claims.hand_over(ready);
    handed_over
}
