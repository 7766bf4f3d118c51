//! Zendesk webhook signatures: `base64(HMAC-SHA256(secret, timestamp + raw body))`, checked in
//! constant time against a replay window; a verified request is identified by what was signed
//! ([`Signed`]), never by an unsigned header.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use chrono::{DateTime, TimeDelta, Utc};
use hmac::{Hmac, Mac};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq;
use switchyard_core::Outcome;

/// Header carrying `base64(HMAC-SHA256(secret, timestamp + body))`.
pub const SIGNATURE_HEADER: &str = "X-Zendesk-Webhook-Signature";
/// Header carrying the RFC 3339 timestamp that is part of the signed message.
pub const TIMESTAMP_HEADER: &str = "X-Zendesk-Webhook-Signature-Timestamp";
/// Header naming one invocation of a trigger- or automation-connected webhook. Not signed.
pub const INVOCATION_ID_HEADER: &str = "X-Zendesk-Webhook-Invocation-Id";

/// Read access to request headers, so this crate needs no HTTP library.
///
/// Lookups must be ASCII case-insensitive, as HTTP header names are. Implemented for closures
/// (`|name: &str| header_map.get(name).and_then(|v| v.to_str().ok())`) and for slices of
/// `(name, value)` pairs.
pub trait Headers<'h> {
    /// The value of header `name`, if present and valid text.
    fn header(&self, name: &str) -> Option<&'h str>;
}

impl<'h, F> Headers<'h> for F
where
    F: Fn(&str) -> Option<&'h str>,
{
    fn header(&self, name: &str) -> Option<&'h str> {
        self(name)
    }
}

impl<'h, K, V> Headers<'h> for &'h [(K, V)]
where
    K: AsRef<str>,
    V: AsRef<str>,
{
    fn header(&self, name: &str) -> Option<&'h str> {
        self.iter()
            .find(|(k, _)| k.as_ref().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_ref())
    }
}

/// A request whose signature [`verify`] accepted: what identifies it is what Zendesk signed.
///
/// The signed message is the timestamp text and the body, so the same signed request sent
/// again has the same [`Signed::delivery_id`] whatever unsigned headers (such as a new
/// `X-Zendesk-Webhook-Invocation-Id`) it carries. Two requests differ in it unless they carry
/// the same body signed at the same second, which no reader of the request can tell apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// SHA-256 of the timestamp text and the MAC it was signed with.
    digest: [u8; 32],
}

impl Signed {
    fn new(timestamp: &str, mac: &[u8; 32]) -> Self {
        let mut digest = Sha256::new();
        digest.update(timestamp.as_bytes());
        // The timestamp is never empty and the MAC has a fixed length: no separator needed,
        // but one keeps the encoding obviously unambiguous.
        digest.update([0]);
        digest.update(mac);
        Self {
            digest: digest.finalize().into(),
        }
    }

    /// `signed:<hex>`: the delivery id of a request whose body carries no id of its own.
    pub fn delivery_id(&self) -> String {
        format!("signed:{}", hex::encode(self.digest))
    }
}

/// Why a delivery's signature was refused. Every variant is an `unauthorized_source`.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("the {SIGNATURE_HEADER} header is missing")]
    MissingSignature,
    #[error("the {TIMESTAMP_HEADER} header is missing")]
    MissingTimestamp,
    #[error("the signature timestamp `{value}` is not an RFC 3339 date-time")]
    MalformedTimestamp {
        value: String,
        #[source]
        source: chrono::ParseError,
    },
    #[error(
        "the signature timestamp {timestamp} is {}s old, beyond the {}s tolerance",
        age.as_secs(), tolerance.as_secs()
    )]
    StaleTimestamp {
        timestamp: DateTime<Utc>,
        age: Duration,
        tolerance: Duration,
    },
    #[error(
        "the signature timestamp {timestamp} is {}s in the future, beyond the {}s tolerance \
         (check the clocks)",
        ahead.as_secs(), tolerance.as_secs()
    )]
    FutureTimestamp {
        timestamp: DateTime<Utc>,
        ahead: Duration,
        tolerance: Duration,
    },
    #[error("the signature does not match the timestamp and body (wrong secret, or altered)")]
    BadSignature,
}

