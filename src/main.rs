//! The `switchyard` command line: parses arguments and runs one of the commands in the library.

use std::io::{BufWriter, IsTerminal};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

/// Turns work arriving on many channels into exactly one workflow run, or a named reason why not.
// The intake path allocates many small, short-lived buffers; mimalloc cut CPU per answer by a
// quarter against the system allocator in the load benchmark (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(version, about)]
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
    },
}

/// Log lines are formatted by the thread that logs and written to stderr by a thread of their
/// own, many lines per `write` (one `write` per line cost the daemon a seventh of its CPU under
/// load). No line is dropped: a full queue makes the logging thread wait. Lines still queued
/// are written when the returned guard is dropped.
fn init_logging(format: LogFormat) -> WorkerGuard {
    const QUEUED_LINES: usize = 64 * 1024;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(false)
        .buffered_lines_limit(QUEUED_LINES)
        .thread_name("log-writer")
        .finish(BufWriter::with_capacity(64 * 1024, std::io::stderr()));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(writer);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    guard
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
    let log_writer = init_logging(cli.log_format);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve { config, no_migrate } => {
                switchyard::commands::serve(config, !no_migrate).await
            }
            Command::Migrate { config } => switchyard::commands::migrate(config).await,
            Command::Route { config, event } => switchyard::commands::route(&config, &event).await,
            Command::Check { .. } => Ok(()),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(error = format!("{error:#}"), "switchyard stopped");
            drop(log_writer);
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
