//! A signed run reaches an HTTP worker that verifies it (and the test's own verifier
//! refuses what it must).

use super::*;

#[test]
fn the_test_verifier_refuses_what_it_must() {
    // RFC 4231 test case 2: the HMAC itself.
    assert_eq!(
        hex::encode(hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );

    let (_, key) = new_secret();
    let (_, other_key) = new_secret();
    let verifier = Verifier::new(key.clone());
    let now = unix_now();
    let ts = now.to_string();
    let body = br#"{"id":"d-1"}"#;
    let good = sign_v1(&key, "d-1", &ts, body);
    assert_eq!(verifier.verify("d-1", &ts, &good, body, now), Ok(()));
    // Several signatures (a key rotation): one match suffices.
    let rotated = format!("{} {good}", sign_v1(&other_key, "d-1", &ts, body));
    assert_eq!(verifier.verify("d-1", &ts, &rotated, body, now), Ok(()));

    let refused = |what: &str, id: &str, ts: &str, signature: &str, body: &[u8]| {
        assert!(
            verifier.verify(id, ts, signature, body, now).is_err(),
            "the verifier accepted {what}"
        );
    };
    refused(
        "a wrong key",
        "d-1",
        &ts,
        &sign_v1(&other_key, "d-1", &ts, body),
        body,
    );
    refused("an empty v1,", "d-1", &ts, "v1,", body);
    refused("no signature", "d-1", &ts, "", body);
    refused(
        "a truncated signature",
        "d-1",
        &ts,
        &good[..good.len() - 4],
        body,
    );
    let short_tag = {
        let tag = BASE64
            .decode(&good["v1,".len()..])
            .expect("own signature decodes");
        format!("v1,{}", BASE64.encode(&tag[..16]))
    };
    refused("a truncated tag", "d-1", &ts, &short_tag, body);
    refused("a v2 entry", "d-1", &ts, &good.replace("v1,", "v2,"), body);
    refused("another id", "d-2", &ts, &good, body);
    refused("a changed body", "d-1", &ts, &good, br#"{"id":"d-2"}"#);
    let stale = (now - 301).to_string();
    refused(
        "a stale timestamp",
        "d-1",
        &stale,
        &sign_v1(&key, "d-1", &stale, body),
        body,
    );
    let ahead = (now + 301).to_string();
    refused(
        "a future timestamp",
        "d-1",
        &ahead,
        &sign_v1(&key, "d-1", &ahead, body),
        body,
    );
    refused(
        "another timestamp",
        "d-1",
        &(now - 1).to_string(),
        &good,
        body,
    );
}

#[tokio::test]
async fn a_signed_run_reaches_an_http_worker_that_verifies_it() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let (secret, key) = new_secret();
        let worker = Worker::start(key.clone(), &[], Duration::ZERO).await;
        let setup = http_setup(
            &worker.url,
            "timeout = \"5s\"\nretry = [\"200ms\", \"500ms\"]",
        );
        let daemon =
            Daemon::start(&db, &config(&db, &setup), &[(SECRET_ENV, secret.as_str())]).await;

        let entity = unique("conv");
        let (status, answer) = daemon
            .post_event(&unique("m"), &event("chat", "message", "acme", &entity))
            .await;
        assert_eq!(
            answer["outcome"], "routed",
            "{backend:?} {status}: {answer}"
        );
        let run_id = run_id(&answer);
        let run = wait_run(&daemon, &run_id, "dispatched", Duration::from_secs(30)).await;
        // Nothing else is due: give a late duplicate two poll intervals to show up.
        tokio::time::sleep(Duration::from_millis(600)).await;
        let seen = worker.seen();
        assert_eq!(seen.len(), 1, "{backend:?}: one request, got {seen:#?}");
        let request = &seen[0];
        assert_eq!(request.verified, Ok(()), "{backend:?}: {request:#?}");
        assert_eq!(request.content_type, "application/cloudevents+json");

        let body = request.json();
        assert_eq!(body["specversion"], "1.0", "{body:#}");
        assert_eq!(body["type"], "switchyard.run.start", "{body:#}");
        assert_eq!(body["id"], request.id.as_str(), "webhook-id is the body id");
        assert_eq!(body["subject"], entity.as_str(), "{body:#}");
        assert_eq!(run["dispatch"]["id"], request.id.as_str(), "{run:#}");
        assert_eq!(run["dispatch"]["status"], "delivered", "{run:#}");
        assert_eq!(run["dispatch"]["target"], "worker", "{run:#}");
        assert_eq!(run["dispatch"]["attempts"], 1, "{run:#}");
        let message_run = &body["data"]["run"];
        assert_eq!(message_run["id"], run_id.as_str(), "{body:#}");
        assert_eq!(
            message_run["fencing_token"], run["fencing_token"],
            "{body:#}"
        );
        assert_eq!(message_run["workflow_id"], "triage");
        assert_eq!(message_run["tenant_id"], "acme");
        assert_eq!(message_run["target_entity_id"], entity.as_str());
        assert_eq!(message_run["intake_id"], run["intake_id"], "{body:#}");
        assert_eq!(message_run["attempt"], 1);
        let message_event = &body["data"]["event"];
        assert_eq!(message_event["channel"], "chat", "{body:#}");
        assert_eq!(message_event["event_type"], "message");
        assert_eq!(message_event["tenant_id"], "acme");
        assert_eq!(message_event["target_entity_id"], entity.as_str());
        assert_eq!(
            message_event["payload"],
            json!({"subject": "Printer on fire"})
        );

        assert_history_in_order(&run, &["routed", "delivered"]);
        let history = run["history"].as_array().expect("history");
        assert_eq!(history[0]["status"], "queued", "{run:#}");
        assert_eq!(
            history.last().expect("an entry")["status"],
            "dispatched",
            "{run:#}"
        );

        // The verifier that accepted this request refuses it once anything is off.
        let verifier = Verifier::new(key.clone());
        let now = unix_now();
        let check = |signature: &str| {
            verifier.verify(
                &request.id,
                &request.timestamp,
                signature,
                &request.body,
                now,
            )
        };
        assert_eq!(check(&request.signature), Ok(()));
        let (_, wrong_key) = new_secret();
        let forged = sign_v1(&wrong_key, &request.id, &request.timestamp, &request.body);
        assert!(check(&forged).is_err(), "a wrong key was accepted");
        assert!(check("v1,").is_err(), "an empty `v1,` was accepted");
        let truncated = &request.signature[..request.signature.len() - 4];
        assert!(
            check(truncated).is_err(),
            "a truncated signature was accepted"
        );
        assert!(
            verifier
                .verify(
                    &request.id,
                    &request.timestamp,
                    &request.signature,
                    &request.body,
                    now + 3600
                )
                .is_err(),
            "a stale timestamp was accepted"
        );

        // The worker finishes the run with the token from the message; others are fenced out.
        let token = message_run["fencing_token"].as_i64().expect("a token");
        let finish = format!("/v1/runs/{run_id}/finish");
        for stale in [token + 1, token - 1] {
            let (status, refusal) = daemon
                .post(
                    &finish,
                    &json!({"status": "completed", "fencing_token": stale}),
                )
                .await;
            assert_eq!(status, StatusCode::CONFLICT, "{backend:?}: {refusal}");
            assert_eq!(refusal["error"], "lease_lost", "{refusal}");
        }
        let (status, finished) = daemon
            .post(
                &finish,
                &json!({"status": "completed", "fencing_token": token}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {finished}");
        assert_eq!(finished["status"], "completed", "{finished}");
        let run = daemon.get(&format!("/v1/runs/{run_id}")).await;
        assert_eq!(run["status"], "completed", "{run:#}");

        daemon.stop();
        db.drop_database().await;
    }
}
