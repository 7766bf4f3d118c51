//! `switchyard serve` and `switchyard migrate`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};

use crate::Daemon;
use crate::config::{LoadedConfig, Settings, process_env};
use crate::store;

fn load_settings(path: &Path) -> anyhow::Result<Settings> {
    let loaded = LoadedConfig::load(path)?;
    Ok(Settings::resolve(loaded, &process_env)?)
}

/// Runs the daemon until SIGINT or SIGTERM; SIGHUP reloads the config file.
pub async fn serve(config_path: PathBuf, migrate: bool) -> anyhow::Result<()> {
    let settings = load_settings(&config_path)?;
    let listen = settings.loaded.config.server.listen;
    let daemon = Daemon::start(settings, migrate).await?;
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    tokio::spawn(reload_on_sighup(daemon.clone(), config_path));
    daemon.serve(listener, shutdown_signal()).await
}

async fn reload_on_sighup(daemon: Daemon, config_path: PathBuf) {
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::error!("cannot listen for SIGHUP: config reload is off");
        return;
    };
    while hangups.recv().await.is_some() {
        tracing::info!(path = %config_path.display(), "SIGHUP: reloading the config");
        let result = match load_settings(&config_path) {
            Ok(settings) => daemon.reload(settings).await,
            Err(error) => Err(error),
        };
        if let Err(error) = result {
            tracing::error!(
                error = format!("{error:#}"),
                revision = daemon.state().live.current().revision(),
                "the new config was refused; the old revision stays in force"
            );
        }
    }
}

async fn shutdown_signal() {
    let terminate = async {
        match signal(SignalKind::terminate()) {
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
}

/// Applies pending migrations and exits.
pub async fn migrate(config_path: PathBuf) -> anyhow::Result<()> {
    let loaded = LoadedConfig::load(&config_path)?;
    let url = loaded.database_url();
    let db = store::connect(&url, &loaded.config.database)
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
