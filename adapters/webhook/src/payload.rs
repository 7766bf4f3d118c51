//! The normalised `payload` of a webhook event: one documented shape for both ways a Zendesk
//! webhook can be connected.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::fields;
use crate::object::Object;

/// How the Zendesk webhook behind a source is connected. Zendesk fixes this when the webhook is
/// created; one webhook never mixes the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Connection {
    /// Subscribed to Zendesk events: a fixed JSON shape with `type`, `id`, `detail`, `event`.
    EventSubscription,
    /// Connected to a trigger or automation: a JSON body the admin wrote with placeholders.
    Trigger,
}

/// The `payload` of every event this adapter produces. See the crate docs for each field's
/// source. Absent values are `null`, never missing keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TicketPayload {
    /// The ticket id as a string; also the event's `target_entity_id`.
    pub ticket_id: String,
    /// The ticket's fields, at the top level of the JSON.
    #[serde(flatten)]
    pub ticket: TicketFields,
    /// When Zendesk says the event happened (event subscriptions' `time`), RFC 3339 UTC.
    pub occurred_at: Option<String>,
    /// The event-specific part; its shape depends on `event_type` (see the crate docs).
    pub event: Value,
    /// The type as delivered: `zen:event-type:ticket.created`, or a trigger body's
    /// `event_type`.
    pub source_event_type: String,
    /// The Zendesk account: the payload's `account_id`, else the source's configured one.
    pub account_id: Option<String>,
    pub connection: Connection,
}

impl TicketPayload {
    /// The payload as the event carries it: the `Value` `serde_json::to_value` makes of it,
    /// built field by field, moving the strings (the derived path copies each one and buffers
    /// the flattened ticket through serde's generic map serialiser).
    pub fn into_value(self) -> Value {
        fn text(value: Option<String>) -> Value {
            value.map_or(Value::Null, Value::String)
        }
        let ticket = self.ticket;
        let mut map = Map::new();
        for (key, value) in [
            ("ticket_id", Value::String(self.ticket_id)),
            ("subject", text(ticket.subject)),
            ("description", text(ticket.description)),
            ("status", text(ticket.status)),
            ("priority", text(ticket.priority)),
            ("ticket_type", text(ticket.ticket_type)),
            ("requester_id", text(ticket.requester_id)),
            ("assignee_id", text(ticket.assignee_id)),
            ("organization_id", text(ticket.organization_id)),
            ("group_id", text(ticket.group_id)),
            ("external_id", text(ticket.external_id)),
            (
                "tags",
                Value::Array(ticket.tags.into_iter().map(Value::String).collect()),
            ),
            ("via_channel", text(ticket.via_channel)),
            ("created_at", text(ticket.created_at)),
            ("updated_at", text(ticket.updated_at)),
            ("occurred_at", text(self.occurred_at)),
            ("event", self.event),
            ("source_event_type", Value::String(self.source_event_type)),
            ("account_id", text(self.account_id)),
            ("connection", to_value(&self.connection)),
        ] {
            map.insert(key.to_owned(), value);
        }
        Value::Object(map)
    }
}

/// The comment of a `comment_added` event, from either connection style.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommentPayload {
    pub id: Option<String>,
    pub body: Option<String>,
    pub author_id: Option<String>,
    pub author_name: Option<String>,
    /// Whether the author is an agent or admin (event subscriptions only).
    pub author_is_staff: Option<bool>,
    pub is_public: Option<bool>,
}

/// The ticket fields shared by both shapes: an event's `detail` or a trigger body's `ticket`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TicketFields {
    pub subject: Option<String>,
    pub description: Option<String>,
    /// Lower case: `new`, `open`, `pending`, `hold`, `solved`, `closed` (and, from events,
    /// `deleted`, `archived`, `scrubbed`).
    pub status: Option<String>,
    /// Lower case: `low`, `normal`, `high`, `urgent`.
    pub priority: Option<String>,
    /// Lower case: `question`, `incident`, `problem`, `task`.
    pub ticket_type: Option<String>,
    pub requester_id: Option<String>,
    pub assignee_id: Option<String>,
    pub organization_id: Option<String>,
    pub group_id: Option<String>,
    pub external_id: Option<String>,
    pub tags: Vec<String>,
    /// Lower snake case, e.g. `web_service`, `email` (events) or `web_form`, `mail` (the
    /// `{{ticket.via}}` placeholder renders display names).
    pub via_channel: Option<String>,
    /// RFC 3339 UTC.
    pub created_at: Option<String>,
    /// RFC 3339 UTC.
    pub updated_at: Option<String>,
}