impl VerifyError {
    /// A stable machine-readable reason, for the `detail` of the HTTP answer and the ledger.
    pub fn detail(&self) -> &'static str {
        match self {
            VerifyError::MissingSignature => "missing_signature",
            VerifyError::MissingTimestamp => "missing_timestamp",
            VerifyError::MalformedTimestamp { .. } => "malformed_timestamp",
            VerifyError::StaleTimestamp { .. } => "stale_timestamp",
            VerifyError::FutureTimestamp { .. } => "future_timestamp",
            VerifyError::BadSignature => "bad_signature",
        }
    }

    /// The intake outcome this failure ends in.
    pub fn outcome(&self) -> Outcome {
        Outcome::UnauthorizedSource
    }
}

/// The signature Zendesk sends for `timestamp` and `body`: base64 of
/// `HMAC-SHA256(secret, timestamp + body)`. `secret` is the signing secret's UTF-8 bytes, as
/// Zendesk uses it (not base64-decoded). [`verify`] checks against exactly this MAC.
pub fn sign(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    BASE64.encode(mac(secret, timestamp, body))
}

fn mac(secret: &[u8], timestamp: &str, body: &[u8]) -> [u8; 32] {
    // HMAC accepts keys of any length, so this constructor cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(timestamp.as_bytes());
    mac.update(body);
    mac.finalize().into_bytes().into()
}

/// Checks a delivery's signature headers against the raw `body` and `secret`.
///
/// The timestamp is used byte for byte in the MAC, then must lie within `tolerance` of `now`
/// in either direction (exactly `tolerance` away is accepted). The MAC is checked before the
/// window, so `stale_timestamp` and `future_timestamp` mean "authentic, but outside the
/// window" (a replay or a skewed clock) rather than "unknown sender". An accepted request is
/// [`Signed`]: its identity comes from the signed parts alone.
pub fn verify<'h>(
    headers: impl Headers<'h>,
    body: &[u8],
    secret: &[u8],
    tolerance: Duration,
    now: DateTime<Utc>,
) -> Result<Signed, VerifyError> {
    let signature = headers
        .header(SIGNATURE_HEADER)
        .filter(|s| !s.is_empty())
        .ok_or(VerifyError::MissingSignature)?;
    let timestamp_text = headers
        .header(TIMESTAMP_HEADER)
        .filter(|s| !s.is_empty())
        .ok_or(VerifyError::MissingTimestamp)?;
    let timestamp = DateTime::parse_from_rfc3339(timestamp_text)
        .map_err(|source| VerifyError::MalformedTimestamp {
            value: clip(timestamp_text),
            source,
        })?
        .with_timezone(&Utc);

    let expected = mac(secret, timestamp_text, body);
    // A signature that is not even base64 is simply wrong; decoding leaks nothing about the MAC.
    let given = BASE64
        .decode(signature)
        .map_err(|_| VerifyError::BadSignature)?;
    if !bool::from(expected.as_slice().ct_eq(given.as_slice())) {
        return Err(VerifyError::BadSignature);
    }

    // An out-of-range tolerance means "no practical limit", never "refuse everything".
    let window = TimeDelta::from_std(tolerance).unwrap_or(TimeDelta::MAX);
    let age = now.signed_duration_since(timestamp);
    if age > window {
        return Err(VerifyError::StaleTimestamp {
            timestamp,
            age: age.to_std().unwrap_or(Duration::MAX),
            tolerance,
        });
    }
    if -age > window {
        return Err(VerifyError::FutureTimestamp {
            timestamp,
            ahead: (-age).to_std().unwrap_or(Duration::MAX),
            tolerance,
        });
    }
    Ok(Signed::new(timestamp_text, &expected))
}

