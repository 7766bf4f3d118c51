//! What each rule kind finds wrong right now, as [`Finding`]s (one per scope). Every read is
//! bounded: in-memory health (pollers, writers, targets, answers), config, or one store probe
//! per source or target: `oldest_due_dispatch` an index probe, `last_delivery` a primary key
//! range of the rule's window plus, while a source is quiet, only the rows no earlier
//! evaluation read ([`QuietSearches`]), never the whole ledger again.

use serde_json::{Value, json};
use switchyard_store::alerts::signals::DeliveryScope;
use switchyard_store::entities::alert;
use switchyard_store::{DbErr, Millis};

use super::Inputs;
use super::answers;
use super::rules::{self, Rule};
use crate::config::hours::Hours;
use crate::config::{AlertKind, ResolvedTarget};

/// The scope of `reload_refused`: the config reload, whichever replica refused it.
pub const RELOAD_SCOPE: &str = "config";
/// The scope of `intake_unhealthy`: intake, whichever replica's writer is failing.
pub const INTAKE_SCOPE: &str = "intake";

/// How far back a `source_quiet` scope's ledger has been searched: every row of the scope
/// recorded before `searched_before` has been read, and the newest of them arrived at `last`.
/// Ledger rows are only ever added at the present, so the next search reads only newer rows.
#[derive(Debug, Clone, Copy)]
pub struct QuietSearch {
    pub searched_before: Millis,
    pub last: Option<Millis>,
}

/// What this daemon remembers of its `source_quiet` searches, by rule and scope.
#[derive(Debug, Default)]
pub struct QuietSearches(
    std::sync::Mutex<std::collections::HashMap<(String, String), QuietSearch>>,
);

impl QuietSearches {
    fn get(&self, key: &(String, String)) -> Option<QuietSearch> {
        self.0.lock().ok().and_then(|map| map.get(key).copied())
    }

    fn put(&self, key: (String, String), search: QuietSearch) {
        if let Ok(mut map) = self.0.lock() {
            map.insert(key, search);
        }
    }
}

/// One scope a rule finds wrong.
#[derive(Debug, Clone)]
pub struct Finding {
    pub scope: String,
    pub tenant_id: Option<String>,
    pub summary: String,
    pub numbers: Value,
    pub since: Millis,
}

fn secs(ms: i64) -> i64 {
    ms.max(0) / 1000
}

fn human(ms: i64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(secs(ms) as u64)).to_string()
}

