//! `[[notifier]]`: where alerts are sent (a signed webhook, Slack, email), checked, and with
//! their secrets in hand.
//!
//! Invariant: every notifier's secret is named by an environment variable, looked up at start
//! and on reload (a missing one fails closed), and never reaches a log.

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

fn default_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_slack_api() -> String {
    SLACK_API.to_owned()
}
fn default_smtp_tls() -> SmtpTls {
    SmtpTls::Starttls
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

    pub(super) fn problems(&self) -> Vec<String> {
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
