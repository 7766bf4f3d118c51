//! Zendesk-shaped webhooks end to end: real signatures over real HTTP, the ledger they leave,
//! and every refusal, on `POST /v1/ingest/webhook/{name}`.

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};
use switchyard_webhook::{INVOCATION_ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign};

use super::harness::{Backend, Daemon, TestDb, config, run_id};

const SECRET: &str = "zendesk-acme-signing-secret";
const SECRET_ENV: (&str, &str) = ("ZENDESK_ACME_SECRET", SECRET);
const ACCOUNT_ID: u64 = 22129848;

const TICKET_CREATED: &str =
    include_str!("../../adapters/webhook/tests/fixtures/ticket_created.json");
const COMMENT_ADDED: &str =
    include_str!("../../adapters/webhook/tests/fixtures/comment_added.json");
const TRIGGER_NUMERIC_IDS: &str =
    include_str!("../../adapters/webhook/tests/fixtures/trigger_numeric_ids.json");

/// The source of the issue, one workflow per ticket event type, and a rival tenant's workflow
/// on the same trigger that must never see acme's deliveries.
const SETUP: &str = r#"
[[source]]
kind = "webhook"
name = "zendesk-acme"
tenant = "acme"
signing_secret_env = "ZENDESK_ACME_SECRET"
account_id = 22129848

[[workflow]]
id = "triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 100 } ]

[[workflow]]
id = "comment-reply"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "webhook", event_type = "ticket.comment_added", priority = 50 } ]

[[workflow]]
id = "ticket-updates"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "webhook", event_type = "ticket.updated", priority = 10 } ]

[[workflow]]
id = "globex-triage"
tenant = "globex"
status = "live"
run_as = "globex-agent"
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 1000 } ]
"#;

const SOURCE: &str = "zendesk-acme";

async fn start(db: &TestDb, extra: &str) -> Daemon {
    Daemon::start(db, &config(db, &format!("{SETUP}{extra}")), &[SECRET_ENV]).await
}

/// An event-subscription fixture about `ticket`, with Zendesk event id `event_id`.
fn subscription(fixture: &str, event_id: &str, ticket: &str) -> Value {
    let mut body: Value = serde_json::from_str(fixture).expect("fixture is JSON");
    body["id"] = json!(event_id);
    body["detail"]["id"] = json!(ticket);
    body["subject"] = json!(format!("zen:ticket:{ticket}"));
    body
}

fn bytes(body: &Value) -> Vec<u8> {
    serde_json::to_vec(body).expect("serialise")
}

/// One request as Zendesk sends it: body bytes and headers, sent as they are.
#[derive(Debug, Clone)]
struct Delivery {
    body: Vec<u8>,
    headers: Vec<(&'static str, String)>,
}

/// `body` signed with the source's secret at `at`.
fn signed_at(body: impl Into<Vec<u8>>, at: DateTime<Utc>) -> Delivery {
    signed_with(SECRET, body, at)
}

/// `body` signed now.
fn signed(body: impl Into<Vec<u8>>) -> Delivery {
    signed_at(body, Utc::now())
}

fn signed_with(secret: &str, body: impl Into<Vec<u8>>, at: DateTime<Utc>) -> Delivery {
    let body = body.into();
    let timestamp = at.to_rfc3339_opts(SecondsFormat::Secs, true);
    let signature = sign(secret.as_bytes(), &timestamp, &body);
    Delivery {
        body,
        headers: vec![(SIGNATURE_HEADER, signature), (TIMESTAMP_HEADER, timestamp)],
    }
}

impl Delivery {
    fn with(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.to_owned()));
        self
    }

    fn without(mut self, name: &str) -> Self {
        self.headers.retain(|(n, _)| *n != name);
        self
    }

    /// Posts to `/v1/ingest/webhook/{source}`, without the admin token, as Zendesk would.
    async fn send_to(&self, daemon: &Daemon, source: &str) -> (StatusCode, Value) {
        let mut request = daemon
            .client()
            .post(daemon.url(&format!("/v1/ingest/webhook/{source}")))
            .header("content-type", "application/json")
            .body(self.body.clone());
        for (name, value) in &self.headers {
            request = request.header(*name, value);
        }
        super::harness::read(request.send().await.expect("POST webhook")).await
    }

    async fn send(&self, daemon: &Daemon) -> (StatusCode, Value) {
        self.send_to(daemon, SOURCE).await
    }
}

