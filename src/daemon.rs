//! One running daemon: the database pool, the revision in force, the intake writers, the HTTP
//! server and (per email source) a mailbox poller.

use std::future::Future;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::config::Settings;
use crate::dispatcher::{Dispatcher, TargetHealths, Wake};
use crate::edge::{Approvals, Pollers, SocketMode, SourceStatuses};
use crate::http::{self, AppParts, AppState};
use crate::intake::Intake;
use crate::live::{Live, LiveConfig};
use crate::retention::Retention;
use crate::store::{DbErr, Store};

/// A started daemon, not yet serving HTTP. Clones share everything (for reloading while serving).
#[derive(Debug, Clone)]
pub struct Daemon {
    state: AppState,
    pollers: Pollers,
    socket_mode: SocketMode,
    approvals: Arc<Approvals>,
    dispatcher: Arc<Dispatcher>,
    retention: Arc<Retention>,
    wait_timers: Arc<crate::waits::timers::WaitTimers>,
    alerts: Arc<crate::alerts::Alerts>,
}

impl Daemon {
    /// Connects to the database (migrating it unless `migrate` is false), records the
    /// workflows of this revision and starts the intake writers.
    pub async fn start(settings: Settings, migrate: bool) -> anyhow::Result<Self> {
        let url = settings.loaded.database_url();
        let database = settings.loaded.config.database.clone();
        let store = Store::open(&url, &database.store_options())
            .await
            .with_context(|| format!("cannot open the database at {}", redact_url(&url)))?;
        if migrate {
            store
                .migrate()
                .await
                .context("cannot migrate the database")?;
        }
        // Before the intake writer and its checkpointer open their own connections.
        store.prepare_space().await?;
        let live = Live::new(settings);
        store
            .sync_workflows(
                live.revision(),
                &live.workflows,
                switchyard_store::now_millis(),
            )
            .await
            .context(
                "cannot record the workflows (is the database migrated? run `switchyard migrate`)",
            )?;
        record_revision(&store, &live).await.context(
            "cannot record the config revision (is the database migrated? run `switchyard migrate`)",
        )?;
        log_revision(&live);
        let live = LiveConfig::new(live);
        crate::metrics::metrics().zero_deliveries(
            crate::edge::CHANNELS
                .iter()
                .map(|channel| channel.kind())
                .chain([crate::config::API_SOURCE]),
        );
        zero_named_series(&live.current());
        let wake = Arc::new(Wake::default());
        let intake = Intake::start(&store, &database, live.clone(), wake.clone())?;
        let sources = Arc::new(SourceStatuses::default());
        let replica_id = live.current().settings.loaded.replica_id();
        let targets = Arc::new(TargetHealths::default());
        let dispatcher = Arc::new(Dispatcher::start(
            store.clone(),
            live.clone(),
            // Unique per process: two daemons on one host and file must not share claims.
            format!("{replica_id}:{}", uuid::Uuid::now_v7().simple()),
            wake.clone(),
            targets.clone(),
        ));
        let retention = Arc::new(Retention::start(store.clone(), live.clone()));
        let wait_timers = Arc::new(crate::waits::timers::WaitTimers::start(
            store.clone(),
            live.clone(),
            wake.clone(),
        ));
        let pollers = Pollers::new(store.clone(), intake.clone(), sources.clone(), replica_id);
        pollers.apply(&live.current().settings).await;
        // A replay still `running` here was cut short by the last stop; it can be rerun.
        if let Err(error) = store
            .interrupt_replays(switchyard_store::now_millis())
            .await
        {
            tracing::warn!(%error, "cannot mark interrupted replays");
        }
        let replays = crate::replay::Replayer::new(
            store.clone(),
            Some(intake.clone()),
            crate::edge::REGISTERED,
        );
        let alert_status = Arc::new(crate::alerts::AlertStatus::default());
        let alerts = Arc::new(crate::alerts::Alerts::start(crate::alerts::Inputs {
            store: store.clone(),
            live: live.clone(),
            intake: intake.clone(),
            sources: sources.clone(),
            targets: targets.clone(),
            status: alert_status.clone(),
            replica_id: live.current().settings.loaded.replica_id(),
            started: switchyard_store::now_millis(),
            quiet_searches: Default::default(),
        }));
        let state = AppState::new(AppParts {
            replays,
            store: store.clone(),
            live,
            intake,
            sources,
            sockets: Arc::default(),
            wake,
            targets,
            console: Arc::default(),
            pending: Arc::default(),
            alerts: alert_status,
        });
        let approvals = Arc::new(Approvals::start(store.clone(), state.live.clone()));
        let socket_mode = SocketMode::new(state.clone());
        socket_mode
            .apply(&state.live.current().settings.sources)
            .await;
        Ok(Self {
            state,
            socket_mode,
            approvals,
            pollers,
            dispatcher,
            retention,
            wait_timers,
            alerts,
        })
    }

    /// The handles the HTTP handlers use; tests and the poller supervisor use them too.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Puts a new config revision in force. Settings that need a restart (database, listen
    /// address, body limit) are reported and keep their running values.
    pub async fn reload(&self, settings: Settings) -> anyhow::Result<()> {
        let current = self.state.live.current();
        let (old, new) = (&current.settings.loaded, &settings.loaded);
        if old.database_url() != new.database_url() {
            tracing::warn!("database.url changed: it takes effect at the next restart");
        }
        if old.config.server.listen != new.config.server.listen
            || old.config.server.body_limit != new.config.server.body_limit
        {
            tracing::warn!(
                "server.listen or server.body_limit changed: they take effect at the next restart"
            );
        }
        if old.config.telemetry != new.config.telemetry {
            tracing::warn!("[telemetry] changed: it takes effect at the next restart");
        }
        let live = Live::new(settings);
        self.state
            .store
            .sync_workflows(
                live.revision(),
                &live.workflows,
                switchyard_store::now_millis(),
            )
            .await
            .context("cannot record the new workflows; the old revision stays in force")?;
        record_revision(&self.state.store, &live)
            .await
            .context("cannot record the new config revision; the old revision stays in force")?;
        log_revision(&live);
        self.state.live.replace(live);
        self.state.alerts.set_reload_refused(None);
        crate::metrics::metrics().config_reload(false);
        zero_named_series(&self.state.live.current());
        let current = self.state.live.current();
        self.pollers.apply(&current.settings).await;
        self.socket_mode.apply(&current.settings.sources).await;
        Ok(())
    }

