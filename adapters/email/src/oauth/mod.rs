//! OAuth2 sign-in of a mailbox: the `[source.oauth2]` table ([`OAuth2Config`]), its secrets in
//! hand ([`OAuthSecrets`]), the three token flows (`token.rs`), the RS256 assertions two of
//! them sign (`jwt.rs`) and the SASL exchanges that carry the token (`sasl.rs`).
//!
//! Invariant: no secret (client secret, refresh or access token, private key) is ever part of a
//! `Debug`/`Display` output, an error or a log line; only env variable names and file paths are.

mod jwt;
pub(crate) mod sasl;
mod token;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::ConfigError;

pub use token::TokenError;
pub(crate) use token::Tokens;

/// Microsoft's public cloud authority (override for sovereign clouds).
pub const MICROSOFT_AUTHORITY: &str = "https://login.microsoftonline.com";
/// The scope of app-only IMAP access to Exchange Online.
pub const MICROSOFT_IMAP_SCOPE: &str = "https://outlook.office365.com/.default";
/// Google's token endpoint (refresh tokens and service-account assertions).
pub const GOOGLE_TOKEN_URL: &str = "https://oauth2.googleapis.com/token";
/// The scope of full IMAP access to Gmail.
pub const GOOGLE_MAIL_SCOPE: &str = "https://mail.google.com/";

/// How the access token is obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OAuth2Flow {
    /// RFC 6749 §6 at any provider's token endpoint; rotated refresh tokens are kept.
    RefreshToken,
    /// Microsoft identity platform, app-only (`client_credentials`), secret or certificate.
    MicrosoftClientCredentials,
    /// Google service account with domain-wide delegation (RFC 7523 JWT bearer, RS256).
    GoogleServiceAccount,
}

impl OAuth2Flow {
    pub fn as_str(self) -> &'static str {
        match self {
            OAuth2Flow::RefreshToken => "refresh_token",
            OAuth2Flow::MicrosoftClientCredentials => "microsoft_client_credentials",
            OAuth2Flow::GoogleServiceAccount => "google_service_account",
        }
    }
}

/// The SASL mechanism that carries the token.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SaslMechanism {
    /// Google's and Microsoft's `XOAUTH2` (the default; both providers speak it).
    #[default]
    Xoauth2,
    /// RFC 7628 `OAUTHBEARER`, used when the server advertises it (else `XOAUTH2`).
    Oauthbearer,
}

/// `[source.oauth2]` of an email source with `auth = "oauth2"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuth2Config {
    pub flow: OAuth2Flow,
    /// `xoauth2` (default) or `oauthbearer`.
    #[serde(default)]
    pub mechanism: SaslMechanism,
    /// The token endpoint; default per flow (Google's; Microsoft's from `authority` and
    /// `tenant_id`; a service account key's `token_uri`).
    #[serde(default)]
    pub token_url: Option<String>,
    /// The application (client) id (`refresh_token`, `microsoft_client_credentials`).
    #[serde(default)]
    pub client_id: Option<String>,
    /// The env variable holding the client secret.
    #[serde(default)]
    pub client_secret_env: Option<String>,
    /// The env variable holding the first refresh token (rotated ones are stored).
    #[serde(default)]
    pub refresh_token_env: Option<String>,
    /// The Microsoft Entra tenant (directory) id.
    #[serde(default)]
    pub tenant_id: Option<String>,
    /// The Microsoft authority; default `https://login.microsoftonline.com`.
    #[serde(default)]
    pub authority: Option<String>,
    /// The app's certificate (PEM), for a certificate credential instead of a secret.
    #[serde(default)]
    pub certificate_file: Option<PathBuf>,
    /// The certificate's private key (PEM, PKCS#8, RSA).
    #[serde(default)]
    pub private_key_file: Option<PathBuf>,
    /// A Google service account's JSON key file.
    #[serde(default)]
    pub service_account_key_file: Option<PathBuf>,
    /// The mailbox a service account acts as; default `username`.
    #[serde(default)]
    pub subject: Option<String>,
    /// The scope asked for; default per flow (none for `refresh_token`).
    #[serde(default)]
    pub scope: Option<String>,
    /// The longest one token request may take; default 30 s.
    #[serde(default = "default_token_timeout", with = "humantime_serde")]
    pub token_timeout: Duration,
}

fn default_token_timeout() -> Duration {
    Duration::from_secs(30)
}

