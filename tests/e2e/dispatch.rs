//! Dispatch to push targets end to end: signed HTTP workers and NATS JetStream.
//!
//! The HTTP worker here is a real axum server that checks every request's Standard Webhooks
//! signature with its own HMAC-SHA256 (the `hmac` crate directly, not the daemon's signer), so a
//! signing bug cannot be hidden by signer and verifier sharing code. The NATS tests start their
//! own `nats-server` and read the stream through an `async-nats` JetStream consumer.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::jetstream;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, ReplayPolicy, pull};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode as AxumStatus};
use axum::routing::post;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use futures::StreamExt as _;
use hmac::{Hmac, Mac};
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::harness::{Backend, Daemon, TestDb, config, event, in_ci, run_id, skipped, unique};

const SECRET_ENV: &str = "WORKER_SIGNING_SECRET";

/// One workflow delivered to the target named `worker`.
const WORKFLOW: &str = r#"
[[workflow]]
id = "triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
target = "worker"
triggers = [ { channel = "chat", event_type = "message", priority = 1 } ]
"#;

/// An http target `worker` at `url`, signed with the secret in [`SECRET_ENV`], with `extra`
/// keys, and the workflow that uses it.
fn http_setup(url: &str, extra: &str) -> String {
    format!(
        "[[target]]\nname = \"worker\"\nkind = \"http\"\nurl = \"{url}\"\n\
         signing_secret_env = \"{SECRET_ENV}\"\n{extra}\n{WORKFLOW}"
    )
}

// ---------------------------------------------------------------------------------------------
// An independent Standard Webhooks verifier: base64, HMAC-SHA256 and its constant-time check
// from the `base64` and `hmac` crates, none of the daemon's signing code.

type HmacSha256 = Hmac<sha2::Sha256>;

/// HMAC-SHA256 of `message` under `key`, ready for more input or a check.
fn mac(key: &[u8], message: &[u8]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(message);
    mac
}

fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    mac(key, message).finalize().into_bytes().into()
}

