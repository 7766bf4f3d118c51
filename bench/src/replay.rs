//! `--replay`: live intake's rate alone, then while a large diagnostic replay of everything the
//! ledger holds runs in the same daemon (issue 17: a replay must not slow live intake below
//! 0.8 of its rate). The ledger is seeded by load first; then live intake alone, with the
//! replay running, and alone again after cancelling it (A-B-A, so a drift of the daemon's
//! rate over the run, as queued runs pile up, is not taken for the replay's cost). The three
//! measured runs use the same closed-loop load.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::args::{Backend, BenchArgs, Scenario};
use crate::config::{self, API_TOKEN};
use crate::load::{self, RunResult};
use crate::plan::{sqlite_url, start_daemon};
use crate::postgres::TempDatabase;
use crate::workload::Workload;

/// What one backend measured.
#[derive(Debug)]
pub struct ReplayResult {
    pub backend: Backend,
    /// Ledger rows the replay could take (seeded before the measured runs).
    pub seeded: u64,
    pub alone: RunResult,
    pub during: RunResult,
    pub after: RunResult,
    /// Ledger rows the replay decided during the measured window, and whether it finished.
    pub replayed: u64,
    pub replay_status: String,
}

pub async fn run(
    args: &BenchArgs,
    binary: &Path,
    backend: Backend,
    seed: Duration,
) -> anyhow::Result<ReplayResult> {
    eprintln!("== {}: replay during live intake", backend.name());
    let dir = tempfile::tempdir()?;
    let mut postgres = None;
    let url = match backend {
        Backend::Sqlite => sqlite_url(&dir.path().join("switchyard.db")),
        Backend::Mysql => anyhow::bail!("--backends mysql is measured with --dispatch only"),
        Backend::Postgres => {
            let database =
                TempDatabase::create(&args.postgres_url, &args.postgres_admin_db, "replay").await?;
            let url = database.url.clone();
            postgres = Some(database);
            url
        }
    };
    let result = run_on(args, binary, backend, seed, dir.path(), &url).await;
    if let Some(database) = postgres {
        database.drop_database().await;
    }
    result
}

async fn run_on(
    args: &BenchArgs,
    binary: &Path,
    backend: Backend,
    seed: Duration,
    dir: &Path,
    url: &str,
) -> anyhow::Result<ReplayResult> {
    let daemon = start_daemon(
        args,
        binary,
        dir,
        &config::load_config(url, &args.durability),
    )
    .await?;
    let concurrency = args.concurrency.first().copied().unwrap_or(16);
    let load = |tag: &str| {
        Arc::new(Workload::new(
            Scenario::Webhook,
            tag.to_owned(),
            args.hot_share,
            &daemon.addr.to_string(),
        ))
    };
    eprintln!(
        "   seeding the ledger for {}",
        humantime::format_duration(seed)
    );
    let seeded = load::drive(
        daemon.addr,
        daemon.pid(),
        load("seed"),
        concurrency,
        Duration::ZERO,
        seed,
    )
    .await;
    eprintln!("   live intake alone, c={concurrency}");
    let alone = load::drive(
        daemon.addr,
        daemon.pid(),
        load("alone"),
        concurrency,
        args.warmup,
        args.duration,
    )
    .await;
    let (status, started) = call(
        daemon.addr,
        "POST",
        "/v1/replays",
        r#"{"revision":"current"}"#,
    )
    .await
    .context("cannot start the replay")?;
    if status != 202 {
        bail!("POST /v1/replays answered {status}: {started}");
    }
    let id = started["id"].as_str().unwrap_or_default().to_owned();
    let total = started["progress"]["total"].as_u64().unwrap_or(0);
    eprintln!("   live intake during a replay of {total} deliveries, c={concurrency}");
    let during = load::drive(
        daemon.addr,
        daemon.pid(),
        load("during"),
        concurrency,
        args.warmup,
        args.duration,
    )
    .await;
    let (_, progress) = call(daemon.addr, "GET", &format!("/v1/replays/{id}?limit=1"), "").await?;
    let replayed = progress["progress"]["done"].as_u64().unwrap_or(0);
    let replay_status = progress["status"].as_str().unwrap_or("?").to_owned();
    if replay_status == "running" {
        let _ = call(daemon.addr, "POST", &format!("/v1/replays/{id}/cancel"), "").await;
    }
    for _ in 0..600 {
        let (_, state) = call(daemon.addr, "GET", &format!("/v1/replays/{id}?limit=1"), "").await?;
        if state["status"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("   live intake alone again, c={concurrency}");
    let after = load::drive(
        daemon.addr,
        daemon.pid(),
        load("after"),
        concurrency,
        args.warmup,
        args.duration,
    )
    .await;
    daemon.stop();
    Ok(ReplayResult {
        backend,
        seeded: total.max(seeded.ok),
        alone,
        during,
        after,
        replayed,
        replay_status,
    })
}

/// One admin API request with the bench token; the status and the JSON answer.
async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> anyhow::Result<(u16, serde_json::Value)> {
    let stream = TcpStream::connect(addr).await?;
    let (mut sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, addr.to_string())
        .header(hyper::header::AUTHORIZATION, format!("Bearer {API_TOKEN}"))
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))?;
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await?.to_bytes();
    Ok((status, serde_json::from_slice(&bytes).unwrap_or_default()))
}

pub fn print(result: &ReplayResult) {
    let alone = (result.alone.ok_per_sec() + result.after.ok_per_sec()) / 2.0;
    let during = result.during.ok_per_sec();
    println!(
        "\n## Replay during live intake — {}\n\n| | answers/s | p50 ms | p99 ms |\n|---|---:|---:|---:|",
        result.backend.name()
    );
    for (name, run) in [
        ("live intake alone", &result.alone),
        ("with a replay running", &result.during),
    ] {
        println!(
            "| {name} | {:.0} | {:.2} | {:.2} |",
            run.ok_per_sec(),
            run.latency_ms(0.5),
            run.latency_ms(0.99)
        );
    }
    println!(
        "\nratio {:.2} against the mean of the two runs alone (target >= 0.80); the replay took {} of {} seeded deliveries in the window ({}), {:.0} deliveries/s",
        if alone > 0.0 { during / alone } else { 0.0 },
        result.replayed,
        result.seeded,
        result.replay_status,
        result.replayed as f64 / result.during.window.as_secs_f64().max(0.001),
    );
}