impl OAuth2Config {
    /// A table of `flow` with every optional key unset.
    pub fn new(flow: OAuth2Flow) -> Self {
        OAuth2Config {
            flow,
            mechanism: SaslMechanism::default(),
            token_url: None,
            client_id: None,
            client_secret_env: None,
            refresh_token_env: None,
            tenant_id: None,
            authority: None,
            certificate_file: None,
            private_key_file: None,
            service_account_key_file: None,
            subject: None,
            scope: None,
            token_timeout: default_token_timeout(),
        }
    }

    /// Checks the keys the flow needs are there, the ones it ignores are not, and URLs are
    /// https (http only on loopback).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let flow = self.flow.as_str();
        let present = |key: &'static str, value: bool| -> Result<(), ConfigError> {
            if value {
                Ok(())
            } else {
                Err(ConfigError::OAuth2KeyMissing { flow, key })
            }
        };
        let absent = |key: &'static str, value: bool| -> Result<(), ConfigError> {
            if value {
                Err(ConfigError::OAuth2KeyNotForFlow { flow, key })
            } else {
                Ok(())
            }
        };
        for (key, value) in [
            ("token_url", &self.token_url),
            ("client_id", &self.client_id),
            ("client_secret_env", &self.client_secret_env),
            ("refresh_token_env", &self.refresh_token_env),
            ("tenant_id", &self.tenant_id),
            ("authority", &self.authority),
            ("subject", &self.subject),
            ("scope", &self.scope),
        ] {
            if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
                return Err(ConfigError::OAuth2Empty(key));
            }
        }
        if self.token_timeout.is_zero() {
            return Err(ConfigError::OAuth2Empty("token_timeout"));
        }
        let certificate = self.certificate_file.is_some() || self.private_key_file.is_some();
        match self.flow {
            OAuth2Flow::RefreshToken => {
                present("client_id", self.client_id.is_some())?;
                present("refresh_token_env", self.refresh_token_env.is_some())?;
                absent("tenant_id", self.tenant_id.is_some())?;
                absent("authority", self.authority.is_some())?;
                absent("certificate_file", self.certificate_file.is_some())?;
                absent("private_key_file", self.private_key_file.is_some())?;
                absent(
                    "service_account_key_file",
                    self.service_account_key_file.is_some(),
                )?;
                absent("subject", self.subject.is_some())?;
            }
            OAuth2Flow::MicrosoftClientCredentials => {
                present("tenant_id", self.tenant_id.is_some())?;
                present("client_id", self.client_id.is_some())?;
                absent("refresh_token_env", self.refresh_token_env.is_some())?;
                absent(
                    "service_account_key_file",
                    self.service_account_key_file.is_some(),
                )?;
                absent("subject", self.subject.is_some())?;
                match (self.client_secret_env.is_some(), certificate) {
                    (true, false) => {}
                    (false, true)
                        if self.certificate_file.is_some() && self.private_key_file.is_some() => {}
                    (false, true) => return Err(ConfigError::OAuth2CertificatePair),
                    _ => return Err(ConfigError::OAuth2SecretOrCertificate),
                }
            }
            OAuth2Flow::GoogleServiceAccount => {
                present(
                    "service_account_key_file",
                    self.service_account_key_file.is_some(),
                )?;
                absent("client_id", self.client_id.is_some())?;
                absent("client_secret_env", self.client_secret_env.is_some())?;
                absent("refresh_token_env", self.refresh_token_env.is_some())?;
                absent("tenant_id", self.tenant_id.is_some())?;
                absent("authority", self.authority.is_some())?;
                absent("certificate_file", self.certificate_file.is_some())?;
                absent("private_key_file", self.private_key_file.is_some())?;
            }
        }
        if let Some(url) = &self.token_url {
            check_url("token_url", url)?;
        }
        if let Some(url) = &self.authority {
            check_url("authority", url)?;
        }
        Ok(())
    }

    /// The token endpoint this flow posts to (`key_token_uri`: a service account key's own).
    pub fn token_endpoint(&self, key_token_uri: Option<&str>) -> String {
        if let Some(url) = &self.token_url {
            return url.clone();
        }
        match self.flow {
            OAuth2Flow::RefreshToken => GOOGLE_TOKEN_URL.to_owned(),
            OAuth2Flow::MicrosoftClientCredentials => format!(
                "{}/{}/oauth2/v2.0/token",
                self.authority
                    .as_deref()
                    .unwrap_or(MICROSOFT_AUTHORITY)
                    .trim_end_matches('/'),
                self.tenant_id.as_deref().unwrap_or_default()
            ),
            OAuth2Flow::GoogleServiceAccount => {
                key_token_uri.unwrap_or(GOOGLE_TOKEN_URL).to_owned()
            }
        }
    }

    /// The scope asked for, if any.
    pub fn scope(&self) -> Option<&str> {
        self.scope.as_deref().or(match self.flow {
            OAuth2Flow::RefreshToken => None,
            OAuth2Flow::MicrosoftClientCredentials => Some(MICROSOFT_IMAP_SCOPE),
            OAuth2Flow::GoogleServiceAccount => Some(GOOGLE_MAIL_SCOPE),
        })
    }

    /// Reads the secrets this flow needs: env variables through `env`, key files from disk.
    /// Fails naming the variable or file (never its content).
    pub fn resolve(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<OAuthSecrets, ConfigError> {
        let var = |name: &Option<String>| -> Result<Option<String>, ConfigError> {
            name.as_ref()
                .map(|name| env(name).ok_or_else(|| ConfigError::EnvMissing(name.clone())))
                .transpose()
        };
        let mut secrets = OAuthSecrets {
            client_secret: var(&self.client_secret_env)?,
            refresh_token: var(&self.refresh_token_env)?,
            ..OAuthSecrets::default()
        };
        if let (Some(cert), Some(key)) = (&self.certificate_file, &self.private_key_file) {
            let cert_pem = read("certificate_file", cert)?;
            let der = first_certificate(&cert_pem).ok_or_else(|| ConfigError::FileInvalid {
                what: "certificate_file",
                path: cert.clone(),
                detail: "no PEM certificate".into(),
            })?;
            secrets.certificate_sha1 = Some(jwt::sha1_thumbprint(&der));
            let key_pem = read("private_key_file", key)?;
            jwt::RsaSigner::from_pem(&key_pem).map_err(|detail| ConfigError::FileInvalid {
                what: "private_key_file",
                path: key.clone(),
                detail,
            })?;
            secrets.private_key_pem = Some(key_pem);
        }
        if let Some(path) = &self.service_account_key_file {
            let text = read("service_account_key_file", path)?;
            let invalid = |detail: String| ConfigError::FileInvalid {
                what: "service_account_key_file",
                path: path.clone(),
                detail,
            };
            let key: ServiceAccountKey = serde_json::from_str(&text)
                .map_err(|e| invalid(format!("not a key file ({e})")))?;
            jwt::RsaSigner::from_pem(&key.private_key).map_err(invalid)?;
            secrets.service_account = Some(ServiceAccount {
                client_email: key.client_email,
                private_key_id: key.private_key_id,
                token_uri: key.token_uri,
            });
            secrets.private_key_pem = Some(key.private_key);
        }
        Ok(secrets)
    }
}

