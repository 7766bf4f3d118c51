//! Tests of switchyard-slack: signature verification against Slack's documented vector, config
//! parsing, and normalisation of fixtures built from Slack's documented payloads (snapshotted).

// A failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

#[path = "slack/config.rs"]
mod config;
#[path = "slack/normalize.rs"]
mod normalize;
#[path = "slack/pitfalls.rs"]
mod pitfalls;
#[path = "slack/refusals.rs"]
mod refusals;
#[path = "slack/signature.rs"]
mod signature;

use serde_json::{Value, json};
use switchyard_core::Disposition;
use switchyard_slack::{SlackIntake, SlackSourceConfig};

/// The source every normalisation test uses, written the way an admin would.
pub const SOURCE_TOML: &str = r#"
[[source]]
kind = "slack"
name = "acme-slack"
signing_secret_env = "SLACK_SIGNING_SECRET"
teams = { T0123ABC = "acme", T0999XYZ = "globex" }
urgent_keywords = ["urgent", ":rotating_light:"]
urgent_channels = ["C0INCIDENTS"]
"#;

/// The daemon's view of the config: sources tagged by `kind`.
#[derive(Debug, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    Slack(SlackSourceConfig),
}

#[derive(Debug, serde::Deserialize)]
pub struct File {
    pub source: Vec<Source>,
}

pub fn source() -> SlackSourceConfig {
    let file: File = toml::from_str(SOURCE_TOML).unwrap();
    let Source::Slack(config) = file.source.into_iter().next().unwrap();
    config.validate().unwrap();
    config
}

pub fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub const RAW_REF: &str = "raw:0192f3a0-test";

/// Everything the daemon gets back, as JSON a reviewer can read.
pub fn render(intake: &SlackIntake) -> Value {
    match intake {
        SlackIntake::UrlVerification { challenge } => {
            json!({"url_verification": {"challenge": challenge}})
        }
        SlackIntake::AppRateLimited(notice) => json!({"app_rate_limited": {
            "delivery_id": notice.delivery_id,
            "team_id": notice.team_id,
            "tenant_id": notice.tenant_id,
            "api_app_id": notice.api_app_id,
            "minute_rate_limited": notice.minute_rate_limited.to_rfc3339(),
        }}),
        SlackIntake::Event(event) => {
            let disposition = match &event.normalized.disposition {
                Disposition::Route(e) => json!({"route": e}),
                Disposition::Ineligible { detail, event } => {
                    json!({"ineligible": {"detail": detail, "event": event}})
                }
            };
            json!({"event_callback": {
                "team_id": event.team_id,
                "delivery_id": event.normalized.delivery_id,
                "message_key": event.message_key,
                "disposition": disposition,
            }})
        }
    }
}

/// Snapshots land in `tests/snapshots/slack__<name>.snap`.
pub fn snapshot(name: &str, intake: &SlackIntake) {
    insta::assert_json_snapshot!(name, render(intake));
}
