//! `[[source]]` entries: one variant per channel, selected by `kind`. Each adapter crate owns its
//! config struct, and each channel's registration (`src/edge/<kind>.rs`) says what config and
//! `check` read of it by implementing [`SourceSettings`]; this module only tags the structs and
//! dispatches to that one implementation.
//!
//! Invariant: a channel's config is known by its variant here and its `SourceSettings` impl;
//! nothing else in config matches on a source's kind.

use std::time::Duration;

use serde::Deserialize;
use switchyard_cloudevents::CloudEventsSourceConfig;
use switchyard_core::Channel;
use switchyard_core::standard_webhooks::SigningKey;
use switchyard_email::EmailSourceConfig;
use switchyard_json_webhook::{JsonWebhookSourceConfig, Verifier, WebFormSourceConfig};
use switchyard_slack::SlackSourceConfig;
use switchyard_webhook::WebhookSourceConfig;

use super::EnvLookup;

/// The source name of deliveries to `POST /v1/events` and `POST /v1/waits/resume`: no
/// `[[source]]` entry, and no channel.
pub const API_SOURCE: &str = "api";

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
    /// Any signed JSON webhook, mapped by config, on `POST /v1/ingest/json_webhook/{name}`.
    JsonWebhook(JsonWebhookSourceConfig),
    /// A browser-facing form endpoint on `POST /v1/ingest/web_form/{name}`.
    WebForm(WebFormSourceConfig),
}

impl SourceConfig {
    /// What config reads of this source: its channel's registration.
    pub fn settings(&self) -> &dyn SourceSettings {
        match self {
            SourceConfig::Webhook(c) => c,
            SourceConfig::Slack(c) => c,
            SourceConfig::Email(c) => c,
            SourceConfig::CloudEvents(c) => c,
            SourceConfig::JsonWebhook(c) => c,
            SourceConfig::WebForm(c) => c,
        }
    }

    pub fn kind(&self) -> &'static str {
        self.settings().kind()
    }

    pub fn name(&self) -> &str {
        self.settings().name()
    }

    /// The tenants this source's deliveries belong to (a Slack source maps teams to tenants).
    pub fn tenants(&self) -> Vec<&str> {
        self.settings().tenants()
    }

    /// The adapter's own validation, as a sentence.
    pub fn validate(&self) -> Result<(), String> {
        self.settings().validate()
    }

    /// Looks up the source's secret; a missing variable fails closed.
    pub fn resolve(&self, env: EnvLookup<'_>) -> Result<ResolvedSource, String> {
        self.settings().resolve(env)
    }
}

/// What the daemon's config, and `switchyard check`, know of one source's settings, whatever
/// its channel. Implemented once per channel, on its adapter's config struct, in the channel's
/// registration (`src/edge/<kind>.rs`).
pub trait SourceSettings: Sync {
    /// Its `kind` in `[[source]]`: also its path segment under `/v1/ingest/` and its
    /// `source_kind` label in metrics and spans.
    fn kind(&self) -> &'static str;

    fn name(&self) -> &str;

    /// The tenants its deliveries belong to.
    fn tenants(&self) -> Vec<&str>;

    /// The adapter's own validation, as a sentence.
    fn validate(&self) -> Result<(), String>;

    /// The source with its secrets looked up (`secret`); a missing one fails closed.
    fn resolve(&self, env: EnvLookup<'_>) -> Result<ResolvedSource, String>;

    /// The environment variable holding the secret its senders sign with, if it has one.
    fn signing_secret_env(&self) -> Option<&str> {
        None
    }

    /// Why it accepts unsigned deliveries (the setting that says so), when it does.
    fn unsigned(&self) -> Option<&'static str> {
        None
    }

    /// How long its sender keeps redelivering a delivery it saw fail, and what to tell the
    /// admin about it; `None`: its sender does not redeliver.
    fn retry_window(&self) -> Option<(Duration, &'static str)> {
        None
    }

    /// What `check` should tell the admin about its settings (no errors: those are
    /// `validate`'s).
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }

    /// Whether it can produce events of `event_type` on `channel` for `tenant`.
    fn produces(&self, tenant: &str, channel: Channel, event_type: &str) -> bool;

    /// The value of `var`; a missing variable fails closed, naming the source.
    fn secret(&self, env: EnvLookup<'_>, var: &str) -> Result<String, String> {
        env(var).ok_or_else(|| {
            format!(
                "{} source `{}`: environment variable `{var}` is not set",
                self.kind(),
                self.name()
            )
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
        /// The password, or the OAuth2 secrets.
        credentials: switchyard_email::Credentials,
    },
    CloudEvents {
        config: CloudEventsSourceConfig,
        /// The Standard Webhooks key publishers sign with; `None`: only the API token admits.
        key: Option<SigningKey>,
    },
    JsonWebhook {
        config: Box<JsonWebhookSourceConfig>,
        /// The preset with every secret in force.
        verifier: Box<Verifier>,
    },
    WebForm {
        config: WebFormSourceConfig,
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
            ResolvedSource::JsonWebhook { config, .. } => {
                f.debug_tuple("JsonWebhook").field(config).finish()
            }
            ResolvedSource::WebForm { config } => f.debug_tuple("WebForm").field(config).finish(),
        }
    }
}
