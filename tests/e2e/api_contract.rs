//! The HTTP API's one contract, as a client meets it: every refusal is JSON with a stable
//! `error` code and a `detail` in Switchyard's words (never the framework's), including a path
//! no route serves (404) and a method a path does not take (405); JSON endpoints take
//! `application/json` (with parameters) and answer 415 to anything else, and store nothing.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::harness::{Daemon, TOKEN, TestDb, config, event};
use super::spine::WORKED_EXAMPLE;

/// The answer's status, and its body as JSON (`Value::Null` when it is not JSON).
async fn send(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let response = request.send().await.expect("send");
    let status = response.status();
    let text = response.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn assert_refusal(answer: &Value, error: &str, words: &str, case: &str) {
    assert_eq!(answer["error"], error, "{case}: {answer}");
    let detail = answer["detail"].as_str().unwrap_or_default();
    assert!(detail.contains(words), "{case}: `{words}` in {answer}");
    assert!(
        !detail.contains("Failed to") && !detail.contains("target type"),
        "{case}: no framework text reaches a client: {answer}"
    );
}

#[tokio::test]
async fn every_refusal_is_one_json_shape_and_json_endpoints_take_only_json() {
    let Some(db) = TestDb::create(super::harness::Backend::Sqlite).await else {
        return;
    };
    let daemon = Daemon::start(&db, &config(&db, WORKED_EXAMPLE), &[]).await;
    let client = daemon.client().clone();

    // No route: 404, JSON, naming the path.
    let (status, answer) = send(client.get(daemon.url("/v1/nowhere")).bearer_auth(TOKEN)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    assert_refusal(&answer, "not_found", "/v1/nowhere", "unknown path");
    // A path that exists, with a method it does not take: 405, JSON.
    let (status, answer) = send(client.delete(daemon.url("/v1/events")).bearer_auth(TOKEN)).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{answer}");
    assert_refusal(&answer, "method_not_allowed", "DELETE", "wrong method");

    // A canonical event sent as text/plain (or with no Content-Type) is 415 and not recorded.
    let body = serde_json::to_string(&event("webhook", "ticket.created", "acme", "TCK-415"))
        .expect("json");
    for content_type in [Some("text/plain"), None] {
        let mut request = client
            .post(daemon.url("/v1/events"))
            .bearer_auth(TOKEN)
            .header("Idempotency-Key", "media-type")
            .body(body.clone());
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        let (status, answer) = send(request).await;
        assert_eq!(
            status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{content_type:?}: {answer}"
        );
        assert_refusal(
            &answer,
            "unsupported_media_type",
            "application/json",
            "events as text",
        );
    }
    assert!(daemon.intake("").await.is_empty(), "nothing was recorded");
    // With parameters it is JSON, and it routes.
    let (status, answer) = send(
        client
            .post(daemon.url("/v1/events"))
            .bearer_auth(TOKEN)
            .header("Idempotency-Key", "media-type")
            .header("content-type", "application/json; charset=utf-8")
            .body(body),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["outcome"], "routed", "{answer}");

    // A JSON body the endpoint cannot read names the problem in Switchyard's words; one sent
    // as another type is 415 there too.
    let (status, answer) = send(
        client
            .post(daemon.url("/v1/claims"))
            .bearer_auth(TOKEN)
            .json(&json!({"workflows": "triage"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_refusal(&answer, "bad_request", "workflows", "claims with a string");
    let (status, answer) = send(
        client
            .post(daemon.url("/v1/claims"))
            .bearer_auth(TOKEN)
            .header("content-type", "text/plain")
            .body(r#"{"workflows":["triage"]}"#),
    )
    .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{answer}");
    assert_refusal(
        &answer,
        "unsupported_media_type",
        "application/json",
        "claims as text",
    );
    // A query string it cannot read, likewise.
    let (status, answer) = send(
        client
            .get(daemon.url("/v1/runs?limit=many"))
            .bearer_auth(TOKEN),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_refusal(&answer, "bad_request", "limit", "a bad query");

    daemon.stop();
    db.drop_database().await;
}

#[tokio::test]
async fn a_refused_event_says_why_in_the_answer() {
    let Some(db) = TestDb::create(super::harness::Backend::Sqlite).await else {
        return;
    };
    let daemon = Daemon::start(&db, &config(&db, WORKED_EXAMPLE), &[]).await;
    let ticket = event("webhook", "ticket.created", "acme", "TCK-WHY");
    let (_, routed) = daemon.post_event("why-1", &ticket).await;
    assert_eq!(routed["outcome"], "routed", "{routed}");
    // Held: by which run, and until when.
    let (_, locked) = daemon.post_event("why-2", &ticket).await;
    assert_eq!(locked["outcome"], "entity_locked", "{locked}");
    let detail = locked["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(routed["run_id"].as_str().expect("run id")) && detail.contains("until 20"),
        "{locked}"
    );
    // Nothing triggers: on what, for whom.
    let (_, unmatched) = daemon
        .post_event(
            "why-3",
            &event("webhook", "ticket.archived", "acme", "TCK-WHY-2"),
        )
        .await;
    assert_eq!(unmatched["outcome"], "no_trigger_match", "{unmatched}");
    assert_eq!(
        unmatched["detail"],
        "no live workflow of tenant `acme` triggers on (webhook, ticket.archived)"
    );
    daemon.stop();
    db.drop_database().await;
}

/// A bad `/v1/events` request from a token that may send events is recorded like a bad webhook
/// delivery: `invalid_event` with its raw bytes, found in `/v1/intake` and `/v1/raw`; the same
/// bad request again is its duplicate (same status), a corrected one under the same key is new
/// work; and a request without a valid token records nothing.
#[tokio::test]
async fn bad_event_requests_are_recorded_with_their_bytes_and_unauthenticated_ones_are_not() {
    let Some(db) = TestDb::create(super::harness::Backend::Sqlite).await else {
        return;
    };
    let daemon = Daemon::start(&db, &config(&db, WORKED_EXAMPLE), &[]).await;
    let client = daemon.client().clone();
    let post = |key: Option<&str>, body: &'static str, token: Option<&str>| {
        let mut request = client
            .post(daemon.url("/v1/events"))
            .header("content-type", "application/json")
            .body(body);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        send(request)
    };
    const MALFORMED: &str = r#"{"channel": "webhook", "event_type": "ticket.created", "#;

    // Unauthenticated, or with a wrong token: 401, nothing recorded.
    for token in [None, Some("not-the-token-at-all")] {
        let (status, answer) = post(Some("bad-1"), MALFORMED, token).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{token:?}: {answer}");
    }
    assert!(daemon.intake("").await.is_empty(), "nothing was recorded");

    // Malformed JSON: 400 invalid_event, recorded with the bytes as sent.
    let (status, answer) = post(Some("bad-1"), MALFORMED, Some(TOKEN)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["outcome"], "invalid_event", "{answer}");
    assert!(
        answer["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("invalid event JSON")),
        "{answer}"
    );
    let intake_id = answer["intake_id"]
        .as_str()
        .expect("an intake id")
        .to_owned();
    let rows = daemon.intake("outcome=invalid_event&source=api").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["id"], intake_id.as_str());
    assert_eq!(rows[0]["delivery_id"], "bad-1");
    assert_eq!(rows[0]["detail"], answer["detail"]);
    let raw_ref = rows[0]["raw_ref"].as_str().expect("a raw_ref");
    assert_eq!(
        daemon.raw(raw_ref).await.expect("the raw bytes"),
        MALFORMED.as_bytes()
    );

    // The same bad request again: its duplicate, refused the same way, no second row.
    let (status, again) = post(Some("bad-1"), MALFORMED, Some(TOKEN)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{again}");
    assert_eq!(again["outcome"], "duplicate", "{again}");
    assert_eq!(again["first_outcome"], "invalid_event", "{again}");
    // No Idempotency-Key: recorded too, under an id of its own.
    let (status, unkeyed) = post(None, r#"{"channel": "webhook"}"#, Some(TOKEN)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{unkeyed}");
    assert_eq!(unkeyed["outcome"], "invalid_event", "{unkeyed}");
    let rows = daemon.intake("outcome=invalid_event").await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        rows[0]["delivery_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("unkeyed:")),
        "{rows:?}"
    );
    assert_eq!(
        daemon
            .raw(rows[0]["raw_ref"].as_str().expect("raw_ref"))
            .await
            .expect("bytes"),
        br#"{"channel": "webhook"}"#
    );

    // The sender fixes its body and sends it under the same key: new work, routed.
    let (status, fixed) = post(
        Some("bad-1"),
        r#"{"channel": "webhook", "event_type": "ticket.created", "tenant_id": "acme",
            "target_entity_id": "TCK-BAD", "payload": {}}"#,
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{fixed}");
    assert_eq!(fixed["outcome"], "routed", "{fixed}");
    daemon.stop();
}
