//! The `switchyard` command line: parses arguments and runs one of the commands in the library.

use std::io::{BufWriter, IsTerminal};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use switchyard::telemetry::Telemetry;
use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Turns work arriving on many channels into exactly one workflow run, or a named reason why not.
// The intake path allocates many small, short-lived buffers; mimalloc cut CPU per answer by a
// quarter against the system allocator in the load benchmark (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// sysexits.h: the config file is wrong.
const EX_CONFIG: u8 = 78;

/// The version and the commit it was built from (`build.rs`).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SWITCHYARD_COMMIT"),
    ")"
);

#[derive(Debug, Parser)]
#[command(version = VERSION, about)]
struct Cli {
    /// Log line format.
    #[arg(
        long,
        value_enum,
        default_value = "text",
        global = true,
        env = "SWITCHYARD_LOG_FORMAT"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum MailboxCommand {
    /// Sign in to one email source once (token, connect, sign-in, select) and report.
    Test {
        #[arg(long, short)]
        config: PathBuf,
        /// The email source's `name`.
        #[arg(long, short)]
        source: String,
    },
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon (SIGHUP reloads the config; SIGTERM/SIGINT stop it gracefully).
    Serve {
        #[arg(long, short)]
        config: PathBuf,
        /// Listen on this address and port instead of the config's `server.listen`.
        #[arg(long, env = "SWITCHYARD_LISTEN", value_name = "ADDR")]
        listen: Option<String>,
        /// Use this database instead of the config's `database.url` (a relative SQLite path is
        /// relative to the current directory).
        #[arg(long, env = "SWITCHYARD_DATABASE_URL", value_name = "URL")]
        database: Option<String>,
        /// Do not apply pending database migrations on start.
        #[arg(long)]
        no_migrate: bool,
    },
    /// Apply pending database migrations and exit.
    Migrate {
        #[arg(long, short)]
        config: PathBuf,
        /// Migrate this database instead of the config's `database.url` (as `serve --database`).
        #[arg(long, env = "SWITCHYARD_DATABASE_URL", value_name = "URL")]
        database: Option<String>,
    },
    /// Validate a config file; warn about priority ties, drafts and unreachable triggers.
    /// With `--candidate NEW --against-ledger 7d`: also decide the last 7 days of the ledger
    /// (of the database `--config` names) again under NEW and print how outcomes move.
    Check {
        /// The config file (with `--candidate`: the one in force, whose database is read;
        /// optional then, the candidate's database is read instead).
        #[arg(long, short, required_unless_present = "candidate")]
        config: Option<PathBuf>,
        /// A new config file to check and compare against recorded traffic.
        #[arg(long)]
        candidate: Option<PathBuf>,
        /// Replay this span of the ledger (back from now: `24h`, `7d`) under the candidate.
        #[arg(long, requires = "candidate", value_parser = humantime::parse_duration)]
        against_ledger: Option<std::time::Duration>,
        /// Exit 1 when any delivery would come out differently (for CI in a config repo).
        #[arg(long, requires = "against_ledger")]
        fail_on_change: bool,
    },
    /// Mailbox sources: `mailbox test --config F --source S` signs in once and reports the
    /// mailbox's message count and UIDVALIDITY, or which step failed.
    Mailbox {
        #[command(subcommand)]
        command: MailboxCommand,
    },
    /// Dry-run one canonical event: which workflow would win and whether its entity is locked.
    /// With `--source NAME --body FILE`: a raw body as the source's sender sends it, verified
    /// (unless `--skip-verify`), mapped and explained.
    Route {
        #[arg(long, short)]
        config: PathBuf,
        /// A JSON file with channel, event_type, tenant_id, target_entity_id (payload optional).
        #[arg(
            long,
            short,
            required_unless_present = "source",
            conflicts_with = "source"
        )]
        event: Option<PathBuf>,
        /// The `[[source]]` whose sender the body comes from.
        #[arg(long, requires = "body")]
        source: Option<String>,
        /// The raw body, byte for byte as the sender sends it (a JSON webhook, a form post, an
        /// RFC 5322 message for an email source).
        #[arg(long, requires = "source")]
        body: Option<PathBuf>,
        /// A request header, `Name:Value` (repeatable): signatures, `Origin`, `Content-Type`.
        #[arg(long = "header", requires = "source")]
        headers: Vec<String>,
        /// Map the body without checking its signature (or a form's `Origin`).
        #[arg(long, requires = "source")]
        skip_verify: bool,
        /// Explain against a stored past revision (its id or `config_revision` hash, as
        /// `GET /v1/revisions` and the ledger name it) instead of the file's workflows.
        #[arg(long)]
        revision: Option<String>,
    },
    /// Print the next fires of every `[[schedule]]` in UTC and in its local time (reads no
    /// database): the check before a reload.
    Schedule {
        #[arg(long, short)]
        config: PathBuf,
        /// Fires at or after this instant (RFC 3339, e.g. 2027-03-28T00:00:00Z); default now.
        #[arg(long)]
        from: Option<String>,
        /// How many fires of each schedule.
        #[arg(long, default_value_t = 5)]
        next: usize,
    },
    /// Replay stored deliveries from their raw bytes through the adapters and the router:
    /// diagnostic by default (a stored report, nothing live), `--live` to re-admit them.
    Replay {
        #[arg(long, short)]
        config: PathBuf,
        /// Received at or after: a time (2026-12-01T10:42:00Z), a date, or a span back (24h).
        #[arg(long, value_parser = parse_when)]
        since: Option<i64>,
        /// Received before: as `--since`.
        #[arg(long, value_parser = parse_when)]
        until: Option<i64>,
        #[arg(long)]
        source: Option<String>,
        /// The original outcome (`routed`, `entity_locked`, ...).
        #[arg(long)]
        outcome: Option<String>,
        #[arg(long)]
        tenant: Option<String>,
        /// The target entity id.
        #[arg(long)]
        entity: Option<String>,
        /// One delivery id.
        #[arg(long)]
        delivery: Option<String>,
        /// `original` (the revision that decided each delivery) or `current` (this file).
        #[arg(long, default_value = "original", conflicts_with = "candidate")]
        revision: String,
        /// Decide under this config file instead.
        #[arg(long)]
        candidate: Option<PathBuf>,
        /// Re-admit the deliveries for real (runs, locks, dispatch) under new delivery ids.
        #[arg(long)]
        live: bool,
        /// Do not ask before a live replay.
        #[arg(long)]
        yes: bool,
        /// Run the stored replay with this id again, under its own parameters.
        #[arg(long, conflicts_with_all = ["since", "until", "source", "outcome", "tenant", "entity", "delivery", "candidate", "live"])]
        rerun: Option<String>,
    },
}

