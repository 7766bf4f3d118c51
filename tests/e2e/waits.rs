//! Durable waits end to end (issue 16), the seeds' credit example: runs pause for an approval
//! and resume only on the delivery meant for them, from the API, a canonical event, a
//! CloudEvent or a Slack button, on every backend; timers survive restarts and fire once across
//! replicas.
//!
//! The worker is a real HTTP server that checks every message's Standard Webhooks signature with
//! its own HMAC (not the daemon's signer), as in `dispatch.rs`; Slack clicks are signed here with
//! an independent v0 HMAC.

mod channels;
mod deadlines;
mod durability;
mod matching;
mod principals;
mod slack_approvals;
mod two_waits;

use std::collections::BTreeSet;
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

use super::harness::{Backend, Daemon, TestDb, config, run_id, unique};

type HmacSha256 = Hmac<sha2::Sha256>;

const WORKER_SECRET_ENV: &str = "WAITS_WORKER_SECRET";
const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const SLACK_TEAM: &str = "T9CREDIT";
const MANAGER: &str = "U0MANAGER";

/// The tokens resumes are sent with: on the API, canonical events and CloudEvents a resume
/// decides as the token that sent it, so each actor of these tests is a token of its own name.
const ACTORS: [(&str, &str, &str); 3] = [
    ("alice", "WAITS_ALICE_TOKEN", "alice-token-0123456789"),
    ("mallory", "WAITS_MALLORY_TOKEN", "mallory-token-0123456789"),
    (MANAGER, "WAITS_MANAGER_TOKEN", "manager-token-0123456789"),
];

/// The secret of the token named `actor`.
fn token_of(actor: &str) -> &'static str {
    ACTORS
        .iter()
        .find(|(name, ..)| *name == actor)
        .map(|(.., secret)| *secret)
        .unwrap_or_else(|| panic!("no token for actor {actor}"))
}

/// `[[token]]`s for [`ACTORS`]: tenant `acme`, `events:write`.
fn actor_tokens() -> String {
    ACTORS
        .iter()
        .map(|(name, env, _)| {
            format!(
                "\n[[token]]\nname = \"{name}\"\nsecret_env = \"{env}\"\n\
                 scopes = [\"events:write\"]\ntenants = [\"acme\"]\n"
            )
        })
        .collect()
}

fn digest(proposal: &str) -> String {
    use sha2::Digest as _;
    format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(proposal.as_bytes()))
    )
}

/// The credit workflow, delivered to the signed HTTP worker at `url`; a pull twin; the Slack
/// workspace and an internal CloudEvents bus of tenant `acme`.
fn setup(url: &str) -> String {
    format!(
        r#"
[[source]]
kind = "slack"
name = "ws"
signing_secret_env = "WAITS_SLACK_SECRET"
teams = {{ {SLACK_TEAM} = "acme" }}

[[source]]
kind = "cloudevents"
name = "bus"
tenant = "acme"
channel = "chat"

[[target]]
name = "worker"
kind = "http"
url = "{url}"
signing_secret_env = "{WORKER_SECRET_ENV}"

[[workflow]]
id = "credit"
tenant = "acme"
status = "live"
target = "worker"
run_as = "acme-agent"
approvers = ["{MANAGER}", "alice"]
triggers = [ {{ channel = "chat", event_type = "credit.requested", priority = 1 }} ]

[[workflow]]
id = "credit-pull"
tenant = "acme"
status = "live"
run_as = "acme-agent"
approvers = ["alice"]
triggers = [ {{ channel = "chat", event_type = "credit.pull", priority = 1 }} ]
"#
    )
}

// ---------------------------------------------------------------------------------------------
// The HTTP worker: verifies Standard Webhooks signatures independently and records messages.

#[derive(Debug)]
struct WorkerState {
    key: Vec<u8>,
    /// Every verified message body, in arrival order.
    messages: Mutex<Vec<Value>>,
    /// Requests whose signature did not verify.
    refused: Mutex<Vec<String>>,
}