/// The issue's flow on every database: a signed `ticket.created` routes; the same delivery
/// again is a duplicate; another event on the ticket finds it locked; once the run finishes,
/// the ticket routes again.
#[tokio::test]
async fn signed_ticket_events_route_deduplicate_and_lock_on_every_backend() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = start(&db, "").await;
        let created = bytes(&subscription(TICKET_CREATED, "zd-evt-created-1", "5158"));

        let (status, first) = signed(created.clone()).send(&daemon).await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {first}");
        assert_eq!(first["outcome"], "routed", "{backend:?}: {first}");
        assert_eq!(first["workflow_id"], "triage");
        let run = run_id(&first);

        let ledger = daemon.intake("").await;
        assert_eq!(ledger.len(), 1, "{backend:?}: {ledger:?}");
        assert_eq!(ledger[0]["id"], first["intake_id"]);
        assert_eq!(ledger[0]["source"], SOURCE);
        assert_eq!(ledger[0]["delivery_id"], "zd-evt-created-1");
        assert_eq!(ledger[0]["event"]["channel"], "webhook");
        assert_eq!(ledger[0]["event"]["event_type"], "ticket.created");
        assert_eq!(ledger[0]["event"]["tenant_id"], "acme");
        assert_eq!(ledger[0]["event"]["target_entity_id"], "5158");
        // The bytes as signed are kept (`bytea` on PostgreSQL, written as an array there).
        let raw_ref = ledger[0]["event"]["raw_ref"].as_str().expect("a raw_ref");
        assert_eq!(
            daemon.raw(raw_ref).await.as_deref(),
            Ok(&created[..]),
            "{backend:?}"
        );

        // Zendesk retries a delivery it got no 2xx for; the retry is signed afresh.
        let (status, again) = signed(created).send(&daemon).await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {again}");
        assert_eq!(again["outcome"], "duplicate", "{backend:?}: {again}");
        assert_eq!(again["first_outcome"], "routed");
        assert_eq!(again["run_id"], run.as_str());
        assert_eq!(again["intake_id"], first["intake_id"]);
        assert_eq!(daemon.runs("").await.len(), 1, "{backend:?}");
        assert_eq!(daemon.intake("").await.len(), 1, "{backend:?}");

        // A comment on the same ticket, with a workflow of its own: the ticket is busy.
        let comment = bytes(&subscription(COMMENT_ADDED, "zd-evt-comment-1", "5158"));
        let (status, locked) = signed(comment).send(&daemon).await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {locked}");
        assert_eq!(locked["outcome"], "entity_locked", "{backend:?}: {locked}");
        assert_eq!(locked["held_by_run_id"], run.as_str());
        assert_eq!(locked["workflow_id"], "comment-reply");
        assert!(locked.get("run_id").is_none(), "{locked}");
        assert_eq!(daemon.runs("").await.len(), 1, "{backend:?}");

        let ledger = daemon.intake("source=zendesk-acme").await;
        let outcomes: Vec<&str> = ledger
            .iter()
            .filter_map(|r| r["outcome"].as_str())
            .collect();
        assert_eq!(outcomes, ["entity_locked", "routed"], "{backend:?}");
        assert_eq!(ledger[0]["held_by_run_id"], run.as_str());
        assert_eq!(ledger[0]["event"]["event_type"], "ticket.comment_added");
        assert_eq!(
            ledger[0]["event"]["payload"]["event"]["comment"]["body"],
            "We are investigating this issue and will update you shortly."
        );

        // The run finishes: the next comment on the ticket gets its own run.
        let (status, finished) = daemon.finish(&run, "completed").await;
        assert_eq!(status, StatusCode::OK, "{finished}");
        let comment = bytes(&subscription(COMMENT_ADDED, "zd-evt-comment-2", "5158"));
        let (status, routed) = signed(comment).send(&daemon).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(routed["outcome"], "routed", "{backend:?}: {routed}");
        assert_eq!(routed["workflow_id"], "comment-reply");
        assert_eq!(daemon.runs("").await.len(), 2, "{backend:?}");

        daemon.stop();
        db.drop_database().await;
    }
}

