//! Slack Events API callbacks end to end: real `v0` signatures over real HTTP on
//! `POST /v1/ingest/slack/{name}`, what each callback becomes, and what is refused.

use chrono::Utc;
use reqwest::StatusCode;
use serde_json::{Value, json};
use switchyard_slack::sign;

use super::harness::{Backend, Daemon, TestDb, config, run_id};

const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const SECRET_ENV: (&str, &str) = ("SLACK_SIGNING_SECRET", SECRET);
const SOURCE: &str = "acme-slack";
const CHANNEL: &str = "C123ABC456";

const URL_VERIFICATION: &str =
    include_str!("../../adapters/slack/tests/fixtures/url_verification.json");
const MESSAGE_PLAIN: &str = include_str!("../../adapters/slack/tests/fixtures/message_plain.json");
const MESSAGE_IN_THREAD: &str =
    include_str!("../../adapters/slack/tests/fixtures/message_in_thread.json");
const MESSAGE_URGENT: &str =
    include_str!("../../adapters/slack/tests/fixtures/message_urgent_keyword.json");
const MESSAGE_URGENTLY: &str =
    include_str!("../../adapters/slack/tests/fixtures/message_urgently.json");
const MESSAGE_MENTIONING_APP: &str =
    include_str!("../../adapters/slack/tests/fixtures/message_mentioning_app.json");
const APP_MENTION: &str = include_str!("../../adapters/slack/tests/fixtures/app_mention.json");
const BOT_MESSAGE_BOT_ID: &str =
    include_str!("../../adapters/slack/tests/fixtures/bot_message_bot_id.json");
const BOT_MESSAGE_SUBTYPE: &str =
    include_str!("../../adapters/slack/tests/fixtures/bot_message_subtype.json");
const CHANNEL_JOIN: &str = include_str!("../../adapters/slack/tests/fixtures/channel_join.json");
const REACTION_ADDED: &str =
    include_str!("../../adapters/slack/tests/fixtures/reaction_added.json");

/// The source of the issue, a workflow for ordinary messages, one for urgent ones, and one for
/// mentions of the app.
const SETUP: &str = r#"
[[source]]
kind = "slack"
name = "acme-slack"
signing_secret_env = "SLACK_SIGNING_SECRET"
teams = { T0123ABC = "acme" }
urgent_keywords = ["urgent"]

[[workflow]]
id = "slack-triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "slack", event_type = "message", priority = 10 } ]

[[workflow]]
id = "slack-incident"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "slack", event_type = "urgent_message", priority = 100 } ]

[[workflow]]
id = "slack-mention"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "slack", event_type = "app_mention", priority = 10 } ]
"#;

async fn start(db: &TestDb) -> Daemon {
    Daemon::start(db, &config(db, SETUP), &[SECRET_ENV]).await
}

fn fixture(text: &str) -> Value {
    serde_json::from_str(text).expect("fixture is JSON")
}

/// A fixture with its envelope's `event_id` and its event's channel and `ts` replaced.
fn callback(text: &str, event_id: &str, ts: &str) -> Value {
    let mut body = fixture(text);
    body["event_id"] = json!(event_id);
    body["event"]["channel"] = json!(CHANNEL);
    body["event"]["ts"] = json!(ts);
    body
}

/// One request as Slack sends it.
#[derive(Debug, Clone)]
struct Request {
    body: Vec<u8>,
    headers: Vec<(&'static str, String)>,
}

/// `body` signed with `secret` at `timestamp` (Unix seconds).
fn signed_with(secret: &str, body: impl Into<Vec<u8>>, timestamp: i64) -> Request {
    let body = body.into();
    let signature = sign(secret, timestamp, &body);
    Request {
        body,
        headers: vec![
            ("X-Slack-Request-Timestamp", timestamp.to_string()),
            ("X-Slack-Signature", signature),
        ],
    }
}

/// `body` signed with the app's secret now.
fn signed(body: impl Into<Vec<u8>>) -> Request {
    signed_with(SECRET, body, Utc::now().timestamp())
}

fn json_bytes(body: &Value) -> Vec<u8> {
    serde_json::to_vec(body).expect("serialise")
}

impl Request {
    fn with(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.to_owned()));
        self
    }

    fn without(mut self, name: &str) -> Self {
        self.headers.retain(|(n, _)| *n != name);
        self
    }

    async fn response(&self, daemon: &Daemon, source: &str) -> reqwest::Response {
        let mut request = daemon
            .client()
            .post(daemon.url(&format!("/v1/ingest/slack/{source}")))
            .header("content-type", "application/json")
            .body(self.body.clone());
        for (name, value) in &self.headers {
            request = request.header(*name, value);
        }
        request.send().await.expect("POST slack")
    }

    async fn send_to(&self, daemon: &Daemon, source: &str) -> (StatusCode, Value) {
        super::harness::read(self.response(daemon, source).await).await
    }

    async fn send(&self, daemon: &Daemon) -> (StatusCode, Value) {
        self.send_to(daemon, SOURCE).await
    }
}

