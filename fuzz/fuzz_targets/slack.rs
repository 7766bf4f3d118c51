//! Fuzzes the Slack adapter's `verify` and `normalize` (crate `switchyard-slack`).
//!
//! Input: `timestamp \0 signature \0 body`, or, without two NULs, the whole input is the body
//! sent at the fuzzer's clock. An empty signature part (and the body-only form) is replaced by
//! the valid signature when the timestamp is a number, so the fuzzer reaches the skew check and
//! the happy path. `normalize` runs on every body, signed or not.
#![no_main]

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use libfuzzer_sys::fuzz_target;
use switchyard_slack::{SlackIntake, SlackSourceConfig, normalize, sign, verify};

const SECRET: &str = "fuzz-signing-secret";
const NOW: i64 = 1_355_517_525; // two seconds after the fixtures' event_time

fuzz_target!(|data: &[u8]| {
    let parts: Vec<&[u8]> = data.splitn(3, |&b| b == 0).collect();
    let (timestamp, signature, body) = match parts[..] {
        [t, s, b] => (
            Some(String::from_utf8_lossy(t).into_owned()).filter(|t| !t.is_empty()),
            String::from_utf8_lossy(s).into_owned(),
            b,
        ),
        _ => (Some(NOW.to_string()), String::new(), data),
    };
    let signature = match (signature.is_empty(), &timestamp) {
        (false, _) => Some(signature),
        (true, Some(t)) => t.parse::<i64>().ok().map(|t| sign(SECRET, t, body)),
        (true, None) => None,
    };

    let now = DateTime::<Utc>::from_timestamp(NOW, 0).unwrap_or_default();
    if let Err(e) = verify(timestamp.as_deref(), signature.as_deref(), body, SECRET, now) {
        let _ = (e.detail(), e.outcome(), e.to_string());
    }
    match normalize(body, &source(), "raw:fuzz") {
        Ok(SlackIntake::Event(event)) => {
            assert!(!event.normalized.delivery_id.is_empty());
            let _ = event.message_key.as_deref();
        }
        Ok(_) => {}
        Err(e) => {
            let _ = (e.detail(), e.outcome(), e.to_string());
        }
    }
});

fn source() -> SlackSourceConfig {
    SlackSourceConfig {
        name: "acme-slack".into(),
        signing_secret_env: "SLACK_SIGNING_SECRET".into(),
        teams: BTreeMap::from([
            ("T0123ABC".into(), "acme".into()),
            ("T0999XYZ".into(), "globex".into()),
        ]),
        urgent_keywords: vec!["urgent".into(), ":rotating_light:".into()],
        urgent_channels: vec!["C0INCIDENTS".into()],
        ignore_bots: true,
    }
}
