//! `[[notifier]]`, `[[alert]]` and `[alerting]`: where alerts are sent (a signed webhook,
//! Slack, email), the rules that raise them, and the built-in rules an admin gets without
//! writing any (each kind one can turn off).
//!
//! Invariant: a rule names only notifiers that exist (`notifiers.rs` holds their shapes).

use std::collections::HashSet;
use std::time::Duration;

use serde::Deserialize;

use super::targets::url_host;

/// The kinds of alert rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertKind {
    SourceQuiet,
    MailboxStalled,
    ProviderDisableRisk,
    TargetFailing,
    DeadLetters,
    DispatchLag,
    ReloadRefused,
    IntakeUnhealthy,
    AuthorityDegraded,
}

impl AlertKind {
    /// Every kind, in the order the built-in rules are listed.
    pub const ALL: [AlertKind; 9] = [
        AlertKind::SourceQuiet,
        AlertKind::MailboxStalled,
        AlertKind::ProviderDisableRisk,
        AlertKind::TargetFailing,
        AlertKind::DeadLetters,
        AlertKind::DispatchLag,
        AlertKind::ReloadRefused,
        AlertKind::IntakeUnhealthy,
        AlertKind::AuthorityDegraded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::SourceQuiet => "source_quiet",
            AlertKind::MailboxStalled => "mailbox_stalled",
            AlertKind::ProviderDisableRisk => "provider_disable_risk",
            AlertKind::TargetFailing => "target_failing",
            AlertKind::DeadLetters => "dead_letters",
            AlertKind::DispatchLag => "dispatch_lag",
            AlertKind::ReloadRefused => "reload_refused",
            AlertKind::IntakeUnhealthy => "intake_unhealthy",
            AlertKind::AuthorityDegraded => "authority_degraded",
        }
    }
}

/// Business hours: a `source_quiet` rule only counts quiet time inside them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BusinessHours {
    /// An IANA time zone (`Europe/Berlin`).
    pub time_zone: String,
    /// Weekdays (`mon` .. `sun`; default `mon` to `fri`).
    #[serde(default = "default_days")]
    pub days: Vec<String>,
    /// Local start, `HH:MM` (default `09:00`).
    #[serde(default = "default_start")]
    pub start: String,
    /// Local end, `HH:MM` (default `17:00`).
    #[serde(default = "default_end")]
    pub end: String,
}

/// One `[[alert]]` rule. Which fields apply depends on `kind`; the others are refused.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertConfig {
    /// Unique among alerts (`builtin:` names are reserved).
    pub name: String,
    pub kind: AlertKind,
    /// `source_quiet` (required), `mailbox_stalled`, `provider_disable_risk`: the source;
    /// unset for the last two: every source they apply to.
    #[serde(default)]
    pub source: Option<String>,
    /// `source_quiet`: only this tenant's deliveries count.
    #[serde(default)]
    pub tenant: Option<String>,
    /// `source_quiet`: only deliveries of this event type count.
    #[serde(default)]
    pub event_type: Option<String>,
    /// `source_quiet`: longest quiet time before it fires (required).
    #[serde(default, with = "humantime_serde")]
    pub expect_within: Option<Duration>,
    /// `source_quiet`: count quiet time only inside these hours.
    #[serde(default)]
    pub business_hours: Option<BusinessHours>,
    /// `target_failing`, `dead_letters`, `dispatch_lag`: the target; unset: every push target.
    #[serde(default)]
    pub target: Option<String>,
    /// `target_failing`: consecutive failed attempts (default 5); `dead_letters`: dead letters
    /// within `window` (default 1).
    #[serde(default)]
    pub threshold: Option<u32>,
    /// `dead_letters`: the window counted (default 1h).
    #[serde(default, with = "humantime_serde")]
    pub window: Option<Duration>,
    /// `dispatch_lag`: longest a due dispatch may wait (default 10m); `mailbox_stalled`:
    /// longest without a successful poll (default 15m).
    #[serde(default, with = "humantime_serde")]
    pub max_age: Option<Duration>,
    /// `provider_disable_risk`: the share of bad answers (failed or slower than the sender's
    /// ack bound) that fires it (default a fifth of the sender's own disable threshold).
    #[serde(default)]
    pub max_bad_ratio: Option<f64>,
    /// `provider_disable_risk`: fewest answers in the window before a ratio counts (default 20).
    #[serde(default)]
    pub min_deliveries: Option<u32>,
    /// The notifiers told when it fires and resolves (default: every notifier).
    #[serde(default)]
    pub notify: Option<Vec<String>>,
}