/// Slack checks a request URL with a signed challenge: it must come back as plain text, and
/// it is no delivery.
#[tokio::test]
async fn url_verification_answers_the_challenge_as_text_and_records_nothing() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let daemon = start(&db).await;
    let response = signed(URL_VERIFICATION).response(&daemon, SOURCE).await;
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    assert_eq!(
        response.text().await.expect("body"),
        "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    );

    // Unsigned, the challenge is refused like anything else.
    let (status, answer) = signed(URL_VERIFICATION)
        .without("X-Slack-Signature")
        .send(&daemon)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{answer}");
    assert_eq!(answer["detail"], "missing_signature");

    assert!(daemon.intake("").await.is_empty());
    assert!(daemon.runs("").await.is_empty());
    daemon.stop();
}

/// The issue's flow on every database: a message routes, an urgent one goes to the incident
/// workflow, a reply in the first one's thread finds the thread locked, and Slack's retry of a
/// delivery is a duplicate answered 200.
#[tokio::test]
async fn messages_route_urgent_ones_differ_threads_lock_and_retries_are_duplicates() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = start(&db).await;

        let plain = json_bytes(&fixture(MESSAGE_PLAIN));
        let (status, first) = signed(plain.clone()).send(&daemon).await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {first}");
        assert_eq!(first["outcome"], "routed", "{backend:?}: {first}");
        assert_eq!(first["workflow_id"], "slack-triage");
        let root_run = run_id(&first);

        let ledger = daemon.intake("").await;
        assert_eq!(ledger[0]["source"], SOURCE);
        assert_eq!(ledger[0]["delivery_id"], "Ev0PLAIN001");
        let event = &ledger[0]["event"];
        assert_eq!(event["channel"], "slack");
        assert_eq!(event["event_type"], "message");
        assert_eq!(event["tenant_id"], "acme");
        assert_eq!(event["target_entity_id"], "C123ABC456:1355517523.000005");
        assert_eq!(event["payload"]["text"], "Hello world");
        assert_eq!(event["payload"]["user_id"], "U123ABC456");

        let (status, urgent) = signed(MESSAGE_URGENT).send(&daemon).await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {urgent}");
        assert_eq!(urgent["outcome"], "routed", "{backend:?}: {urgent}");
        assert_eq!(urgent["workflow_id"], "slack-incident");
        let ledger = daemon.intake("limit=1").await;
        assert_eq!(ledger[0]["event"]["event_type"], "urgent_message");
        assert_eq!(
            ledger[0]["event"]["payload"]["urgent_rule"],
            "keyword:urgent"
        );

        // "urgently" is not the keyword "urgent": an ordinary message.
        let (_, not_urgent) = signed(MESSAGE_URGENTLY).send(&daemon).await;
        assert_eq!(not_urgent["outcome"], "routed", "{backend:?}: {not_urgent}");
        assert_eq!(not_urgent["workflow_id"], "slack-triage");

        // A reply in the first message's thread: same entity, held by the root's run.
        let mut reply = callback(MESSAGE_IN_THREAD, "Ev0REPLY001", "1355517600.000100");
        reply["event"]["thread_ts"] = json!("1355517523.000005");
        let (status, locked) = signed(json_bytes(&reply)).send(&daemon).await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {locked}");
        assert_eq!(locked["outcome"], "entity_locked", "{backend:?}: {locked}");
        assert_eq!(locked["held_by_run_id"], root_run.as_str());
        assert_eq!(locked["workflow_id"], "slack-triage");
        let ledger = daemon.intake("outcome=entity_locked").await;
        assert_eq!(
            ledger[0]["event"]["target_entity_id"],
            "C123ABC456:1355517523.000005"
        );

        // Slack did not see our 200 in time and retries, signed afresh.
        let (status, retry) = signed(plain)
            .with("X-Slack-Retry-Num", "1")
            .with("X-Slack-Retry-Reason", "http_timeout")
            .send(&daemon)
            .await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {retry}");
        assert_eq!(retry["outcome"], "duplicate", "{backend:?}: {retry}");
        assert_eq!(retry["first_outcome"], "routed");
        assert_eq!(retry["run_id"], root_run.as_str());

        assert_eq!(daemon.runs("").await.len(), 3, "{backend:?}");
        assert_eq!(daemon.intake("").await.len(), 4, "{backend:?}");
        daemon.stop();
        db.drop_database().await;
    }
}

