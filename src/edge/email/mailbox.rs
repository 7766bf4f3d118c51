//! The daemon's side of the email adapter: a [`MailboxSink`] that records each fetched message
//! through the intake pipeline (ledger row, raw bytes and cursor in one transaction), and the
//! supervisor that runs one poller per email source and restarts them when the config changes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use switchyard_email::{
    Credentials, Cursor, EmailSourceConfig, FetchedMessage, MailboxSink, PollerOptions, SinkError,
    SourceStatus, StartPoint, TokenStore,
};
use switchyard_store::entities::mailbox_start;
use switchyard_store::{Store, now_millis};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use uuid::Uuid;

use super::{CONTENT_TYPE, KIND};
use crate::config::{ResolvedSource, Settings};
use crate::edge::pollers::{Handles, Poll, SourceStatuses};
use crate::intake::{CursorAdvance, Delivery, DeliveryBody, Intake, Raw, digest_id};

/// How long a poller lease lasts without renewal; the poller renews every third of it.
const LEASE_TTL: Duration = Duration::from_secs(60);

/// What the pollers of one daemon share.
#[derive(Debug)]
struct Sink {
    store: Store,
    intake: Intake,
    statuses: Arc<SourceStatuses>,
    /// This replica's identity in poller leases.
    owner: String,
}

/// A ceiling refused a message (`rate_limited`): the poll stops there.
#[derive(Debug, thiserror::Error)]
#[error("stopped taking mail for this poll: {0}")]
struct CeilingReached(String);

fn sink_error(error: impl std::error::Error + Send + Sync + 'static) -> SinkError {
    SinkError::new(error)
}

impl MailboxSink for Sink {
    async fn acquire_lease(&self, source: &str) -> Result<bool, SinkError> {
        let ttl = i64::try_from(LEASE_TTL.as_millis()).unwrap_or(i64::MAX);
        self.store
            .acquire_poller_lease(source, &self.owner, now_millis(), ttl)
            .await
            .map_err(sink_error)
    }

    async fn release_lease(&self, source: &str) -> Result<(), SinkError> {
        self.store
            .release_poller_lease(source, &self.owner, now_millis())
            .await
            .map_err(sink_error)
    }

    async fn cursor(&self, source: &str, mailbox: &str) -> Result<Option<Cursor>, SinkError> {
        let row = self
            .store
            .mailbox_cursor(source, mailbox)
            .await
            .map_err(sink_error)?;
        Ok(row.and_then(|row| {
            Some(Cursor {
                uidvalidity: u32::try_from(row.uidvalidity).ok()?,
                last_uid: u32::try_from(row.last_uid).ok()?,
            })
        }))
    }

    fn new_raw_ref(&self) -> String {
        Delivery::raw_ref(Uuid::now_v7())
    }

    async fn deliver(
        &self,
        source: &str,
        mailbox: &str,
        message: FetchedMessage,
    ) -> Result<(), SinkError> {
        let intake_id = message
            .raw_ref
            .strip_prefix("raw:")
            .and_then(|id| Uuid::parse_str(id).ok())
            .unwrap_or_else(Uuid::now_v7);
        let mut delivery = match message.normalized {
            Ok(normalized) => Delivery::new(
                intake_id,
                source,
                normalized.delivery_id,
                normalized.disposition.into(),
            ),
            // The digest identifies the same bad message across a UIDVALIDITY rescan.
            Err(error) => Delivery::new(
                intake_id,
                source,
                digest_id(&message.raw),
                DeliveryBody::Invalid {
                    detail: format!("{}: {error}", error.detail()),
                },
            ),
        };
        delivery.cursor = Some(CursorAdvance {
            mailbox: mailbox.to_owned(),
            uidvalidity: message.uidvalidity,
            uid: message.uid,
        });
        delivery.raw = Some(Raw {
            content_type: CONTENT_TYPE.into(),
            bytes: message.raw.into(),
        });
        let started = std::time::Instant::now();
        let answered = self.intake.submit(delivery).await;
        crate::metrics::metrics().delivery(
            KIND,
            answered.as_ref().ok().map(|a| a.outcome),
            started.elapsed(),
        );
        let answer = answered.map_err(sink_error)?;
        if answer.outcome == switchyard_core::Outcome::RateLimited {
            // The mailbox is the queue: stop this poll; the cursor stayed before this message,
            // which is fetched and decided again by a later poll.
            let pause = std::time::Duration::from_secs(answer.retry_after.unwrap_or(1));
            return Err(SinkError::paused(
                CeilingReached(answer.detail.unwrap_or_default()),
                pause,
            ));
        }
        Ok(())
    }

    async fn start_mailbox(
        &self,
        source: &str,
        mailbox: &str,
        start: &StartPoint,
    ) -> Result<bool, SinkError> {
        self.store
            .start_mailbox(mailbox_start::Model {
                source: source.to_owned(),
                mailbox: mailbox.to_owned(),
                start_from: start.start_from.clone(),
                uidvalidity: start.uidvalidity.into(),
                first_uid: start.first_uid.into(),
                left_behind: start.left_behind.into(),
                started_at: start.started_at.timestamp_millis(),
            })
            .await
            .map_err(sink_error)
    }

