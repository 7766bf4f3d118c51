//! Outbound delivery of runs to the systems that execute them. Knows no database and no daemon
//! type: the daemon's dispatcher claims outbox rows, builds a [`message`] and hands it to a
//! transport.
//!
//! Architecture invariant: transports know nothing of the database; adding a transport changes
//! no intake code. A transport sees one [`Outbound`] per attempt and answers one [`Attempt`];
//! when to try again is the daemon's decision, computed with [`RetrySchedule`] and stored as a
//! due time in its rows.
//!
//! Modules:
//! - [`message`]: the CloudEvents 1.0 `switchyard.run.start` message every transport sends.
//! - [`signature`]: Standard Webhooks v1 signing and verification.
//! - [`schedule`]: delays between attempts (durable retries, not in-process sleeps).
//! - [`transport`]: the object-safe [`Transport`] trait and the attempt record.
//! - [`http`]: POST to a URL, signed. [`nats`]: publish to a JetStream stream.

pub mod http;
pub mod message;
pub mod nats;
pub mod schedule;
/// Standard Webhooks v1 signing; it lives in `switchyard-core` so inbound adapters (CloudEvents)
/// verify with the same code without depending on the transports.
pub use switchyard_core::standard_webhooks as signature;
pub mod transport;

pub use http::{HttpTarget, HttpTransport};
pub use message::{PrincipalInfo, Proposal, ResumeInfo, RunData, RunInfo, RunMessage};
pub use nats::{NatsTarget, NatsTransport};
pub use schedule::{RetryHint, RetrySchedule, ScheduleError};
pub use signature::{SignatureError, SigningKey};
pub use transport::{Attempt, AttemptResult, Outbound, Rejection, Transport};

/// Why a transport could not be built. Attempt-time failures are never this type: they are
/// recorded in an [`Attempt`].
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    /// The target URL does not parse.
    #[error("invalid target URL `{url}`")]
    InvalidUrl {
        /// The URL as configured.
        url: String,
        /// Why it does not parse.
        #[source]
        source: url::ParseError,
    },
    /// The target URL is not http or https.
    #[error("target URL `{url}` has scheme `{scheme}`; only http and https are supported")]
    UnsupportedScheme {
        /// The URL as configured.
        url: String,
        /// Its scheme.
        scheme: String,
    },
    /// `max_in_flight` must be at least 1.
    #[error("max_in_flight must be at least 1")]
    ZeroInFlight,
    /// The HTTP client could not be built (the URL as a request target, TLS initialisation).
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(String),
    /// The NATS target's options were refused before any connection was tried.
    #[error("cannot set up the NATS connection to `{url}`")]
    NatsConnect {
        /// The server URL as configured.
        url: String,
        /// The client's error.
        #[source]
        source: async_nats::ConnectError,
    },
    /// The NATS subject template or stream name is unusable.
    #[error("invalid NATS target: {0}")]
    InvalidNatsTarget(String),
}
