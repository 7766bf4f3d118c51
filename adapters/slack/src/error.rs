//! The one error type of this crate: why a request was refused, or why a config entry is wrong.

use switchyard_core::Outcome;

/// Everything that can go wrong in this adapter.
///
/// Request errors map to an intake outcome with [`SlackError::outcome`] and carry a stable,
/// machine-readable [`SlackError::detail`]; config errors (from
/// [`SlackSourceConfig::validate`](crate::SlackSourceConfig::validate)) have no outcome.
#[derive(Debug, thiserror::Error)]
pub enum SlackError {
    // --- signature verification: all `unauthorized_source` ---
    /// No `X-Slack-Request-Timestamp` header.
    #[error("missing X-Slack-Request-Timestamp header")]
    MissingTimestamp,
    /// The timestamp header is not a whole number of Unix seconds.
    #[error("X-Slack-Request-Timestamp is not a Unix time in seconds")]
    MalformedTimestamp,
    /// The timestamp is more than five minutes away from our clock, in either direction.
    #[error("request timestamp {timestamp} is more than 300 s away from now ({now})")]
    StaleTimestamp { timestamp: i64, now: i64 },
    /// No `X-Slack-Signature` header.
    #[error("missing X-Slack-Signature header")]
    MissingSignature,
    /// The signature header is not `v0=<hex>` or does not match the body.
    #[error("X-Slack-Signature does not match the request")]
    BadSignature,
    /// The signing secret resolved to an empty string: anyone could sign with it, so nothing
    /// verifies (fail closed).
    #[error("the signing secret is empty; refusing every request")]
    EmptySecret,

    // --- tenancy: `unauthorized_source` ---
    /// The callback's workspace (`context_team_id`, else `team_id`) is not in the source's
    /// `teams` map, nor in an org of its `enterprises` that authorised the delivery.
    #[error("no tenant claims team {team_id}")]
    UnknownTeam { team_id: String },

    // --- payload: `invalid_event` ---
    /// Authenticated, but not a callback this adapter can read. `detail` is stable
    /// (`not_json`, `missing_field:event_id`, `wrong_type:event.ts`, ...).
    #[error("invalid Slack callback: {detail}")]
    Invalid {
        detail: String,
        #[source]
        source: Option<serde_json::Error>,
    },

    // --- config validation: no outcome ---
    /// `name` is empty or has a character outside `[A-Za-z0-9_-]` (it is a URL path segment).
    #[error("slack source name `{name}` must be non-empty and use only A-Z a-z 0-9 _ -")]
    InvalidName { name: String },
    /// `signing_secret_env` is empty or not an environment variable name.
    #[error(
        "slack source `{source_name}`: signing_secret_env `{value}` is not an environment variable name"
    )]
    InvalidSecretEnv { source_name: String, value: String },
    /// `teams` is empty: no callback could ever be accepted.
    #[error("slack source `{source_name}`: `teams` must map at least one team_id to a tenant")]
    NoTeams { source_name: String },
    /// A `teams` entry has an empty (or blank) team id or tenant.
    #[error("slack source `{source_name}`: team `{team_id}` needs a non-empty team id and tenant")]
    BlankTeamEntry {
        source_name: String,
        team_id: String,
    },
    /// An `urgent_keywords` entry is blank: it would match nothing, or everything.
    #[error("slack source `{source_name}`: urgent_keywords entries must not be blank")]
    BlankKeyword { source_name: String },
    /// An `urgent_channels` entry is blank.
    #[error("slack source `{source_name}`: urgent_channels entries must not be blank")]
    BlankChannel { source_name: String },
    /// A setting of the connection (mode, tokens, API URL, connections) is wrong; `detail`
    /// names the key and why.
    #[error("slack source `{source_name}`: {detail}")]
    InvalidSetting { source_name: String, detail: String },
}

impl SlackError {
    /// An `invalid_event` error without an underlying parse error.
    pub(crate) fn invalid(detail: impl Into<String>) -> Self {
        SlackError::Invalid {
            detail: detail.into(),
            source: None,
        }
    }

    /// The intake outcome the daemon records for this error; `None` for config errors, which
    /// never arise from a request.
    pub fn outcome(&self) -> Option<Outcome> {
        match self {
            SlackError::MissingTimestamp
            | SlackError::MalformedTimestamp
            | SlackError::StaleTimestamp { .. }
            | SlackError::MissingSignature
            | SlackError::BadSignature
            | SlackError::EmptySecret
            | SlackError::UnknownTeam { .. } => Some(Outcome::UnauthorizedSource),
            SlackError::Invalid { .. } => Some(Outcome::InvalidEvent),
            SlackError::InvalidName { .. }
            | SlackError::InvalidSecretEnv { .. }
            | SlackError::NoTeams { .. }
            | SlackError::BlankTeamEntry { .. }
            | SlackError::BlankKeyword { .. }
            | SlackError::BlankChannel { .. }
            | SlackError::InvalidSetting { .. } => None,
        }
    }

    /// The `detail` for the ledger and the HTTP answer: a stable code for signature errors
    /// (`missing_timestamp`, `malformed_timestamp`, `stale_timestamp`, `missing_signature`,
    /// `bad_signature`, `empty_signing_secret`), `no tenant claims team T...` for an unknown team,
    /// the specific reason for an invalid callback, and the message for config errors.
    pub fn detail(&self) -> String {
        match self {
            SlackError::MissingTimestamp => "missing_timestamp".into(),
            SlackError::MalformedTimestamp => "malformed_timestamp".into(),
            SlackError::StaleTimestamp { .. } => "stale_timestamp".into(),
            SlackError::MissingSignature => "missing_signature".into(),
            SlackError::BadSignature => "bad_signature".into(),
            SlackError::EmptySecret => "empty_signing_secret".into(),
            SlackError::Invalid { detail, .. } => detail.clone(),
            other => other.to_string(),
        }
    }
}
