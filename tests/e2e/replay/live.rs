//! A live replay run twice makes one new run per delivery, linked back to the original.

use super::*;

#[tokio::test]
async fn a_live_replay_twice_makes_one_new_run_per_delivery_linked_back() {
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
        let mut originals = Vec::new();
        for n in 0..3 {
            let (_, answer) = daemon
                .post_event(
                    &format!("k-{n}"),
                    &event("chat", "message", "acme", &unique("conv")),
                )
                .await;
            assert_eq!(answer["outcome"], "routed", "{answer}");
            let (status, _) = daemon.finish(&run_id(&answer), "completed").await;
            assert_eq!(status, StatusCode::OK);
            originals.push(answer);
        }
        let runs_before = daemon.runs("limit=100").await.len();
        assert_eq!(runs_before, 3);

        let live = replay(&daemon, &json!({"mode": "live", "revision": "current"})).await;
        assert_eq!(live["status"], "completed", "{backend:?}: {live}");
        let replay_id = live["id"].as_str().expect("id").to_owned();
        let results = live["results"].as_array().expect("results").clone();
        assert_eq!(results.len(), 3, "{live}");
        for result in &results {
            assert_eq!(
                result["replayed"]["outcome"], "routed",
                "{backend:?}: {result}"
            );
            assert!(result["new_run_id"].is_string(), "{result}");
            // The new ledger row links back to the original delivery and the replay.
            let original = result["intake_id"].as_str().expect("intake id");
            let delivery = format!(
                "replay:{replay_id}:{}",
                result["delivery_id"].as_str().expect("delivery id")
            );
            let rows = daemon.intake(&format!("delivery_id={delivery}")).await;
            assert_eq!(rows.len(), 1, "{backend:?}: {delivery}");
            assert_eq!(rows[0]["replay_id"], replay_id.as_str(), "{}", rows[0]);
            assert_eq!(rows[0]["replay_of"], original, "{}", rows[0]);
            assert_eq!(rows[0]["run_id"], result["new_run_id"], "{}", rows[0]);
            assert_eq!(rows[0]["id"], result["new_intake_id"], "{}", rows[0]);
            let console =
                super::super::console::Console::login(&daemon, super::super::harness::TOKEN).await;
            let page = console
                .page(&format!(
                    "/ui/deliveries/{}",
                    rows[0]["id"].as_str().unwrap_or("")
                ))
                .await;
            assert!(
                page.contains(&format!("live replay {replay_id} of delivery {original}")),
                "{page}"
            );
        }
        assert_eq!(daemon.runs("limit=100").await.len(), 6, "{backend:?}");

        // The same replay again: every delivery is a duplicate of its first re-admission.
        let (status, rerun) = daemon
            .post(&format!("/v1/replays/{replay_id}/rerun"), &json!({}))
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{rerun}");
        let again = wait_replay(&daemon, &replay_id).await;
        assert_eq!(again["status"], "completed", "{again}");
        let outcomes: Vec<&str> = again["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|r| r["replayed"]["outcome"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(outcomes, ["duplicate"; 3], "{backend:?}: {again}");
        assert_eq!(
            daemon.runs("limit=100").await.len(),
            6,
            "{backend:?}: no second run"
        );
        // The original deliveries are untouched by either: not duplicates of a replay.
        assert_eq!(
            daemon.intake("outcome=routed&limit=100").await.len(),
            6,
            "{backend:?}"
        );

        daemon.stop();
        db.drop_database().await;
    }
}
