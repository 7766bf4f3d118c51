//! The Standard Webhooks signature a publisher puts on a CloudEvents request, checked over the
//! raw body before anything is parsed. It covers `webhook-id`, `webhook-timestamp` and the body,
//! nothing else: binary mode's `ce-*` headers are outside it ([`Signed`]).

use std::time::Duration;

use switchyard_core::standard_webhooks::{self, SignatureError, SigningKey};

use crate::parse::Headers;

/// Standard Webhooks' message id header (part of the signed content).
pub const ID_HEADER: &str = "webhook-id";
/// Standard Webhooks' timestamp header: integer Unix seconds.
pub const TIMESTAMP_HEADER: &str = "webhook-timestamp";
/// Standard Webhooks' signature header: space-separated `v1,<base64>` entries.
pub const SIGNATURE_HEADER: &str = "webhook-signature";

/// A request whose signature [`verify`] accepted. Only `webhook-id`, `webhook-timestamp` and the
/// body are signed, so the signed message id is what identifies the request: a copy resent
/// with other unsigned headers (a new `ce-id`, `ce-type`, `ce-subject`) is the same message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    message_id: String,
}

impl Signed {
    /// The signed `webhook-id`, which Standard Webhooks keeps stable across a publisher's
    /// retries of one message.
    pub fn message_id(&self) -> &str {
        &self.message_id
    }

    /// `webhook-id:<id>`: the delivery id of a signed request. It cannot collide with an
    /// event's `["<source>","<id>"]`, which always starts with `[`.
    pub fn delivery_id(&self) -> String {
        format!("webhook-id:{}", self.message_id)
    }
}

/// Why a request's signature was refused.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// One of the three Standard Webhooks headers is absent.
    #[error("missing `{0}` header (Standard Webhooks signature)")]
    MissingHeader(&'static str),
    /// The headers are there but do not verify.
    #[error(transparent)]
    Signature(#[from] SignatureError),
}

impl VerifyError {
    /// A stable machine-readable code for the answer's detail.
    pub fn detail(&self) -> &'static str {
        match self {
            VerifyError::MissingHeader(_) => "missing_signature",
            VerifyError::Signature(
                SignatureError::TimestampTooOld { .. } | SignatureError::TimestampInFuture { .. },
            ) => "stale_timestamp",
            VerifyError::Signature(_) => "bad_signature",
        }
    }
}

/// Checks the request's Standard Webhooks signature over the raw `body`: the timestamp within
/// `tolerance` of `now_secs`, one `v1` entry matching in constant time. An accepted request is
/// [`Signed`] with its message id.
pub fn verify<H: Headers + ?Sized>(
    headers: &H,
    body: &[u8],
    key: &SigningKey,
    tolerance: Duration,
    now_secs: i64,
) -> Result<Signed, VerifyError> {
    let get = |name: &'static str| headers.header(name).ok_or(VerifyError::MissingHeader(name));
    let id = get(ID_HEADER)?;
    let timestamp = get(TIMESTAMP_HEADER)?;
    let signature = get(SIGNATURE_HEADER)?;
    let tolerance = i64::try_from(tolerance.as_secs()).unwrap_or(i64::MAX);
    standard_webhooks::verify(key, id, timestamp, signature, body, now_secs, tolerance)?;
    Ok(Signed {
        message_id: id.to_owned(),
    })
}

/// The three headers that sign `body` as message `id` at `timestamp`, for tests, benchmarks and
/// publishers written in Rust.
pub fn sign(
    key: &SigningKey,
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> [(&'static str, String); 3] {
    [
        (ID_HEADER, id.to_owned()),
        (TIMESTAMP_HEADER, timestamp.to_string()),
        (
            SIGNATURE_HEADER,
            standard_webhooks::sign(std::slice::from_ref(key), id, timestamp, body),
        ),
    ]
}
