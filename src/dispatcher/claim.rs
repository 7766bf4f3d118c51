//! One claim of a push target's due dispatches, and their messages built from the ledger.
//!
//! Invariant: a run whose principal was refused meanwhile never reaches a worker
//! (`authority_revoked`); a routed run without its ledger event stays pending, logged.

use switchyard_store::outbox::ClaimedRun;
use switchyard_store::{Millis, Store, now_millis};

use super::transports::PushTarget;
use super::{message, millis};
use crate::live::Live;
use crate::telemetry::DispatchSpan;

/// Claims due dispatches of one push target and builds their messages; says who claimed
/// them (`metrics::ClaimLabels`). An uncapped target's are claimed in the intake writer's
/// next transaction where the database has one writer that carries claims (SQLite), else in
/// a claim transaction of the dispatcher's own (counted by what started it).
pub(super) async fn claim(
    store: &Store,
    target: &PushTarget,
    owner: &str,
    limit: usize,
    live: &Live,
    wake: &'static str,
) -> anyhow::Result<(&'static str, Vec<(ClaimedRun, Vec<u8>, DispatchSpan)>)> {
    let now = now_millis();
    let claim_until = now.saturating_add(millis(target.claim_for));
    let capped = live.max_running.iter().any(|m| m.target == target.name);
    if !capped
        && let Some(claimed) = store
            .claim_in_intake(&target.name, owner, limit, claim_until)
            .await
    {
        let built = messages(store, target, claimed?, live, now).await?;
        return Ok(("intake_backlog", built));
    }
    crate::metrics::metrics()
        .dispatch_claim_passes
        .get_or_create(&crate::metrics::ClaimPassLabels {
            target: target.name.clone(),
            wake,
        })
        .inc();
    let claimed = store
        .claim_push(
            &target.name,
            owner,
            limit as u64,
            now,
            claim_until,
            &live.max_running,
        )
        .await?;
    let built = messages(store, target, claimed, live, now).await?;
    Ok(("dispatcher", built))
}

/// Builds the messages of claimed dispatches, each in the trace of its run (with tracing on,
/// the message names its attempt's span).
pub(super) async fn messages(
    store: &Store,
    target: &PushTarget,
    mut claimed: Vec<ClaimedRun>,
    live: &Live,
    now: Millis,
) -> anyhow::Result<Vec<(ClaimedRun, Vec<u8>, DispatchSpan)>> {
    // The principal is checked again against the revision in force, before any worker sees
    // the run: one whose principal was suspended meanwhile ends here, `authority_revoked`.
    let mut allowed = Vec::with_capacity(claimed.len());
    for run in claimed.drain(..) {
        if !crate::authority::revoke_if_refused(store, &live.authority, &run.run, now).await? {
            allowed.push(run);
        }
    }
    let claimed = allowed;
    let refs: Vec<&ClaimedRun> = claimed.iter().collect();
    let events = message::events_of(store, &refs).await?;
    let mut resumes = super::resumes::resumes_of(store, &refs).await?;
    Ok(claimed
        .into_iter()
        .filter_map(|claimed| {
            // Cloned, not taken: a run's start and resumes share its event.
            let Some(routed) = events.get(&claimed.run.intake_id).cloned() else {
                tracing::error!(run_id = %claimed.run.id, intake_id = %claimed.run.intake_id, "a routed run has no ledger event; it stays pending");
                return None;
            };
            let trace = DispatchSpan::start(&claimed.run, &target.name, claimed.dispatch.attempts);
            let resume = resumes.remove(&claimed.dispatch.id);
            let body = message::run_start(&claimed, routed, resume, now, &trace, &live.authority)
                .to_json();
            Some((claimed, body, trace))
        })
        .collect())
}
