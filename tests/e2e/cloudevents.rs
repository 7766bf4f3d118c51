//! CloudEvents intake end to end (`POST /v1/ingest/cloudevents/{name}`) on every database:
//! structured and binary mode signed with Standard Webhooks, the API token as the other proof,
//! deduplication on `(source, id)`, and every refusal with its status.

use reqwest::StatusCode;
use serde_json::{Value, json};
use switchyard_cloudevents::sign;
use switchyard_core::standard_webhooks::SigningKey;

use super::harness::{Daemon, TOKEN, TestDb, config, read, run_id, unique};

const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const OTHER_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

const STRUCTURED: &str =
    include_str!("../../adapters/cloudevents/tests/fixtures/structured_json_data.json");
const SPEC_STRUCTURED: &str =
    include_str!("../../adapters/cloudevents/tests/fixtures/spec_structured_json_data.json");
const SPEC_BATCH: &str = include_str!("../../adapters/cloudevents/tests/fixtures/spec_batch.json");

const SETUP: &str = r#"
[[source]]
kind = "cloudevents"
name = "publisher"
tenant = "acme"
signing_secret_env = "PUBLISHER_SECRET"

[[source]]
kind = "cloudevents"
name = "internal"
tenant = "acme"
channel = "chat"

[[workflow]]
id = "blobs"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [
    { channel = "webhook", event_type = "com.example.someevent", priority = 10 },
    { channel = "chat", event_type = "com.example.someevent", priority = 10 },
]
"#;

/// One request as a publisher sends it.
#[derive(Debug, Clone)]
struct Request {
    body: Vec<u8>,
    headers: Vec<(String, String)>,
}

impl Request {
    /// Structured mode: the whole event in the body.
    fn structured(body: &str) -> Self {
        Self {
            body: body.as_bytes().to_vec(),
            headers: vec![(
                "content-type".into(),
                "application/cloudevents+json; charset=utf-8".into(),
            )],
        }
    }

    /// Binary mode: `ce-*` headers and `data` as a JSON body.
    fn binary(id: &str, subject: Option<&str>, data: &Value) -> Self {
        let mut headers = vec![
            ("ce-specversion".to_owned(), "1.0".to_owned()),
            ("ce-type".into(), "com.example.someevent".into()),
            ("ce-source".into(), "/mycontext/subcontext".into()),
            ("ce-id".into(), id.into()),
            ("ce-time".into(), "2018-04-05T03:56:24Z".into()),
            (
                "content-type".into(),
                "application/json; charset=utf-8".into(),
            ),
        ];
        if let Some(subject) = subject {
            headers.push(("ce-subject".into(), subject.into()));
        }
        Self {
            body: serde_json::to_vec(data).expect("json"),
            headers,
        }
    }

    fn with(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Signed now with `secret`, as message `msg`.
    fn signed_with(self, secret: &str, msg: &str) -> Self {
        let key = SigningKey::parse(secret).expect("secret");
        let signed = sign(&key, msg, chrono::Utc::now().timestamp(), &self.body);
        signed
            .into_iter()
            .fold(self, |request, (name, value)| request.with(name, &value))
    }

    /// Signed as a new message. (A signed request is identified by its message id, issue 32:
    /// one id for several messages would make the later ones copies of the first.)
    fn signed(self) -> Self {
        self.signed_with(SECRET, &unique("msg"))
    }

    async fn send_to(&self, daemon: &Daemon, source: &str) -> (StatusCode, Value) {
        let mut request = daemon
            .client()
            .post(daemon.url(&format!("/v1/ingest/cloudevents/{source}")))
            .body(self.body.clone());
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        read(request.send().await.expect("POST cloudevents")).await
    }

    async fn send(&self, daemon: &Daemon) -> (StatusCode, Value) {
        self.send_to(daemon, "publisher").await
    }
}

async fn start(db: &TestDb) -> Daemon {
    Daemon::start(db, &config(db, SETUP), &[("PUBLISHER_SECRET", SECRET)]).await
}

#[tokio::test]
async fn both_modes_route_deduplicate_on_source_and_id_and_keep_the_bytes() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = start(&db).await;

