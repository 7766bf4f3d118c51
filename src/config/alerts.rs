//! `[[notifier]]`, `[[alert]]` and `[alerting]`: where alerts are sent (a signed webhook,
//! Slack, email), the rules that raise them, and the built-in rules an admin gets without
//! writing any (each kind one can turn off).
//!
//! Invariant: a rule names only notifiers that exist, and every notifier's secret is named by
//! an environment variable, looked up at start and on reload (a missing one fails closed).

use std::collections::HashSet;
use std::time::Duration;

use serde::Deserialize;

use super::EnvLookup;
use super::targets::{is_loopback, url_host};

/// The Slack Web API every Slack notifier calls unless told otherwise.
pub const SLACK_API: &str = "https://slack.com/api/";

/// One `[[notifier]]`, selected by `kind`.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum NotifierConfig {
    /// A POST signed per Standard Webhooks, as dispatch signs runs.
    Webhook(WebhookNotifierConfig),
    /// `chat.postMessage` to a channel, updated by `chat.update` on resolve.
    Slack(SlackNotifierConfig),
    /// A mail over SMTP.
    Email(EmailNotifierConfig),
}

/// `kind = "webhook"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookNotifierConfig {
    /// Unique among notifiers; alerts name it in `notify`.
    pub name: String,
    /// Where alerts are POSTed. Plain `http://` only on loopback, unless `allow_plain_http`.
    pub url: String,
    /// Environment variable holding the Standard Webhooks secret (`whsec_...`).
    pub signing_secret_env: String,
    /// Allow a plain-http URL outside loopback.
    #[serde(default)]
    pub allow_plain_http: bool,
    /// Request timeout (default 10s).
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
}

/// `kind = "slack"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackNotifierConfig {
    /// Unique among notifiers; alerts name it in `notify`.
    pub name: String,
    /// Environment variable holding the bot token (`xoxb-...`, scope `chat:write`).
    pub bot_token_env: String,
    /// The channel id messages go to (`C0OPS`).
    pub channel: String,
    /// The Web API's base URL (default `https://slack.com/api/`); plain http only on loopback.
    #[serde(default = "default_slack_api")]
    pub api_base_url: String,
}

/// How an email notifier's SMTP connection is encrypted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SmtpTls {
    /// Plain connection upgraded with STARTTLS, refused without it (port 587).
    Starttls,
    /// TLS from the first byte (port 465).
    Tls,
    /// No encryption: only to a loopback server (a local relay).
    None,
}

/// `kind = "email"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailNotifierConfig {
    /// Unique among notifiers; alerts name it in `notify`.
    pub name: String,
    /// The SMTP server's host name (checked against its certificate).
    pub smtp_host: String,
    /// Its port (default 587 for STARTTLS, 465 for TLS, 25 without).
    #[serde(default)]
    pub smtp_port: Option<u16>,
    /// `starttls` (default), `tls` or `none` (loopback only).
    #[serde(default = "default_smtp_tls")]
    pub tls: SmtpTls,
    /// Environment variable holding the SMTP user name; unset: no authentication.
    #[serde(default)]
    pub username_env: Option<String>,
    /// Environment variable holding the SMTP password (with `username_env`).
    #[serde(default)]
    pub password_env: Option<String>,
    /// The sender address (`Switchyard <alerts@example.com>`).
    pub from: String,
    /// The recipients.
    pub to: Vec<String>,
    /// Environment variable holding a PEM CA certificate to trust besides the webpki roots
    /// (a private CA's SMTP server).
    #[serde(default)]
    pub ca_cert_env: Option<String>,
}

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