/// What a service account key file holds that the flow uses.
#[derive(Deserialize)]
struct ServiceAccountKey {
    client_email: String,
    private_key: String,
    #[serde(default)]
    private_key_id: Option<String>,
    #[serde(default)]
    token_uri: Option<String>,
}

/// The public half of a service account key file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServiceAccount {
    pub client_email: String,
    pub private_key_id: Option<String>,
    pub token_uri: Option<String>,
}

/// The secrets of one `[source.oauth2]`, resolved. `Debug` names which are present, never
/// their values.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct OAuthSecrets {
    pub client_secret: Option<String>,
    /// The refresh token from the config (the seed; a rotated one in the store supersedes it
    /// while this seed stays the same).
    pub refresh_token: Option<String>,
    /// A PKCS#8 RSA private key (PEM) that signs assertions.
    pub private_key_pem: Option<String>,
    /// SHA-1 of the certificate (Microsoft's `x5t`), for a certificate credential.
    pub certificate_sha1: Option<[u8; 20]>,
    pub service_account: Option<ServiceAccount>,
}

impl OAuthSecrets {
    /// A stable fingerprint of the configured refresh token (hex SHA-256): a rotated token in
    /// the store belongs to the seed it grew from, so a newly configured seed wins.
    pub fn seed_fingerprint(&self) -> String {
        hex::encode(Sha256::digest(
            self.refresh_token.as_deref().unwrap_or_default(),
        ))
    }
}

impl std::fmt::Debug for OAuthSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthSecrets")
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<set>"),
            )
            .field(
                "refresh_token",
                &self.refresh_token.as_ref().map(|_| "<set>"),
            )
            .field(
                "private_key",
                &self.private_key_pem.as_ref().map(|_| "<set>"),
            )
            .field("service_account", &self.service_account)
            .finish()
    }
}

