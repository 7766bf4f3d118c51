//! CloudEvents 1.0 over HTTP -> the canonical [`Event`](switchyard_core::Event), as pure
//! functions: [`verify`] (a Standard Webhooks signature over the raw body), [`parse`]
//! (structured or binary content mode; batched mode is refused) and [`normalize`]. The
//! daemon's handler reads the request, calls these and records the outcome; this crate does no
//! I/O and depends on no HTTP or async runtime crate.
//!
//! # The event
//!
//! | field | value |
//! |---|---|
//! | `channel` | the source's configured `channel` (default `webhook`) |
//! | `event_type` | `type` |
//! | `tenant_id` | the source's configured `tenant`; a `tenantid` extension that disagrees is `unauthorized_source` |
//! | `target_entity_id` | `subject` (required: without it the event is `invalid_event`) |
//! | `payload` | the object below |
//! | `raw_ref` | as given by the daemon, which stores the original bytes |
//!
//! # Identity and what the signature covers
//!
//! A Standard Webhooks signature covers `webhook-id`, `webhook-timestamp` and the body, nothing
//! else. In structured mode every attribute is inside the body, so everything that routes the
//! event is signed: this is the one mode in which a signature vouches for the whole event. In
//! binary mode the attributes are `ce-*` headers outside the signature; only the data is signed.
//!
//! So a signed request is identified by its signed message id ([`identity`]): the delivery id
//! is `webhook-id:<id>` ([`Signed::delivery_id`]), and a captured request resent with new `ce-*`
//! headers is a `duplicate`, in either mode. The event's own identity, `(source, id)` written as
//! the JSON array `["<source>","<id>"]` ([`delivery_id`]), is kept as a second key: once one copy
//! has routed, the same event resent under another message id is a `duplicate` too. A request
//! authenticated by a bearer token (the whole request is the token holder's) is identified by
//! `(source, id)` alone.
//!
//! # The payload
//!
//! `id`, `source`, `type`, `subject`, `time` (as sent), `datacontenttype`, `dataschema` (each
//! `null` when absent), `mode` (`structured` or `binary`), `extensions` (every other attribute,
//! by name; in binary mode every other `ce-*` header, percent-decoded) and `data`: the JSON
//! value for JSON data, the text for `text/*` bodies, `null` with `data_base64` beside it for
//! binary data. Conditions (`when`) read it by path, e.g. `data.priority`.
//!
//! # Errors
//!
//! [`ParseError`], [`NormalizeError`] and [`VerifyError`] each give a stable `detail` code.
//! Signature failures and a tenant mismatch are `unauthorized_source`; batched mode and a
//! request that is no CloudEvent at all are refused as unsupported media types; everything else
//! is `invalid_event`.
//!
//! # Example
//!
//! ```
//! use switchyard_cloudevents::{CloudEventsSourceConfig, identity, normalize, parse, sign, verify};
//! use switchyard_core::{Channel, Disposition};
//! use switchyard_core::standard_webhooks::SigningKey;
//!
//! let source = CloudEventsSourceConfig {
//!     name: "billing".into(),
//!     tenant: "acme".into(),
//!     signing_secret_env: Some("BILLING_SECRET".into()),
//!     channel: Channel::Webhook,
//!     timestamp_tolerance: CloudEventsSourceConfig::DEFAULT_TIMESTAMP_TOLERANCE,
//! };
//! source.validate()?;
//! let key = SigningKey::parse("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD")?;
//! let body = br#"{"specversion":"1.0","id":"A1","source":"/billing","type":"invoice.overdue","subject":"INV-7"}"#;
//! let signed = sign(&key, "msg_1", 1_700_000_000, body);
//! let mut headers: Vec<(&str, &str)> = signed.iter().map(|(n, v)| (*n, v.as_str())).collect();
//! headers.push(("content-type", "application/cloudevents+json"));
//!
//! let signed = verify(&headers[..], body, &key, source.timestamp_tolerance, 1_700_000_010)?;
//! let event = parse(&headers[..], body)?;
//! let normalized = normalize(&event, &source, "raw:0192...")?;
//! assert_eq!(normalized.delivery_id, r#"["/billing","A1"]"#);
//! let recorded = identity(&event, Some(&signed));
//! assert_eq!(recorded.delivery_id, "webhook-id:msg_1");
//! assert_eq!(recorded.message_key.as_deref(), Some(r#"["/billing","A1"]"#));
//! let Disposition::Route(event) = normalized.disposition else { unreachable!() };
//! assert_eq!((event.event_type.as_str(), event.target_entity_id.as_str()), ("invoice.overdue", "INV-7"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod config;
mod normalize;
mod parse;
mod signature;

pub use config::{CloudEventsSourceConfig, ConfigError};
pub use normalize::{Identity, NormalizeError, TENANT_EXTENSION, delivery_id, identity, normalize};
pub use parse::{
    BATCH_CONTENT_TYPE, CloudEvent, Data, Headers, Mode, ParseError, SPECVERSION_HEADER,
    STRUCTURED_CONTENT_TYPE, parse,
};
pub use signature::{
    ID_HEADER, SIGNATURE_HEADER, Signed, TIMESTAMP_HEADER, VerifyError, sign, verify,
};
