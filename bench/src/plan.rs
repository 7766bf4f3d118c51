//! The order of a bench run: per backend, the daemon and its baselines under the same load,
//! cell by cell (interleaved, so background noise hits all three alike); then startup; then the
//! optional soak.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};

use crate::args::{Backend, BenchArgs, Scenario};
use crate::child::Server;
use crate::config::{self, daemon_binary, daemon_command, write_config};
use crate::load::{self, RunResult};
use crate::postgres::TempDatabase;
use crate::procfs::{self, Memory};
use crate::report;
use crate::workload::Workload;
use crate::{dispatch, soak, startup};

/// The servers one load cell is run against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Daemon,
    Bare,
    Insert,
    /// The daemon with flow control configured (`--flow-control`).
    Flow,
}

impl Target {
    pub fn name(self, backend: Backend) -> &'static str {
        match (self, backend) {
            (Target::Daemon, _) => "switchyard",
            (Target::Flow, _) => "switchyard + flow control",
            (Target::Bare, _) => "bare axum",
            (Target::Insert, Backend::Sqlite) => "SQLite insert/req",
            (Target::Insert, Backend::Postgres) => "PostgreSQL insert/req",
            (Target::Insert, Backend::Mysql) => "MariaDB insert/req",
        }
    }
}

/// One (scenario, concurrency) cell: every target's runs.
#[derive(Debug)]
pub struct Cell {
    pub scenario: Scenario,
    pub concurrency: usize,
    pub runs: Vec<(Target, Vec<RunResult>)>,
}

impl Cell {
    /// The median run of `target` by answers per second.
    pub fn median(&self, target: Target) -> Option<&RunResult> {
        let (_, runs) = self.runs.iter().find(|(t, _)| *t == target)?;
        let mut sorted: Vec<&RunResult> = runs.iter().collect();
        sorted.sort_by(|a, b| a.ok_per_sec().total_cmp(&b.ok_per_sec()));
        sorted.get(sorted.len() / 2).copied()
    }
}

/// Everything measured on one backend.
#[derive(Debug)]
pub struct BackendResult {
    pub backend: Backend,
    /// The daemon's memory once ready and idle, before any load.
    pub idle: Memory,
    /// The daemon's memory after all load, idle again.
    pub after: Memory,
    pub cells: Vec<Cell>,
    /// Log lines the daemon wrote (one per decided delivery at `info`).
    pub daemon_log_lines: u64,
    /// WARN/ERROR lines among them, and the first one.
    pub daemon_warnings: (u64, Option<String>),
}

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    if args.backends.contains(&Backend::Mysql) && (args.dispatch.is_empty() || args.no_load) {
        anyhow::bail!("--backends mysql is measured with --dispatch only");
    }
    let binary = daemon_binary(&args)?;
    report::print_header(&args, &binary);
    if let (false, Some(seed)) = (args.no_load, args.replay) {
        for &backend in &args.backends {
            let result = crate::replay::run(&args, &binary, backend, seed).await?;
            crate::replay::print(&result);
        }
    } else if !args.no_load && !args.dispatch.is_empty() {
        for &backend in &args.backends {
            let result = dispatch::run(&args, &binary, backend).await?;
            dispatch::print(&result);
        }
    } else if !args.no_load {
        for &backend in &args.backends {
            let result = run_backend(&args, &binary, backend).await?;
            report::print_backend(&args, &result);
        }
    }
    if args.startup_workflows > 0 {
        let result = startup::measure(&args, &binary).await?;
        report::print_startup(&result);
    }
    if let Some(duration) = args.soak {
        let result = soak::run(&args, &binary, duration).await?;
        report::print_soak(&result);
    }
    Ok(())
}

/// A database for the daemon and one for the insert baseline.
struct Databases {
    dir: tempfile::TempDir,
    daemon_url: String,
    baseline: String,
    postgres: Vec<TempDatabase>,
}

impl Databases {
    async fn create(args: &BenchArgs, backend: Backend) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        Ok(match backend {
            Backend::Sqlite => Self {
                daemon_url: sqlite_url(&dir.path().join("switchyard.db")),
                baseline: sqlite_url(&dir.path().join("baseline.db")),
                dir,
                postgres: Vec::new(),
            },
            Backend::Mysql => anyhow::bail!("--backends mysql is measured with --dispatch only"),
            Backend::Postgres => {
                let daemon =
                    TempDatabase::create(&args.postgres_url, &args.postgres_admin_db, "daemon")
                        .await?;
                let baseline =
                    TempDatabase::create(&args.postgres_url, &args.postgres_admin_db, "baseline")
                        .await?;
                Self {
                    daemon_url: daemon.url.clone(),
                    baseline: baseline.url.clone(),
                    dir,
                    postgres: vec![daemon, baseline],
                }
            }
        })
    }

    async fn drop_all(self) {
        for database in self.postgres {
            database.drop_database().await;
        }
    }
}

pub fn sqlite_url(path: &Path) -> String {
    format!("sqlite://{}?mode=rwc", path.display())
}

