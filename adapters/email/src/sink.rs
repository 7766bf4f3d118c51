//! The seam between the poller and the daemon: what the daemon implements ([`MailboxSink`])
//! and what flows through it. No daemon type appears here.

use std::future::Future;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use switchyard_core::Normalized;

use crate::error::{ParseError, SinkError};
use crate::start::StartPoint;

/// How far a mailbox has been read: every UID up to `last_uid` under `uidvalidity` is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Cursor {
    pub uidvalidity: u32,
    pub last_uid: u32,
}

/// One message the poller fetched, in the order of its UID, already normalised.
#[derive(Debug, Clone, PartialEq)]
pub struct FetchedMessage {
    /// The mailbox's UIDVALIDITY when the message was fetched.
    pub uidvalidity: u32,
    /// The message's UID; the cursor moves to `(uidvalidity, uid)` with this delivery.
    pub uid: u32,
    /// The message exactly as the server returned it (`BODY.PEEK[]`): store it under `raw_ref`.
    pub raw: Vec<u8>,
    /// The id from [`MailboxSink::new_raw_ref`]; the event's `raw_ref` already carries it.
    pub raw_ref: String,
    /// [`crate::normalize`]'s answer: route it, record it as `ineligible`, or record it as
    /// `invalid_event` (with [`ParseError::detail`]). Every case moves the cursor.
    pub normalized: Result<Normalized, ParseError>,
}

/// The poller's health, reported to the daemon after every success and every failure.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceStatus {
    /// Logged in with the mailbox selected.
    pub connected: bool,
    /// This replica holds the poller lease (a replica without it waits, and is healthy).
    pub holds_lease: bool,
    /// Waiting for new mail with IDLE (false: polling every `poll_interval`).
    pub idle: bool,
    /// When a poll (search, fetch and delivery of everything new) last completed.
    pub last_successful_poll: Option<DateTime<Utc>>,
    /// The most recent failure with its causes; kept after recovery, for the operator.
    pub last_error: Option<String>,
    /// When `last_error` happened.
    pub last_error_at: Option<DateTime<Utc>>,
    /// Failures since the last successful poll; 0 means healthy.
    pub consecutive_failures: u32,
    /// With `auth = "oauth2"`, why signing in fails now, as a stable word
    /// (`token_endpoint_unreachable`, `token_endpoint_timeout`, `invalid_client`,
    /// `invalid_grant`, `consent_missing`, `token_endpoint_error`, `imap_refused_token`);
    /// `None` once a sign-in succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_failure: Option<String>,
    /// Where the mailbox started being read (`start_from`) and how much it left behind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<StartPoint>,
}

/// Where rotated OAuth2 refresh tokens are kept (the daemon's store); the poller and
/// [`crate::probe`] both use it, so a rotation during a test sign-in is not lost.
pub trait TokenStore: Send + Sync {
    /// The newest refresh token of `source` that grew from the configured one with
    /// `seed_fingerprint`, if one was stored (rotation). A sink without storage answers `None`.
    fn stored_refresh_token(
        &self,
        source: &str,
        seed_fingerprint: &str,
    ) -> impl Future<Output = Result<Option<String>, SinkError>> + Send;

    /// Keeps a rotated refresh token durably (a restart and another replica use it).
    fn store_refresh_token(
        &self,
        source: &str,
        seed_fingerprint: &str,
        refresh_token: &str,
    ) -> impl Future<Output = Result<(), SinkError>> + Send;
}

/// What the daemon provides to one email poller. Calls for one source never overlap: the poller
/// makes them one at a time, `deliver` in ascending UID order.
pub trait MailboxSink: TokenStore + 'static {
    /// Takes or renews the poller lease of `source` (database-backed; another replica may hold
    /// it). Returns whether this replica holds it now. Called before connecting and at least
    /// every [`crate::PollerOptions::lease_renew_interval`], which must be a third of the
    /// lease's TTL or less.
    fn acquire_lease(&self, source: &str) -> impl Future<Output = Result<bool, SinkError>> + Send;

    /// Gives the lease up (on shutdown), so another replica can take over at once.
    fn release_lease(&self, source: &str) -> impl Future<Output = Result<(), SinkError>> + Send;

    /// The stored cursor of `(source, mailbox)`, if any.
    fn cursor(
        &self,
        source: &str,
        mailbox: &str,
    ) -> impl Future<Output = Result<Option<Cursor>, SinkError>> + Send;

    /// A fresh id for the raw bytes of the next message (e.g. `raw:<uuid v7>`); the poller puts
    /// it in the event before calling [`MailboxSink::deliver`], which stores the bytes under it.
    fn new_raw_ref(&self) -> String;

    /// Records one message and advances the cursor to `(message.uidvalidity, message.uid)` in
    /// ONE transaction: the raw bytes, the ledger row (routed, ineligible, invalid_event or
    /// duplicate) and the cursor commit together or not at all. A Message-ID seen before
    /// (`delivery_id`) is a `duplicate` and creates nothing, but still moves the cursor.
    /// An error stops the poll; the message is fetched and delivered again later.
    fn deliver(
        &self,
        source: &str,
        mailbox: &str,
        message: FetchedMessage,
    ) -> impl Future<Output = Result<(), SinkError>> + Send;

    /// Sets the cursor of a mailbox seen for the first time to `(start.uidvalidity,
    /// start.first_uid - 1)` and records `start`, together; false (and nothing changed) when
    /// the mailbox has a cursor already (another replica started it).
    fn start_mailbox(
        &self,
        source: &str,
        mailbox: &str,
        start: &StartPoint,
    ) -> impl Future<Output = Result<bool, SinkError>> + Send;

    /// Where the mailbox started, as [`MailboxSink::start_mailbox`] recorded it.
    fn mailbox_start(
        &self,
        source: &str,
        mailbox: &str,
    ) -> impl Future<Output = Result<Option<StartPoint>, SinkError>> + Send;

    /// Moves the cursor forward to `(uidvalidity, last_uid)` without a delivery (past the
    /// messages a dated start left behind); never backwards, never across a UIDVALIDITY.
    fn skip_to(
        &self,
        source: &str,
        mailbox: &str,
        uidvalidity: u32,
        last_uid: u32,
    ) -> impl Future<Output = Result<(), SinkError>> + Send;

    /// The poller's latest status; called often, keep it cheap (no I/O).
    fn report(&self, source: &str, status: &SourceStatus);
}
