//! Zendesk-shaped ticket webhooks -> the canonical [`Event`](switchyard_core::Event): signature
//! verification ([`verify`]) and normalisation ([`normalize`]), as pure functions. The daemon's
//! HTTP handler reads the request, calls these, and records the outcome; this crate does no
//! I/O and depends on no HTTP or async runtime crate.
//!
//! # Connection styles
//!
//! A Zendesk webhook is connected in one of two ways, fixed when it is created:
//!
//! 1. **Event subscription.** Zendesk sends a fixed JSON shape: `type`
//!    (`zen:event-type:ticket.created`), `id` (the event id), `account_id`, `time`, `subject`
//!    (`zen:ticket:5158`), `detail` (the ticket) and `event` (what changed). The event type is
//!    `type` without its `zen:event-type:` prefix; the delivery id is `id`. Only `ticket.*`
//!    types are accepted.
//! 2. **Trigger or automation.** The admin writes the body with placeholders; this crate reads
//!    the shape documented in `TRIGGER_BODY.md` (`event_type`, `ticket`, optional `comment`).
//!    The body carries no id. The `X-Zendesk-Webhook-Invocation-Id` header names the
//!    invocation but is not signed, so a signed request's delivery id comes from what was
//!    signed: `signed:<hex>`, a digest of the signature timestamp and MAC ([`Signed`]). A
//!    captured request resent with a new invocation id is therefore the same delivery. Zendesk
//!    may sign a retry afresh, so the invocation is a second identity
//!    ([`RequestIds::retry_key`]): a retry of an invocation that routed is a duplicate too.
//!    Only a source that checks no signature uses the invocation header as the delivery id
//!    (or `sha256:<hex of the body>` without it).
//!
//! # The event
//!
//! | field | value |
//! |---|---|
//! | `channel` | `webhook` |
//! | `event_type` | `ticket.created`, `ticket.comment_added`, `ticket.status_changed`, ... |
//! | `tenant_id` | the source's configured `tenant`, never a payload field |
//! | `target_entity_id` | the ticket id as a string: `detail.id`, else the `subject`'s `zen:ticket:<id>`, else `ticket.id` |
//! | `payload` | the object below |
//! | `raw_ref` | as given by the daemon, which stores the original bytes |
//!
//! # The payload
//!
//! One shape for both connection styles ([`TicketPayload`]). Every key is always present;
//! absent values are `null`. Ids are strings whether Zendesk sent strings or numbers. Unknown
//! and unlisted fields are not copied here, but nothing is lost: the daemon stores the raw
//! delivery, which `raw_ref` points at.
//!
//! | key | from an event subscription | from a trigger body |
//! |---|---|---|
//! | `ticket_id` | `detail.id` / `subject` | `ticket.id` |
//! | `subject` | `detail.subject` | `ticket.subject` |
//! | `description` | `detail.description` | `ticket.description` |
//! | `status` | `detail.status`, lower case | `ticket.status`, lower case; `On-hold` -> `hold` |
//! | `priority` | `detail.priority`, lower case | `ticket.priority`, lower case |
//! | `ticket_type` | `detail.type`, lower case | `ticket.ticket_type`, lower case; `Ticket` (unset) -> `null` |
//! | `requester_id`, `assignee_id`, `organization_id`, `group_id` | `detail.*` | `ticket.*` |
//! | `external_id` | `detail.external_id` | `ticket.external_id` |
//! | `tags` | `detail.tags` | `ticket.tags`: an array, or a space-separated string |
//! | `via_channel` | `detail.via.channel` | `ticket.via_channel` (display name, snake-cased: `Web form` -> `web_form`) |
//! | `created_at`, `updated_at` | `detail.*`, RFC 3339 UTC, sub-seconds kept | `ticket.*`, RFC 3339 UTC (placeholders have minute precision) |
//! | `occurred_at` | `time` | `null` |
//! | `event` | see below | `{"comment": ...}` when the body has a `comment`, else `{}` |
//! | `source_event_type` | `type` as sent | `event_type` as sent |
//! | `account_id` | `account_id`, else the configured one | the same |
//! | `connection` | `"event_subscription"` | `"trigger"` |
//!
//! `event` for event subscriptions:
//! - `ticket.comment_added`: `{"comment": {"id", "body", "author_id", "author_name",
//!   "author_is_staff", "is_public"}}` ([`CommentPayload`]); trigger bodies' `comment` gives
//!   the same object.
//! - `ticket.status_changed`: `{"previous", "current"}`, lower case like `status`.
//! - `ticket.priority_changed`: `{"previous", "current"}`, lower case.
//! - any other `ticket.*` type: Zendesk's `event` object as delivered (`{}` when absent).
//!
//! Times that cannot be read become `null`, as do blank strings (an unset placeholder renders
//! as nothing).
//!
//! # Errors
//!
//! [`VerifyError`] and [`NormalizeError`] each give a stable [`detail`](VerifyError::detail)
//! code (`stale_timestamp`, `non_ticket_event_type`, ...), a human message (`Display`) and the
//! [`Outcome`](switchyard_core::Outcome) the daemon records: every verification failure and an
//! `account_id` mismatch are `unauthorized_source`, everything else `invalid_event`.
//!
//! # Example
//!
//! What the daemon's handler does with one request (headers from any map; with axum,
//! `|name: &str| map.get(name).and_then(|v| v.to_str().ok())`):
//!
//! ```
//! use chrono::{DateTime, Utc};
//! use switchyard_core::Disposition;
//! use switchyard_webhook::{
//!     Headers, INVOCATION_ID_HEADER, RequestIds, SIGNATURE_HEADER, TIMESTAMP_HEADER,
//!     WebhookSourceConfig, normalize, sign, verify,
//! };
//!
//! let source = WebhookSourceConfig {
//!     name: "zendesk-acme".into(),
//!     tenant: "acme".into(),
//!     signing_secret_env: Some("ZENDESK_ACME_SECRET".into()),
//!     account_id: Some(22129848),
//!     timestamp_tolerance: WebhookSourceConfig::DEFAULT_TIMESTAMP_TOLERANCE,
//!     insecure_skip_signature: false,
//! };
//! source.validate()?;
//! let secret = b"the value of $ZENDESK_ACME_SECRET";
//! let body = br#"{"type":"zen:event-type:ticket.created","id":"e1","subject":"zen:ticket:42"}"#;
//! let timestamp = "2025-01-08T10:12:07Z";
//! let signature = sign(secret, timestamp, body);
//! let headers = [(SIGNATURE_HEADER, signature.as_str()), (TIMESTAMP_HEADER, timestamp)];
//! let now: DateTime<Utc> = "2025-01-08T10:12:09Z".parse()?;
//!
//! let signed = verify(&headers[..], body, secret, source.timestamp_tolerance, now)?;
//! let ids = RequestIds {
//!     signed: Some(&signed),
//!     invocation_id: (&headers[..]).header(INVOCATION_ID_HEADER),
//! };
//! let normalized = normalize(body, ids, &source, "raw:0192...")?;
//! assert_eq!(normalized.delivery_id, "e1");
//! let Disposition::Route(event) = normalized.disposition else { unreachable!() };
//! assert_eq!((event.event_type.as_str(), event.target_entity_id.as_str()), ("ticket.created", "42"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod config;
mod fields;
mod normalize;
mod object;
mod payload;
mod signature;

pub use config::{ConfigError, WebhookSourceConfig};
pub use normalize::{NormalizeError, RequestIds, normalize};
pub use payload::{CommentPayload, Connection, TicketFields, TicketPayload};
pub use signature::{
    Headers, INVOCATION_ID_HEADER, SIGNATURE_HEADER, Signed, TIMESTAMP_HEADER, VerifyError, sign,
    verify,
};
