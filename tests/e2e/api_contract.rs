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
