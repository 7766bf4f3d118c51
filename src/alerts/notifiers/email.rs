//! The email notifier: a plain-text mail over SMTP through lettre, with STARTTLS required or
//! implicit TLS (rustls; the webpki roots plus an optional CA of the admin's), authenticated
//! by a user and password named by environment variables. Unencrypted only to a loopback
//! relay (the config refuses anything else).

use std::time::Duration;

use lettre::message::Mailbox;
use lettre::message::header::ContentType;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message as Mail, Tokio1Executor};

use super::message::Message;
use crate::config::SmtpTls;
use crate::config::notifiers::EmailNotifierConfig;

/// The longest one SMTP conversation may take.
const TIMEOUT: Duration = Duration::from_secs(30);

pub struct EmailSender {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    to: Vec<Mailbox>,
}

impl EmailSender {
    pub fn new(
        config: &EmailNotifierConfig,
        credentials: Option<(String, String)>,
        ca_cert: Option<&str>,
    ) -> Result<Self, String> {
        let host = config.smtp_host.clone();
        let tls = || -> Result<TlsParameters, String> {
            let mut builder = TlsParameters::builder(host.clone())
                .certificate_store(lettre::transport::smtp::client::CertificateStore::WebpkiRoots);
            if let Some(pem) = ca_cert {
                let cert = Certificate::from_pem(pem.as_bytes()).map_err(|e| e.to_string())?;
                builder = builder.add_root_certificate(cert);
            }
            builder.build_rustls().map_err(|e| e.to_string())
        };
        let (tls, default_port) = match config.tls {
            SmtpTls::Starttls => (Tls::Required(tls()?), 587),
            SmtpTls::Tls => (Tls::Wrapper(tls()?), 465),
            SmtpTls::None => (Tls::None, 25),
        };
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&host)
            .port(config.smtp_port.unwrap_or(default_port))
            .tls(tls)
            .timeout(Some(TIMEOUT));
        if let Some((user, password)) = credentials {
            builder = builder.credentials(Credentials::new(user, password));
        }
        let parse = |address: &str| {
            address
                .parse::<Mailbox>()
                .map_err(|e| format!("`{address}`: {e}"))
        };
        Ok(Self {
            transport: builder.build(),
            from: parse(&config.from)?,
            to: config
                .to
                .iter()
                .map(|a| parse(a))
                .collect::<Result<_, _>>()?,
        })
    }

    pub async fn send(&self, message: &Message<'_>) -> Result<(), String> {
        let mut mail = Mail::builder()
            .from(self.from.clone())
            .subject(message.title())
            .header(ContentType::TEXT_PLAIN);
        for to in &self.to {
            mail = mail.to(to.clone());
        }
        let mail = mail.body(message.text()).map_err(|e| e.to_string())?;
        self.transport
            .send(mail)
            .await
            .map(|_| ())
            .map_err(|e| format!("SMTP: {e}"))
    }
}
