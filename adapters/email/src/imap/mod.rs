//! The one I/O module: the IMAP poller of one mailbox. It holds the poller lease, keeps a
//! session open, hands every new message to the daemon's [`MailboxSink`] in UID order and
//! survives every failure with a capped exponential backoff; it ends only on shutdown.
//!
//! One cycle: renew the lease, read the cursor, `UID SEARCH UID n:*` (filtered client-side:
//! `n:*` always matches the highest message), fetch the new UIDs with `BODY.PEEK[]` in batches,
//! normalise and deliver each in ascending order, then apply `after_intake` to what was
//! delivered. Then wait: IDLE (a wake-up only, re-issued at least every `idle_timeout`) or
//! sleep until `poll_interval` has passed, waking earlier to renew the lease.

mod probe;
mod session;
mod sign_in;
mod start;
mod transport;

pub use probe::{MailboxProbe, ProbeError, probe};
pub(crate) use transport::read_ca_file;

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::watch;
use tracing::{debug, error, info, warn};

use crate::config::EmailSourceConfig;
use crate::error::SessionError;
use crate::oauth::{Credentials, Tokens};
use crate::sink::{MailboxSink, SourceStatus};

/// Tuning of the poller that admins do not write in `[[source]]`: the daemon derives it (the
/// lease renewal from its lease TTL) and tests shorten it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollerOptions {
    /// The first wait after a failure; it doubles with each consecutive failure.
    pub backoff_initial: Duration,
    /// The longest wait between reconnection attempts.
    pub backoff_max: Duration,
    /// How often the lease is renewed (and, without it, re-tried). At most a third of the
    /// daemon's lease TTL, so that one slow renewal does not lose it.
    pub lease_renew_interval: Duration,
    /// The longest single IDLE before it is ended and re-issued (NATs drop silent connections;
    /// RFC 9051 allows 29 minutes, 5 is kinder to middleboxes).
    pub idle_timeout: Duration,
    /// The longest any one IMAP exchange may take (connect, login, one fetch batch, ...).
    pub io_timeout: Duration,
    /// How many messages one `UID FETCH` asks for; they are held in memory together, so this
    /// times the largest message is the poller's peak memory.
    pub fetch_batch: usize,
    /// From this many consecutive failures on, each failure is logged at ERROR, not WARN.
    pub error_after_failures: u32,
    /// Use `UID MOVE` when the server has MOVE; false forces COPY + `\Deleted` + EXPUNGE.
    pub use_move: bool,
}

impl Default for PollerOptions {
    fn default() -> Self {
        PollerOptions {
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            lease_renew_interval: Duration::from_secs(20),
            idle_timeout: Duration::from_secs(5 * 60),
            io_timeout: Duration::from_secs(60),
            fetch_batch: 10,
            error_after_failures: 5,
            use_move: true,
        }
    }
}

/// Polls `config`'s mailbox until `shutdown` turns true (or its sender is dropped), delivering
/// every new message to `sink`. Never returns early and never panics on server or message
/// input: failures are reported through [`MailboxSink::report`], logged and retried. On
/// shutdown it logs out and releases the lease.
///
/// `credentials` are the resolved secrets (the value of `config.password_env`, or the
/// `[source.oauth2]` secrets). The config should have passed [`EmailSourceConfig::validate`].
pub async fn run_poller<S: MailboxSink>(
    config: EmailSourceConfig,
    credentials: Credentials,
    sink: Arc<S>,
    options: PollerOptions,
    shutdown: watch::Receiver<bool>,
) {
    let tokens = match (&credentials, &config.oauth2) {
        (Credentials::OAuth2(secrets), Some(oauth2)) => Some(Tokens::new(
            (**oauth2).clone(),
            (**secrets).clone(),
            config.username.clone(),
        )),
        _ => None,
    };
    let mut poller = Poller {
        backoff: options.backoff_initial,
        config,
        credentials,
        tokens,
        token_renew_at: None,
        start_filter: None,
        start_known: false,
        sink,
        options,
        shutdown,
        status: SourceStatus::default(),
    };
    poller.run().await;
}

