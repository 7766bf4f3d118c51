//! Getting access tokens: one POST per flow to the token endpoint, a cached token reused until
//! shortly before it expires, and a rotated refresh token handed to the daemon to keep.
//!
//! Invariant: a request is bounded by `token_timeout`; an error names the endpoint and the
//! provider's `error`/`error_description`, never a secret; the refresh token in use is the
//! stored rotated one while it grew from the configured seed, else the seed.

use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use tokio::time::Instant;
use tracing::{info, warn};
use uuid::Uuid;

use super::jwt::{RsaSigner, base64url};
use super::{OAuth2Config, OAuth2Flow, OAuthSecrets};
use crate::error::SinkError;
use crate::sink::TokenStore;

/// Why no access token could be had.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("the OAuth2 token endpoint {url} is unreachable")]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("the OAuth2 token endpoint {url} did not answer within {limit:?}")]
    Timeout { url: String, limit: Duration },
    #[error("the OAuth2 token endpoint refused the request: {error}{}", describe(.description))]
    Refused {
        status: u16,
        error: String,
        description: Option<String>,
    },
    #[error("the OAuth2 token endpoint answered HTTP {status} without a usable token: {detail}")]
    BadResponse { status: u16, detail: String },
    #[error("cannot sign the OAuth2 assertion: {0}")]
    Signing(String),
    #[error("cannot read the stored refresh token")]
    Store(#[source] SinkError),
}

fn describe(description: &Option<String>) -> String {
    description
        .as_deref()
        .map(|d| format!(" ({d})"))
        .unwrap_or_default()
}

impl TokenError {
    /// A stable word for the failure, shown in status and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            TokenError::Unreachable { .. } => "token_endpoint_unreachable",
            TokenError::Timeout { .. } => "token_endpoint_timeout",
            TokenError::Refused {
                error, description, ..
            } => {
                let description = description.as_deref().unwrap_or_default();
                if error == "consent_required"
                    || error == "interaction_required"
                    || description.contains("AADSTS65001")
                    || description.to_ascii_lowercase().contains("consent")
                {
                    "consent_missing"
                } else if error == "invalid_client" || error == "unauthorized_client" {
                    "invalid_client"
                } else if error == "invalid_grant" {
                    "invalid_grant"
                } else {
                    "token_endpoint_error"
                }
            }
            TokenError::BadResponse { .. } | TokenError::Signing(_) => "token_endpoint_error",
            TokenError::Store(_) => "store",
        }
    }
}

/// An access token and when to stop using it.
#[derive(Clone)]
struct AccessToken {
    secret: String,
    /// When to replace it: a quarter of its life (at most 5 minutes) before `expires_at`.
    renew_at: Instant,
}

/// The token source of one poller.
pub(crate) struct Tokens {
    config: OAuth2Config,
    secrets: OAuthSecrets,
    username: String,
    http: reqwest::Client,
    current: Option<AccessToken>,
    /// The refresh token in use (`refresh_token` flow), once read from the store.
    refresh_token: Option<String>,
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    #[serde(default)]
    expires_in: Option<serde_json::Value>,
    #[serde(default)]
    refresh_token: Option<String>,
}

#[derive(Deserialize)]
struct ErrorAnswer {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

/// Used when a provider gives no `expires_in`: one hour, the common lifetime.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(3600);
const MAX_RENEW_MARGIN: Duration = Duration::from_secs(300);

impl Tokens {
    pub(crate) fn new(config: OAuth2Config, secrets: OAuthSecrets, username: String) -> Self {
        let http = reqwest::Client::builder()
            .timeout(config.token_timeout)
            .connect_timeout(config.token_timeout)
            .build()
            .unwrap_or_default();
        Tokens {
            config,
            secrets,
            username,
            http,
            current: None,
            refresh_token: None,
        }
    }

    /// The mechanism the config asks for.
    pub(crate) fn config(&self) -> &OAuth2Config {
        &self.config
    }

    /// When the current token should be replaced (the session ends then and signs in anew).
    pub(crate) fn renew_at(&self) -> Option<Instant> {
        self.current.as_ref().map(|t| t.renew_at)
    }

