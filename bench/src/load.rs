//! The load generator: `concurrency` keep-alive HTTP/1.1 connections (hyper's bare client
//! connection, no pool), each sending its next request as soon as the previous answer is read.
//! Latency is from just before the request is written to the end of its body.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Empty, Full};
use hyper::Request;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::procfs::{self, CpuSnapshot, CpuUse};
use crate::workload::Workload;

/// What one load run measured.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// Answers with a 2xx status.
    pub ok: u64,
    /// Non-2xx answers and failed connections.
    pub errors: u64,
    pub statuses: BTreeMap<u16, u64>,
    pub outcomes: BTreeMap<String, u64>,
    /// Latency of measured answers, in microseconds.
    pub latency_us: Histogram<u64>,
    pub window: Duration,
    pub cpu: CpuUse,
    /// The server's memory at the end of the run.
    pub memory: procfs::Memory,
    /// One error answer or connection error, to show what went wrong.
    pub first_error: Option<String>,
}

impl RunResult {
    pub fn ok_per_sec(&self) -> f64 {
        self.ok as f64 / self.window.as_secs_f64()
    }

    pub fn outcome_per_sec(&self, outcome: &str) -> f64 {
        self.outcomes.get(outcome).copied().unwrap_or(0) as f64 / self.window.as_secs_f64()
    }

    /// A latency percentile in milliseconds.
    pub fn latency_ms(&self, quantile: f64) -> f64 {
        self.latency_us.value_at_quantile(quantile) as f64 / 1000.0
    }

    pub fn max_ms(&self) -> f64 {
        self.latency_us.max() as f64 / 1000.0
    }
}

/// Per-connection tallies, merged at the end so connections share nothing while running.
struct Tally {
    ok: u64,
    errors: u64,
    statuses: BTreeMap<u16, u64>,
    outcomes: BTreeMap<String, u64>,
    latency_us: Histogram<u64>,
    first_error: Option<String>,
}

impl Tally {
    fn new() -> Self {
        Self {
            ok: 0,
            errors: 0,
            statuses: BTreeMap::new(),
            outcomes: BTreeMap::new(),
            // 1 µs to 10 minutes at 3 significant digits.
            latency_us: Histogram::new_with_bounds(1, 600_000_000, 3)
                .unwrap_or_else(|_| unreachable!("constant histogram bounds are valid")),
            first_error: None,
        }
    }

