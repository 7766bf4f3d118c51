//! `[[source]]` entries: one variant per channel adapter, selected by `kind`. Each adapter crate
//! owns its config struct; this module only tags them and looks up their secrets.

use serde::Deserialize;
use switchyard_cloudevents::CloudEventsSourceConfig;
use switchyard_core::standard_webhooks::SigningKey;
use switchyard_email::EmailSourceConfig;
use switchyard_slack::SlackSourceConfig;
use switchyard_webhook::WebhookSourceConfig;

use super::EnvLookup;

/// One source as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SourceConfig {
    /// Zendesk-shaped ticket webhooks on `POST /v1/ingest/webhook/{name}`.
    Webhook(WebhookSourceConfig),
    /// Slack Events API callbacks on `POST /v1/ingest/slack/{name}`.
    Slack(SlackSourceConfig),
    /// A support mailbox polled over IMAP.
    Email(EmailSourceConfig),
    /// CloudEvents 1.0 over HTTP on `POST /v1/ingest/cloudevents/{name}`.
    #[serde(rename = "cloudevents")]
    CloudEvents(CloudEventsSourceConfig),
}

impl SourceConfig {
    pub fn kind(&self) -> &'static str {
        match self {
            SourceConfig::Webhook(_) => "webhook",
            SourceConfig::Slack(_) => "slack",
            SourceConfig::Email(_) => "email",
            SourceConfig::CloudEvents(_) => "cloudevents",
        }
    }

    pub fn name(&self) -> &str {
        match self {
            SourceConfig::Webhook(c) => &c.name,
            SourceConfig::Slack(c) => &c.name,
            SourceConfig::Email(c) => &c.name,
            SourceConfig::CloudEvents(c) => &c.name,
        }
    }

    /// The tenants this source's deliveries belong to (a Slack source maps teams to tenants).
    pub fn tenants(&self) -> Vec<&str> {
        match self {
            SourceConfig::Webhook(c) => vec![c.tenant.as_str()],
            SourceConfig::Slack(c) => c.teams.values().map(String::as_str).collect(),
            SourceConfig::Email(c) => vec![c.tenant.as_str()],
            SourceConfig::CloudEvents(c) => vec![c.tenant.as_str()],
        }
    }

    /// The adapter's own validation, as a sentence.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            SourceConfig::Webhook(c) => c.validate().map_err(|e| e.to_string()),
            SourceConfig::Slack(c) => c.validate().map_err(|e| e.to_string()),
            SourceConfig::Email(c) => c.validate().map_err(|e| e.to_string()),
            SourceConfig::CloudEvents(c) => c.validate().map_err(|e| e.to_string()),
        }
    }

    /// Looks up the source's secret; a missing variable fails closed.
    pub fn resolve(&self, env: EnvLookup<'_>) -> Result<ResolvedSource, String> {
        let secret = |var: &str| {
            env(var).ok_or_else(|| {
                format!(
                    "{} source `{}`: environment variable `{var}` is not set",
                    self.kind(),
                    self.name()
                )
            })
        };
        Ok(match self {
            SourceConfig::Webhook(config) => ResolvedSource::Webhook {
                secret: match &config.signing_secret_env {
                    Some(var) => Some(secret(var)?),
                    None => None,
                },
                config: config.clone(),
            },
            SourceConfig::Slack(config) => ResolvedSource::Slack {
                secret: secret(&config.signing_secret_env)?,
                config: config.clone(),
            },
            SourceConfig::Email(config) => ResolvedSource::Email {
                password: secret(&config.password_env)?,
                config: config.clone(),
            },
            SourceConfig::CloudEvents(config) => ResolvedSource::CloudEvents {
                key: match &config.signing_secret_env {
                    Some(var) => Some(SigningKey::parse(&secret(var)?).map_err(|error| {
                        format!(
                            "cloudevents source `{}`: the secret in `{var}` is unusable: {error}",
                            config.name
                        )
                    })?),
                    None => None,
                },
                config: config.clone(),
            },
        })
    }
}

/// A source with its secret in hand.
#[derive(Clone)]
pub enum ResolvedSource {
    Webhook {
        config: WebhookSourceConfig,
        /// `None` only with `insecure_skip_signature = true`.
        secret: Option<String>,
    },
    Slack {
        config: SlackSourceConfig,
        secret: String,
    },
    Email {
        config: EmailSourceConfig,
        password: String,
    },
    CloudEvents {
        config: CloudEventsSourceConfig,
        /// The Standard Webhooks key publishers sign with; `None`: only the API token admits.
        key: Option<SigningKey>,
    },
}

impl std::fmt::Debug for ResolvedSource {
    // Secrets never reach logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResolvedSource::Webhook { config, .. } => {
                f.debug_tuple("Webhook").field(config).finish()
            }
            ResolvedSource::Slack { config, .. } => f.debug_tuple("Slack").field(config).finish(),
            ResolvedSource::Email { config, .. } => f.debug_tuple("Email").field(config).finish(),
            ResolvedSource::CloudEvents { config, .. } => {
                f.debug_tuple("CloudEvents").field(config).finish()
            }
        }
    }
}
