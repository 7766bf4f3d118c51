//! The `[telemetry]` settings: absent, nothing is exported and the sender's context is
//! forwarded unchanged; invalid, `serve` stops with EX_CONFIG.

use super::*;

/// With `[telemetry]` absent nothing is exported, and the sender's context is stored and
/// forwarded exactly as it came, from every intake endpoint; an invalid one is ignored.
#[tokio::test]
async fn with_telemetry_off_the_senders_context_is_stored_and_forwarded_unchanged() {
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    let (worker, secret) = Worker::start().await;
    let webhook = r#"
[[source]]
kind = "webhook"
name = "zendesk"
tenant = "acme"
signing_secret_env = "TRACE_ZENDESK_SECRET"
"#;
    let text = config(&db, &format!("{webhook}{}", setup(&worker.url, None)));
    let daemon = Daemon::start(
        &db,
        &text,
        &[
            (SECRET_ENV, secret.as_str()),
            ("TRACE_ZENDESK_SECRET", "zendesk-secret"),
        ],
    )
    .await;
    let trace_id = new_trace_id();
    let incoming = sender_traceparent(&trace_id);
    let answer = post_traced(
        &daemon,
        &event("chat", "message", "acme", &unique("e")),
        Some(&incoming),
        Some(TRACESTATE),
    )
    .await;
    let received = worker.wait_for_run(&run_id(&answer)).await;
    assert_eq!(received.traceparent.as_deref(), Some(incoming.as_str()));
    assert_eq!(received.tracestate.as_deref(), Some(TRACESTATE));
    assert_eq!(received.body["traceparent"], incoming.as_str());
    let row = ledger_row(&daemon, answer["intake_id"].as_str().expect("id")).await;
    assert_eq!(row["traceparent"], incoming.as_str());
    assert_eq!(row["tracestate"], TRACESTATE);
    let run = daemon.get(&format!("/v1/runs/{}", run_id(&answer))).await;
    assert_eq!(run["traceparent"], incoming.as_str());

    // A pull claim forwards it too.
    let pulled = post_traced(
        &daemon,
        &event("chat", "pull_me", "acme", &unique("p")),
        Some(&incoming),
        None,
    )
    .await;
    let claims = daemon.claim(&["pulled"], 1).await;
    assert_eq!(
        claims[0]["message"]["data"]["run"]["id"],
        run_id(&pulled).as_str()
    );
    assert_eq!(claims[0]["message"]["traceparent"], incoming.as_str());
    assert!(claims[0]["message"].get("tracestate").is_none());

    // Invalid: ignored, never refused; nothing stored or sent.
    let invalid = post_traced(
        &daemon,
        &event("chat", "message", "acme", &unique("e")),
        Some(&format!("00-{}-{SENDER_SPAN}-01", "0".repeat(32))),
        Some(TRACESTATE),
    )
    .await;
    assert_eq!(invalid["outcome"], "routed");
    let received = worker.wait_for_run(&run_id(&invalid)).await;
    assert_eq!(received.traceparent, None);
    assert_eq!(received.tracestate, None);
    let row = ledger_row(&daemon, invalid["intake_id"].as_str().expect("id")).await;
    assert!(row.get("traceparent").is_none(), "{row:#}");

    // The webhook endpoint reads it as well (a signed Zendesk trigger delivery).
    let body = br#"{"ticket_id":"4711","event_type":"ticket.created"}"#;
    let timestamp = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let response = daemon
        .client()
        .post(daemon.url("/v1/ingest/webhook/zendesk"))
        .header(switchyard_webhook::TIMESTAMP_HEADER, &timestamp)
        .header(
            switchyard_webhook::SIGNATURE_HEADER,
            switchyard_webhook::sign(b"zendesk-secret", &timestamp, body),
        )
        .header(switchyard_webhook::INVOCATION_ID_HEADER, unique("inv"))
        .header("traceparent", &incoming)
        .body(body.to_vec())
        .send()
        .await
        .expect("POST webhook");
    let (status, answer) = super::super::harness::read(response).await;
    assert!(
        status.is_success() || status == StatusCode::BAD_REQUEST,
        "{status}: {answer}"
    );
    let row = ledger_row(&daemon, answer["intake_id"].as_str().expect("recorded")).await;
    assert_eq!(row["source"], "zendesk");
    assert_eq!(row["traceparent"], incoming.as_str(), "{row:#}");
    daemon.stop();
    db.drop_database().await;
}

/// A bad `[telemetry]` value stops `serve` with EX_CONFIG (78), naming the key and its line.
#[test]
fn a_bad_telemetry_value_stops_serve_with_exit_78() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (keys, key, line) in [
        (
            "otlp_endpoint = \"http://127.0.0.1:4318\"\nsampling_ratio = 1.5",
            "sampling_ratio",
            "line 6",
        ),
        (
            "otlp_endpoint = \"https://collector:4318\"",
            "otlp_endpoint",
            "line 5",
        ),
        ("service_name = \"\"", "service_name", "line 5"),
    ] {
        let path = dir.path().join("bad.toml");
        std::fs::write(
            &path,
            format!("[server]\nlisten = \"127.0.0.1:0\"\n\n[telemetry]\n{keys}\n"),
        )
        .expect("write");
        let output = std::process::Command::new(super::super::harness::binary())
            .args(["serve", "--config"])
            .arg(&path)
            .env("SWITCHYARD_API_TOKEN", TOKEN)
            .output()
            .expect("run serve");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(78), "EX_CONFIG: {stderr}");
        assert!(stderr.contains(key), "names `{key}`: {stderr}");
        assert!(stderr.contains(line), "names {line}: {stderr}");
    }
}
