//! kill -9 under concurrent load, on every backend (issue 18): signed webhooks and `/v1/events`,
//! distinct and repeated delivery ids, one hot entity; SIGKILL at a random moment, restart,
//! then check what every acknowledgement promised.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};
use switchyard_webhook::{SIGNATURE_HEADER, TIMESTAMP_HEADER, sign};

use super::harness::{Daemon, TOKEN, TestDb, config};

const SECRET: &str = "chaos-signing-secret";

const SETUP: &str = r#"
[[source]]
kind = "webhook"
name = "zendesk"
tenant = "acme"
signing_secret_env = "CHAOS_SECRET"

[[workflow]]
id = "triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [
  { channel = "webhook", event_type = "ticket.created", priority = 100 },
  { channel = "web_form", event_type = "ticket.created", priority = 100 },
]
"#;

/// `(source, delivery_id)` of an acknowledged delivery, and what it was answered.
type Acked = HashMap<(String, String), String>;

/// One request of the load: the nth delivery of a worker, some of them repeated on purpose.
#[derive(Debug, Clone)]
struct Shot {
    source: &'static str,
    delivery_id: String,
    entity: String,
}

fn shot(trial: u64, worker: usize, n: usize) -> Shot {
    // Every fifth delivery repeats the worker's previous id; every tenth is on the hot entity.
    let id = if n % 5 == 4 { n - 1 } else { n };
    let entity = if n.is_multiple_of(10) {
        "HOT".to_owned()
    } else {
        format!("E{trial}-{worker}-{id}")
    };
    let source = if worker.is_multiple_of(2) {
        "zendesk"
    } else {
        "api"
    };
    Shot {
        source,
        delivery_id: format!("d{trial}-{worker}-{id}"),
        entity,
    }
}

async fn send(client: &reqwest::Client, base: &str, shot: &Shot) -> Option<(StatusCode, Value)> {
    let response = if shot.source == "zendesk" {
        let body = serde_json::to_vec(&json!({
            "type": "zen:event-type:ticket.created",
            "id": shot.delivery_id,
            "account_id": 1,
            "subject": format!("zen:ticket:{}", shot.entity),
            "time": "2025-01-08T10:12:07Z",
            "detail": {"id": shot.entity, "subject": "chaos", "status": "OPEN"},
            "event": {},
        }))
        .ok()?;
        let timestamp = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
        client
            .post(format!("{base}/v1/ingest/webhook/zendesk"))
            .header(SIGNATURE_HEADER, sign(SECRET.as_bytes(), &timestamp, &body))
            .header(TIMESTAMP_HEADER, timestamp)
            .header("content-type", "application/json")
            .body(body)
            .timeout(Duration::from_secs(5))
            .send()
            .await
    } else {
        client
            .post(format!("{base}/v1/events"))
            .bearer_auth(TOKEN)
            .header("Idempotency-Key", &shot.delivery_id)
            .json(&json!({
                "channel": "web_form",
                "event_type": "ticket.created",
                "tenant_id": "acme",
                "target_entity_id": shot.entity,
                "payload": {"subject": "chaos"},
            }))
            .timeout(Duration::from_secs(5))
            .send()
            .await
    };
    let response = response.ok()?;
    let status = response.status();
    let body = response.json::<Value>().await.ok()?;
    Some((status, body))
}

/// Loads `daemon` from 16 workers until it dies; returns every acknowledged delivery.
async fn load_until_killed(
    daemon: Daemon,
    trial: u64,
    kill_after: Duration,
) -> (Acked, std::path::PathBuf) {
    let base = daemon.url("");
    let acked = Arc::new(Mutex::new(Acked::new()));
    let client = reqwest::Client::new();
    let mut workers = Vec::new();
    for worker in 0..16 {
        let (client, base, acked) = (client.clone(), base.clone(), acked.clone());
        workers.push(tokio::spawn(async move {
            for n in 0..10_000 {
                let shot = shot(trial, worker, n);
                let Some((status, answer)) = send(&client, &base, &shot).await else {
                    return; // The daemon is gone.
                };
                if status.is_success() {
                    let outcome = answer["outcome"].as_str().unwrap_or_default().to_owned();
                    acked
                        .lock()
                        .expect("acked")
                        .entry((shot.source.to_owned(), shot.delivery_id))
                        .or_insert(outcome);
                }
            }
        }));
    }
    tokio::time::sleep(kill_after).await;
    let config_path = daemon.config_path.clone();
    drop(daemon); // SIGKILL: no graceful anything.
    for worker in workers {
        let _ = worker.await;
    }
    let acked = acked.lock().expect("acked").clone();
    (acked, config_path)
}