/// One poller's state; the session half of its methods is in `session.rs`, signing in in
/// `sign_in.rs`, the first start of a mailbox in `start.rs`.
struct Poller<S> {
    config: EmailSourceConfig,
    credentials: Credentials,
    /// With `auth = "oauth2"`: the token source.
    tokens: Option<Tokens>,
    /// When the session's token must be replaced: the session ends then and signs in anew.
    token_renew_at: Option<tokio::time::Instant>,
    /// A dated start in progress: the UIDs it names, and the `UIDNEXT` when it was decided.
    start_filter: Option<start::StartFilter>,
    /// Whether `status.started` has been read from the sink.
    start_known: bool,
    sink: Arc<S>,
    options: PollerOptions,
    shutdown: watch::Receiver<bool>,
    status: SourceStatus,
    backoff: Duration,
}

/// How a session that did not fail ended.
enum SessionEnd {
    /// Another replica holds the lease now.
    LeaseLost,
    /// The access token is about to expire: sign in again with a new one, at once.
    TokenRenewal,
}

impl<S: MailboxSink> Poller<S> {
    async fn run(&mut self) {
        info!(source = %self.config.name, host = %self.config.host, mailbox = %self.config.mailbox,
            "email poller starting");
        while !is_shut_down(&self.shutdown) {
            let acquired = guarded(
                &mut self.shutdown,
                self.options.io_timeout,
                "acquire_lease",
                self.sink.acquire_lease(&self.config.name),
            )
            .await;
            let result = match acquired {
                Err(error) => Err(error),
                Ok(Err(error)) => Err(error.into()),
                Ok(Ok(false)) => {
                    self.standby().await;
                    continue;
                }
                Ok(Ok(true)) => {
                    self.status.holds_lease = true;
                    self.session().await
                }
            };
            self.status.connected = false;
            self.status.idle = false;
            match result {
                Err(SessionError::Shutdown) => break,
                Ok(SessionEnd::TokenRenewal) => {
                    debug!(source = %self.config.name,
                        "the access token is about to expire; signing in again with a new one");
                }
                Ok(SessionEnd::LeaseLost) => {
                    info!(source = %self.config.name,
                        "lost the poller lease to another replica; disconnected");
                    self.status.holds_lease = false;
                    self.report();
                }
                Err(SessionError::Sink(paused)) if paused.pause().is_some() => {
                    // A ceiling, not a failure: the mail waits in the mailbox (the cursor did
                    // not move past it) until the pause is over.
                    let wait = paused
                        .pause()
                        .unwrap_or(self.options.backoff_initial)
                        .clamp(Duration::from_millis(100), self.options.backoff_max);
                    info!(source = %self.config.name, reason = %paused, retry_in = ?wait,
                        "stopped taking mail for this poll");
                    if sleep_or_shutdown(&mut self.shutdown, wait).await.is_err() {
                        break;
                    }
                }
                Err(error) => {
                    self.failed(&error);
                    let wait = self.backoff;
                    self.backoff = (self.backoff * 2).min(self.options.backoff_max);
                    if sleep_or_shutdown(&mut self.shutdown, wait).await.is_err() {
                        break;
                    }
                }
            }
        }
        self.stop().await;
    }

    /// Another replica polls: wait, then try for the lease again. Not a failure.
    async fn standby(&mut self) {
        if self.status.holds_lease || self.status.connected {
            info!(source = %self.config.name, "another replica holds the poller lease; standing by");
        }
        self.status.holds_lease = false;
        self.status.connected = false;
        self.status.idle = false;
        self.report();
        let _ = sleep_or_shutdown(&mut self.shutdown, self.options.lease_renew_interval).await;
    }

