//! Issue 32's attacks on the intake edge, each performed against the real daemon by a client
//! that holds no secret, and each checking that the victims' own signed traffic (Zendesk,
//! Slack and CloudEvents of acme, Zendesk of globex) still routes:
//! - defect 3: bodies trickled one byte at a time are cut off at a deadline over the whole
//!   body; trickles to an unknown source reserve nothing; one client address holds at most its
//!   share of the unverified-body budget and of the connections; a spent budget says so
//!   (`overloaded`), not "store unavailable";
//! - defect 4: a signed binary-mode CloudEvent resent with new `ce-*` headers is a duplicate;
//! - defect 5: a signed Zendesk delivery resent with new invocation ids is a duplicate, while
//!   Zendesk's own retry (signed afresh, same invocation) still is one.
//!
//! Timings are generous on purpose (a shared, noisy machine): a test asserts that a trickle is
//! cut off well before it could finish, never how close to its deadline.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use chrono::{SecondsFormat, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};
use switchyard_core::standard_webhooks::SigningKey;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedReadHalf;
use tokio::task::JoinHandle;

use super::harness::{Daemon, TOKEN, TestDb, config, event, read, run_id, unique};

const ZENDESK_SECRET: &str = "edge-zendesk-acme-secret";
const GLOBEX_SECRET: &str = "edge-zendesk-globex-secret";
const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const CE_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const ENV: [(&str, &str); 4] = [
    ("EDGE_ZENDESK_SECRET", ZENDESK_SECRET),
    ("EDGE_GLOBEX_SECRET", GLOBEX_SECRET),
    ("EDGE_SLACK_SECRET", SLACK_SECRET),
    ("EDGE_CE_SECRET", CE_SECRET),
];
const MESSAGE_PLAIN: &str = include_str!("../../adapters/slack/tests/fixtures/message_plain.json");

/// Two tenants' signed sources, and a workflow for each kind of delivery.
const SOURCES: &str = r#"
[[source]]
kind = "webhook"
name = "zendesk"
tenant = "acme"
signing_secret_env = "EDGE_ZENDESK_SECRET"

[[source]]
kind = "webhook"
name = "zendesk-globex"
tenant = "globex"
signing_secret_env = "EDGE_GLOBEX_SECRET"

[[source]]
kind = "slack"
name = "slack"
signing_secret_env = "EDGE_SLACK_SECRET"
teams = { T0123ABC = "acme" }

[[source]]
kind = "cloudevents"
name = "bus"
tenant = "acme"
signing_secret_env = "EDGE_CE_SECRET"

[[workflow]]
id = "tickets"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 10 } ]

[[workflow]]
id = "orders"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "webhook", event_type = "order.placed", priority = 10 } ]

[[workflow]]
id = "chat"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "slack", event_type = "message", priority = 10 } ]

[[workflow]]
id = "globex-tickets"
tenant = "globex"
status = "live"
run_as = "globex-agent"
triggers = [ { channel = "webhook", event_type = "ticket.created", priority = 10 } ]
"#;

/// The attacker's address and the victims': every loopback address reaches the daemon.
const ATTACKER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const VICTIM: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// A daemon on `db` with `server` keys added to `[server]`.
async fn start(db: &TestDb, server: &str) -> Daemon {
    let text = config(db, SOURCES).replace(
        "api_token_env = \"SWITCHYARD_API_TOKEN\"\n",
        &format!("api_token_env = \"SWITCHYARD_API_TOKEN\"\n{server}\n"),
    );
    Daemon::start(db, &text, &ENV).await
}

/// A TCP connection to the daemon from `local`.
async fn connect_from(local: Ipv4Addr, daemon: &Daemon) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket
        .bind(SocketAddr::new(IpAddr::V4(local), 0))
        .expect("bind a loopback address");
    socket.connect(daemon.addr).await.expect("connect")
}

/// A client that sends its request head whole, then its body one byte every `gap`, for as
/// long as the server reads; `answer` gives what the server sent back once it closed.
struct Trickle {
    reader: OwnedReadHalf,
    writer: JoinHandle<()>,
}

