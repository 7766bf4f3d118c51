//! What the poller tests share: finding the Dovecot from `.ci/dovecot.sh`, an IMAP client for
//! the test's own side of the mailbox, and an in-memory sink that behaves like the daemon's
//! (shared store with cursors, Message-ID dedup and a lease table) and records what it saw.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_imap::Session;
use switchyard_core::Disposition;
use switchyard_email::{
    Credentials, Cursor, EmailSourceConfig, FetchedMessage, MailboxSink, PollerOptions, Security,
    SinkError, SourceStatus, StartFrom, StartPoint, TokenStore, run_poller,
};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

// The one Dovecot every email test uses (the daemon's end-to-end tests too): `exclusive` to
// stop or restart it, `shared` otherwise.
#[path = "../../../../tests/support/dovecot.rs"]
mod shared_dovecot;
pub use shared_dovecot::{StartOnDrop, dovecot, exclusive, shared};

pub const PASSWORD: &str = "secret";
pub const USER: &str = "support@example.com";

/// The Dovecot address, or `None` (after saying so) when the tests should skip.
pub fn server() -> Option<(String, u16)> {
    let Ok(addr) = std::env::var("SWITCHYARD_TEST_IMAP") else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("SWITCHYARD_TEST_IMAP is not set; CI must start .ci/dovecot.sh");
        }
        eprintln!(
            "SKIPPED: SWITCHYARD_TEST_IMAP is not set. Run (as root) \
             `export $(.ci/dovecot.sh start | grep ^SWITCHYARD_)` first"
        );
        return None;
    };
    let (host, port) = addr
        .rsplit_once(':')
        .expect("SWITCHYARD_TEST_IMAP is host:port");
    Some((host.to_owned(), port.parse().expect("a port number")))
}

/// The IMAPS address and the test CA, or `None` (after saying so) when not exported.
pub fn tls_server() -> Option<((String, u16), std::path::PathBuf)> {
    let (Ok(addr), Ok(ca)) = (
        std::env::var("SWITCHYARD_TEST_IMAPS"),
        std::env::var("SWITCHYARD_TEST_IMAP_CA"),
    ) else {
        eprintln!(
            "SKIPPED: SWITCHYARD_TEST_IMAPS / SWITCHYARD_TEST_IMAP_CA are not set; export all \
             three lines `.ci/dovecot.sh start` prints to test TLS and STARTTLS"
        );
        return None;
    };
    let (host, port) = addr
        .rsplit_once(':')
        .expect("SWITCHYARD_TEST_IMAPS is host:port");
    Some((
        (host.to_owned(), port.parse().expect("a port number")),
        ca.into(),
    ))
}

/// A poller config for `mailbox` on the test server, with short intervals.
pub fn config(server: &(String, u16), name: &str, mailbox: &str) -> EmailSourceConfig {
    let mut config = EmailSourceConfig::new(name, "acme", &server.0, USER, "UNUSED_IN_TESTS");
    config.port = Some(server.1);
    config.security = Security::Plain;
    config.mailbox = mailbox.to_owned();
    config.poll_interval = Duration::from_millis(200);
    // These tests append before the poller's first connection and expect it all.
    config.start_from = StartFrom::Beginning;
    config.validate().unwrap();
    config
}

pub fn options() -> PollerOptions {
    PollerOptions {
        backoff_initial: Duration::from_millis(100),
        backoff_max: Duration::from_millis(400),
        lease_renew_interval: Duration::from_millis(300),
        idle_timeout: Duration::from_secs(2),
        io_timeout: Duration::from_secs(5),
        fetch_batch: 2,
        error_after_failures: 3,
        use_move: true,
    }
}

