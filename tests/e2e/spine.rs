//! The spine end to end on every database: the worked example, what never matches, bad input.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::harness::{Daemon, TestDb, config, event, unique};

/// The worked example of the issue: live `triage` (100) and `tagging` (50), and a draft with a
/// higher priority on the same trigger.
pub const WORKED_EXAMPLE: &str = r#"
[[workflow]]
id = "triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 100 } ]

[[workflow]]
id = "tagging"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 50 } ]

[[workflow]]
id = "experimental"
tenant = "acme"
status = "draft"
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 1000 } ]

[[workflow]]
id = "retired"
tenant = "acme"
status = "disabled"
triggers = [ { channel = "webhook", event_type = "ticket.updated", priority = 10 } ]

[[workflow]]
id = "globex-triage"
tenant = "globex"
status = "live"
run_as = "globex-agent"
triggers = [ { channel = "webhook", event_type = "ticket.solved", priority = 10 } ]
"#;

#[tokio::test]
async fn worked_example_routes_locks_and_routes_again_after_finish() {
    for db in TestDb::all().await {
        let daemon = Daemon::start(&db, &config(&db, WORKED_EXAMPLE), &[]).await;
        let ticket = event("webhook", "ticket.created", "acme", "TCK-5510");

        let (status, first) = daemon.post_event("delivery-1", &ticket).await;
        assert_eq!(status, StatusCode::OK, "{:?}: {first}", db.backend);
        assert_eq!(first["outcome"], "routed", "{:?}: {first}", db.backend);
        assert_eq!(first["workflow_id"], "triage");
        let run_id = first["run_id"].as_str().expect("run_id").to_owned();

        let (status, second) = daemon.post_event("delivery-2", &ticket).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(second["outcome"], "entity_locked", "{second}");
        assert_eq!(second["held_by_run_id"], run_id.as_str());
        assert_eq!(second["workflow_id"], "triage");

        let locks = daemon.get("/v1/locks?tenant=acme").await;
        assert_eq!(locks["locks"][0]["run_id"], run_id.as_str());
        assert_eq!(locks["locks"][0]["target_entity_id"], "TCK-5510");

        let (status, finished) = daemon.finish(&run_id, "completed").await;
        assert_eq!(status, StatusCode::OK, "{finished}");
        assert_eq!(finished["status"], "completed");
        assert_eq!(
            daemon.get("/v1/locks?tenant=acme").await["locks"],
            json!([])
        );

        let (_, third) = daemon.post_event("delivery-3", &ticket).await;
        assert_eq!(third["outcome"], "routed", "{third}");
        assert_eq!(third["workflow_id"], "triage");
        assert_ne!(third["run_id"], first["run_id"]);

        let run = daemon
            .get(&format!(
                "/v1/runs/{}",
                third["run_id"].as_str().unwrap_or_default()
            ))
            .await;
        assert_eq!(
            run["fencing_token"], 2,
            "the token grows with every acquisition"
        );

        let ledger = daemon.intake("tenant=acme").await;
        let outcomes: Vec<&str> = ledger
            .iter()
            .filter_map(|r| r["outcome"].as_str())
            .collect();
        assert_eq!(
            outcomes,
            ["routed", "entity_locked", "routed"],
            "newest first"
        );
        assert_eq!(ledger[2]["event"]["payload"]["subject"], "Printer on fire");
        daemon.stop();
        db.drop_database().await;
    }
}

#[tokio::test]
async fn drafts_disabled_other_tenants_and_unknown_types_never_match_and_are_recorded() {
    for db in TestDb::all().await {
        let daemon = Daemon::start(&db, &config(&db, WORKED_EXAMPLE), &[]).await;
        let cases = [
            // The disabled workflow is the only one on ticket.updated.
            (
                event("webhook", "ticket.updated", "acme", "T-1"),
                "disabled",
            ),
            // globex-triage triggers on ticket.solved, but only for globex.
            (
                event("webhook", "ticket.solved", "acme", "T-2"),
                "other tenant",
            ),
            (
                event("webhook", "ticket.exploded", "acme", "T-3"),
                "unknown type",
            ),
            // Right type, wrong channel.
            (
                event("web_form", "ticket.created", "acme", "T-4"),
                "other channel",
            ),
            (
                event("webhook", "ticket.created", "initech", "T-5"),
                "unknown tenant",
            ),
        ];
        for (n, (event, why)) in cases.iter().enumerate() {
            let (status, answer) = daemon.post_event(&format!("nomatch-{n}"), event).await;
            assert_eq!(status, StatusCode::OK, "{why}");
            assert_eq!(answer["outcome"], "no_trigger_match", "{why}: {answer}");
            assert!(answer.get("run_id").is_none(), "{why}");
        }
        let ledger = daemon.intake("outcome=no_trigger_match").await;
        assert_eq!(ledger.len(), cases.len(), "every no-match is in the ledger");
        assert!(daemon.runs("").await.is_empty(), "no run was created");

        // The draft outranks triage, yet triage wins: drafts never match.
        let (_, routed) = daemon
            .post_event(
                "draft-check",
                &event("webhook", "ticket.created", "acme", "T-6"),
            )
            .await;
        assert_eq!(routed["workflow_id"], "triage");
        daemon.stop();
        db.drop_database().await;
    }
}