/// Starts the release daemon on `config_text` in `dir` and waits for `/readyz`.
pub async fn start_daemon(
    args: &BenchArgs,
    binary: &Path,
    dir: &Path,
    config_text: &str,
) -> anyhow::Result<Server> {
    let config_text = match args.database_writers {
        Some(n) if config_text.contains("[database]\n") => {
            config_text.replacen("[database]\n", &format!("[database]\nwriters = {n}\n"), 1)
        }
        Some(_) => bail!("--database-writers: this daemon's config has no [database] table"),
        None => config_text.to_owned(),
    };
    let config_path = write_config(dir, &config_text)?;
    // Numbers the daemons of this bench run, for their log files' names.
    static STARTED: AtomicU32 = AtomicU32::new(0);
    let log = args.daemon_log_dir.as_ref().map(|logs| {
        let n = STARTED.fetch_add(1, Ordering::Relaxed);
        let path = logs.join(format!("daemon-{}-{n}.log", std::process::id()));
        eprintln!("== daemon log: {} ({})", path.display(), dir.display());
        path
    });
    let daemon = Server::spawn_logged(
        daemon_command(args, binary, &config_path),
        "the daemon",
        log.as_deref(),
    )
    .await?;
    if load::wait_ready(daemon.addr, Duration::from_secs(60))
        .await
        .is_none()
    {
        bail!("the daemon never became ready:\n{}", daemon.log_excerpt());
    }
    Ok(daemon)
}

async fn start_baseline(kind: &str, database: &str, connections: u32) -> anyhow::Result<Server> {
    let exe = std::env::current_exe().context("cannot find the bench binary")?;
    let mut command = Command::new(exe);
    command.args([
        "serve-baseline",
        "--kind",
        kind,
        "--database",
        database,
        "--connections",
        &connections.to_string(),
    ]);
    let server = Server::spawn(command, &format!("the {kind} baseline")).await?;
    if load::wait_ready(server.addr, Duration::from_secs(30))
        .await
        .is_none()
    {
        bail!("the {kind} baseline never became ready");
    }
    Ok(server)
}

async fn run_backend(
    args: &BenchArgs,
    binary: &Path,
    backend: Backend,
) -> anyhow::Result<BackendResult> {
    eprintln!("== {}: starting the daemon and baselines", backend.name());
    let databases = Databases::create(args, backend).await?;
    let result = run_backend_on(args, binary, backend, &databases).await;
    databases.drop_all().await;
    result
}

async fn run_backend_on(
    args: &BenchArgs,
    binary: &Path,
    backend: Backend,
    databases: &Databases,
) -> anyhow::Result<BackendResult> {
    let daemon = start_daemon(
        args,
        binary,
        databases.dir.path(),
        &config::load_config(&databases.daemon_url, &args.durability),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = procfs::memory(daemon.pid()).unwrap_or_default();

    let mut servers = vec![(Target::Daemon, daemon)];
    if args.flow_control {
        // Its own database (the insert baseline's) and folder, beside the plain daemon.
        let dir = databases.dir.path().join("flow");
        std::fs::create_dir_all(&dir)?;
        let url = match backend {
            Backend::Sqlite => sqlite_url(&dir.join("switchyard.db")),
            Backend::Postgres | Backend::Mysql => databases.baseline.clone(),
        };
        let flow = start_daemon(
            args,
            binary,
            &dir,
            &config::flow_control_config(&url, &args.durability),
        )
        .await?;
        servers.push((Target::Flow, flow));
    } else if !args.no_baselines {
        servers.push((Target::Bare, start_baseline("bare", "", 1).await?));
        let insert = match backend {
            Backend::Sqlite => {
                start_baseline(
                    "sqlite",
                    &databases.baseline,
                    args.sqlite_baseline_connections,
                )
                .await?
            }
            // The daemon's default pool size on PostgreSQL.
            Backend::Postgres | Backend::Mysql => {
                start_baseline("postgres", &databases.baseline, 16).await?
            }
        };
        servers.push((Target::Insert, insert));
    }

    let mut cells = Vec::new();
    for &scenario in &args.scenarios {
        for &concurrency in &args.concurrency {
            let mut runs: Vec<(Target, Vec<RunResult>)> =
                servers.iter().map(|(t, _)| (*t, Vec::new())).collect();
            for repeat in 0..args.repeat.max(1) {
                for (i, (target, server)) in servers.iter().enumerate() {
                    eprintln!(
                        "   {} c={concurrency} {} (run {})",
                        scenario.name(),
                        target.name(backend),
                        repeat + 1
                    );
                    let tag = format!("{}{concurrency}r{repeat}t{i}", scenario.name());
                    let workload = Arc::new(Workload::new(
                        scenario,
                        tag,
                        args.hot_share,
                        &server.addr.to_string(),
                    ));
                    let result = load::drive(
                        server.addr,
                        server.pid(),
                        workload,
                        concurrency,
                        args.warmup,
                        args.duration,
                    )
                    .await;
                    if result.ok == 0 {
                        eprintln!(
                            "warning: no successful answer from {}: {:?}\n{}",
                            target.name(backend),
                            result.first_error,
                            server.log_excerpt()
                        );
                    }
                    runs[i].1.push(result);
                }
            }
            cells.push(Cell {
                scenario,
                concurrency,
                runs,
            });
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let daemon = &servers[0].1;
    let after = procfs::memory(daemon.pid()).unwrap_or_default();
    let daemon_log_lines = daemon.log_lines();
    let daemon_warnings = daemon.warnings();
    for (_, server) in servers {
        server.stop();
    }
    Ok(BackendResult {
        backend,
        idle,
        after,
        cells,
        daemon_log_lines,
        daemon_warnings,
    })
}
