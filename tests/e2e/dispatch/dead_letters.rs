//! Dead letters and redispatch.

use super::*;

#[tokio::test]
async fn a_400_dead_letters_at_once_and_redispatch_delivers_under_the_same_id() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let (secret, key) = new_secret();
        let worker =
            Worker::start(key, &[(400, "unknown workflow `triage`")], Duration::ZERO).await;
        let setup = http_setup(
            &worker.url,
            "timeout = \"5s\"\nretry = [\"200ms\", \"500ms\"]",
        );
        let daemon =
            Daemon::start(&db, &config(&db, &setup), &[(SECRET_ENV, secret.as_str())]).await;
        let entity = unique("conv");
        let chat = event("chat", "message", "acme", &entity);

        let (_, answer) = daemon.post_event(&unique("m"), &chat).await;
        assert_eq!(answer["outcome"], "routed", "{backend:?}: {answer}");
        let first = run_id(&answer);
        let dead = wait_run(&daemon, &first, "dead_lettered", Duration::from_secs(30)).await;
        assert_eq!(dead["dispatch"]["status"], "dead_lettered", "{dead:#}");
        assert_eq!(dead["dispatch"]["reason"], "rejected_4xx", "{dead:#}");
        let attempts = dead["attempts"].as_array().expect("attempts");
        assert_eq!(attempts.len(), 1, "no retry after a 400: {dead:#}");
        assert_eq!(attempts[0]["status_code"], 400, "{dead:#}");
        assert_eq!(attempts[0]["result"], "rejected_4xx", "{dead:#}");
        assert!(
            attempts[0]["response"]
                .as_str()
                .unwrap_or_default()
                .contains("unknown workflow `triage`"),
            "the response excerpt is kept: {dead:#}"
        );
        assert_history_in_order(&dead, &["routed", "dead_lettered"]);
        let listed = daemon.runs("status=dead_lettered").await;
        assert!(
            listed.iter().any(|r| r["id"] == first.as_str()),
            "{backend:?}: not listed as dead-lettered: {listed:#?}"
        );
        let seen = worker.seen();
        assert_eq!(seen.len(), 1, "{seen:#?}");
        let first_id = seen[0].id.clone();
        assert_eq!(dead["dispatch"]["id"], first_id.as_str());
        let first_token = seen[0].json()["data"]["run"]["fencing_token"]
            .as_i64()
            .expect("token");

        // The dead letter released the entity: the next event on it routes.
        let (_, answer) = daemon.post_event(&unique("m"), &chat).await;
        assert_eq!(
            answer["outcome"], "routed",
            "{backend:?}: entity not released: {answer}"
        );
        let second = run_id(&answer);
        wait_run(&daemon, &second, "dispatched", Duration::from_secs(30)).await;
        let second_request = worker
            .seen()
            .into_iter()
            .find(|s| s.run_id() == second)
            .expect("the second run reached the worker");
        let second_token = second_request.json()["data"]["run"]["fencing_token"]
            .as_i64()
            .expect("token");

        // While the second run holds the entity, the dead letter cannot take it back.
        let redispatch = format!("/v1/runs/{first}/redispatch");
        let (status, refusal) = daemon.post(&redispatch, &json!({})).await;
        assert_eq!(status, StatusCode::CONFLICT, "{backend:?}: {refusal}");
        assert_eq!(refusal["outcome"], "entity_locked", "{refusal}");
        assert_eq!(refusal["held_by_run_id"], second.as_str(), "{refusal}");

        let (status, finished) = daemon
            .post(
                &format!("/v1/runs/{second}/finish"),
                &json!({"status": "completed", "fencing_token": second_token}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{finished}");

        let (status, queued) = daemon.post(&redispatch, &json!({})).await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {queued}");
        assert_eq!(queued["dispatch_id"], first_id.as_str(), "{queued}");
        let new_token = queued["fencing_token"].as_i64().expect("token");
        assert!(
            new_token > first_token && new_token > second_token,
            "the redispatched run needs a larger token than {first_token} and {second_token}: {queued}"
        );
        let delivered = wait_run(&daemon, &first, "dispatched", Duration::from_secs(30)).await;
        let again: Vec<Seen> = worker
            .seen()
            .into_iter()
            .filter(|s| s.run_id() == first)
            .collect();
        assert_eq!(again.len(), 2, "{backend:?}: {again:#?}");
        let redelivered = &again[1];
        assert_eq!(redelivered.verified, Ok(()));
        assert_eq!(redelivered.id, first_id, "same webhook-id after redispatch");
        let body = redelivered.json();
        assert_eq!(body["id"], first_id.as_str(), "{body:#}");
        assert_eq!(body["data"]["run"]["fencing_token"], new_token, "{body:#}");
        assert_eq!(body["data"]["run"]["attempt"], 1, "a new series: {body:#}");
        assert_history_in_order(
            &delivered,
            &["routed", "dead_lettered", "redispatched", "delivered"],
        );
        let attempts: Vec<(i64, i64)> = delivered["attempts"]
            .as_array()
            .expect("attempts")
            .iter()
            .map(|a| {
                (
                    a["series"].as_i64().unwrap_or(-1),
                    a["status_code"].as_i64().unwrap_or(-1),
                )
            })
            .collect();
        assert_eq!(attempts, [(1, 400), (2, 200)], "{delivered:#}");
        assert_eq!(delivered["dispatch"]["series"], 2, "{delivered:#}");

        // Only a dead letter can be redispatched; the old token is fenced out.
        let (status, refusal) = daemon.post(&redispatch, &json!({})).await;
        assert_eq!(status, StatusCode::CONFLICT, "{refusal}");
        let finish = format!("/v1/runs/{first}/finish");
        let (status, refusal) = daemon
            .post(
                &finish,
                &json!({"status": "completed", "fencing_token": first_token}),
            )
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{refusal}");
        assert_eq!(refusal["error"], "lease_lost", "{refusal}");
        let (status, finished) = daemon
            .post(
                &finish,
                &json!({"status": "completed", "fencing_token": new_token}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{finished}");

        daemon.stop();
        db.drop_database().await;
    }
}