/// Every failed check is a 401 naming the check, decided before the store: no ledger row, no
/// run. The same body, correctly signed, then routes, so the refusals were about the checks.
#[tokio::test]
async fn refused_deliveries_are_401_with_the_failed_check_and_leave_no_trace() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let daemon = start(&db, "").await;
    let body = bytes(&subscription(TICKET_CREATED, "zd-evt-refused", "7001"));
    let now = Utc::now();

    // Signed for ticket 7001, delivered about ticket 7009.
    let mut altered = signed(body.clone());
    altered.body = String::from_utf8(altered.body)
        .expect("utf-8")
        .replace("7001", "7009")
        .into_bytes();
    let mut foreign = subscription(TICKET_CREATED, "zd-evt-foreign", "7002");
    foreign["account_id"] = json!(99999999);

    let cases: Vec<(&str, Delivery, &str)> = vec![
        (
            "signed with another secret",
            signed_with("not-the-secret", body.clone(), now),
            "bad_signature",
        ),
        ("body altered after signing", altered, "bad_signature"),
        (
            "timestamp six minutes old",
            signed_at(body.clone(), now - TimeDelta::minutes(6)),
            "stale_timestamp",
        ),
        (
            "timestamp six minutes ahead",
            signed_at(body.clone(), now + TimeDelta::minutes(6)),
            "future_timestamp",
        ),
        (
            "no signature header",
            signed(body.clone()).without(SIGNATURE_HEADER),
            "missing_signature",
        ),
        (
            "no timestamp header",
            signed(body.clone()).without(TIMESTAMP_HEADER),
            "missing_timestamp",
        ),
        (
            "unix-seconds timestamp",
            signed(body.clone())
                .without(TIMESTAMP_HEADER)
                .with(TIMESTAMP_HEADER, &now.timestamp().to_string()),
            "malformed_timestamp",
        ),
        (
            "another Zendesk account, correctly signed",
            signed(bytes(&foreign)),
            "account_mismatch",
        ),
    ];
    for (why, delivery, detail) in cases {
        let (status, answer) = delivery.send(&daemon).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{why}: {answer}");
        assert_eq!(answer["outcome"], "unauthorized_source", "{why}: {answer}");
        let text = answer["detail"].as_str().unwrap_or_default();
        assert!(
            text.starts_with(&format!("{detail}: ")),
            "{why}: `{text}` should start with `{detail}: `"
        );
        assert!(answer.get("intake_id").is_none(), "{why}: {answer}");
    }
    assert_eq!(daemon.intake("").await, Vec::<Value>::new());
    assert_eq!(daemon.runs("").await, Vec::<Value>::new());

    let (status, answer) = signed(body).send(&daemon).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["outcome"], "routed", "{answer}");
    assert_eq!(daemon.intake("").await.len(), 1);
    daemon.stop();
}

/// A correctly signed body that is not JSON is the sender's fault (400), but it was
/// authenticated, so it is recorded, and its bytes are kept for whoever debugs the trigger.
#[tokio::test]
async fn malformed_json_is_400_invalid_event_and_kept_byte_for_byte() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let daemon = start(&db, "").await;
    // What a trigger body with an unquoted, empty placeholder renders to.
    let body = br#"{"event_type": "ticket.updated", "ticket": {"id": , "subject": "Printer"}}"#;

    let (status, answer) = signed(&body[..]).send(&daemon).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["outcome"], "invalid_event", "{answer}");
    let detail = answer["detail"].as_str().unwrap_or_default();
    assert!(detail.starts_with("not_json: "), "{detail}");
    let intake_id = answer["intake_id"].as_str().expect("recorded").to_owned();

    let ledger = daemon.intake("outcome=invalid_event").await;
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(ledger[0]["id"], intake_id.as_str());
    assert_eq!(ledger[0]["source"], SOURCE);
    assert_eq!(ledger[0]["detail"], detail);
    assert_eq!(ledger[0]["event"], Value::Null, "no event could be built");
    let delivery_id = ledger[0]["delivery_id"].as_str().unwrap_or_default();
    assert!(delivery_id.starts_with("sha256:"), "{delivery_id}");
    assert!(daemon.runs("").await.is_empty());

    // The ledger row points at the raw delivery, whose id is the row's own.
    assert_eq!(ledger[0]["raw_ref"], format!("raw:{intake_id}").as_str());
    let stored = daemon
        .raw(&format!("raw:{intake_id}"))
        .await
        .expect("the raw bytes of an invalid delivery are kept");
    assert_eq!(stored, body, "kept byte for byte");

    // The same bytes again are the same delivery: nothing new is recorded.
    let (_, again) = signed(&body[..]).send(&daemon).await;
    assert_eq!(again["outcome"], "duplicate", "{again}");
    assert_eq!(again["first_outcome"], "invalid_event");
    assert_eq!(daemon.intake("").await.len(), 1);
    daemon.stop();
}