/// A message that mentions the app arrives as `message` and as `app_mention`, with different
/// event ids, in either order. With a workflow on each, it still makes one run.
#[tokio::test]
async fn message_and_app_mention_of_one_message_make_one_run_in_either_order() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = start(&db).await;

        // message first.
        let ts = "1515449522.000016";
        let (_, message) = signed(json_bytes(&callback(MESSAGE_MENTIONING_APP, "Ev1MSG", ts)))
            .send(&daemon)
            .await;
        assert_eq!(message["outcome"], "routed", "{backend:?}: {message}");
        assert_eq!(message["workflow_id"], "slack-triage");
        let (status, mention) = signed(json_bytes(&callback(APP_MENTION, "Ev1MENTION", ts)))
            .send(&daemon)
            .await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {mention}");
        assert_eq!(mention["outcome"], "duplicate", "{backend:?}: {mention}");
        assert_eq!(mention["run_id"], message["run_id"]);

        // app_mention first, on another message.
        let ts = "1515449600.000200";
        let (_, mention) = signed(json_bytes(&callback(APP_MENTION, "Ev2MENTION", ts)))
            .send(&daemon)
            .await;
        assert_eq!(mention["outcome"], "routed", "{backend:?}: {mention}");
        assert_eq!(mention["workflow_id"], "slack-mention");
        let (status, message) = signed(json_bytes(&callback(MESSAGE_MENTIONING_APP, "Ev2MSG", ts)))
            .send(&daemon)
            .await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {message}");
        assert_eq!(message["outcome"], "duplicate", "{backend:?}: {message}");
        assert_eq!(message["run_id"], mention["run_id"]);

        assert_eq!(
            daemon.runs("").await.len(),
            2,
            "{backend:?}: one run per message"
        );
        let routed = daemon.intake("outcome=routed").await;
        assert_eq!(routed.len(), 2, "{backend:?}");
        daemon.stop();
        db.drop_database().await;
    }
}

