//! The `[[source]]` entry an admin writes for one Zendesk-shaped webhook endpoint.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One webhook source: `POST /v1/ingest/webhook/<name>` feeds events of `tenant` into routing.
///
/// The daemon wraps this in its source enum tagged by `kind = "webhook"`, so the struct itself
/// has no `kind` field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSourceConfig {
    /// Unique source name; also the last path segment of the ingest URL, so URL-safe only.
    pub name: String,
    /// Tenant every event from this source belongs to. Never read from the payload.
    pub tenant: String,
    /// Name of the environment variable holding the webhook's signing secret (not the secret).
    #[serde(default)]
    pub signing_secret_env: Option<String>,
    /// Zendesk account id; a payload naming a different account is refused as unauthorized.
    #[serde(default)]
    pub account_id: Option<u64>,
    /// How far the signature timestamp may be from the daemon's clock, in either direction.
    #[serde(
        default = "WebhookSourceConfig::default_timestamp_tolerance",
        with = "humantime_serde"
    )]
    pub timestamp_tolerance: Duration,
    /// Accept deliveries without verifying any signature. Only for local testing.
    #[serde(default)]
    pub insecure_skip_signature: bool,
}

/// A webhook source entry that must not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("a webhook source needs a non-empty `name`")]
    EmptyName,
    #[error(
        "webhook source name `{0}` is not URL-safe: use only letters, digits, `-` and `_` \
         (it becomes the path /v1/ingest/webhook/<name>)"
    )]
    NameNotUrlSafe(String),
    #[error("webhook source `{0}` needs a non-empty `tenant`")]
    EmptyTenant(String),
    #[error(
        "webhook source `{0}` needs a secret: set `signing_secret_env` to the name of the \
         environment variable holding the Zendesk signing secret (or, for local testing only, \
         `insecure_skip_signature = true`)"
    )]
    MissingSecret(String),
    #[error("webhook source `{0}`: `signing_secret_env` must name an environment variable")]
    MalformedSecretEnv(String),
    #[error(
        "webhook source `{0}` sets both `signing_secret_env` and `insecure_skip_signature = true`; \
         choose one"
    )]
    ConflictingSignatureSettings(String),
    #[error("webhook source `{0}`: `timestamp_tolerance` must be greater than zero")]
    ZeroTolerance(String),
}

impl WebhookSourceConfig {
    /// The replay window used when `timestamp_tolerance` is not set: five minutes.
    pub const DEFAULT_TIMESTAMP_TOLERANCE: Duration = Duration::from_secs(5 * 60);

    fn default_timestamp_tolerance() -> Duration {
        Self::DEFAULT_TIMESTAMP_TOLERANCE
    }

    /// Checks what serde cannot: names, the presence of a secret, a usable tolerance.
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
        match (&self.signing_secret_env, self.insecure_skip_signature) {
            (None, false) => return Err(ConfigError::MissingSecret(self.name.clone())),
            // Both set is ambiguous: fail closed rather than guess which one the admin meant.
            (Some(_), true) => {
                return Err(ConfigError::ConflictingSignatureSettings(self.name.clone()));
            }
            (Some(var), false) if !is_env_var_name(var) => {
                return Err(ConfigError::MalformedSecretEnv(self.name.clone()));
            }
            _ => {}
        }
        if self.timestamp_tolerance.is_zero() {
            return Err(ConfigError::ZeroTolerance(self.name.clone()));
        }
        Ok(())
    }

    /// Whether deliveries must carry a valid signature (false only with
    /// `insecure_skip_signature = true`).
    pub fn requires_signature(&self) -> bool {
        !self.insecure_skip_signature
    }
}

/// A name the process environment can hold: non-empty, no `=`, no NUL, no whitespace.
fn is_env_var_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0']) && !name.chars().any(char::is_whitespace)
}