#[tokio::test]
async fn redelivery_answers_the_first_outcome_and_creates_nothing() {
    for db in TestDb::all().await {
        let daemon = Daemon::start(&db, &config(&db, WORKED_EXAMPLE), &[]).await;
        let ticket = event("webhook", "ticket.created", "acme", &unique("TCK"));
        let (_, first) = daemon.post_event("same", &ticket).await;
        let (status, again) = daemon.post_event("same", &ticket).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(again["outcome"], "duplicate");
        assert_eq!(again["first_outcome"], "routed");
        assert_eq!(again["run_id"], first["run_id"]);
        assert_eq!(again["intake_id"], first["intake_id"]);
        assert_eq!(daemon.runs("").await.len(), 1);
        assert_eq!(daemon.intake("").await.len(), 1);
        daemon.stop();
        db.drop_database().await;
    }
}

/// Everything here is refused before a run or a lock: runs and locks stay as they were, and
/// only the bad canonical events are recorded (`invalid_event`, like bad webhook deliveries).
#[tokio::test]
async fn bad_input_is_refused_with_a_specific_error_and_changes_nothing() {
    let Some(db) = TestDb::create(super::harness::Backend::Sqlite).await else {
        return;
    };
    let daemon = Daemon::start(&db, &config(&db, WORKED_EXAMPLE), &[]).await;
    let (_, routed) = daemon
        .post_event("base", &event("webhook", "ticket.created", "acme", "E"))
        .await;
    let run_id = routed["run_id"].as_str().expect("routed").to_owned();
    let client = daemon.client();

    let post_raw = |key: Option<&str>, body: String| {
        let mut request = client
            .post(daemon.url("/v1/events"))
            .bearer_auth(super::harness::TOKEN)
            .header("content-type", "application/json")
            .body(body);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request.send()
    };
    let invalid_cases: Vec<(Option<&str>, String, &str)> = vec![
        (Some("k1"), "{not json".into(), "invalid event JSON"),
        (
            Some("k2"),
            json!({"channel": "webhook", "event_type": "x", "tenant_id": "acme", "payload": {}}).to_string(),
            "missing field `target_entity_id`",
        ),
        (
            Some("k3"),
            json!({"channel": "sms", "event_type": "x", "tenant_id": "acme", "target_entity_id": "E", "payload": {}}).to_string(),
            "unknown variant `sms`",
        ),
        (
            Some("k4"),
            json!({"channel": "chat", "event_type": "x", "tenant_id": "acme", "target_entity_id": "E", "payload": []}).to_string(),
            "`payload` must be a JSON object",
        ),
        (
            Some("k5"),
            json!({"channel": "chat", "event_type": "", "tenant_id": "acme", "target_entity_id": "E", "payload": {}}).to_string(),
            "`event_type` must not be empty",
        ),
        (None, event("chat", "x", "acme", "E").to_string(), "Idempotency-Key"),
    ];
    for (key, body, expected) in invalid_cases {
        let (status, answer) = super::harness::read(post_raw(key, body).await.expect("send")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{expected}: {answer}");
        assert_eq!(answer["outcome"], "invalid_event");
        let detail = answer["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains(expected),
            "`{detail}` should mention `{expected}`"
        );
    }

    // Over the 1 MiB default limit, sent whole without waiting for `100 Continue`: the client
    // must read the 413, not a reset connection, however far past the limit its body runs (the
    // larger ones outlast the socket buffers; each try is a fresh connection).
    for blob in [1024 * 1024 + 10, 4 * 1024 * 1024, 12 * 1024 * 1024] {
        for _ in 0..3 {
            let huge = json!({"channel": "chat", "event_type": "x", "tenant_id": "acme", "target_entity_id": "E",
                              "payload": {"blob": "x".repeat(blob)}});
            let response = post_raw(Some("big"), huge.to_string()).await.expect("send");
            // The connection carries no further request: the client is told to close it.
            assert_eq!(response.headers()["connection"], "close");
            let (status, answer) = super::harness::read(response).await;
            assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{answer}");
        }
    }

    // A client that waits for `100 Continue` is answered 413 at once and never sends the body.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(daemon.addr)
            .await
            .expect("connect");
        let head = format!(
            "POST /v1/events HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
             Idempotency-Key: big-expect\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nExpect: 100-continue\r\n\r\n",
            daemon.addr,
            super::harness::TOKEN,
            8 * 1024 * 1024
        );
        stream.write_all(head.as_bytes()).await.expect("write");
        let mut answer = Vec::new();
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            stream.read_to_end(&mut answer),
        )
        .await
        .expect("the 413 arrives without the body")
        .expect("read");
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 413"),
            "expected a 413 before any body byte: {answer}"
        );
        assert!(!answer.contains("100 Continue"), "{answer}");
    }

    // Missing and wrong tokens.
    for token in [None, Some("wrong")] {
        let mut request = client
            .post(daemon.url("/v1/events"))
            .header("Idempotency-Key", "tok")
            .json(&event("webhook", "ticket.created", "acme", "Z"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let (status, _) = super::harness::read(request.send().await.expect("send")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        let status = client
            .get(daemon.url("/v1/intake"))
            .send()
            .await
            .expect("send")
            .status();
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }

    // Unknown runs, bad statuses, finishing twice.
    let (status, _) = daemon.get_status("/v1/runs/no-such-run").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = daemon.finish("no-such-run", "completed").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, answer) = daemon.finish(&run_id, "exploded").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let (status, _) = daemon.finish(&run_id, "failed").await;
    assert_eq!(status, StatusCode::OK);
    let (status, answer) = daemon.finish(&run_id, "completed").await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert!(
        answer["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("already failed")
    );
    let (status, _) = daemon.heartbeat(&run_id).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = daemon.get_status("/v1/intake?limit=0").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = daemon.get_status("/v1/intake?outcome=maybe").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = daemon.get_status("/v1/runs?status=sleeping").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // Nothing above changed a run or a lock: one routed ledger row, one run (now failed). The
    // six bad `/v1/events` requests are recorded `invalid_event` with their bytes, as bad
    // webhook deliveries are (issue 39); nothing else above is.
    let ledger = daemon.intake("").await;
    let routed: Vec<_> = ledger
        .iter()
        .filter(|row| row["outcome"] != "invalid_event")
        .collect();
    assert_eq!(routed.len(), 1, "{ledger:?}");
    assert_eq!(ledger.len() - routed.len(), 6, "{ledger:?}");
    let runs = daemon.runs("").await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["status"], "failed");
    daemon.stop();
}

#[tokio::test]
async fn admin_api_serves_raw_bytes_workflows_and_health() {
    let Some(db) = TestDb::create(super::harness::Backend::Sqlite).await else {
        return;
    };
    let daemon = Daemon::start(&db, &config(&db, WORKED_EXAMPLE), &[]).await;
    let body = event("web_form", "form.submitted", "acme", "F-1");
    let (_, answer) = daemon.post_event("raw-1", &body).await;
    assert_eq!(answer["outcome"], "no_trigger_match");
    let ledger = daemon.intake("").await;
    let raw_ref = ledger[0]["event"]["raw_ref"]
        .as_str()
        .expect("raw_ref")
        .to_owned();
    assert!(raw_ref.starts_with("raw:"));
    let raw = daemon.raw(&raw_ref).await.expect("raw bytes");
    let stored: Value = serde_json::from_slice(&raw).expect("json");
    assert_eq!(stored, body, "the original delivery is kept byte for byte");

    let workflows = daemon.get("/v1/workflows").await;
    assert_eq!(
        workflows["config_revision"].as_str().map(str::len),
        Some(16)
    );
    assert_eq!(workflows["workflows"].as_array().map(Vec::len), Some(5));

    let health = daemon
        .client()
        .get(daemon.url("/healthz"))
        .send()
        .await
        .expect("healthz");
    assert_eq!(health.status(), StatusCode::OK);
    let ready = daemon
        .client()
        .get(daemon.url("/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(ready.status(), StatusCode::OK);
    daemon.stop();
}
