//! What a `switchyard.run.resume` message carries: how the wait ended (decision, actor) and the
//! event that resumed it, read from the wait row and the resuming delivery's ledger row.

use std::collections::HashMap;

use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter};
use switchyard_dispatch::{Proposal, ResumeInfo};
use switchyard_store::entities::wait;
use switchyard_store::outbox::ClaimedRun;

use crate::store::entities::intake;

/// The resume of each claimed dispatch that carries one, by dispatch id (one query for the
/// waits and one for the resuming events; none when the batch holds only starts).
pub async fn resumes_of<C: ConnectionTrait>(
    db: &C,
    claimed: &[&ClaimedRun],
) -> Result<HashMap<String, ResumeInfo>, DbErr> {
    let ids: Vec<String> = claimed
        .iter()
        .filter(|c| c.dispatch.wait_id.is_some())
        .map(|c| c.dispatch.id.clone())
        .collect();
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let waits = wait::Entity::find()
        .filter(wait::Column::DispatchId.is_in(ids))
        .all(db)
        .await?;
    let intake_ids: Vec<String> = waits.iter().filter_map(|w| w.resumed_by.clone()).collect();
    let mut events: HashMap<String, switchyard_core::Event> = if intake_ids.is_empty() {
        HashMap::new()
    } else {
        intake::Entity::find()
            .filter(intake::Column::Id.is_in(intake_ids))
            .all(db)
            .await?
            .into_iter()
            .filter_map(|row| Some((row.id.clone(), crate::dispatcher::message::event_of(row)?)))
            .collect()
    };
    Ok(waits
        .into_iter()
        .filter_map(|w| {
            let dispatch_id = w.dispatch_id.clone()?;
            let event = w.resumed_by.as_ref().and_then(|id| events.remove(id));
            Some((
                dispatch_id,
                ResumeInfo {
                    wait_id: w.wait_id,
                    expects: w.expects,
                    proposal: Proposal {
                        id: w.proposal_id,
                        digest: w.proposal_digest,
                    },
                    decision: w.decision.unwrap_or_else(|| "timeout".into()),
                    actor: w.actor,
                    event,
                    intake_id: w.resumed_by,
                },
            ))
        })
        .collect())
}
