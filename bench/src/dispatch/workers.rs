//! Where runs arrive: the HTTP sink and the JetStream consumer in this process, recording each
//! run's arrival.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use axum::extract::State;
use axum::http::StatusCode;
use bytes::Bytes;
use futures::StreamExt;

use super::STREAM;

/// Where runs arrive: the time each arrived and its `data.run.id`.
#[derive(Debug, Default)]
pub struct Arrivals {
    runs: Mutex<Vec<(Instant, String)>>,
    /// Requests the HTTP sink refused (outage).
    pub(super) refused: AtomicU64,
    /// Status the HTTP sink answers (204, or 503 during an outage).
    pub(super) status: AtomicU16,
}

impl Arrivals {
    fn record(&self, body: &[u8]) {
        let at = Instant::now();
        if let Some(id) = run_id_of(body) {
            lock(&self.runs).push((at, id.to_owned()));
        }
    }

    /// Distinct runs that arrived in `[from, until)`.
    pub(super) fn count_between(&self, from: Instant, until: Instant) -> usize {
        let runs = lock(&self.runs);
        let mut ids: Vec<&str> = runs
            .iter()
            .filter(|(at, _)| *at >= from && *at < until)
            .map(|(_, id)| id.as_str())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    }

    /// The first arrival of each run.
    pub(super) fn first_arrivals(&self) -> HashMap<String, Instant> {
        let mut first = HashMap::new();
        for (at, id) in lock(&self.runs).iter() {
            first.entry(id.clone()).or_insert(*at);
        }
        first
    }
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `data.run.id` of a run message (`RunInfo` serialises `id` first), without parsing the JSON.
fn run_id_of(body: &[u8]) -> Option<&str> {
    string_after(body, br#""run":{"id":""#)
}

/// The string value after `key` (which ends with the opening quote).
pub(super) fn string_after<'a>(body: &'a [u8], key: &[u8]) -> Option<&'a str> {
    let start = body.windows(key.len()).position(|w| w == key)? + key.len();
    let len = body[start..].iter().position(|&b| b == b'"')?;
    std::str::from_utf8(&body[start..start + len]).ok()
}

/// Starts the HTTP sink on 127.0.0.1:0, on a thread and runtime of its own, as a worker on
/// another machine would be: on the generator's one thread, the sink's requests waited for the
/// load's and the load's for the sink's.
pub(super) fn start_sink(arrivals: Arc<Arrivals>) -> anyhow::Result<SocketAddr> {
    arrivals.status.store(204, Ordering::Relaxed);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let listener = {
        let _sink_runtime = runtime.enter();
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        tokio::net::TcpListener::from_std(listener)?
    };
    let addr = listener.local_addr()?;
    let app = axum::Router::new()
        .route("/runs", axum::routing::post(receive))
        .with_state(arrivals);
    std::thread::Builder::new()
        .name("bench-sink".into())
        .spawn(move || runtime.block_on(async move { axum::serve(listener, app).await }))?;
    Ok(addr)
}

async fn receive(State(arrivals): State<Arc<Arrivals>>, body: Bytes) -> StatusCode {
    let status = arrivals.status.load(Ordering::Relaxed);
    if status == 204 {
        arrivals.record(&body);
    } else {
        arrivals.refused.fetch_add(1, Ordering::Relaxed);
    }
    StatusCode::from_u16(status).unwrap_or(StatusCode::NO_CONTENT)
}

/// Creates the stream afresh and consumes it (no acks) into `arrivals`.
pub(super) async fn start_consumer(arrivals: Arc<Arrivals>, url: &str) -> anyhow::Result<()> {
    let client = async_nats::connect(url)
        .await
        .with_context(|| format!("cannot reach NATS at {url}"))?;
    let jetstream = async_nats::jetstream::new(client);
    let _ = jetstream.delete_stream(STREAM).await;
    let stream = jetstream
        .create_stream(async_nats::jetstream::stream::Config {
            name: STREAM.into(),
            subjects: vec!["bench.*.*".into()],
            ..Default::default()
        })
        .await
        .context("cannot create the JetStream stream")?;
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            ack_policy: async_nats::jetstream::consumer::AckPolicy::None,
            ..Default::default()
        })
        .await
        .context("cannot create the JetStream consumer")?;
    let mut messages = consumer
        .messages()
        .await
        .context("cannot consume the stream")?;
    tokio::spawn(async move {
        while let Some(Ok(message)) = messages.next().await {
            arrivals.record(&message.payload);
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_id_is_read_from_a_run_message() {
        let body = br#"{"specversion":"1.0","data":{"run":{"id":"r-1","workflow_id":"triage"},"event":{}}}"#;
        assert_eq!(run_id_of(body), Some("r-1"));
        assert_eq!(
            string_after(br#"{"outcome":"routed","run_id":"r-2"}"#, br#""run_id":""#),
            Some("r-2")
        );
    }
}
