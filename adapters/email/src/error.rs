//! The crate's errors, one type per place a caller handles them differently: config is refused
//! at load ([`ConfigError`]), an unreadable message becomes `invalid_event` ([`ParseError`]),
//! the daemon's store fails ([`SinkError`]), and the IMAP session fails and is retried
//! ([`SessionError`], only ever seen through [`crate::SourceStatus::last_error`] and logs).

use std::path::PathBuf;
use std::time::Duration;

/// A `[[source]]` entry of kind `email` that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("`{0}` must not be empty")]
    Empty(&'static str),
    #[error("`port` must not be 0")]
    ZeroPort,
    #[error(
        "`security = \"plain\"` sends the password in clear text and is only allowed for a \
         loopback host (127.0.0.0/8, ::1, localhost), not `{host}`"
    )]
    PlainNotLoopback { host: String },
    #[error("`poll_interval` must be at least 100ms, got {0:?}")]
    PollIntervalTooShort(Duration),
    #[error("`after_intake` must be none, seen or move:<folder>, got `{0}`")]
    BadAfterIntake(String),
    #[error("`after_intake` moves into `{0}`, the polled mailbox itself")]
    MoveIntoSelf(String),
    #[error("`ticket_ref` `{pattern}` does not compile")]
    BadTicketRef {
        pattern: String,
        #[source]
        source: regex::Error,
    },
    #[error("`ticket_ref` `{0}` has no `id` group, e.g. `\\[#(?P<id>\\d+)\\]`")]
    TicketRefWithoutId(String),
    #[error("`address` `{0}` is not an email address")]
    BadAddress(String),
    #[error("`tls_ca_file` {path} cannot be read")]
    CaFileUnreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`tls_ca_file` {path} holds no PEM certificate")]
    CaFileEmpty { path: PathBuf },
    #[error("`[source.oauth2]` is set but `auth` is not \"oauth2\"")]
    OAuth2WithoutAuth,
    #[error("`auth = \"oauth2\"` needs a `[source.oauth2]` table")]
    OAuth2Missing,
    #[error("`password_env` is for `auth = \"password\"`; with `oauth2` remove it")]
    PasswordWithOAuth2,
    #[error("`oauth2.{key}` is required for flow `{flow}`")]
    OAuth2KeyMissing {
        flow: &'static str,
        key: &'static str,
    },
    #[error("`oauth2.{key}` does not apply to flow `{flow}`")]
    OAuth2KeyNotForFlow {
        flow: &'static str,
        key: &'static str,
    },
    #[error("`oauth2.{key}` must be an https URL (http only on loopback), got `{url}`")]
    OAuth2BadUrl { key: &'static str, url: String },
    #[error("`oauth2.{0}` must not be empty")]
    OAuth2Empty(&'static str),
    #[error("`oauth2.client_secret_env` and `oauth2.private_key_file` are alternatives; set one")]
    OAuth2SecretOrCertificate,
    #[error("`oauth2.certificate_file` and `oauth2.private_key_file` go together")]
    OAuth2CertificatePair,
    #[error("environment variable `{0}` is not set")]
    EnvMissing(String),
    #[error("{what} {path} cannot be read")]
    FileUnreadable {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} {path} is not usable: {detail}")]
    FileInvalid {
        what: &'static str,
        path: PathBuf,
        detail: String,
    },
    #[error("`start_from` must be now, beginning or an RFC 3339 date, got `{0}`")]
    BadStartFrom(String),
}

/// Why a fetched message cannot be normalised; the daemon records it as `invalid_event` (with
/// [`ParseError::detail`] as the detail) and the cursor moves past it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Zero bytes, or only whitespace.
    #[error("the message is empty")]
    Empty,
    /// mail-parser found no message in the bytes at all.
    #[error("the bytes are not an RFC 5322 message")]
    NotAMessage,
    /// No header field could be read, so the bytes are not a message but noise.
    #[error("the message has no header fields")]
    NoHeaders,
    /// Neither a sender address nor any body: nothing a workflow could act on.
    #[error("the message has neither a From address nor a body")]
    NoSenderNoBody,
}

