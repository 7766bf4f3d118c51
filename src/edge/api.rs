//! The `api` source: its name, and its bodies read again for replay. `POST /v1/events` (and
//! `POST /v1/waits/resume`) take the canonical event itself, so no channel's adapter is
//! involved; this is the one reading of it besides the handler's own.

use switchyard_core::{Channel, Event};

use super::{Again, Stored};
use crate::intake::DeliveryBody;

pub use crate::config::API_SOURCE;

/// A stored `/v1/events` body: the canonical event itself.
pub fn renormalize(stored: &Stored<'_>) -> Again {
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
