//! Lease expiry and takeover, heartbeat extension, fencing token growth, on every database.
//! A run waiting for delivery has its lease kept alive by the dispatcher; once a worker has
//! claimed it, only the worker's heartbeats do.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use super::harness::{Daemon, TestDb, config, event};

const SHORT_LEASES: &str = r#"
[[workflow]]
id = "fast"
tenant = "acme"
status = "live"
run_as = "acme-agent"
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
        // Unclaimed, the run keeps its entity past the TTL: the dispatcher keeps it alive.
        tokio::time::sleep(Duration::from_millis(2300)).await;
        let (_, waiting) = daemon.post_event("m2a", &chat).await;
        assert_eq!(waiting["outcome"], "entity_locked", "{waiting}");
        assert_eq!(daemon.claim(&["fast"], 1).await.len(), 1);

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
        let (status, _) = daemon.heartbeat(&first_run).await;
        assert_eq!(status, StatusCode::CONFLICT);
        let (status, _) = daemon.finish(&first_run, "completed").await;
        assert_eq!(status, StatusCode::CONFLICT);
        // Its dispatch has nothing left to deliver.
        assert_eq!(old["dispatch"]["status"], "cancelled", "{old}");
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
        let claimed = daemon.claim(&["fast"], 1).await;
        assert_eq!(claimed.len(), 1);
        let token = claimed[0]["message"]["data"]["run"]["fencing_token"].clone();
        assert_eq!(token, 1);

        // Heartbeat at ~1.2 s extends the 2 s lease to ~3.2 s; at 2.4 s it is still held.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let (status, stale) = daemon
            .post(
                &format!("/v1/runs/{run_id}/heartbeat"),
                &json!({"fencing_token": 7}),
            )
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{stale}");
        assert_eq!(stale["error"], "lease_lost");
        let (status, beat) = daemon
            .post(
                &format!("/v1/runs/{run_id}/heartbeat"),
                &json!({"fencing_token": token}),
            )
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
