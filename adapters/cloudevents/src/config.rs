//! The `[[source]]` entry an admin writes for one CloudEvents endpoint.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use switchyard_core::Channel;

/// One CloudEvents source: `POST /v1/ingest/cloudevents/<name>` feeds events of `tenant` into
/// routing. The daemon wraps this in its source enum tagged by `kind = "cloudevents"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloudEventsSourceConfig {
    /// Unique source name; also the last path segment of the ingest URL, so URL-safe only.
    pub name: String,
    /// Tenant every event from this source belongs to. Never read from the event: a
    /// `tenantid` extension naming another tenant is refused as `unauthorized_source`.
    pub tenant: String,
    /// Name of the environment variable holding the Standard Webhooks secret (`whsec_...`)
    /// publishers sign with. Without it only callers presenting the daemon's API token are
    /// accepted.
    #[serde(default)]
    pub signing_secret_env: Option<String>,
    /// The channel the events are recorded under, which triggers match on (default `webhook`).
    #[serde(default = "CloudEventsSourceConfig::default_channel")]
    pub channel: Channel,
    /// How far `webhook-timestamp` may be from the daemon's clock, in either direction.
    #[serde(
        default = "CloudEventsSourceConfig::default_timestamp_tolerance",
        with = "humantime_serde"
    )]
    pub timestamp_tolerance: Duration,
}

/// A CloudEvents source entry that must not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("a cloudevents source needs a non-empty `name`")]
    EmptyName,
    #[error(
        "cloudevents source name `{0}` is not URL-safe: use only letters, digits, `-` and `_` \
         (it becomes the path /v1/ingest/cloudevents/<name>)"
    )]
    NameNotUrlSafe(String),
    #[error("cloudevents source `{0}` needs a non-empty `tenant`")]
    EmptyTenant(String),
    #[error("cloudevents source `{0}`: `signing_secret_env` must name an environment variable")]
    MalformedSecretEnv(String),
    #[error("cloudevents source `{0}`: `timestamp_tolerance` must be greater than zero")]
    ZeroTolerance(String),
}

impl CloudEventsSourceConfig {
    /// The replay window used when `timestamp_tolerance` is not set: five minutes, as the
    /// Standard Webhooks spec recommends.
    pub const DEFAULT_TIMESTAMP_TOLERANCE: Duration = Duration::from_secs(5 * 60);

    fn default_timestamp_tolerance() -> Duration {
        Self::DEFAULT_TIMESTAMP_TOLERANCE
    }

    fn default_channel() -> Channel {
        Channel::Webhook
    }

    /// Checks what serde cannot: names, a usable secret variable, a usable tolerance.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.name.is_empty() {
            return Err(ConfigError::EmptyName);
        }
        let url_safe = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if !self.name.chars().all(url_safe) {
            return Err(ConfigError::NameNotUrlSafe(self.name.clone()));
        }
        if self.tenant.trim().is_empty() {
            return Err(ConfigError::EmptyTenant(self.name.clone()));
        }
        if let Some(var) = &self.signing_secret_env
            && (var.is_empty() || var.contains(['=', '\0']) || var.chars().any(char::is_whitespace))
        {
            return Err(ConfigError::MalformedSecretEnv(self.name.clone()));
        }
        if self.timestamp_tolerance.is_zero() {
            return Err(ConfigError::ZeroTolerance(self.name.clone()));
        }
        Ok(())
    }
}
