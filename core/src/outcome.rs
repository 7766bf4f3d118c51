//! The closed set of intake outcomes: the same word in HTTP answers, the ledger, logs and metrics.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How one authenticated delivery ended. Nothing ends without one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A run was created and the entity lock taken.
    Routed,
    /// No live workflow of this tenant triggers on (channel, event_type).
    NoTriggerMatch,
    /// The chosen workflow's target entity is held by another active run.
    EntityLocked,
    /// This (source, delivery_id) was seen before; the first outcome is returned.
    Duplicate,
    /// Authenticated and well-formed, but excluded by rule (bot message, auto-reply...).
    Ineligible,
    /// Authenticated, but the payload cannot be normalised.
    InvalidEvent,
    /// Missing or bad signature, stale timestamp, unknown team or account.
    UnauthorizedSource,
    /// A declared ceiling was reached.
    RateLimited,
    /// The winning workflow's principal is missing, suspended, expired or lacks a capability.
    AuthorityUnavailable,
    /// Processing failed past its retry bound; kept for replay.
    DeadLettered,
    /// Resumed the waiting run it was meant for.
    Resumed,
    /// A resume whose token names no open wait of this tenant.
    NoWaitMatch,
    /// A resume that came after its wait's deadline (or after the wait timed out).
    WaitExpired,
    /// A resume that carries another proposal digest than the wait's: the proposal changed
    /// after it was shown, so it must be approved again.
    ReapprovalRequired,
}

impl Outcome {
    pub const ALL: [Outcome; 14] = [
        Outcome::Routed,
        Outcome::NoTriggerMatch,
        Outcome::EntityLocked,
        Outcome::Duplicate,
        Outcome::Ineligible,
        Outcome::InvalidEvent,
        Outcome::UnauthorizedSource,
        Outcome::RateLimited,
        Outcome::AuthorityUnavailable,
        Outcome::DeadLettered,
        Outcome::Resumed,
        Outcome::NoWaitMatch,
        Outcome::WaitExpired,
        Outcome::ReapprovalRequired,
    ];

    /// The stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Routed => "routed",
            Outcome::NoTriggerMatch => "no_trigger_match",
            Outcome::EntityLocked => "entity_locked",
            Outcome::Duplicate => "duplicate",
            Outcome::Ineligible => "ineligible",
            Outcome::InvalidEvent => "invalid_event",
            Outcome::UnauthorizedSource => "unauthorized_source",
            Outcome::RateLimited => "rate_limited",
            Outcome::AuthorityUnavailable => "authority_unavailable",
            Outcome::DeadLettered => "dead_lettered",
            Outcome::Resumed => "resumed",
            Outcome::NoWaitMatch => "no_wait_match",
            Outcome::WaitExpired => "wait_expired",
            Outcome::ReapprovalRequired => "reapproval_required",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Outcome {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Outcome::ALL
            .into_iter()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| format!("unknown outcome `{s}`"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_and_round_trip() {
        for outcome in Outcome::ALL {
            assert_eq!(
                serde_json::to_value(outcome).unwrap(),
                serde_json::Value::String(outcome.as_str().into())
            );
            assert_eq!(outcome.as_str().parse::<Outcome>().unwrap(), outcome);
        }
        assert_eq!(Outcome::NoTriggerMatch.as_str(), "no_trigger_match");
    }
}
