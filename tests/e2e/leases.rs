//! Lease expiry and takeover, heartbeat extension, fencing token growth, on every database.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use super::harness::{Daemon, TestDb, config, event};

const SHORT_LEASES: &str = r#"
[[workflow]]
id = "fast"
tenant = "acme"
status = "live"
lock_ttl = "2s"
triggers = [ { channel = "chat", event_type = "message", priority = 1 } ]
"#;

#[tokio::test]
async fn an_expired_lease_is_taken_over_and_its_run_marked_expired() {
    for db in TestDb::all().await {
        let daemon = Daemon::start(&db, &config(&db, SHORT_LEASES), &[]).await;
        let chat = event("chat", "message", "acme", "conv-1");
        let (_, first) = daemon.post_event("m1", &chat).await;
        assert_eq!(first["outcome"], "routed", "{:?}: {first}", db.backend);
        let first_run = first["run_id"].as_str().expect("run").to_owned();

        let (_, locked) = daemon.post_event("m2", &chat).await;
        assert_eq!(locked["outcome"], "entity_locked");

        tokio::time::sleep(Duration::from_millis(2300)).await;
        let (_, taken) = daemon.post_event("m3", &chat).await;
        assert_eq!(taken["outcome"], "routed", "{taken}");
        assert!(
            taken["detail"]
                .as_str()
                .unwrap_or_default()
                .contains(&first_run),
            "the takeover is recorded: {taken}"
        );
        let old = daemon.get(&format!("/v1/runs/{first_run}")).await;
        assert_eq!(old["status"], "expired");
        let new = daemon
            .get(&format!(
                "/v1/runs/{}",
                taken["run_id"].as_str().unwrap_or_default()
            ))
            .await;
        assert_eq!(new["fencing_token"], 2);
        assert_eq!(old["fencing_token"], 1);

        // The expired run can neither heartbeat nor finish: its lease is gone.
        let (status, _) = daemon
            .post(&format!("/v1/runs/{first_run}/heartbeat"), &json!({}))
            .await;
        assert_eq!(status, StatusCode::CONFLICT);
        let (status, _) = daemon.finish(&first_run, "completed").await;
        assert_eq!(status, StatusCode::CONFLICT);
        daemon.stop();
        db.drop_database().await;
    }
}

#[tokio::test]
async fn a_heartbeat_extends_the_lease() {
    for db in TestDb::all().await {
        let daemon = Daemon::start(&db, &config(&db, SHORT_LEASES), &[]).await;
        let chat = event("chat", "message", "acme", "conv-2");
        let (_, first) = daemon.post_event("h1", &chat).await;
        let run_id = first["run_id"].as_str().expect("run").to_owned();

        // Heartbeat at ~1.2 s extends the 2 s lease to ~3.2 s; at 2.4 s it is still held.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let (status, beat) = daemon
            .post(&format!("/v1/runs/{run_id}/heartbeat"), &json!({}))
            .await;
        assert_eq!(status, StatusCode::OK, "{beat}");
        assert_eq!(beat["fencing_token"], 1);
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let (_, second) = daemon.post_event("h2", &chat).await;
        assert_eq!(
            second["outcome"], "entity_locked",
            "{:?}: {second}",
            db.backend
        );
        assert_eq!(second["held_by_run_id"], run_id.as_str());

        // Without further heartbeats it runs out and the next event takes over with token 2.
        tokio::time::sleep(Duration::from_millis(2200)).await;
        let (_, third) = daemon.post_event("h3", &chat).await;
        assert_eq!(third["outcome"], "routed");
        let run = daemon
            .get(&format!(
                "/v1/runs/{}",
                third["run_id"].as_str().unwrap_or_default()
            ))
            .await;
        assert_eq!(run["fencing_token"], 2);
        daemon.stop();
        db.drop_database().await;
    }
}

#[tokio::test]
async fn fencing_tokens_only_grow_across_release_and_reacquire() {
    for db in TestDb::all().await {
        let daemon = Daemon::start(&db, &config(&db, SHORT_LEASES), &[]).await;
        let chat = event("chat", "message", "acme", "conv-3");
        let mut tokens = Vec::new();
        for n in 0..4 {
            let (_, routed) = daemon.post_event(&format!("f{n}"), &chat).await;
            let run_id = routed["run_id"].as_str().expect("routed").to_owned();
            tokens.push(
                daemon.get(&format!("/v1/runs/{run_id}")).await["fencing_token"]
                    .as_i64()
                    .unwrap_or(0),
            );
            let status = if n % 2 == 0 { "completed" } else { "cancelled" };
            assert_eq!(daemon.finish(&run_id, status).await.0, StatusCode::OK);
        }
        assert_eq!(tokens, [1, 2, 3, 4], "{:?}", db.backend);
        daemon.stop();
        db.drop_database().await;
    }
}
