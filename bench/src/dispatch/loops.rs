//! The loads: closed loops, open loops with their event-to-worker latency, the receiver
//! outage, and the waits for a push target's backlog to drain.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::args::{Backend, BenchArgs, Scenario};
use crate::child::Server;
use crate::load::{self, RunResult};
use crate::workload::Workload;

use super::TARGET;
use super::results::{OpenLoop, Outage};
use super::workers::{Arrivals, lock, string_after};

/// How long the daemon may take to deliver the backlog of a run before giving up on it.
const DRAIN_LIMIT: Duration = Duration::from_secs(300);

/// Whether each open loop starts right after a `CHECKPOINT`: on PostgreSQL, unless
/// `--no-checkpoint`. The closed loops before it write WAL at several times the open loop's
/// rate; without it the open loop measures the server's checkpoint of their writes (see
/// BENCHMARKS round 17).
pub(super) fn checkpoints(args: &BenchArgs, backend: Backend) -> bool {
    backend == Backend::Postgres && !args.no_checkpoint && args.dispatch_rate > 0
}

/// Before an open loop: the `CHECKPOINT` that [`checkpoints`] asks for.
pub(super) async fn settle(args: &BenchArgs, backend: Backend) -> anyhow::Result<()> {
    if !checkpoints(args, backend) {
        return Ok(());
    }
    let took = crate::postgres::checkpoint(&args.postgres_url, &args.postgres_admin_db).await?;
    eprintln!(
        "   CHECKPOINT before the open loop took {:.1} s",
        took.as_secs_f64()
    );
    Ok(())
}

pub(super) async fn closed_loop(
    args: &BenchArgs,
    daemon: &Server,
    scenario: Scenario,
    concurrency: usize,
    tag: &str,
) -> RunResult {
    let workload = Arc::new(Workload::new(
        scenario,
        format!("d{tag}{}", uuid::Uuid::new_v4().simple()),
        args.hot_share,
        &daemon.addr.to_string(),
    ));
    load::drive(
        daemon.addr,
        daemon.pid(),
        workload,
        concurrency,
        args.warmup,
        args.duration,
    )
    .await
}

/// Pending runs of the push target, from `/readyz`.
pub(super) async fn pending(addr: SocketAddr) -> Option<u64> {
    let body = get_body(addr, "/readyz").await?;
    let value: serde_json::Value = serde_json::from_slice(&body).ok()?;
    value["targets"][TARGET]["pending"].as_u64()
}

/// Polls `/readyz` until the push target has nothing pending; the time that took.
pub(super) async fn wait_drained(addr: SocketAddr) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < DRAIN_LIMIT {
        if pending(addr).await == Some(0) {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

async fn get_body(addr: SocketAddr, path: &str) -> Option<Bytes> {
    crate::load::get(addr, path).await.map(|(_, body)| body)
}

/// One request of the open loop: when it was written, when answered, its run id.
type Sent = (Instant, Instant, Option<String>);

/// `--dispatch-rate` requests per second for `--duration`, each on an idle keep-alive
/// connection (a new one when none is idle), whatever the answers' pace. With `arrivals`, waits
/// (up to 10 s) for every routed run to reach the worker and measures the time it took.
pub(super) async fn open_loop(
    args: &BenchArgs,
    daemon: &Server,
    scenario: Scenario,
    arrivals: Option<&Arc<Arrivals>>,
) -> Option<OpenLoop> {
    let rate = args.dispatch_rate;
    if rate == 0 {
        return None;
    }
    let addr = daemon.addr;
    let workload = Arc::new(Workload::new(
        scenario,
        format!("o{}", uuid::Uuid::new_v4().simple()),
        args.hot_share,
        &addr.to_string(),
    ));
    let idle: Arc<Mutex<Vec<SendRequest<Full<Bytes>>>>> = Arc::default();
    let sent: Arc<Mutex<Vec<Sent>>> = Arc::default();
    let count = (rate as f64 * args.duration.as_secs_f64()) as u64;
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(count as usize);
    for i in 0..count {
        tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / rate as f64)).await;
        let (idle, sent, workload) = (idle.clone(), sent.clone(), workload.clone());
        tasks.push(tokio::spawn(async move {
            let connection = lock(&idle).pop();
            let mut connection = match connection {
                Some(connection) => connection,
                None => match connect(addr).await {
                    Some(connection) => connection,
                    None => return,
                },
            };
            if connection.ready().await.is_err() {
                return;
            }
            let sent_at = Instant::now();
            let Ok(response) = connection.send_request(workload.request()).await else {
                return;
            };
            let Ok(body) = response.into_body().collect().await else {
                return;
            };
            let body = body.to_bytes();
            let run = string_after(&body, br#""run_id":""#).map(str::to_owned);
            lock(&sent).push((sent_at, Instant::now(), run));
            lock(&idle).push(connection);
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    let sent = std::mem::take(&mut *lock(&sent));
    let routed = sent.iter().filter(|(_, _, run)| run.is_some()).count() as u64;
    let mut answer_us = histogram();
    for (sent_at, answered_at, _) in &sent {
        answer_us.saturating_record(micros(*answered_at - *sent_at));
    }
    let mut to_worker_us = histogram();
    let mut after_answer_us = histogram();
    let mut arrived = 0;
    if let Some(arrivals) = arrivals {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut first = arrivals.first_arrivals();
        while Instant::now() < deadline
            && sent
                .iter()
                .filter_map(|(_, _, run)| run.as_ref())
                .any(|run| !first.contains_key(run))
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
            first = arrivals.first_arrivals();
        }
        for (sent_at, answered_at, run) in &sent {
            if let Some(at) = run.as_ref().and_then(|run| first.get(run)) {
                arrived += 1;
                to_worker_us.saturating_record(micros(at.saturating_duration_since(*sent_at)));
                after_answer_us
                    .saturating_record(micros(at.saturating_duration_since(*answered_at)));
            }
        }
    }
    Some(OpenLoop {
        rate,
        sent: sent.len() as u64,
        routed,
        arrived,
        answer_us,
        to_worker_us,
        after_answer_us,
    })
}

async fn connect(addr: SocketAddr) -> Option<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(addr).await.ok()?;
    let _ = stream.set_nodelay(true);
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await.ok()?;
    tokio::spawn(connection);
    Some(sender)
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3)
        .unwrap_or_else(|_| unreachable!("constant histogram bounds are valid"))
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Closed-loop load for `--duration`, then for `length` with the sink answering 503, then the
/// load stops, the sink answers 204 again and the backlog drains.
pub(super) async fn outage(
    args: &BenchArgs,
    daemon: &Server,
    scenario: Scenario,
    concurrency: usize,
    arrivals: &Arrivals,
    length: Duration,
) -> Outage {
    eprintln!("   outage: {} of 503", humantime::format_duration(length));
    let before = closed_loop(args, daemon, scenario, concurrency, "before").await;
    arrivals.status.store(503, Ordering::Relaxed);
    let workload = Arc::new(Workload::new(
        scenario,
        format!("x{}", uuid::Uuid::new_v4().simple()),
        args.hot_share,
        &daemon.addr.to_string(),
    ));
    let during = load::drive(
        daemon.addr,
        daemon.pid(),
        workload,
        concurrency,
        Duration::ZERO,
        length,
    )
    .await;
    let pending_at_end = pending(daemon.addr).await;
    arrivals.status.store(204, Ordering::Relaxed);
    let drain = wait_drained(daemon.addr).await;
    Outage {
        before,
        during,
        refused: arrivals.refused.load(Ordering::Relaxed),
        pending_at_end,
        drain,
    }
}
