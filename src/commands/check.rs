//! `switchyard check`: validates a config file and warns about what would surprise its admin.

use std::path::Path;

use switchyard_core::{Channel, WorkflowStatus};
use switchyard_router::TriggerIndex;

use crate::config::{LoadedConfig, SourceConfig, TargetConfig, format_window, process_env};

/// What `check` found; errors make the file unusable, warnings do not.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
}

/// Checks the file; prints the report and returns whether it is usable.
pub fn check(path: &Path) -> bool {
    let report = match LoadedConfig::load(path) {
        Ok(loaded) => review(&loaded, &process_env),
        Err(error) => Report {
            errors: vec![error.to_string()],
            warnings: Vec::new(),
        },
    };
    for warning in &report.warnings {
        println!("warning: {warning}");
    }
    for error in &report.errors {
        println!("error: {error}");
    }
    if report.errors.is_empty() {
        println!(
            "{}: OK ({} warning{})",
            path.display(),
            report.warnings.len(),
            if report.warnings.len() == 1 { "" } else { "s" }
        );
    }
    report.errors.is_empty()
}

/// The warnings (and unset secrets, which `serve` would refuse) of a parsed config.
pub fn review(loaded: &LoadedConfig, env: crate::config::EnvLookup<'_>) -> Report {
    let mut report = Report::default();
    report.errors.extend(loaded.capability_gaps.iter().cloned());
    let config = &loaded.config;
    let mut degraded: Vec<_> = crate::authority::Authority::new(config)
        .degraded(switchyard_store::now_millis())
        .into_iter()
        .filter(|(_, refusal)| {
            !matches!(
                refusal.reason,
                crate::authority::Reason::MissingCapabilities(_)
            )
        })
        .map(|(workflow, refusal)| {
            format!(
                "live workflow `{workflow}` will not start runs: {refusal} (its events are \
                 recorded authority_unavailable)"
            )
        })
        .collect();
    degraded.sort();
    report.warnings.extend(degraded);
    let workflows = loaded.workflows();

    for tie in TriggerIndex::build(loaded.revision.clone(), &workflows).priority_ties() {
        report.warnings.push(format!(
            "priority tie: workflows {} all trigger on ({}, {}) for tenant `{}` at priority {}; \
             `{}` wins by id order",
            tie.workflow_ids.join(", "),
            tie.channel,
            tie.event_type,
            tie.tenant_id,
            tie.priority,
            tie.workflow_ids[0]
        ));
    }

    for workflow in &workflows {
        match workflow.status {
            WorkflowStatus::Draft => report.warnings.push(format!(
                "workflow `{}` is a draft: it never matches a real event",
                workflow.id
            )),
            WorkflowStatus::Disabled => {}
            WorkflowStatus::Shadow => report.warnings.push(format!(
                "workflow `{}` is a shadow: evaluated on live events and recorded, never run",
                workflow.id
            )),
            WorkflowStatus::Live => {
                for trigger in &workflow.triggers {
                    if let Some(why) = unproducible(
                        config,
                        &workflow.tenant_id,
                        trigger.channel,
                        &trigger.event_type,
                    ) {
                        report.warnings.push(format!(
                            "live workflow `{}` triggers on ({}, {}), but {why}",
                            workflow.id, trigger.channel, trigger.event_type
                        ));
                    }
                }
            }
        }
    }

    for schedule in &config.schedules {
        let triggered = workflows.iter().any(|w| {
            w.status == WorkflowStatus::Live
                && w.tenant_id == schedule.tenant
                && w.triggers
                    .iter()
                    .any(|t| t.channel == Channel::Schedule && t.event_type == schedule.event_type)
        });
        if !triggered {
            report.warnings.push(format!(
                "schedule `{}`: no live workflow of tenant `{}` triggers on (schedule, {}); \
                 its fires are recorded no_trigger_match",
                schedule.id, schedule.tenant, schedule.event_type
            ));
        }
    }

    for source in &config.sources {
        report.warnings.extend(source.settings().warnings());
        if let Some(why) = source.settings().unsigned() {
            report.warnings.push(format!(
                "INSECURE: {} source `{}` accepts unsigned deliveries ({why}); anyone who can \
                 reach it can create runs",
                source.kind(),
                source.name()
            ));
        }
        if let Err(error) = source.resolve(env) {
            report
                .errors
                .push(format!("{error}: `serve` would refuse to start"));
        }
    }
    report.warnings.extend(shared_signing_secrets(config, env));
    let ledger = config.retention.ledger;
    for source in &config.sources {
        if let Some((window, sender)) = source.settings().retry_window()
            && ledger < window
        {
            report.warnings.push(format!(
                "retention.ledger ({}) is shorter than the retry window of {} source `{}` \
                 ({sender}): deduplication of redeliveries lasts only as long as the ledger row, \
                 so a late redelivery would be routed again",
                format_window(ledger),
                source.kind(),
                source.name(),
            ));
        }
    }
    for target in &config.targets {
        if let TargetConfig::Http(http) = target
            && http.insecure_skip_signature
        {
            report.warnings.push(format!(
                "INSECURE: http target `{}` sends unsigned requests \
                 (insecure_skip_signature = true); its worker cannot tell them from forgeries",
                http.name
            ));
        }
        if let Err(error) = target.resolve(env) {
            report
                .errors
                .push(format!("{error}: `serve` would refuse to start"));
        }
    }
    for notifier in &config.notifiers {
        if let Err(error) = notifier.resolve(env) {
            report
                .errors
                .push(format!("{error}: `serve` would refuse to start"));
        }
    }
    match env(&config.server.api_token_env) {
        None => report.errors.push(format!(
            "server.api_token_env names `{}`, which is not set: `serve` would refuse to start",
            config.server.api_token_env
        )),
        Some(api_token) => {
            if let Err(problems) = crate::config::resolve_tokens(&config.tokens, &api_token, env) {
                report.errors.extend(
                    problems
                        .into_iter()
                        .map(|p| format!("{p}: `serve` would refuse to start")),
                );
            }
        }
    }
    report
}

