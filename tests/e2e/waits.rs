//! Durable waits end to end (issue 16), the seeds' credit example: runs pause for an approval
//! and resume only on the delivery meant for them, from the API, a canonical event, a
//! CloudEvent or a Slack button, on every backend; timers survive restarts and fire once across
//! replicas.
//!
//! The worker is a real HTTP server that checks every message's Standard Webhooks signature with
//! its own HMAC (not the daemon's signer), as in `dispatch.rs`; Slack clicks are signed here with
//! an independent v0 HMAC.

use std::collections::{BTreeMap, BTreeSet};
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

/// Slack's v0 signature, computed here with HMAC-SHA256 directly.
fn slack_v0(secret: &str, timestamp: i64, body: &str) -> String {
    let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(format!("v0:{timestamp}:{body}").as_bytes());
    format!("v0={}", hex::encode(mac.finalize().into_bytes()))
}

fn slack_click(user: &str, value: &str, trigger: &str) -> String {
    let payload = json!({
        "type": "block_actions",
        "team": {"id": SLACK_TEAM, "domain": "credit"},
        "user": {"id": user, "username": "manager"},
        "api_app_id": "A0APP",
        "trigger_id": trigger,
        "container": {"type": "message", "channel_id": "C0APPROVALS", "message_ts": "1764633600.000100"},
        "actions": [{"action_id": "approve", "block_id": "b", "type": "button", "value": value,
                     "action_ts": "1764633601.000200"}],
        "response_url": "https://hooks.slack.com/actions/T9CREDIT/1/abc",
    });
    format!(
        "payload={}",
        switchyard_slack::form_encode(&payload.to_string())
    )
}

