//! Slack request signing (`v0`): verify a request against the signing secret with an injected
//! clock, and sign bodies for tests and benchmarks.
//!
//! The MAC is computed here with `hmac`/`sha2` rather than through slack-morphism's
//! `SlackEventSignatureVerifier`, because 2.31's verifier exposes only `verify(hash, body, ts)`:
//! its `sign` and `verify_at_time` are private and `verify` reads the real clock, so a replay
//! window cannot be tested (Slack's own test vector is from 2018), and it takes the body as
//! `&str` although the MAC is over raw bytes. Telling "good MAC, stale timestamp" from "bad MAC"
//! by the kind of error it returns would depend on the private order of its checks. The
//! algorithm is three lines (`v0:{ts}:{body}`, HMAC-SHA256, hex) and is pinned by Slack's
//! documented test vector in the tests.

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::SlackError;

/// How far the request timestamp may be from our clock, either way (Slack's documented window).
pub const MAX_CLOCK_SKEW_SECS: u64 = 300;

const VERSION_PREFIX: &str = "v0=";

/// Checks Slack's `X-Slack-Signature` over the raw body and refuses replays.
///
/// `timestamp_header` and `signature_header` are the values of `X-Slack-Request-Timestamp` and
/// `X-Slack-Signature`; `secret` is the app's signing secret; `now` is the daemon's clock. The
/// signature is compared in constant time. The checks run in this order, so each refusal has
/// one stable [`SlackError::detail`]: `empty_signing_secret`, `missing_timestamp`,
/// `malformed_timestamp`, `missing_signature`, `stale_timestamp` (more than
/// [`MAX_CLOCK_SKEW_SECS`] away, past or future), `bad_signature`.
pub fn verify(
    timestamp_header: Option<&str>,
    signature_header: Option<&str>,
    body: &[u8],
    secret: &str,
    now: DateTime<Utc>,
) -> Result<(), SlackError> {
    if secret.is_empty() {
        return Err(SlackError::EmptySecret);
    }
    let timestamp_text = timestamp_header.ok_or(SlackError::MissingTimestamp)?;
    let timestamp = parse_timestamp(timestamp_text)?;
    let signature = signature_header.ok_or(SlackError::MissingSignature)?;

    let now = now.timestamp();
    if now.abs_diff(timestamp) > MAX_CLOCK_SKEW_SECS {
        return Err(SlackError::StaleTimestamp { timestamp, now });
    }

    let claimed = signature
        .strip_prefix(VERSION_PREFIX)
        .and_then(|hex_digest| hex::decode(hex_digest).ok())
        .ok_or(SlackError::BadSignature)?;
    // The MAC is over the header text exactly as sent, like Slack computes it.
    mac(secret, timestamp_text, body)
        .verify_slice(&claimed) // constant-time comparison
        .map_err(|_| SlackError::BadSignature)
}

/// The `X-Slack-Signature` value Slack would send for `body` at `timestamp` (Unix seconds):
/// `v0=<64 lowercase hex digits>`. For tests and benchmarks; it is the MAC [`verify`] checks.
pub fn sign(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let digest = mac(secret, &timestamp.to_string(), body)
        .finalize()
        .into_bytes();
    format!("{VERSION_PREFIX}{}", hex::encode(digest))
}

/// Slack sends whole seconds as plain digits; anything else (sign, spaces, fractions) is refused
/// rather than guessed at.
fn parse_timestamp(text: &str) -> Result<i64, SlackError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SlackError::MalformedTimestamp);
    }
    text.parse().map_err(|_| SlackError::MalformedTimestamp)
}

fn mac(secret: &str, timestamp: &str, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        // HMAC hashes long keys and pads short ones: every key length is valid.
        Err(_) => unreachable!("HMAC-SHA256 accepts keys of any length"),
    };
    mac.update(b"v0:");
    mac.update(timestamp.as_bytes());
    mac.update(b":");
    mac.update(body);
    mac
}
