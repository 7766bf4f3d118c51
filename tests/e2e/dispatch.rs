//! Dispatch to push targets end to end: signed HTTP workers and NATS JetStream.
//!
//! The HTTP worker here is a real axum server that checks every request's Standard Webhooks
//! signature with its own HMAC-SHA256 (the `hmac` crate directly, not the daemon's signer), so a
//! signing bug cannot be hidden by signer and verifier sharing code. The NATS tests start their
//! own `nats-server` and read the stream through an `async-nats` JetStream consumer.

mod crash;
mod dead_letters;
mod http;
mod nats;
mod retries;

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode as AxumStatus};
use axum::routing::post;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::harness::{Backend, Daemon, TestDb, config, event, run_id, unique};

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