        let structured = Request::structured(STRUCTURED).signed_with(SECRET, "msg_1");
        let (status, first) = structured.send(&daemon).await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {first}");
        assert_eq!(first["outcome"], "routed", "{backend:?}: {first}");
        assert_eq!(first["workflow_id"], "blobs");
        let run = run_id(&first);
        let ledger = daemon.intake("source=publisher").await;
        assert_eq!(ledger.len(), 1, "{backend:?}");
        // A signed request is its signed message id (issue 32); the event's (source, id) is
        // its second key, which makes the resend below a duplicate.
        assert_eq!(ledger[0]["delivery_id"], "webhook-id:msg_1");
        let event = &ledger[0]["event"];
        assert_eq!(event["channel"], "webhook");
        assert_eq!(event["event_type"], "com.example.someevent");
        assert_eq!(event["tenant_id"], "acme");
        assert_eq!(event["target_entity_id"], "mynewfile.jpg");
        assert_eq!(event["payload"]["time"], "2018-04-05T17:31:00Z");
        assert_eq!(event["payload"]["data"]["appinfoA"], "abc");
        let raw = event["raw_ref"].as_str().expect("raw_ref");
        assert_eq!(daemon.raw(raw).await.as_deref(), Ok(STRUCTURED.as_bytes()));

        // The publisher resends (signed afresh, another webhook-id): same (source, id).
        let (status, again) = Request::structured(STRUCTURED)
            .signed_with(SECRET, "msg_2")
            .send(&daemon)
            .await;
        assert_eq!(status, StatusCode::OK, "{again}");
        assert_eq!(again["outcome"], "duplicate", "{backend:?}: {again}");
        assert_eq!(again["run_id"], run.as_str());

        // Binary mode, another entity: its own run; the data is the body.
        let (status, binary) = Request::binary(
            "1234-1234-1234",
            Some("TCK-1"),
            &json!({"priority": "urgent"}),
        )
        .signed()
        .send(&daemon)
        .await;
        assert_eq!(status, StatusCode::OK, "{binary}");
        assert_eq!(binary["outcome"], "routed", "{backend:?}: {binary}");
        let row = &daemon.intake("source=publisher&limit=1").await[0];
        assert_eq!(row["event"]["target_entity_id"], "TCK-1");
        assert_eq!(row["event"]["payload"]["data"]["priority"], "urgent");
        assert_eq!(row["event"]["payload"]["mode"], "binary");
        // Binary mode's ce-* headers are outside the signature: the message id names it.
        let delivery_id = row["delivery_id"].as_str().unwrap_or_default();
        assert!(delivery_id.starts_with("webhook-id:msg-"), "{delivery_id}");

        // Same id from another CloudEvents source attribute is another event.
        let mut other_source = Request::binary("1234-1234-1234", Some("TCK-2"), &json!({}));
        other_source.headers[2].1 = "/elsewhere".into();
        let (_, other) = other_source.signed().send(&daemon).await;
        assert_eq!(other["outcome"], "routed", "{backend:?}: {other}");
        assert_eq!(daemon.runs("").await.len(), 3, "{backend:?}");
        daemon.stop();
        db.drop_database().await;
    }
}

#[tokio::test]
async fn the_api_token_admits_without_a_signature_and_sets_the_configured_channel() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = start(&db).await;
        let bearer = format!("Bearer {TOKEN}");
        // `internal` has no secret: only the token admits.
        let request = Request::binary("int-1", Some("CONV-9"), &json!({"text": "hi"}));
        let (status, refused) = request.send_to(&daemon, "internal").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{refused}");
        assert_eq!(refused["outcome"], "unauthorized_source");
        assert!(
            refused["detail"]
                .as_str()
                .unwrap_or("")
                .starts_with("missing_credentials"),
            "{refused}"
        );
        let (status, routed) = request
            .clone()
            .with("authorization", &bearer)
            .send_to(&daemon, "internal")
            .await;
        assert_eq!(status, StatusCode::OK, "{routed}");
        assert_eq!(routed["outcome"], "routed", "{backend:?}: {routed}");
        let row = &daemon.intake("source=internal").await[0];
        assert_eq!(row["event"]["channel"], "chat");

        // The token works on a signed source too; a wrong token is refused, not retried as a
        // signature even when one is attached.
        let (_, ok) = Request::binary("pub-tok", Some("E-1"), &json!({}))
            .with("authorization", &bearer)
            .send(&daemon)
            .await;
        assert_eq!(ok["outcome"], "routed", "{ok}");
        let (status, wrong) = Request::binary("pub-wrong", Some("E-2"), &json!({}))
            .signed()
            .with("authorization", "Bearer nope")
            .send(&daemon)
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{wrong}");
        assert!(
            wrong["detail"]
                .as_str()
                .unwrap_or("")
                .starts_with("bad_token"),
            "{wrong}"
        );
        assert!(
            daemon
                .intake("source=publisher&outcome=unauthorized_source")
                .await
                .is_empty()
        );
        daemon.stop();
        db.drop_database().await;
    }
}

