//! Slack Socket Mode: for each `mode = "socket"` source, `connections` slots, each keeping one
//! connection open (`connection`), its envelopes taken down the HTTP callback's path
//! (`envelope`), its state reported (`status`). Started, changed and stopped with the config
//! revision in force ([`SocketMode::apply`]).
//!
//! A `disconnect` with `refresh_requested` or `warning` makes the slot open the replacement at
//! once while the old connection drains (Slack closes it about 10 s later; acks still go out on
//! it), so a refresh leaves no gap. `link_disabled` stops the source's slots (Socket Mode was
//! turned off for the app: no reconnect loop) until a reload or restart. A failure to open or
//! a connection that drops soon after opening backs off (0.5 s doubling to 30 s, or Slack's
//! `Retry-After`). Replicas sharing a database each keep their own connections; Slack spreads
//! envelopes over all of them, and intake's dedup by event id makes a copy on another replica
//! a `duplicate`.
//!
//! slack-morphism's Socket Mode listener is not used: its client opens the URL through its own
//! hyper connector (fine for a test base URL), but it restarts a client on `disconnect`
//! instead of opening the replacement first, and exposes no per-connection state for
//! `/readyz`; the WebSocket protocol is a few frames, written here with tokio-tungstenite.
//!
//! Invariant: every envelope is acknowledged only after its delivery is decided (see
//! `envelope`), and a source's slots run only while a revision in force has it in socket mode.

mod connection;
mod envelope;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use switchyard_slack::SlackMode;
use tokio::sync::{Mutex, watch};
use tokio::task::JoinHandle;

use self::connection::Event;
use crate::config::ResolvedSource;
use crate::http::AppState;
use crate::socket_status::SocketStatuses;

/// How long a draining connection may stay after its replacement opened.
const DRAIN_GRACE: Duration = Duration::from_secs(15);
/// A connection that ends sooner than this after opening counts as a failure (backoff).
const STABLE_AFTER: Duration = Duration::from_secs(10);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What a source's connections share.
#[derive(Debug)]
pub(crate) struct SourceContext {
    pub state: AppState,
    pub name: String,
    pub api_base_url: String,
    pub app_token: String,
    pub http: reqwest::Client,
    pub statuses: Arc<SocketStatuses>,
    next_id: AtomicU64,
}

/// One source's running slots.
#[derive(Debug)]
struct Running {
    /// The settings they run with: a change restarts them.
    fingerprint: String,
    stop: watch::Sender<bool>,
    slots: Vec<JoinHandle<()>>,
}

/// Every Socket Mode source's connections.
#[derive(Debug, Clone)]
pub struct SocketMode {
    state: AppState,
    running: Arc<Mutex<HashMap<String, Running>>>,
}

impl SocketMode {
    /// None running until [`SocketMode::apply`].
    pub fn new(state: AppState) -> Self {
        Self {
            state,
            running: Arc::default(),
        }
    }