impl Trickle {
    async fn start(from: Ipv4Addr, daemon: &Daemon, head: &str, gap: Duration) -> Trickle {
        let stream = connect_from(from, daemon).await;
        let (reader, mut writer) = stream.into_split();
        // A connection past a cap is closed at once: the write may fail, the answer says so.
        let _ = writer.write_all(head.as_bytes()).await;
        let writer = tokio::spawn(async move {
            loop {
                if writer.write_all(b"x").await.is_err() {
                    return;
                }
                tokio::time::sleep(gap).await;
            }
        });
        Trickle { reader, writer }
    }

    /// What the server answered before it closed the connection, if it closed within `bound`.
    async fn answer_within(&mut self, bound: Duration) -> Option<String> {
        let mut seen = Vec::new();
        let mut buffer = [0u8; 4096];
        let closed = tokio::time::timeout(bound, async {
            loop {
                match self.reader.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => seen.extend_from_slice(&buffer[..n]),
                }
            }
        })
        .await;
        closed
            .ok()
            .map(|()| String::from_utf8_lossy(&seen).into_owned())
    }
}

impl Drop for Trickle {
    fn drop(&mut self) {
        self.writer.abort();
    }
}

/// The head of a POST to `path` declaring a `length`-byte JSON body.
fn head(path: &str, length: usize, extra: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: switchyard\r\ncontent-type: application/json\r\n\
         content-length: {length}\r\n{extra}\r\n"
    )
}

/// An HTTP client whose connections come from `local`.
fn client_from(local: Ipv4Addr) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::V4(local))
        .pool_max_idle_per_host(0)
        .build()
        .expect("a client")
}

/// A Zendesk trigger delivery signed with `secret` at `at`, as `invocation`.
fn zendesk_request(
    client: &reqwest::Client,
    daemon: &Daemon,
    source: &str,
    secret: &str,
    body: &[u8],
    at: chrono::DateTime<Utc>,
    invocation: &str,
) -> reqwest::RequestBuilder {
    let timestamp = at.to_rfc3339_opts(SecondsFormat::Secs, true);
    client
        .post(daemon.url(&format!("/v1/ingest/webhook/{source}")))
        .header("content-type", "application/json")
        .header(switchyard_webhook::TIMESTAMP_HEADER, &timestamp)
        .header(
            switchyard_webhook::SIGNATURE_HEADER,
            switchyard_webhook::sign(secret.as_bytes(), &timestamp, body),
        )
        .header(switchyard_webhook::INVOCATION_ID_HEADER, invocation)
        .body(body.to_vec())
}

/// A trigger body about a new ticket of its own.
fn ticket_body() -> Vec<u8> {
    json!({"event_type": "ticket.created", "ticket": {"id": unique("T")}})
        .to_string()
        .into_bytes()
}

/// A signed Slack message of its own.
fn slack_request(client: &reqwest::Client, daemon: &Daemon) -> reqwest::RequestBuilder {
    let mut body: Value = serde_json::from_str(MESSAGE_PLAIN).expect("fixture");
    body["event_id"] = json!(unique("Ev"));
    body["event"]["ts"] = json!(format!(
        "1355517523.{}",
        uuid::Uuid::now_v7().as_u128() % 1_000_000_000
    ));
    let bytes = serde_json::to_vec(&body).expect("json");
    let timestamp = Utc::now().timestamp();
    client
        .post(daemon.url("/v1/ingest/slack/slack"))
        .header("content-type", "application/json")
        .header("X-Slack-Request-Timestamp", timestamp.to_string())
        .header(
            "X-Slack-Signature",
            switchyard_slack::sign(SLACK_SECRET, timestamp, &bytes),
        )
        .body(bytes)
}

/// A signed structured CloudEvent of its own.
fn cloudevent_request(client: &reqwest::Client, daemon: &Daemon) -> reqwest::RequestBuilder {
    let body = json!({
        "specversion": "1.0", "id": unique("ce"), "source": "/shop", "type": "order.placed",
        "subject": unique("order"), "data": {"total": 12},
    })
    .to_string();
    let key = SigningKey::parse(CE_SECRET).expect("secret");
    let signed = switchyard_cloudevents::sign(
        &key,
        &unique("msg"),
        Utc::now().timestamp(),
        body.as_bytes(),
    );
    let mut request = client
        .post(daemon.url("/v1/ingest/cloudevents/bus"))
        .header("content-type", "application/cloudevents+json")
        .body(body);
    for (name, value) in signed {
        request = request.header(name, value);
    }
    request
}

