//! Support mailboxes over IMAP, turned into canonical [`switchyard_core::Event`]s.
//!
//! Two halves, as DESIGN.md asks: [`normalize`] is pure (raw RFC 5322 bytes in, a
//! [`switchyard_core::Normalized`] out, tested with fixture files) and [`run_poller`] is the one
//! I/O loop (tested against a real Dovecot). The poller calls `normalize` itself and hands the
//! daemon each message through the [`MailboxSink`] trait, which the daemon implements: leases,
//! cursors, raw storage and the ledger stay in the daemon, and no daemon type appears here.
//!
//! Behaviour worth knowing:
//! - A source without a cursor starts where `start_from` says: `now` (default, the cursor is
//!   put at `UIDNEXT`, mail already there is left behind and counted), `beginning` (UID 1) or
//!   a date (the messages received since then). The start is recorded through the sink.
//! - `auth = "oauth2"` signs in with SASL XOAUTH2/OAUTHBEARER; the token is fetched (by the
//!   lease holder only) before the login and the session is renewed before the token expires.
//! - Every message the cursor passes is delivered exactly once to the sink, in UID order,
//!   whatever its disposition: routed, ineligible, or unparseable ([`ParseError`]).
//! - `after_intake` runs only for messages whose `deliver` returned `Ok`. If it fails, they
//!   stay where they are; the failure is reported, and they are not delivered again.
//!
//! Tests: `.ci/dovecot.sh start` (as root) runs a throwaway Dovecot and prints the environment
//! the poller tests read; without `SWITCHYARD_TEST_IMAP` they are skipped (failed under
//! `CI=true`):
//! `export $(.ci/dovecot.sh start | grep ^SWITCHYARD_) && cargo test -p switchyard-email`.

mod config;
mod error;
mod imap;
mod oauth;
mod parse;
mod sink;
mod start;

pub use config::{AfterIntake, Auth, EmailSourceConfig, Security, TicketRef};
pub use error::{ConfigError, ParseError, SessionError, SinkError};
pub use imap::{MailboxProbe, ProbeError, probe};
pub use imap::{PollerOptions, run_poller};
pub use oauth::{
    Credentials, OAuth2Config, OAuth2Flow, OAuthSecrets, SaslMechanism, ServiceAccount, TokenError,
};
pub use parse::{EVENT_RECEIVED, EVENT_REPLY, MAX_TEXT_CHARS, normalize};
pub use sink::{Cursor, FetchedMessage, MailboxSink, SourceStatus, TokenStore};
pub use start::{StartFrom, StartPoint};
