//! The long run: the daemon on SQLite under steady load, its RSS sampled throughout, to show
//! whether memory stays flat.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::args::{BenchArgs, Scenario};
use crate::config::load_config;
use crate::load::{self, RunResult};
use crate::plan::{sqlite_url, start_daemon};
use crate::procfs::{self, Memory};
use crate::workload::Workload;

#[derive(Debug)]
pub struct SoakResult {
    pub duration: Duration,
    pub concurrency: usize,
    pub idle: Memory,
    /// (seconds since the load started, RSS in KiB).
    pub samples: Vec<(f64, u64)>,
    pub load: RunResult,
    pub database_bytes: u64,
}

pub async fn run(
    args: &BenchArgs,
    binary: &Path,
    duration: Duration,
) -> anyhow::Result<SoakResult> {
    eprintln!(
        "== soak: {} on SQLite",
        humantime::format_duration(duration)
    );
    let dir = tempfile::tempdir()?;
    let url = sqlite_url(&dir.path().join("switchyard.db"));
    let daemon = start_daemon(
        args,
        binary,
        dir.path(),
        &load_config(&url, &args.durability),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = procfs::memory(daemon.pid()).unwrap_or_default();
    let workload = Arc::new(Workload::new(
        Scenario::Webhook,
        "soak".into(),
        args.hot_share,
        &daemon.addr.to_string(),
    ));
    let started = Instant::now();
    let sampler = sample(daemon.pid(), started, duration, args.soak_sample);
    let drive = load::drive(
        daemon.addr,
        daemon.pid(),
        workload,
        args.soak_concurrency,
        Duration::ZERO,
        duration,
    );
    let (samples, load) = tokio::join!(sampler, drive);
    let database_bytes = std::fs::read_dir(dir.path())?
        .filter_map(Result::ok)
        .filter_map(|entry| entry.metadata().ok())
        .map(|meta| meta.len())
        .sum();
    daemon.stop();
    Ok(SoakResult {
        duration,
        concurrency: args.soak_concurrency,
        idle,
        samples,
        load,
        database_bytes,
    })
}

async fn sample(
    pid: u32,
    started: Instant,
    duration: Duration,
    every: Duration,
) -> Vec<(f64, u64)> {
    let mut samples = Vec::new();
    let mut next = started + every;
    while next <= started + duration {
        tokio::time::sleep_until(next.into()).await;
        if let Some(memory) = procfs::memory(pid) {
            samples.push((started.elapsed().as_secs_f64(), memory.rss_kib));
        }
        next += every;
    }
    samples
}
