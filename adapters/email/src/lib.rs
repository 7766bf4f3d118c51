//! Support mailboxes over IMAP, turned into canonical [`switchyard_core::Event`]s.
//!
//! Two halves, as DESIGN.md asks: [`normalize`] is pure (raw RFC 5322 bytes in, a
//! [`switchyard_core::Normalized`] out, tested with fixture files) and [`run_poller`] is the one
//! I/O loop (tested against a real Dovecot). The poller calls `normalize` itself and hands the
//! daemon each message through the [`MailboxSink`] trait, which the daemon implements: leases,
//! cursors and the ledger stay in the daemon, and no daemon type appears here.

mod config;
mod error;
mod imap;
mod parse;
mod sink;

pub use config::{AfterIntake, EmailSourceConfig, Security, TicketRef};
pub use error::{ConfigError, ParseError, SessionError, SinkError};
pub use imap::{PollerOptions, run_poller};
pub use parse::{EVENT_RECEIVED, EVENT_REPLY, MAX_TEXT_CHARS, normalize};
pub use sink::{Cursor, FetchedMessage, MailboxSink, SourceStatus};
