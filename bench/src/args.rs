//! The command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Load, memory and startup benchmarks of the release `switchyard` daemon.
#[derive(Debug, Parser)]
#[command(about)]
pub struct Cli {
    #[command(flatten)]
    pub bench: BenchArgs,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Internal: serve one baseline (this binary re-runs itself for each baseline server).
    #[command(hide = true)]
    ServeBaseline(ServeBaselineArgs),
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Measured time of each load run.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Unmeasured load before each run's measured window.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    /// Concurrent connections (closed loop: each sends its next request after the answer).
    #[arg(long, value_delimiter = ',', default_value = "16,64")]
    pub concurrency: Vec<usize>,
    /// Databases to run the daemon (and the single-insert baseline) on.
    #[arg(long, value_delimiter = ',', default_value = "sqlite,postgres")]
    pub backends: Vec<Backend>,
    /// Request kinds, each run separately.
    #[arg(long, value_delimiter = ',', default_value = "webhook,events")]
    pub scenarios: Vec<Scenario>,
    /// Share of requests that target one shared entity per run (the rest: a new entity each).
    #[arg(long, default_value_t = 0.1)]
    pub hot_share: f64,
    /// How many times each (scenario, concurrency) cell is run; tables show the median run.
    /// With `--dispatch`: rounds of closed loops, alternating the pull and push daemons, with
    /// the median ratio reported.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// The daemon binary (default: target/release/switchyard under CARGO_TARGET_DIR or the
    /// workspace).
    #[arg(long, env = "SWITCHYARD_BIN")]
    pub daemon_bin: Option<PathBuf>,
    /// PostgreSQL server (without a database name); a fresh database is created per run.
    #[arg(
        long,
        env = "SWITCHYARD_BENCH_POSTGRES",
        default_value = "postgres://postgres@127.0.0.1:5432"
    )]
    pub postgres_url: String,
    /// Existing database to connect to for CREATE/DROP DATABASE.
    #[arg(long, default_value = "test")]
    pub postgres_admin_db: String,
    /// MariaDB/MySQL server (without a database name) for `--backends mysql`; a fresh database
    /// is created per run, through the database `test`.
    #[arg(
        long,
        env = "SWITCHYARD_BENCH_MYSQL",
        default_value = "mysql://root@127.0.0.1:3306"
    )]
    pub mysql_url: String,
    /// The daemon's log filter (RUST_LOG). `info` logs one line per decided delivery, as an
    /// operator's default does.
    #[arg(long, default_value = "info")]
    pub daemon_log: String,
    /// Also copy each load daemon's log to `<dir>/daemon-<bench pid>-<n>.log`, n counting the
    /// daemons started (with `--daemon-log debug` for the writers' per-batch lines).
    #[arg(long)]
    pub daemon_log_dir: Option<PathBuf>,
    /// The load daemons' `database.writers` (default: the daemon's own, 1 on PostgreSQL).
    #[arg(long)]
    pub database_writers: Option<usize>,
    /// SQLite durability of the daemon (`full`: every answer survives power loss).
    #[arg(long, default_value = "full")]
    pub durability: String,
    /// Extra environment for the daemon, `NAME=VALUE` (e.g. `LD_PRELOAD=...` to try another
    /// allocator); repeatable.
    #[arg(long = "daemon-env", value_parser = parse_env)]
    pub daemon_env: Vec<(String, String)>,
    /// Skip the baseline servers (daemon figures only, no ratios).
    #[arg(long)]
    pub no_baselines: bool,
    /// Instead of the baselines: the daemon again, with flow control configured (a trigger
    /// condition, a `max_running` ceiling, a tenant `rate` and a coalescing window), run cell by
    /// cell beside the daemon without them; the report gives what the controls cost.
    #[arg(long)]
    pub flow_control: bool,
    /// Skip the load runs (startup and soak only).
    #[arg(long)]
    pub no_load: bool,
    /// Workflows in the generated config of the startup measurement; 0 skips it.
    #[arg(long, default_value_t = 10_000)]
    pub startup_workflows: usize,
    /// Starts measured for startup (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub startup_runs: usize,
    /// Also run a long load on SQLite (e.g. `5m`) and sample the daemon's RSS throughout.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub soak: Option<Duration>,
    /// Concurrency of the soak run.
    #[arg(long, default_value_t = 64)]
    pub soak_concurrency: usize,
    /// Time between RSS samples during the soak run.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub soak_sample: Duration,
    /// Connections of the SQLite single-insert baseline's pool (1 queues writers in the pool
    /// rather than in SQLite's busy handler, which is the faster of the two here).
    #[arg(long, default_value_t = 1)]
    pub sqlite_baseline_connections: u32,
    /// Instead of the load cells: dispatch scenarios per backend, the daemon delivering to a
    /// worker in this process over these targets, beside the daemon with the pull target.
    #[arg(long, value_delimiter = ',')]
    pub dispatch: Vec<DispatchKind>,
    /// Open-loop rate of the dispatch latency run, requests/s (0 skips it).
    #[arg(long, default_value_t = 1000)]
    pub dispatch_rate: u64,
    /// On PostgreSQL, do not `CHECKPOINT` the server before each open-loop latency run. By
    /// default the bench does, so that the run measures the daemon at `--dispatch-rate` rather
    /// than the server writing out the WAL of the closed-loop rounds before it.
    #[arg(long)]
    pub no_checkpoint: bool,
    /// Also a receiver outage of this length (the http sink answers 503) under closed-loop load.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub outage: Option<Duration>,
    /// Instead of the load cells: seed the ledger with this much load, then measure live
    /// intake alone and while a diagnostic replay of the whole ledger runs (issue 17's 0.8).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub replay: Option<Duration>,
    /// NATS server with JetStream, for `--dispatch nats`.
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    pub nats_url: String,
}

fn parse_env(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .ok_or_else(|| format!("`{text}` is not NAME=VALUE"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    Sqlite,
    Postgres,
    /// MariaDB or MySQL (`--mysql-url`); measured in `--dispatch` mode only.
    Mysql,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "SQLite",
            Backend::Postgres => "PostgreSQL",
            Backend::Mysql => "MariaDB",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// Signed Zendesk `ticket.created` event-subscription deliveries.
    Webhook,
    /// Canonical events to `POST /v1/events` with a bearer token and an Idempotency-Key.
    Events,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Webhook => "webhook",
            Scenario::Events => "events",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DispatchKind {
    /// Signed POSTs to an HTTP sink in the bench process.
    Http,
    /// JetStream publishes, read back by a consumer in the bench process.
    Nats,
}

impl DispatchKind {
    pub fn name(self) -> &'static str {
        match self {
            DispatchKind::Http => "http",
            DispatchKind::Nats => "nats",
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct ServeBaselineArgs {
    #[arg(long, value_enum)]
    pub kind: BaselineKind,
    /// SQLite file path or PostgreSQL URL (unused for `bare`).
    #[arg(long, default_value = "")]
    pub database: String,
    /// Pool size.
    #[arg(long, default_value_t = 1)]
    pub connections: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BaselineKind {
    /// Parses the JSON and answers 200; stores nothing.
    Bare,
    /// One durable SQLite insert per request (WAL, synchronous=FULL, one transaction each).
    Sqlite,
    /// One PostgreSQL insert per request (its own transaction, default synchronous_commit).
    Postgres,
}
