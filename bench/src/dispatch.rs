//! Dispatch scenarios (`--dispatch http,nats`): the daemon delivers every routed run to a worker
//! inside this process (an HTTP sink answering 204, or a JetStream consumer), which records when
//! each run arrived. Measured per backend, beside the daemon with the built-in pull target
//! (intake and outbox write only): routed-and-delivered runs/s at closed-loop concurrency
//! (`--repeat` rounds alternating the daemons, which all run at once), event-to-worker latency
//! at an open-loop rate, and optionally a receiver outage.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::extract::State;
use axum::http::StatusCode;
use bytes::Bytes;
use futures::StreamExt;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::args::{Backend, BenchArgs, DispatchKind, Scenario};
use crate::child::Server;
use crate::config;
use crate::load::{self, RunResult};
use crate::plan::{sqlite_url, start_daemon};
use crate::postgres::TempDatabase;
use crate::workload::Workload;

/// The name of the push target in the generated config.
const TARGET: &str = "sink";
/// The JetStream stream the nats target publishes to (created fresh, deleted afterwards).
const STREAM: &str = "SWITCHYARD_BENCH_RUNS";
/// How long the daemon may take to deliver the backlog of a run before giving up on it.
const DRAIN_LIMIT: Duration = Duration::from_secs(300);

/// Where runs arrive: the time each arrived and its `data.run.id`.
#[derive(Debug, Default)]
pub struct Arrivals {
    runs: Mutex<Vec<(Instant, String)>>,
    /// Requests the HTTP sink refused (outage).
    refused: AtomicU64,
    /// Status the HTTP sink answers (204, or 503 during an outage).
    status: AtomicU16,
}

impl Arrivals {
    fn record(&self, body: &[u8]) {
        let at = Instant::now();
        if let Some(id) = run_id_of(body) {
            lock(&self.runs).push((at, id.to_owned()));
        }
    }

