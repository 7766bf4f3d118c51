//! Trigger conditions (`when`) end to end on every database: a condition on the payload
//! chooses between two workflows, `no_trigger_match` names each candidate and what failed, and
//! `switchyard route` shows every candidate's verdict.

use std::process::Command;

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::harness::{Backend, Daemon, TestDb, binary, config};

const SETUP: &str = r#"
[[workflow]]
id = "escalate"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [
  { channel = "webhook", event_type = "ticket.updated", priority = 100, when = { any = [
    { field = "priority", equals = "urgent" },
    { field = "tags", equals = "vip" },
  ] } },
]

[[workflow]]
id = "billing"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [
  { channel = "webhook", event_type = "ticket.updated", priority = 50, when = { all = [
    { field = "group", in = ["billing", "finance"] },
    { not = { field = "status", equals = "closed" } },
  ] } },
]
"#;

fn ticket(payload: Value) -> Value {
    json!({
        "channel": "webhook",
        "event_type": "ticket.updated",
        "tenant_id": "acme",
        "target_entity_id": format!("T-{}", uuid::Uuid::now_v7().simple()),
        "payload": payload,
    })
}

#[tokio::test]
async fn a_condition_chooses_between_two_workflows_and_a_miss_names_the_failed_conditions() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = Daemon::start(&db, &config(&db, SETUP), &[]).await;
        let cases: &[(&str, Value, Option<&str>)] = &[
            (
                "urgent",
                json!({"priority": "urgent", "group": "billing"}),
                Some("escalate"),
            ),
            (
                "vip",
                json!({"priority": "low", "tags": ["vip"]}),
                Some("escalate"),
            ),
            (
                "billing",
                json!({"priority": "low", "group": "finance", "status": "open"}),
                Some("billing"),
            ),
            (
                "closed",
                json!({"priority": "low", "group": "billing", "status": "closed"}),
                None,
            ),
            ("plain", json!({"priority": "low", "tags": []}), None),
        ];
        for (key, payload, expected) in cases {
            let (status, answer) = daemon.post_event(key, &ticket(payload.clone())).await;
            assert_eq!(status, StatusCode::OK, "{backend:?} {key}: {answer}");
            match expected {
                Some(workflow) => {
                    assert_eq!(answer["outcome"], "routed", "{backend:?} {key}: {answer}");
                    assert_eq!(answer["workflow_id"], *workflow, "{backend:?} {key}");
                }
                None => {
                    assert_eq!(
                        answer["outcome"], "no_trigger_match",
                        "{backend:?} {key}: {answer}"
                    );
                    assert!(answer.get("run_id").is_none());
                }
            }
        }
        let misses = daemon.intake("outcome=no_trigger_match").await;
        assert_eq!(misses.len(), 2, "{backend:?}");
        let plain = misses
            .iter()
            .find(|row| row["delivery_id"] == "plain")
            .expect("recorded");
        assert_eq!(
            plain["detail"],
            "no trigger condition holds: `escalate` (priority 100) needs \
             any(priority = \"urgent\", tags = \"vip\") does not hold; `billing` (priority 50) \
             needs group in [\"billing\",\"finance\"] (absent)",
            "{backend:?}"
        );
        let closed = misses
            .iter()
            .find(|row| row["delivery_id"] == "closed")
            .expect("recorded");
        assert!(
            closed["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("`billing` (priority 50) needs not(status = \"closed\") does not hold"),
            "{backend:?}: {closed}"
        );
        assert_eq!(daemon.runs("").await.len(), 3, "{backend:?}");
        daemon.stop();
        db.drop_database().await;
    }
}

#[tokio::test]
async fn route_shows_each_candidates_verdict() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let config_path = db.dir.path().join("route.toml");
    std::fs::write(&config_path, config(&db, SETUP)).expect("write");
    let event_path = db.dir.path().join("event.json");
    let route = |payload: Value| {
        std::fs::write(&event_path, ticket(payload).to_string()).expect("write");
        let output = Command::new(binary())
            .args(["route", "--config"])
            .arg(&config_path)
            .arg("--event")
            .arg(&event_path)
            .env_remove("SWITCHYARD_API_TOKEN")
            .output()
            .expect("run switchyard route");
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let out = route(json!({"group": "billing", "status": "open"}));
    assert!(
        out.contains(
            "1. `escalate` at priority 100, condition fails: any(priority = \"urgent\", tags = \"vip\") does not hold"
        ),
        "{out}"
    );
    assert!(
        out.contains("2. `billing` at priority 50, when all(group in [\"billing\",\"finance\"], not(status = \"closed\")): holds  <- wins"),
        "{out}"
    );
    // No database yet: the lock cannot be read, but the choice is named.
    let outcome = out
        .lines()
        .find(|line| line.starts_with("outcome:"))
        .unwrap_or_default();
    assert!(outcome.contains("`billing`"), "{out}");
    let out = route(json!({}));
    assert!(
        out.contains("outcome: no_trigger_match (no candidate's condition holds for this payload)"),
        "{out}"
    );
    assert!(!out.contains("<- wins"), "{out}");
}