    /// Serves HTTP on `listener` until `shutdown` completes, then drains in-flight requests
    /// (for at most `server.shutdown_timeout`).
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let server = self
            .state
            .live
            .current()
            .settings
            .loaded
            .config
            .server
            .clone();
        let addr = listener.local_addr().context("listener has no address")?;
        let app = crate::app::router(self.state.clone(), &server);
        let limits = crate::server::Limits {
            header_read_timeout: server.header_read_timeout,
            max_connections: crate::server::fit_connection_cap(server.max_connections),
            max_connections_per_client: server.max_connections_per_client(),
            shutdown_timeout: server.shutdown_timeout,
        };
        let (stopping, stopped) = tokio::sync::watch::channel(false);
        let wake = self.state.wake.clone();
        let shutdown = async move {
            shutdown.await;
            // Waiting claims answer now instead of holding the drain for up to their `wait`.
            wake.pull.close();
            let _ = stopping.send(true);
        };
        if let Some(metrics_addr) = server.metrics_listen {
            let metrics_listener = TcpListener::bind(metrics_addr).await.with_context(|| {
                format!("cannot listen on {metrics_addr} (server.metrics_listen)")
            })?;
            let metrics_addr = metrics_listener
                .local_addr()
                .context("metrics listener has no address")?;
            tracing::info!(addr = %metrics_addr, "metrics listening");
            let metrics_limits = crate::server::Limits {
                max_connections: 64,
                ..limits
            };
            let app = http::metrics_only(self.state.clone());
            let mut stopped = stopped.clone();
            tokio::spawn(crate::server::serve(
                metrics_listener,
                app,
                metrics_limits,
                async move {
                    let _ = stopped.wait_for(|stopped| *stopped).await;
                },
            ));
        }
        tracing::info!(%addr, max_connections = limits.max_connections, "listening");
        crate::server::serve(listener, app, limits, shutdown).await;
        // Pollers log out and release their leases, so another replica takes over at once.
        self.pollers.shutdown().await;
        self.socket_mode.shutdown().await;
        self.approvals.shutdown().await;
        // Deliveries in flight finish and are recorded, or stay claimed and are sent again.
        self.dispatcher.shutdown().await;
        self.retention.shutdown().await;
        self.wait_timers.shutdown().await;
        self.alerts.shutdown().await;
        tracing::info!("stopped");
        Ok(())
    }
}

/// Starts a daemon on `settings` and serves `listener` until `shutdown`.
pub async fn run(
    settings: Settings,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    Daemon::start(settings, true)
        .await?
        .serve(listener, shutdown)
        .await
}

/// Stores the revision coming into force (nothing when it is the one in force already).
async fn record_revision(store: &Store, live: &Live) -> Result<(), DbErr> {
    let content = crate::config::revision_content(&live.settings);
    let now = switchyard_store::now_millis();
    if store
        .record_revision(live.revision(), &content, now)
        .await?
    {
        tracing::info!(
            config_revision = live.revision(),
            "config revision recorded"
        );
    }
    Ok(())
}

fn log_revision(live: &Live) {
    let live_workflows = live
        .workflows
        .iter()
        .filter(|w| w.status == switchyard_core::WorkflowStatus::Live)
        .count();
    tracing::info!(
        config_revision = live.revision(),
        workflows = live.workflows.len(),
        live_workflows,
        trigger_keys = live.index.len(),
        "config revision in force"
    );
    let mut degraded: Vec<_> = live
        .authority
        .degraded(switchyard_store::now_millis())
        .into_iter()
        .collect();
    degraded.sort_by(|a, b| a.0.cmp(b.0));
    for (workflow_id, refusal) in degraded {
        tracing::warn!(workflow_id, principal = %refusal.principal, reason = refusal.reason_word(), "live workflow is degraded: {refusal}; its events are recorded authority_unavailable");
    }
    for target in &live.settings.targets {
        if let crate::config::ResolvedTarget::Http { config, .. } = target
            && config.insecure_skip_signature
        {
            tracing::warn!(
                target = %config.name,
                "http target sends UNSIGNED requests (insecure_skip_signature = true): its worker cannot tell them from forgeries"
            );
        }
    }
    for source in &live.settings.loaded.config.sources {
        if let Some(why) = source.settings().unsigned() {
            tracing::warn!(
                source = %source.name(),
                "{} source accepts UNSIGNED deliveries ({why}): anyone who can reach it can create runs",
                source.kind()
            );
        }
    }
}

/// The URL without its password, for messages.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}://{user}:***@{}", &url[..scheme_end], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

/// The per-name metric series of `live`'s sources (and `api`) and workflows, at zero.
fn zero_named_series(live: &Live) {
    crate::metrics::metrics().zero_names(
        live.settings
            .loaded
            .config
            .sources
            .iter()
            .map(crate::config::SourceConfig::name)
            .chain([crate::config::API_SOURCE]),
        live.workflows.iter().map(|workflow| workflow.id.as_str()),
    );
}