/// Every victim's signed delivery from `client`, each answered as routed: acme's Zendesk, Slack
/// and CloudEvents, globex's Zendesk.
async fn victims_route(client: &reqwest::Client, daemon: &Daemon, when: &str) {
    let requests = [
        (
            "acme zendesk",
            zendesk_request(
                client,
                daemon,
                "zendesk",
                ZENDESK_SECRET,
                &ticket_body(),
                Utc::now(),
                &unique("inv"),
            ),
        ),
        (
            "globex zendesk",
            zendesk_request(
                client,
                daemon,
                "zendesk-globex",
                GLOBEX_SECRET,
                &ticket_body(),
                Utc::now(),
                &unique("inv"),
            ),
        ),
        ("acme slack", slack_request(client, daemon)),
        ("acme cloudevents", cloudevent_request(client, daemon)),
    ];
    for (victim, request) in requests {
        let (status, answer) = read(request.send().await.expect("a victim's delivery")).await;
        assert_eq!(
            (status, answer["outcome"].as_str()),
            (StatusCode::OK, Some("routed")),
            "{victim} {when}: {answer}"
        );
    }
}

/// Defect 3: `body_read_timeout` bounds the whole body, on the signed ingest endpoints and on
/// every other route: one byte a second, well inside any idle timeout, is cut off at the
/// deadline with 408 and a closed connection, long before its declared length could arrive.
#[tokio::test]
async fn a_trickled_body_is_cut_off_at_its_deadline_on_every_route() {
    let Some(db) = TestDb::create(super::harness::Backend::Sqlite).await else {
        return;
    };
    let daemon = start(&db, "body_read_timeout = \"2s\"").await;
    let gap = Duration::from_secs(1);
    // 120 bytes at one a second would take two minutes.
    let mut trickles = vec![
        Trickle::start(
            ATTACKER,
            &daemon,
            &head("/v1/ingest/webhook/zendesk", 120, ""),
            gap,
        )
        .await,
        Trickle::start(
            ATTACKER,
            &daemon,
            &head("/v1/ingest/cloudevents/bus", 120, ""),
            gap,
        )
        .await,
        Trickle::start(
            ATTACKER,
            &daemon,
            &head(
                "/v1/events",
                120,
                &format!("authorization: Bearer {TOKEN}\r\nidempotency-key: trickle\r\n"),
            ),
            gap,
        )
        .await,
    ];
    victims_route(&client_from(VICTIM), &daemon, "while bodies trickle").await;
    let started = Instant::now();
    for trickle in &mut trickles {
        let answer = trickle
            .answer_within(Duration::from_secs(40))
            .await
            .expect("a trickled body is cut off long before it could finish");
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("body_read_timeout"), "{answer}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "cut off well before the body could arrive"
    );
    // Nothing of the cut-off bodies was recorded: only the victims' four deliveries.
    let ledger = daemon.intake("").await;
    assert_eq!(ledger.len(), 4, "{ledger:#?}");
    assert!(
        ledger.iter().all(|row| row["outcome"] == "routed"),
        "{ledger:#?}"
    );
    daemon.stop();
}