    async fn mailbox_start(
        &self,
        source: &str,
        mailbox: &str,
    ) -> Result<Option<StartPoint>, SinkError> {
        let row = self
            .store
            .mailbox_start(source, mailbox)
            .await
            .map_err(sink_error)?;
        Ok(row.map(|row| StartPoint {
            start_from: row.start_from,
            uidvalidity: u32::try_from(row.uidvalidity).unwrap_or_default(),
            first_uid: u32::try_from(row.first_uid).unwrap_or_default(),
            left_behind: u32::try_from(row.left_behind).unwrap_or_default(),
            started_at: chrono::DateTime::from_timestamp_millis(row.started_at).unwrap_or_default(),
        }))
    }

    async fn skip_to(
        &self,
        source: &str,
        mailbox: &str,
        uidvalidity: u32,
        last_uid: u32,
    ) -> Result<(), SinkError> {
        self.store
            .skip_mailbox_cursor(
                source,
                mailbox,
                uidvalidity.into(),
                last_uid.into(),
                now_millis(),
            )
            .await
            .map(|_| ())
            .map_err(sink_error)
    }

    fn report(&self, source: &str, status: &SourceStatus) {
        self.statuses.set(source, status);
    }
}

impl TokenStore for Sink {
    async fn stored_refresh_token(
        &self,
        source: &str,
        seed_fingerprint: &str,
    ) -> Result<Option<String>, SinkError> {
        StoredTokens(self.store.clone())
            .stored_refresh_token(source, seed_fingerprint)
            .await
    }

    async fn store_refresh_token(
        &self,
        source: &str,
        seed_fingerprint: &str,
        refresh_token: &str,
    ) -> Result<(), SinkError> {
        StoredTokens(self.store.clone())
            .store_refresh_token(source, seed_fingerprint, refresh_token)
            .await
    }
}

/// Rotated refresh tokens kept in the store: the pollers' and `switchyard mailbox test`'s.
#[derive(Debug, Clone)]
pub struct StoredTokens(pub Store);

impl TokenStore for StoredTokens {
    async fn stored_refresh_token(
        &self,
        source: &str,
        seed_fingerprint: &str,
    ) -> Result<Option<String>, SinkError> {
        self.0
            .mailbox_refresh_token(source, seed_fingerprint)
            .await
            .map_err(sink_error)
    }

    async fn store_refresh_token(
        &self,
        source: &str,
        seed_fingerprint: &str,
        refresh_token: &str,
    ) -> Result<(), SinkError> {
        self.0
            .store_mailbox_refresh_token(source, seed_fingerprint, refresh_token, now_millis())
            .await
            .map_err(sink_error)
    }
}

/// A running poller and what started it.
#[derive(Debug)]
struct Running {
    config: EmailSourceConfig,
    credentials: Credentials,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// Runs one poller per email source of the revision in force.
#[derive(Debug, Clone)]
pub struct Mailboxes {
    sink: Arc<Sink>,
    running: Arc<Mutex<HashMap<String, Running>>>,
}

impl Mailboxes {
    /// Pollers that record through `daemon`'s handles and take leases as its replica.
    pub fn new(daemon: &Handles) -> Self {
        Self {
            sink: Arc::new(Sink {
                store: daemon.store.clone(),
                intake: daemon.intake.clone(),
                statuses: daemon.statuses.clone(),
                owner: daemon.replica_id.clone(),
            }),
            running: Arc::default(),
        }
    }
}

#[async_trait::async_trait]
impl Poll for Mailboxes {
    /// Starts pollers for new or changed email sources and stops those removed or changed.
    async fn apply(&self, settings: &Settings) {
        let wanted: HashMap<&str, (&EmailSourceConfig, &Credentials)> = settings
            .sources
            .iter()
            .filter_map(|source| match source {
                ResolvedSource::Email {
                    config,
                    credentials,
                } => Some((config.name.as_str(), (config, credentials))),
                _ => None,
            })
            .collect();
        let stale: Vec<Running> = {
            let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
            let names: Vec<String> = running
                .iter()
                .filter(|(name, poller)| {
                    wanted
                        .get(name.as_str())
                        .is_none_or(|(config, credentials)| {
                            **config != poller.config || **credentials != poller.credentials
                        })
                })
                .map(|(name, _)| name.clone())
                .collect();
            names
                .iter()
                .filter_map(|name| running.remove(name))
                .collect()
        };
        for poller in stale {
            let name = poller.config.name.clone();
            tracing::info!(source = %name, "stopping the mailbox poller (source removed or changed)");
            stop(poller).await;
            self.sink.statuses.remove(&name);
        }
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        for (name, (config, credentials)) in wanted {
            if running.contains_key(name) {
                continue;
            }
            let (stop, shutdown) = watch::channel(false);
            let task = tokio::spawn(switchyard_email::run_poller(
                config.clone(),
                credentials.clone(),
                self.sink.clone(),
                PollerOptions {
                    lease_renew_interval: LEASE_TTL / 3,
                    ..PollerOptions::default()
                },
                shutdown,
            ));
            tracing::info!(source = name, host = %config.host, mailbox = %config.mailbox, "mailbox poller started");
            running.insert(
                name.to_owned(),
                Running {
                    config: config.clone(),
                    credentials: credentials.clone(),
                    stop,
                    task,
                },
            );
        }
    }

    /// Stops every poller; each logs out and releases its lease.
    async fn shutdown(&self) {
        let all: Vec<Running> = {
            let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
            running.drain().map(|(_, poller)| poller).collect()
        };
        for poller in all {
            stop(poller).await;
        }
    }
}

async fn stop(poller: Running) {
    let _ = poller.stop.send(true);
    if tokio::time::timeout(Duration::from_secs(10), poller.task)
        .await
        .is_err()
    {
        tracing::warn!(source = %poller.config.name, "mailbox poller did not stop within 10 s");
    }
}
