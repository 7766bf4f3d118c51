//! Alerts: rules evaluated on a task of their own (`evaluate`), raised and resolved through the
//! store's alert lifecycle (one alert per rule and scope across replicas), and notifications
//! delivered from the store's outbox by a second task (`notifiers`), retried with backoff.
//!
//! Invariant: nothing here runs on the intake path. Rules read in-memory health and bounded,
//! indexed store probes; intake's only contribution is `answers::record` after an answer.
//! Invariant: one alert per rule and scope across replicas, also for rules over each
//! replica's own in-memory health: their scope names what is unhealthy (never the replica),
//! each replica's finding is recorded as its observation, and the alert resolves only once no
//! replica still observes the fault (see [`evaluate_once`]).

pub mod answers;
mod findings;
pub mod notifiers;
pub mod rules;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use switchyard_store::alerts::{Fired, Firing};
use switchyard_store::{Millis, Store, millis_rfc3339, now_millis};
use tokio::sync::watch;

use crate::background::Background;
use crate::dispatcher::TargetHealths;
use crate::intake::Intake;
use crate::live::LiveConfig;
use crate::source_status::SourceStatuses;

/// What rules read: the store, the revision in force and this replica's health.
#[derive(Debug, Clone)]
pub struct Inputs {
    pub store: Store,
    pub live: LiveConfig,
    pub intake: Intake,
    pub sources: Arc<SourceStatuses>,
    pub targets: Arc<TargetHealths>,
    pub status: Arc<AlertStatus>,
    /// This replica's stable name (host and config file): who observed its own findings.
    pub replica_id: String,
    /// When this daemon started watching (a source never heard from is quiet since then).
    pub started: Millis,
    /// How far back each `source_quiet` scope's ledger has been read.
    pub(crate) quiet_searches: Arc<findings::QuietSearches>,
}

/// One notifier's delivery health, for `/readyz` and the console.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NotifierHealth {
    pub kind: String,
    pub last_success: Option<String>,
    pub last_failure: Option<String>,
    pub last_error: Option<String>,
    pub consecutive_failures: u32,
}

impl NotifierHealth {
    /// A notifier whose last attempts all failed cannot deliver.
    pub fn failing(&self) -> bool {
        self.consecutive_failures > 0
    }
}

/// Alerting's own state that other parts report into or show.
#[derive(Debug, Default)]
pub struct AlertStatus {
    notifiers: Mutex<BTreeMap<String, NotifierHealth>>,
    reload_refused: Mutex<Option<(Millis, String)>>,
}