#[tokio::test]
async fn refusals_have_their_status_and_leave_the_ledger_as_it_was_or_record_why() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = start(&db).await;

        // Unsigned, wrongly signed, signed for another body: 401, nothing recorded.
        let unsigned = Request::structured(STRUCTURED);
        let (status, answer) = unsigned.send(&daemon).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{answer}");
        assert!(
            answer["detail"]
                .as_str()
                .unwrap_or("")
                .starts_with("missing_signature"),
            "{answer}"
        );
        let (status, answer) = Request::structured(STRUCTURED)
            .signed_with(OTHER_SECRET, "msg_x")
            .send(&daemon)
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{answer}");
        assert!(
            answer["detail"]
                .as_str()
                .unwrap_or("")
                .starts_with("bad_signature"),
            "{answer}"
        );
        let mut tampered = Request::structured(STRUCTURED).signed();
        tampered.body.push(b' ');
        let (status, _) = tampered.send(&daemon).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);

        // A tenantid extension naming another tenant: 401, nothing recorded.
        let (status, answer) = Request::binary("t-1", Some("E"), &json!({}))
            .with("ce-tenantid", "globex")
            .signed()
            .send(&daemon)
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{answer}");
        assert!(
            answer["detail"]
                .as_str()
                .unwrap_or("")
                .starts_with("tenant_mismatch"),
            "{answer}"
        );
        assert!(daemon.intake("").await.is_empty(), "{backend:?}");

        // Batched mode (the spec's own batch): 415 with a clear detail, nothing recorded.
        let batch = Request {
            body: SPEC_BATCH.as_bytes().to_vec(),
            headers: vec![(
                "content-type".into(),
                "application/cloudevents-batch+json".into(),
            )],
        }
        .signed();
        let (status, answer) = batch.send(&daemon).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{answer}");
        assert!(
            answer["detail"].as_str().unwrap_or("").contains("batched"),
            "{answer}"
        );
        let (status, _) = Request {
            body: b"{}".to_vec(),
            headers: vec![("content-type".into(), "application/json".into())],
        }
        .signed()
        .send(&daemon)
        .await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert!(daemon.intake("").await.is_empty(), "{backend:?}");

        // The spec's example has `"subject": null`: authenticated, so recorded invalid_event.
        let (status, answer) = Request::structured(SPEC_STRUCTURED)
            .signed()
            .send(&daemon)
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert_eq!(answer["outcome"], "invalid_event");
        assert!(
            answer["detail"]
                .as_str()
                .unwrap_or("")
                .starts_with("missing_subject"),
            "{answer}"
        );
        let (status, answer) = Request::binary("b-1", None, &json!({}))
            .signed()
            .send(&daemon)
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        let (status, answer) = Request::structured(r#"{"specversion":"0.3","id":"x"}"#)
            .signed()
            .send(&daemon)
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        let ledger = daemon.intake("outcome=invalid_event").await;
        assert_eq!(ledger.len(), 3, "{backend:?}: {ledger:?}");
        assert!(daemon.runs("").await.is_empty());

        // An unknown source name is 404.
        let (status, _) = Request::structured(STRUCTURED)
            .signed()
            .send_to(&daemon, "nope")
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        daemon.stop();
        db.drop_database().await;
    }
}

