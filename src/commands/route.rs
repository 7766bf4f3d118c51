//! `switchyard route`: a dry run of one event against the config (or a stored past revision) —
//! each candidate's verdict (priority, and whether its condition holds for the event's
//! payload), which workflow would win, and whether its entity is locked right now. Writes
//! nothing.

use std::path::Path;

use anyhow::Context;
use serde::Deserialize;
use switchyard_core::Channel;
use switchyard_store::{Store, now_millis};

use crate::config::LoadedConfig;
use crate::explain::explain;

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

/// The event a dry run explains, borrowed.
struct Event<'a> {
    channel: Channel,
    event_type: &'a str,
    tenant_id: &'a str,
    target_entity_id: &'a str,
    payload: &'a serde_json::Value,
}

/// Prints the dry run's explanation, against the config file or (`revision`, an id or
/// `config_revision` hash from the ledger) a past revision stored in the database.
pub async fn route(
    config_path: &Path,
    event_path: &Path,
    revision: Option<&str>,
) -> anyhow::Result<()> {
    let loaded = LoadedConfig::load(config_path)?;
    let text = std::fs::read_to_string(event_path)
        .with_context(|| format!("cannot read {}", event_path.display()))?;
    let event: SampleEvent = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a canonical event", event_path.display()))?;
    explain_event(
        &loaded,
        event.channel,
        &event.event_type,
        &event.tenant_id,
        &event.target_entity_id,
        &event.payload,
        revision,
    )
    .await
}

/// Prints which workflow would take this event and why (the end of both dry runs).
pub(super) async fn explain_event(
    loaded: &LoadedConfig,
    channel: Channel,
    event_type: &str,
    tenant_id: &str,
    target_entity_id: &str,
    payload: &serde_json::Value,
    revision: Option<&str>,
) -> anyhow::Result<()> {
    let event = Event {
        channel,
        event_type,
        tenant_id,
        target_entity_id,
        payload,
    };
    let (revision_label, workflows) = match revision {
        None => (
            format!("config revision {}", loaded.revision),
            loaded.workflows(),
        ),
        Some(wanted) => {
            let store = open_read_only(loaded).await?;
            let stored = store
                .revision(wanted)
                .await
                .context("cannot read config_revisions (is the database migrated?)")?
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "no config revision `{wanted}` is stored (see GET /v1/revisions)"
                    )
                })?;
            let until = stored
                .in_force_until
                .map_or("now".to_owned(), crate::http::millis_to_rfc3339);
            (
                format!(
                    "stored config revision {} ({}), in force {} to {until}",
                    stored.hash,
                    stored.id,
                    crate::http::millis_to_rfc3339(stored.in_force_from)
                ),
                stored.content.domain_workflows(),
            )
        }
    };

    println!(
        "event: {} {} tenant={} entity={} ({revision_label})",
        event.channel, event.event_type, event.tenant_id, event.target_entity_id
    );
    let explained = explain(
        &loaded.revision,
        &workflows,
        event.tenant_id,
        event.channel,
        event.event_type,
        event.payload,
    );
    for ignored in explained.candidates.iter().filter(|c| c.rank.is_none()) {
        println!(
            "  ignored: `{}` is {} (only live workflows match)",
            ignored.workflow_id,
            ignored.status.as_str()
        );
    }
    if explained.live().next().is_none() {
        println!(
            "outcome: no_trigger_match (no live workflow of tenant `{}` triggers on this)",
            event.tenant_id
        );
        return Ok(());
    }
    for candidate in explained.live() {
        let condition = match (&candidate.when, &candidate.failed) {
            (None, _) => String::new(),
            (Some(when), None) => format!(", when {when}: holds"),
            (Some(_), Some(failed)) => format!(", condition fails: {failed}"),
        };
        let mark = if candidate.wins { "  <- wins" } else { "" };
        println!(
            "  {}. `{}` at priority {}{condition}{mark}",
            candidate.rank.unwrap_or_default(),
            candidate.workflow_id,
            candidate.priority
        );
    }
    let Some(winner) = explained.winner().cloned() else {
        println!("outcome: no_trigger_match (no candidate's condition holds for this payload)");
        return Ok(());
    };
    if explained.tie {
        println!("  note: a priority tie, broken by workflow id");
    }
    // The winner's principal, as the file defines it now (a stored revision is explained by
    // its routing alone).
    if revision.is_none()
        && let Err(refusal) = crate::authority::Authority::new(&loaded.config)
            .check_workflow(&winner.workflow_id, switchyard_store::now_millis())
    {
        println!(
            "outcome: authority_unavailable (`{}` would be chosen, but it runs as {refusal})",
            winner.workflow_id
        );
        return Ok(());
    }

    // The lock is read as it is now, whichever revision explains the choice.
    match lock_state(loaded, event.tenant_id, event.target_entity_id).await {
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
    let store = open_read_only(loaded).await?;
    let now = now_millis();
    Ok(store
        .lease_of(tenant_id, entity_id)
        .await
        .context("cannot read entity_locks (is the database migrated?)")?
        .and_then(|lock| {
            lock.held_at(now)
                .map(|run_id| (run_id.to_owned(), lock.expires_at))
        }))
}

/// The database, SQLite read-only so a dry run never creates a file.
async fn open_read_only(loaded: &LoadedConfig) -> anyhow::Result<Store> {
    let url = loaded.database_url().replace("mode=rwc", "mode=ro");
    Store::open(&url, &loaded.config.database.store_options())
        .await
        .context("cannot open the database")
}