impl AlertStatus {
    /// Records a config reload that was refused (the `reload_refused` rule fires until a
    /// reload succeeds).
    pub fn reload_refused(&self) -> Option<(Millis, String)> {
        self.reload_refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn set_reload_refused(&self, error: Option<String>) {
        *self
            .reload_refused
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = error.map(|error| (now_millis(), error));
    }

    pub(crate) fn record_notifier(&self, name: &str, kind: &str, error: Option<String>) {
        let mut map = self.notifiers.lock().unwrap_or_else(|p| p.into_inner());
        let health = map.entry(name.to_owned()).or_default();
        health.kind = kind.to_owned();
        let now = millis_rfc3339(now_millis());
        match error {
            None => {
                health.last_success = Some(now);
                health.consecutive_failures = 0;
            }
            Some(error) => {
                health.last_failure = Some(now);
                health.last_error = Some(error);
                health.consecutive_failures += 1;
            }
        }
    }

    /// Each notifier that has tried to deliver, by name.
    pub fn notifiers(&self) -> BTreeMap<String, NotifierHealth> {
        self.notifiers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The running evaluator and notifier loops.
#[derive(Debug)]
pub struct Alerts {
    evaluator: Background,
    notifier: Background,
}

impl Alerts {
    /// Starts both loops.
    pub fn start(inputs: Inputs) -> Self {
        let wake = Arc::new(tokio::sync::Notify::new());
        let evaluator = {
            let (inputs, wake) = (inputs.clone(), wake.clone());
            Background::spawn(move |stop| evaluate_loop(inputs, wake, stop))
        };
        let notifier = Background::spawn(move |stop| notifiers::deliver_loop(inputs, wake, stop));
        Self {
            evaluator,
            notifier,
        }
    }

    /// Stops both loops (a notification in flight finishes or its claim lapses).
    pub async fn shutdown(&self) {
        self.evaluator.stop(Duration::from_secs(5)).await;
        self.notifier.stop(Duration::from_secs(10)).await;
    }
}

async fn evaluate_loop(
    inputs: Inputs,
    wake: Arc<tokio::sync::Notify>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let every = inputs
            .live
            .current()
            .settings
            .loaded
            .config
            .alerting
            .evaluate_every;
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        match evaluate_once(&inputs).await {
            Ok(true) => wake.notify_one(),
            Ok(false) => {}
            Err(error) => tracing::warn!(%error, "cannot evaluate alert rules; trying again"),
        }
    }
}

/// How long another replica's observation keeps an alert firing after that replica last
/// renewed it: a few of this replica's evaluations, and never less than half a minute (a
/// replica that died stops renewing; its observation then holds nothing).
pub fn observation_fresh_for(evaluate_every: Duration) -> Duration {
    (evaluate_every * 4).max(Duration::from_secs(30))
}

/// Whether this replica can judge `scope` of `rule` at all: a mailbox is judged only by the
/// replica holding its poller lease (the others do not poll it), or by anyone once the
/// source is gone from the config; every other scope by every replica.
fn judges(rule: &rules::Rule, scope: &str, inputs: &Inputs) -> bool {
    if rule.config.kind != crate::config::AlertKind::MailboxStalled {
        return true;
    }
    let Some(source) = scope.strip_prefix("source=") else {
        return true;
    };
    let configured = inputs
        .live
        .current()
        .settings
        .loaded
        .config
        .sources
        .iter()
        .any(|s| s.name() == source);
    !configured
        || inputs
            .sources
            .snapshot()
            .get(source)
            .is_some_and(|status| status.holds_lease)
}

/// Evaluates every rule once: fires what is wrong, resolves what no longer is. Whether any
/// notification became owed.
///
/// Rules over the shared database (`source_quiet`, `dispatch_lag`, `authority_degraded`) find
/// the same thing on every replica: any replica fires or resolves them. Rules over this
/// replica's in-memory health ([`rules::Rule::is_local`]) name what is unhealthy in their scope
/// (`source=inbox`, `target=crm`, `intake`, `config`), never the replica, so replicas share one
/// alert per rule and scope and one notification per transition. Invariant: such an alert
/// fires when any replica observes its fault (recording that replica's observation under the
/// alert's lock) and resolves only when a replica that can judge the scope finds it healthy
/// and no other replica's observation is fresher than [`observation_fresh_for`]; so a replica
/// that recovers (or never saw the fault) does not resolve what another still sees, and the
/// alert does not flap between replicas.
pub async fn evaluate_once(inputs: &Inputs) -> Result<bool, switchyard_store::DbErr> {
    let live = inputs.live.current();
    let rules = rules::in_force(&live.settings);
    let fresh_for = observation_fresh_for(live.settings.loaded.config.alerting.evaluate_every);
    let firing = inputs.store.firing_alerts().await?;
    let mut owed = false;
    for rule in &rules {
        let now = now_millis();
        let found = match findings::find(rule, inputs, &firing, now).await {
            Ok(found) => found,
            Err(error) => {
                tracing::warn!(%error, rule = %rule.config.name, "cannot evaluate alert rule");
                continue;
            }
        };
        let observer = rule.is_local().then_some(inputs.replica_id.as_str());
        for finding in &found {
            let mut numbers = finding.numbers.clone();
            if let (Some(replica), Some(object)) = (observer, numbers.as_object_mut()) {
                object.insert("replica".into(), replica.into());
            }
            let numbers = numbers.to_string();
            let fired = inputs
                .store
                .fire_alert(
                    &Firing {
                        rule: &rule.config.name,
                        scope: &finding.scope,
                        kind: rule.config.kind.as_str(),
                        tenant_id: finding.tenant_id.as_deref(),
                        summary: &finding.summary,
                        numbers: &numbers,
                        since: finding.since,
                        notifiers: &rule.notify,
                        observer,
                    },
                    now,
                )
                .await?;
            if let Fired::New { alert_id, episode } = fired {
                owed = true;
                tracing::warn!(rule = %rule.config.name, kind = rule.config.kind.as_str(), scope = %finding.scope, %alert_id, episode, "alert firing: {}", finding.summary);
            }
        }
        for alert in firing.iter().filter(|alert| alert.rule == rule.config.name) {
            if found.iter().any(|f| f.scope == alert.scope) {
                continue;
            }
            // Scopes that named a replica (before alerts were shared across replicas) are no
            // longer raised: whoever sees one resolves it.
            let legacy = alert
                .scope
                .split(',')
                .any(|part| part.starts_with("replica="));
            let observed = match observer {
                Some(replica) if !legacy => {
                    if !judges(rule, &alert.scope, inputs) {
                        continue;
                    }
                    Some((replica, now - fresh_for.as_millis() as i64))
                }
                _ => None,
            };
            if inputs
                .store
                .resolve_observed_alert(&alert.rule, &alert.scope, observed, now)
                .await?
            {
                owed = true;
                tracing::info!(rule = %alert.rule, scope = %alert.scope, alert_id = %alert.id, "alert resolved");
            }
        }
    }
    // A rule taken out of the config resolves its alerts.
    for alert in &firing {
        if !rules.iter().any(|rule| rule.config.name == alert.rule)
            && inputs
                .store
                .resolve_alert(&alert.rule, &alert.scope, now_millis())
                .await?
        {
            owed = true;
        }
    }
    let count = inputs.store.firing_alerts().await?.len();
    crate::metrics::metrics().alerts_firing.set(count as i64);
    Ok(owed)
}