    /// A token that is not near its expiry: the cached one, else a new one. The flag says
    /// whether it was fetched just now.
    pub(crate) async fn token<S: TokenStore + ?Sized>(
        &mut self,
        sink: &S,
        source: &str,
    ) -> Result<(String, bool), TokenError> {
        if let Some(token) = &self.current
            && Instant::now() < token.renew_at
        {
            return Ok((token.secret.clone(), false));
        }
        self.fetch(sink, source).await.map(|t| (t, true))
    }

    /// Forgets the cached token (the server refused it).
    pub(crate) fn discard(&mut self) {
        self.current = None;
    }

    /// Asks the token endpoint for a new access token.
    pub(crate) async fn fetch<S: TokenStore + ?Sized>(
        &mut self,
        sink: &S,
        source: &str,
    ) -> Result<String, TokenError> {
        let url = self.config.token_endpoint(
            self.secrets
                .service_account
                .as_ref()
                .and_then(|s| s.token_uri.as_deref()),
        );
        let mut form: Vec<(&str, String)> = Vec::new();
        match self.config.flow {
            OAuth2Flow::RefreshToken => {
                let refresh = self.refresh_token(sink, source).await?;
                form.push(("grant_type", "refresh_token".into()));
                form.push(("refresh_token", refresh));
                form.push((
                    "client_id",
                    self.config.client_id.clone().unwrap_or_default(),
                ));
                if let Some(secret) = &self.secrets.client_secret {
                    form.push(("client_secret", secret.clone()));
                }
            }
            OAuth2Flow::MicrosoftClientCredentials => {
                let client_id = self.config.client_id.clone().unwrap_or_default();
                form.push(("grant_type", "client_credentials".into()));
                form.push(("client_id", client_id.clone()));
                if let Some(secret) = &self.secrets.client_secret {
                    form.push(("client_secret", secret.clone()));
                } else {
                    form.push((
                        "client_assertion_type",
                        "urn:ietf:params:oauth:client-assertion-type:jwt-bearer".into(),
                    ));
                    form.push(("client_assertion", self.client_assertion(&client_id, &url)?));
                }
            }
            OAuth2Flow::GoogleServiceAccount => {
                form.push((
                    "grant_type",
                    "urn:ietf:params:oauth:grant-type:jwt-bearer".into(),
                ));
                form.push(("assertion", self.service_account_assertion(&url)?));
            }
        }
        if let Some(scope) = self.config.scope() {
            form.push(("scope", scope.to_owned()));
        }
        let answer = self.post(&url, &form).await?;
        let lifetime = answer
            .expires_in
            .as_ref()
            .and_then(|v| v.as_u64().or_else(|| v.as_str()?.parse().ok()))
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_LIFETIME);
        let now = Instant::now();
        let margin = (lifetime / 4).min(MAX_RENEW_MARGIN);
        self.current = Some(AccessToken {
            secret: answer.access_token.clone(),
            renew_at: now + lifetime - margin,
        });
        if let Some(rotated) = answer.refresh_token
            && self.config.flow == OAuth2Flow::RefreshToken
            && self.refresh_token.as_deref() != Some(rotated.as_str())
        {
            // Kept before it is used: the provider may have revoked the old one already.
            match sink
                .store_refresh_token(source, &self.secrets.seed_fingerprint(), &rotated)
                .await
            {
                Ok(()) => info!(
                    source,
                    "the provider rotated the refresh token; stored the new one"
                ),
                Err(error) => warn!(source, %error,
                    "the provider rotated the refresh token but it could not be stored; using it from memory"),
            }
            self.refresh_token = Some(rotated);
        }
        Ok(answer.access_token)
    }

    async fn refresh_token<S: TokenStore + ?Sized>(
        &mut self,
        sink: &S,
        source: &str,
    ) -> Result<String, TokenError> {
        if let Some(token) = &self.refresh_token {
            return Ok(token.clone());
        }
        let stored = sink
            .stored_refresh_token(source, &self.secrets.seed_fingerprint())
            .await
            .map_err(TokenError::Store)?;
        let token = stored
            .or_else(|| self.secrets.refresh_token.clone())
            .unwrap_or_default();
        self.refresh_token = Some(token.clone());
        Ok(token)
    }

