//! Alerts end to end: a quiet source fires one alert, notifies a signed webhook (verified by
//! a local worker) and Slack (a local Web API peer that checks the bot token), and resolves
//! when deliveries resume; a notifier that is down shows in `/readyz` and gets the
//! notification once it is back; two replicas on PostgreSQL raise one alert and send one
//! notification; failed answers to a Slack source raise `provider_disable_risk` before 5% of
//! the hour's deliveries are bad. Submodules: `replicas` (an alert each replica judges from its
//! own health stays one alert across replicas and does not flap), `intake` (a failing writer),
//! `hours` (business hours), `mailbox` (a stalled mailbox resolving), `order` (a `resolved`
//! reaches a webhook only after its retried `fired`), `smtp_auth`.

mod hours;
mod intake;
mod mailbox;
mod order;
mod replicas;
mod smtp_auth;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode as AxumStatus};
use axum::routing::post;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use super::harness::{Backend, Daemon, TestDb, config, event, serve_local, unique};

const BOT_TOKEN: &str = "xoxb-test-alerts-token";
const KEY: &[u8] = b"alerts-test-signing-key-32-bytes";

fn secret() -> String {
    format!("whsec_{}", BASE64.encode(KEY))
}

/// What the local peers received.
#[derive(Debug, Default)]
struct Seen {
    /// Webhook bodies accepted (signature verified), as JSON.
    webhooks: Vec<Value>,
    /// Webhook requests refused while "down" or for a bad signature.
    refused: usize,
    /// Slack Web API calls: (method, form or JSON body).
    slack: Vec<(String, Value)>,
    /// Slack calls with a wrong token.
    bad_tokens: usize,
}

#[derive(Debug, Default)]
struct Peers {
    seen: Mutex<Seen>,
    webhook_down: AtomicBool,
}

fn verify(headers: &HeaderMap, body: &[u8]) -> bool {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    };
    let (id, timestamp) = (header("webhook-id"), header("webhook-timestamp"));
    let mut mac = Hmac::<Sha256>::new_from_slice(KEY).expect("key");
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    let expected = mac.finalize().into_bytes();
    !id.is_empty()
        && header("webhook-signature")
            .split(' ')
            .filter_map(|entry| entry.strip_prefix("v1,"))
            .filter_map(|tag| BASE64.decode(tag).ok())
            .any(|tag| tag == expected.as_slice())
}

