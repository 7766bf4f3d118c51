//! Traces end to end: a sender's W3C `traceparent` through intake, the ledger and the run to
//! the worker, and the spans exported on the way.
//!
//! The collector here is a real OTLP/HTTP receiver (axum on 127.0.0.1, `POST /v1/traces`) that
//! decodes each `ExportTraceServiceRequest` with `opentelemetry-proto`'s own messages; the
//! worker is a real HTTP server that checks the Standard Webhooks signature of every request
//! with its own HMAC before it records what it got.

mod http;
mod pull_and_nats;
mod sampling;
mod settings;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode as AxumStatus};
use axum::routing::post;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
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
