//! The `[[source]]` entries an admin writes: `kind = "json_webhook"` (any signed JSON webhook)
//! and `kind = "web_form"` (a browser-facing form endpoint), each with its mapping.
//!
//! Invariant: a config that loads is usable: names are URL-safe, the tenant is set, the
//! verification preset has exactly the keys it reads, every template parsed, and a web form
//! has an `Origin` allowlist (fail closed).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use switchyard_core::{Channel, Rate};

use crate::mapping::{Mapping, PayloadSpec};
use crate::template::Template;
use crate::verify::{VerifyConfig, VerifyConfigError};

/// One JSON webhook source: `POST /v1/ingest/json_webhook/<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonWebhookSourceConfig {
    /// Unique source name; the last path segment of its ingest URL.
    pub name: String,
    /// Tenant every event belongs to; never read from the body.
    pub tenant: String,
    /// How requests are authenticated: a preset and its secrets.
    pub verify: VerifyConfig,
    /// The channel events are recorded under (default `webhook`; a chat product's is `chat`).
    #[serde(default = "default_webhook_channel")]
    pub channel: Channel,
    /// The event type: a literal, a pointer or a template.
    pub event_type: Template,
    /// The entity the event is about (what the entity lock keys on).
    pub target_entity_id: Template,
    /// What identifies a delivery across the sender's retries; unset, the body's digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_id: Option<Template>,
    /// The payload: a pointer to an object, or a table of name = template (default: the body).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<PayloadSpec>,
}

/// One web form source: `POST /v1/ingest/web_form/<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebFormSourceConfig {
    /// Unique source name; the last path segment of its ingest URL.
    pub name: String,
    /// Tenant every submission belongs to.
    pub tenant: String,
    /// The pages allowed to post (`scheme://host[:port]`, as browsers send `Origin`); a post
    /// from any other origin, or without one, is refused 403 and recorded.
    pub allowed_origins: Vec<String>,
    /// A hidden field only bots fill in: a submission with it filled is recorded `ineligible`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub honeypot: Option<String>,
    /// The channel submissions are recorded under (default `web_form`).
    #[serde(default = "default_form_channel")]
    pub channel: Channel,
    /// The event type (default `form.submitted`).
    #[serde(default = "default_form_event_type")]
    pub event_type: Template,
    /// The entity the submission is about, from the fields (read as a flat object).
    pub target_entity_id: Template,
    /// A submission id the page sends (e.g. `"{/submission_id}"`); unset, the body's digest
    /// within `dedup_window`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_id: Option<Template>,
    /// The payload (default: every field but the honeypot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<PayloadSpec>,
    /// Where a browser is sent (303) after a submission is accepted; unset, a short page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect: Option<String>,
    /// Identical submissions (same body) within this window are one (default 10 minutes).
    #[serde(default = "default_dedup_window", with = "humantime_serde")]
    pub dedup_window: Duration,
    /// Submissions admitted per client address (default 10 a minute, 5 at once); past it,
    /// `rate_limited`, recorded.
    #[serde(default = "default_rate")]
    pub rate: Rate,
    /// Largest submission in bytes (default 64 KiB; the server's `body_limit` still applies).
    #[serde(default = "default_max_body")]
    pub max_body: usize,
    /// Largest uploaded file kept (its name, type and size go in the payload); 0, the default,
    /// refuses submissions with files.
    #[serde(default)]
    pub max_file_bytes: usize,
}

fn default_webhook_channel() -> Channel {
    Channel::Webhook
}

fn default_form_channel() -> Channel {
    Channel::WebForm
}

fn default_form_event_type() -> Template {
    Template::try_from("form.submitted".to_owned()).unwrap_or_else(|_| unreachable!())
}

fn default_dedup_window() -> Duration {
    Duration::from_secs(600)
}

fn default_rate() -> Rate {
    Rate::new(10, Duration::from_secs(60), 5).unwrap_or_else(|_| unreachable!())
}

fn default_max_body() -> usize {
    64 * 1024
}

