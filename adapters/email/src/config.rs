//! The `[[source]]` entry of a support mailbox, as an admin writes it, and its validation.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::error::ConfigError;
use crate::oauth::OAuth2Config;
use crate::start::StartFrom;

/// How an email source signs in to its IMAP server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Auth {
    /// `LOGIN` with the password in `password_env`.
    #[default]
    Password,
    /// SASL `XOAUTH2` or `OAUTHBEARER` with an access token from `[source.oauth2]`.
    Oauth2,
}

/// One IMAP mailbox read as a source. The daemon's config wraps this in its `kind = "email"`
/// variant, so `kind` is not a field here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailSourceConfig {
    /// The source's name: the ledger's `source`, and the key of its cursor and poller lease.
    pub name: String,
    /// The tenant every event from this mailbox belongs to.
    pub tenant: String,
    /// The IMAP server's host name (also the name its TLS certificate must carry).
    pub host: String,
    /// The IMAP port; default 993 for `tls`, 143 for `starttls` and `plain` (see [`Self::port`]).
    #[serde(default)]
    pub port: Option<u16>,
    /// How the connection is protected: `tls`, `starttls` or `plain` (loopback only).
    #[serde(default)]
    pub security: Security,
    /// A PEM file of extra CA certificates to trust for `tls`/`starttls` (a private CA); the
    /// usual public roots are always trusted.
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    /// The IMAP login name (with `oauth2`: the mailbox the token is for).
    pub username: String,
    /// How the session signs in: `password` (default) or `oauth2` (SASL XOAUTH2/OAUTHBEARER).
    #[serde(default)]
    pub auth: Auth,
    /// The name of the environment variable that holds the IMAP password (`auth = "password"`).
    #[serde(default)]
    pub password_env: String,
    /// Where the access token comes from (`auth = "oauth2"`).
    #[serde(default)]
    pub oauth2: Option<Box<OAuth2Config>>,
    /// Where a mailbox seen for the first time starts: `now` (default), `beginning` or an
    /// RFC 3339 date.
    #[serde(default)]
    pub start_from: StartFrom,
    /// The mailbox to read; default `INBOX`.
    #[serde(default = "default_mailbox")]
    pub mailbox: String,
    /// How often to poll when IDLE is off or unsupported; default 30 s.
    #[serde(default = "default_poll_interval", with = "humantime_serde")]
    pub poll_interval: Duration,
    /// Wait for new mail with IDLE when the server supports it; default true.
    #[serde(default = "default_true")]
    pub idle: bool,
    /// A regex over the subject whose `id` group names the entity (a ticket number), e.g.
    /// `\[#(?P<id>\d+)\]`. Without it, or without a match, the thread root is the entity.
    #[serde(default)]
    pub ticket_ref: Option<TicketRef>,
    /// What to do with a message once it is recorded: `none`, `seen` or `move:<folder>`.
    #[serde(default)]
    pub after_intake: AfterIntake,
    /// The mailbox's own address; mail from it is ineligible. Default: `username` when it is
    /// an address.
    #[serde(default)]
    pub address: Option<String>,
}

fn default_mailbox() -> String {
    "INBOX".to_owned()
}

fn default_poll_interval() -> Duration {
    Duration::from_secs(30)
}

fn default_true() -> bool {
    true
}

impl EmailSourceConfig {
    /// The shortest poll interval accepted: polling faster only loads the server.
    pub const MIN_POLL_INTERVAL: Duration = Duration::from_millis(100);

    /// A config with every optional key at its default, as an admin's minimal entry reads.
    pub fn new(
        name: impl Into<String>,
        tenant: impl Into<String>,
        host: impl Into<String>,
        username: impl Into<String>,
        password_env: impl Into<String>,
    ) -> Self {
        EmailSourceConfig {
            name: name.into(),
            tenant: tenant.into(),
            host: host.into(),
            port: None,
            security: Security::default(),
            tls_ca_file: None,
            username: username.into(),
            auth: Auth::Password,
            password_env: password_env.into(),
            oauth2: None,
            start_from: StartFrom::default(),
            mailbox: default_mailbox(),
            poll_interval: default_poll_interval(),
            idle: true,
            ticket_ref: None,
            after_intake: AfterIntake::default(),
            address: None,
        }
    }