/// Header values are attacker-controlled: keep error messages short.
fn clip(value: &str) -> String {
    const MAX: usize = 64;
    match value.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}...", &value[..end]),
        None => value.to_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    /// Zendesk's static secret for test deliveries from its webhook builder (PROTOCOLS.md).
    const SECRET: &[u8] = b"dGhpc19zZWNyZXRfaXNfZm9yX3Rlc3Rpbmdfb25seQ==";
    const TIMESTAMP: &str = "2021-03-25T05:09:27Z";
    const BODY: &[u8] = br#"{"type":"zen:event-type:ticket.created"}"#;
    const SIGNATURE: &str = "69EIqFt9nbXumm7w0tvopVmD8Bclei89GEk+Qcfyr4Y=";
    const TOLERANCE: Duration = Duration::from_secs(300);

    fn at(rfc3339: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .with_timezone(&Utc)
    }

    fn signed_at(timestamp: &str, signature: &str) -> Vec<(String, String)> {
        vec![
            (TIMESTAMP_HEADER.to_owned(), timestamp.to_owned()),
            (SIGNATURE_HEADER.to_owned(), signature.to_owned()),
        ]
    }

    fn check(headers: &[(String, String)], body: &[u8], now: &str) -> Result<Signed, VerifyError> {
        verify(headers, body, SECRET, TOLERANCE, at(now))
    }

    #[test]
    fn sign_reproduces_the_zendesk_test_vector() {
        assert_eq!(sign(SECRET, TIMESTAMP, BODY), SIGNATURE);
    }

    #[test]
    fn the_test_vector_verifies_with_an_injected_clock() {
        let headers = signed_at(TIMESTAMP, SIGNATURE);
        check(&headers, BODY, TIMESTAMP).unwrap();
    }

    #[test]
    fn header_names_match_case_insensitively() {
        let headers = vec![
            ("x-zendesk-webhook-signature-timestamp", TIMESTAMP),
            ("X-ZENDESK-WEBHOOK-SIGNATURE", SIGNATURE),
        ];
        verify(headers.as_slice(), BODY, SECRET, TOLERANCE, at(TIMESTAMP)).unwrap();
    }

    #[test]
    fn closures_serve_as_headers() {
        let pairs = signed_at(TIMESTAMP, SIGNATURE);
        let lookup = |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        };
        verify(lookup, BODY, SECRET, TOLERANCE, at(TIMESTAMP)).unwrap();
    }

    #[test]
    fn one_altered_byte_anywhere_is_refused() {
        let mut body = BODY.to_vec();
        body[10] ^= 1;
        let err = check(&signed_at(TIMESTAMP, SIGNATURE), &body, TIMESTAMP).unwrap_err();
        assert_eq!(err.detail(), "bad_signature");

        // Same instant, different bytes: the timestamp is signed as text, not as a time.
        for timestamp in ["2021-03-25T05:09:28Z", "2021-03-25T05:09:27+00:00"] {
            let err = check(&signed_at(timestamp, SIGNATURE), BODY, TIMESTAMP).unwrap_err();
            assert_eq!(err.detail(), "bad_signature", "{timestamp}");
        }

        let mut signature = SIGNATURE.to_owned().into_bytes();
        signature[0] = b'7';
        let signature = String::from_utf8(signature).unwrap();
        let err = check(&signed_at(TIMESTAMP, &signature), BODY, TIMESTAMP).unwrap_err();
        assert_eq!(err.detail(), "bad_signature");

        let err = check(&signed_at(TIMESTAMP, "not base64!"), BODY, TIMESTAMP).unwrap_err();
        assert_eq!(err.detail(), "bad_signature");

        let wrong_secret = verify(
            signed_at(TIMESTAMP, SIGNATURE).as_slice(),
            BODY,
            b"another secret",
            TOLERANCE,
            at(TIMESTAMP),
        );
        assert_eq!(wrong_secret.unwrap_err().detail(), "bad_signature");
    }

    #[test]
    fn the_window_is_inclusive_in_both_directions() {
        let headers = signed_at(TIMESTAMP, SIGNATURE);
        // Exactly at the tolerance, either side: accepted.
        check(&headers, BODY, "2021-03-25T05:14:27Z").unwrap();
        check(&headers, BODY, "2021-03-25T05:04:27Z").unwrap();

        // One second past it: refused, with the direction named.
        let err = check(&headers, BODY, "2021-03-25T05:14:28Z").unwrap_err();
        assert_eq!(err.detail(), "stale_timestamp");
        assert_eq!(
            err.to_string(),
            "the signature timestamp 2021-03-25 05:09:27 UTC is 301s old, beyond the 300s tolerance"
        );
        let err = check(&headers, BODY, "2021-03-25T05:04:26Z").unwrap_err();
        assert_eq!(err.detail(), "future_timestamp");
        assert!(err.to_string().contains("301s in the future"), "{err}");
    }

    #[test]
    fn missing_and_malformed_headers_have_their_own_details() {
        let only_timestamp = vec![(TIMESTAMP_HEADER, TIMESTAMP)];
        let err = verify(
            only_timestamp.as_slice(),
            BODY,
            SECRET,
            TOLERANCE,
            at(TIMESTAMP),
        );
        assert_eq!(err.unwrap_err().detail(), "missing_signature");

        let only_signature = vec![(SIGNATURE_HEADER, SIGNATURE)];
        let err = verify(
            only_signature.as_slice(),
            BODY,
            SECRET,
            TOLERANCE,
            at(TIMESTAMP),
        );
        assert_eq!(err.unwrap_err().detail(), "missing_timestamp");

        let empty = signed_at(TIMESTAMP, "");
        assert_eq!(
            check(&empty, BODY, TIMESTAMP).unwrap_err().detail(),
            "missing_signature"
        );

        // Unix seconds are what Slack sends; Zendesk's timestamp is RFC 3339.
        let unix = signed_at("1616648967", SIGNATURE);
        let err = check(&unix, BODY, TIMESTAMP).unwrap_err();
        assert_eq!(err.detail(), "malformed_timestamp");
        assert_eq!(
            err.to_string(),
            "the signature timestamp `1616648967` is not an RFC 3339 date-time"
        );
        assert_eq!(err.outcome(), Outcome::UnauthorizedSource);
    }

    #[test]
    fn a_signed_request_is_identified_by_its_signed_parts_only() {
        let headers = signed_at(TIMESTAMP, SIGNATURE);
        let first = check(&headers, BODY, TIMESTAMP).unwrap();
        // Any unsigned header added or changed: the same delivery.
        let mut resent = headers.clone();
        resent.push((
            INVOCATION_ID_HEADER.to_owned(),
            "another-invocation".to_owned(),
        ));
        assert_eq!(check(&resent, BODY, TIMESTAMP).unwrap(), first);
        assert!(
            first.delivery_id().starts_with("signed:"),
            "{}",
            first.delivery_id()
        );
        assert_eq!(first.delivery_id().len(), "signed:".len() + 64);

        // The same body signed at another second is another delivery.
        let later = "2021-03-25T05:09:28Z";
        let again = signed_at(later, &sign(SECRET, later, BODY));
        let other = check(&again, BODY, TIMESTAMP).unwrap();
        assert_ne!(other.delivery_id(), first.delivery_id());
    }

    #[test]
    fn long_header_values_are_clipped_in_messages() {
        let long = "9".repeat(500);
        let err = check(&signed_at(&long, SIGNATURE), BODY, TIMESTAMP).unwrap_err();
        assert!(err.to_string().len() < 150, "{err}");
    }
}
