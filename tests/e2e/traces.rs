//! Traces end to end: a sender's W3C `traceparent` through intake, the ledger and the run to
//! the worker, and the spans exported on the way.
//!
//! The collector here is a real OTLP/HTTP receiver (axum on 127.0.0.1, `POST /v1/traces`) that
//! decodes each `ExportTraceServiceRequest` with `opentelemetry-proto`'s own messages; the
//! worker is a real HTTP server that checks the Standard Webhooks signature of every request
//! with its own HMAC before it records what it got.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::jetstream;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode as AxumStatus};
use axum::routing::post;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use futures::StreamExt as _;
use hmac::{Hmac, Mac};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;
use prost::Message as _;
use reqwest::StatusCode;
use serde_json::Value;

use super::harness::{Backend, Daemon, TOKEN, TestDb, config, event, run_id, unique};

/// The sender's span, and a tracestate.
const SENDER_SPAN: &str = "00f067aa0ba902b7";
const TRACESTATE: &str = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7";
const SECRET_ENV: &str = "TRACE_WORKER_SECRET";

fn sender_traceparent(trace_id: &str) -> String {
    format!("00-{trace_id}-{SENDER_SPAN}-01")
}

/// A fresh trace id, so tests sharing a collector never see each other's spans.
fn new_trace_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

// ---------------------------------------------------------------------------------------------
// The OTLP/HTTP collector.

/// One exported span, as the collector decoded it.
#[derive(Debug, Clone)]
struct Exported {
    name: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    attributes: HashMap<String, String>,
    /// `(trace_id, span_id)` of each link.
    links: Vec<(String, String)>,
    service_name: Option<String>,
}

#[derive(Debug, Default)]
struct Collected {
    spans: Mutex<Vec<Exported>>,
    requests: Mutex<usize>,
}

struct Collector {
    url: String,
    collected: Arc<Collected>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn text(value: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

async fn export(
    State(collected): State<Arc<Collected>>,
    headers: HeaderMap,
    body: Bytes,
) -> (AxumStatus, Vec<u8>) {
    assert_eq!(
        headers.get("content-type").and_then(|v| v.to_str().ok()),
        Some("application/x-protobuf"),
        "OTLP/HTTP protobuf"
    );
    let request = match ExportTraceServiceRequest::decode(body) {
        Ok(request) => request,
        Err(error) => return (AxumStatus::BAD_REQUEST, error.to_string().into_bytes()),
    };
    *collected.requests.lock().expect("requests") += 1;
    let mut spans = collected.spans.lock().expect("spans");
    for resource_spans in request.resource_spans {
        let service_name = resource_spans.resource.as_ref().and_then(|resource| {
            resource
                .attributes
                .iter()
                .find(|kv| kv.key == "service.name")
                .map(|kv| text(&kv.value))
        });
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                spans.push(Exported {
                    name: span.name.clone(),
                    trace_id: hex::encode(&span.trace_id),
                    span_id: hex::encode(&span.span_id),
                    parent_span_id: hex::encode(&span.parent_span_id),
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), text(&kv.value)))
                        .collect(),
                    links: span
                        .links
                        .iter()
                        .map(|l| (hex::encode(&l.trace_id), hex::encode(&l.span_id)))
                        .collect(),
                    service_name: service_name.clone(),
                });
            }
        }
    }
    (
        AxumStatus::OK,
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
}

impl Collector {
    async fn start() -> Collector {
        let collected = Arc::new(Collected::default());
        let app = axum::Router::new()
            .route("/v1/traces", post(export))
            .with_state(collected.clone());
        let (addr, server) = super::harness::serve_local(app).await;
        Collector {
            url: format!("http://{addr}"),
            collected,
            server,
        }
    }

    fn spans(&self, trace_id: &str) -> Vec<Exported> {
        self.collected
            .spans
            .lock()
            .expect("spans")
            .iter()
            .filter(|s| s.trace_id == trace_id)
            .cloned()
            .collect()
    }

    fn all(&self) -> Vec<Exported> {
        self.collected.spans.lock().expect("spans").clone()
    }