    /// The port to connect to: the configured one, else the usual one for `security`.
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(match self.security {
            Security::Tls => 993,
            Security::Starttls | Security::Plain => 143,
        })
    }

    /// The mailbox's own address, lower-cased: `address`, else `username` if it is an address.
    pub fn own_address(&self) -> Option<String> {
        match &self.address {
            Some(address) => Some(address.trim().to_ascii_lowercase()),
            None if self.username.contains('@') => Some(self.username.trim().to_ascii_lowercase()),
            None => None,
        }
    }

    /// Checks what serde cannot: non-empty names, `plain` only on loopback, a sane interval, an
    /// `after_intake` folder that is not the mailbox itself, and a readable `tls_ca_file`. `ticket_ref` and `after_intake`
    /// are already checked when they are deserialised (so a bad value names its line).
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, value) in [
            ("name", &self.name),
            ("tenant", &self.tenant),
            ("host", &self.host),
            ("username", &self.username),
            ("mailbox", &self.mailbox),
        ] {
            if value.trim().is_empty() {
                return Err(ConfigError::Empty(field));
            }
        }
        match (self.auth, &self.oauth2) {
            (Auth::Password, None) if self.password_env.trim().is_empty() => {
                return Err(ConfigError::Empty("password_env"));
            }
            (Auth::Password, None) => {}
            (Auth::Password, Some(_)) => return Err(ConfigError::OAuth2WithoutAuth),
            (Auth::Oauth2, None) => return Err(ConfigError::OAuth2Missing),
            (Auth::Oauth2, Some(_)) if !self.password_env.is_empty() => {
                return Err(ConfigError::PasswordWithOAuth2);
            }
            (Auth::Oauth2, Some(oauth2)) => oauth2.validate()?,
        }
        if self.port == Some(0) {
            return Err(ConfigError::ZeroPort);
        }
        if self.security == Security::Plain && !is_loopback(&self.host) {
            return Err(ConfigError::PlainNotLoopback {
                host: self.host.clone(),
            });
        }
        if self.poll_interval < Self::MIN_POLL_INTERVAL {
            return Err(ConfigError::PollIntervalTooShort(self.poll_interval));
        }
        if let AfterIntake::Move(folder) = &self.after_intake
            && folder == &self.mailbox
        {
            // Moving into the polled mailbox gives each message a new UID: an endless loop.
            return Err(ConfigError::MoveIntoSelf(folder.clone()));
        }
        if let Some(address) = &self.address
            && !address.contains('@')
        {
            return Err(ConfigError::BadAddress(address.clone()));
        }
        if let Some(path) = &self.tls_ca_file {
            crate::imap::read_ca_file(path)?;
        }
        Ok(())
    }
}

/// Loopback only: a password sent in clear text must not leave the machine.
fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// How the IMAP connection is protected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Security {
    /// TLS from the first byte (IMAPS, port 993).
    #[default]
    Tls,
    /// Plain connect, then `STARTTLS` before login (port 143).
    Starttls,
    /// No encryption; only accepted for loopback hosts (tests, local relays).
    Plain,
}

/// What the poller does to a message after the daemon recorded it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum AfterIntake {
    /// Leave it as it is.
    #[default]
    None,
    /// Set `\Seen`.
    Seen,
    /// Move it to this folder (MOVE, or COPY + `\Deleted` + EXPUNGE without the extension).
    Move(String),
}

impl FromStr for AfterIntake {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(AfterIntake::None),
            "seen" => Ok(AfterIntake::Seen),
            _ => match s.strip_prefix("move:") {
                Some(folder) if !folder.trim().is_empty() => {
                    Ok(AfterIntake::Move(folder.trim().to_owned()))
                }
                _ => Err(ConfigError::BadAfterIntake(s.to_owned())),
            },
        }
    }
}

