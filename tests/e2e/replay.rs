//! Replays end to end on every backend: a diagnostic replay of a mixed day (routed,
//! duplicate, entity_locked after and before a run finished, invalid, ineligible,
//! no_trigger_match) under the original revision reproduces every outcome and writes nothing
//! live (row counts unchanged, the worker receives nothing); a candidate with a
//! higher-priority workflow moves exactly the deliveries it should (API, CLI and
//! `check --candidate --against-ledger`); a live replay run twice makes one new run per
//! delivery, linked back to the original and the replay.

mod diagnostic;
mod flow_control;
mod limits;
mod live;
mod progress;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::routing::post;
use chrono::{SecondsFormat, Utc};
use futures::StreamExt as _;
use reqwest::StatusCode;
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement};
use serde_json::{Value, json};

use super::harness::{Daemon, TOKEN, TestDb, binary, config, event, run_id, serve_local, unique};

const ZENDESK_SECRET: &str = "zendesk-acme-signing-secret";
const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const ENV: [(&str, &str); 2] = [
    ("ZENDESK_ACME_SECRET", ZENDESK_SECRET),
    ("SLACK_SIGNING_SECRET", SLACK_SECRET),
];

const TICKET_CREATED: &str =
    include_str!("../../adapters/webhook/tests/fixtures/ticket_created.json");
const COMMENT_ADDED: &str =
    include_str!("../../adapters/webhook/tests/fixtures/comment_added.json");
const BOT_MESSAGE: &str =
    include_str!("../../adapters/slack/tests/fixtures/bot_message_bot_id.json");

/// A Zendesk source, a Slack source, and workflows delivered to the test's worker.
fn setup(worker: &str) -> String {
    format!(
        r#"
[[source]]
kind = "webhook"
name = "zendesk-acme"
tenant = "acme"
signing_secret_env = "ZENDESK_ACME_SECRET"
account_id = 22129848

[[source]]
kind = "slack"
name = "acme-slack"
signing_secret_env = "SLACK_SIGNING_SECRET"
teams = {{ T0123ABC = "acme" }}

[[target]]
name = "worker"
kind = "http"
url = "{worker}"
insecure_skip_signature = true

[[workflow]]
id = "triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
target = "worker"
triggers = [ {{ channel = "webhook", event_type = "ticket.created", priority = 100 }} ]

[[workflow]]
id = "comment-reply"
tenant = "acme"
status = "live"
run_as = "acme-agent"
target = "worker"
triggers = [ {{ channel = "webhook", event_type = "ticket.comment_added", priority = 50 }} ]

[[workflow]]
id = "slack-triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
target = "worker"
triggers = [ {{ channel = "slack", event_type = "message", priority = 10 }} ]
"#
    )
}

/// A Zendesk subscription body about `ticket` with event id `id`.
fn zendesk(fixture: &str, id: &str, ticket: &str) -> Vec<u8> {
    let mut body: Value = serde_json::from_str(fixture).expect("fixture");
    body["id"] = json!(id);
    body["detail"]["id"] = json!(ticket);
    body["subject"] = json!(format!("zen:ticket:{ticket}"));
    serde_json::to_vec(&body).expect("json")
}

async fn send_zendesk(daemon: &Daemon, body: Vec<u8>) -> Value {
    let timestamp = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
    let signature = switchyard_webhook::sign(ZENDESK_SECRET.as_bytes(), &timestamp, &body);
    let response = daemon
        .client()
        .post(daemon.url("/v1/ingest/webhook/zendesk-acme"))
        .header("content-type", "application/json")
        .header(switchyard_webhook::SIGNATURE_HEADER, signature)
        .header(switchyard_webhook::TIMESTAMP_HEADER, timestamp)
        .body(body)
        .send()
        .await
        .expect("POST webhook");
    super::harness::read(response).await.1
}

async fn send_slack(daemon: &Daemon, body: Vec<u8>) -> Value {
    let timestamp = Utc::now().timestamp();
    let signature = switchyard_slack::sign(SLACK_SECRET, timestamp, &body);
    let response = daemon
        .client()
        .post(daemon.url("/v1/ingest/slack/acme-slack"))
        .header("content-type", "application/json")
        .header("X-Slack-Request-Timestamp", timestamp.to_string())
        .header("X-Slack-Signature", signature)
        .body(body)
        .send()
        .await
        .expect("POST slack");
    super::harness::read(response).await.1
}

/// A worker that answers 200 and counts what it receives.
async fn worker() -> (String, Arc<AtomicUsize>) {
    let received = Arc::new(AtomicUsize::new(0));
    let counter = received.clone();
    let app = axum::Router::new().route(
        "/runs",
        post(move || {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                "ok"
            }
        }),
    );
    let (addr, _server) = serve_local(app).await;
    (format!("http://{addr}/runs"), received)
}

/// Row counts of everything live: what a diagnostic replay must not change.
async fn live_rows(db: &DatabaseConnection) -> Vec<(&'static str, i64)> {
    let mut counts = Vec::new();
    for table in [
        "intake",
        // The raw bytes the ledger rows keep.
        "intake WHERE raw_body IS NOT NULL",
        "runs",
        "entity_locks",
        "dispatches",
        "dispatch_attempts",
        "run_history",
    ] {
        let row = db
            .query_one_raw(Statement::from_string(
                db.get_database_backend(),
                format!("SELECT COUNT(*) AS n FROM {table}"),
            ))
            .await
            .expect("count")
            .expect("a row");
        counts.push((table, row.try_get::<i64>("", "n").expect("n")));
    }
    counts
}

/// Waits until `condition` holds, for at most a minute.
async fn until<F: std::future::Future<Output = bool>>(
    what: &str,
    mut condition: impl FnMut() -> F,
) {
    for _ in 0..1200 {
        if condition().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Starts a replay and waits for it to end; returns the final view (with report and results).
pub async fn replay(daemon: &Daemon, request: &Value) -> Value {
    let (status, started) = daemon.post("/v1/replays", request).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    wait_replay(daemon, started["id"].as_str().expect("id")).await
}

async fn wait_replay(daemon: &Daemon, id: &str) -> Value {
    let mut last = Value::Null;
    for _ in 0..1200 {
        last = daemon.get(&format!("/v1/replays/{id}?limit=1000")).await;
        if last["status"] != "running" {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("replay {id} did not end: {last}");
}

/// `(original intake id) -> (original outcome/workflow, replayed outcome/workflow, differs)`.
fn outcomes(report: &Value) -> Vec<(String, String, String, bool)> {
    report["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| {
            let label = |v: &Value| match v["workflow_id"].as_str() {
                Some(w) => format!("{}:{w}", v["outcome"].as_str().unwrap_or("")),
                None => v["outcome"].as_str().unwrap_or("").to_owned(),
            };
            (
                r["intake_id"].as_str().unwrap_or("").to_owned(),
                label(&r["original"]),
                label(&r["replayed"]),
                r["differs"].as_bool().unwrap_or(true),
            )
        })
        .collect()
}