fn parse_when(text: &str) -> Result<i64, String> {
    switchyard::commands::parse_when(text)
}

/// Log lines are formatted by the thread that logs and written to stderr by a thread of their
/// own, many lines per `write` (one `write` per line cost the daemon a seventh of its CPU under
/// load). Logging never blocks intake: when the queue is full (nobody reads stderr) lines are
/// dropped and counted, and once lines get through again one says how many were lost. Lines
/// still queued are written when the returned guard is dropped.
///
/// With `telemetry`, the spans of `switchyard::telemetry` also go to its exporter.
fn init_logging(format: LogFormat, telemetry: Option<&Telemetry>) -> WorkerGuard {
    // Lines queued for the log-writer thread before new ones are dropped.
    let queued_lines = std::env::var("SWITCHYARD_LOG_QUEUE_LINES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(64 * 1024);
    let mut filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    if telemetry.is_some() {
        // The exported spans are not log lines: RUST_LOG=warn must not switch them off.
        if let Ok(spans) = format!("{}=info", switchyard::telemetry::TARGET).parse() {
            filter = filter.add_directive(spans);
        }
    }
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(queued_lines)
        .thread_name("log-writer")
        .finish(BufWriter::with_capacity(64 * 1024, std::io::stderr()));
    let dropped = writer.error_counter();
    let _ = std::thread::Builder::new()
        .name("log-drops".into())
        .spawn(move || report_dropped_lines(dropped));
    // The env filter is global (it gates every layer); the exporter's layer also filters by
    // target, which only a registry-based subscriber supports.
    let lines = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(writer);
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Text => registry
            .with(lines)
            .with(telemetry.map(|t| t.layer()))
            .init(),
        LogFormat::Json => registry
            .with(lines.json())
            .with(telemetry.map(|t| t.layer()))
            .init(),
    }
    guard
}

/// Says how many log lines were dropped, once a line can get through again (a report that is
/// itself dropped is repeated).
fn report_dropped_lines(dropped: tracing_appender::non_blocking::ErrorCounter) {
    let mut reported = 0;
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
        let total = dropped.dropped_lines();
        if total > reported {
            tracing::warn!(
                dropped = total - reported,
                total,
                "log lines were dropped because stderr was not read fast enough"
            );
            if dropped.dropped_lines() == total {
                reported = total;
            }
        }
    }
}

