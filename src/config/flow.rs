//! `[rates]`: intake rates per tenant and per source, and the checks of the flow-control keys
//! that live elsewhere (`max_running`/`max_queued` on workflows, `coalesce` on triggers).

use std::collections::BTreeMap;

use serde::Deserialize;
use switchyard_core::Rate;

use super::{SourceConfig, WorkflowConfig};

/// `[rates]`: `tenant.<id> = { limit, per, burst }` and `source.<name> = { ... }`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RatesConfig {
    /// Deliveries admitted per tenant (every source of the tenant together).
    #[serde(default)]
    pub tenant: BTreeMap<String, Rate>,
    /// Deliveries admitted per source (`/v1/events` is the source `api`).
    #[serde(default)]
    pub source: BTreeMap<String, Rate>,
}

impl RatesConfig {
    pub fn is_empty(&self) -> bool {
        self.tenant.is_empty() && self.source.is_empty()
    }

    /// Rates that name nothing configured (a typo would otherwise limit nothing, silently).
    pub fn problems(&self, sources: &[SourceConfig], workflows: &[WorkflowConfig]) -> Vec<String> {
        let mut problems = Vec::new();
        for name in self.source.keys() {
            let known =
                name == crate::http::events::API_SOURCE || sources.iter().any(|s| s.name() == name);
            if !known {
                problems.push(format!(
                    "rates.source.{name}: no source is named `{name}` (the sources are the \
                     [[source]] names and `api` for /v1/events)"
                ));
            }
        }
        for tenant in self.tenant.keys() {
            let known = sources
                .iter()
                .any(|s| s.tenants().contains(&tenant.as_str()))
                || workflows.iter().any(|w| &w.tenant == tenant);
            if !known {
                problems.push(format!(
                    "rates.tenant.{tenant}: no source or workflow belongs to tenant `{tenant}`"
                ));
            }
        }
        problems
    }
}

/// Event types whose order carries meaning: coalescing them would drop all but one.
const ORDERED_WORDS: [&str; 6] = ["message", "comment", "email", "reply", "mention", "chat"];

/// Why a trigger may not coalesce, if it may not.
pub fn coalesce_refusal(channel: &str, event_type: &str) -> Option<String> {
    if matches!(channel, "email" | "slack" | "chat") {
        return Some(format!(
            "`coalesce` is refused on the `{channel}` channel: its events are messages, whose \
             order and every one of which carry meaning (a coalesced run would see only the \
             newest)"
        ));
    }
    let lower = event_type.to_ascii_lowercase();
    ORDERED_WORDS
        .iter()
        .find(|word| lower.contains(*word))
        .map(|word| {
            format!(
                "`coalesce` is refused on `{event_type}`: {word}s are events whose order and \
                 every one of which carry meaning (a coalesced run would see only the newest); \
                 coalesce state changes such as `ticket.updated` or `ticket.status_changed`"
            )
        })
}