    /// Puts the sources of a revision in force: new or changed socket sources connect, removed
    /// or changed ones disconnect.
    pub async fn apply(&self, sources: &[ResolvedSource]) {
        let mut wanted = HashMap::new();
        for source in sources {
            if let ResolvedSource::Slack {
                config,
                app_token: Some(app_token),
                ..
            } = source
                && config.mode == SlackMode::Socket
            {
                let fingerprint = format!(
                    "{}|{}|{}",
                    config.api_base_url,
                    config.connections,
                    crate::waits::token_hash(app_token)
                );
                wanted.insert(config.name.clone(), (fingerprint, config, app_token));
            }
        }
        let mut running = self.running.lock().await;
        let stale: Vec<String> = running
            .iter()
            .filter(|(name, run)| {
                wanted
                    .get(*name)
                    .is_none_or(|(f, ..)| *f != run.fingerprint)
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in stale {
            if let Some(run) = running.remove(&name) {
                stop(run).await;
            }
            self.state.sockets.remove(&name);
        }
        for (name, (fingerprint, config, app_token)) in wanted {
            if running.contains_key(&name) {
                continue;
            }
            let context = Arc::new(SourceContext {
                state: self.state.clone(),
                name: name.clone(),
                api_base_url: config.api_base_url.clone(),
                app_token: app_token.clone(),
                http: reqwest::Client::builder()
                    .timeout(Duration::from_secs(10))
                    .build()
                    .unwrap_or_default(),
                statuses: self.state.sockets.clone(),
                next_id: AtomicU64::new(0),
            });
            self.state.sockets.update(&name, |status| {
                *status = Default::default();
                status.wanted = config.connections;
            });
            let (stop, stopped) = watch::channel(false);
            let slots = (0..config.connections)
                .map(|slot| tokio::spawn(run_slot(context.clone(), slot, stopped.clone())))
                .collect();
            running.insert(
                name,
                Running {
                    fingerprint,
                    stop,
                    slots,
                },
            );
        }
    }

    /// Closes every connection.
    pub async fn shutdown(&self) {
        let mut running = self.running.lock().await;
        for (name, run) in running.drain() {
            stop(run).await;
            self.state.sockets.remove(&name);
        }
    }
}

async fn stop(run: Running) {
    let _ = run.stop.send(true);
    for slot in run.slots {
        let _ = tokio::time::timeout(Duration::from_secs(5), slot).await;
    }
}

/// The delay before attempt `failures` + 1.
fn backoff(failures: u32, retry_after: Option<u64>) -> Duration {
    if let Some(seconds) = retry_after {
        return Duration::from_secs(seconds).min(MAX_BACKOFF * 4);
    }
    let exponent = failures.saturating_sub(1).min(8);
    (Duration::from_millis(500) * 2u32.pow(exponent)).min(MAX_BACKOFF)
}

/// Keeps one connection of slot `slot` open until stopped.
async fn run_slot(ctx: Arc<SourceContext>, slot: u8, mut stopped: watch::Receiver<bool>) {
    let mut failures = 0u32;
    let mut first = true;
    loop {
        if *stopped.borrow() {
            return;
        }
        if !std::mem::take(&mut first) {
            ctx.statuses
                .update(&ctx.name, |status| status.reconnects += 1);
            crate::metrics::metrics()
                .socket_reconnects
                .get_or_create(&crate::metrics::SourceLabel {
                    source: ctx.name.clone(),
                })
                .inc();
        }
        let id = ctx.next_id.fetch_add(1, Ordering::Relaxed);
        let opened = tokio::select! {
            opened = connection::open(&ctx, slot, id) => opened,
            _ = stopped.changed() => return,
        };
        let mut connection = match opened {
            Ok(connection) => connection,
            Err(failure) => {
                failures += 1;
                tracing::warn!(source = %ctx.name, slot, failures, error = %failure.detail, "cannot open a Slack Socket Mode connection");
                ctx.statuses
                    .update(&ctx.name, |status| status.last_error = Some(failure.detail));
                if pause(backoff(failures, failure.retry_after), &mut stopped).await {
                    return;
                }
                continue;
            }
        };
        let opened_at = Instant::now();
        let event = tokio::select! {
            event = connection.events.recv() => event,
            _ = stopped.changed() => {
                connection.close().await;
                return;
            }
        };
        match event {
            Some(Event::Disconnect(reason)) if reason == "link_disabled" => {
                tracing::error!(source = %ctx.name, slot, "Slack disabled Socket Mode for this app (link_disabled): not reconnecting until the config is reloaded or the daemon restarts");
                ctx.statuses.update(&ctx.name, |status| {
                    status.link_disabled = true;
                    status.last_error =
                        Some("link_disabled: Socket Mode is off for the app".into());
                });
                connection.drain(DRAIN_GRACE).await;
                return;
            }
            Some(Event::Disconnect(_)) => {
                // The replacement opens now; the old connection goes when Slack closes it.
                failures = 0;
                tokio::spawn(connection.drain(DRAIN_GRACE));
            }
            Some(Event::Closed(error)) => {
                tracing::info!(source = %ctx.name, slot, error, "Socket Mode connection ended without a disconnect: reconnecting");
                if opened_at.elapsed() < STABLE_AFTER {
                    failures += 1;
                    if pause(backoff(failures, None), &mut stopped).await {
                        return;
                    }
                } else {
                    failures = 0;
                }
            }
            None => {}
        }
    }
}

/// Sleeps `delay`; whether the slot was stopped meanwhile.
async fn pause(delay: Duration, stopped: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(delay) => *stopped.borrow(),
        _ = stopped.changed() => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_cap_and_honours_retry_after() {
        assert_eq!(backoff(1, None), Duration::from_millis(500));
        assert_eq!(backoff(2, None), Duration::from_secs(1));
        assert_eq!(backoff(20, None), MAX_BACKOFF);
        assert_eq!(backoff(1, Some(7)), Duration::from_secs(7));
    }
}