    /// Waits until trace `trace_id` has a span named each of `names`.
    async fn wait_for(&self, trace_id: &str, names: &[&str]) -> Vec<Exported> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let spans = self.spans(trace_id);
            if names.iter().all(|n| spans.iter().any(|s| s.name == *n)) {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "trace {trace_id} lacks one of {names:?} after 30 s: {spans:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn one<'a>(spans: &'a [Exported], name: &str) -> &'a Exported {
    let named: Vec<&Exported> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(named.len(), 1, "one `{name}` span: {spans:#?}");
    named[0]
}

// ---------------------------------------------------------------------------------------------
// The signed HTTP worker.

type HmacSha256 = Hmac<sha2::Sha256>;

#[derive(Debug, Clone)]
struct Received {
    traceparent: Option<String>,
    tracestate: Option<String>,
    body: Value,
}

struct WorkerState {
    key: Vec<u8>,
    received: Mutex<Vec<Received>>,
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

/// Checks the Standard Webhooks signature (`v1,` HMAC-SHA256 of `{id}.{timestamp}.{body}`).
fn verified(key: &[u8], headers: &HeaderMap, body: &[u8]) -> bool {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let (Some(id), Some(timestamp), Some(signature)) = (
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
    ) else {
        return false;
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    if timestamp
        .parse::<i64>()
        .map_or(true, |ts| (now - ts).abs() > 300)
    {
        return false;
    }
    let mut mac = HmacSha256::new_from_slice(key).expect("any key length");
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    signature
        .split(' ')
        .filter_map(|entry| entry.strip_prefix("v1,"))
        .filter_map(|tag| BASE64.decode(tag).ok())
        .any(|tag| mac.clone().verify_slice(&tag).is_ok())
}

async fn receive(
    State(state): State<Arc<WorkerState>>,
    headers: HeaderMap,
    body: Bytes,
) -> AxumStatus {
    if !verified(&state.key, &headers, &body) {
        return AxumStatus::UNAUTHORIZED;
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    state.received.lock().expect("received").push(Received {
        traceparent: header("traceparent"),
        tracestate: header("tracestate"),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    AxumStatus::OK
}

impl Worker {
    /// A worker and the `whsec_` secret it verifies with.
    async fn start() -> (Worker, String) {
        let mut key = Vec::new();
        key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
        key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
        let secret = format!("whsec_{}", BASE64.encode(&key));
        let state = Arc::new(WorkerState {
            key,
            received: Mutex::new(Vec::new()),
        });
        let app = axum::Router::new()
            .route("/runs", post(receive))
            .with_state(state.clone());
        let (addr, server) = super::harness::serve_local(app).await;
        let worker = Worker {
            url: format!("http://{addr}/runs"),
            state,
            server,
        };
        (worker, secret)
    }

    /// The request that delivered run `run_id`.
    async fn wait_for_run(&self, run_id: &str) -> Received {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let found = self
                .state
                .received
                .lock()
                .expect("received")
                .iter()
                .find(|r| r.body["data"]["run"]["id"] == run_id)
                .cloned();
            if let Some(found) = found {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "the worker did not get run {run_id} in 30 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Config and requests.

/// An http target `worker` at `url` for workflow `triage` (chat/message), a pull workflow
/// `pulled` (chat/pull_me), and `telemetry` as the `[telemetry]` table's keys (none: off).
fn setup(worker_url: &str, telemetry: Option<&str>) -> String {
    let telemetry = telemetry
        .map(|keys| format!("[telemetry]\n{keys}\n"))
        .unwrap_or_default();
    format!(
        r#"{telemetry}
[[target]]
name = "worker"
kind = "http"
url = "{worker_url}"
signing_secret_env = "{SECRET_ENV}"

[[workflow]]
id = "triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
target = "worker"
triggers = [ {{ channel = "chat", event_type = "message", priority = 1 }} ]

[[workflow]]
id = "pulled"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ {{ channel = "chat", event_type = "pull_me", priority = 1 }} ]
"#
    )
}

/// The exporter sends every 100 ms instead of every 5 s.
const FAST_EXPORT: (&str, &str) = ("OTEL_BSP_SCHEDULE_DELAY", "100");

/// `POST /v1/events` with trace headers.
async fn post_traced(
    daemon: &Daemon,
    event: &Value,
    traceparent: Option<&str>,
    tracestate: Option<&str>,
) -> Value {
    let mut request = daemon
        .client()
        .post(daemon.url("/v1/events"))
        .bearer_auth(TOKEN)
        .header("Idempotency-Key", unique("trace"))
        .json(event);
    if let Some(traceparent) = traceparent {
        request = request.header("traceparent", traceparent);
    }
    if let Some(tracestate) = tracestate {
        request = request.header("tracestate", tracestate);
    }
    let response = request.send().await.expect("POST /v1/events");
    let status = response.status();
    let answer: Value = response.json().await.expect("JSON answer");
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer
}

/// The ledger row of intake `id`.
async fn ledger_row(daemon: &Daemon, id: &str) -> Value {
    daemon
        .intake("limit=100")
        .await
        .into_iter()
        .find(|row| row["id"] == id)
        .unwrap_or_else(|| panic!("no ledger row {id}"))
}

/// `(trace-id, parent-id, flags)` of a traceparent.
fn fields(traceparent: &str) -> (String, String, String) {
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    assert_eq!(parts[0], "00", "{traceparent}");
    (parts[1].into(), parts[2].into(), parts[3].into())
}

// ---------------------------------------------------------------------------------------------
// The tests.

/// On every database: the intake span's parent is the sender's span, the dispatch attempt is
/// in the same trace, and the worker's traceparent names the attempt span.
#[tokio::test]
async fn a_dispatch_to_an_http_worker_joins_the_senders_trace() {
    let collector = Collector::start().await;
    for db in TestDb::all().await {
        let (worker, secret) = Worker::start().await;
        let telemetry = format!(
            "otlp_endpoint = \"{}\"\nservice_name = \"switchyard-e2e\"",
            collector.url
        );
        let text = config(&db, &setup(&worker.url, Some(&telemetry)));
        let daemon = Daemon::start(&db, &text, &[(SECRET_ENV, secret.as_str()), FAST_EXPORT]).await;
        let trace_id = new_trace_id();
        let entity = unique("ticket");
        let answer = post_traced(
            &daemon,
            &event("chat", "message", "acme", &entity),
            Some(&sender_traceparent(&trace_id)),
            Some(TRACESTATE),
        )
        .await;
        assert_eq!(answer["outcome"], "routed", "{answer}");
        let run = run_id(&answer);
        let intake_id = answer["intake_id"].as_str().expect("intake id").to_owned();

        let received = worker.wait_for_run(&run).await;
        let spans = collector
            .wait_for(&trace_id, &["intake.delivery", "dispatch.attempt"])
            .await;
        let intake = one(&spans, "intake.delivery");
        assert_eq!(intake.trace_id, trace_id, "{:?}", db.backend);
        assert_eq!(
            intake.parent_span_id, SENDER_SPAN,
            "the intake span's parent is the sender's span"
        );
        assert_eq!(intake.attributes["source.kind"], "api");
        assert_eq!(intake.attributes["source.name"], "api");
        assert_eq!(intake.attributes["outcome"], "routed");
        assert_eq!(intake.attributes["intake.id"], intake_id);
        assert_eq!(intake.attributes["run.id"], run);
        assert_eq!(intake.service_name.as_deref(), Some("switchyard-e2e"));

        let attempt = one(&spans, "dispatch.attempt");
        assert_eq!(
            attempt.trace_id, trace_id,
            "the attempt is in the sender's trace"
        );
        assert_eq!(attempt.parent_span_id, intake.span_id);
        assert_eq!(attempt.attributes["dispatch.target"], "worker");
        assert_eq!(attempt.attributes["dispatch.attempt"], "1");
        assert_eq!(attempt.attributes["result"], "delivered");
        assert_eq!(attempt.attributes["http.response.status_code"], "200");
        assert_eq!(attempt.attributes["run.id"], run);

        let traceparent = received
            .traceparent
            .as_deref()
            .expect("a traceparent header");
        let (worker_trace, worker_parent, flags) = fields(traceparent);
        assert_eq!(
            worker_trace, trace_id,
            "the worker joins the sender's trace"
        );
        assert_eq!(
            worker_parent, attempt.span_id,
            "the worker's parent is the attempt span"
        );
        assert_eq!(flags, "01");
        assert_eq!(received.tracestate.as_deref(), Some(TRACESTATE));
        assert_eq!(
            received.body["traceparent"], traceparent,
            "the CloudEvents traceparent extension"
        );
        assert_eq!(received.body["tracestate"], TRACESTATE);

        // Stored: the intake span's context, with the sender's tracestate.
        let stored = format!("00-{trace_id}-{}-01", intake.span_id);
        let row = ledger_row(&daemon, &intake_id).await;
        assert_eq!(row["traceparent"], stored.as_str(), "{row:#}");
        assert_eq!(row["tracestate"], TRACESTATE);
        let run_view = daemon.get(&format!("/v1/runs/{run}")).await;
        assert_eq!(run_view["traceparent"], stored.as_str(), "{run_view:#}");
        assert_eq!(run_view["tracestate"], TRACESTATE);

        // The batch commit the delivery joined links to its span.
        let deadline = Instant::now() + Duration::from_secs(30);
        let batch = loop {
            let batch = collector.all().into_iter().find(|s| {
                s.name == "intake.batch_commit"
                    && s.links
                        .contains(&(trace_id.clone(), intake.span_id.clone()))
            });
            if let Some(batch) = batch {
                break batch;
            }
            assert!(
                Instant::now() < deadline,
                "no batch commit span links to the delivery"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(batch.attributes["batch.size"].parse::<u64>().expect("size") >= 1);
        daemon.stop();
        db.drop_database().await;
    }
}

/// A delivery without a traceparent starts a new trace when tracing is on; with
/// `sampling_ratio = 0` that trace is not exported, while a sender's sampled trace still is.
#[tokio::test]
async fn sampling_ratio_zero_exports_nothing_without_a_sampled_parent() {
    let collector = Collector::start().await;
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    let (worker, secret) = Worker::start().await;
    let telemetry = format!(
        "otlp_endpoint = \"{}\"\nsampling_ratio = 0.0",
        collector.url
    );
    let text = config(&db, &setup(&worker.url, Some(&telemetry)));
    let daemon = Daemon::start(&db, &text, &[(SECRET_ENV, secret.as_str()), FAST_EXPORT]).await;

    let unparented = post_traced(
        &daemon,
        &event("chat", "message", "acme", &unique("e")),
        None,
        None,
    )
    .await;
    let received = worker.wait_for_run(&run_id(&unparented)).await;
    let traceparent = received
        .traceparent
        .expect("a new trace is still propagated");
    let (new_trace, _, flags) = fields(&traceparent);
    assert_eq!(flags, "00", "not sampled");
    let row = ledger_row(&daemon, unparented["intake_id"].as_str().expect("id")).await;
    let (stored_trace, _, stored_flags) = fields(row["traceparent"].as_str().expect("stored"));
    assert_eq!(stored_trace, new_trace);
    assert_eq!(stored_flags, "00");

    // The parent's sampled flag wins over the ratio.
    let sampled_trace = new_trace_id();
    let sampled = post_traced(
        &daemon,
        &event("chat", "message", "acme", &unique("e")),
        Some(&sender_traceparent(&sampled_trace)),
        None,
    )
    .await;
    worker.wait_for_run(&run_id(&sampled)).await;
    collector
        .wait_for(&sampled_trace, &["intake.delivery", "dispatch.attempt"])
        .await;
    // Shutdown flushes whatever is still queued.
    daemon.stop();
    assert!(
        collector.spans(&new_trace).is_empty(),
        "the unsampled trace was exported: {:#?}",
        collector.spans(&new_trace)
    );
    let mut names: Vec<String> = collector.all().into_iter().map(|s| s.name).collect();
    names.sort();
    names.dedup();
    for span in collector.all() {
        assert_eq!(
            span.trace_id, sampled_trace,
            "only the sampled trace: {span:?}"
        );
    }
    assert!(
        names.contains(&"intake.batch_commit".to_owned()),
        "{names:?}"
    );
    db.drop_database().await;
}

/// Pull claims and NATS messages carry the run's trace; the claim is an attempt span too.
#[tokio::test]
async fn pull_claims_and_nats_messages_carry_the_trace() {
    let collector = Collector::start().await;
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    let stream = format!("TRACES_{}", uuid::Uuid::now_v7().simple());
    let subject = format!("traces{}", uuid::Uuid::now_v7().simple());
    let nats = format!(
        r#"[telemetry]
otlp_endpoint = "{}"

[[target]]
name = "bus"
kind = "nats"
url = "nats://127.0.0.1:4222"
subject = "{subject}.{{tenant}}.{{workflow}}"
stream = "{stream}"
create_stream = true

[[workflow]]
id = "bused"
tenant = "acme"
status = "live"
run_as = "acme-agent"
target = "bus"
triggers = [ {{ channel = "chat", event_type = "message", priority = 1 }} ]

[[workflow]]
id = "pulled"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ {{ channel = "chat", event_type = "pull_me", priority = 1 }} ]
"#,
        collector.url
    );
    let daemon = Daemon::start(&db, &config(&db, &nats), &[FAST_EXPORT]).await;

    // Pull: the claim body's message names the claim's attempt span.
    let pull_trace = new_trace_id();
    let pulled = post_traced(
        &daemon,
        &event("chat", "pull_me", "acme", &unique("p")),
        Some(&sender_traceparent(&pull_trace)),
        Some(TRACESTATE),
    )
    .await;
    let claims = daemon.claim(&["pulled"], 1).await;
    assert_eq!(claims.len(), 1, "{claims:?}");
    let message = &claims[0]["message"];
    assert_eq!(message["data"]["run"]["id"], run_id(&pulled).as_str());
    let spans = collector
        .wait_for(&pull_trace, &["intake.delivery", "dispatch.attempt"])
        .await;
    let attempt = one(&spans, "dispatch.attempt");
    assert_eq!(attempt.attributes["result"], "claimed");
    assert_eq!(attempt.attributes["dispatch.target"], "pull");
    assert_eq!(
        attempt.parent_span_id,
        one(&spans, "intake.delivery").span_id
    );
    assert_eq!(
        message["traceparent"],
        format!("00-{pull_trace}-{}-01", attempt.span_id).as_str(),
        "{message:#}"
    );
    assert_eq!(message["tracestate"], TRACESTATE);

    // NATS: the message headers name the publish attempt's span.
    let Ok(client) = async_nats::connect("nats://127.0.0.1:4222").await else {
        assert!(
            !super::harness::in_ci(),
            "CI=true but NATS is not running on 4222"
        );
        super::harness::skipped("SKIPPED the NATS part: nothing listens on 127.0.0.1:4222");
        return;
    };
    let nats_trace = new_trace_id();
    let bused = post_traced(
        &daemon,
        &event("chat", "message", "acme", &unique("n")),
        Some(&sender_traceparent(&nats_trace)),
        Some(TRACESTATE),
    )
    .await;
    let spans = collector
        .wait_for(&nats_trace, &["intake.delivery", "dispatch.attempt"])
        .await;
    let attempt = one(&spans, "dispatch.attempt");
    assert_eq!(attempt.attributes["result"], "delivered");
    let js = jetstream::new(client);
    let consumer = js
        .get_stream(&stream)
        .await
        .expect("the stream")
        .create_consumer(pull::Config {
            deliver_policy: DeliverPolicy::All,
            ack_policy: AckPolicy::None,
            ..Default::default()
        })
        .await
        .expect("a consumer");
    let mut messages = consumer.messages().await.expect("messages");
    let message = tokio::time::timeout(Duration::from_secs(30), messages.next())
        .await
        .expect("a message within 30 s")
        .expect("the stream goes on")
        .expect("read from NATS");
    let headers = message.headers.as_ref().expect("headers");
    let header = |name: &str| headers.get(name).map(|v| v.as_str().to_owned());
    assert_eq!(
        header("traceparent"),
        Some(format!("00-{nats_trace}-{}-01", attempt.span_id))
    );
    assert_eq!(header("tracestate").as_deref(), Some(TRACESTATE));
    let body: Value = serde_json::from_slice(&message.payload).expect("JSON");
    assert_eq!(body["data"]["run"]["id"], run_id(&bused).as_str());
    assert_eq!(
        body["traceparent"].as_str(),
        header("traceparent").as_deref()
    );
    let _ = js.delete_stream(&stream).await;
    daemon.stop();
    db.drop_database().await;
}

/// With `[telemetry]` absent nothing is exported, and the sender's context is stored and
/// forwarded exactly as it came, from every intake endpoint; an invalid one is ignored.
#[tokio::test]
async fn with_telemetry_off_the_senders_context_is_stored_and_forwarded_unchanged() {
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    let (worker, secret) = Worker::start().await;
    let webhook = r#"
[[source]]
kind = "webhook"
name = "zendesk"
tenant = "acme"
signing_secret_env = "TRACE_ZENDESK_SECRET"
"#;
    let text = config(&db, &format!("{webhook}{}", setup(&worker.url, None)));
    let daemon = Daemon::start(
        &db,
        &text,
        &[
            (SECRET_ENV, secret.as_str()),
            ("TRACE_ZENDESK_SECRET", "zendesk-secret"),
        ],
    )
    .await;
    let trace_id = new_trace_id();
    let incoming = sender_traceparent(&trace_id);
    let answer = post_traced(
        &daemon,
        &event("chat", "message", "acme", &unique("e")),
        Some(&incoming),
        Some(TRACESTATE),
    )
    .await;
    let received = worker.wait_for_run(&run_id(&answer)).await;
    assert_eq!(received.traceparent.as_deref(), Some(incoming.as_str()));
    assert_eq!(received.tracestate.as_deref(), Some(TRACESTATE));
    assert_eq!(received.body["traceparent"], incoming.as_str());
    let row = ledger_row(&daemon, answer["intake_id"].as_str().expect("id")).await;
    assert_eq!(row["traceparent"], incoming.as_str());
    assert_eq!(row["tracestate"], TRACESTATE);
    let run = daemon.get(&format!("/v1/runs/{}", run_id(&answer))).await;
    assert_eq!(run["traceparent"], incoming.as_str());

    // A pull claim forwards it too.
    let pulled = post_traced(
        &daemon,
        &event("chat", "pull_me", "acme", &unique("p")),
        Some(&incoming),
        None,
    )
    .await;
    let claims = daemon.claim(&["pulled"], 1).await;
    assert_eq!(
        claims[0]["message"]["data"]["run"]["id"],
        run_id(&pulled).as_str()
    );
    assert_eq!(claims[0]["message"]["traceparent"], incoming.as_str());
    assert!(claims[0]["message"].get("tracestate").is_none());

    // Invalid: ignored, never refused; nothing stored or sent.
    let invalid = post_traced(
        &daemon,
        &event("chat", "message", "acme", &unique("e")),
        Some(&format!("00-{}-{SENDER_SPAN}-01", "0".repeat(32))),
        Some(TRACESTATE),
    )
    .await;
    assert_eq!(invalid["outcome"], "routed");
    let received = worker.wait_for_run(&run_id(&invalid)).await;
    assert_eq!(received.traceparent, None);
    assert_eq!(received.tracestate, None);
    let row = ledger_row(&daemon, invalid["intake_id"].as_str().expect("id")).await;
    assert!(row.get("traceparent").is_none(), "{row:#}");

    // The webhook endpoint reads it as well (a signed Zendesk trigger delivery).
    let body = br#"{"ticket_id":"4711","event_type":"ticket.created"}"#;
    let timestamp = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let response = daemon
        .client()
        .post(daemon.url("/v1/ingest/webhook/zendesk"))
        .header(switchyard_webhook::TIMESTAMP_HEADER, &timestamp)
        .header(
            switchyard_webhook::SIGNATURE_HEADER,
            switchyard_webhook::sign(b"zendesk-secret", &timestamp, body),
        )
        .header(switchyard_webhook::INVOCATION_ID_HEADER, unique("inv"))
        .header("traceparent", &incoming)
        .body(body.to_vec())
        .send()
        .await
        .expect("POST webhook");
    let (status, answer) = super::harness::read(response).await;
    assert!(
        status.is_success() || status == StatusCode::BAD_REQUEST,
        "{status}: {answer}"
    );
    let row = ledger_row(&daemon, answer["intake_id"].as_str().expect("recorded")).await;
    assert_eq!(row["source"], "zendesk");
    assert_eq!(row["traceparent"], incoming.as_str(), "{row:#}");
    daemon.stop();
    db.drop_database().await;
}

/// A bad `[telemetry]` value stops `serve` with EX_CONFIG (78), naming the key and its line.
#[test]
fn a_bad_telemetry_value_stops_serve_with_exit_78() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (keys, key, line) in [
        (
            "otlp_endpoint = \"http://127.0.0.1:4318\"\nsampling_ratio = 1.5",
            "sampling_ratio",
            "line 6",
        ),
        (
            "otlp_endpoint = \"https://collector:4318\"",
            "otlp_endpoint",
            "line 5",
        ),
        ("service_name = \"\"", "service_name", "line 5"),
    ] {
        let path = dir.path().join("bad.toml");
        std::fs::write(
            &path,
            format!("[server]\nlisten = \"127.0.0.1:0\"\n\n[telemetry]\n{keys}\n"),
        )
        .expect("write");
        let output = std::process::Command::new(super::harness::binary())
            .args(["serve", "--config"])
            .arg(&path)
            .env("SWITCHYARD_API_TOKEN", TOKEN)
            .output()
            .expect("run serve");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(78), "EX_CONFIG: {stderr}");
        assert!(stderr.contains(key), "names `{key}`: {stderr}");
        assert!(stderr.contains(line), "names {line}: {stderr}");
    }
}