impl TryFrom<String> for AfterIntake {
    type Error = ConfigError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl fmt::Display for AfterIntake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AfterIntake::None => f.write_str("none"),
            AfterIntake::Seen => f.write_str("seen"),
            AfterIntake::Move(folder) => write!(f, "move:{folder}"),
        }
    }
}

impl From<AfterIntake> for String {
    fn from(value: AfterIntake) -> Self {
        value.to_string()
    }
}

/// A compiled `ticket_ref` pattern, known to have an `id` group.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TicketRef(Regex);

impl TicketRef {
    /// The `id` group of the first match in `subject`, if any and non-empty.
    pub fn find<'s>(&self, subject: &'s str) -> Option<&'s str> {
        self.0
            .captures(subject)
            .and_then(|c| c.name("id"))
            .map(|m| m.as_str().trim())
            .filter(|id| !id.is_empty())
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl FromStr for TicketRef {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let regex = Regex::new(s).map_err(|source| ConfigError::BadTicketRef {
            pattern: s.to_owned(),
            source,
        })?;
        if !regex.capture_names().any(|name| name == Some("id")) {
            return Err(ConfigError::TicketRefWithoutId(s.to_owned()));
        }
        Ok(TicketRef(regex))
    }
}

impl TryFrom<String> for TicketRef {
    type Error = ConfigError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<TicketRef> for String {
    fn from(value: TicketRef) -> Self {
        value.0.as_str().to_owned()
    }
}

/// Two patterns are the same config when they are written the same (for reload diffs).
impl PartialEq for TicketRef {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn parse(json: serde_json::Value) -> Result<EmailSourceConfig, String> {
        serde_json::from_value(json).map_err(|e| e.to_string())
    }

    fn minimal() -> serde_json::Value {
        serde_json::json!({
            "name": "support-inbox", "tenant": "acme", "host": "imap.example.com",
            "username": "support@example.com", "password_env": "SUPPORT_IMAP_PASSWORD",
        })
    }

    #[test]
    fn defaults_fill_the_optional_keys() {
        let config = parse(minimal()).unwrap();
        assert_eq!(config.security, Security::Tls);
        assert_eq!(config.port(), 993);
        assert_eq!(config.mailbox, "INBOX");
        assert_eq!(config.poll_interval, Duration::from_secs(30));
        assert!(config.idle);
        assert_eq!(config.after_intake, AfterIntake::None);
        assert_eq!(config.own_address().as_deref(), Some("support@example.com"));
        assert_eq!(
            config,
            EmailSourceConfig::new(
                "support-inbox",
                "acme",
                "imap.example.com",
                "support@example.com",
                "SUPPORT_IMAP_PASSWORD"
            )
        );
        config.validate().unwrap();
    }

    #[test]
    fn the_full_example_parses() {
        let mut json = minimal();
        let extra = serde_json::json!({
            "port": 993, "security": "starttls", "mailbox": "Support", "poll_interval": "1m",
            "idle": false, "ticket_ref": r"\[#(?P<id>\d+)\]", "after_intake": "move:Done",
            "address": "Help@Example.com",
        });
        json.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let config = parse(json).unwrap();
        assert_eq!(config.poll_interval, Duration::from_secs(60));
        assert_eq!(config.after_intake, AfterIntake::Move("Done".into()));
        assert_eq!(config.own_address().as_deref(), Some("help@example.com"));
        assert_eq!(
            config.ticket_ref.as_ref().unwrap().find("Re: [#42] x"),
            Some("42")
        );
        config.validate().unwrap();
        // Serialising gives back what the admin wrote.
        let back = serde_json::to_value(&config).unwrap();
        assert_eq!(back["after_intake"], "move:Done");
        assert_eq!(back["ticket_ref"], r"\[#(?P<id>\d+)\]");
    }