/// The findings of `rule` at `now`; `firing` is every alert firing when the evaluation began.
pub async fn find(
    rule: &Rule,
    inputs: &Inputs,
    firing: &[alert::Model],
    now: Millis,
) -> Result<Vec<Finding>, DbErr> {
    let live = inputs.live.current();
    let settings = &live.settings;
    let config = &rule.config;
    // Pull targets have no delivery health, but their runs can wait for a worker (lag).
    let targets_of = |push_only: bool| {
        settings
            .targets
            .iter()
            .filter(|t| !push_only || !matches!(t, ResolvedTarget::Pull(_)))
            .map(|t| t.name().to_owned())
            .filter(|name| config.target.as_ref().is_none_or(|only| only == name))
            .collect::<Vec<_>>()
    };
    let mut found = Vec::new();
    match config.kind {
        AlertKind::SourceQuiet => {
            let (Some(source), Some(expect)) = (&config.source, config.expect_within) else {
                return Ok(found);
            };
            let expect_ms = expect.as_millis() as i64;
            let hours = config
                .business_hours
                .as_ref()
                .and_then(|h| Hours::parse(h).ok());
            // With business hours, quiet time outside them does not count: look back a week
            // more (the walk over the hours is bounded by it).
            let lookback = expect_ms + if hours.is_some() { 7 * 86_400_000 } else { 0 };
            let scope = DeliveryScope {
                source,
                tenant_id: config.tenant.as_deref(),
                event_type: config.event_type.as_deref(),
            };
            let mut scope_name = format!("source={source}");
            for (key, value) in [
                ("tenant", &config.tenant),
                ("event_type", &config.event_type),
            ] {
                if let Some(value) = value {
                    scope_name.push_str(&format!(",{key}={value}"));
                }
            }
            let window_from = now - lookback;
            let last = match inputs.store.last_delivery(scope, window_from, None).await? {
                Some(at) => Some(at),
                None => {
                    // Older than the window: read only what no earlier evaluation has read.
                    let key = (config.name.clone(), scope_name.clone());
                    let searched = inputs.quiet_searches.get(&key);
                    let from = searched.map_or(0, |s| s.searched_before);
                    let older = inputs
                        .store
                        .last_delivery(scope, from, Some(window_from))
                        .await?
                        .or(searched.and_then(|s| s.last));
                    inputs.quiet_searches.put(
                        key,
                        QuietSearch {
                            searched_before: window_from.max(from),
                            last: older,
                        },
                    );
                    older
                }
            };
            let scope = scope_name;
            // Never heard from: quiet since this daemon started watching, or since the alert
            // already firing says (raised by a replica that started earlier, or by this daemon
            // before a restart), so a later start neither resolves nor re-raises it.
            let watched_from = firing
                .iter()
                .find(|a| a.rule == config.name && a.scope == scope)
                .map_or(inputs.started, |a| a.since.min(inputs.started));
            let quiet_from = last.unwrap_or(watched_from);
            let quiet_ms = match &hours {
                Some(hours) => hours.inside_millis(quiet_from.max(now - lookback), now),
                None => now - quiet_from,
            };
            if quiet_ms > expect_ms {
                let tenant = config.tenant.clone().or_else(|| {
                    let tenants = live.source_tenants(source);
                    (tenants.len() == 1).then(|| tenants[0].clone())
                });
                found.push(Finding {
                    scope,
                    tenant_id: tenant,
                    summary: format!(
                        "source `{source}` has had no delivery for {} (expected within {})",
                        human(now - last.unwrap_or(quiet_from)),
                        human(expect_ms)
                    ),
                    numbers: json!({
                        "last_delivery_at": last.map(switchyard_store::millis_rfc3339),
                        "quiet_secs": secs(quiet_ms),
                        "expect_within_secs": secs(expect_ms),
                    }),
                    since: last.unwrap_or(quiet_from),
                });
            }
        }
        AlertKind::MailboxStalled => {
            let bound = config.max_age.unwrap_or(rules::MAILBOX_STALLED).as_millis() as i64;
            for (source, status) in inputs.sources.snapshot() {
                if config.source.as_ref().is_some_and(|only| *only != source) || !status.holds_lease
                {
                    continue;
                }
                let last = status.last_successful_poll.map(|t| t.timestamp_millis());
                let stalled_for = now - last.unwrap_or(inputs.started);
                let why = if status.consecutive_failures
                    >= crate::source_status::UNHEALTHY_AFTER_FAILURES
                {
                    Some("failing")
                } else if stalled_for > bound {
                    Some(if status.connected {
                        "not advancing"
                    } else {
                        "not connected"
                    })
                } else {
                    None
                };
                let Some(why) = why else { continue };
                found.push(Finding {
                    scope: format!("source={source}"),
                    tenant_id: live
                        .source_tenants(&source)
                        .first()
                        .cloned()
                        .filter(|_| live.source_tenants(&source).len() == 1),
                    summary: format!(
                        "mailbox `{source}` is {why}: no successful poll for {}{}",
                        human(stalled_for),
                        status
                            .last_error
                            .as_deref()
                            .map(|e| format!("; last error: {e}"))
                            .unwrap_or_default()
                    ),
                    numbers: json!({
                        "connected": status.connected,
                        "consecutive_failures": status.consecutive_failures,
                        "last_successful_poll": status.last_successful_poll,
                        "stalled_secs": secs(stalled_for),
                    }),
                    since: last.unwrap_or(inputs.started),
                });
            }
        }
        AlertKind::ProviderDisableRisk => {
            for source in &settings.loaded.config.sources {
                let Some(policy) = source.settings().sender_disables() else {
                    continue;
                };
                let name = source.name();
                if config.source.as_deref().is_some_and(|only| only != name) {
                    continue;
                }
                let counts = answers::counts(name, policy.window, policy.ack_within, now);
                let min = u64::from(config.min_deliveries.unwrap_or(rules::MIN_DELIVERIES));
                let ratio_bound = config
                    .max_bad_ratio
                    .unwrap_or(policy.disable_ratio * rules::RISK_SHARE);
                if counts.answers < min.max(1) {
                    continue;
                }
                let ratio = counts.bad as f64 / counts.answers as f64;
                if ratio < ratio_bound {
                    continue;
                }
                found.push(Finding {
                    scope: format!("source={name}"),
                    tenant_id: None,
                    summary: format!(
                        "{:.1}% of our answers to {} (source `{name}`) in the last {} failed or took over {}: {} disables the integration at {:.0}%",
                        ratio * 100.0,
                        policy.sender,
                        human(policy.window.as_millis() as i64),
                        human(policy.ack_within.as_millis() as i64),
                        policy.sender,
                        policy.disable_ratio * 100.0
                    ),
                    numbers: json!({
                        "answers": counts.answers,
                        "failed": counts.failed,
                        "slow": counts.slow,
                        "bad_ratio": ratio,
                        "alert_ratio": ratio_bound,
                        "provider_disable_ratio": policy.disable_ratio,
                        "window_secs": policy.window.as_secs(),
                    }),
                    since: now - policy.window.as_millis() as i64,
                });
            }
        }
        AlertKind::TargetFailing | AlertKind::DeadLetters => {
            let healths = inputs.targets.snapshot();
            for target in targets_of(true) {
                let Some(health) = healths.get(&target) else {
                    continue;
                };
                let finding = if config.kind == AlertKind::TargetFailing {
                    let bound = config.threshold.unwrap_or(rules::TARGET_FAILURES);
                    (health.consecutive_failures >= bound).then(|| Finding {
                        scope: format!("target={target}"),
                        tenant_id: None,
                        summary: format!(
                            "target `{target}` failed {} deliveries in a row{}",
                            health.consecutive_failures,
                            health
                                .last_error
                                .as_deref()
                                .map(|e| format!("; last error: {e}"))
                                .unwrap_or_default()
                        ),
                        numbers: json!({
                            "consecutive_failures": health.consecutive_failures,
                            "last_success": health.last_success,
                            "last_error": health.last_error,
                        }),
                        since: now,
                    })
                } else {
                    let window = config
                        .window
                        .unwrap_or(rules::DEAD_LETTER_WINDOW)
                        .as_millis() as i64;
                    let bound = config.threshold.unwrap_or(rules::DEAD_LETTERS) as usize;
                    let recent: Vec<_> = health
                        .dead_letters
                        .iter()
                        .filter(|at| **at > now - window)
                        .collect();
                    (recent.len() >= bound).then(|| Finding {
                        scope: format!("target={target}"),
                        tenant_id: None,
                        summary: format!(
                            "target `{target}`: {} runs dead-lettered in the last {}",
                            recent.len(),
                            human(window)
                        ),
                        numbers: json!({"dead_letters": recent.len(), "window_secs": secs(window)}),
                        since: recent.first().map_or(now, |at| **at),
                    })
                };
                found.extend(finding);
            }
        }
        AlertKind::DispatchLag => {
            let bound = config.max_age.unwrap_or(rules::DISPATCH_LAG).as_millis() as i64;
            for target in targets_of(false) {
                let Some(due) = inputs.store.oldest_due_dispatch(&target, now).await? else {
                    continue;
                };
                if now - due > bound {
                    found.push(Finding {
                        scope: format!("target={target}"),
                        tenant_id: None,
                        summary: format!(
                            "target `{target}`: the oldest due run has waited {} for delivery (bound {})",
                            human(now - due),
                            human(bound)
                        ),
                        numbers: json!({"lag_secs": secs(now - due), "bound_secs": secs(bound)}),
                        since: due,
                    });
                }
            }
        }
        AlertKind::ReloadRefused => {
            if let Some((at, error)) = inputs.status.reload_refused() {
                found.push(Finding {
                    scope: RELOAD_SCOPE.to_owned(),
                    tenant_id: None,
                    summary: format!(
                        "a config reload was refused; the old revision stays in force: {error}"
                    ),
                    numbers: json!({"config_revision": live.revision()}),
                    since: at,
                });
            }
        }
        AlertKind::IntakeUnhealthy => {
            let writers = inputs.intake.writers();
            let bad: Vec<_> = writers
                .iter()
                .enumerate()
                .filter(|(_, w)| !w.healthy)
                .collect();
            if !bad.is_empty() {
                found.push(Finding {
                    scope: INTAKE_SCOPE.to_owned(),
                    tenant_id: None,
                    summary: format!(
                        "{} of {} intake writers are failing or stopped: deliveries are answered 503",
                        bad.len(),
                        writers.len()
                    ),
                    numbers: json!({"writers": writers}),
                    since: now,
                });
            }
        }
        AlertKind::AuthorityDegraded => {
            let mut degraded: Vec<_> = live.authority.degraded(now).into_iter().collect();
            degraded.sort_by(|a, b| a.0.cmp(b.0));
            for (workflow, refusal) in degraded {
                found.push(Finding {
                    scope: format!("workflow={workflow}"),
                    tenant_id: live.workflows.iter().find(|w| w.id == workflow).map(|w| w.tenant_id.clone()),
                    summary: format!(
                        "live workflow `{workflow}` starts no runs: {refusal} (its events are recorded authority_unavailable)"
                    ),
                    numbers: json!({"principal": refusal.principal.to_string(), "reason": refusal.reason_word()}),
                    since: now,
                });
            }
        }
    }
    Ok(found)
}
