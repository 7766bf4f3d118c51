//! The canonical event: the one shape every adapter produces and everything after it reads.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where an event came from; triggers match on it together with the event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    Email,
    Chat,
    Slack,
    WebForm,
    Webhook,
    /// A `[[schedule]]` entry's fire: time is the trigger.
    Schedule,
}

impl Channel {
    /// Every channel, in declaration order.
    pub const ALL: [Channel; 6] = [
        Channel::Email,
        Channel::Chat,
        Channel::Slack,
        Channel::WebForm,
        Channel::Webhook,
        Channel::Schedule,
    ];

    /// Whether a caller may post events of this channel (`POST /v1/events`): every channel but
    /// `schedule`, whose events only the daemon's `[[schedule]]` entries make (time, not a
    /// caller, starts their runs).
    pub fn may_be_posted(self) -> bool {
        self != Channel::Schedule
    }

    /// The snake_case name used in JSON, config and the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Email => "email",
            Channel::Chat => "chat",
            Channel::Slack => "slack",
            Channel::WebForm => "web_form",
            Channel::Webhook => "webhook",
            Channel::Schedule => "schedule",
        }
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A channel name that is not one of [`Channel::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown channel `{0}` (expected one of: email, chat, slack, web_form, webhook, schedule)")]
pub struct UnknownChannel(pub String);

impl FromStr for Channel {
    type Err = UnknownChannel;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Channel::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownChannel(s.to_owned()))
    }
}

/// One unit of incoming work, after its adapter verified and normalised it.
///
/// The six fields each have one job downstream: `channel` and `event_type` select triggers,
/// `tenant_id` scopes every lookup, `target_entity_id` keys the entity lock, `payload` is what a
/// workflow reads, and `raw_ref` points at the stored original delivery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    pub channel: Channel,
    pub event_type: String,
    pub tenant_id: String,
    pub target_entity_id: String,
    pub payload: serde_json::Value,
    pub raw_ref: String,
}

/// Why an [`Event`] is not acceptable even though it parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    #[error("`{0}` must not be empty")]
    EmptyField(&'static str),
    #[error("`payload` must be a JSON object")]
    PayloadNotObject,
}

impl Event {
    /// Checks the invariants serde cannot express: non-empty identifiers, an object payload.
    pub fn validate(&self) -> Result<(), EventError> {
        for (name, value) in [
            ("event_type", &self.event_type),
            ("tenant_id", &self.tenant_id),
            ("target_entity_id", &self.target_entity_id),
        ] {
            if value.trim().is_empty() {
                return Err(EventError::EmptyField(name));
            }
        }
        if !self.payload.is_object() {
            return Err(EventError::PayloadNotObject);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_names_round_trip_in_snake_case() {
        for channel in Channel::ALL {
            let json = serde_json::to_string(&channel).unwrap();
            assert_eq!(json, format!("\"{}\"", channel.as_str()));
            assert_eq!(channel.as_str().parse::<Channel>().unwrap(), channel);
        }
        assert_eq!(Channel::WebForm.as_str(), "web_form");
        assert!("sms".parse::<Channel>().is_err());
    }

    #[test]
    fn event_rejects_unknown_fields_and_empty_ids() {
        let extra = r#"{"channel":"chat","event_type":"x","tenant_id":"t","target_entity_id":"e","payload":{},"raw_ref":"r","extra":1}"#;
        assert!(serde_json::from_str::<Event>(extra).is_err());
        let empty = r#"{"channel":"chat","event_type":" ","tenant_id":"t","target_entity_id":"e","payload":{},"raw_ref":"r"}"#;
        let event: Event = serde_json::from_str(empty).unwrap();
        assert_eq!(event.validate(), Err(EventError::EmptyField("event_type")));
    }
}