    #[test]
    fn ports_default_by_security() {
        let mut config = parse(minimal()).unwrap();
        config.security = Security::Starttls;
        assert_eq!(config.port(), 143);
        config.security = Security::Plain;
        assert_eq!(config.port(), 143);
        config.port = Some(10143);
        assert_eq!(config.port(), 10143);
    }

    #[test]
    fn bad_values_are_refused_with_a_specific_error() {
        let with = |key: &str, value: serde_json::Value| {
            let mut json = minimal();
            json[key] = value;
            parse(json)
        };
        let err = with("kind", "email".into()).unwrap_err();
        assert!(err.contains("unknown field `kind`"), "{err}");
        let err = with("after_intake", "archive".into()).unwrap_err();
        assert!(err.contains("after_intake"), "{err}");
        let err = with("after_intake", "move:".into()).unwrap_err();
        assert!(err.contains("none, seen or move:<folder>"), "{err}");
        let err = with("ticket_ref", r"\[#(\d+)\]".into()).unwrap_err();
        assert!(err.contains("`id` group"), "{err}");
        let err = with("ticket_ref", r"\[#(?P<id>\d+\]".into()).unwrap_err();
        assert!(err.contains("does not compile"), "{err}");
        let err = with("security", "ssl".into()).unwrap_err();
        assert!(err.contains("unknown variant"), "{err}");
        let err = with("poll_interval", "soon".into()).unwrap_err();
        assert!(err.contains("soon") || err.contains("unit"), "{err}");
    }

    #[test]
    fn validate_keeps_plain_text_passwords_on_loopback() {
        let mut config = parse(minimal()).unwrap();
        config.security = Security::Plain;
        assert!(matches!(
            config.validate(),
            Err(ConfigError::PlainNotLoopback { .. })
        ));
        for host in [
            "127.0.0.1",
            "127.8.9.10",
            "::1",
            "[::1]",
            "localhost",
            "LOCALHOST",
        ] {
            config.host = host.into();
            config.validate().unwrap_or_else(|e| panic!("{host}: {e}"));
        }
        for host in ["128.0.0.1", "10.0.0.1", "localhost.example.com", "::2"] {
            config.host = host.into();
            assert!(config.validate().is_err(), "{host}");
        }
    }

    #[test]
    fn validate_refuses_empty_names_zero_port_self_move_and_tiny_intervals() {
        let base = parse(minimal()).unwrap();
        let mut config = base.clone();
        config.tenant = " ".into();
        assert!(matches!(
            config.validate(),
            Err(ConfigError::Empty("tenant"))
        ));
        let mut config = base.clone();
        config.port = Some(0);
        assert!(matches!(config.validate(), Err(ConfigError::ZeroPort)));
        let mut config = base.clone();
        config.after_intake = AfterIntake::Move("INBOX".into());
        assert!(matches!(
            config.validate(),
            Err(ConfigError::MoveIntoSelf(_))
        ));
        let mut config = base.clone();
        config.poll_interval = Duration::from_millis(10);
        assert!(matches!(
            config.validate(),
            Err(ConfigError::PollIntervalTooShort(_))
        ));
        let mut config = base;
        config.address = Some("support".into());
        assert!(matches!(config.validate(), Err(ConfigError::BadAddress(_))));
    }

    #[test]
    fn validate_reads_the_ca_file() {
        let mut config = parse(minimal()).unwrap();
        config.tls_ca_file = Some("/nonexistent/ca.pem".into());
        assert!(matches!(
            config.validate(),
            Err(ConfigError::CaFileUnreadable { .. })
        ));
        let not_pem = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(not_pem.path(), "not a certificate").unwrap();
        config.tls_ca_file = Some(not_pem.path().to_owned());
        assert!(matches!(
            config.validate(),
            Err(ConfigError::CaFileEmpty { .. })
        ));
    }

    #[test]
    fn own_address_is_absent_for_a_plain_login_name() {
        let mut config = parse(minimal()).unwrap();
        config.username = "support".into();
        assert_eq!(config.own_address(), None);
    }
}