/// Defect 3: a body to a source that does not exist is answered 404 before it is read and
/// reserves nothing, so any number of them, declaring a body limit each, leave every signed
/// delivery routing, from the attacker's own address too.
#[tokio::test]
async fn trickles_to_an_unknown_source_reserve_nothing() {
    let Some(db) = TestDb::create(super::harness::Backend::Sqlite).await else {
        return;
    };
    let daemon = start(
        &db,
        "body_limit = 65536\nunverified_body_budget = 131072\nbody_read_timeout = \"30s\"",
    )
    .await;
    let mut trickles = Vec::new();
    for path in [
        "/v1/ingest/webhook/does-not-exist",
        "/v1/ingest/slack/does-not-exist",
        "/v1/ingest/slack/does-not-exist/interactivity",
        "/v1/ingest/cloudevents/does-not-exist",
    ] {
        for _ in 0..8 {
            trickles.push(
                Trickle::start(
                    ATTACKER,
                    &daemon,
                    &head(path, 65536, ""),
                    Duration::from_secs(1),
                )
                .await,
            );
        }
    }
    for trickle in &mut trickles {
        let answer = trickle
            .answer_within(Duration::from_secs(10))
            .await
            .expect("answered and closed at once, the body unread");
        assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    }
    victims_route(
        &client_from(VICTIM),
        &daemon,
        "after unknown-source trickles",
    )
    .await;
    victims_route(
        &client_from(ATTACKER),
        &daemon,
        "from the attacker's address",
    )
    .await;
    daemon.stop();
}

/// Defect 3: one client address trickling bodies to a real source holds at most its share of
/// the unverified-body budget (the rest of its requests are 503 `overloaded`, naming the share)
/// and of the connections; another client's signed deliveries route and `/healthz` answers
/// meanwhile.
#[tokio::test]
async fn a_trickling_client_holds_only_its_share_of_the_budget_and_the_connections() {
    let Some(db) = TestDb::create(super::harness::Backend::Sqlite).await else {
        return;
    };
    // Four bodies in all, two per client; sixteen connections, eight per client.
    let daemon = start(
        &db,
        "body_limit = 65536\nunverified_body_budget = 262144\nclient_share = 0.5\n\
         max_connections = 16\nbody_read_timeout = \"20s\"\nheader_read_timeout = \"20s\"",
    )
    .await;
    let mut trickles = Vec::new();
    for _ in 0..16 {
        trickles.push(
            Trickle::start(
                ATTACKER,
                &daemon,
                &head("/v1/ingest/webhook/zendesk", 65536, ""),
                Duration::from_secs(1),
            )
            .await,
        );
    }
    let mut held = 0;
    let mut overloaded = 0;
    for trickle in &mut trickles {
        match trickle.answer_within(Duration::from_secs(3)).await {
            None => held += 1,
            Some(answer) if answer.starts_with("HTTP/1.1 503") => {
                overloaded += 1;
                assert!(answer.contains("\"error\":\"overloaded\""), "{answer}");
                assert!(answer.contains("share"), "{answer}");
                assert!(!answer.contains("store"), "{answer}");
                assert!(
                    answer.to_ascii_lowercase().contains("retry-after"),
                    "{answer}"
                );
            }
            // Past its share of the connections: closed at once, unanswered.
            Some(answer) => assert!(answer.is_empty(), "{answer}"),
        }
    }
    assert!(
        held <= 2,
        "one client holds at most its share of the budget: {held}"
    );
    assert!(overloaded >= 1, "its other bodies were refused");

    // Slow headers hold connections too, but only the client's share of them.
    let mut slow_heads = Vec::new();
    for _ in 0..16 {
        let mut stream = connect_from(ATTACKER, &daemon).await;
        let _ = stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
            .await;
        slow_heads.push(stream);
    }
    let victim = client_from(VICTIM);
    let health = victim
        .get(daemon.url("/healthz"))
        .send()
        .await
        .expect("/healthz answers another client while one holds its share");
    assert_eq!(health.status(), StatusCode::OK);
    victims_route(&victim, &daemon, "while one client holds its share").await;
    assert!(
        daemon
            .wait_for_log(
                "connection cap reached for one client address",
                Duration::from_secs(5)
            )
            .await,
        "the per-client cap is logged"
    );
    drop(slow_heads);
    drop(trickles);
    daemon.stop();
}