    fn merge(&mut self, other: Tally) {
        self.ok += other.ok;
        self.errors += other.errors;
        for (status, n) in other.statuses {
            *self.statuses.entry(status).or_default() += n;
        }
        for (outcome, n) in other.outcomes {
            *self.outcomes.entry(outcome).or_default() += n;
        }
        let _ = self.latency_us.add(&other.latency_us);
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
}

/// Drives `server_pid` at `addr` for `warmup` (not measured) and then `duration`.
pub async fn drive(
    addr: SocketAddr,
    server_pid: u32,
    workload: Arc<Workload>,
    concurrency: usize,
    warmup: Duration,
    duration: Duration,
) -> RunResult {
    let start = Instant::now();
    let measure_from = start + warmup;
    let until = measure_from + duration;
    let workers: Vec<_> = (0..concurrency)
        .map(|_| tokio::spawn(connection(addr, workload.clone(), measure_from, until)))
        .collect();
    tokio::time::sleep_until(measure_from.into()).await;
    let cpu_start = CpuSnapshot::take(server_pid);
    tokio::time::sleep_until(until.into()).await;
    let cpu_end = CpuSnapshot::take(server_pid);
    let memory = procfs::memory(server_pid).unwrap_or_default();
    let mut tally = Tally::new();
    for worker in workers {
        if let Ok(part) = worker.await {
            tally.merge(part);
        }
    }
    RunResult {
        cpu: cpu_end.since(&cpu_start, duration, tally.ok),
        ok: tally.ok,
        errors: tally.errors,
        statuses: tally.statuses,
        outcomes: tally.outcomes,
        latency_us: tally.latency_us,
        window: duration,
        memory,
        first_error: tally.first_error,
    }
}

async fn connect(addr: SocketAddr) -> Result<SendRequest<Full<Bytes>>, String> {
    let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    let (sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    Ok(sender)
}

/// One keep-alive connection's loop; reconnects after a failure.
async fn connection(
    addr: SocketAddr,
    workload: Arc<Workload>,
    measure_from: Instant,
    until: Instant,
) -> Tally {
    let mut tally = Tally::new();
    let mut sender = None;
    while Instant::now() < until {
        let mut current = match sender.take() {
            Some(current) => current,
            None => match connect(addr).await {
                Ok(current) => current,
                Err(error) => {
                    tally.errors += 1;
                    tally.first_error.get_or_insert(error);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        if current.ready().await.is_err() {
            continue;
        }
        let request = workload.request();
        let sent_at = Instant::now();
        let answer = match current.send_request(request).await {
            Ok(response) => {
                let status = response.status().as_u16();
                match response.into_body().collect().await {
                    Ok(body) => Ok((status, body.to_bytes())),
                    Err(error) => Err(error.to_string()),
                }
            }
            Err(error) => Err(error.to_string()),
        };
        let done_at = Instant::now();
        let measured = sent_at >= measure_from && done_at <= until;
        match answer {
            Ok((status, body)) => {
                sender = Some(current);
                if !measured {
                    continue;
                }
                *tally.statuses.entry(status).or_default() += 1;
                if (200..300).contains(&status) {
                    tally.ok += 1;
                } else {
                    tally.errors += 1;
                    tally.first_error.get_or_insert_with(|| {
                        format!("{status}: {}", String::from_utf8_lossy(&body))
                    });
                }
                if let Some(outcome) = outcome_of(&body) {
                    match tally.outcomes.get_mut(outcome) {
                        Some(n) => *n += 1,
                        None => {
                            tally.outcomes.insert(outcome.to_owned(), 1);
                        }
                    }
                }
                let micros =
                    u64::try_from(done_at.duration_since(sent_at).as_micros()).unwrap_or(u64::MAX);
                tally.latency_us.saturating_record(micros.max(1));
            }
            Err(error) => {
                if measured {
                    tally.errors += 1;
                }
                tally.first_error.get_or_insert(error);
            }
        }
    }
    tally
}

/// The `outcome` of an answer, found without parsing the whole JSON.
fn outcome_of(body: &[u8]) -> Option<&str> {
    const KEY: &[u8] = br#""outcome":""#;
    let start = body.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let len = body[start..].iter().position(|&b| b == b'"')?;
    std::str::from_utf8(&body[start..start + len]).ok()
}

/// `GET path` on a fresh connection: the status, or `None` when the server cannot be reached.
pub async fn get_status(addr: SocketAddr, path: &str) -> Option<u16> {
    get(addr, path).await.map(|(status, _)| status)
}

/// `GET path` with the bench's token on a fresh connection (`/readyz` shows its detail only to
/// a token): the status and the body, or `None` when the server cannot be reached.
pub async fn get(addr: SocketAddr, path: &str) -> Option<(u16, Bytes)> {
    let stream = TcpStream::connect(addr).await.ok()?;
    let (mut sender, connection) = http1::handshake(TokioIo::new(stream)).await.ok()?;
    tokio::spawn(connection);
    let request = Request::get(path)
        .header(hyper::header::HOST, addr.to_string())
        .header(
            hyper::header::AUTHORIZATION,
            format!("Bearer {}", crate::config::API_TOKEN),
        )
        .body(Empty::<Bytes>::new())
        .ok()?;
    let response = sender.send_request(request).await.ok()?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.ok()?.to_bytes();
    Some((status, body))
}

/// Polls `GET /readyz` every 2 ms until it answers 200; the time that took.
pub async fn wait_ready(addr: SocketAddr, timeout: Duration) -> Option<Instant> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if get_status(addr, "/readyz").await == Some(200) {
            return Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::outcome_of;

    #[test]
    fn outcome_is_read_from_the_answer() {
        assert_eq!(
            outcome_of(br#"{"outcome":"entity_locked","held_by_run_id":"x"}"#),
            Some("entity_locked")
        );
        assert_eq!(outcome_of(br#"{"error":"bad_request"}"#), None);
    }
}