/// A running poller and the means to stop it.
pub struct Running {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

pub fn start(
    config: EmailSourceConfig,
    password: &str,
    sink: &Arc<TestSink>,
    options: PollerOptions,
) -> Running {
    let (stop, shutdown) = watch::channel(false);
    let task = tokio::spawn(run_poller(
        config,
        Credentials::Password(password.to_owned()),
        sink.clone(),
        options,
        shutdown,
    ));
    Running { stop, task }
}

impl Running {
    /// Asks for shutdown and insists that the poller ends promptly.
    pub async fn stop(self) {
        self.stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the poller ends soon after shutdown")
            .expect("the poller does not panic");
    }
}

/// Polls `condition` until it holds, failing the test with `what` after `limit`.
pub async fn wait_until(what: &str, limit: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The test's own IMAP client.

pub type Client = Session<TcpStream>;

pub async fn client(server: &(String, u16)) -> Client {
    let tcp = TcpStream::connect((server.0.as_str(), server.1))
        .await
        .unwrap();
    let mut client = async_imap::Client::new(tcp);
    client.read_response().await.unwrap().unwrap();
    client.login(USER, PASSWORD).await.map_err(|e| e.0).unwrap()
}

/// Deletes `mailbox` if it exists and creates it anew (a new UIDVALIDITY). Dovecot can refuse
/// a DELETE while a session of an earlier test still has the mailbox selected (seen once in
/// `.ci/run`: the CREATE after it answered ALREADYEXISTS), so a refused pair is tried again.
pub async fn recreate(client: &mut Client, mailbox: &str) {
    for _ in 0..20 {
        let _ = client.delete(mailbox).await;
        if client.create(mailbox).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    client.create(mailbox).await.unwrap();
}

pub async fn append(client: &mut Client, mailbox: &str, raw: &[u8]) {
    client.append(mailbox, None, None, raw).await.unwrap();
}

/// `(uid, flags)` of every message in `mailbox`.
pub async fn messages(client: &mut Client, mailbox: &str) -> Vec<(u32, Vec<String>)> {
    use futures::TryStreamExt;
    let mailbox = client.examine(mailbox).await.unwrap();
    if mailbox.exists == 0 {
        return Vec::new();
    }
    let fetches: Vec<_> = client
        .uid_fetch("1:*", "(UID FLAGS)")
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    // Every answer to UID FETCH carries the UID. A FETCH without one is an unsolicited flag
    // update caused by another session (the poller under test), not one of the answers.
    let mut out: Vec<_> = fetches
        .iter()
        .filter_map(|f| {
            let flags = f.flags().map(|flag| format!("{flag:?}")).collect();
            Some((f.uid?, flags))
        })
        .collect();
    out.sort();
    out
}

/// A well-formed message; `n` makes its Message-ID `<{tag}-{n}@test.example>`.
pub fn message(tag: &str, n: u32) -> Vec<u8> {
    format!(
        "From: Customer {n} <customer{n}@customer.example>\r\n\
         To: support@example.com\r\n\
         Subject: {tag} message {n}\r\n\
         Date: Tue, 10 Nov 2026 09:15:00 +0100\r\n\
         Message-ID: <{tag}-{n}@test.example>\r\n\
         Content-Type: text/plain; charset=utf-8\r\n\
         \r\n\
         Body of {tag} message {n}.\r\n"
    )
    .into_bytes()
}

// ---------------------------------------------------------------------------------------------
// The sink.

/// What several replicas share: their database, in memory.
#[derive(Debug, Default)]
pub struct Store {
    pub state: Mutex<State>,
}

#[derive(Debug, Default)]
pub struct State {
    cursors: HashMap<(String, String), Cursor>,
    seen: HashSet<(String, String)>,
    /// Deliveries recorded as new work, in order.
    pub delivered: Vec<Delivery>,
    /// Deliveries whose Message-ID was already recorded.
    pub duplicates: Vec<Delivery>,
    lease: Option<(String, Instant)>,
    pub starts: HashMap<(String, String), StartPoint>,
    refresh_tokens: HashMap<String, (String, String)>,
}

/// One `deliver` call as the test sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub owner: String,
    pub uidvalidity: u32,
    pub uid: u32,
    pub delivery_id: String,
    /// `route`, `ineligible:<detail>` or `invalid:<detail>`.
    pub outcome: String,
    pub subject: Option<String>,
}

/// One replica's sink over a shared [`Store`].
#[derive(Debug)]
pub struct TestSink {
    pub store: Arc<Store>,
    owner: String,
    lease_ttl: Duration,
    raw_ids: AtomicU32,
    /// Fail this many `deliver` calls (store down), then succeed again.
    pub fail_deliveries: AtomicU32,
    /// While true, `deliver` waits (to observe the mailbox mid-delivery).
    pub hold: watch::Sender<bool>,
    /// How many `deliver` calls have started.
    pub entered: AtomicU32,
    /// Every status reported, in order.
    pub statuses: Mutex<Vec<SourceStatus>>,
}

impl TestSink {
    pub fn new() -> Arc<Self> {
        Self::replica(Arc::new(Store::default()), "replica-a")
    }

    pub fn replica(store: Arc<Store>, owner: &str) -> Arc<Self> {
        Arc::new(TestSink {
            store,
            owner: owner.to_owned(),
            lease_ttl: Duration::from_millis(1000),
            raw_ids: AtomicU32::new(0),
            fail_deliveries: AtomicU32::new(0),
            hold: watch::channel(false).0,
            entered: AtomicU32::new(0),
            statuses: Mutex::new(Vec::new()),
        })
    }

    pub fn delivered(&self) -> Vec<Delivery> {
        self.store.state.lock().unwrap().delivered.clone()
    }

    pub fn duplicates(&self) -> Vec<Delivery> {
        self.store.state.lock().unwrap().duplicates.clone()
    }

    pub fn status(&self) -> SourceStatus {
        self.statuses
            .lock()
            .unwrap()
            .last()
            .cloned()
            .unwrap_or_default()
    }

    pub fn any_status(&self, check: impl Fn(&SourceStatus) -> bool) -> bool {
        self.statuses.lock().unwrap().iter().any(check)
    }
}

impl MailboxSink for TestSink {
    async fn acquire_lease(&self, _source: &str) -> Result<bool, SinkError> {
        let mut state = self.store.state.lock().unwrap();
        let now = Instant::now();
        let free = match &state.lease {
            None => true,
            Some((owner, expires)) => owner == &self.owner || *expires <= now,
        };
        if free {
            state.lease = Some((self.owner.clone(), now + self.lease_ttl));
        }
        Ok(free)
    }

    async fn release_lease(&self, _source: &str) -> Result<(), SinkError> {
        let mut state = self.store.state.lock().unwrap();
        if state.lease.as_ref().is_some_and(|(o, _)| o == &self.owner) {
            state.lease = None;
        }
        Ok(())
    }

    async fn cursor(&self, source: &str, mailbox: &str) -> Result<Option<Cursor>, SinkError> {
        let state = self.store.state.lock().unwrap();
        Ok(state
            .cursors
            .get(&(source.to_owned(), mailbox.to_owned()))
            .copied())
    }

    fn new_raw_ref(&self) -> String {
        format!("raw:{}", self.raw_ids.fetch_add(1, Ordering::SeqCst))
    }

    async fn deliver(
        &self,
        source: &str,
        mailbox: &str,
        message: FetchedMessage,
    ) -> Result<(), SinkError> {
        self.entered.fetch_add(1, Ordering::SeqCst);
        let mut hold = self.hold.subscribe();
        hold.wait_for(|held| !*held).await.unwrap();
        let failing = self
            .fail_deliveries
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            return Err(SinkError::new("the test store is down"));
        }
        let (delivery_id, outcome, subject) = match &message.normalized {
            Ok(n) => {
                let (outcome, event) = match &n.disposition {
                    Disposition::Route(e) => ("route".to_owned(), Some(e)),
                    Disposition::Ineligible { detail, event } => {
                        (format!("ineligible:{detail}"), event.as_ref())
                    }
                };
                if let Some(event) = event {
                    assert_eq!(
                        event.raw_ref, message.raw_ref,
                        "the event points at its raw"
                    );
                }
                let subject = event.and_then(|e| e.payload["subject"].as_str().map(str::to_owned));
                (n.delivery_id.clone(), outcome, subject)
            }
            Err(error) => (
                format!("{}:{}", message.uidvalidity, message.uid),
                format!("invalid:{}", error.detail()),
                None,
            ),
        };
        let delivery = Delivery {
            owner: self.owner.clone(),
            uidvalidity: message.uidvalidity,
            uid: message.uid,
            delivery_id: delivery_id.clone(),
            outcome,
            subject,
        };
        // One "transaction": the ledger row (or the duplicate) and the cursor together.
        let mut state = self.store.state.lock().unwrap();
        if state.seen.insert((source.to_owned(), delivery_id)) {
            state.delivered.push(delivery);
        } else {
            state.duplicates.push(delivery);
        }
        state.cursors.insert(
            (source.to_owned(), mailbox.to_owned()),
            Cursor {
                uidvalidity: message.uidvalidity,
                last_uid: message.uid,
            },
        );
        Ok(())
    }

    async fn start_mailbox(
        &self,
        source: &str,
        mailbox: &str,
        start: &StartPoint,
    ) -> Result<bool, SinkError> {
        let mut state = self.store.state.lock().unwrap();
        let key = (source.to_owned(), mailbox.to_owned());
        if state.cursors.contains_key(&key) {
            return Ok(false);
        }
        state.cursors.insert(
            key.clone(),
            Cursor {
                uidvalidity: start.uidvalidity,
                last_uid: start.first_uid.saturating_sub(1),
            },
        );
        state.starts.insert(key, start.clone());
        Ok(true)
    }

    async fn mailbox_start(
        &self,
        source: &str,
        mailbox: &str,
    ) -> Result<Option<StartPoint>, SinkError> {
        let state = self.store.state.lock().unwrap();
        Ok(state
            .starts
            .get(&(source.to_owned(), mailbox.to_owned()))
            .cloned())
    }

    async fn skip_to(
        &self,
        source: &str,
        mailbox: &str,
        uidvalidity: u32,
        last_uid: u32,
    ) -> Result<(), SinkError> {
        let mut state = self.store.state.lock().unwrap();
        if let Some(cursor) = state
            .cursors
            .get_mut(&(source.to_owned(), mailbox.to_owned()))
            && cursor.uidvalidity == uidvalidity
            && cursor.last_uid < last_uid
        {
            cursor.last_uid = last_uid;
        }
        Ok(())
    }

    fn report(&self, _source: &str, status: &SourceStatus) {
        self.statuses.lock().unwrap().push(status.clone());
    }
}

impl TokenStore for TestSink {
    async fn stored_refresh_token(
        &self,
        source: &str,
        seed_fingerprint: &str,
    ) -> Result<Option<String>, SinkError> {
        let state = self.store.state.lock().unwrap();
        Ok(state
            .refresh_tokens
            .get(source)
            .filter(|(seed, _)| seed == seed_fingerprint)
            .map(|(_, token)| token.clone()))
    }

    async fn store_refresh_token(
        &self,
        source: &str,
        seed_fingerprint: &str,
        refresh_token: &str,
    ) -> Result<(), SinkError> {
        let mut state = self.store.state.lock().unwrap();
        state.refresh_tokens.insert(
            source.to_owned(),
            (seed_fingerprint.to_owned(), refresh_token.to_owned()),
        );
        Ok(())
    }
}
