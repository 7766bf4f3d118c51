//! Startup to ready: spawn to the first `GET /readyz` 200, with many workflows in the config,
//! on a new SQLite database (migrations and the first workflow sync included) and again on the
//! same database (a restart).

use std::path::Path;
use std::time::Duration;

use anyhow::bail;

use crate::args::BenchArgs;
use crate::child::Server;
use crate::config::{daemon_command, load_config, many_workflows_config, write_config};
use crate::load;
use crate::plan::sqlite_url;
use crate::procfs;

/// One start.
#[derive(Debug, Clone, Copy)]
pub struct Start {
    pub listening: Duration,
    pub ready: Duration,
    pub rss_kib: u64,
}

/// Starts of one config, first on a new database and then restarted on it.
#[derive(Debug)]
pub struct Series {
    pub workflows: usize,
    pub cold: Vec<Start>,
    pub warm: Vec<Start>,
}

#[derive(Debug)]
pub struct StartupResult {
    pub series: Vec<Series>,
}

pub async fn measure(args: &BenchArgs, binary: &Path) -> anyhow::Result<StartupResult> {
    eprintln!("== startup");
    let mut series = Vec::new();
    for workflows in [0, args.startup_workflows] {
        let mut result = Series {
            workflows: workflows + 2,
            cold: Vec::new(),
            warm: Vec::new(),
        };
        for _ in 0..args.startup_runs.max(1) {
            let dir = tempfile::tempdir()?;
            let url = sqlite_url(&dir.path().join("switchyard.db"));
            let text = if workflows == 0 {
                load_config(&url, &args.durability)
            } else {
                many_workflows_config(&url, workflows)
            };
            let config_path = write_config(dir.path(), &text)?;
            result
                .cold
                .push(start_once(args, binary, &config_path).await?);
            result
                .warm
                .push(start_once(args, binary, &config_path).await?);
        }
        series.push(result);
    }
    Ok(StartupResult { series })
}

async fn start_once(args: &BenchArgs, binary: &Path, config_path: &Path) -> anyhow::Result<Start> {
    let daemon = Server::spawn(daemon_command(args, binary, config_path), "the daemon").await?;
    let Some(ready_at) = load::wait_ready(daemon.addr, Duration::from_secs(60)).await else {
        bail!("the daemon never became ready:\n{}", daemon.log_excerpt());
    };
    let start = Start {
        listening: daemon.listening_after,
        ready: ready_at.duration_since(daemon.spawned_at),
        rss_kib: procfs::memory(daemon.pid()).unwrap_or_default().rss_kib,
    };
    daemon.stop();
    Ok(start)
}

/// The median of some durations.
pub fn median<T: Copy + PartialOrd>(values: impl IntoIterator<Item = T>) -> Option<T> {
    let mut values: Vec<T> = values.into_iter().collect();
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    values.get(values.len() / 2).copied()
}
