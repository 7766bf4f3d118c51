//! Coalesced runs at dispatch: the deliveries that joined a run in its coalescing window
//! (`run_members`, written by intake) and which of them is the newest, whose event the run
//! message carries.
//!
//! Invariant: the newest member is the one with the greatest provider version where the
//! adapter recorded one, else the latest arrival (intake ids are UUIDv7, ordered by arrival);
//! the run's own delivery (`runs.intake_id`) is the first member (its version is read from its
//! ledger row; intake writes `run_members` rows only for the deliveries that joined).

use std::collections::HashMap;

use switchyard_store::outbox::ClaimedRun;
use switchyard_store::{DbErr, Store};

/// A coalesced run's members and the one whose event is dispatched.
#[derive(Debug, Clone)]
pub struct Members {
    /// Every member's intake id in arrival order, the run's own first.
    pub ids: Vec<String>,
    /// The newest member's intake id.
    pub newest: String,
}

/// The members of each claimed run that has any, by run id.
pub async fn of(store: &Store, claimed: &[&ClaimedRun]) -> Result<HashMap<String, Members>, DbErr> {
    let mut found = HashMap::new();
    if claimed.is_empty() {
        return Ok(found);
    }
    let run_ids: Vec<&str> = claimed.iter().map(|c| c.run.id.as_str()).collect();
    let mut joined = store.run_members(&run_ids).await?;
    if joined.is_empty() {
        return Ok(found);
    }
    let firsts: Vec<&str> = claimed
        .iter()
        .filter(|c| joined.contains_key(&c.run.id))
        .map(|c| c.run.intake_id.as_str())
        .collect();
    let versions: HashMap<String, Option<String>> = store
        .ledger_rows(&firsts)
        .await?
        .into_iter()
        .map(|row| {
            let version = row
                .payload
                .as_deref()
                .and_then(|text| serde_json::from_str(text).ok())
                .and_then(|payload: serde_json::Value| crate::event_version::version_of(&payload));
            (row.id, version)
        })
        .collect();
    for claim in claimed {
        let Some(mut members) = joined.remove(&claim.run.id) else {
            continue;
        };
        let first = claim.run.intake_id.clone();
        let version = versions.get(&first).cloned().flatten();
        members.insert(0, (first, version));
        let ids: Vec<String> = members.iter().map(|(id, _)| id.clone()).collect();
        // A provider version, where known, outranks arrival order (UUIDv7 intake ids).
        let newest = members
            .iter()
            .max_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)))
            .map(|(id, _)| id.clone())
            .unwrap_or_else(|| claim.run.intake_id.clone());
        found.insert(claim.run.id.clone(), Members { ids, newest });
    }
    Ok(found)
}
