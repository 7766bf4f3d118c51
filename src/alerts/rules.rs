//! The rules in force: the admin's `[[alert]]` entries and, for each kind none of them
//! covers, a built-in rule with default bounds (`builtin:<kind>`), unless `[alerting]` turns
//! it off.

use std::time::Duration;

use crate::config::{AlertConfig, AlertKind, Settings};

/// One rule with its notifiers resolved.
#[derive(Debug, Clone)]
pub struct Rule {
    pub config: AlertConfig,
    /// The notifiers it tells (its `notify`, or every notifier).
    pub notify: Vec<String>,
}

/// Default consecutive failures of a push target before `target_failing`.
pub const TARGET_FAILURES: u32 = 5;
/// Default dead letters within [`DEAD_LETTER_WINDOW`] before `dead_letters`.
pub const DEAD_LETTERS: u32 = 1;
pub const DEAD_LETTER_WINDOW: Duration = Duration::from_secs(60 * 60);
/// Default longest a due dispatch may wait.
pub const DISPATCH_LAG: Duration = Duration::from_secs(10 * 60);
/// Default longest a mailbox may go without a successful poll.
pub const MAILBOX_STALLED: Duration = Duration::from_secs(15 * 60);
/// Default fewest answers before a sender's bad-answer ratio counts.
pub const MIN_DELIVERIES: u32 = 20;
/// `provider_disable_risk` fires at this share of the sender's own threshold by default
/// (Slack: 1% of the hour's deliveries, where Slack acts at 5%).
pub const RISK_SHARE: f64 = 0.2;

impl Rule {
    /// Whether its findings are this replica's own view: the rules fed by in-memory health
    /// rather than by the shared database or config. Their alerts are still one per rule and
    /// scope across replicas; each replica's findings are recorded as its observation, and
    /// the alert resolves once no replica observes the fault (see `evaluate_once`).
    pub fn is_local(&self) -> bool {
        !matches!(
            self.config.kind,
            AlertKind::SourceQuiet | AlertKind::DispatchLag | AlertKind::AuthorityDegraded
        )
    }
}

/// Every rule in force under `settings`.
pub fn in_force(settings: &Settings) -> Vec<Rule> {
    let config = &settings.loaded.config;
    let every: Vec<String> = settings
        .notifiers
        .iter()
        .map(|n| n.name().to_owned())
        .collect();
    let mut rules: Vec<Rule> = config
        .alerts
        .iter()
        .map(|alert| Rule {
            notify: alert.notify.clone().unwrap_or_else(|| every.clone()),
            config: alert.clone(),
        })
        .collect();
    if !config.alerting.builtin {
        return rules;
    }
    let builtin_notify = config.alerting.builtin_notify.clone().unwrap_or(every);
    for kind in AlertKind::ALL {
        if kind == AlertKind::SourceQuiet
            || config.alerting.builtin_disabled.contains(&kind)
            || config.alerts.iter().any(|alert| alert.kind == kind)
        {
            continue;
        }
        rules.push(Rule {
            config: AlertConfig {
                name: format!("builtin:{}", kind.as_str()),
                kind,
                source: None,
                tenant: None,
                event_type: None,
                expect_within: None,
                business_hours: None,
                target: None,
                threshold: None,
                window: None,
                max_age: None,
                max_bad_ratio: None,
                min_deliveries: None,
                notify: None,
            },
            notify: builtin_notify.clone(),
        });
    }
    rules
}
