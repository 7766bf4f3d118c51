//! `switchyard route`: a dry run of one event against the config — each candidate's verdict
//! (priority, and whether its condition holds for the event's payload), which workflow would
//! win, and whether its entity is locked right now. Writes nothing.

use std::path::Path;

use anyhow::Context;
use serde::Deserialize;
use switchyard_core::{Channel, WorkflowStatus};
use switchyard_router::{Choice, TriggerIndex, now_millis, runs};

use crate::config::LoadedConfig;
use crate::store;

/// The event to try; `payload` and `raw_ref` may be left out.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SampleEvent {
    channel: Channel,
    event_type: String,
    tenant_id: String,
    target_entity_id: String,
    /// The normalised payload trigger conditions read (`{}` when left out).
    #[serde(default = "empty_payload")]
    payload: serde_json::Value,
    #[serde(default, rename = "raw_ref")]
    _raw_ref: serde::de::IgnoredAny,
}

fn empty_payload() -> serde_json::Value {
    serde_json::json!({})
}

/// Prints the dry run's explanation.
pub async fn route(config_path: &Path, event_path: &Path) -> anyhow::Result<()> {
    let loaded = LoadedConfig::load(config_path)?;
    let text = std::fs::read_to_string(event_path)
        .with_context(|| format!("cannot read {}", event_path.display()))?;
    let event: SampleEvent = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a canonical event", event_path.display()))?;
    let workflows = loaded.workflows();
    let index = TriggerIndex::build(loaded.revision.clone(), &workflows);

    println!(
        "event: {} {} tenant={} entity={} (config revision {})",
        event.channel, event.event_type, event.tenant_id, event.target_entity_id, loaded.revision
    );
    for workflow in workflows.iter().filter(|w| {
        w.status != WorkflowStatus::Live
            && w.tenant_id == event.tenant_id
            && w.triggers
                .iter()
                .any(|t| t.channel == event.channel && t.event_type == event.event_type)
    }) {
        println!(
            "  ignored: `{}` is {} (only live workflows match)",
            workflow.id,
            workflow.status.as_str()
        );
    }
    let verdicts = index.verdicts(
        &event.tenant_id,
        event.channel,
        &event.event_type,
        &event.payload,
    );
    let choice = index.choose_for(
        &event.tenant_id,
        event.channel,
        &event.event_type,
        &event.payload,
    );
    let winner = match choice {
        Choice::Chosen(winner) => Some(winner),
        Choice::NoTrigger => {
            println!(
                "outcome: no_trigger_match (no live workflow of tenant `{}` triggers on this)",
                event.tenant_id
            );
            return Ok(());
        }
        Choice::NoConditionHeld(_) => None,
    };
    let mut marked = false;
    for (rank, verdict) in verdicts.iter().enumerate() {
        let candidate = &verdict.candidate;
        let condition = match (&candidate.when, &verdict.failed) {
            (None, _) => String::new(),
            (Some(when), None) => format!(", when {when}: holds"),
            (Some(_), Some(failed)) => format!(", condition fails: {failed}"),
        };
        let wins = !marked && verdict.failed.is_none();
        marked |= wins;
        let mark = if wins { "  <- wins" } else { "" };
        println!(
            "  {}. `{}` at priority {}{condition}{mark}",
            rank + 1,
            candidate.workflow_id,
            candidate.priority
        );
    }
    let Some(winner) = winner else {
        println!("outcome: no_trigger_match (no candidate's condition holds for this payload)");
        return Ok(());
    };
    if verdicts
        .iter()
        .filter(|v| v.failed.is_none())
        .nth(1)
        .is_some_and(|v| v.candidate.priority == winner.priority)
    {
        println!("  note: a priority tie, broken by workflow id");
    }

    match lock_state(&loaded, &event.tenant_id, &event.target_entity_id).await {
        Ok(Some((run_id, expires_at))) => println!(
            "outcome: entity_locked (`{}` would be chosen, but run {run_id} holds {} until {})",
            winner.workflow_id,
            event.target_entity_id,
            crate::http::millis_to_rfc3339(expires_at)
        ),
        Ok(None) => println!(
            "outcome: routed to `{}` (entity {} is free)",
            winner.workflow_id, event.target_entity_id
        ),
        Err(error) => println!(
            "outcome: `{}` would be chosen; the entity lock could not be read ({error:#})",
            winner.workflow_id
        ),
    }
    Ok(())
}

/// The entity's holder and lease expiry, when an active run holds it. Opens SQLite read-only so
/// a dry run never creates a database file.
async fn lock_state(
    loaded: &LoadedConfig,
    tenant_id: &str,
    entity_id: &str,
) -> anyhow::Result<Option<(String, i64)>> {
    let url = loaded.database_url().replace("mode=rwc", "mode=ro");
    let db = store::connect(&url, &loaded.config.database)
        .await
        .context("cannot open the database")?;
    let now = now_millis();
    Ok(runs::lock_of(&db, tenant_id, entity_id)
        .await
        .context("cannot read entity_locks (is the database migrated?)")?
        .and_then(|lock| {
            lock.held_at(now)
                .map(|run_id| (run_id.to_owned(), lock.expires_at))
        }))
}