async fn post_click(daemon: &Daemon, body: &str, signature: &str) -> (StatusCode, Value) {
    let timestamp = unix_now();
    let signature = if signature.is_empty() {
        slack_v0(SLACK_SECRET, timestamp, body)
    } else {
        signature.to_owned()
    };
    let response = daemon
        .client()
        .post(daemon.url("/v1/ingest/slack/ws/interactivity"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .header("X-Slack-Request-Timestamp", timestamp.to_string())
        .header("X-Slack-Signature", signature)
        .body(body.to_owned())
        .send()
        .await
        .expect("POST interactivity");
    super::harness::read(response).await
}

// ---------------------------------------------------------------------------------------------
// The tests.

/// Two runs on one account wait for P-17 and P-22; only the delivery meant for a wait resumes
/// it, every other attempt is recorded with its reason and changes nothing.
#[tokio::test]
async fn the_approval_for_p17_resumes_exactly_the_p17_run() {
    for backend in Backend::ALL {
        let Some(setup) = Setup::new(backend).await else {
            continue;
        };
        let daemon = setup.daemon().await;
        let worker = &setup.worker;
        let (p17, t17) = started_run(&daemon, worker, &unique("ACCT-9-ticket")).await;
        let (p22, t22) = started_run(&daemon, worker, &unique("ACCT-9-ticket")).await;
        let token17 = open_wait(&daemon, &p17, t17, "P-17", "48h", "fail").await;
        let token22 = open_wait(&daemon, &p22, t22, "P-22", "48h", "fail").await;
        assert_ne!(token17, token22);

        // A stale fencing token, a second `approve`, a bad digest, a bad deadline: refused.
        let stale = daemon
            .post(
                &format!("/v1/runs/{p17}/waits"),
                &json!({"fencing_token": t17 + 5, "wait_id": "x", "expects": "approval",
                        "proposal": {"id": "P-17", "digest": digest("P-17")}, "deadline": "1h"}),
            )
            .await;
        assert_eq!(
            (stale.0, stale.1["error"].as_str()),
            (StatusCode::CONFLICT, Some("lease_lost")),
            "{backend:?}: {}",
            stale.1
        );
        let again = daemon
            .post(
                &format!("/v1/runs/{p17}/waits"),
                &json!({"fencing_token": t17, "wait_id": "approve", "expects": "approval",
                        "proposal": {"id": "P-17", "digest": digest("P-17")}, "deadline": "1h"}),
            )
            .await;
        assert_eq!(
            (again.0, again.1["error"].as_str()),
            (StatusCode::CONFLICT, Some("duplicate_wait")),
            "{}",
            again.1
        );
        for (field, body) in [
            (
                "proposal.digest",
                json!({"fencing_token": t17, "wait_id": "y", "expects": "approval",
                "proposal": {"id": "P-17", "digest": "sha256:nothex"}, "deadline": "1h"}),
            ),
            (
                "deadline",
                json!({"fencing_token": t17, "wait_id": "y", "expects": "approval",
                "proposal": {"id": "P-17", "digest": digest("P-17")}, "deadline": "soon"}),
            ),
            (
                "on_timeout",
                json!({"fencing_token": t17, "wait_id": "y", "expects": "approval",
                "proposal": {"id": "P-17", "digest": digest("P-17")}, "deadline": "1h", "on_timeout": "retry"}),
            ),
        ] {
            let (status, answer) = daemon.post(&format!("/v1/runs/{p17}/waits"), &body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
            assert!(
                answer["detail"]
                    .as_str()
                    .unwrap_or_default()
                    .contains(field),
                "{field}: {answer}"
            );
        }
        let unknown = daemon
            .post(
                "/v1/runs/no-such-run/waits",
                &json!({"fencing_token": 1, "wait_id": "a", "expects": "b",
                "proposal": {"id": "P", "digest": digest("P")}, "deadline": "1h"}),
            )
            .await;
        assert_eq!(unknown.0, StatusCode::NOT_FOUND);
        assert_eq!(
            waits_of(&daemon, &p17).await.len(),
            1,
            "refusals stored nothing"
        );

        // Refused resumes: each recorded with its outcome, none resumes anything.
        let refusals = [
            (
                unique("k"),
                token22.clone(),
                digest("P-17"),
                "alice",
                "reapproval_required",
                StatusCode::OK,
            ),
            (
                unique("k"),
                "swyw_0000000000000000000000000000000000000000000000000000000000000000".into(),
                digest("P-17"),
                "alice",
                "no_wait_match",
                StatusCode::OK,
            ),
            (
                unique("k"),
                token17.clone(),
                digest("P-17"),
                "mallory",
                "unauthorized_source",
                StatusCode::UNAUTHORIZED,
            ),
        ];
        for (key, token, digest, actor, outcome, status) in &refusals {
            let (got, answer) = resume(&daemon, key, token, digest, actor).await;
            assert_eq!(
                (got, answer["outcome"].as_str()),
                (*status, Some(*outcome)),
                "{backend:?}: {answer}"
            );
            assert!(answer["intake_id"].is_string(), "recorded: {answer}");
        }
        for run in [&p17, &p22] {
            assert_eq!(
                daemon.get(&format!("/v1/runs/{run}")).await["status"],
                "needs_input"
            );
            assert_eq!(waits_of(&daemon, run).await[0]["status"], "open");
        }

        // The approval for P-17 resumes exactly the P-17 run.
        let key = unique("approval");
        let (status, answer) = resume(&daemon, &key, &token17, &digest("P-17"), "alice").await;
        assert_eq!(
            (status, answer["outcome"].as_str()),
            (StatusCode::OK, Some("resumed")),
            "{answer}"
        );
        assert_eq!(answer["run_id"], json!(p17));
        let message = worker.wait_for(&p17, "resume").await;
        assert_eq!(message["data"]["resume"]["decision"], "approve");
        assert_eq!(message["data"]["resume"]["actor"], "alice");
        assert_eq!(message["data"]["resume"]["wait_id"], "approve");
        assert_eq!(
            message["data"]["resume"]["proposal"]["digest"],
            json!(digest("P-17"))
        );
        assert_eq!(
            message["data"]["resume"]["event"]["event_type"],
            "wait.resume"
        );
        assert_eq!(message["data"]["resume"]["intake_id"], answer["intake_id"]);
        let view = wait_status(&daemon, &p17, "dispatched").await;
        assert_eq!(
            view["dispatch"]["id"], message["id"],
            "the resume's id is its dispatch's"
        );
        assert_eq!(view["waits"][0]["status"], "resumed", "{view:#}");
        assert_eq!(view["waits"][0]["resumed_by"], answer["intake_id"]);
        assert!(
            !view.to_string().contains(&token17),
            "a run's view never shows its token"
        );
        let console = super::console::Console::login(&daemon, super::harness::TOKEN).await;
        let page = console.page(&format!("/ui/runs/{p17}")).await;
        for shown in ["Waits", "approve", "resumed", "approve by alice", "P-17"] {
            assert!(
                page.contains(shown),
                "the console's run page shows {shown}: {page}"
            );
        }
        assert!(!page.contains(&token17));
        assert_eq!(
            daemon.get(&format!("/v1/runs/{p22}")).await["status"],
            "needs_input",
            "P-22 still waits"
        );

        // Sent twice: the same delivery, and another delivery of the same approval.
        let (_, copy) = resume(&daemon, &key, &token17, &digest("P-17"), "alice").await;
        assert_eq!(
            (copy["outcome"].as_str(), copy["first_outcome"].as_str()),
            (Some("duplicate"), Some("resumed")),
            "{copy}"
        );
        let (status, second) = resume(
            &daemon,
            &unique("approval"),
            &token17,
            &digest("P-17"),
            "alice",
        )
        .await;
        assert_eq!(
            (status, second["outcome"].as_str()),
            (StatusCode::OK, Some("duplicate")),
            "{second}"
        );

        // A canonical event carrying the approval for P-22 resumes P-22.
        let (status, via_event) = daemon
            .post_event_as(
                token_of(MANAGER),
                &unique("evt"),
                &json!({
                "channel": "chat", "event_type": "approval.given", "tenant_id": "acme",
                "target_entity_id": "approvals", "payload": {"resume": {
                    "token": token22, "proposal_digest": digest("P-22"), "decision": "approve",
                    "actor": MANAGER}}}),
            )
            .await;
        assert_eq!(
            (status, via_event["outcome"].as_str()),
            (StatusCode::OK, Some("resumed")),
            "{via_event}"
        );
        assert_eq!(via_event["run_id"], json!(p22));
        let message = worker.wait_for(&p22, "resume").await;
        assert_eq!(message["data"]["resume"]["actor"], MANAGER);
        assert_eq!(
            message["data"]["resume"]["event"]["event_type"],
            "approval.given"
        );

        // Exactly one resume message per run; the ledger holds every attempt, never a token.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(worker.of(&p17, "resume").len(), 1);
        assert_eq!(worker.of(&p22, "resume").len(), 1);
        let ledger = daemon.intake("tenant=acme&limit=100").await;
        let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
        for row in &ledger {
            *outcomes
                .entry(row["outcome"].as_str().unwrap_or_default().into())
                .or_default() += 1;
            let text = row.to_string();
            assert!(
                !text.contains(&token17) && !text.contains(&token22),
                "a token in the ledger: {row}"
            );
        }
        for (outcome, n) in [
            ("resumed", 2),
            ("reapproval_required", 1),
            ("no_wait_match", 1),
            ("unauthorized_source", 1),
            ("duplicate", 1),
        ] {
            assert_eq!(
                outcomes.get(outcome).copied().unwrap_or(0),
                n,
                "{backend:?} {outcome}: {outcomes:?}"
            );
        }

        // The worker goes on with its fencing token and finishes.
        let (status, done) = daemon
            .post(
                &format!("/v1/runs/{p17}/finish"),
                &json!({"status": "completed", "fencing_token": t17}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{done}");
        // Late: the wait ended with its run; recorded, nothing changes.
        let (_, late) = resume(&daemon, &unique("late"), &token17, &digest("P-17"), "alice").await;
        assert_eq!(late["outcome"], "duplicate", "{late}");
        daemon.stop();
        setup.db.drop_database().await;
    }
}

/// `on_timeout = "fail"` fails the run and frees its entity; `"resume"` resumes it with decision
/// `timeout`; a resume after the deadline is `wait_expired`.
#[tokio::test]
async fn deadlines_fail_or_resume_and_late_approvals_are_wait_expired() {
    for backend in Backend::ALL {
        let Some(setup) = Setup::new(backend).await else {
            continue;
        };
        let daemon = setup.daemon().await;
        let worker = &setup.worker;
        let entity = unique("ACCT-9-ticket");
        let (failing, t1) = started_run(&daemon, worker, &entity).await;
        let (resuming, t2) = started_run(&daemon, worker, &unique("ACCT-9-ticket")).await;
        let token1 = open_wait(&daemon, &failing, t1, "P-17", "1s", "fail").await;
        open_wait(&daemon, &resuming, t2, "P-22", "1s", "resume").await;

        let view = wait_status(&daemon, &failing, "failed").await;
        assert_eq!(history_causes(&view, "wait_expired"), 1, "{view:#}");
        assert_eq!(waits_of(&daemon, &failing).await[0]["status"], "expired");
        let (_, late) = resume(&daemon, &unique("late"), &token1, &digest("P-17"), "alice").await;
        assert_eq!(late["outcome"], "wait_expired", "{backend:?}: {late}");
        // The entity is free again: the next request on it routes.
        let (_, next) = daemon
            .post_event(
                &unique("req"),
                &json!({"channel": "chat", "event_type": "credit.requested",
                "tenant_id": "acme", "target_entity_id": entity, "payload": {}}),
            )
            .await;
        assert_eq!(next["outcome"], "routed", "{next}");

        let message = worker.wait_for(&resuming, "resume").await;
        assert_eq!(message["data"]["resume"]["decision"], "timeout");
        assert!(message["data"]["resume"]["event"].is_null());
        wait_status(&daemon, &resuming, "dispatched").await;
        assert_eq!(waits_of(&daemon, &resuming).await[0]["status"], "timed_out");
        daemon.stop();
        setup.db.drop_database().await;
    }
}

/// A Slack button click with a real v0 signature resumes the run; a forged one is 401 and
/// records nothing; a click by someone not among the approvers is refused.
#[tokio::test]
async fn a_signed_slack_button_resumes_and_a_forged_one_is_401() {
    for backend in [Backend::Sqlite, Backend::Postgres, Backend::MySql] {
        let Some(setup) = Setup::new(backend).await else {
            continue;
        };
        let daemon = setup.daemon().await;
        let worker = &setup.worker;
        let (run, fencing) = started_run(&daemon, worker, &unique("ACCT-9-ticket")).await;
        let token = open_wait(&daemon, &run, fencing, "P-17", "48h", "fail").await;

        let forged = slack_click(MANAGER, &token, &unique("trigger"));
        let (status, answer) = post_click(
            &daemon,
            &forged,
            &slack_v0("not-the-secret", unix_now(), &forged),
        )
        .await;
        assert_eq!(
            (status, answer["outcome"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("unauthorized_source")),
            "{answer}"
        );
        let (status, stranger) = post_click(
            &daemon,
            &slack_click("U0INTERN", &token, &unique("trigger")),
            "",
        )
        .await;
        assert_eq!(
            (status, stranger["outcome"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("unauthorized_source")),
            "{stranger}"
        );
        assert!(
            stranger["intake_id"].is_string(),
            "an authenticated click is recorded"
        );
        assert_eq!(waits_of(&daemon, &run).await[0]["status"], "open");

        let click = slack_click(MANAGER, &token, &unique("trigger"));
        let (status, answer) = post_click(&daemon, &click, "").await;
        assert_eq!(
            (status, answer["outcome"].as_str()),
            (StatusCode::OK, Some("resumed")),
            "{backend:?}: {answer}"
        );
        let message = worker.wait_for(&run, "resume").await;
        assert_eq!(message["data"]["resume"]["actor"], MANAGER);
        assert_eq!(message["data"]["resume"]["event"]["channel"], "slack");
        assert_eq!(
            message["data"]["resume"]["event"]["event_type"],
            "block_actions"
        );
        // Slack's copy of the same click is a duplicate.
        let (status, copy) = post_click(&daemon, &click, "").await;
        assert_eq!(
            (status, copy["outcome"].as_str()),
            (StatusCode::OK, Some("duplicate")),
            "{copy}"
        );
        let recorded = daemon.intake("source=ws&limit=10").await;
        assert_eq!(
            recorded.len(),
            2,
            "the stranger's click and the manager's: {recorded:#?}"
        );
        assert!(recorded.iter().all(|r| !r.to_string().contains(&token)));
        daemon.stop();
        setup.db.drop_database().await;
    }
}

/// A pull worker receives the resume through `POST /v1/claims`, and a CloudEvent can carry the
/// approval.
#[tokio::test]
async fn pull_workers_claim_the_resume_and_cloudevents_carry_approvals() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(setup) = Setup::new(backend).await else {
            continue;
        };
        let daemon = setup.daemon().await;
        let (_, answer) = daemon
            .post_event(
                &unique("req"),
                &json!({"channel": "chat", "event_type": "credit.pull",
                "tenant_id": "acme", "target_entity_id": unique("ACCT-9"), "payload": {}}),
            )
            .await;
        let run = run_id(&answer);
        let claims = daemon.claim(&["credit-pull"], 1).await;
        assert_eq!(claims.len(), 1);
        let fencing = claims[0]["message"]["data"]["run"]["fencing_token"]
            .as_i64()
            .unwrap();
        let token = open_wait(&daemon, &run, fencing, "P-5", "48h", "fail").await;
        assert!(
            daemon.claim(&["credit-pull"], 1).await.is_empty(),
            "the start is not handed out again"
        );

        let cloudevent = json!({
            "specversion": "1.0", "id": unique("ce"), "source": "/approvals", "type": "approval.given",
            "subject": "approvals",
            "data": {"resume": {"token": token, "proposal_digest": digest("P-5"),
                                "decision": "approve", "actor": "alice"}},
        });
        let response = daemon
            .client()
            .post(daemon.url("/v1/ingest/cloudevents/bus"))
            .bearer_auth(token_of("alice"))
            .header("Content-Type", "application/cloudevents+json")
            .body(cloudevent.to_string())
            .send()
            .await
            .expect("POST cloudevent");
        let (status, answer) = super::harness::read(response).await;
        assert_eq!(
            (status, answer["outcome"].as_str()),
            (StatusCode::OK, Some("resumed")),
            "{backend:?}: {answer}"
        );

        let deadline = Instant::now() + Duration::from_secs(30);
        let claim = loop {
            if let Some(claim) = daemon.claim(&["credit-pull"], 1).await.pop() {
                break claim;
            }
            assert!(Instant::now() < deadline, "no resume claim");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(claim["message"]["type"], "switchyard.run.resume");
        assert_eq!(claim["message"]["data"]["run"]["id"], json!(run));
        assert_eq!(
            claim["message"]["data"]["resume"]["event"]["event_type"],
            "approval.given"
        );
        let view = daemon.get(&format!("/v1/runs/{run}")).await;
        assert_eq!(view["status"], "dispatched");
        assert_eq!(claim["message"]["id"], view["dispatch"]["id"]);
        let (status, _) = daemon
            .post(
                &format!("/v1/runs/{run}/finish"),
                &json!({"status": "completed", "fencing_token": fencing}),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        daemon.stop();
        setup.db.drop_database().await;
    }
}

/// Waits, tokens and timers survive a `kill -9`; a timer due while no daemon ran fires once
/// after the start.
#[tokio::test]
async fn waits_survive_a_kill_and_a_timer_due_meanwhile_fires_once() {
    for backend in Backend::ALL {
        let Some(setup) = Setup::new(backend).await else {
            continue;
        };
        let daemon = setup.daemon().await;
        let worker = &setup.worker;
        let (waiting, t1) = started_run(&daemon, worker, &unique("ACCT-9-ticket")).await;
        let (timing, t2) = started_run(&daemon, worker, &unique("ACCT-9-ticket")).await;
        let token = open_wait(&daemon, &waiting, t1, "P-17", "48h", "fail").await;
        open_wait(&daemon, &timing, t2, "P-22", "2s", "resume").await;
        drop(daemon); // SIGKILL
        tokio::time::sleep(Duration::from_secs(3)).await; // the deadline passes while down

        let daemon = setup.daemon().await;
        let message = worker.wait_for(&timing, "resume").await;
        assert_eq!(message["data"]["resume"]["decision"], "timeout");
        let (status, answer) =
            resume(&daemon, &unique("k"), &token, &digest("P-17"), "alice").await;
        assert_eq!(
            (status, answer["outcome"].as_str()),
            (StatusCode::OK, Some("resumed")),
            "{backend:?}: {answer}"
        );
        worker.wait_for(&waiting, "resume").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let view = daemon.get(&format!("/v1/runs/{timing}")).await;
        assert_eq!(
            history_causes(&view, "resumed"),
            1,
            "the timer fired once: {view:#}"
        );
        assert_eq!(worker.of(&timing, "resume").len(), 1);
        daemon.stop();
        setup.db.drop_database().await;
    }
}

/// Two daemons on one PostgreSQL (and MariaDB): every due timer fires once, and concurrent
/// resumes of one wait resume it once.
#[tokio::test]
async fn two_replicas_fire_each_timer_once_and_racing_resumes_resume_once() {
    for backend in [Backend::Postgres, Backend::MySql] {
        let Some(setup) = Setup::new(backend).await else {
            continue;
        };
        let first = setup.daemon().await;
        let second = setup.daemon().await;
        let worker = &setup.worker;
        let mut timed = Vec::new();
        for _ in 0..6 {
            let (run, fencing) = started_run(&first, worker, &unique("ACCT-9-ticket")).await;
            open_wait(&first, &run, fencing, "P-1", "2s", "resume").await;
            timed.push(run);
        }
        let (raced, fencing) = started_run(&first, worker, &unique("ACCT-9-ticket")).await;
        let token = open_wait(&second, &raced, fencing, "P-9", "48h", "fail").await;
        let attempts =
            (0..8).map(|i| {
                let daemon = if i % 2 == 0 { &first } else { &second };
                let token = token.clone();
                async move {
                    settled_resume(daemon, &unique("race"), &token, &digest("P-9"), "alice").await
                }
            });
        let answers = futures::future::join_all(attempts).await;
        let resumed = answers
            .iter()
            .filter(|(_, a)| a["outcome"] == "resumed")
            .count();
        let duplicates = answers
            .iter()
            .filter(|(_, a)| a["outcome"] == "duplicate")
            .count();
        assert_eq!((resumed, duplicates), (1, 7), "{backend:?}: {answers:#?}");

        // A resume sent by the other replica the moment the opening answers: the token exists
        // only from the opening's commit, which also made the run `needs_input`, so the
        // resume finds the whole wait or nothing; it is never half-open and never lost.
        let mut opened_then_resumed = Vec::new();
        for _ in 0..4 {
            opened_then_resumed.push(started_run(&first, worker, &unique("ACCT-9-ticket")).await);
        }
        let races = opened_then_resumed.iter().map(|(run, fencing)| {
            let (first, second) = (&first, &second);
            async move {
                let token = open_wait(first, run, *fencing, "P-3", "48h", "fail").await;
                settled_resume(second, &unique("fast"), &token, &digest("P-3"), "alice").await
            }
        });
        for (status, answer) in futures::future::join_all(races).await {
            assert_eq!(
                (status, answer["outcome"].as_str()),
                (StatusCode::OK, Some("resumed")),
                "{answer}"
            );
        }
        for (run, _) in &opened_then_resumed {
            worker.wait_for(run, "resume").await;
            let view = wait_status(&second, run, "dispatched").await;
            assert_eq!(history_causes(&view, "resumed"), 1, "{view:#}");
        }

        for run in &timed {
            worker.wait_for(run, "resume").await;
        }
        worker.wait_for(&raced, "resume").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        for run in timed.iter().chain([&raced]) {
            let view = first.get(&format!("/v1/runs/{run}")).await;
            assert_eq!(history_causes(&view, "resumed"), 1, "{backend:?}: {view:#}");
            assert_eq!(worker.of(run, "resume").len(), 1);
        }
        first.stop();
        second.stop();
        setup.db.drop_database().await;
    }
}

/// Resumes racing the wait's deadline (and its timer): the wait ends once, either resumed (one
/// `resumed`, the rest `duplicate`, the run goes on) or expired (every answer `wait_expired`,
/// the run failed), never both and never neither.
#[tokio::test]
async fn resumes_racing_the_deadline_end_the_wait_once() {
    for backend in Backend::ALL {
        let Some(setup) = Setup::new(backend).await else {
            continue;
        };
        let daemon = setup.daemon().await;
        let worker = &setup.worker;
        let (run, fencing) = started_run(&daemon, worker, &unique("ACCT-9-ticket")).await;
        let token = open_wait(&daemon, &run, fencing, "P-17", "1s", "fail").await;
        tokio::time::sleep(Duration::from_millis(850)).await;
        let attempts = (0..10).map(|i| {
            let (daemon, token) = (&daemon, token.clone());
            async move {
                tokio::time::sleep(Duration::from_millis(30 * i)).await;
                settled_resume(daemon, &unique("race"), &token, &digest("P-17"), "alice").await
            }
        });
        let answers = futures::future::join_all(attempts).await;
        let count = |outcome: &str| {
            answers
                .iter()
                .filter(|(_, a)| a["outcome"] == outcome)
                .count()
        };
        let (resumed, duplicate, expired) =
            (count("resumed"), count("duplicate"), count("wait_expired"));
        let errors: Vec<String> = daemon
            .logs()
            .lines()
            .filter(|l| l.contains("ERROR") || l.contains("WARN"))
            .map(str::to_owned)
            .collect();
        assert_eq!(
            resumed + duplicate + expired,
            10,
            "{backend:?}: {answers:#?}\n{errors:#?}"
        );
        assert!(resumed <= 1, "{answers:#?}");
        let wait = &waits_of(&daemon, &run).await[0];
        if resumed == 1 {
            assert_eq!(wait["status"], "resumed");
            worker.wait_for(&run, "resume").await;
            let view = wait_status(&daemon, &run, "dispatched").await;
            assert_eq!(history_causes(&view, "wait_expired"), 0, "{view:#}");
        } else {
            assert_eq!((duplicate, expired), (0, 10), "{answers:#?}");
            let view = wait_status(&daemon, &run, "failed").await;
            assert_eq!(history_causes(&view, "resumed"), 0, "{view:#}");
            assert_eq!(waits_of(&daemon, &run).await[0]["status"], "expired");
        }
        daemon.stop();
        setup.db.drop_database().await;
    }
}

/// A run may hold several waits; each ends once and sends its own resume message (its own id),
/// and the run waits (`needs_input`) until the last one ended.
#[tokio::test]
async fn a_run_with_two_waits_resumes_once_per_wait() {
    for backend in Backend::ALL {
        let Some(setup) = Setup::new(backend).await else {
            continue;
        };
        let daemon = setup.daemon().await;
        let worker = &setup.worker;
        let (run, fencing) = started_run(&daemon, worker, &unique("ACCT-9-ticket")).await;
        let refund = open_wait(&daemon, &run, fencing, "P-17", "48h", "fail").await;
        let (status, answer) = daemon
            .post(
                &format!("/v1/runs/{run}/waits"),
                &json!({"fencing_token": fencing, "wait_id": "approve-discount",
                        "expects": "approval", "proposal": {"id": "P-18", "digest": digest("P-18")},
                        "deadline": "48h"}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
        let discount = answer["resume_token"].as_str().expect("token").to_owned();

        let (_, first) = resume(&daemon, &unique("k"), &refund, &digest("P-17"), "alice").await;
        assert_eq!(first["outcome"], "resumed", "{backend:?}: {first}");
        worker.wait_for(&run, "resume").await;
        let view = daemon.get(&format!("/v1/runs/{run}")).await;
        assert_eq!(
            view["status"], "needs_input",
            "one wait is still open: {view:#}"
        );
        let (_, second) = resume(&daemon, &unique("k"), &discount, &digest("P-18"), "alice").await;
        assert_eq!(second["outcome"], "resumed", "{second}");
        wait_status(&daemon, &run, "dispatched").await;
        let deadline = Instant::now() + Duration::from_secs(60);
        while worker.of(&run, "resume").len() < 2 {
            assert!(Instant::now() < deadline, "{:#?}", worker.messages());
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let resumes = worker.of(&run, "resume");
        let waits: BTreeSet<&str> = resumes
            .iter()
            .filter_map(|m| m["data"]["resume"]["wait_id"].as_str())
            .collect();
        assert_eq!(waits, BTreeSet::from(["approve", "approve-discount"]));
        assert_ne!(resumes[0]["id"], resumes[1]["id"]);
        let (_, again) = resume(&daemon, &unique("k"), &refund, &digest("P-17"), "alice").await;
        assert_eq!(again["outcome"], "duplicate", "{again}");

        // A third wait is open when the worker finishes: it ends with the run, and a late
        // approval changes nothing.
        let (status, answer) = daemon
            .post(
                &format!("/v1/runs/{run}/waits"),
                &json!({"fencing_token": fencing, "wait_id": "confirm", "expects": "answer",
                        "proposal": {"id": "P-19", "digest": digest("P-19")}, "deadline": "48h"}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
        let confirm = answer["resume_token"].as_str().expect("token").to_owned();
        let (status, _) = daemon
            .post(
                &format!("/v1/runs/{run}/finish"),
                &json!({"status": "completed", "fencing_token": fencing}),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(waits_of(&daemon, &run).await[2]["status"], "cancelled");
        let (_, late) = resume(&daemon, &unique("k"), &confirm, &digest("P-19"), "alice").await;
        assert_eq!(late["outcome"], "no_wait_match", "{late}");
        assert_eq!(
            daemon.get(&format!("/v1/runs/{run}")).await["status"],
            "completed"
        );
        daemon.stop();
        setup.db.drop_database().await;
    }
}

/// With principals (issue 15): a resume of a run whose principal was suspended meanwhile
/// resumes nothing (recorded `authority_unavailable`, detail `authority_revoked`), the wait
/// stays open, and once the principal is active again the same approval resumes it.
#[tokio::test]
async fn a_resume_under_a_suspended_principal_resumes_nothing() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(setup) = Setup::new(backend).await else {
            continue;
        };
        let active = setup.config();
        let agent = "id = \"acme-agent\"\ntenant = \"acme\"\nkind = \"service\"\nstatus = ";
        let suspended = active.replacen(
            &format!("{agent}\"active\""),
            &format!("{agent}\"suspended\""),
            1,
        );
        assert_ne!(
            suspended, active,
            "the harness's principal is where this test expects it"
        );
        let daemon = setup.daemon_on(&active).await;
        let (run, fencing) = started_run(&daemon, &setup.worker, &unique("ACCT-9-ticket")).await;
        let token = open_wait(&daemon, &run, fencing, "P-17", "48h", "fail").await;

        async fn credit_degraded(daemon: &Daemon) -> bool {
            daemon.get("/v1/workflows").await["workflows"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|w| w["id"] == "credit" && !w["degraded"].is_null())
        }
        async fn until(daemon: &Daemon, degraded: bool) {
            let deadline = Instant::now() + Duration::from_secs(60);
            while credit_degraded(daemon).await != degraded {
                assert!(
                    Instant::now() < deadline,
                    "reload not applied: {}",
                    daemon.logs()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        daemon.reload(&suspended);
        until(&daemon, true).await;
        let (status, refused) =
            resume(&daemon, &unique("k"), &token, &digest("P-17"), "alice").await;
        assert_eq!(
            (status, refused["outcome"].as_str()),
            (StatusCode::OK, Some("authority_unavailable")),
            "{backend:?}: {refused}"
        );
        assert!(
            refused["detail"]
                .as_str()
                .is_some_and(|d| d.starts_with("authority_revoked")),
            "{refused}"
        );
        assert_eq!(waits_of(&daemon, &run).await[0]["status"], "open");
        assert_eq!(
            daemon.get(&format!("/v1/runs/{run}")).await["status"],
            "needs_input"
        );

        daemon.reload(&active);
        until(&daemon, false).await;
        let (_, resumed) = resume(&daemon, &unique("k"), &token, &digest("P-17"), "alice").await;
        assert_eq!(resumed["outcome"], "resumed", "{resumed}");
        setup.worker.wait_for(&run, "resume").await;
        daemon.stop();
        setup.db.drop_database().await;
    }
}
