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
//! The delivery id is `(source, id)`, the CloudEvent's identity, written as the JSON array
//! `["<source>","<id>"]` ([`delivery_id`]): a resent event is a `duplicate`.
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
//! use switchyard_cloudevents::{CloudEventsSourceConfig, normalize, parse, sign, verify};
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
//! verify(&headers[..], body, &key, source.timestamp_tolerance, 1_700_000_010)?;
//! let event = parse(&headers[..], body)?;
//! let normalized = normalize(&event, &source, "raw:0192...")?;
//! assert_eq!(normalized.delivery_id, r#"["/billing","A1"]"#);
//! let Disposition::Route(event) = normalized.disposition else { unreachable!() };
//! assert_eq!((event.event_type.as_str(), event.target_entity_id.as_str()), ("invoice.overdue", "INV-7"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod config;
mod normalize;
mod parse;
mod signature;

pub use config::{CloudEventsSourceConfig, ConfigError};
pub use normalize::{NormalizeError, TENANT_EXTENSION, delivery_id, normalize};
pub use parse::{
    BATCH_CONTENT_TYPE, CloudEvent, Data, Headers, Mode, ParseError, SPECVERSION_HEADER,
    STRUCTURED_CONTENT_TYPE, parse,
};
pub use signature::{ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, VerifyError, sign, verify};
