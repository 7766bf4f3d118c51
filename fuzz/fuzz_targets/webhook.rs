//! Fuzzes the Zendesk webhook adapter's `verify` and `normalize` (crate `switchyard-webhook`).
//!
//! Input: `signature \0 timestamp \0 invocation_id \0 body`, or, without three NULs, the whole
//! input is the body. An empty signature part (and the body-only form) is replaced by the
//! valid signature for that timestamp, so the fuzzer reaches the time-window checks and the
//! happy path, not only `bad_signature`. `normalize` runs on every body, signed or not, with
//! and without a pinned `account_id`.
#![no_main]

use chrono::{DateTime, Utc};
use libfuzzer_sys::fuzz_target;
use switchyard_webhook::{
    INVOCATION_ID_HEADER, RequestIds, SIGNATURE_HEADER, TIMESTAMP_HEADER, WebhookSourceConfig,
    normalize, sign, verify,
};

const SECRET: &[u8] = b"fuzz-signing-secret";
const NOW: i64 = 1_736_331_129; // 2025-01-08T10:12:09Z, two seconds after the fixtures' times
const DEFAULT_TIMESTAMP: &str = "2025-01-08T10:12:07Z";

fuzz_target!(|data: &[u8]| {
    let parts: Vec<&[u8]> = data.splitn(4, |&b| b == 0).collect();
    let (signature, timestamp, invocation_id, body) = match parts[..] {
        [s, t, i, b] => (
            String::from_utf8_lossy(s).into_owned(),
            String::from_utf8_lossy(t).into_owned(),
            Some(String::from_utf8_lossy(i).into_owned()).filter(|i| !i.is_empty()),
            b,
        ),
        _ => (String::new(), DEFAULT_TIMESTAMP.to_owned(), None, data),
    };
    let signature = if signature.is_empty() {
        sign(SECRET, &timestamp, body)
    } else {
        signature
    };
    let mut headers = vec![
        (SIGNATURE_HEADER, signature.as_str()),
        (TIMESTAMP_HEADER, timestamp.as_str()),
    ];
    if let Some(id) = invocation_id.as_deref() {
        headers.push((INVOCATION_ID_HEADER, id));
    }

    let now = DateTime::<Utc>::from_timestamp(NOW, 0).unwrap_or_default();
    let source = source(None);
    let signed = match verify(&headers[..], body, SECRET, source.timestamp_tolerance, now) {
        Ok(signed) => Some(signed),
        Err(e) => {
            let _ = (e.detail(), e.outcome(), e.to_string());
            None
        }
    };
    let ids = RequestIds {
        signed: signed.as_ref(),
        invocation_id: invocation_id.as_deref(),
    };
    let _ = ids.retry_key();
    for source in [source, self::source(Some(22_129_848))] {
        match normalize(body, ids, &source, "raw:fuzz") {
            Ok(normalized) => assert!(!normalized.delivery_id.is_empty()),
            Err(e) => {
                let _ = (e.detail(), e.outcome(), e.is_unauthorized(), e.to_string());
            }
        }
    }
});

fn source(account_id: Option<u64>) -> WebhookSourceConfig {
    WebhookSourceConfig {
        name: "zendesk-acme".into(),
        tenant: "acme".into(),
        signing_secret_env: Some("ZENDESK_ACME_SECRET".into()),
        account_id,
        timestamp_tolerance: WebhookSourceConfig::DEFAULT_TIMESTAMP_TOLERANCE,
        insecure_skip_signature: false,
    }
}