/// A source entry that must not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("a {0} source needs a non-empty `name`")]
    EmptyName(&'static str),
    #[error(
        "{kind} source name `{name}` is not URL-safe: use only letters, digits, `-` and `_` (it \
         becomes the path /v1/ingest/{kind}/<name>)"
    )]
    NameNotUrlSafe { kind: &'static str, name: String },
    #[error("{kind} source `{name}` needs a non-empty `tenant`")]
    EmptyTenant { kind: &'static str, name: String },
    #[error("json_webhook source `{name}`: {error}")]
    Verify {
        name: String,
        #[source]
        error: VerifyConfigError,
    },
    #[error(
        "web_form source `{0}` needs `allowed_origins` (the pages that may post to it, e.g. \
         [\"https://www.example.com\"])"
    )]
    NoOrigins(String),
    #[error(
        "web_form source `{name}`: allowed origin `{origin}` is not `scheme://host[:port]` \
         (no path, no trailing slash)"
    )]
    BadOrigin { name: String, origin: String },
    #[error("web_form source `{name}`: `redirect` `{url}` is not an absolute http(s) URL")]
    BadRedirect { name: String, url: String },
    #[error("web_form source `{0}`: `max_body` must be greater than zero")]
    ZeroMaxBody(String),
    #[error("web_form source `{0}`: `dedup_window` must be greater than zero")]
    ZeroWindow(String),
}

fn check_name(kind: &'static str, name: &str, tenant: &str) -> Result<(), ConfigError> {
    if name.is_empty() {
        return Err(ConfigError::EmptyName(kind));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(ConfigError::NameNotUrlSafe {
            kind,
            name: name.to_owned(),
        });
    }
    if tenant.trim().is_empty() {
        return Err(ConfigError::EmptyTenant {
            kind,
            name: name.to_owned(),
        });
    }
    Ok(())
}

impl JsonWebhookSourceConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_name("json_webhook", &self.name, &self.tenant)?;
        self.verify.validate().map_err(|error| ConfigError::Verify {
            name: self.name.clone(),
            error,
        })
    }

    pub fn mapping(&self) -> Mapping<'_> {
        Mapping {
            channel: self.channel,
            event_type: &self.event_type,
            target_entity_id: &self.target_entity_id,
            delivery_id: self.delivery_id.as_ref(),
            payload: self.payload.as_ref(),
        }
    }
}

impl WebFormSourceConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_name("web_form", &self.name, &self.tenant)?;
        if self.allowed_origins.is_empty() {
            return Err(ConfigError::NoOrigins(self.name.clone()));
        }
        for origin in &self.allowed_origins {
            let usable = url::Url::parse(origin).ok().is_some_and(|url| {
                matches!(url.scheme(), "http" | "https")
                    && url.host_str().is_some()
                    && url.origin().ascii_serialization() == *origin
            });
            if !usable {
                return Err(ConfigError::BadOrigin {
                    name: self.name.clone(),
                    origin: origin.clone(),
                });
            }
        }
        if let Some(redirect) = &self.redirect
            && !url::Url::parse(redirect).is_ok_and(|url| matches!(url.scheme(), "http" | "https"))
        {
            return Err(ConfigError::BadRedirect {
                name: self.name.clone(),
                url: redirect.clone(),
            });
        }
        if self.max_body == 0 {
            return Err(ConfigError::ZeroMaxBody(self.name.clone()));
        }
        if self.dedup_window.is_zero() {
            return Err(ConfigError::ZeroWindow(self.name.clone()));
        }
        Ok(())
    }

    pub fn mapping(&self) -> Mapping<'_> {
        Mapping {
            channel: self.channel,
            event_type: &self.event_type,
            target_entity_id: &self.target_entity_id,
            delivery_id: self.delivery_id.as_ref(),
            payload: self.payload.as_ref(),
        }
    }

    /// Whether `origin` (the request's `Origin` header) may post.
    pub fn allows(&self, origin: &str) -> bool {
        self.allowed_origins.iter().any(|o| o == origin)
    }
}
