//! Standard Webhooks v1: HMAC-SHA256 over `{id}.{timestamp}.{body}`, sent as `v1,<base64>`.
//! Pure (no I/O): the dispatch transports sign with it and the CloudEvents intake verifies with it.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

type HmacSha256 = Hmac<Sha256>;

/// Prefix of a Standard Webhooks secret.
const PREFIX: &str = "whsec_";
/// Decoded secret length the spec allows.
const KEY_LEN: std::ops::RangeInclusive<usize> = 24..=64;
/// Length of an HMAC-SHA256 tag.
const TAG_LEN: usize = 32;

/// A decoded `whsec_` secret, ready to sign. `Debug` never prints the key.
#[derive(Clone)]
pub struct SigningKey {
    /// The HMAC keyed with the decoded secret; cloned for every signature.
    mac: HmacSha256,
    /// Decoded length, the only thing `Debug` shows.
    len: usize,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// Why a secret was refused or a signature did not verify.
#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    /// The secret lacks the `whsec_` prefix (bare base64 is refused on purpose: a prefix
    /// mistake usually means the wrong value was pasted).
    #[error("signing secret must start with `whsec_`")]
    MissingPrefix,
    /// The part after `whsec_` is not standard base64.
    #[error("signing secret after `whsec_` is not valid base64")]
    SecretBase64(#[source] base64::DecodeError),
    /// The decoded secret is outside 24..=64 bytes.
    #[error("signing secret decodes to {0} bytes; Standard Webhooks requires 24 to 64")]
    SecretLength(usize),
    /// The HMAC refused the key (cannot happen for HMAC-SHA256, kept so no path panics).
    #[error("signing secret rejected by HMAC")]
    HmacKey(#[source] hmac::digest::InvalidLength),
    /// `webhook-timestamp` is not an integer.
    #[error("webhook-timestamp `{value}` is not an integer number of seconds")]
    InvalidTimestamp {
        /// The header value.
        value: String,
        /// The parse error.
        #[source]
        source: std::num::ParseIntError,
    },
    /// `webhook-timestamp` is older than the tolerance allows.
    #[error("webhook-timestamp is {age_secs} s old, more than the {tolerance_secs} s tolerated")]
    TimestampTooOld {
        /// How old it is.
        age_secs: i64,
        /// The tolerance in force.
        tolerance_secs: i64,
    },
    /// `webhook-timestamp` is further in the future than the tolerance allows.
    #[error(
        "webhook-timestamp is {ahead_secs} s in the future, more than the {tolerance_secs} s tolerated"
    )]
    TimestampInFuture {
        /// How far ahead it is.
        ahead_secs: i64,
        /// The tolerance in force.
        tolerance_secs: i64,
    },
    /// The signature header has no `v1,` entry at all.
    #[error("webhook-signature has no v1 signature")]
    NoV1Signature,
    /// No `v1` entry matched (this includes empty and truncated ones).
    #[error("no v1 signature in webhook-signature matches")]
    Mismatch,
}

impl SigningKey {
    /// Parses `whsec_<base64>`; the decoded secret must be 24 to 64 bytes.
    pub fn parse(secret: &str) -> Result<Self, SignatureError> {
        let encoded = secret
            .trim()
            .strip_prefix(PREFIX)
            .ok_or(SignatureError::MissingPrefix)?;
        let bytes = STANDARD
            .decode(encoded)
            .map_err(SignatureError::SecretBase64)?;
        if !KEY_LEN.contains(&bytes.len()) {
            return Err(SignatureError::SecretLength(bytes.len()));
        }
        let mac = HmacSha256::new_from_slice(&bytes).map_err(SignatureError::HmacKey)?;
        Ok(SigningKey {
            mac,
            len: bytes.len(),
        })
    }

    /// The raw HMAC-SHA256 tag of `{id}.{timestamp}.{body}`.
    fn tag(&self, id: &str, timestamp: &str, body: &[u8]) -> [u8; TAG_LEN] {
        let mut mac = self.mac.clone();
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(body);
        mac.finalize().into_bytes().into()
    }
}

/// The `webhook-signature` value: one `v1,<base64>` per key, space-separated, so a key
/// rotation can send old and new signatures together. Empty when `keys` is empty.
pub fn sign(keys: &[SigningKey], id: &str, timestamp: i64, body: &[u8]) -> String {
    let timestamp = timestamp.to_string();
    keys.iter()
        .map(|key| format!("v1,{}", STANDARD.encode(key.tag(id, &timestamp, body))))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Verifies a Standard Webhooks delivery: the timestamp must be within `tolerance_secs` of
/// `now_secs`, and one of the space-separated `v1,` entries must match exactly (constant-time
/// compare, after a length check, so empty and truncated signatures fail).
pub fn verify(
    key: &SigningKey,
    id: &str,
    timestamp: &str,
    signature_header: &str,
    body: &[u8],
    now_secs: i64,
    tolerance_secs: i64,
) -> Result<(), SignatureError> {
    let ts: i64 = timestamp
        .trim()
        .parse()
        .map_err(|source| SignatureError::InvalidTimestamp {
            value: timestamp.to_owned(),
            source,
        })?;
    let age = now_secs.saturating_sub(ts);
    if age > tolerance_secs {
        return Err(SignatureError::TimestampTooOld {
            age_secs: age,
            tolerance_secs,
        });
    }
    if age < -tolerance_secs {
        return Err(SignatureError::TimestampInFuture {
            ahead_secs: age.saturating_neg(),
            tolerance_secs,
        });
    }
    // Sign the timestamp as it was sent: the signer signed the header text.
    let expected = key.tag(id, timestamp.trim(), body);
    let mut saw_v1 = false;
    let mut matched = false;
    for entry in signature_header.split(' ').filter(|e| !e.is_empty()) {
        let Some(("v1", encoded)) = entry.split_once(',') else {
            continue;
        };
        saw_v1 = true;
        let Ok(given) = STANDARD.decode(encoded) else {
            continue;
        };
        // Length first: `ct_eq` on slices of different lengths is false, but an explicit check
        // keeps the empty-signature case obviously refused.
        if given.len() == TAG_LEN && bool::from(given.as_slice().ct_eq(&expected)) {
            matched = true;
        }
    }
    match (saw_v1, matched) {
        (_, true) => Ok(()),
        (false, false) => Err(SignatureError::NoV1Signature),
        (true, false) => Err(SignatureError::Mismatch),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_does_not_print_the_key() {
        let key = SigningKey::parse("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD").unwrap();
        let shown = format!("{key:?}");
        assert_eq!(shown, "SigningKey { len: 24, .. }");
    }

    #[test]
    fn no_keys_sign_to_empty() {
        assert_eq!(sign(&[], "id", 1, b"{}"), "");
    }
}