/// Defect 3: when the budget is spent (several clients, each within its share), a delivery is
/// answered 503 `overloaded` with Retry-After, its detail naming the unverified-body budget,
/// not the store; once the held bodies' deadline passes, the same delivery routes.
#[tokio::test]
async fn a_spent_budget_is_503_overloaded_naming_the_budget_not_the_store() {
    let Some(db) = TestDb::create(super::harness::Backend::Sqlite).await else {
        return;
    };
    // Two bodies in all, one per client.
    let daemon = start(
        &db,
        "body_limit = 65536\nunverified_body_budget = 131072\nclient_share = 0.5\n\
         body_read_timeout = \"4s\"",
    )
    .await;
    let mut holders = Vec::new();
    for from in [Ipv4Addr::new(127, 0, 0, 3), Ipv4Addr::new(127, 0, 0, 4)] {
        holders.push(
            Trickle::start(
                from,
                &daemon,
                &head("/v1/ingest/cloudevents/bus", 65536, ""),
                Duration::from_secs(1),
            )
            .await,
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let client = client_from(Ipv4Addr::new(127, 0, 0, 5));
    let body = ticket_body();
    let signed_at = Utc::now();
    let response = zendesk_request(
        &client,
        &daemon,
        "zendesk",
        ZENDESK_SECRET,
        &body,
        signed_at,
        "inv-while-spent",
    )
    .send()
    .await
    .expect("send");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("retry-after"));
    let (_, answer) = read(response).await;
    assert_eq!(answer["error"], "overloaded", "{answer}");
    let detail = answer["detail"].as_str().expect("detail");
    assert!(detail.contains("unverified-body budget"), "{detail}");
    assert!(!detail.contains("store"), "{detail}");

    // The holders are cut off at their deadline; the budget comes back.
    for holder in &mut holders {
        let answer = holder.answer_within(Duration::from_secs(30)).await;
        assert!(
            answer
                .as_deref()
                .is_some_and(|a| a.starts_with("HTTP/1.1 408")),
            "{answer:?}"
        );
    }
    let (status, answer) = read(
        zendesk_request(
            &client,
            &daemon,
            "zendesk",
            ZENDESK_SECRET,
            &body,
            signed_at,
            "inv-while-spent",
        )
        .send()
        .await
        .expect("send"),
    )
    .await;
    assert_eq!(
        (status, answer["outcome"].as_str()),
        (StatusCode::OK, Some("routed")),
        "{answer}"
    );
    daemon.stop();
}

/// Defect 4: binary mode's `ce-*` headers are outside the Standard Webhooks signature. One
/// captured signed request, resent with a new `ce-id`, `ce-type` and `ce-subject`, is a
/// duplicate of the first (its signed `webhook-id`), and makes no run; the publisher's next
/// message routes.
#[tokio::test]
async fn a_binary_cloudevent_resent_with_new_ce_headers_is_a_duplicate() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = start(&db, "").await;
        let key = SigningKey::parse(CE_SECRET).expect("secret");
        let body = br#"{"total": 12}"#;
        let signed = switchyard_cloudevents::sign(&key, "msg_edge_1", Utc::now().timestamp(), body);
        let send = |id: String, kind: &'static str, subject: String| {
            let mut request = daemon
                .client()
                .post(daemon.url("/v1/ingest/cloudevents/bus"))
                .header("content-type", "application/json")
                .header("ce-specversion", "1.0")
                .header("ce-source", "/shop")
                .header("ce-id", id)
                .header("ce-type", kind)
                .header("ce-subject", subject)
                .body(body.to_vec());
            for (name, value) in &signed {
                request = request.header(*name, value);
            }
            async move { read(request.send().await.expect("send")).await }
        };
        let (status, first) = send("order-1".into(), "order.placed", "ORDER-1".into()).await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {first}");
        assert_eq!(first["outcome"], "routed", "{backend:?}: {first}");
        let run = run_id(&first);

        for n in 0..4 {
            let (status, again) = send(
                format!("forged-{n}"),
                if n % 2 == 0 {
                    "order.placed"
                } else {
                    "ticket.created"
                },
                format!("CHOSEN-{n}"),
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{backend:?}: {again}");
            assert_eq!(again["outcome"], "duplicate", "{backend:?}: {again}");
            assert_eq!(again["run_id"], run.as_str(), "{backend:?}");
        }
        let runs = daemon.runs("").await;
        assert_eq!(runs.len(), 1, "{backend:?}: {runs:#?}");
        let ledger = daemon.intake("source=bus").await;
        assert_eq!(ledger.len(), 1, "{backend:?}");
        assert_eq!(ledger[0]["delivery_id"], "webhook-id:msg_edge_1");
        assert_eq!(ledger[0]["event"]["target_entity_id"], "ORDER-1");

        // The publisher's next messages, signed as such, are new work: one structured, one in
        // binary mode with an id longer than the store's keys (kept as a digest).
        let (status, next) = read(
            cloudevent_request(daemon.client(), &daemon)
                .send()
                .await
                .expect("send"),
        )
        .await;
        assert_eq!(
            (status, next["outcome"].as_str()),
            (StatusCode::OK, Some("routed")),
            "{backend:?}: {next}"
        );
        let long =
            switchyard_cloudevents::sign(&key, &"m".repeat(300), Utc::now().timestamp(), body);
        let mut request = daemon
            .client()
            .post(daemon.url("/v1/ingest/cloudevents/bus"))
            .header("content-type", "application/json")
            .header("ce-specversion", "1.0")
            .header("ce-source", "/shop")
            .header("ce-id", "i".repeat(400))
            .header("ce-type", "order.placed")
            .header("ce-subject", unique("ORDER"))
            .body(body.to_vec());
        for (name, value) in &long {
            request = request.header(*name, value);
        }
        let (status, next) = read(request.send().await.expect("send")).await;
        assert_eq!(
            (status, next["outcome"].as_str()),
            (StatusCode::OK, Some("routed")),
            "{backend:?}: {next}"
        );
        daemon.stop();
        db.drop_database().await;
    }
}