/// A ledger row is what an operator looks at; for an `invalid_event` it should point at the
/// bytes it could not read, as every other row does through `event.raw_ref`.
#[tokio::test]
async fn invalid_rows_name_their_raw_ref_in_the_ledger() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let daemon = start(&db, "").await;
    let body = b"{not json";
    let (status, answer) = signed(&body[..]).send(&daemon).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let ledger = daemon.intake("").await;
    assert_eq!(ledger.len(), 1);
    let raw_ref = ledger[0]["raw_ref"]
        .as_str()
        .unwrap_or_else(|| panic!("the ledger row names no raw_ref: {}", ledger[0]));
    assert_eq!(daemon.raw(raw_ref).await.as_deref(), Ok(&body[..]));
    daemon.stop();
}

/// Trigger-connected webhooks carry no event id: the invocation id header is the delivery id.
#[tokio::test]
async fn trigger_bodies_route_and_deduplicate_by_invocation_id() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let daemon = start(&db, "").await;
    let body = TRIGGER_NUMERIC_IDS.as_bytes();

    let (status, first) = signed(body)
        .with(INVOCATION_ID_HEADER, "01JH7TRIGGER0001")
        .send(&daemon)
        .await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["outcome"], "routed", "{first}");
    assert_eq!(first["workflow_id"], "ticket-updates");
    let run = run_id(&first);

    let ledger = daemon.intake("").await;
    // The invocation header is not signed, so a signed delivery is named by what was signed
    // (issue 32); the invocation still makes Zendesk's retries duplicates, below.
    let delivery_id = ledger[0]["delivery_id"].as_str().unwrap_or_default();
    assert!(delivery_id.starts_with("signed:"), "{delivery_id}");
    let event = &ledger[0]["event"];
    assert_eq!(event["event_type"], "ticket.updated");
    assert_eq!(event["target_entity_id"], "35436");
    assert_eq!(event["payload"]["connection"], "trigger");
    assert_eq!(event["payload"]["ticket_id"], "35436");
    assert_eq!(event["payload"]["status"], "pending");
    assert_eq!(event["payload"]["via_channel"], "mail");
    assert_eq!(event["payload"]["requester_id"], "20978392");
    assert_eq!(
        event["payload"]["account_id"],
        ACCOUNT_ID.to_string(),
        "the configured account when the body names none"
    );

    // The same invocation redelivered, signed at a later second: the first answer again.
    let (status, again) = signed_at(body, Utc::now() + TimeDelta::seconds(1))
        .with(INVOCATION_ID_HEADER, "01JH7TRIGGER0001")
        .send(&daemon)
        .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["outcome"], "duplicate", "{again}");
    assert_eq!(again["run_id"], run.as_str());

    // The same bytes from another invocation are new work, and find the ticket busy. (Signed
    // at another second: the same signature and timestamp would be a copy of the first, issue 32.)
    let (status, other) = signed_at(body, Utc::now() + TimeDelta::seconds(2))
        .with(INVOCATION_ID_HEADER, "01JH7TRIGGER0002")
        .send(&daemon)
        .await;
    assert_eq!(status, StatusCode::OK, "{other}");
    assert_eq!(other["outcome"], "entity_locked", "{other}");
    assert_eq!(other["held_by_run_id"], run.as_str());

    assert_eq!(daemon.runs("").await.len(), 1);
    assert_eq!(daemon.intake("").await.len(), 2);
    daemon.stop();
}

