//! Shadow workflows on every backend: evaluated on every live event as if they were live,
//! never run and never lock; each ledger row records what each would have done, and
//! `/v1/workflows` counts what it would have taken over the last day (from which live
//! workflow, with examples) in agreement with a direct count of the ledger.

use sea_orm::{ConnectionTrait, Database, Statement};
use serde_json::{Value, json};

use super::harness::{Daemon, TestDb, config, unique};

const WORKFLOWS: &str = r#"
[[workflow]]
id = "triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "chat", event_type = "message", priority = 100 } ]

[[workflow]]
id = "vip"
tenant = "acme"
status = "shadow"
triggers = [ { channel = "chat", event_type = "message", priority = 200, when = { field = "priority", equals = "urgent" } } ]

[[workflow]]
id = "tagging"
tenant = "acme"
status = "shadow"
triggers = [ { channel = "chat", event_type = "message", priority = 10 } ]

[[workflow]]
id = "feedback"
tenant = "acme"
status = "shadow"
triggers = [ { channel = "chat", event_type = "feedback", priority = 1 } ]
"#;

fn chat(event_type: &str, priority: &str) -> Value {
    json!({
        "channel": "chat",
        "event_type": event_type,
        "tenant_id": "acme",
        "target_entity_id": unique("conv"),
        "payload": {"priority": priority},
    })
}

async fn count(db: &sea_orm::DatabaseConnection, sql: &str) -> i64 {
    db.query_one_raw(Statement::from_string(
        db.get_database_backend(),
        sql.to_owned(),
    ))
    .await
    .expect("query")
    .expect("a row")
    .try_get::<i64>("", "n")
    .expect("n")
}

#[tokio::test]
async fn a_shadow_sees_live_traffic_never_runs_and_its_counts_match_the_ledger() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = Daemon::start(&db, &config(&db, WORKFLOWS), &[]).await;
        let mut urgent = Vec::new();
        for n in 0..10 {
            let priority = if n % 3 == 0 { "urgent" } else { "normal" };
            let (_, answer) = daemon
                .post_event(&unique("k"), &chat("message", priority))
                .await;
            // The live workflow decides, whatever the shadows would have done.
            assert_eq!(answer["outcome"], "routed", "{backend:?}: {answer}");
            assert_eq!(answer["workflow_id"], "triage", "{answer}");
            if priority == "urgent" {
                urgent.push(answer["intake_id"].as_str().expect("intake id").to_owned());
            }
        }
        for _ in 0..2 {
            let (_, answer) = daemon
                .post_event(&unique("k"), &chat("feedback", "normal"))
                .await;
            assert_eq!(
                answer["outcome"], "no_trigger_match",
                "{backend:?}: {answer}"
            );
        }
        let (_, other) = daemon
            .post_event(&unique("k"), &chat("nobody.listens", "urgent"))
            .await;
        assert_eq!(other["outcome"], "no_trigger_match");

        // Shadows never run and never lock: only triage's runs and leases exist.
        let runs = daemon.runs("limit=100").await;
        assert_eq!(runs.len(), 10, "{backend:?}");
        assert!(
            runs.iter().all(|r| r["workflow_id"] == "triage"),
            "{runs:?}"
        );
        let store = Database::connect(&db.url).await.expect("connect");
        assert_eq!(
            count(&store, "SELECT COUNT(*) AS n FROM entity_locks").await,
            10
        );

        // Each row says what each shadow on its key would have done.
        let row = &daemon
            .intake(&format!("limit=1&before={}", bump(&urgent[0])))
            .await[0];
        assert_eq!(row["id"], urgent[0].as_str(), "{row}");
        assert_eq!(
            row["shadow"],
            json!([
                {"workflow_id": "vip", "verdict": "would_win", "live_workflow_id": "triage"},
                {"workflow_id": "tagging", "verdict": "outranked", "live_workflow_id": "triage"},
            ]),
            "{backend:?}: {row}"
        );
        let unmatched = daemon
            .intake(&format!(
                "limit=1&before={}",
                bump(other["intake_id"].as_str().unwrap_or(""))
            ))
            .await;
        assert!(
            unmatched[0].get("shadow").is_none(),
            "no shadow on its key: {}",
            unmatched[0]
        );

        // /v1/workflows: per shadow, the last day's counts, from which live workflow.
        let listed = daemon.get("/v1/workflows").await;
        let shadow = |id: &str| -> Value {
            listed["workflows"]
                .as_array()
                .expect("workflows")
                .iter()
                .find(|w| w["id"] == id)
                .unwrap_or_else(|| panic!("{id} in {listed}"))["shadow"]
                .clone()
        };
        let vip = shadow("vip");
        assert_eq!(vip["would_win"], 4, "{backend:?}: {vip}");
        assert_eq!(vip["taken_from"], json!({"triage": 4}), "{vip}");
        assert_eq!(vip["condition_failed"], 6, "{vip}");
        let mut examples: Vec<String> = vip["examples"]
            .as_array()
            .expect("examples")
            .iter()
            .map(|e| e.as_str().unwrap_or("").to_owned())
            .collect();
        examples.sort();
        assert_eq!(examples, urgent, "{vip}");
        let tagging = shadow("tagging");
        assert_eq!(
            (tagging["would_win"].clone(), tagging["outranked"].clone()),
            (json!(0), json!(10)),
            "{tagging}"
        );
        let feedback = shadow("feedback");
        assert_eq!(feedback["would_win"], 2, "{feedback}");
        assert_eq!(
            feedback["taken_from"],
            json!({"no_trigger_match": 2}),
            "{feedback}"
        );
        assert!(
            shadow("triage").is_null(),
            "a live workflow has no shadow counts"
        );

        // The console's workflows page says the same, with examples to click through.
        let console = super::console::Console::login(&daemon, super::harness::TOKEN).await;
        let page = console.page("/ui/workflows").await;
        assert!(
            page.contains(
                "would have taken <strong>4</strong> · 4 from <span class=\"mono\">triage</span>"
            ),
            "{page}"
        );
        assert!(
            page.contains(&format!("/ui/deliveries/{}", urgent[0])),
            "{page}"
        );
        let delivery = console.page(&format!("/ui/deliveries/{}", urgent[0])).await;
        assert!(
            delivery
                .contains("vip would have taken it from triage; tagging is outranked by triage"),
            "{delivery}"
        );

        // The same counts, straight from the ledger.
        let direct = count(
            &store,
            "SELECT COUNT(*) AS n FROM intake WHERE shadow LIKE '%\"workflow_id\":\"vip\",\"verdict\":\"would_win\"%'",
        )
        .await;
        assert_eq!(direct, 4, "{backend:?}");
        let with_shadow = count(
            &store,
            "SELECT COUNT(*) AS n FROM intake WHERE shadow IS NOT NULL",
        )
        .await;
        assert_eq!(
            with_shadow, 12,
            "{backend:?}: every event on a shadow's key, none other"
        );

        daemon.stop();
        db.drop_database().await;
    }
}

/// A cursor just past `id`: the listing's `before` is exclusive.
fn bump(id: &str) -> String {
    let mut bytes = id.as_bytes().to_vec();
    if let Some(last) = bytes.last_mut() {
        *last += 1;
    }
    String::from_utf8(bytes).unwrap_or_default()
}
