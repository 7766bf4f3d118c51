//! Integration tests of switchyard-webhook through its public API: config, signature checks on
//! fixture bodies, and snapshots of the normalised events.

// A failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

// The crate root of a test binary looks for modules beside it, not in `webhook/`.
#[path = "webhook/config.rs"]
mod config;
#[path = "webhook/normalize.rs"]
mod normalize;
#[path = "webhook/trigger_body.rs"]
mod trigger_body;
#[path = "webhook/verify.rs"]
mod verify;

use switchyard_core::{Disposition, Event, Normalized};
use switchyard_webhook::WebhookSourceConfig;

/// The raw bytes of `tests/fixtures/<name>`.
fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A valid source for tenant `acme`, with no account pinned.
fn source() -> WebhookSourceConfig {
    WebhookSourceConfig {
        name: "zendesk-acme".to_owned(),
        tenant: "acme".to_owned(),
        signing_secret_env: Some("ZENDESK_ACME_SECRET".to_owned()),
        account_id: None,
        timestamp_tolerance: WebhookSourceConfig::DEFAULT_TIMESTAMP_TOLERANCE,
        insecure_skip_signature: false,
    }
}

/// The routed event, or a panic naming what came back instead.
fn routed(normalized: &Normalized) -> &Event {
    match &normalized.disposition {
        Disposition::Route(event) => event,
        other => panic!("expected a routed event, got {other:?}"),
    }
}

/// Snapshots the whole adapter output under `tests/snapshots/<name>.snap`, keys sorted so the
/// snapshot does not depend on serde_json's map ordering feature.
fn snapshot(name: &str, normalized: &Normalized) {
    let event = routed(normalized);
    event.validate().unwrap();
    let output = serde_json::json!({
        "delivery_id": normalized.delivery_id,
        "disposition": "route",
        "event": event,
    });
    insta::with_settings!({sort_maps => true, prepend_module_to_snapshot => false}, {
        insta::assert_json_snapshot!(name, output);
    });
}