/// `check --candidate --against-ledger`: the candidate checked, then the table; with
/// `fail_on_change`, an error when anything moves.
async fn what_if(
    config: Option<&std::path::Path>,
    candidate: &std::path::Path,
    span: std::time::Duration,
    fail_on_change: bool,
) -> anyhow::Result<()> {
    if !switchyard::commands::check(candidate) {
        anyhow::bail!(
            "the candidate {} is not a valid config",
            candidate.display()
        );
    }
    let tally = switchyard::commands::what_if(config.unwrap_or(candidate), candidate, span).await?;
    println!(
        "against the ledger of the last {}: {} deliveries, {} would come out differently",
        humantime::format_duration(span),
        tally.total(),
        tally.changed()
    );
    print!("{}", tally.render());
    if fail_on_change && tally.changed() > 0 {
        anyhow::bail!(
            "{} deliveries would come out differently under {} (--fail-on-change)",
            tally.changed(),
            candidate.display()
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Check {
        config,
        candidate,
        against_ledger: None,
        ..
    } = &cli.command
    {
        // Every file is checked and reported, even after one fails.
        let results: Vec<bool> = [config, candidate]
            .into_iter()
            .flatten()
            .map(|path| switchyard::commands::check(path))
            .collect();
        let checked = results.into_iter().all(|ok| ok);
        return if checked {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    if let Command::Schedule { config, from, next } = &cli.command {
        return match switchyard::commands::schedule(config, from.as_deref(), *next) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("error: {error:#}");
                let config_error = error
                    .chain()
                    .any(|cause| cause.is::<switchyard::config::ConfigError>());
                if config_error {
                    ExitCode::from(EX_CONFIG)
                } else {
                    ExitCode::FAILURE
                }
            }
        };
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    // The exporter's layer is part of the subscriber from the first line on, so it is read
    // from the config file before logging starts (`serve` reads and checks the file again).
    let telemetry = match &cli.command {
        Command::Serve { config, .. } => {
            match Telemetry::from_config_file(config, runtime.handle().clone()) {
                Ok(telemetry) => telemetry,
                Err(error) => {
                    eprintln!("error: cannot set up the span exporter: {error:#}");
                    return ExitCode::FAILURE;
                }
            }
        }
        _ => None,
    };
    let log_writer = init_logging(cli.log_format, telemetry.as_ref());
    if let Some(telemetry) = &telemetry {
        tracing::info!(
            endpoint = telemetry.endpoint(),
            "exporting spans over OTLP/HTTP"
        );
    }
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve {
                config,
                listen,
                database,
                no_migrate,
            } => {
                let overrides = switchyard::config::Overrides { listen, database };
                switchyard::commands::serve(config, overrides, !no_migrate).await
            }
            Command::Migrate { config, database } => {
                let overrides = switchyard::config::Overrides {
                    listen: None,
                    database,
                };
                switchyard::commands::migrate(config, overrides).await
            }
            Command::Route {
                config,
                event: Some(event),
                revision,
                ..
            } => switchyard::commands::route(&config, &event, revision.as_deref()).await,
            Command::Route {
                config,
                source: Some(source),
                body: Some(body),
                headers,
                skip_verify,
                revision,
                ..
            } => {
                let args = switchyard::commands::RawArgs {
                    source: &source,
                    body: &body,
                    headers: &headers,
                    skip_verify,
                    revision: revision.as_deref(),
                };
                switchyard::commands::route_raw(&config, args).await
            }
            Command::Route { .. } => Err(anyhow::anyhow!(
                "route needs --event FILE, or --source NAME --body FILE"
            )),
            Command::Check {
                config,
                candidate: Some(candidate),
                against_ledger: Some(span),
                fail_on_change,
            } => what_if(config.as_deref(), &candidate, span, fail_on_change).await,
            Command::Check { .. } | Command::Schedule { .. } => Ok(()),
            Command::Mailbox {
                command: MailboxCommand::Test { config, source },
            } => switchyard::commands::mailbox_test(&config, &source).await,
            Command::Replay {
                config,
                since,
                until,
                source,
                outcome,
                tenant,
                entity,
                delivery,
                revision,
                candidate,
                live,
                yes,
                rerun,
            } => match revision.parse() {
                Ok(revision) => {
                    switchyard::commands::replay(switchyard::commands::ReplayArgs {
                        config,
                        filters: switchyard::replay::Filters {
                            since,
                            until,
                            source,
                            outcome,
                            tenant,
                            entity,
                            delivery,
                            tenants: None,
                        },
                        revision,
                        candidate,
                        live,
                        yes,
                        rerun,
                    })
                    .await
                }
                Err(error) => Err(anyhow::anyhow!(error)),
            },
        }
    });
    if let Some(telemetry) = telemetry {
        runtime.block_on(telemetry.shutdown());
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let config_error = error
                .chain()
                .any(|cause| cause.is::<switchyard::config::ConfigError>());
            // A config error's message already quotes its cause (the TOML excerpt); the chain
            // would print it twice.
            let text = if config_error {
                error.to_string()
            } else {
                format!("{error:#}")
            };
            tracing::error!(error = text, "switchyard stopped");
            drop(log_writer);
            eprintln!("error: {text}");
            // A service manager should not restart a daemon whose config is wrong: EX_CONFIG.
            if config_error {
                ExitCode::from(EX_CONFIG)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
