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
enum Command {
    /// Run the daemon (SIGHUP reloads the config; SIGTERM/SIGINT stop it gracefully).
    Serve {
        #[arg(long, short)]
        config: PathBuf,
        /// Do not apply pending database migrations on start.
        #[arg(long)]
        no_migrate: bool,
    },
    /// Apply pending database migrations and exit.
    Migrate {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Validate a config file; warn about priority ties, drafts and unreachable triggers.
    Check {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Dry-run one canonical event: which workflow would win and whether its entity is locked.
    Route {
        #[arg(long, short)]
        config: PathBuf,
        /// A JSON file with channel, event_type, tenant_id, target_entity_id (payload optional).
        #[arg(long, short)]
        event: PathBuf,
        /// Explain against a stored past revision (its id or `config_revision` hash, as
        /// `GET /v1/revisions` and the ledger name it) instead of the file's workflows.
        #[arg(long)]
        revision: Option<String>,
    },
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Check { config } = &cli.command {
        return if switchyard::commands::check(config) {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
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
            Command::Serve { config, no_migrate } => {
                switchyard::commands::serve(config, !no_migrate).await
            }
            Command::Migrate { config } => switchyard::commands::migrate(config).await,
            Command::Route {
                config,
                event,
                revision,
            } => switchyard::commands::route(&config, &event, revision.as_deref()).await,
            Command::Check { .. } => Ok(()),
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