/// `[alerting]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertingConfig {
    /// How often rules are evaluated (default 30s).
    #[serde(default = "default_every", with = "humantime_serde")]
    pub evaluate_every: Duration,
    /// Run the built-in rules (every kind but `source_quiet`, with default bounds, over every
    /// source and target) for kinds no `[[alert]]` covers (default true).
    #[serde(default = "yes")]
    pub builtin: bool,
    /// Built-in kinds turned off one by one.
    #[serde(default)]
    pub builtin_disabled: Vec<AlertKind>,
    /// Notifiers the built-in rules tell (default: every notifier).
    #[serde(default)]
    pub builtin_notify: Option<Vec<String>>,
    /// The console's address as operators reach it, for the link in notifications (default
    /// `http://<server.listen>/ui`).
    #[serde(default)]
    pub console_url: Option<String>,
}

impl Default for AlertingConfig {
    fn default() -> Self {
        Self {
            evaluate_every: default_every(),
            builtin: true,
            builtin_disabled: Vec::new(),
            builtin_notify: None,
            console_url: None,
        }
    }
}

fn default_days() -> Vec<String> {
    ["mon", "tue", "wed", "thu", "fri"]
        .map(str::to_owned)
        .to_vec()
}
fn default_start() -> String {
    "09:00".into()
}
fn default_end() -> String {
    "17:00".into()
}
fn default_every() -> Duration {
    Duration::from_secs(30)
}
fn yes() -> bool {
    true
}

/// The fields each kind takes besides `name`, `kind` and `notify`.
fn allowed_fields(kind: AlertKind) -> &'static [&'static str] {
    match kind {
        AlertKind::SourceQuiet => &[
            "source",
            "tenant",
            "event_type",
            "expect_within",
            "business_hours",
        ],
        AlertKind::MailboxStalled => &["source", "max_age"],
        AlertKind::ProviderDisableRisk => &["source", "max_bad_ratio", "min_deliveries"],
        AlertKind::TargetFailing => &["target", "threshold"],
        AlertKind::DeadLetters => &["target", "threshold", "window"],
        AlertKind::DispatchLag => &["target", "max_age"],
        AlertKind::ReloadRefused | AlertKind::IntakeUnhealthy | AlertKind::AuthorityDegraded => &[],
    }
}

