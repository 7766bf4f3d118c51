//! Getting to a logged-in IMAP session: TCP, TLS or STARTTLS, the greeting, then LOGIN or a
//! SASL bearer-token AUTHENTICATE.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use std::sync::Mutex;

use async_imap::imap_proto::{Capability, Response, ResponseCode, Status};
use async_imap::{Client, Session};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

use crate::config::{EmailSourceConfig, Security};
use crate::error::{ConfigError, SessionError};
use crate::oauth::SaslMechanism;
use crate::oauth::sasl::BearerAuthenticator;

/// How a session signs in, the secret in hand.
pub(crate) enum SignIn<'a> {
    /// `LOGIN` with this password.
    Password(&'a str),
    /// `AUTHENTICATE` with this access token.
    Bearer(&'a str),
}

/// The byte stream under an IMAP session: one type for all three `security` modes, so the
/// session code is written once.
#[derive(Debug)]
pub(crate) enum Transport {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

pub(crate) type ImapSession = Session<Transport>;

impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Transport::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Transport::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_flush(cx),
            Transport::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Transport::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Connects, secures the connection as configured, reads the greeting and logs in. Every
/// network step is bounded by `timeout`.
pub(crate) async fn connect(
    config: &EmailSourceConfig,
    sign_in: SignIn<'_>,
    timeout: Duration,
) -> Result<ImapSession, SessionError> {
    let addr = format!("{}:{}", config.host, config.port());
    let tcp = bounded(timeout, "connect", TcpStream::connect(&addr))
        .await?
        .map_err(|source| SessionError::Connect {
            addr: addr.clone(),
            source,
        })?;
    // Commands are small and answered one at a time: don't let Nagle delay them.
    let _ = tcp.set_nodelay(true);

    let (client, advertised) = match config.security {
        Security::Plain => greeted(Client::new(Transport::Plain(tcp)), timeout).await?,
        Security::Tls => {
            let tls = handshake(tcp, &config.host, config.tls_ca_file.as_deref(), timeout).await?;
            greeted(Client::new(Transport::Tls(Box::new(tls))), timeout).await?
        }
        Security::Starttls => {
            let (mut client, _before_tls) = greeted(Client::new(tcp), timeout).await?;
            bounded(
                timeout,
                "STARTTLS",
                client.run_command_and_check_ok("STARTTLS", None),
            )
            .await?
            .map_err(|source| SessionError::Imap {
                command: "STARTTLS",
                source,
            })?;
            let tcp = client.into_inner();
            // No greeting after STARTTLS: the server waits for our next command.
            let tls = handshake(tcp, &config.host, config.tls_ca_file.as_deref(), timeout).await?;
            (Client::new(Transport::Tls(Box::new(tls))), None)
        }
    };

    let token = match sign_in {
        SignIn::Password(password) => {
            return bounded(timeout, "LOGIN", client.login(&config.username, password))
                .await?
                .map_err(|(source, _client)| SessionError::Login {
                    user: config.username.clone(),
                    source,
                });
        }
        SignIn::Bearer(token) => token,
    };
    let wanted = config
        .oauth2
        .as_ref()
        .map(|o| o.mechanism)
        .unwrap_or_default();
    // OAUTHBEARER where asked for and not known to be missing (a greeting without a
    // capability list says nothing); XOAUTH2 otherwise.
    let mechanism = match (wanted, &advertised) {
        (SaslMechanism::Oauthbearer, Some(caps))
            if !caps.iter().any(|c| c == "AUTH=OAUTHBEARER") =>
        {
            SaslMechanism::Xoauth2
        }
        (wanted, _) => wanted,
    };
    let server_error = Arc::new(Mutex::new(None));
    let authenticator = BearerAuthenticator {
        mechanism,
        user: config.username.clone(),
        token: token.to_owned(),
        host: config.host.clone(),
        port: config.port(),
        sent: false,
        server_error: server_error.clone(),
    };
    let name = authenticator.name();
    bounded(
        timeout,
        "AUTHENTICATE",
        client.authenticate(name, authenticator),
    )
    .await?
    .map_err(|(source, _client)| SessionError::TokenRefused {
        user: config.username.clone(),
        mechanism: name,
        server: server_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take(),
        source,
    })
}

/// async-imap 0.12 leaves the server's greeting to the caller: read it and insist on OK. Also
/// returns the capabilities the greeting lists, if it lists them.
async fn greeted<T>(
    mut client: Client<T>,
    timeout: Duration,
) -> Result<(Client<T>, Option<Vec<String>>), SessionError>
where
    T: AsyncRead + AsyncWrite + Unpin + std::fmt::Debug + Send,
{
    let greeting = bounded(timeout, "the greeting", client.read_response())
        .await?
        .map_err(|source| SessionError::Imap {
            command: "greeting",
            source: source.into(),
        })?;
    match greeting.as_ref().map(|g| g.parsed()) {
        Some(Response::Data {
            status: Status::Ok,
            outcome,
        }) => {
            let capabilities = match &outcome.code {
                Some(ResponseCode::Capabilities(caps)) => Some(
                    caps.iter()
                        .map(|c| match c {
                            Capability::Imap4rev1 => "IMAP4REV1".to_owned(),
                            Capability::Auth(mech) => format!("AUTH={}", mech.to_ascii_uppercase()),
                            Capability::Atom(atom) => atom.to_ascii_uppercase(),
                        })
                        .collect(),
                ),
                _ => None,
            };
            Ok((client, capabilities))
        }
        Some(other) => Err(SessionError::Greeting(format!("{other:?}"))),
        None => Err(SessionError::Greeting(
            "the server closed the connection".into(),
        )),
    }
}

async fn handshake(
    tcp: TcpStream,
    host: &str,
    ca_file: Option<&Path>,
    timeout: Duration,
) -> Result<TlsStream<TcpStream>, SessionError> {
    let name =
        ServerName::try_from(host.to_owned()).map_err(|source| SessionError::ServerName {
            host: host.to_owned(),
            source,
        })?;
    let connector = TlsConnector::from(tls_config(ca_file)?);
    bounded(timeout, "the TLS handshake", connector.connect(name, tcp))
        .await?
        .map_err(|source| SessionError::Tls {
            host: host.to_owned(),
            source,
        })
}

/// webpki's Mozilla roots (plus the configured CA file) with the ring provider, named
/// explicitly so that no other crate's choice of a process-wide default provider can change or
/// break it.
fn tls_config(ca_file: Option<&Path>) -> Result<Arc<ClientConfig>, SessionError> {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = ca_file {
        // Read on every connection, so a renewed CA file needs no restart.
        let (added, _ignored) =
            roots.add_parsable_certificates(read_ca_file(path).map_err(SessionError::CaFile)?);
        if added == 0 {
            return Err(SessionError::CaFile(ConfigError::CaFileEmpty {
                path: path.to_owned(),
            }));
        }
    }
    let config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(SessionError::TlsConfig)?
            .with_root_certificates(roots)
            .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The certificates of a PEM file; at least one.
pub(crate) fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let pem = std::fs::read(path).map_err(|source| ConfigError::CaFileUnreadable {
        path: path.to_owned(),
        source,
    })?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        return Err(ConfigError::CaFileEmpty {
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

/// Runs `future`, failing with [`SessionError::Timeout`] when it takes longer than `limit`: a
/// server that stops answering must not hold the poller (and its lease) forever.
pub(crate) async fn bounded<T>(
    limit: Duration,
    what: &'static str,
    future: impl Future<Output = T>,
) -> Result<T, SessionError> {
    tokio::time::timeout(limit, future)
        .await
        .map_err(|_| SessionError::Timeout(what, limit))
}