async fn webhook(
    State(peers): State<Arc<Peers>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> AxumStatus {
    let mut seen = peers.seen.lock().expect("seen");
    if peers.webhook_down.load(Ordering::SeqCst) || !verify(&headers, &body) {
        seen.refused += 1;
        return AxumStatus::SERVICE_UNAVAILABLE;
    }
    seen.webhooks
        .push(serde_json::from_slice(&body).expect("JSON body"));
    AxumStatus::OK
}

/// Slack's Web API as its documentation gives it: bearer token, JSON or form body, `ok`.
async fn slack_api(
    State(peers): State<Arc<Peers>>,
    axum::extract::Path(method): axum::extract::Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> axum::Json<Value> {
    let mut seen = peers.seen.lock().expect("seen");
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if auth != format!("Bearer {BOT_TOKEN}") {
        seen.bad_tokens += 1;
        return axum::Json(json!({"ok": false, "error": "invalid_auth"}));
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or_else(|_| {
        Value::Object(
            url::form_urlencoded::parse(&body)
                .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
                .collect(),
        )
    });
    seen.slack.push((method.clone(), body.clone()));
    let channel = body["channel"].as_str().unwrap_or("C0OPS").to_owned();
    let ts = body["ts"].as_str().map_or_else(
        || format!("1700000000.{:06}", seen.slack.len()),
        str::to_owned,
    );
    let text = body["text"].clone();
    axum::Json(
        json!({"ok": true, "channel": channel, "ts": ts, "message": {"ts": ts, "text": text}}),
    )
}

async fn peers() -> (Arc<Peers>, String, String) {
    let peers = Arc::new(Peers::default());
    let app = axum::Router::new()
        .route("/hook", post(webhook))
        .route("/api/{method}", post(slack_api))
        .with_state(peers.clone());
    let (addr, _server) = serve_local(app).await;
    (
        peers,
        format!("http://{addr}/hook"),
        format!("http://{addr}/api/"),
    )
}

fn notifiers(hook: &str, slack: &str) -> String {
    format!(
        r#"
[alerting]
evaluate_every = "200ms"
builtin = false

[[notifier]]
name = "ops-webhook"
kind = "webhook"
url = "{hook}"
signing_secret_env = "ALERT_WEBHOOK_SECRET"

[[notifier]]
name = "ops-slack"
kind = "slack"
bot_token_env = "SLACK_BOT_TOKEN"
channel = "C0OPS"
api_base_url = "{slack}"
"#
    )
}

const QUIET_RULE: &str = r#"
[[alert]]
name = "api-quiet"
kind = "source_quiet"
source = "api"
expect_within = "2s"
notify = ["ops-webhook", "ops-slack"]
"#;

async fn eventually(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn alerts(daemon: &Daemon) -> Vec<Value> {
    daemon.get("/v1/alerts").await["alerts"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Waits for a firing alert and returns the listing.
/// The rules firing (sorted) once `count` of them are, or whatever fires after `timeout`.
async fn firing_rules(daemon: &Daemon, count: usize, timeout: Duration) -> Vec<String> {
    let started = Instant::now();
    loop {
        let mut rules: Vec<String> = alerts(daemon)
            .await
            .iter()
            .filter(|a| a["state"] == "firing")
            .filter_map(|a| a["rule"].as_str().map(str::to_owned))
            .collect();
        rules.sort();
        if rules.len() == count || started.elapsed() > timeout {
            return rules;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn firing_alerts(daemon: &Daemon) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let listed = alerts(daemon).await;
        if listed.iter().any(|a| a["state"] == "firing") {
            return listed;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no alert fired: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn env(secret: &str) -> [(&'static str, String); 2] {
    [
        ("ALERT_WEBHOOK_SECRET", secret.to_owned()),
        ("SLACK_BOT_TOKEN", BOT_TOKEN.to_owned()),
    ]
}

#[tokio::test]
async fn a_quiet_source_fires_one_alert_notifies_slack_and_a_signed_webhook_and_resolves_when_deliveries_resume()
 {
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    let (peers, hook, slack) = peers().await;
    // The webhook receiver is down when the alert fires: the alert must still fire.
    peers.webhook_down.store(true, Ordering::SeqCst);
    let secret = secret();
    let env = env(&secret);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let daemon = Daemon::start(
        &db,
        &config(&db, &format!("{}{QUIET_RULE}", notifiers(&hook, &slack))),
        &env,
    )
    .await;
    let (status, _) = daemon
        .post_event(
            &unique("quiet"),
            &event("web_form", "ticket.created", "acme", "t-1"),
        )
        .await;
    assert!(status.is_success());

    // Quiet for over 2 s: one alert, one Slack message; the webhook is refused and retried.
    let started = Instant::now();
    loop {
        let firing = alerts(&daemon).await;
        if firing.iter().any(|a| a["state"] == "firing") {
            assert_eq!(firing.len(), 1, "{firing:?}");
            assert_eq!(firing[0]["rule"], "api-quiet");
            assert_eq!(firing[0]["kind"], "source_quiet");
            assert!(firing[0]["numbers"]["quiet_secs"].as_i64().is_some());
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no alert fired: {firing:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eventually("one Slack message", Duration::from_secs(10), || {
        !peers.seen.lock().expect("seen").slack.is_empty()
    })
    .await;
    eventually("refused webhook attempts", Duration::from_secs(10), || {
        peers.seen.lock().expect("seen").refused >= 1
    })
    .await;
    let ready = daemon.get("/readyz").await;
    assert_eq!(
        ready["failing_notifiers"],
        json!(["ops-webhook"]),
        "{ready}"
    );
    assert_eq!(ready["notifiers"]["ops-webhook"]["ok"], false, "{ready}");
    // Back up: the retried notification arrives, signed, once.
    peers.webhook_down.store(false, Ordering::SeqCst);
    eventually("the retried webhook", Duration::from_secs(20), || {
        !peers.seen.lock().expect("seen").webhooks.is_empty()
    })
    .await;
    {
        let seen = peers.seen.lock().expect("seen");
        let fired = &seen.webhooks[0];
        assert_eq!(fired["type"], "switchyard.alert.fired");
        assert_eq!(fired["data"]["rule"], "api-quiet");
        assert!(
            fired["data"]["console_url"]
                .as_str()
                .is_some_and(|u| u.contains("/ui/alerts"))
        );
        let (method, body) = &seen.slack[0];
        assert_eq!(method, "chat.postMessage");
        assert_eq!(body["channel"], "C0OPS");
        assert!(
            body["text"]
                .as_str()
                .is_some_and(|t| t.contains("[FIRING] api-quiet")),
            "{body}"
        );
        assert_eq!(seen.bad_tokens, 0);
    }
    assert_eq!(daemon.get("/readyz").await["failing_notifiers"], json!([]));
    assert!(
        daemon
            .metrics()
            .await
            .contains("switchyard_alerts_firing 1")
    );

    // Deliveries resume: resolved, the Slack message updated, the webhook told.
    let (status, _) = daemon
        .post_event(
            &unique("back"),
            &event("web_form", "ticket.created", "acme", "t-2"),
        )
        .await;
    assert!(status.is_success());
    eventually("the resolve notifications", Duration::from_secs(20), || {
        let seen = peers.seen.lock().expect("seen");
        seen.webhooks.len() >= 2 && seen.slack.len() >= 2
    })
    .await;
    // Nothing more is sent while nothing changes.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let listed = alerts(&daemon).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["state"], "resolved");
    let seen = peers.seen.lock().expect("seen");
    assert_eq!(seen.webhooks.len(), 2, "{:?}", seen.webhooks);
    assert_eq!(seen.webhooks[1]["type"], "switchyard.alert.resolved");
    assert_eq!(seen.slack.len(), 2, "{:?}", seen.slack);
    let (method, body) = &seen.slack[1];
    assert_eq!(method, "chat.update");
    assert_eq!(
        body["ts"], "1700000000.000001",
        "the firing's message is updated: {body}"
    );
    assert!(
        body["text"]
            .as_str()
            .is_some_and(|t| t.contains("[RESOLVED] api-quiet"))
    );
    drop(seen);
    daemon.stop();
}

#[tokio::test]
async fn an_alert_can_be_acknowledged_and_silenced_through_the_api_and_the_console() {
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    let (_peers, hook, slack) = peers().await;
    let secret = secret();
    let env = env(&secret);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let daemon = Daemon::start(
        &db,
        &config(&db, &format!("{}{QUIET_RULE}", notifiers(&hook, &slack))),
        &env,
    )
    .await;
    let firing = firing_alerts(&daemon).await;
    let id = firing[0]["id"].as_str().expect("id").to_owned();
    let (status, acked) = daemon
        .post(&format!("/v1/alerts/{id}/ack"), &json!({}))
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{acked}");
    assert_eq!(acked["acknowledged_by"], "api_token");
    let (status, silenced) = daemon
        .post(&format!("/v1/alerts/{id}/silence"), &json!({"for": "2h"}))
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{silenced}");
    assert!(silenced["silenced_until"].is_string());
    let (status, refused) = daemon
        .post(&format!("/v1/alerts/{id}/silence"), &json!({"for": "soon"}))
        .await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{refused}");
    let (status, _) = daemon
        .post("/v1/alerts/no-such-alert/ack", &json!({}))
        .await;
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND);

    // The console's Alerts page shows it, its numbers and the notifiers, and silences it.
    let console = super::console::Console::login(&daemon, super::harness::TOKEN).await;
    let html = console.page("/ui/alerts").await;
    for expected in [
        "api-quiet",
        "source_quiet",
        "quiet_secs",
        "ops-webhook",
        "ops-slack",
        "acknowledged",
    ] {
        assert!(
            html.contains(expected),
            "{expected} missing from the page: {html}"
        );
    }
    let csrf = super::console::csrf_of(&html);
    let (status, _) = console
        .post(
            &format!("/ui/alerts/{id}/silence"),
            &[("csrf", "wrong"), ("for", "1h")],
        )
        .await;
    assert!(
        status.is_client_error(),
        "a wrong CSRF token is refused: {status}"
    );
    let (status, location) = console
        .post(
            &format!("/ui/alerts/{id}/silence"),
            &[("csrf", csrf.as_str()), ("for", "1h")],
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::SEE_OTHER, "{location}");
    let (status, _) = console
        .post(
            &format!("/ui/alerts/{id}/silence"),
            &[("csrf", csrf.as_str()), ("for", "forever")],
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST);
    daemon.stop();
}

/// Two daemons on `db` with the webhook and Slack notifiers to fresh peers and `rules`; the
/// peers and the config text (to reload a good config) come back with them.
async fn two_replicas(db: &TestDb, rules: &str) -> (Arc<Peers>, String, Daemon, Daemon) {
    let (peers, hook, slack) = peers().await;
    let secret = secret();
    let env = env(&secret);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let text = config(db, &format!("{}{rules}", notifiers(&hook, &slack)));
    let first = Daemon::start(db, &text, &env).await;
    let second = Daemon::start(db, &text, &env).await;
    (peers, text, first, second)
}

#[tokio::test]
async fn two_replicas_on_postgres_raise_one_alert_and_send_one_notification() {
    let Some(db) = TestDb::create(Backend::Postgres).await else {
        return;
    };
    let (peers, _text, first, second) = two_replicas(&db, QUIET_RULE).await;
    let listed = firing_alerts(&first).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    eventually("the notifications", Duration::from_secs(10), || {
        let seen = peers.seen.lock().expect("seen");
        !seen.webhooks.is_empty() && !seen.slack.is_empty()
    })
    .await;
    // Both replicas keep evaluating; nothing more is raised or sent.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(alerts(&second).await.len(), 1);
    {
        let seen = peers.seen.lock().expect("seen");
        assert_eq!(seen.webhooks.len(), 1, "{:?}", seen.webhooks);
        assert_eq!(seen.slack.len(), 1, "{:?}", seen.slack);
    }
    first.stop();
    second.stop();
    db.drop_database().await;
}

const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";

#[tokio::test]
async fn failed_answers_to_a_slack_source_raise_provider_disable_risk_before_five_percent() {
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    let (_peers, hook, slack) = peers().await;
    let secret = secret();
    let mut env = env(&secret).to_vec();
    env.push(("SLACK_SIGNING_SECRET", SLACK_SECRET.to_owned()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let rules = r#"
[[source]]
kind = "slack"
name = "acme-slack"
signing_secret_env = "SLACK_SIGNING_SECRET"
teams = { T0123ABC = "acme" }

[[alert]]
name = "slack-risk"
kind = "provider_disable_risk"
source = "acme-slack"
"#;
    let daemon = Daemon::start(
        &db,
        &config(&db, &format!("{}{rules}", notifiers(&hook, &slack))),
        &env,
    )
    .await;
    let send = |body: Vec<u8>, secret: &str| {
        let timestamp = chrono::Utc::now().timestamp();
        let signature = switchyard_slack::sign(secret, timestamp, &body);
        daemon
            .client()
            .post(daemon.url("/v1/ingest/slack/acme-slack"))
            .header("content-type", "application/json")
            .header("X-Slack-Request-Timestamp", timestamp.to_string())
            .header("X-Slack-Signature", signature)
            .body(body)
    };
    let callback = |n: usize| {
        serde_json::to_vec(&json!({
            "token": "x", "team_id": "T0123ABC", "api_app_id": "A1", "type": "event_callback",
            "event_id": format!("Ev{n:08}"), "event_time": 1_700_000_000,
            "event": {"type": "message", "channel": "C1", "user": "U1", "text": "hello", "ts": format!("1700000000.{n:06}")}
        }))
        .expect("JSON")
    };
    for n in 0..60 {
        let answer = send(callback(n), SLACK_SECRET).send().await.expect("send");
        assert!(answer.status().is_success(), "{}", answer.status());
    }
    // Two answers fail (a signing secret Slack no longer uses): 2 of 62, about 3.2%.
    for n in 60..62 {
        let answer = send(callback(n), "another-secret")
            .send()
            .await
            .expect("send");
        assert_eq!(answer.status(), reqwest::StatusCode::UNAUTHORIZED);
    }
    let listed = firing_alerts(&daemon).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let alert = &listed[0];
    assert_eq!(alert["kind"], "provider_disable_risk");
    assert_eq!(alert["numbers"]["answers"], 62);
    assert_eq!(alert["numbers"]["failed"], 2);
    let ratio = alert["numbers"]["bad_ratio"].as_f64().expect("ratio");
    assert!(ratio < 0.05, "raised before Slack's 5%: {ratio}");
    assert!(
        alert["summary"]
            .as_str()
            .is_some_and(|s| s.contains("Slack")),
        "{alert}"
    );
    daemon.stop();
}

/// The SMTP and IMAP test servers (`.ci/smtp.sh`, `.ci/dovecot.sh`) and the test CA's PEM, or
/// `None` (after saying so) outside CI without them.
fn mail_servers() -> Option<(String, String, String)> {
    let found = (
        std::env::var("SWITCHYARD_TEST_SMTP"),
        std::env::var("SWITCHYARD_TEST_IMAP"),
        std::env::var("SWITCHYARD_TEST_IMAP_CA"),
    );
    match found {
        (Ok(smtp), Ok(imap), Ok(ca)) => Some((
            smtp,
            imap,
            std::fs::read_to_string(ca).expect("read the test CA"),
        )),
        _ => {
            assert!(
                !super::harness::in_ci(),
                "CI=true but the SMTP or IMAP test server is not set: .ci/run starts them"
            );
            super::harness::skipped(
                "SKIPPED: the alert email test needs Postfix and Dovecot; run `bash .ci/dovecot.sh start`, \
                 `bash .ci/smtp.sh start` and set SWITCHYARD_TEST_SMTP, SWITCHYARD_TEST_IMAP, SWITCHYARD_TEST_IMAP_CA",
            );
            None
        }
    }
}

/// The bodies of the messages in other@example.com's INBOX whose subject holds `needle`.
async fn mail_with(imap: &str, needle: &str) -> Vec<String> {
    use futures::TryStreamExt;
    let tcp = tokio::net::TcpStream::connect(imap)
        .await
        .expect("connect to Dovecot");
    let mut client = async_imap::Client::new(tcp);
    client
        .read_response()
        .await
        .expect("greeting")
        .expect("greeting");
    let mut session = client
        .login("other@example.com", "secret")
        .await
        .map_err(|e| e.0)
        .expect("login");
    session.select("INBOX").await.expect("select");
    let found = session
        .uid_search(format!("SUBJECT \"{needle}\""))
        .await
        .expect("search");
    let mut bodies = Vec::new();
    for uid in found {
        let fetched: Vec<_> = session
            .uid_fetch(uid.to_string(), "BODY.PEEK[]")
            .await
            .expect("fetch")
            .try_collect()
            .await
            .expect("fetched");
        for message in fetched {
            if let Some(body) = message.body() {
                bodies.push(String::from_utf8_lossy(body).into_owned());
            }
        }
    }
    let _ = session.logout().await;
    bodies
}

/// An `email` notifier to the local SMTP server (STARTTLS, the test CA; with `credentials`, the
/// username and password from `ALERT_SMTP_USER`/`ALERT_SMTP_PASSWORD`) and a quiet-source rule
/// `rule` on `api` that notifies it.
fn email_config(host: &str, port: &str, rule: &str, credentials: bool) -> String {
    let credentials = if credentials {
        "username_env = \"ALERT_SMTP_USER\"\npassword_env = \"ALERT_SMTP_PASSWORD\"\n"
    } else {
        ""
    };
    format!(
        r#"
[alerting]
evaluate_every = "200ms"
builtin = false

[[notifier]]
name = "ops-email"
kind = "email"
smtp_host = "{host}"
smtp_port = {port}
tls = "starttls"
from = "Switchyard <alerts@example.com>"
to = ["other@example.com"]
ca_cert_env = "ALERT_SMTP_CA"
{credentials}
[[alert]]
name = "{rule}"
kind = "source_quiet"
source = "api"
expect_within = "1s"
"#
    )
}

#[tokio::test]
async fn a_quiet_source_is_mailed_over_smtp_with_starttls_and_read_back_over_imap() {
    let Some((smtp, imap, ca)) = mail_servers() else {
        return;
    };
    // The mail is read back from the shared Dovecot, which another test may stop.
    let _dovecot = super::email::shared().await;
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    let (host, port) = smtp.split_once(':').expect("host:port");
    let rule = unique("mail-quiet");
    let text = email_config(host, port, &rule, false);
    let daemon = Daemon::start(&db, &config(&db, &text), &[("ALERT_SMTP_CA", ca.as_str())]).await;
    let listed = firing_alerts(&daemon).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let started = Instant::now();
    let mails = loop {
        let mails = mail_with(&imap, &rule).await;
        if !mails.is_empty() {
            break mails;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no mail arrived; readyz: {}",
            daemon.get("/readyz").await
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(mails.len(), 1, "one mail per firing: {mails:?}");
    let mail = &mails[0];
    assert!(mail.contains(&format!("[FIRING] {rule}")), "{mail}");
    assert!(mail.contains("source_quiet"), "{mail}");
    assert!(mail.contains("/ui/alerts#"), "the console link: {mail}");
    // The notifier requires STARTTLS: an unencrypted session would have failed, not delivered.
    let ready = daemon.get("/readyz").await;
    assert_eq!(ready["notifiers"]["ops-email"]["ok"], true, "{ready}");
    daemon.stop();
}

#[tokio::test]
async fn a_lagging_dispatch_a_failing_target_and_a_refused_reload_each_fire_and_resolve() {
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    // A port nothing listens on: every push fails.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead_url = format!("http://{}/runs", closed.local_addr().expect("addr"));
    drop(closed);
    let rules = format!(
        r#"
[alerting]
evaluate_every = "200ms"
builtin = false

[[target]]
kind = "http"
name = "crm"
url = "{dead_url}"
insecure_skip_signature = true
retry = ["1h"]

[[workflow]]
id = "waiting"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ {{ channel = "web_form", event_type = "ticket.created", priority = 10 }} ]

[[workflow]]
id = "pushed"
tenant = "acme"
status = "live"
run_as = "acme-agent"
target = "crm"
triggers = [ {{ channel = "webhook", event_type = "ticket.created", priority = 10 }} ]

[[alert]]
name = "lag"
kind = "dispatch_lag"
target = "pull"
max_age = "1s"

[[alert]]
name = "crm-failing"
kind = "target_failing"
target = "crm"
threshold = 1

[[alert]]
name = "reloads"
kind = "reload_refused"
"#
    );
    let text = config(&db, &rules);
    let daemon = Daemon::start(&db, &text, &[]).await;
    let (status, _) = daemon
        .post_event(
            &unique("lag"),
            &event("web_form", "ticket.created", "acme", "t-lag"),
        )
        .await;
    assert!(status.is_success());
    let (status, _) = daemon
        .post_event(
            &unique("push"),
            &event("webhook", "ticket.created", "acme", "t-push"),
        )
        .await;
    assert!(status.is_success());
    // A config that cannot be read is refused on SIGHUP; the old one stays in force.
    daemon.reload("this is not toml [");
    let rules_firing = firing_rules(&daemon, 3, Duration::from_secs(20)).await;
    assert_eq!(rules_firing, ["crm-failing", "lag", "reloads"]);
    // A worker claims the waiting run and a good config is reloaded: both resolve.
    let claimed = daemon.claim(&["waiting"], 1).await;
    assert_eq!(claimed.len(), 1);
    daemon.reload(&text);
    let started = Instant::now();
    loop {
        let listed = alerts(&daemon).await;
        let resolved = |rule: &str| {
            listed
                .iter()
                .any(|a| a["rule"] == rule && a["state"] == "resolved")
        };
        if resolved("lag") && resolved("reloads") {
            assert!(
                listed
                    .iter()
                    .any(|a| a["rule"] == "crm-failing" && a["state"] == "firing"),
                "{listed:?}"
            );
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "not resolved: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    daemon.stop();
}

#[tokio::test]
async fn a_dead_letter_a_stalled_mailbox_and_a_suspended_principal_each_fire_and_the_principal_resolves()
 {
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    // A port nothing listens on: every push and every IMAP connection fails.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead = closed.local_addr().expect("addr");
    drop(closed);
    let sleeper = |status: &str| {
        format!(
            "[[principal]]\nid = \"acme-sleeper\"\ntenant = \"acme\"\nkind = \"service\"\n\
             status = \"{status}\"\n"
        )
    };
    let mailbox = format!(
        r#"
[[source]]
kind = "email"
name = "inbox"
tenant = "acme"
host = "127.0.0.1"
port = {port}
security = "plain"
username = "support"
password_env = "INBOX_PASSWORD"
poll_interval = "200ms"
"#,
        port = dead.port()
    );
    let rest = format!(
        r#"
[alerting]
evaluate_every = "200ms"
builtin = false

[[target]]
kind = "http"
name = "crm"
url = "http://{dead}/runs"
insecure_skip_signature = true
retry = []

[[workflow]]
id = "pushed"
tenant = "acme"
status = "live"
run_as = "acme-agent"
target = "crm"
triggers = [ {{ channel = "webhook", event_type = "ticket.created", priority = 10 }} ]

[[workflow]]
id = "sleepy"
tenant = "acme"
status = "live"
run_as = "acme-sleeper"
triggers = [ {{ channel = "chat", event_type = "message", priority = 10 }} ]

[[alert]]
name = "crm-dead"
kind = "dead_letters"
target = "crm"
threshold = 1

[[alert]]
name = "inbox-stalled"
kind = "mailbox_stalled"
source = "inbox"
max_age = "1s"

[[alert]]
name = "authority"
kind = "authority_degraded"
"#
    );
    let text = config(&db, &format!("{}{mailbox}{rest}", sleeper("suspended")));
    let daemon = Daemon::start(&db, &text, &[("INBOX_PASSWORD", "not-used")]).await;
    // One run to a target that never answers, with no retry: dead-lettered at once.
    let (status, answer) = daemon
        .post_event(
            &unique("dead"),
            &event("webhook", "ticket.created", "acme", "t-dead"),
        )
        .await;
    assert!(status.is_success(), "{answer}");
    let rules_firing = firing_rules(&daemon, 3, Duration::from_secs(30)).await;
    assert_eq!(rules_firing, ["authority", "crm-dead", "inbox-stalled"]);
    let listed = alerts(&daemon).await;
    let summary = |rule: &str| {
        listed
            .iter()
            .find(|a| a["rule"] == rule)
            .and_then(|a| a["summary"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    assert!(summary("authority").contains("sleepy"), "{listed:?}");
    assert!(summary("inbox-stalled").contains("inbox"), "{listed:?}");
    assert!(summary("crm-dead").contains("crm"), "{listed:?}");

    // The principal is active again: its alert resolves; the mailbox still fails and the dead
    // letter stays counted in its window.
    daemon.reload(&config(
        &db,
        &format!("{}{mailbox}{rest}", sleeper("active")),
    ));
    let started = Instant::now();
    loop {
        let listed = alerts(&daemon).await;
        let state = |rule: &str| {
            listed
                .iter()
                .find(|a| a["rule"] == rule)
                .and_then(|a| a["state"].as_str())
                .unwrap_or_default()
                .to_owned()
        };
        if state("authority") == "resolved" {
            assert_eq!(state("crm-dead"), "firing", "{listed:?}");
            assert_eq!(state("inbox-stalled"), "firing", "{listed:?}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "not resolved: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    daemon.stop();
}