fn default_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_slack_api() -> String {
    SLACK_API.to_owned()
}
fn default_smtp_tls() -> SmtpTls {
    SmtpTls::Starttls
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

impl NotifierConfig {
    pub fn name(&self) -> &str {
        match self {
            NotifierConfig::Webhook(c) => &c.name,
            NotifierConfig::Slack(c) => &c.name,
            NotifierConfig::Email(c) => &c.name,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            NotifierConfig::Webhook(_) => "webhook",
            NotifierConfig::Slack(_) => "slack",
            NotifierConfig::Email(_) => "email",
        }
    }

    fn problems(&self) -> Vec<String> {
        let (kind, name) = (self.kind(), self.name());
        let mut problems = Vec::new();
        if name.trim().is_empty() || name.len() > crate::store::MAX_KEY_LEN {
            problems.push(format!(
                "{kind} notifier `{name}`: `name` must be 1 to 255 bytes"
            ));
        }
        let plain_outside_loopback = |url: &str, allowed: bool| match url_host(url) {
            None => Some(format!(
                "{kind} notifier `{name}`: `{url}` must be an http:// or https:// URL with a host"
            )),
            Some((false, host)) if !allowed && !is_loopback(&host) => Some(format!(
                "{kind} notifier `{name}`: `{url}` is plain http outside loopback: alerts would \
                 cross the network unencrypted (use https)"
            )),
            Some(_) => None,
        };
        match self {
            NotifierConfig::Webhook(c) => {
                problems.extend(plain_outside_loopback(&c.url, c.allow_plain_http));
                if c.timeout.is_zero() {
                    problems.push(format!(
                        "webhook notifier `{name}`: `timeout` must be longer than 0s"
                    ));
                }
            }
            NotifierConfig::Slack(c) => {
                problems.extend(plain_outside_loopback(&c.api_base_url, false));
                if c.channel.trim().is_empty() {
                    problems.push(format!(
                        "slack notifier `{name}`: `channel` must name a channel id"
                    ));
                }
            }
            NotifierConfig::Email(c) => {
                if c.tls == SmtpTls::None && !is_loopback(&c.smtp_host) {
                    problems.push(format!(
                        "email notifier `{name}`: `tls = \"none\"` is only for a loopback relay; \
                         use `starttls` or `tls` for `{}`",
                        c.smtp_host
                    ));
                }
                if c.to.is_empty() {
                    problems.push(format!("email notifier `{name}`: `to` lists no recipient"));
                }
                for address in c.to.iter().chain([&c.from]) {
                    if address.parse::<lettre::message::Mailbox>().is_err() {
                        problems.push(format!(
                            "email notifier `{name}`: `{address}` is not a mail address"
                        ));
                    }
                }
                if c.username_env.is_some() != c.password_env.is_some() {
                    problems.push(format!(
                        "email notifier `{name}`: `username_env` and `password_env` go together"
                    ));
                }
            }
        }
        problems
    }

    /// Looks up the notifier's secrets; a missing variable fails closed.
    pub fn resolve(&self, env: EnvLookup<'_>) -> Result<ResolvedNotifier, String> {
        let (kind, name) = (self.kind(), self.name());
        let secret = |var: &str| {
            env(var).ok_or_else(|| {
                format!("{kind} notifier `{name}`: environment variable `{var}` is not set")
            })
        };
        Ok(match self {
            NotifierConfig::Webhook(config) => {
                let secret = secret(&config.signing_secret_env)?;
                if let Err(error) = switchyard_dispatch::SigningKey::parse(&secret) {
                    return Err(format!(
                        "webhook notifier `{name}`: `{}` is not a Standard Webhooks secret: {error}",
                        config.signing_secret_env
                    ));
                }
                ResolvedNotifier::Webhook {
                    config: config.clone(),
                    secret,
                }
            }
            NotifierConfig::Slack(config) => ResolvedNotifier::Slack {
                config: config.clone(),
                token: secret(&config.bot_token_env)?,
            },
            NotifierConfig::Email(config) => {
                let credentials = match (&config.username_env, &config.password_env) {
                    (Some(user), Some(password)) => Some((secret(user)?, secret(password)?)),
                    _ => None,
                };
                let ca_cert = config.ca_cert_env.as_deref().map(secret).transpose()?;
                ResolvedNotifier::Email {
                    config: config.clone(),
                    credentials,
                    ca_cert,
                }
            }
        })
    }
}

/// A notifier with its secrets in hand.
#[derive(Clone)]
pub enum ResolvedNotifier {
    Webhook {
        config: WebhookNotifierConfig,
        secret: String,
    },
    Slack {
        config: SlackNotifierConfig,
        token: String,
    },
    Email {
        config: EmailNotifierConfig,
        /// `(user, password)`, when it authenticates.
        credentials: Option<(String, String)>,
        /// A PEM CA certificate trusted besides the webpki roots.
        ca_cert: Option<String>,
    },
}

impl ResolvedNotifier {
    pub fn name(&self) -> &str {
        match self {
            ResolvedNotifier::Webhook { config, .. } => &config.name,
            ResolvedNotifier::Slack { config, .. } => &config.name,
            ResolvedNotifier::Email { config, .. } => &config.name,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            ResolvedNotifier::Webhook { .. } => "webhook",
            ResolvedNotifier::Slack { .. } => "slack",
            ResolvedNotifier::Email { .. } => "email",
        }
    }
}

impl std::fmt::Debug for ResolvedNotifier {
    // Secrets never reach logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedNotifier")
            .field("kind", &self.kind())
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
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
    notifiers: &[NotifierConfig],
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