/// Posts by bots (including our own workflows') and housekeeping posts are excluded by rule:
/// answered 200, recorded with the rule's name, no run, even though a workflow triggers on
/// `message`.
#[tokio::test]
async fn bot_and_housekeeping_posts_are_ineligible_and_recorded() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let daemon = start(&db).await;
    let cases = [
        (BOT_MESSAGE_BOT_ID, "Ev0BOTPOST1", "bot_message"),
        (BOT_MESSAGE_SUBTYPE, "Ev0BOTMSG01", "bot_message"),
        (CHANNEL_JOIN, "Ev0JOIN0001", "channel_join"),
        (
            REACTION_ADDED,
            "Ev0REACTION",
            "unsupported_event_type:reaction_added",
        ),
    ];
    for (body, event_id, detail) in cases {
        let (status, answer) = signed(body).send(&daemon).await;
        assert_eq!(status, StatusCode::OK, "{event_id}: {answer}");
        assert_eq!(answer["outcome"], "ineligible", "{event_id}: {answer}");
        assert_eq!(answer["detail"], detail, "{event_id}");
        assert!(answer["intake_id"].is_string(), "recorded: {answer}");
        assert!(answer.get("run_id").is_none(), "{answer}");
    }

    let ledger = daemon.intake("outcome=ineligible").await;
    let recorded: Vec<(&str, &str)> = ledger
        .iter()
        .rev()
        .map(|r| {
            (
                r["delivery_id"].as_str().unwrap_or_default(),
                r["detail"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    let expected: Vec<(&str, &str)> = cases.iter().map(|(_, id, d)| (*id, *d)).collect();
    assert_eq!(recorded, expected);
    // The bot's post in a thread still says which thread it was about.
    let bot_post = &ledger[ledger.len() - 1]["event"];
    assert_eq!(bot_post["target_entity_id"], "C123ABC456:1482960137.003543");
    assert_eq!(bot_post["payload"]["bot_id"], "B0LAN0Z89");
    assert_eq!(daemon.intake("").await.len(), cases.len());
    assert!(daemon.runs("").await.is_empty());
    daemon.stop();
}

/// Refused before the store: a wrong, missing or stale signature, or a team no tenant claims.
/// Nothing is recorded; the same message, correctly signed, then routes.
#[tokio::test]
async fn bad_signatures_and_unknown_teams_are_401_and_record_nothing() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let daemon = start(&db).await;
    let body = json_bytes(&fixture(MESSAGE_PLAIN));
    let now = Utc::now().timestamp();
    let mut other_team = fixture(MESSAGE_PLAIN);
    other_team["team_id"] = json!("T0GLOBEX");
    let mut altered = signed(body.clone());
    altered.body = String::from_utf8(altered.body)
        .expect("utf-8")
        .replace("Hello world", "Hello world!")
        .into_bytes();

    let cases: Vec<(&str, Request, &str)> = vec![
        (
            "another secret",
            signed_with("not-the-secret", body.clone(), now),
            "bad_signature",
        ),
        ("body altered after signing", altered, "bad_signature"),
        (
            "six minutes old",
            signed_with(SECRET, body.clone(), now - 360),
            "stale_timestamp",
        ),
        (
            "six minutes ahead",
            signed_with(SECRET, body.clone(), now + 360),
            "stale_timestamp",
        ),
        (
            "no signature",
            signed(body.clone()).without("X-Slack-Signature"),
            "missing_signature",
        ),
        (
            "no timestamp",
            signed(body.clone()).without("X-Slack-Request-Timestamp"),
            "missing_timestamp",
        ),
        (
            "unknown team, correctly signed",
            signed(json_bytes(&other_team)),
            "no tenant claims team T0GLOBEX",
        ),
    ];
    for (why, request, detail) in cases {
        let (status, answer) = request.send(&daemon).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{why}: {answer}");
        assert_eq!(answer["outcome"], "unauthorized_source", "{why}: {answer}");
        assert_eq!(answer["detail"], detail, "{why}");
        assert!(answer.get("intake_id").is_none(), "{why}: {answer}");
    }
    let (status, _) = signed(body.clone()).send_to(&daemon, "globex-slack").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    assert!(daemon.intake("").await.is_empty());
    assert!(daemon.runs("").await.is_empty());

    let (status, answer) = signed(body).send(&daemon).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["outcome"], "routed", "{answer}");
    assert_eq!(daemon.intake("").await.len(), 1);
    daemon.stop();
}

/// Signed but unreadable callbacks are recorded as `invalid_event` and answered 200: Slack
/// retries every non-2xx, and no retry can fix the body. The bytes are kept.
#[tokio::test]
async fn malformed_callbacks_are_invalid_event_answered_200_and_recorded() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let daemon = start(&db).await;
    let mut no_event_id = fixture(MESSAGE_PLAIN);
    no_event_id
        .as_object_mut()
        .expect("object")
        .remove("event_id");
    let mut no_ts = fixture(MESSAGE_PLAIN);
    no_ts["event_id"] = json!("Ev0NOTS0001");
    no_ts["event"].as_object_mut().expect("object").remove("ts");
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (json_bytes(&no_event_id), "missing_field:event_id"),
        (json_bytes(&no_ts), "missing_field:event.ts"),
        (b"{\"type\": \"event_callback\", ".to_vec(), "not_json"),
        (
            json_bytes(&json!({"type": "block_actions", "team_id": "T0123ABC"})),
            "unsupported_callback_type:block_actions",
        ),
    ];
    for (body, detail) in &cases {
        let (status, answer) = signed(body.clone()).send(&daemon).await;
        assert_eq!(status, StatusCode::OK, "{detail}: {answer}");
        assert_eq!(answer["outcome"], "invalid_event", "{detail}: {answer}");
        assert_eq!(answer["detail"], *detail);
        let intake_id = answer["intake_id"].as_str().expect("recorded");

        let raw = daemon.raw(&format!("raw:{intake_id}")).await;
        assert_eq!(raw.as_deref(), Ok(body.as_slice()), "{detail}");
    }
    let ledger = daemon.intake("outcome=invalid_event").await;
    assert_eq!(ledger.len(), cases.len());
    assert!(
        ledger
            .iter()
            .all(|r| r["source"] == SOURCE && r["event"].is_null())
    );
    assert!(daemon.runs("").await.is_empty());
    daemon.stop();
}