struct Worker {
    url: String,
    state: Arc<WorkerState>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn new_secret() -> (String, Vec<u8>) {
    let mut key = Vec::with_capacity(32);
    key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    (format!("whsec_{}", BASE64.encode(&key)), key)
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

async fn receive(
    State(state): State<Arc<WorkerState>>,
    headers: HeaderMap,
    body: Bytes,
) -> AxumStatus {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let (id, timestamp, signature) = (
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
    );
    let fresh = timestamp
        .parse::<i64>()
        .is_ok_and(|ts| (unix_now() - ts).abs() <= 300);
    let mut mac = HmacSha256::new_from_slice(&state.key).expect("any key length");
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(&body);
    let verified = fresh
        && signature
            .split(' ')
            .filter_map(|entry| entry.strip_prefix("v1,"))
            .filter_map(|tag| BASE64.decode(tag).ok())
            .any(|tag| mac.clone().verify_slice(&tag).is_ok());
    if !verified {
        state.refused.lock().expect("refused").push(id);
        return AxumStatus::UNAUTHORIZED;
    }
    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    assert_eq!(message["id"], json!(id), "webhook-id is the CloudEvents id");
    state.messages.lock().expect("messages").push(message);
    AxumStatus::OK
}

impl Worker {
    async fn start(key: Vec<u8>) -> Worker {
        let state = Arc::new(WorkerState {
            key,
            messages: Mutex::default(),
            refused: Mutex::default(),
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

    fn messages(&self) -> Vec<Value> {
        self.state.messages.lock().expect("messages").clone()
    }

    /// Messages of `kind` (`start` or `resume`) for `run`, deduplicated by id as a worker would.
    fn of(&self, run: &str, kind: &str) -> Vec<Value> {
        let mut seen = BTreeSet::new();
        self.messages()
            .into_iter()
            .filter(|m| {
                m["type"] == format!("switchyard.run.{kind}") && m["data"]["run"]["id"] == run
            })
            .filter(|m| seen.insert(m["id"].as_str().unwrap_or_default().to_owned()))
            .collect()
    }

    /// Waits for the first message of `kind` for `run`.
    async fn wait_for(&self, run: &str, kind: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(message) = self.of(run, kind).into_iter().next() {
                return message;
            }
            assert!(
                Instant::now() < deadline,
                "no {kind} message for run {run} within 60 s; refused: {:?}; got {:#?}",
                self.state.refused.lock().expect("refused"),
                self.messages()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Driving the daemon.

struct Setup {
    db: TestDb,
    worker: Worker,
    secret: String,
}

impl Setup {
    async fn new(backend: Backend) -> Option<Setup> {
        let db = TestDb::create(backend).await?;
        let (secret, key) = new_secret();
        let worker = Worker::start(key).await;
        Some(Setup { db, worker, secret })
    }

    /// The harness's config with a generous `intake_timeout`: on a loaded machine a sender may
    /// otherwise see 503s (retry later), which is right but not what these tests are about.
    fn config(&self) -> String {
        config(&self.db, &(setup(&self.worker.url) + &actor_tokens())).replacen(
            "[server]\n",
            "[server]\nintake_timeout = \"30s\"\n",
            1,
        )
    }

    async fn daemon(&self) -> Daemon {
        self.daemon_on(&self.config()).await
    }

    async fn daemon_on(&self, text: &str) -> Daemon {
        Daemon::start(
            &self.db,
            text,
            &[
                (WORKER_SECRET_ENV, &self.secret),
                ("WAITS_SLACK_SECRET", SLACK_SECRET),
                (ACTORS[0].1, ACTORS[0].2),
                (ACTORS[1].1, ACTORS[1].2),
                (ACTORS[2].1, ACTORS[2].2),
            ],
        )
        .await
    }
}

/// A credit request on `entity` (an account's ticket) that routes to `credit`; waits until the
/// worker got its start message and returns `(run_id, fencing_token)`.
async fn started_run(daemon: &Daemon, worker: &Worker, entity: &str) -> (String, i64) {
    let (status, answer) = daemon
        .post_event(
            &unique("req"),
            &json!({
                "channel": "chat", "event_type": "credit.requested", "tenant_id": "acme",
                "target_entity_id": entity, "payload": {"account": "ACCT-9"},
            }),
        )
        .await;
    assert_eq!(
        (status, answer["outcome"].as_str()),
        (StatusCode::OK, Some("routed")),
        "{answer}"
    );
    let run = run_id(&answer);
    let start = worker.wait_for(&run, "start").await;
    let token = start["data"]["run"]["fencing_token"]
        .as_i64()
        .expect("fencing token");
    wait_status(daemon, &run, "dispatched").await;
    (run, token)
}

async fn wait_status(daemon: &Daemon, run: &str, status: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let view = daemon.get(&format!("/v1/runs/{run}")).await;
        if view["status"] == status {
            return view;
        }
        assert!(
            Instant::now() < deadline,
            "run {run} is not {status} within 60 s: {view:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Opens wait `approve` for `proposal` on `run`; returns the resume token.
async fn open_wait(
    daemon: &Daemon,
    run: &str,
    fencing_token: i64,
    proposal: &str,
    deadline: &str,
    on_timeout: &str,
) -> String {
    let (status, answer) = daemon
        .post(
            &format!("/v1/runs/{run}/waits"),
            &json!({
                "fencing_token": fencing_token, "wait_id": "approve", "expects": "approval",
                "proposal": {"id": proposal, "digest": digest(proposal)},
                "deadline": deadline, "on_timeout": on_timeout,
            }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    assert_eq!(answer["run_status"], "needs_input");
    answer["resume_token"]
        .as_str()
        .expect("a resume token")
        .to_owned()
}

/// `POST /v1/waits/resume` under `key`.
async fn resume(
    daemon: &Daemon,
    key: &str,
    token: &str,
    proposal_digest: &str,
    actor: &str,
) -> (StatusCode, Value) {
    let response = daemon
        .client()
        .post(daemon.url("/v1/waits/resume"))
        .bearer_auth(token_of(actor))
        .header("Idempotency-Key", key)
        .json(&json!({
            "tenant_id": "acme", "token": token, "proposal_digest": proposal_digest,
            "decision": "approve", "actor": actor,
        }))
        .send()
        .await
        .expect("POST /v1/waits/resume");
    super::harness::read(response).await
}

/// A resume as a sender that retries after a 503 sends it (the same `Idempotency-Key`: safe, a
/// committed copy answers `duplicate` with its first outcome): the outcome it settled on.
async fn settled_resume(
    daemon: &Daemon,
    key: &str,
    token: &str,
    proposal_digest: &str,
    actor: &str,
) -> (StatusCode, Value) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, mut answer) = resume(daemon, key, token, proposal_digest, actor).await;
        if status == StatusCode::SERVICE_UNAVAILABLE && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        let copy_of_ours = answer["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("delivery already recorded"));
        if copy_of_ours {
            answer["outcome"] = answer["first_outcome"].clone();
        }
        return (status, answer);
    }
}

async fn waits_of(daemon: &Daemon, run: &str) -> Vec<Value> {
    daemon.get(&format!("/v1/runs/{run}/waits")).await["waits"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn history_causes(view: &Value, cause: &str) -> usize {
    view["history"]
        .as_array()
        .map(|h| h.iter().filter(|e| e["cause"] == cause).count())
        .unwrap_or(0)
}