/// The trace context arrives as `ce-traceparent` in binary mode and as extension attributes in
/// structured mode; either way the ledger row and the run carry it (telemetry off: as sent).
#[tokio::test]
async fn the_trace_context_of_either_mode_is_stored_on_the_ledger_row_and_run() {
    let db = TestDb::create(super::harness::Backend::Sqlite)
        .await
        .expect("sqlite");
    let daemon = start(&db).await;
    let binary_parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let (_, binary) = Request::binary("trace-1", Some("TCK-T1"), &json!({}))
        .with("ce-traceparent", binary_parent)
        .with("ce-tracestate", "vendor=binary")
        .signed()
        .send(&daemon)
        .await;
    assert_eq!(binary["outcome"], "routed", "{binary}");

    let structured_parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let mut event: Value = serde_json::from_str(STRUCTURED).expect("fixture");
    event["id"] = json!("trace-2");
    event["subject"] = json!("TCK-T2");
    event["traceparent"] = json!(structured_parent);
    event["tracestate"] = json!("vendor=structured");
    let (_, structured) = Request::structured(&event.to_string())
        .signed()
        .send(&daemon)
        .await;
    assert_eq!(structured["outcome"], "routed", "{structured}");

    for (answer, parent, state) in [
        (&binary, binary_parent, "vendor=binary"),
        (&structured, structured_parent, "vendor=structured"),
    ] {
        let intake_id = answer["intake_id"].as_str().expect("intake_id");
        let ledger = daemon.intake("source=publisher").await;
        let row = ledger
            .iter()
            .find(|row| row["id"] == intake_id)
            .expect("the delivery's ledger row");
        assert_eq!(row["traceparent"], parent, "{row}");
        assert_eq!(row["tracestate"], state, "{row}");
        let run = daemon.get(&format!("/v1/runs/{}", run_id(answer))).await;
        assert_eq!(run["traceparent"], parent, "{run}");
        assert_eq!(run["tracestate"], state, "{run}");
    }
    daemon.stop();
}

/// A scoped token admits a CloudEvent only with `events:write` for the source's tenant; every
/// refusal records nothing.
#[tokio::test]
async fn a_scoped_token_needs_events_write_for_the_sources_tenant() {
    let db = TestDb::create(super::harness::Backend::Sqlite)
        .await
        .expect("sqlite");
    let tokens = r#"
[[token]]
name = "acme-sender"
secret_env = "CE_ACME_SENDER"
scopes = ["events:write"]
tenants = ["acme"]

[[token]]
name = "globex-sender"
secret_env = "CE_GLOBEX_SENDER"
scopes = ["events:write"]
tenants = ["globex"]

[[token]]
name = "reader"
secret_env = "CE_READER"
scopes = ["read"]
"#;
    let daemon = Daemon::start(
        &db,
        &config(&db, &format!("{SETUP}{tokens}")),
        &[
            ("PUBLISHER_SECRET", SECRET),
            ("CE_ACME_SENDER", "acme-sender-secret"),
            ("CE_GLOBEX_SENDER", "globex-sender-secret"),
            ("CE_READER", "reader-token-secret"),
        ],
    )
    .await;
    let send = |id: &'static str, token: &'static str| {
        let daemon = &daemon;
        async move {
            Request::binary(id, Some("CONV-1"), &json!({}))
                .with("authorization", &format!("Bearer {token}"))
                .send_to(daemon, "internal")
                .await
        }
    };
    let (status, refused) = send("s-1", "reader-token-secret").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert_eq!(refused["error"], "missing_scope", "{refused}");
    let (status, refused) = send("s-2", "globex-sender-secret").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert_eq!(refused["error"], "tenant_forbidden", "{refused}");
    let (status, refused) = send("s-3", "not-a-token").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{refused}");
    assert!(daemon.intake("source=internal").await.is_empty());
    let (status, routed) = send("s-4", "acme-sender-secret").await;
    assert_eq!(status, StatusCode::OK, "{routed}");
    assert_eq!(routed["outcome"], "routed", "{routed}");
    assert_eq!(daemon.intake("source=internal").await.len(), 1);
    daemon.stop();
}