/// A name that is no webhook source is 404, even when a Slack source has it; a source that
/// explicitly skips signatures takes unsigned deliveries.
#[tokio::test]
async fn unknown_sources_are_404_and_an_insecure_source_takes_unsigned_deliveries() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let extra = r#"
[[source]]
kind = "webhook"
name = "zendesk-local"
tenant = "acme"
insecure_skip_signature = true

[[source]]
kind = "slack"
name = "acme-slack"
signing_secret_env = "SLACK_SIGNING_SECRET"
teams = { T0123ABC = "acme" }
"#;
    let daemon = Daemon::start(
        &db,
        &config(&db, &format!("{SETUP}{extra}")),
        &[SECRET_ENV, ("SLACK_SIGNING_SECRET", "slack-secret")],
    )
    .await;
    let body = bytes(&subscription(TICKET_CREATED, "zd-evt-local", "8001"));

    for name in ["zendesk-nope", "acme-slack"] {
        let (status, answer) = signed(body.clone()).send_to(&daemon, name).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{name}: {answer}");
    }
    assert!(daemon.intake("").await.is_empty());

    let unsigned = Delivery {
        body: body.clone(),
        headers: Vec::new(),
    };
    let (status, answer) = unsigned.send(&daemon).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{answer}");
    assert!(daemon.intake("").await.is_empty());

    let (status, answer) = unsigned.send_to(&daemon, "zendesk-local").await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["outcome"], "routed", "{answer}");
    assert_eq!(answer["workflow_id"], "triage");
    let ledger = daemon.intake("source=zendesk-local").await;
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0]["event"]["tenant_id"], "acme");
    daemon.stop();
}

/// What a workflow reads: the documented payload, the configured tenant whatever the body
/// claims, and a raw_ref to the original bytes.
#[tokio::test]
async fn the_ledger_event_has_the_documented_payload_and_the_configured_tenant() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let daemon = start(&db, "").await;
    let mut body = subscription(TICKET_CREATED, "zd-evt-payload", "5158");
    // A body that claims to be globex's: globex-triage would win if tenancy came from here.
    body["tenant_id"] = json!("globex");
    body["tenant"] = json!("globex");
    body["detail"]["tenant_id"] = json!("globex");
    let body = bytes(&body);

    let (status, answer) = signed(body.clone()).send(&daemon).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["outcome"], "routed", "{answer}");
    assert_eq!(
        answer["workflow_id"], "triage",
        "tenancy is acme's: {answer}"
    );
    assert!(daemon.intake("tenant=globex").await.is_empty());

    let ledger = daemon.intake("tenant=acme").await;
    assert_eq!(ledger.len(), 1);
    let event = &ledger[0]["event"];
    assert_eq!(event["tenant_id"], "acme");
    assert_eq!(
        event["payload"],
        json!({
            "ticket_id": "5158",
            "subject": "ticketinfo_2294a6e9ece2",
            "description": "ticket_info_desc_2294a6e9ece2",
            "status": "open",
            "priority": "low",
            "ticket_type": "task",
            "requester_id": "8447388090494",
            "assignee_id": "8447388090494",
            "organization_id": "8447346622462",
            "group_id": "8447320466430",
            "external_id": null,
            "tags": ["ticket-info-test-tag"],
            "via_channel": "web_service",
            "created_at": "2025-01-08T10:12:07Z",
            "updated_at": "2025-01-08T10:12:07Z",
            "occurred_at": "2025-01-08T10:12:07.672717030Z",
            "event": {},
            "source_event_type": "zen:event-type:ticket.created",
            "account_id": "22129848",
            "connection": "event_subscription",
        })
    );
    let raw_ref = event["raw_ref"].as_str().expect("raw_ref");
    assert_eq!(
        raw_ref,
        format!("raw:{}", ledger[0]["id"].as_str().unwrap_or_default())
    );
    assert_eq!(daemon.raw(raw_ref).await, Ok(body), "the original bytes");
    daemon.stop();
}