    async fn post(&self, url: &str, form: &[(&str, String)]) -> Result<TokenAnswer, TokenError> {
        let limit = self.config.token_timeout;
        let sent = tokio::time::timeout(limit, async {
            let response = self.http.post(url).form(form).send().await?;
            let status = response.status().as_u16();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, body))
        })
        .await;
        let (status, body) = match sent {
            Err(_) => {
                return Err(TokenError::Timeout {
                    url: url.to_owned(),
                    limit,
                });
            }
            Ok(Err(source)) if source.is_timeout() => {
                return Err(TokenError::Timeout {
                    url: url.to_owned(),
                    limit,
                });
            }
            Ok(Err(source)) => {
                return Err(TokenError::Unreachable {
                    url: url.to_owned(),
                    source: source.without_url(),
                });
            }
            Ok(Ok(answer)) => answer,
        };
        if (200..300).contains(&status) {
            return serde_json::from_slice::<TokenAnswer>(&body)
                .ok()
                .filter(|a| !a.access_token.is_empty())
                .ok_or_else(|| TokenError::BadResponse {
                    status,
                    detail: "no access_token in the answer".into(),
                });
        }
        match serde_json::from_slice::<ErrorAnswer>(&body) {
            Ok(error) => Err(TokenError::Refused {
                status,
                error: error.error,
                description: error
                    .error_description
                    .map(|d| d.chars().take(300).collect()),
            }),
            Err(_) => Err(TokenError::BadResponse {
                status,
                detail: "the answer is not an OAuth2 error".into(),
            }),
        }
    }

    /// Microsoft's certificate credential: a JWT signed by the app's key, naming the
    /// certificate by its SHA-1 thumbprint (`x5t`).
    fn client_assertion(&self, client_id: &str, audience: &str) -> Result<String, TokenError> {
        let signer = self.signer()?;
        let now = chrono::Utc::now().timestamp();
        let header = json!({
            "x5t": base64url(&self.secrets.certificate_sha1.unwrap_or_default()),
        });
        let claims = json!({
            "aud": audience, "iss": client_id, "sub": client_id,
            "jti": Uuid::new_v4().to_string(), "nbf": now, "iat": now, "exp": now + 600,
        });
        signer.sign(header, &claims).map_err(TokenError::Signing)
    }

    /// Google's service-account grant (RFC 7523): `iss` the service account, `sub` the mailbox.
    fn service_account_assertion(&self, audience: &str) -> Result<String, TokenError> {
        let signer = self.signer()?;
        let account = self.secrets.service_account.clone().unwrap_or_default();
        let now = chrono::Utc::now().timestamp();
        let mut header = json!({});
        if let Some(kid) = &account.private_key_id {
            header["kid"] = kid.clone().into();
        }
        let subject = self.config.subject.clone().unwrap_or(self.username.clone());
        let claims = json!({
            "iss": account.client_email, "sub": subject, "aud": audience,
            "scope": self.config.scope().unwrap_or_default(), "iat": now, "exp": now + 3600,
        });
        signer.sign(header, &claims).map_err(TokenError::Signing)
    }

    fn signer(&self) -> Result<RsaSigner, TokenError> {
        RsaSigner::from_pem(self.secrets.private_key_pem.as_deref().unwrap_or_default())
            .map_err(TokenError::Signing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(error: &str, description: Option<&str>) -> TokenError {
        TokenError::Refused {
            status: 400,
            error: error.into(),
            description: description.map(str::to_owned),
        }
    }

    #[test]
    fn provider_errors_get_stable_names_and_keep_their_description() {
        assert_eq!(refused("invalid_client", None).kind(), "invalid_client");
        assert_eq!(
            refused("unauthorized_client", None).kind(),
            "invalid_client"
        );
        assert_eq!(
            refused("invalid_grant", Some("Token has been expired or revoked.")).kind(),
            "invalid_grant"
        );
        assert_eq!(
            refused(
                "invalid_grant",
                Some("AADSTS65001: The user or administrator has not consented")
            )
            .kind(),
            "consent_missing"
        );
        assert_eq!(refused("consent_required", None).kind(), "consent_missing");
        assert_eq!(refused("server_error", None).kind(), "token_endpoint_error");
        let shown =
            refused("invalid_grant", Some("Token has been expired or revoked.")).to_string();
        assert_eq!(
            shown,
            "the OAuth2 token endpoint refused the request: invalid_grant (Token has been expired or revoked.)"
        );
        let timeout = TokenError::Timeout {
            url: "https://idp.example/token".into(),
            limit: Duration::from_secs(1),
        };
        assert_eq!(timeout.kind(), "token_endpoint_timeout");
        assert!(timeout.to_string().contains("within 1s"));
    }
}