/// Defect 5: the invocation id header is not signed. A captured signed Zendesk delivery resent
/// with new invocation ids is a duplicate of the first (same signature and timestamp); Zendesk's
/// own retry, signed afresh under the same invocation, is a duplicate too; another ticket's
/// delivery and globex's deliveries route.
#[tokio::test]
async fn a_zendesk_delivery_resent_with_new_invocation_ids_is_a_duplicate() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = start(&db, "").await;
        let client = daemon.client();
        let body = ticket_body();
        let signed_at = Utc::now();
        let send = |at, invocation: &str| {
            zendesk_request(
                client,
                &daemon,
                "zendesk",
                ZENDESK_SECRET,
                &body,
                at,
                invocation,
            )
            .send()
        };
        let (status, first) = read(send(signed_at, "inv-genuine").await.expect("send")).await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {first}");
        assert_eq!(first["outcome"], "routed", "{backend:?}: {first}");
        let run = run_id(&first);

        for n in 0..4 {
            let (status, again) = read(
                send(signed_at, &format!("inv-forged-{n}"))
                    .await
                    .expect("send"),
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{backend:?}: {again}");
            assert_eq!(again["outcome"], "duplicate", "{backend:?}: {again}");
            assert_eq!(again["run_id"], run.as_str(), "{backend:?}");
        }
        // Zendesk's retry: the same invocation, signed again two seconds later.
        let (_, retry) = read(
            send(signed_at + chrono::TimeDelta::seconds(2), "inv-genuine")
                .await
                .expect("send"),
        )
        .await;
        assert_eq!(retry["outcome"], "duplicate", "{backend:?}: {retry}");
        assert_eq!(retry["run_id"], run.as_str(), "{backend:?}");

        let runs = daemon.runs("").await;
        assert_eq!(runs.len(), 1, "{backend:?}: {runs:#?}");
        assert_eq!(
            daemon.intake("source=zendesk").await.len(),
            1,
            "{backend:?}"
        );

        // An invocation id as long as the adapter takes still makes a storable second key.
        let (status, long) = read(
            zendesk_request(
                client,
                &daemon,
                "zendesk",
                ZENDESK_SECRET,
                &ticket_body(),
                Utc::now(),
                &"v".repeat(255),
            )
            .send()
            .await
            .expect("send"),
        )
        .await;
        assert_eq!(
            (status, long["outcome"].as_str()),
            (StatusCode::OK, Some("routed")),
            "{backend:?}: {long}"
        );

        // The victims' own traffic: other tickets, other tenants.
        victims_route(client, &daemon, "after the resends").await;
        let (status, api) = daemon
            .post_event(
                &unique("key"),
                &event("webhook", "ticket.created", "acme", &unique("A")),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {api}");
        daemon.stop();
        db.drop_database().await;
    }
}