impl TicketFields {
    /// Reads a ticket object, accepting the event names (`type`, `via.channel`) and the
    /// trigger-body names (`ticket_type`, `via_channel`, a bare `via` string) alike.
    pub(crate) fn read(ticket: &Object<'_>) -> Self {
        let get = |key: &str| ticket.get(key);
        let via = match get("via") {
            Some(Value::Object(mut via)) => via.remove("channel"),
            other => other,
        };
        TicketFields {
            subject: fields::text(get("subject").as_ref()),
            description: fields::text(get("description").as_ref()),
            status: fields::status(get("status").as_ref()),
            priority: fields::lower(get("priority").as_ref()),
            ticket_type: fields::ticket_type(get("ticket_type").or_else(|| get("type")).as_ref()),
            requester_id: fields::id(get("requester_id").as_ref()),
            assignee_id: fields::id(get("assignee_id").as_ref()),
            organization_id: fields::id(get("organization_id").as_ref()),
            group_id: fields::id(get("group_id").as_ref()),
            external_id: fields::text(get("external_id").as_ref()),
            tags: fields::tags(get("tags").as_ref()),
            via_channel: fields::channel(get("via_channel").or(via).as_ref()),
            created_at: fields::time(get("created_at").as_ref()),
            updated_at: fields::time(get("updated_at").as_ref()),
        }
    }
}

impl CommentPayload {
    /// Reads an event's `event.comment` (`author: {id, name, is_staff}`) or a trigger body's
    /// `comment` (`author_id`, `author_name`).
    pub(crate) fn read(comment: &Map<String, Value>) -> Self {
        let get = |key: &str| comment.get(key);
        let author = get("author").and_then(Value::as_object);
        let from_author = |key: &str| author.and_then(|a| a.get(key));
        CommentPayload {
            id: fields::id(get("id")),
            body: fields::text(get("body")),
            author_id: fields::id(get("author_id").or(from_author("id"))),
            author_name: fields::text(get("author_name").or(from_author("name"))),
            author_is_staff: fields::boolean(get("author_is_staff").or(from_author("is_staff"))),
            is_public: fields::boolean(get("is_public")),
        }
    }

    pub(crate) fn to_event(&self) -> Value {
        let mut event = Map::new();
        event.insert("comment".to_owned(), to_value(self));
        Value::Object(event)
    }
}

/// `{previous, current}` of a `status_changed` or `priority_changed` event, in lower case.
pub(crate) fn change(
    event: &Map<String, Value>,
    read: fn(Option<&Value>) -> Option<String>,
) -> Value {
    let mut change = Map::new();
    for key in ["previous", "current"] {
        let value = read(event.get(key)).map_or(Value::Null, Value::String);
        change.insert(key.to_owned(), value);
    }
    Value::Object(change)
}

pub(crate) fn to_value<T: Serialize>(value: &T) -> Value {
    // These types hold only strings, bools, vectors and JSON values: serialising cannot fail.
    serde_json::to_value(value).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `into_value` is the derived serialisation: the same keys and values, for every field
    /// set and for every field empty (a field added to the struct and not to `into_value`
    /// fails here).
    #[test]
    fn into_value_is_what_serde_makes() {
        let full = TicketPayload {
            ticket_id: "42".into(),
            ticket: TicketFields {
                subject: Some("Printer".into()),
                description: Some("on fire".into()),
                status: Some("open".into()),
                priority: Some("low".into()),
                ticket_type: Some("task".into()),
                requester_id: Some("1".into()),
                assignee_id: Some("2".into()),
                organization_id: Some("3".into()),
                group_id: Some("4".into()),
                external_id: Some("x-5".into()),
                tags: vec!["printer".into(), "fire".into()],
                via_channel: Some("web_form".into()),
                created_at: Some("2025-01-08T10:12:07Z".into()),
                updated_at: Some("2025-01-08T10:13:07Z".into()),
            },
            occurred_at: Some("2025-01-08T10:12:07.672717030Z".into()),
            event: serde_json::json!({"comment": {"id": "7"}}),
            source_event_type: "zen:event-type:ticket.created".into(),
            account_id: Some("22129848".into()),
            connection: Connection::EventSubscription,
        };
        let empty = TicketPayload {
            ticket_id: "43".into(),
            ticket: TicketFields {
                subject: None,
                description: None,
                status: None,
                priority: None,
                ticket_type: None,
                requester_id: None,
                assignee_id: None,
                organization_id: None,
                group_id: None,
                external_id: None,
                tags: Vec::new(),
                via_channel: None,
                created_at: None,
                updated_at: None,
            },
            occurred_at: None,
            event: Value::Object(Map::new()),
            source_event_type: "ticket.updated".into(),
            account_id: None,
            connection: Connection::Trigger,
        };
        for payload in [full, empty] {
            let derived = serde_json::to_value(&payload).expect("serialises");
            assert_eq!(payload.into_value(), derived);
        }
    }
}
