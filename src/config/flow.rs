//! `[rates]`: intake rates per tenant and per source, and the checks of the flow-control keys
//! that live elsewhere (`max_running`/`max_queued` on workflows, `coalesce` on triggers).

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;
use switchyard_core::{Channel, Coalesce, Event, Rate};

use super::{Config, SourceConfig, WorkflowConfig};

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
            let known = name == super::API_SOURCE || sources.iter().any(|s| s.name() == name);
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

/// A workflow's ceilings.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ceiling {
    pub max_running: Option<u32>,
    pub max_queued: Option<u32>,
}

/// The flow control of one config revision, compiled for intake (`intake::flow` decides with
/// it; `live.rs` keeps one per revision).
#[derive(Debug, Default)]
pub struct FlowConfig {
    pub ceilings: HashMap<String, Ceiling>,
    pub(crate) source_rates: HashMap<String, Rate>,
    pub(crate) tenant_rates: HashMap<String, Rate>,
    /// Workflow -> `(channel, event_type, window)` of its coalescing triggers (looked up by
    /// `&str`, so without allocating).
    coalesce: HashMap<String, Vec<(Channel, String, Coalesce)>>,
}

impl FlowConfig {
    pub fn new(config: &Config) -> Self {
        let mut flow = FlowConfig {
            source_rates: config.rates.source.clone().into_iter().collect(),
            tenant_rates: config.rates.tenant.clone().into_iter().collect(),
            ..FlowConfig::default()
        };
        for workflow in &config.workflows {
            if workflow.max_running.is_some() || workflow.max_queued.is_some() {
                flow.ceilings.insert(
                    workflow.id.clone(),
                    Ceiling {
                        max_running: workflow.max_running,
                        max_queued: workflow.max_queued,
                    },
                );
            }
            for trigger in &workflow.triggers {
                if let (Some(window), Ok(channel)) = (trigger.coalesce, trigger.channel.parse()) {
                    let windows = flow.coalesce.entry(workflow.id.clone()).or_default();
                    if !windows
                        .iter()
                        .any(|(c, t, _)| *c == channel && *t == trigger.event_type)
                    {
                        windows.push((channel, trigger.event_type.clone(), window));
                    }
                }
            }
        }
        flow
    }

    /// No ceiling, rate or window: intake does exactly what it did without flow control.
    pub fn is_empty(&self) -> bool {
        self.ceilings.is_empty()
            && self.source_rates.is_empty()
            && self.tenant_rates.is_empty()
            && self.coalesce.is_empty()
    }

    pub fn has_windows(&self) -> bool {
        !self.coalesce.is_empty()
    }

    /// The coalescing window of `workflow`'s trigger for `event`, if it has one.
    pub(crate) fn window(&self, workflow: &str, event: &Event) -> Option<Coalesce> {
        if self.coalesce.is_empty() {
            return None;
        }
        self.coalesce
            .get(workflow)?
            .iter()
            .find(|(channel, event_type, _)| {
                *channel == event.channel && *event_type == event.event_type
            })
            .map(|(_, _, window)| *window)
    }
}