/// How a poller signs in, secrets in hand. `Debug` never shows them.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// `auth = "password"`: the value of `password_env`.
    Password(String),
    /// `auth = "oauth2"`.
    OAuth2(Box<OAuthSecrets>),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Password(_) => f.write_str("Password(<set>)"),
            Credentials::OAuth2(secrets) => f.debug_tuple("OAuth2").field(secrets).finish(),
        }
    }
}

fn read(what: &'static str, path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::FileUnreadable {
        what,
        path: path.to_owned(),
        source,
    })
}

fn first_certificate(pem: &str) -> Option<Vec<u8>> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .find_map(Result::ok)
        .map(|c| c.to_vec())
}

/// https anywhere; http only to a loopback host (tests, local proxies).
fn check_url(key: &'static str, url: &str) -> Result<(), ConfigError> {
    let bad = || ConfigError::OAuth2BadUrl {
        key,
        url: url.to_owned(),
    };
    let parsed = reqwest::Url::parse(url).map_err(|_| bad())?;
    match parsed.scheme() {
        "https" => Ok(()),
        "http" => {
            let host = parsed.host_str().unwrap_or_default();
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let loopback = host.eq_ignore_ascii_case("localhost")
                || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
            if loopback { Ok(()) } else { Err(bad()) }
        }
        _ => Err(bad()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn refresh() -> OAuth2Config {
        OAuth2Config {
            client_id: Some("app".into()),
            refresh_token_env: Some("RT".into()),
            ..OAuth2Config::new(OAuth2Flow::RefreshToken)
        }
    }

    #[test]
    fn each_flow_needs_its_keys_and_refuses_the_others() {
        refresh().validate().unwrap();
        let mut c = refresh();
        c.refresh_token_env = None;
        assert!(matches!(
            c.validate(),
            Err(ConfigError::OAuth2KeyMissing {
                key: "refresh_token_env",
                ..
            })
        ));
        let mut c = refresh();
        c.tenant_id = Some("t".into());
        assert!(matches!(
            c.validate(),
            Err(ConfigError::OAuth2KeyNotForFlow {
                key: "tenant_id",
                ..
            })
        ));
        let mut ms = OAuth2Config {
            tenant_id: Some("contoso".into()),
            client_id: Some("app".into()),
            ..OAuth2Config::new(OAuth2Flow::MicrosoftClientCredentials)
        };
        assert!(matches!(
            ms.validate(),
            Err(ConfigError::OAuth2SecretOrCertificate)
        ));
        ms.client_secret_env = Some("S".into());
        ms.validate().unwrap();
        assert_eq!(
            ms.token_endpoint(None),
            "https://login.microsoftonline.com/contoso/oauth2/v2.0/token"
        );
        assert_eq!(ms.scope(), Some(MICROSOFT_IMAP_SCOPE));
        ms.authority = Some("https://login.microsoftonline.us/".into());
        assert_eq!(
            ms.token_endpoint(None),
            "https://login.microsoftonline.us/contoso/oauth2/v2.0/token"
        );
        ms.private_key_file = Some("/k.pem".into());
        assert!(matches!(
            ms.validate(),
            Err(ConfigError::OAuth2SecretOrCertificate)
        ));
        let google = OAuth2Config::new(OAuth2Flow::GoogleServiceAccount);
        assert!(matches!(
            google.validate(),
            Err(ConfigError::OAuth2KeyMissing {
                key: "service_account_key_file",
                ..
            })
        ));
    }

    #[test]
    fn urls_are_https_or_loopback_http() {
        let mut c = refresh();
        for ok in [
            "https://idp.example/token",
            "http://127.0.0.1:9/t",
            "http://localhost/t",
        ] {
            c.token_url = Some(ok.into());
            c.validate().unwrap();
        }
        for bad in ["http://idp.example/token", "ftp://x/y", "not a url"] {
            c.token_url = Some(bad.into());
            assert!(
                matches!(c.validate(), Err(ConfigError::OAuth2BadUrl { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn resolve_names_the_missing_variable_and_debug_hides_values() {
        let env = |name: &str| (name == "RT").then(|| "1//secret-refresh".to_owned());
        let secrets = refresh().resolve(&env).unwrap();
        let shown = format!("{:?}", Credentials::OAuth2(Box::new(secrets.clone())));
        assert!(!shown.contains("secret-refresh"), "{shown}");
        let mut c = refresh();
        c.client_secret_env = Some("MISSING_SECRET".into());
        let err = c.resolve(&env).unwrap_err().to_string();
        assert!(err.contains("MISSING_SECRET"), "{err}");
        assert_ne!(
            secrets.seed_fingerprint(),
            OAuthSecrets::default().seed_fingerprint()
        );
    }
}