    /// Distinct runs that arrived in `[from, until)`.
    fn count_between(&self, from: Instant, until: Instant) -> usize {
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
    fn first_arrivals(&self) -> HashMap<String, Instant> {
        let mut first = HashMap::new();
        for (at, id) in lock(&self.runs).iter() {
            first.entry(id.clone()).or_insert(*at);
        }
        first
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `data.run.id` of a run message (`RunInfo` serialises `id` first), without parsing the JSON.
fn run_id_of(body: &[u8]) -> Option<&str> {
    string_after(body, br#""run":{"id":""#)
}

/// The string value after `key` (which ends with the opening quote).
fn string_after<'a>(body: &'a [u8], key: &[u8]) -> Option<&'a str> {
    let start = body.windows(key.len()).position(|w| w == key)? + key.len();
    let len = body[start..].iter().position(|&b| b == b'"')?;
    std::str::from_utf8(&body[start..start + len]).ok()
}

/// Starts the HTTP sink on 127.0.0.1:0, on a thread and runtime of its own, as a worker on
/// another machine would be: on the generator's one thread, the sink's requests waited for the
/// load's and the load's for the sink's.
fn start_sink(arrivals: Arc<Arrivals>) -> anyhow::Result<SocketAddr> {
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
async fn start_consumer(arrivals: Arc<Arrivals>, url: &str) -> anyhow::Result<()> {
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

/// The `[[target]]` table of `kind`, pointing at the sink. An http target may send as many
/// runs at once as the load has requests in flight (`concurrency`): the sink takes any number,
/// so neither side's window caps the other's rate.
fn target_toml(
    kind: DispatchKind,
    sink: Option<SocketAddr>,
    nats_url: &str,
    concurrency: usize,
) -> String {
    let retry = r#"retry = ["1s", "2s", "5s", "10s", "30s", "60s", "60s"]"#;
    match (kind, sink) {
        (DispatchKind::Http, Some(addr)) => format!(
            "\n[[target]]\nname = \"{TARGET}\"\nkind = \"http\"\nurl = \"http://{addr}/runs\"\n\
             signing_secret_env = \"{}\"\ntimeout = \"5s\"\nmax_in_flight = {concurrency}\n{retry}\n",
            config::SINK_SECRET_ENV
        ),
        _ => format!(
            "\n[[target]]\nname = \"{TARGET}\"\nkind = \"nats\"\nurl = \"{nats_url}\"\n\
             subject = \"bench.{{tenant}}.{{workflow}}\"\nstream = \"{STREAM}\"\ncreate_stream = true\n{retry}\n"
        ),
    }
}

/// One daemon's load config, with the winning workflow's runs going to `target` (None: the
/// built-in pull target).
fn daemon_config(database_url: &str, durability: &str, target: Option<&str>) -> String {
    let text = config::load_config(database_url, durability);
    match target {
        None => text,
        Some(table) => {
            text.replacen(
                "id = \"triage\"\n",
                &format!("id = \"triage\"\ntarget = \"{TARGET}\"\n"),
                1,
            ) + table
        }
    }
}

/// One closed-loop window of a push target.
#[derive(Debug)]
pub struct ClosedRound {
    /// Intake as the load generator saw it.
    pub intake: RunResult,
    /// Distinct runs that arrived during the measured window.
    pub delivered: usize,
    /// Pending runs at the end of the window, and the time the daemon took to deliver them.
    pub backlog: Option<u64>,
    pub drain: Option<Duration>,
}

impl ClosedRound {
    fn delivered_per_sec(&self) -> f64 {
        self.delivered as f64 / self.intake.window.as_secs_f64()
    }

    /// Delivered per second over `pull`'s routed per second (the pull daemon's same round).
    fn ratio_to(&self, pull: &RunResult) -> f64 {
        self.delivered_per_sec() / pull.outcome_per_sec("routed").max(1e-9)
    }
}

/// A push daemon waiting its turn in the rounds, with where its runs arrive.
struct PushDaemon {
    kind: DispatchKind,
    arrivals: Arc<Arrivals>,
    daemon: Server,
    /// Holds the daemon's config directory until it stops.
    _dir: tempfile::TempDir,
    rounds: Vec<ClosedRound>,
}

/// What one push target measured.
#[derive(Debug)]
pub struct DispatchRun {
    pub kind: DispatchKind,
    /// One closed loop per `--repeat`, each right after the pull daemon's of the same round.
    pub rounds: Vec<ClosedRound>,
    pub latency: Option<OpenLoop>,
    pub outage: Option<Outage>,
    pub daemon_warnings: (u64, Option<String>),
}

/// Open-loop figures.
#[derive(Debug)]
pub struct OpenLoop {
    pub rate: u64,
    pub sent: u64,
    pub routed: u64,
    pub arrived: u64,
    /// Request written to answer read, µs.
    pub answer_us: Histogram<u64>,
    /// Request written to the run's arrival at the worker, µs.
    pub to_worker_us: Histogram<u64>,
    /// Answer read to the run's arrival at the worker, µs (0 when the run arrived first):
    /// delivery's own share, apart from intake's.
    pub after_answer_us: Histogram<u64>,
}

/// A receiver outage under closed-loop load.
#[derive(Debug)]
pub struct Outage {
    pub before: RunResult,
    pub during: RunResult,
    pub refused: u64,
    pub pending_at_end: Option<u64>,
    pub drain: Option<Duration>,
}

/// Everything measured on one backend.
#[derive(Debug)]
pub struct DispatchResult {
    pub backend: Backend,
    /// The daemon with the built-in pull target under the same load, one closed loop per round.
    pub pull: Vec<RunResult>,
    pub pull_latency: Option<OpenLoop>,
    pub runs: Vec<DispatchRun>,
    /// Whether each open loop started right after a `CHECKPOINT` (PostgreSQL, by default).
    pub checkpointed: bool,
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

/// Whether each open loop starts right after a `CHECKPOINT`: on PostgreSQL, unless
/// `--no-checkpoint`. The closed loops before it write WAL at several times the open loop's
/// rate; without it the open loop measures the server's checkpoint of their writes (see
/// BENCHMARKS round 17).
fn checkpoints(args: &BenchArgs, backend: Backend) -> bool {
    backend == Backend::Postgres && !args.no_checkpoint && args.dispatch_rate > 0
}

/// Before an open loop: the `CHECKPOINT` that [`checkpoints`] asks for.
async fn settle(args: &BenchArgs, backend: Backend) -> anyhow::Result<()> {
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

async fn closed_loop(
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
async fn pending(addr: SocketAddr) -> Option<u64> {
    let body = get_body(addr, "/readyz").await?;
    let value: serde_json::Value = serde_json::from_slice(&body).ok()?;
    value["targets"][TARGET]["pending"].as_u64()
}

/// Polls `/readyz` until the push target has nothing pending; the time that took.
async fn wait_drained(addr: SocketAddr) -> Option<Duration> {
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
async fn open_loop(
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
async fn outage(
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

/// The results as Markdown.
pub fn print(result: &DispatchResult) {
    println!("## Dispatch on {}\n", result.backend.name());
    println!(
        "Closed loop, {} round(s); each round loads the daemon with the built-in pull target \
         (intake and outbox write, no delivery), then each push daemon. `delivered/s` counts \
         distinct runs that reached the worker in the measured window; the ratio is to the pull \
         daemon's routed/s in the same round.\n",
        result.pull.len()
    );
    println!(
        "| round | target | answers/s | routed/s | delivered/s | delivered / pull routed | p99 ms | daemon CPU | gen CPU | other CPU | pending at end | drained in s |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let row = |round: usize,
               name: &str,
               run: &RunResult,
               delivered: Option<(f64, f64)>,
               rest: String| {
        println!(
            "| {round} | {name} | {:.0} | {:.0} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {rest} |",
            run.ok_per_sec(),
            run.outcome_per_sec("routed"),
            delivered.map_or("-".into(), |(d, _)| format!("{d:.0}")),
            delivered.map_or("-".into(), |(_, ratio)| format!("{ratio:.2}")),
            run.latency_ms(0.99),
            run.cpu.server_cores,
            run.cpu.generator_cores,
            run.cpu.other_cores,
        );
    };
    for (i, pull) in result.pull.iter().enumerate() {
        row(i + 1, "pull (intake alone)", pull, None, "- | -".into());
        for run in &result.runs {
            let Some(round) = run.rounds.get(i) else {
                continue;
            };
            row(
                i + 1,
                run.kind.name(),
                &round.intake,
                Some((round.delivered_per_sec(), round.ratio_to(pull))),
                format!(
                    "{} | {}",
                    round.backlog.map_or("?".into(), |n| n.to_string()),
                    round
                        .drain
                        .map_or("not drained".into(), |d| format!("{:.1}", d.as_secs_f64())),
                ),
            );
        }
    }
    for run in &result.runs {
        let ratios: Vec<f64> = run
            .rounds
            .iter()
            .zip(&result.pull)
            .map(|(round, pull)| round.ratio_to(pull))
            .collect();
        let each = ratios
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(", ");
        // As every other table's median: the upper middle of an even count.
        if let Some(median) = crate::startup::median(ratios.iter().copied()) {
            println!(
                "\n{}: delivered / pull routed per round {each}; median **{median:.2}**; daemon \
                 WARN/ERROR lines {}.",
                run.kind.name(),
                run.daemon_warnings.0
            );
        }
    }
    println!(
        "\nOpen loop (event to worker: request written to the run's arrival at the worker){}:\n",
        if result.checkpointed {
            ", each started right after a CHECKPOINT of the server"
        } else {
            ""
        }
    );
    println!(
        "| target | rate/s | sent | routed | arrived | answer p50 / p99 ms | to worker p50 / p99 / max ms | answer to worker p50 / p99 ms |"
    );
    println!("|---|---:|---:|---:|---:|---|---|---|");
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let open = |name: &str, l: &OpenLoop, delivered: bool| {
        println!(
            "| {name} | {} | {} | {} | {} | {:.2} / {:.2} | {} | {} |",
            l.rate,
            l.sent,
            l.routed,
            if delivered {
                l.arrived.to_string()
            } else {
                "-".into()
            },
            ms(&l.answer_us, 0.5),
            ms(&l.answer_us, 0.99),
            if delivered {
                format!(
                    "{:.2} / {:.2} / {:.1}",
                    ms(&l.to_worker_us, 0.5),
                    ms(&l.to_worker_us, 0.99),
                    l.to_worker_us.max() as f64 / 1000.0
                )
            } else {
                "-".into()
            },
            if delivered {
                format!(
                    "{:.2} / {:.2}",
                    ms(&l.after_answer_us, 0.5),
                    ms(&l.after_answer_us, 0.99)
                )
            } else {
                "-".into()
            },
        );
    };
    if let Some(l) = &result.pull_latency {
        open("pull (intake alone)", l, false);
    }
    for run in &result.runs {
        if let Some(l) = &run.latency {
            open(run.kind.name(), l, true);
        }
    }
    for run in &result.runs {
        let Some(o) = &run.outage else { continue };
        println!(
            "\nReceiver outage ({}, sink answering 503 for {}): answers/s before {:.0}, during {:.0} \
             (ratio {:.2}); routed/s before {:.0}, during {:.0}; requests refused by the sink {}; \
             pending at the end of the outage {}; drained {} after the sink recovered (load stopped).",
            run.kind.name(),
            humantime::format_duration(o.during.window),
            o.before.ok_per_sec(),
            o.during.ok_per_sec(),
            o.during.ok_per_sec() / o.before.ok_per_sec().max(1e-9),
            o.before.outcome_per_sec("routed"),
            o.during.outcome_per_sec("routed"),
            o.refused,
            o.pending_at_end.map_or("?".into(), |n| n.to_string()),
            o.drain.map_or("not within 300 s".into(), |d| format!(
                "in {:.1} s",
                d.as_secs_f64()
            )),
        );
    }
    for run in &result.runs {
        if let Some(first) = &run.daemon_warnings.1 {
            println!(
                "\nFirst daemon warning ({}): `{}`",
                run.kind.name(),
                first.chars().take(400).collect::<String>()
            );
        }
    }
    println!();
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

    #[test]
    fn the_dispatch_config_names_the_target_for_the_winning_workflow() {
        let addr: SocketAddr = "127.0.0.1:9".parse().expect("address");
        let text = daemon_config(
            "sqlite://x.db",
            "full",
            Some(&target_toml(
                DispatchKind::Http,
                Some(addr),
                "nats://127.0.0.1:4222",
                64,
            )),
        );
        let value: toml::Value = toml::from_str(&text).expect("TOML");
        assert_eq!(value["workflow"][0]["target"].as_str(), Some(TARGET));
        assert!(value["workflow"][1].get("target").is_none());
        assert_eq!(value["target"][0]["kind"].as_str(), Some("http"));
        assert_eq!(value["target"][0]["max_in_flight"].as_integer(), Some(64));
        let nats = target_toml(DispatchKind::Nats, None, "nats://127.0.0.1:4222", 64);
        let value: toml::Value = toml::from_str(&nats).expect("TOML");
        assert_eq!(
            value["target"][0]["subject"].as_str(),
            Some("bench.{tenant}.{workflow}")
        );
    }
}