/// Sources of different tenants that verify signatures with one secret: a request signed for
/// one is accepted at the other, so whoever signs for one tenant can send the other's events.
/// A warning, not an error: one sender may serve both tenants on purpose (then it holds the
/// secret either way). Names the sources and tenants, never the secret.
fn shared_signing_secrets(
    config: &crate::config::Config,
    env: crate::config::EnvLookup<'_>,
) -> Vec<String> {
    let signed: Vec<(&SourceConfig, Vec<&str>, String)> = config
        .sources
        .iter()
        .filter_map(|source| {
            let var = source.settings().signing_secret_env()?;
            let secret = env(var)?.trim().to_owned();
            let mut tenants = source.tenants();
            tenants.sort_unstable();
            tenants.dedup();
            Some((source, tenants, secret))
        })
        .collect();
    let mut warnings = Vec::new();
    for (i, (a, a_tenants, a_secret)) in signed.iter().enumerate() {
        for (b, b_tenants, b_secret) in &signed[i + 1..] {
            if a_secret == b_secret && a_tenants != b_tenants {
                warnings.push(format!(
                    "{} source `{}` ({}) and {} source `{}` ({}) verify signatures \
                     with the same secret: a request signed for one is accepted at the other, so \
                     whoever signs for one tenant can send events as the other; give each source \
                     its own secret",
                    a.kind(),
                    a.name(),
                    tenants_phrase(a_tenants),
                    b.kind(),
                    b.name(),
                    tenants_phrase(b_tenants),
                ));
            }
        }
    }
    warnings
}

/// `tenant `acme`` or `tenants `acme`, `globex``.
fn tenants_phrase(tenants: &[&str]) -> String {
    let names: Vec<String> = tenants.iter().map(|t| format!("`{t}`")).collect();
    let plural = if names.len() == 1 { "" } else { "s" };
    format!("tenant{plural} {}", names.join(", "))
}

/// Why no configured source can produce this trigger for the tenant, if none can.
fn unproducible(
    config: &crate::config::Config,
    tenant: &str,
    channel: Channel,
    event_type: &str,
) -> Option<String> {
    let produces = |source: &SourceConfig| source.settings().produces(tenant, channel, event_type);
    match channel {
        // These arrive through POST /v1/events, which any trusted sender can use.
        Channel::Chat | Channel::WebForm => None,
        Channel::Schedule
            if config
                .schedules
                .iter()
                .any(|s| s.tenant == tenant && s.event_type == event_type) =>
        {
            None
        }
        Channel::Schedule => Some(format!(
            "no [[schedule]] of tenant `{tenant}` has event_type `{event_type}` (schedule \
             events are made only by [[schedule]] entries)"
        )),
        _ if config.sources.iter().any(produces) => None,
        _ => Some(format!(
            "no configured {channel} source of tenant `{tenant}` produces it (only POST /v1/events could)"
        )),
    }
}
