//! A large replay reports its progress and stops when cancelled.

use super::*;

#[tokio::test]
async fn a_large_replay_reports_progress_and_stops_when_cancelled() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let text = config(
            &db,
            r#"
[[workflow]]
id = "triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "chat", event_type = "message", priority = 1 } ]
"#,
        );
        let daemon = Daemon::start(&db, &text, &[]).await;
        let daemon_ref = &daemon;
        let seeded: Vec<Value> = futures::stream::iter(0..1500)
            .map(|n| async move {
                // A 503 under a loaded machine is "not acknowledged": the sender retries.
                loop {
                    let (status, answer) = daemon_ref
                        .post_event(
                            &format!("k-{n}"),
                            &event("chat", "message", "acme", &format!("conv-{n}")),
                        )
                        .await;
                    if status != StatusCode::SERVICE_UNAVAILABLE {
                        break answer;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
            .buffer_unordered(32)
            .collect()
            .await;
        assert!(
            seeded
                .iter()
                .all(|a| a["outcome"] == "routed" || a["first_outcome"] == "routed"),
            "{backend:?}"
        );

        let (status, started) = daemon.post("/v1/replays", &json!({})).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{started}");
        assert_eq!(started["progress"]["total"], 1500, "{started}");
        let id = started["id"].as_str().expect("id").to_owned();
        let (status, cancelled) = daemon
            .post(&format!("/v1/replays/{id}/cancel"), &json!({}))
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{backend:?}: {cancelled}");
        let ended = wait_replay(&daemon, &id).await;
        assert_eq!(
            ended["status"], "cancelled",
            "{backend:?}: {}",
            ended["progress"]
        );
        let done = ended["progress"]["done"].as_u64().expect("done");
        assert!(done < 1500, "{backend:?}: stopped between batches: {done}");
        assert_eq!(
            ended["results"].as_array().map(Vec::len),
            Some(done as usize),
            "{backend:?}: progress counts what is recorded"
        );
        let (status, again) = daemon
            .post(&format!("/v1/replays/{id}/cancel"), &json!({}))
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{again}");

        // A rerun goes to the end.
        let (status, _) = daemon
            .post(&format!("/v1/replays/{id}/rerun"), &json!({}))
            .await;
        assert_eq!(status, StatusCode::ACCEPTED);
        let finished = wait_replay(&daemon, &id).await;
        assert_eq!(finished["status"], "completed", "{}", finished["progress"]);
        assert_eq!(finished["progress"]["done"], 1500);
        assert_eq!(finished["progress"]["differ"], 0, "{backend:?}");

        // A live replay from the CLI off a terminal needs --yes, and re-admits nothing without.
        let store = Database::connect(&db.url).await.expect("connect");
        let before = live_rows(&store).await;
        let out = Command::new(binary())
            .args(["replay", "--config"])
            .arg(&daemon.config_path)
            .args(["--live", "--revision", "current", "--delivery", "k-1"])
            .env("SWITCHYARD_API_TOKEN", TOKEN)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run replay");
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("pass --yes"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(live_rows(&store).await, before, "{backend:?}");

        daemon.stop();
        db.drop_database().await;
    }
}