/// Every ledger row, by `(source, delivery_id)`.
async fn ledger(daemon: &Daemon) -> HashMap<(String, String), Value> {
    let mut rows = HashMap::new();
    let mut before: Option<String> = None;
    loop {
        let query = match &before {
            Some(id) => format!("/v1/intake?limit=1000&before={id}"),
            None => "/v1/intake?limit=1000".to_owned(),
        };
        let page = daemon.get(&query).await;
        for row in page["intake"].as_array().cloned().unwrap_or_default() {
            let key = (
                row["source"].as_str().unwrap_or_default().to_owned(),
                row["delivery_id"].as_str().unwrap_or_default().to_owned(),
            );
            rows.insert(key, row);
        }
        match page["next_before"].as_str() {
            Some(next) => before = Some(next.to_owned()),
            None => return rows,
        }
    }
}

/// Every run, newest first.
async fn all_runs(daemon: &Daemon) -> Vec<Value> {
    let mut runs = Vec::new();
    let mut before: Option<String> = None;
    loop {
        let query = match &before {
            Some(id) => format!("/v1/runs?limit=1000&before={id}"),
            None => "/v1/runs?limit=1000".to_owned(),
        };
        let page = daemon.get(&query).await;
        runs.extend(page["runs"].as_array().cloned().unwrap_or_default());
        match page["next_before"].as_str() {
            Some(next) => before = Some(next.to_owned()),
            None => return runs,
        }
    }
}

#[tokio::test]
async fn kill_9_under_load_loses_no_acknowledged_delivery_and_doubles_no_run() {
    for db in TestDb::all().await {
        for trial in 0..2u64 {
            let text = config(&db, SETUP);
            let env = [("CHAOS_SECRET", SECRET)];
            let daemon = Daemon::start(&db, &text, &env).await;
            // A different moment each trial and backend.
            let nanos = u64::from(Utc::now().timestamp_subsec_nanos());
            let kill_after = Duration::from_millis(300 + (nanos + trial * 977) % 1200);
            let (acked, config_path) = load_until_killed(daemon, trial, kill_after).await;
            assert!(
                !acked.is_empty(),
                "{:?}: the load got answers before the kill",
                db.backend
            );

            let daemon = Daemon::start_with_file(&config_path, &env).await;
            let rows = ledger(&daemon).await;
            // Every acknowledged delivery is in the ledger with the answer it was given.
            for ((source, delivery_id), outcome) in &acked {
                let row = rows.get(&(source.clone(), delivery_id.clone())).unwrap_or_else(|| {
                    panic!("{:?} trial {trial}: acknowledged {source}/{delivery_id} ({outcome}) is not in the ledger", db.backend)
                });
                if outcome != "duplicate" {
                    assert_eq!(&row["outcome"], outcome.as_str(), "{:?}: {row}", db.backend);
                }
            }
            // Every run has its ledger row; no entity has two active runs.
            let ledger_ids: HashSet<String> = rows
                .values()
                .filter_map(|row| row["id"].as_str().map(str::to_owned))
                .collect();
            let runs = all_runs(&daemon).await;
            let mut active: HashMap<String, usize> = HashMap::new();
            for run in &runs {
                let intake_id = run["intake_id"].as_str().unwrap_or_default();
                assert!(
                    ledger_ids.contains(intake_id),
                    "{:?}: run {} has no ledger row",
                    db.backend,
                    run["id"]
                );
                if matches!(run["status"].as_str(), Some("queued" | "dispatched")) {
                    let entity = run["target_entity_id"].as_str().unwrap_or_default();
                    *active.entry(entity.to_owned()).or_default() += 1;
                }
            }
            if let Some((entity, count)) = active.iter().find(|(_, count)| **count > 1) {
                panic!("{:?}: entity {entity} has {count} active runs", db.backend);
            }
            // Re-sending every acknowledged delivery is a duplicate, never new work.
            let client = reqwest::Client::new();
            let base = daemon.url("");
            let runs_before = runs.len();
            for (source, delivery_id) in acked.keys().take(200) {
                let worker: usize = delivery_id
                    .split('-')
                    .nth(1)
                    .and_then(|w| w.parse().ok())
                    .unwrap_or(0);
                let n: usize = delivery_id
                    .split('-')
                    .nth(2)
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                let again = shot(trial, worker, n);
                assert_eq!(again.source, source.as_str());
                let (status, answer) = send(&client, &base, &again).await.expect("answer");
                assert_eq!(status, StatusCode::OK, "{answer}");
                assert_eq!(answer["outcome"], "duplicate", "{:?}: {answer}", db.backend);
            }
            assert_eq!(all_runs(&daemon).await.len(), runs_before);
            eprintln!(
                "chaos {:?} trial {trial}: killed after {kill_after:?}, {} acknowledged, {} runs",
                db.backend,
                acked.len(),
                runs_before
            );
            daemon.stop();
        }
        db.drop_database().await;
    }
}
