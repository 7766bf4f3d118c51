//! The normalised `payload` of a webhook event: one documented shape for both ways a Zendesk
//! webhook can be connected.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::fields;

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
    pub(crate) fn read(ticket: &Map<String, Value>) -> Self {
        let get = |key: &str| ticket.get(key);
        let via = match get("via") {
            Some(Value::Object(via)) => via.get("channel"),
            other => other,
        };
        TicketFields {
            subject: fields::text(get("subject")),
            description: fields::text(get("description")),
            status: fields::status(get("status")),
            priority: fields::lower(get("priority")),
            ticket_type: fields::ticket_type(get("ticket_type").or(get("type"))),
            requester_id: fields::id(get("requester_id")),
            assignee_id: fields::id(get("assignee_id")),
            organization_id: fields::id(get("organization_id")),
            group_id: fields::id(get("group_id")),
            external_id: fields::text(get("external_id")),
            tags: fields::tags(get("tags")),
            via_channel: fields::channel(get("via_channel").or(via)),
            created_at: fields::time(get("created_at")),
            updated_at: fields::time(get("updated_at")),
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