impl AlertConfig {
    /// The fields set in the file, by name.
    fn set_fields(&self) -> Vec<&'static str> {
        [
            ("source", self.source.is_some()),
            ("tenant", self.tenant.is_some()),
            ("event_type", self.event_type.is_some()),
            ("expect_within", self.expect_within.is_some()),
            ("business_hours", self.business_hours.is_some()),
            ("target", self.target.is_some()),
            ("threshold", self.threshold.is_some()),
            ("window", self.window.is_some()),
            ("max_age", self.max_age.is_some()),
            ("max_bad_ratio", self.max_bad_ratio.is_some()),
            ("min_deliveries", self.min_deliveries.is_some()),
        ]
        .into_iter()
        .filter_map(|(field, set)| set.then_some(field))
        .collect()
    }

    fn problems(&self, sources: &HashSet<&str>, targets: &HashSet<&str>) -> Vec<String> {
        let name = &self.name;
        let kind = self.kind.as_str();
        let mut problems = Vec::new();
        if name.trim().is_empty() || name.len() > 128 || name.starts_with("builtin:") {
            problems.push(format!(
                "alert `{name}`: `name` must be 1 to 128 bytes and not start with `builtin:`"
            ));
        }
        let allowed = allowed_fields(self.kind);
        for field in self.set_fields() {
            if !allowed.contains(&field) {
                problems.push(format!(
                    "alert `{name}`: `{field}` does not apply to kind `{kind}`"
                ));
            }
        }
        if let Some(source) = &self.source
            && !sources.contains(source.as_str())
        {
            problems.push(format!("alert `{name}`: source `{source}` is not defined"));
        }
        if let Some(target) = &self.target
            && !targets.contains(target.as_str())
        {
            problems.push(format!("alert `{name}`: target `{target}` is not defined"));
        }
        if self.kind == AlertKind::SourceQuiet {
            if self.source.is_none() {
                problems.push(format!(
                    "alert `{name}`: a source_quiet rule needs `source`"
                ));
            }
            match self.expect_within {
                None => problems.push(format!(
                    "alert `{name}`: a source_quiet rule needs `expect_within`"
                )),
                Some(d) if d.is_zero() => problems.push(format!(
                    "alert `{name}`: `expect_within` must be longer than 0s"
                )),
                Some(_) => {}
            }
        }
        if let Some(hours) = &self.business_hours
            && let Err(problem) = super::hours::Hours::parse(hours)
        {
            problems.push(format!("alert `{name}`: business_hours: {problem}"));
        }
        if let Some(ratio) = self.max_bad_ratio
            && !(ratio > 0.0 && ratio < 1.0)
        {
            problems.push(format!(
                "alert `{name}`: `max_bad_ratio` must be above 0 and below 1"
            ));
        }
        for (field, zero) in [
            ("threshold", self.threshold == Some(0)),
            ("window", self.window.is_some_and(|d| d.is_zero())),
            ("max_age", self.max_age.is_some_and(|d| d.is_zero())),
        ] {
            if zero {
                problems.push(format!("alert `{name}`: `{field}` must be above 0"));
            }
        }
        problems
    }
}

/// Everything wrong with the notifiers, rules and `[alerting]`, each naming what it is about.
pub fn problems(
    notifiers: &[super::notifiers::NotifierConfig],
    alerts: &[AlertConfig],
    alerting: &AlertingConfig,
    sources: &HashSet<&str>,
    targets: &HashSet<&str>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut names = HashSet::new();
    for notifier in notifiers {
        if !names.insert(notifier.name()) {
            problems.push(format!(
                "notifier `{}` is defined more than once",
                notifier.name()
            ));
        }
        problems.extend(notifier.problems());
    }
    let mut rules = HashSet::new();
    for alert in alerts {
        if !rules.insert(alert.name.as_str()) {
            problems.push(format!("alert `{}` is defined more than once", alert.name));
        }
        problems.extend(alert.problems(sources, targets));
    }
    let named = alerts
        .iter()
        .filter_map(|a| Some((format!("alert `{}`", a.name), a.notify.as_ref()?)))
        .chain(
            alerting
                .builtin_notify
                .iter()
                .map(|n| ("alerting.builtin_notify".to_owned(), n)),
        );
    for (what, notify) in named {
        for notifier in notify {
            if !names.contains(notifier.as_str()) {
                problems.push(format!(
                    "{what} notifies `{notifier}`, which is not defined (add a [[notifier]] with \
                     that name)"
                ));
            }
        }
    }
    if alerting.evaluate_every.is_zero() {
        problems.push("alerting.evaluate_every must be longer than 0s".into());
    }
    if let Some(url) = &alerting.console_url
        && url_host(url).is_none()
    {
        problems.push(format!(
            "alerting.console_url `{url}` must be an http(s) URL"
        ));
    }
    problems
}
