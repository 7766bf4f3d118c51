//! `switchyard serve` and `switchyard migrate`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::Daemon;
use crate::config::{LoadedConfig, Overrides, Settings, create_sqlite_folder, process_env};
use crate::notify;
use crate::store;

fn load_settings(path: &Path, overrides: &Overrides) -> anyhow::Result<Settings> {
    let mut loaded = LoadedConfig::load(path)?;
    overrides.apply(&mut loaded)?;
    Ok(Settings::resolve(loaded, &process_env)?)
}

/// Creates the folder of a SQLite file about to be created (the data directory).
fn prepare_folder(url: &str) -> anyhow::Result<()> {
    create_sqlite_folder(url).with_context(|| {
        format!(
            "cannot create the folder of the database at {}",
            crate::daemon::redact_url(url)
        )
    })
}

/// Runs the daemon until SIGINT or SIGTERM; SIGHUP reloads the config file (the overrides
/// stay in force).
pub async fn serve(
    config_path: PathBuf,
    overrides: Overrides,
    migrate: bool,
) -> anyhow::Result<()> {
    let settings = load_settings(&config_path, &overrides)?;
    let listen = settings.loaded.config.server.listen;
    let url = settings.loaded.database_url();
    prepare_folder(&url)?;
    tracing::info!(
        database = crate::daemon::redact_url(&url),
        "opening the database"
    );
    notify::status("Starting: opening and migrating the database, starting sources");
    let daemon = Daemon::start(settings, migrate).await?;
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let addr = listener.local_addr().context("listener has no address")?;
    // Both handlers exist before READY=1: a `systemctl reload` or `stop` right after start
    // must not meet the default action (SIGHUP would kill the process).
    let hangups = signal(SignalKind::hangup());
    let terminate = signal(SignalKind::terminate());
    tokio::spawn(reload_on_sighup(
        daemon.clone(),
        config_path,
        overrides,
        hangups,
        addr.to_string(),
    ));
    // The listener is bound, so connections arriving from now on queue until `serve` accepts.
    notify::ready(&serving_status(&daemon, &addr.to_string(), ""));
    daemon.serve(listener, shutdown_signal(terminate)).await
}

/// The line `systemctl status` shows while serving.
fn serving_status(daemon: &Daemon, addr: &str, note: &str) -> String {
    format!(
        "Serving on {addr}, config revision {}{note}",
        daemon.state().live.current().revision()
    )
}

async fn reload_on_sighup(
    daemon: Daemon,
    config_path: PathBuf,
    overrides: Overrides,
    hangups: std::io::Result<Signal>,
    addr: String,
) {
    let Ok(mut hangups) = hangups else {
        tracing::error!("cannot listen for SIGHUP: config reload is off");
        return;
    };
    while hangups.recv().await.is_some() {
        tracing::info!(path = %config_path.display(), "SIGHUP: reloading the config");
        notify::reloading(&format!(
            "Reloading the config from {}",
            config_path.display()
        ));
        let result = match load_settings(&config_path, &overrides) {
            Ok(settings) => daemon.reload(settings).await,
            Err(error) => Err(error),
        };
        // READY=1 either way: a refused config leaves the old revision serving.
        match result {
            Ok(()) => notify::ready(&serving_status(&daemon, &addr, " (reloaded)")),
            Err(error) => {
                daemon
                    .state()
                    .alerts
                    .set_reload_refused(Some(format!("{error:#}")));
                crate::metrics::metrics().config_reload(true);
                tracing::error!(
                    error = format!("{error:#}"),
                    revision = daemon.state().live.current().revision(),
                    "the new config was refused; the old revision stays in force"
                );
                notify::ready(&serving_status(
                    &daemon,
                    &addr,
                    &format!(
                        "; the config reload was REFUSED, the old revision stays in force: {error:#}"
                    ),
                ));
            }
        }
    }
}

async fn shutdown_signal(terminate: std::io::Result<Signal>) {
    let terminate = async {
        match terminate {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = terminate => {},
    }
    tracing::info!("shutting down: finishing in-flight requests");
    notify::stopping("Stopping: draining in-flight requests and deliveries");
}

/// Applies pending migrations and exits.
pub async fn migrate(config_path: PathBuf, overrides: Overrides) -> anyhow::Result<()> {
    let mut loaded = LoadedConfig::load(&config_path)?;
    overrides.apply(&mut loaded)?;
    let url = loaded.database_url();
    prepare_folder(&url)?;
    let db = store::connect(&url, &loaded.config.database.store_options())
        .await
        .with_context(|| {
            format!(
                "cannot open the database at {}",
                crate::daemon::redact_url(&url)
            )
        })?;
    store::migrate(&db).await.context("migration failed")?;
    println!(
        "database at {} is up to date",
        crate::daemon::redact_url(&url)
    );
    Ok(())
}
