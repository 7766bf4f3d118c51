//! What replay hands a channel and gets back: a stored delivery ([`Stored`]) read again by
//! the adapter of its source ([`Again`]), through the channels the replayer was given
//! ([`Rereader`], the daemon's registrations), and the one body no channel reads, the `api`
//! source's canonical event ([`api_body`]).
//!
//! Invariant: replay names no channel; what a channel makes of its bytes is the channel's.

use switchyard_core::{Channel, Event, Outcome};

use crate::config::SourceConfig;
use crate::intake::DeliveryBody;

/// The channels as replay needs them: a source's stored bytes read again by its adapter.
pub trait Rereader: Sync + std::fmt::Debug {
    /// `source`'s stored delivery normalised again by its channel, with `source`'s settings of
    /// the revision replayed under; `None` when no channel reads `source`'s kind.
    fn renormalize(&self, source: &SourceConfig, stored: &Stored<'_>) -> Option<Again>;

    /// Whether bytes stored as `content_type` came from `source`'s channel, to tell which of
    /// several sources sharing a name (of different kinds) received a delivery.
    fn stored_here(&self, source: &SourceConfig, content_type: &str) -> bool;
}

/// A stored delivery, as replay hands it back to its channel.
#[derive(Debug, Clone, Copy)]
pub struct Stored<'a> {
    /// Its raw bytes, as received.
    pub body: &'a [u8],
    /// The content type they were stored under.
    pub content_type: &'a str,
    /// The delivery id it was recorded under (request headers are not stored).
    pub delivery_id: &'a str,
    /// The payload of the event it was recorded with, as JSON text.
    pub payload: Option<&'a str>,
    /// `raw:<intake id>`: the reference its event carries.
    pub raw_ref: &'a str,
}

/// A stored delivery, normalised again.
#[derive(Debug)]
pub enum Again {
    /// What the adapter made of it, and the message identity duplicate claims use.
    Normalized {
        body: DeliveryBody,
        message_key: Option<String>,
    },
    /// Refused before routing (`unauthorized_source` under settings that no longer admit it).
    Refused(Outcome, String),
    /// The bytes alone cannot be normalised again, for this reason: the recorded event is used.
    Unreadable(&'static str),
}

impl Again {
    /// The adapter's disposition, without a message key.
    pub fn of(body: DeliveryBody) -> Self {
        Again::Normalized {
            body,
            message_key: None,
        }
    }

    /// Refused as `unauthorized_source`.
    pub fn unauthorized(detail: String) -> Self {
        Again::Refused(Outcome::UnauthorizedSource, detail)
    }
}

/// A stored `/v1/events` body: the canonical event itself.
pub fn api_body(stored: &Stored<'_>) -> Again {
    #[derive(serde::Deserialize)]
    struct EventRequest {
        channel: Channel,
        event_type: String,
        tenant_id: String,
        target_entity_id: String,
        payload: serde_json::Value,
        #[serde(default)]
        raw_ref: Option<String>,
    }
    match serde_json::from_slice::<EventRequest>(stored.body) {
        Ok(request) => Again::of(DeliveryBody::Route(Event {
            channel: request.channel,
            event_type: request.event_type,
            tenant_id: request.tenant_id,
            target_entity_id: request.target_entity_id,
            payload: request.payload,
            // A sender's own reference outside Switchyard is kept; one naming stored bytes
            // (refused at intake since, possible on older rows) never is.
            raw_ref: request
                .raw_ref
                .filter(|r| !r.starts_with("raw:"))
                .unwrap_or_else(|| stored.raw_ref.to_owned()),
        })),
        Err(_) => Again::Unreadable("the stored body is not a canonical event"),
    }
}