/// `v1,<base64 tag>` of `{id}.{timestamp}.{body}` under `key`.
fn sign_v1(key: &[u8], id: &str, timestamp: &str, body: &[u8]) -> String {
    let mut signed = format!("{id}.{timestamp}.").into_bytes();
    signed.extend_from_slice(body);
    format!("v1,{}", BASE64.encode(hmac_sha256(key, &signed)))
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// What a worker checks before it trusts a request.
#[derive(Debug, Clone)]
struct Verifier {
    key: Vec<u8>,
    tolerance_secs: i64,
}

impl Verifier {
    fn new(key: Vec<u8>) -> Self {
        Self {
            key,
            tolerance_secs: 300,
        }
    }

    fn verify(
        &self,
        id: &str,
        timestamp: &str,
        signature: &str,
        body: &[u8],
        now: i64,
    ) -> Result<(), String> {
        let ts: i64 = timestamp
            .parse()
            .map_err(|_| format!("webhook-timestamp `{timestamp}` is not an integer"))?;
        if (now - ts).abs() > self.tolerance_secs {
            return Err(format!("webhook-timestamp {ts} is {} s from now", now - ts));
        }
        if id.is_empty() {
            return Err("no webhook-id".into());
        }
        let mut signed = format!("{id}.{timestamp}.").into_bytes();
        signed.extend_from_slice(body);
        let expected = mac(&self.key, &signed);
        // `verify_slice` refuses a tag of another length and compares in constant time.
        let matched = signature
            .split(' ')
            .filter_map(|entry| entry.strip_prefix("v1,"))
            .filter_map(|tag| BASE64.decode(tag).ok())
            .any(|given| expected.clone().verify_slice(&given).is_ok());
        if matched {
            Ok(())
        } else {
            Err(format!("no v1 signature in `{signature}` matches"))
        }
    }
}

/// A fresh `whsec_` secret (32 bytes, 244 of their bits random) and its decoded key.
fn new_secret() -> (String, Vec<u8>) {
    let mut key = Vec::with_capacity(32);
    key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    (format!("whsec_{}", BASE64.encode(&key)), key)
}

// ---------------------------------------------------------------------------------------------
// The HTTP worker.

/// One request the worker received.
#[derive(Debug, Clone)]
struct Seen {
    id: String,
    timestamp: String,
    signature: String,
    content_type: String,
    body: Vec<u8>,
    verified: Result<(), String>,
}

impl Seen {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|error| {
            panic!(
                "the worker got a body that is not JSON ({error}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    fn run_id(&self) -> String {
        self.json()["data"]["run"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

#[derive(Debug)]
struct WorkerState {
    verifier: Verifier,
    /// Answers for the next requests, in order; 200 once they run out.
    answers: Mutex<VecDeque<(u16, &'static str)>>,
    /// How long each request takes.
    delay: Duration,
    seen: Mutex<Vec<Seen>>,
}

/// A worker that records every request and refuses unsigned or stale ones with 401.
#[derive(Debug)]
struct Worker {
    url: String,
    state: Arc<WorkerState>,
    server: tokio::task::JoinHandle<()>,
}

impl Worker {
    async fn start(key: Vec<u8>, answers: &[(u16, &'static str)], delay: Duration) -> Worker {
        let state = Arc::new(WorkerState {
            verifier: Verifier::new(key),
            answers: Mutex::new(answers.iter().copied().collect()),
            delay,
            seen: Mutex::new(Vec::new()),
        });
        let app = axum::Router::new()
            .route("/runs", post(receive))
            .with_state(state.clone());
        let (addr, server) = super::harness::serve_local(app).await;
        Worker {
            url: format!("http://{addr}/runs"),
            state,
            server,
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().expect("seen").clone()
    }

    /// Waits until the worker has received at least `n` requests.
    async fn wait_for(&self, n: usize, within: Duration) -> Vec<Seen> {
        let deadline = Instant::now() + within;
        loop {
            let seen = self.seen();
            if seen.len() >= n {
                return seen;
            }
            assert!(
                Instant::now() < deadline,
                "the worker received {} requests within {within:?}, expected at least {n}",
                seen.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn receive(
    State(state): State<Arc<WorkerState>>,
    headers: HeaderMap,
    body: Bytes,
) -> (AxumStatus, String) {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let seen = Seen {
        id: header("webhook-id"),
        timestamp: header("webhook-timestamp"),
        signature: header("webhook-signature"),
        content_type: header("content-type"),
        verified: state.verifier.verify(
            &header("webhook-id"),
            &header("webhook-timestamp"),
            &header("webhook-signature"),
            &body,
            unix_now(),
        ),
        body: body.to_vec(),
    };
    let verified = seen.verified.clone();
    state.seen.lock().expect("seen").push(seen);
    if !state.delay.is_zero() {
        tokio::time::sleep(state.delay).await;
    }
    if let Err(why) = verified {
        return (AxumStatus::UNAUTHORIZED, why);
    }
    let (code, text) = state
        .answers
        .lock()
        .expect("answers")
        .pop_front()
        .unwrap_or((200, "ok"));
    (
        AxumStatus::from_u16(code).expect("a valid status"),
        text.to_owned(),
    )
}

// ---------------------------------------------------------------------------------------------
// Waiting on the daemon.

/// Waits until run `id` has `status`; returns its view (dispatch, attempts, history).
async fn wait_run(daemon: &Daemon, id: &str, status: &str, within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let run = daemon.get(&format!("/v1/runs/{id}")).await;
        if run["status"] == status {
            return run;
        }
        assert!(
            Instant::now() < deadline,
            "run {id} is not `{status}` after {within:?}: {run:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until every run in `ids` is `dispatched` (failing at once if one is dead-lettered).
async fn wait_all_dispatched(daemon: &Daemon, ids: &BTreeSet<String>, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let dead: Vec<Value> = daemon.runs("status=dead_lettered&limit=1000").await;
        assert!(
            dead.is_empty(),
            "{} runs were dead-lettered, e.g. {:#}",
            dead.len(),
            daemon
                .get(&format!(
                    "/v1/runs/{}",
                    dead[0]["id"].as_str().unwrap_or_default()
                ))
                .await
        );
        let dispatched: HashSet<String> = daemon
            .runs("status=dispatched&limit=1000")
            .await
            .iter()
            .filter_map(|r| r["id"].as_str().map(str::to_owned))
            .collect();
        let missing: Vec<&String> = ids.iter().filter(|id| !dispatched.contains(*id)).collect();
        if missing.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} runs are not dispatched after {within:?}; e.g. {:#}",
            missing.len(),
            ids.len(),
            daemon.get(&format!("/v1/runs/{}", missing[0])).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The `cause` of each history entry, oldest first.
fn causes(run: &Value) -> Vec<String> {
    run["history"]
        .as_array()
        .map(|h| {
            h.iter()
                .map(|e| e["cause"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Asserts that `expected` appear in `run`'s history in this order (other entries between).
fn assert_history_in_order(run: &Value, expected: &[&str]) {
    let causes = causes(run);
    let mut from = 0;
    for cause in expected {
        match causes[from..].iter().position(|c| c == cause) {
            Some(at) => from += at + 1,
            None => panic!(
                "history of run {} lacks `{cause}` after {:?}: {causes:?}",
                run["id"],
                &expected[..expected.iter().position(|c| c == cause).unwrap_or(0)]
            ),
        }
    }
}

/// Posts one chat message per entity, `concurrency` at a time; returns the run ids in order.
async fn post_many(
    daemon: &Daemon,
    entities: &[String],
    concurrency: usize,
    posted: &AtomicUsize,
) -> Vec<String> {
    let mut runs = Vec::with_capacity(entities.len());
    for chunk in entities.chunks(concurrency) {
        let answers = futures::future::join_all(chunk.iter().map(|entity| async move {
            daemon
                .post_event(
                    &format!("msg-{entity}"),
                    &event("chat", "message", "acme", entity),
                )
                .await
        }))
        .await;
        for (status, answer) in answers {
            assert_eq!(answer["outcome"], "routed", "{status}: {answer}");
            runs.push(run_id(&answer));
            posted.fetch_add(1, Ordering::SeqCst);
        }
    }
    runs
}

// ---------------------------------------------------------------------------------------------
// 1. A signed run reaches an HTTP worker that verifies it.

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

// ---------------------------------------------------------------------------------------------
// 2. Retries.

#[tokio::test]
async fn a_worker_down_for_the_first_attempts_gets_the_run_once_it_is_back() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(db) = TestDb::create(backend).await else {
            continue;
        };
        let (secret, key) = new_secret();
        let worker = Worker::start(
            key,
            &[(503, "warming up"), (503, "warming up")],
            Duration::ZERO,
        )
        .await;
        let setup = http_setup(
            &worker.url,
            "timeout = \"5s\"\nretry = [\"200ms\", \"200ms\", \"500ms\", \"1s\"]",
        );
        let daemon =
            Daemon::start(&db, &config(&db, &setup), &[(SECRET_ENV, secret.as_str())]).await;

        let (_, answer) = daemon
            .post_event(
                &unique("m"),
                &event("chat", "message", "acme", &unique("conv")),
            )
            .await;
        let run_id = run_id(&answer);
        let run = wait_run(&daemon, &run_id, "dispatched", Duration::from_secs(30)).await;
        tokio::time::sleep(Duration::from_millis(600)).await;

        let seen = worker.seen();
        assert_eq!(seen.len(), 3, "{backend:?}: 503, 503, 200; got {seen:#?}");
        let dispatch_id = run["dispatch"]["id"].as_str().expect("dispatch id");
        for (n, request) in seen.iter().enumerate() {
            assert_eq!(request.verified, Ok(()), "{backend:?} request {n}");
            assert_eq!(
                request.id, dispatch_id,
                "request {n} has another webhook-id"
            );
            let body = request.json();
            assert_eq!(body["id"], dispatch_id, "request {n}: {body:#}");
            assert_eq!(body["data"]["run"]["id"], run_id.as_str());
            assert_eq!(body["data"]["run"]["attempt"], n + 1, "{body:#}");
        }

        let attempts = run["attempts"].as_array().expect("attempts");
        let summary: Vec<(String, i64, i64)> = attempts
            .iter()
            .map(|a| {
                (
                    a["result"].as_str().unwrap_or_default().to_owned(),
                    a["status_code"].as_i64().unwrap_or(-1),
                    a["attempt"].as_i64().unwrap_or(-1),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("retry".to_owned(), 503, 1),
                ("retry".to_owned(), 503, 2),
                ("delivered".to_owned(), 200, 3)
            ],
            "{backend:?}: {run:#}"
        );
        assert!(
            attempts.iter().all(|a| a["series"] == 1),
            "one series: {run:#}"
        );
        assert_eq!(attempts[0]["response"], "warming up", "{run:#}");
        assert_eq!(run["dispatch"]["status"], "delivered", "{run:#}");
        assert_eq!(run["dispatch"]["attempts"], 3, "{run:#}");
        assert_history_in_order(
            &run,
            &["routed", "attempt_failed", "attempt_failed", "delivered"],
        );
        // Each attempt is counted once, by who claimed it: only the first can be claimed in
        // its run's own intake transaction (not when the dispatcher had not yet published its
        // targets to the writer); retries come from the backlog, claimed by the SQLite intake
        // writer or by the dispatcher itself (the only way on PostgreSQL).
        let metrics = daemon.metrics().await;
        let samples = super::metrics::samples(&metrics);
        let claimed_by = |by: &str| {
            let name = format!(r#"switchyard_dispatch_claims_total{{target="worker",by="{by}"}}"#);
            samples.get(&name).copied().unwrap_or(0.0)
        };
        let (intake, backlog, dispatcher) = (
            claimed_by("intake"),
            claimed_by("intake_backlog"),
            claimed_by("dispatcher"),
        );
        assert_eq!(intake + backlog + dispatcher, 3.0, "{backend:?}: {metrics}");
        assert!(intake <= 1.0, "{backend:?}: {metrics}");
        if backend != Backend::Sqlite {
            assert_eq!(backlog, 0.0, "{backend:?}: {metrics}");
        }

        daemon.stop();
        db.drop_database().await;
    }
}

/// Where no SQLite writer claims the backlog (PostgreSQL, MariaDB), the dispatcher's own claim
/// pass does, and it clears the flag that a pre-claim finding no free slot raised. Left raised,
/// every delivery that ended started a claim transaction of its own, long after the backlog was
/// gone: database load, and runs handed over meanwhile waited behind it.
#[tokio::test]
async fn a_drained_backlog_starts_no_claim_transaction_per_delivery() {
    for backend in [Backend::Postgres, Backend::MySql] {
        let Some(db) = TestDb::create(backend).await else {
            continue;
        };
        let (secret, key) = new_secret();
        let worker = Worker::start(key, &[], Duration::from_millis(200)).await;
        // One request at a time: four claims (max_in_flight times the claim window).
        let setup = http_setup(&worker.url, "timeout = \"5s\"\nmax_in_flight = 1");
        let daemon =
            Daemon::start(&db, &config(&db, &setup), &[(SECRET_ENV, secret.as_str())]).await;
        // Ten runs at once: four pre-claimed, the rest find no slot and wait in the backlog.
        let entities: Vec<String> = (0..10).map(|n| unique(&format!("b{n}"))).collect();
        let posted = AtomicUsize::new(0);
        let backlog: BTreeSet<String> = post_many(&daemon, &entities, 10, &posted)
            .await
            .into_iter()
            .collect();
        wait_all_dispatched(&daemon, &backlog, Duration::from_secs(60)).await;
        let passes = |metrics: &str, wake: &str| {
            let name = format!(
                r#"switchyard_dispatch_claim_transactions_total{{target="worker",wake="{wake}"}}"#
            );
            super::metrics::samples(metrics)
                .get(&name)
                .copied()
                .unwrap_or(0.0)
        };
        let before = daemon.metrics().await;
        assert!(
            passes(&before, "slot_freed") >= 1.0,
            "{backend:?}: the backlog was claimed when slots were freed: {before}"
        );
        // Then one run at a time, each delivered before the next is posted.
        for n in 0..8 {
            let (_, answer) = daemon
                .post_event(
                    &unique("one"),
                    &event("chat", "message", "acme", &unique(&format!("o{n}"))),
                )
                .await;
            wait_run(
                &daemon,
                &run_id(&answer),
                "dispatched",
                Duration::from_secs(30),
            )
            .await;
        }
        let after = daemon.metrics().await;
        let freed = passes(&after, "slot_freed") - passes(&before, "slot_freed");
        assert!(
            freed <= 1.0,
            "{backend:?}: {freed} claim transactions for freed slots while no run waited for \
             one (8 deliveries): {after}"
        );
        assert_eq!(worker.seen().len(), 18, "{backend:?}: each run sent once");
        // The dispatcher's tasks (its loop, the hand-over, the recorder) end at shutdown.
        let logs = daemon.stop_with_logs().await;
        assert!(
            logs.contains(r#""message":"stopped""#) && !logs.contains("did not stop in time"),
            "{backend:?}: the daemon did not stop cleanly:\n{logs}"
        );
        db.drop_database().await;
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Dead letters and redispatch.

#[tokio::test]
async fn a_400_dead_letters_at_once_and_redispatch_delivers_under_the_same_id() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let (secret, key) = new_secret();
        let worker =
            Worker::start(key, &[(400, "unknown workflow `triage`")], Duration::ZERO).await;
        let setup = http_setup(
            &worker.url,
            "timeout = \"5s\"\nretry = [\"200ms\", \"500ms\"]",
        );
        let daemon =
            Daemon::start(&db, &config(&db, &setup), &[(SECRET_ENV, secret.as_str())]).await;
        let entity = unique("conv");
        let chat = event("chat", "message", "acme", &entity);

        let (_, answer) = daemon.post_event(&unique("m"), &chat).await;
        assert_eq!(answer["outcome"], "routed", "{backend:?}: {answer}");
        let first = run_id(&answer);
        let dead = wait_run(&daemon, &first, "dead_lettered", Duration::from_secs(30)).await;
        assert_eq!(dead["dispatch"]["status"], "dead_lettered", "{dead:#}");
        assert_eq!(dead["dispatch"]["reason"], "rejected_4xx", "{dead:#}");
        let attempts = dead["attempts"].as_array().expect("attempts");
        assert_eq!(attempts.len(), 1, "no retry after a 400: {dead:#}");
        assert_eq!(attempts[0]["status_code"], 400, "{dead:#}");
        assert_eq!(attempts[0]["result"], "rejected_4xx", "{dead:#}");
        assert!(
            attempts[0]["response"]
                .as_str()
                .unwrap_or_default()
                .contains("unknown workflow `triage`"),
            "the response excerpt is kept: {dead:#}"
        );
        assert_history_in_order(&dead, &["routed", "dead_lettered"]);
        let listed = daemon.runs("status=dead_lettered").await;
        assert!(
            listed.iter().any(|r| r["id"] == first.as_str()),
            "{backend:?}: not listed as dead-lettered: {listed:#?}"
        );
        let seen = worker.seen();
        assert_eq!(seen.len(), 1, "{seen:#?}");
        let first_id = seen[0].id.clone();
        assert_eq!(dead["dispatch"]["id"], first_id.as_str());
        let first_token = seen[0].json()["data"]["run"]["fencing_token"]
            .as_i64()
            .expect("token");

        // The dead letter released the entity: the next event on it routes.
        let (_, answer) = daemon.post_event(&unique("m"), &chat).await;
        assert_eq!(
            answer["outcome"], "routed",
            "{backend:?}: entity not released: {answer}"
        );
        let second = run_id(&answer);
        wait_run(&daemon, &second, "dispatched", Duration::from_secs(30)).await;
        let second_request = worker
            .seen()
            .into_iter()
            .find(|s| s.run_id() == second)
            .expect("the second run reached the worker");
        let second_token = second_request.json()["data"]["run"]["fencing_token"]
            .as_i64()
            .expect("token");

        // While the second run holds the entity, the dead letter cannot take it back.
        let redispatch = format!("/v1/runs/{first}/redispatch");
        let (status, refusal) = daemon.post(&redispatch, &json!({})).await;
        assert_eq!(status, StatusCode::CONFLICT, "{backend:?}: {refusal}");
        assert_eq!(refusal["outcome"], "entity_locked", "{refusal}");
        assert_eq!(refusal["held_by_run_id"], second.as_str(), "{refusal}");

        let (status, finished) = daemon
            .post(
                &format!("/v1/runs/{second}/finish"),
                &json!({"status": "completed", "fencing_token": second_token}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{finished}");

        let (status, queued) = daemon.post(&redispatch, &json!({})).await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {queued}");
        assert_eq!(queued["dispatch_id"], first_id.as_str(), "{queued}");
        let new_token = queued["fencing_token"].as_i64().expect("token");
        assert!(
            new_token > first_token && new_token > second_token,
            "the redispatched run needs a larger token than {first_token} and {second_token}: {queued}"
        );
        let delivered = wait_run(&daemon, &first, "dispatched", Duration::from_secs(30)).await;
        let again: Vec<Seen> = worker
            .seen()
            .into_iter()
            .filter(|s| s.run_id() == first)
            .collect();
        assert_eq!(again.len(), 2, "{backend:?}: {again:#?}");
        let redelivered = &again[1];
        assert_eq!(redelivered.verified, Ok(()));
        assert_eq!(redelivered.id, first_id, "same webhook-id after redispatch");
        let body = redelivered.json();
        assert_eq!(body["id"], first_id.as_str(), "{body:#}");
        assert_eq!(body["data"]["run"]["fencing_token"], new_token, "{body:#}");
        assert_eq!(body["data"]["run"]["attempt"], 1, "a new series: {body:#}");
        assert_history_in_order(
            &delivered,
            &["routed", "dead_lettered", "redispatched", "delivered"],
        );
        let attempts: Vec<(i64, i64)> = delivered["attempts"]
            .as_array()
            .expect("attempts")
            .iter()
            .map(|a| {
                (
                    a["series"].as_i64().unwrap_or(-1),
                    a["status_code"].as_i64().unwrap_or(-1),
                )
            })
            .collect();
        assert_eq!(attempts, [(1, 400), (2, 200)], "{delivered:#}");
        assert_eq!(delivered["dispatch"]["series"], 2, "{delivered:#}");

        // Only a dead letter can be redispatched; the old token is fenced out.
        let (status, refusal) = daemon.post(&redispatch, &json!({})).await;
        assert_eq!(status, StatusCode::CONFLICT, "{refusal}");
        let finish = format!("/v1/runs/{first}/finish");
        let (status, refusal) = daemon
            .post(
                &finish,
                &json!({"status": "completed", "fencing_token": first_token}),
            )
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{refusal}");
        assert_eq!(refusal["error"], "lease_lost", "{refusal}");
        let (status, finished) = daemon
            .post(
                &finish,
                &json!({"status": "completed", "fencing_token": new_token}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{finished}");

        daemon.stop();
        db.drop_database().await;
    }
}

// ---------------------------------------------------------------------------------------------
// 4. NATS JetStream.

/// A `nats-server` of this test's own, on a fixed port and store, so it can be killed and
/// restarted without disturbing anyone else.
#[derive(Debug)]
struct NatsServer {
    binary: PathBuf,
    port: u16,
    store: tempfile::TempDir,
    child: Option<Child>,
}

impl NatsServer {
    fn binary() -> Option<PathBuf> {
        let installed = Path::new("/usr/sbin/nats-server");
        if installed.exists() {
            return Some(installed.to_owned());
        }
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("nats-server"))
                .find(|candidate| candidate.exists())
        })
    }

    async fn start() -> Option<NatsServer> {
        let Some(binary) = NatsServer::binary() else {
            assert!(!in_ci(), "CI=true but nats-server is not installed");
            skipped("SKIPPED NATS dispatch test: nats-server is not installed");
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut server = NatsServer {
            binary,
            port,
            store: tempfile::tempdir().expect("store dir"),
            child: None,
        };
        server.spawn().await;
        Some(server)
    }

    async fn spawn(&mut self) {
        let child = Command::new(&self.binary)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.store.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nats-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // `$JS.API.INFO` answers without an error once JetStream is up. (Read as JSON:
            // async-nats' `query_account` expects fields a 2.9 server does not send.)
            if let Ok(client) = async_nats::connect(self.url()).await
                && let Ok(answer) = client.request("$JS.API.INFO", Bytes::new()).await
                && serde_json::from_slice::<Value>(&answer.payload)
                    .is_ok_and(|info| info.get("error").is_none())
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "nats-server on port {} did not start JetStream in 20 s",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Every message of `stream`, read through a new ephemeral pull consumer (deliver all, no
/// acks), until `expected` have arrived; then the stream's own message count.
async fn read_stream(url: &str, stream: &str, expected: usize) -> (Vec<async_nats::Message>, u64) {
    let client = async_nats::connect(url).await.expect("connect to nats");
    let mut stream = jetstream::new(client)
        .get_stream(stream)
        .await
        .expect("the stream");
    let consumer = stream
        .create_consumer(pull::Config {
            deliver_policy: DeliverPolicy::All,
            ack_policy: AckPolicy::None,
            replay_policy: ReplayPolicy::Instant,
            ..Default::default()
        })
        .await
        .expect("create a consumer");
    let mut delivered = consumer.messages().await.expect("consume the stream");
    let mut messages = Vec::with_capacity(expected);
    let deadline = Instant::now() + Duration::from_secs(30);
    while messages.len() < expected {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = tokio::time::timeout(left, delivered.next())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the consumer got {} of {expected} messages in 30 s",
                    messages.len()
                )
            })
            .expect("the consumer's messages ended")
            .expect("read from nats");
        messages.push(message.message);
    }
    let stored = stream.info().await.expect("stream info").state.messages;
    (messages, stored)
}

/// The value of header `name` on `message`, if it has one.
fn header<'a>(message: &'a async_nats::Message, name: &str) -> Option<&'a str> {
    message
        .headers
        .as_ref()
        .and_then(|headers| headers.get(name))
        .map(|value| value.as_str())
}

/// Checks that the stream holds each run of `runs` exactly once, under its dispatch id.
async fn assert_each_run_once(
    daemon: &Daemon,
    url: &str,
    stream: &str,
    runs: &BTreeSet<String>,
) -> BTreeMap<String, Value> {
    let (messages, stored) = read_stream(url, stream, runs.len()).await;
    assert_eq!(
        stored,
        runs.len() as u64,
        "the stream stores {stored} messages for {} runs",
        runs.len()
    );
    let mut by_msg_id = BTreeMap::new();
    for message in &messages {
        let msg_id = header(message, "Nats-Msg-Id")
            .unwrap_or_else(|| panic!("no Nats-Msg-Id on {message:?}"))
            .to_owned();
        assert_eq!(
            message.subject.as_str(),
            "runs.acme.triage",
            "the subject template"
        );
        assert_eq!(
            header(message, "Content-Type"),
            Some("application/cloudevents+json")
        );
        let body: Value = serde_json::from_slice(&message.payload).expect("a JSON body");
        assert_eq!(body["id"], msg_id.as_str(), "Nats-Msg-Id is the body id");
        assert_eq!(body["type"], "switchyard.run.start");
        let previous = by_msg_id.insert(msg_id.clone(), body);
        assert!(previous.is_none(), "Nats-Msg-Id {msg_id} arrived twice");
    }
    let mut by_run = BTreeMap::new();
    for body in by_msg_id.values() {
        let run = body["data"]["run"]["id"].as_str().unwrap_or_default();
        assert!(runs.contains(run), "a message for an unknown run: {body:#}");
        by_run.insert(run.to_owned(), body["id"].clone());
    }
    assert_eq!(by_run.len(), runs.len(), "every run has its message");
    let mut trails = BTreeMap::new();
    for run in runs {
        let trail = daemon.get(&format!("/v1/runs/{run}")).await;
        assert_eq!(
            trail["dispatch"]["id"], by_run[run],
            "the message of run {run} carries another id than its dispatch: {trail:#}"
        );
        assert_eq!(trail["status"], "dispatched", "{trail:#}");
        trails.insert(run.clone(), trail);
    }
    trails
}

#[tokio::test]
async fn runs_published_to_jetstream_arrive_once_each_by_msg_id() {
    let Some(mut nats) = NatsServer::start().await else {
        return;
    };
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    let stream = format!("RUNS_{}", uuid::Uuid::now_v7().simple());
    let setup = format!(
        "[[target]]\nname = \"worker\"\nkind = \"nats\"\nurl = \"{}\"\n\
         subject = \"runs.{{tenant}}.{{workflow}}\"\nstream = \"{stream}\"\ncreate_stream = true\n\
         retry = [\"200ms\", \"500ms\", \"1s\", \"1s\", \"2s\", \"2s\", \"2s\"]\n{WORKFLOW}",
        nats.url()
    );
    let daemon = Daemon::start(&db, &config(&db, &setup), &[]).await;

    let entities: Vec<String> = (0..200).map(|n| unique(&format!("e{n}"))).collect();
    let posted = AtomicUsize::new(0);
    let first: BTreeSet<String> = post_many(&daemon, &entities, 20, &posted)
        .await
        .into_iter()
        .collect();
    assert_eq!(first.len(), 200, "200 distinct runs");
    wait_all_dispatched(&daemon, &first, Duration::from_secs(60)).await;
    assert_each_run_once(&daemon, &nats.url(), &stream, &first).await;

    // nats-server dies while 200 more arrive and comes back on the same port and store.
    let entities: Vec<String> = (0..200).map(|n| unique(&format!("f{n}"))).collect();
    let posted = AtomicUsize::new(0);
    let (second, ()) = tokio::join!(post_many(&daemon, &entities, 10, &posted), async {
        let deadline = Instant::now() + Duration::from_secs(60);
        while posted.load(Ordering::SeqCst) < 40 {
            assert!(Instant::now() < deadline, "posting stalled");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        nats.kill();
        // Longer than the transport waits for a reconnect (2 s), so attempts fail and retry.
        tokio::time::sleep(Duration::from_secs(3)).await;
        nats.spawn().await;
    });
    let second: BTreeSet<String> = second.into_iter().collect();
    let all: BTreeSet<String> = first.union(&second).cloned().collect();
    assert_eq!(all.len(), 400);
    wait_all_dispatched(&daemon, &all, Duration::from_secs(90)).await;
    let trails = assert_each_run_once(&daemon, &nats.url(), &stream, &all).await;
    let retried = second
        .iter()
        .filter(|run| {
            trails[*run]["attempts"]
                .as_array()
                .is_some_and(|a| a.iter().any(|a| a["result"] == "retry"))
        })
        .count();
    assert!(
        retried > 0,
        "no run of the second batch met the outage: the test did not test it"
    );

    daemon.stop();
    nats.kill();
}

// ---------------------------------------------------------------------------------------------
// 5. A crash mid-delivery.

#[tokio::test]
async fn a_daemon_killed_mid_delivery_delivers_every_run_after_restart() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(db) = TestDb::create(backend).await else {
            continue;
        };
        let (secret, key) = new_secret();
        let worker = Worker::start(key, &[], Duration::from_millis(300)).await;
        let setup = http_setup(
            &worker.url,
            "timeout = \"1s\"\nmax_in_flight = 4\nretry = [\"200ms\", \"500ms\", \"1s\", \"2s\"]",
        );
        let env = [(SECRET_ENV, secret.as_str())];
        let daemon = Daemon::start(&db, &config(&db, &setup), &env).await;
        let config_path = daemon.config_path.clone();

        let entities: Vec<String> = (0..100).map(|n| unique(&format!("e{n}"))).collect();
        let posted = AtomicUsize::new(0);
        let runs: BTreeSet<String> = post_many(&daemon, &entities, 20, &posted)
            .await
            .into_iter()
            .collect();
        assert_eq!(runs.len(), 100);
        let before = worker.wait_for(20, Duration::from_secs(30)).await.len();
        drop(daemon); // SIGKILL
        assert!(
            before < 100,
            "{backend:?}: every run was sent before the kill; nothing was left to test"
        );

        let daemon = Daemon::start_with_file(&config_path, &env).await;
        wait_all_dispatched(&daemon, &runs, Duration::from_secs(90)).await;
        let mut dispatch_ids = BTreeMap::new();
        for run in &runs {
            let trail = daemon.get(&format!("/v1/runs/{run}")).await;
            let id = trail["dispatch"]["id"].as_str().expect("dispatch id");
            dispatch_ids.insert(id.to_owned(), run.clone());
        }
        let seen = worker.seen();
        let mut received: BTreeMap<String, usize> = BTreeMap::new();
        for request in &seen {
            assert_eq!(request.verified, Ok(()), "{backend:?}: {request:#?}");
            let run = dispatch_ids.get(&request.id).unwrap_or_else(|| {
                panic!(
                    "{backend:?}: a request under webhook-id {} that is no run's dispatch id",
                    request.id
                )
            });
            assert_eq!(&request.run_id(), run, "{backend:?}: id and run disagree");
            assert_eq!(request.json()["id"], request.id.as_str());
            *received.entry(request.id.clone()).or_default() += 1;
        }
        let missing: Vec<&String> = dispatch_ids
            .keys()
            .filter(|id| !received.contains_key(*id))
            .collect();
        assert!(
            missing.is_empty(),
            "{backend:?}: {} runs were marked dispatched but never reached the worker: {missing:?}",
            missing.len()
        );
        let duplicates = received.values().filter(|n| **n > 1).count();
        eprintln!(
            "{backend:?}: {} requests for 100 runs ({before} before the kill, {duplicates} runs sent twice)",
            seen.len()
        );

        daemon.stop();
        db.drop_database().await;
    }
}

/// A backlog behind `max_in_flight` is not claimed before it can be sent: a claimed row waiting
/// its turn would see its claim (timeout + 5 s) lapse and be sent twice.
#[tokio::test]
async fn a_slow_worker_with_a_backlog_gets_each_run_once() {
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    let (secret, key) = new_secret();
    let worker = Worker::start(key, &[], Duration::from_millis(250)).await;
    let setup = http_setup(
        &worker.url,
        "timeout = \"1s\"\nmax_in_flight = 1\nretry = [\"200ms\"]",
    );
    let daemon = Daemon::start(&db, &config(&db, &setup), &[(SECRET_ENV, secret.as_str())]).await;
    // 30 runs of 250 ms one at a time: 7.5 s of backlog, longer than one claim (6 s).
    let entities: Vec<String> = (0..30).map(|n| unique(&format!("e{n}"))).collect();
    let posted = AtomicUsize::new(0);
    let runs: BTreeSet<String> = post_many(&daemon, &entities, 30, &posted)
        .await
        .into_iter()
        .collect();
    wait_all_dispatched(&daemon, &runs, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let seen = worker.seen();
    let ids: BTreeSet<&str> = seen.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids.len(), 30, "every run reached the worker");
    assert_eq!(
        seen.len(),
        30,
        "{} requests for 30 runs: queued claims lapsed and were sent again",
        seen.len()
    );
    daemon.stop();
}