    /// Gives the lease back so that another replica can take over without waiting for expiry.
    async fn stop(&mut self) {
        if self.status.holds_lease {
            let released = transport::bounded(self.options.io_timeout, "release_lease", async {
                self.sink.release_lease(&self.config.name).await
            })
            .await;
            match released {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    warn!(source = %self.config.name, %error, "could not release the poller lease")
                }
                Err(error) => {
                    warn!(source = %self.config.name, %error, "could not release the poller lease")
                }
            }
        }
        self.status.holds_lease = false;
        self.status.connected = false;
        self.status.idle = false;
        self.report();
        info!(source = %self.config.name, "email poller stopped");
    }

    /// A poll completed: the source is healthy again.
    fn succeeded(&mut self) {
        if self.status.consecutive_failures > 0 {
            info!(source = %self.config.name, failures = self.status.consecutive_failures,
                "email poller recovered");
        }
        self.status.consecutive_failures = 0;
        self.status.last_successful_poll = Some(Utc::now());
        self.backoff = self.options.backoff_initial;
        self.report();
    }

    fn failed(&mut self, error: &SessionError) {
        self.status.consecutive_failures = self.status.consecutive_failures.saturating_add(1);
        let detail = error.chain();
        let failures = self.status.consecutive_failures;
        let auth_failure = error.auth_failure().map(str::to_owned);
        let repeated = auth_failure.is_some() && auth_failure == self.status.auth_failure;
        self.status.auth_failure = auth_failure;
        if repeated {
            // A sign-in failure is logged when it starts or changes, not on every retry.
            debug!(source = %self.config.name, failures, error = %detail,
                retry_in = ?self.backoff, "email poller still cannot sign in");
        } else if let Some(kind) = &self.status.auth_failure {
            error!(source = %self.config.name, failures, auth_failure = %kind, error = %detail,
                retry_in = ?self.backoff, "email poller cannot sign in with OAuth2");
        } else if failures >= self.options.error_after_failures {
            error!(source = %self.config.name, failures, error = %detail,
                retry_in = ?self.backoff, "email poller keeps failing; check the server and credentials");
        } else {
            warn!(source = %self.config.name, failures, error = %detail,
                retry_in = ?self.backoff, "email poller failed; retrying");
        }
        self.status.last_error = Some(detail);
        self.status.last_error_at = Some(Utc::now());
        self.report();
    }

    fn report(&self) {
        debug!(source = %self.config.name, status = ?self.status, "email poller status");
        self.sink.report(&self.config.name, &self.status);
    }
}

/// Whether shutdown was asked for; a dropped sender counts, or nothing could ever stop us.
fn is_shut_down(shutdown: &watch::Receiver<bool>) -> bool {
    *shutdown.borrow() || shutdown.has_changed().is_err()
}

async fn shutdown_signalled(shutdown: &mut watch::Receiver<bool>) {
    // An error means the sender is gone: shut down as well.
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// Sleeps for `duration`; `Err(Shutdown)` if shutdown came first.
async fn sleep_or_shutdown(
    shutdown: &mut watch::Receiver<bool>,
    duration: Duration,
) -> Result<(), SessionError> {
    tokio::select! {
        biased;
        _ = shutdown_signalled(shutdown) => Err(SessionError::Shutdown),
        _ = tokio::time::sleep(duration) => Ok(()),
    }
}

/// Runs one network exchange bounded by `limit`, abandoning it on shutdown. Not used around
/// `deliver`: a delivery is left to finish so that its transaction commits or rolls back whole.
async fn guarded<T>(
    shutdown: &mut watch::Receiver<bool>,
    limit: Duration,
    what: &'static str,
    future: impl Future<Output = T>,
) -> Result<T, SessionError> {
    tokio::select! {
        biased;
        _ = shutdown_signalled(shutdown) => Err(SessionError::Shutdown),
        result = transport::bounded(limit, what, future) => result,
    }
}
