//! Dispatch scenarios (`--dispatch http,nats`): the daemon delivers every routed run to a worker
//! inside this process (an HTTP sink answering 204, or a JetStream consumer), which records when
//! each run arrived. Measured per backend, beside the daemon with the built-in pull target
//! (intake and outbox write only): routed-and-delivered runs/s at closed-loop concurrency
//! (`--repeat` rounds alternating the daemons, which all run at once), event-to-worker latency
//! at an open-loop rate, and optionally a receiver outage.
//!
//! Here the run of the rounds; the workers where runs arrive are in `workers`, the daemons'
//! configs in `setup`, the loads in `loops`, and what they measured and its Markdown in
//! `results`.

mod loops;
mod results;
mod setup;
mod workers;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use crate::args::{Backend, BenchArgs, DispatchKind, Scenario};
use crate::child::Server;
use crate::plan::{sqlite_url, start_daemon};
use crate::postgres::TempDatabase;
use loops::{checkpoints, closed_loop, open_loop, outage, pending, settle, wait_drained};
pub use results::print;
use results::{ClosedRound, DispatchResult, DispatchRun};
use setup::{daemon_config, target_toml};
use workers::{Arrivals, start_consumer, start_sink};

/// The name of the push target in the generated config.
const TARGET: &str = "sink";
/// The JetStream stream the nats target publishes to (created fresh, deleted afterwards).
const STREAM: &str = "SWITCHYARD_BENCH_RUNS";

/// A push daemon waiting its turn in the rounds, with where its runs arrive.
struct PushDaemon {
    kind: DispatchKind,
    arrivals: Arc<Arrivals>,
    daemon: Server,
    /// Holds the daemon's config directory until it stops.
    _dir: tempfile::TempDir,
    rounds: Vec<ClosedRound>,
}

pub async fn run(
    args: &BenchArgs,
    binary: &Path,
    backend: Backend,
) -> anyhow::Result<DispatchResult> {
    let concurrency = args.concurrency.iter().copied().max().unwrap_or(64);
    let scenario = args.scenarios.first().copied().unwrap_or(Scenario::Events);
    let dir = tempfile::tempdir()?;
    let mut databases = Vec::new();
    let mut database = async |name: &str| -> anyhow::Result<String> {
        Ok(match backend {
            Backend::Sqlite => sqlite_url(&dir.path().join(format!("{name}.db"))),
            Backend::Mysql => {
                let db = TempDatabase::create(&args.mysql_url, "test", name).await?;
                let url = db.url.clone();
                databases.push(db);
                url
            }
            Backend::Postgres => {
                let db =
                    TempDatabase::create(&args.postgres_url, &args.postgres_admin_db, name).await?;
                let url = db.url.clone();
                databases.push(db);
                url
            }
        })
    };

    eprintln!(
        "== {}: dispatch, pull target (intake alone) and {} push daemon(s)",
        backend.name(),
        args.dispatch.len()
    );
    let url = database("pull").await?;
    let pull_dir = tempfile::tempdir()?;
    let pull_daemon = start_daemon(
        args,
        binary,
        pull_dir.path(),
        &daemon_config(&url, &args.durability, None),
    )
    .await?;
    let mut pushes = Vec::new();
    for &kind in &args.dispatch {
        let arrivals = Arc::new(Arrivals::default());
        let sink = match kind {
            DispatchKind::Http => Some(start_sink(arrivals.clone())?),
            DispatchKind::Nats => {
                start_consumer(arrivals.clone(), &args.nats_url).await?;
                None
            }
        };
        let url = database(kind.name()).await?;
        let dir = tempfile::tempdir()?;
        let table = target_toml(kind, sink, &args.nats_url, concurrency);
        let daemon = start_daemon(
            args,
            binary,
            dir.path(),
            &daemon_config(&url, &args.durability, Some(&table)),
        )
        .await?;
        pushes.push(PushDaemon {
            kind,
            arrivals,
            daemon,
            _dir: dir,
            rounds: Vec::new(),
        });
    }

    // Rounds alternate the daemons, so a ratio compares windows seconds apart, however this
    // machine's speed drifts; the idle daemons wait beside the loaded one.
    let mut pull = Vec::new();
    for round in 1..=args.repeat.max(1) {
        eprintln!("== {}: round {round}, pull", backend.name());
        pull.push(closed_loop(args, &pull_daemon, scenario, concurrency, "pull").await);
        for push in &mut pushes {
            let (kind, addr) = (push.kind, push.daemon.addr);
            eprintln!("== {}: round {round}, {}", backend.name(), kind.name());
            let started = Instant::now();
            let intake = closed_loop(args, &push.daemon, scenario, concurrency, kind.name()).await;
            let from = started + args.warmup;
            push.rounds.push(ClosedRound {
                intake,
                delivered: push.arrivals.count_between(from, from + args.duration),
                backlog: pending(addr).await,
                drain: wait_drained(addr).await,
            });
        }
    }
    settle(args, backend).await?;
    let pull_latency = open_loop(args, &pull_daemon, scenario, None).await;
    pull_daemon.stop();

    let mut runs = Vec::new();
    for PushDaemon {
        kind,
        arrivals,
        daemon,
        rounds,
        ..
    } in pushes
    {
        eprintln!(
            "== {}: open loop and outage, {}",
            backend.name(),
            kind.name()
        );
        settle(args, backend).await?;
        let latency = open_loop(args, &daemon, scenario, Some(&arrivals)).await;
        let outage = match (kind, args.outage) {
            (DispatchKind::Http, Some(length)) => {
                Some(outage(args, &daemon, scenario, concurrency, &arrivals, length).await)
            }
            _ => None,
        };
        let daemon_warnings = daemon.warnings();
        daemon.stop();
        runs.push(DispatchRun {
            kind,
            rounds,
            latency,
            outage,
            daemon_warnings,
        });
    }
    for db in databases {
        db.drop_database().await;
    }
    Ok(DispatchResult {
        backend,
        pull,
        pull_latency,
        runs,
        checkpointed: checkpoints(args, backend),
    })
}
