//! What a `switchyard.run.resume` message carries: how the wait ended (decision, actor) and the
//! event that resumed it, from the wait row and the resuming delivery's ledger row.

use std::collections::HashMap;

use switchyard_dispatch::{Proposal, ResumeInfo};
use switchyard_store::outbox::ClaimedRun;
use switchyard_store::{DbErr, Store};

/// The resume of each claimed dispatch that carries one, by dispatch id (one query for the
/// waits and one for the resuming events; none when the batch holds only starts).
pub async fn resumes_of(
    store: &Store,
    claimed: &[&ClaimedRun],
) -> Result<HashMap<String, ResumeInfo>, DbErr> {
    let ids: Vec<String> = claimed
        .iter()
        .filter(|c| c.dispatch.wait_id.is_some())
        .map(|c| c.dispatch.id.clone())
        .collect();
    Ok(store
        .resumes_of(ids)
        .await?
        .into_iter()
        .map(|(dispatch_id, (w, row))| {
            let event = row.and_then(super::message::event_of);
            (
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
            )
        })
        .collect())
}