impl ParseError {
    /// A stable snake_case word for the ledger's `detail`.
    pub fn detail(&self) -> &'static str {
        match self {
            ParseError::Empty => "empty_message",
            ParseError::NotAMessage => "not_a_message",
            ParseError::NoHeaders => "no_headers",
            ParseError::NoSenderNoBody => "no_sender_no_body",
        }
    }
}

/// A failure inside the daemon's [`crate::MailboxSink`] (usually: the store is down). The poller
/// treats it like a lost connection: it reports it, backs off and retries from the cursor.
/// A [`SinkError::paused`] one is no failure: the daemon refused to take more mail for now (a
/// ceiling), so the poller stops this poll and polls again after the pause, from the cursor.
#[derive(Debug)]
pub struct SinkError {
    error: Box<dyn std::error::Error + Send + Sync + 'static>,
    pause: Option<Duration>,
}

impl SinkError {
    /// Wraps the daemon's own error, keeping it as the source.
    pub fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> Self {
        SinkError {
            error: error.into(),
            pause: None,
        }
    }

    /// The daemon takes no more mail from this source for `pause`; not a failure.
    pub fn paused(
        error: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
        pause: Duration,
    ) -> Self {
        SinkError {
            error: error.into(),
            pause: Some(pause),
        }
    }

    /// How long the daemon asked the poller to wait, if this is a pause and not a failure.
    pub fn pause(&self) -> Option<Duration> {
        self.pause
    }
}

impl std::fmt::Display for SinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for SinkError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

/// Why one IMAP session ended early; the poller reconnects after a backoff.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("cannot connect to {addr}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS handshake with {host} failed")]
    Tls {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{host}` is not a valid TLS server name")]
    ServerName {
        host: String,
        #[source]
        source: rustls_pki_types::InvalidDnsNameError,
    },
    #[error("cannot set up TLS")]
    TlsConfig(#[source] tokio_rustls::rustls::Error),
    #[error("cannot load the CA file")]
    CaFile(#[source] ConfigError),
    #[error("the server's greeting was not OK: {0}")]
    Greeting(String),
    #[error("login as `{user}` failed")]
    Login {
        user: String,
        #[source]
        source: async_imap::error::Error,
    },
    #[error("the IMAP server refused the OAuth2 token of `{user}` ({mechanism}){}", server.as_deref().map(|s| format!(": {s}")).unwrap_or_default())]
    TokenRefused {
        user: String,
        mechanism: &'static str,
        /// The server's error challenge (JSON), if it sent one.
        server: Option<String>,
        #[source]
        source: async_imap::error::Error,
    },
    #[error("auth = \"oauth2\" needs a [source.oauth2] table")]
    NoOAuth2Table,
    #[error("cannot get an OAuth2 access token")]
    Token(#[from] crate::oauth::TokenError),
    #[error("IMAP {command} failed")]
    Imap {
        command: &'static str,
        #[source]
        source: async_imap::error::Error,
    },
    #[error("the server did not report UIDVALIDITY for `{0}`")]
    NoUidValidity(String),
    #[error("no answer to {0} within {1:?}")]
    Timeout(&'static str, Duration),
    #[error("the daemon's store failed")]
    Sink(#[from] SinkError),
    /// Shutdown was asked for; not a failure.
    #[error("shutting down")]
    Shutdown,
}

impl SessionError {
    /// With OAuth2: the stable word for a sign-in failure (see `SourceStatus::auth_failure`).
    pub fn auth_failure(&self) -> Option<&'static str> {
        match self {
            SessionError::Token(error) => Some(error.kind()),
            SessionError::TokenRefused { .. } => Some("imap_refused_token"),
            _ => None,
        }
    }

    /// The message with its causes, for `last_error` and logs (`Display` alone hides them).
    pub fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    }
}
