//! One sign-in to check a mailbox source by hand (`switchyard mailbox test`): get a token if
//! OAuth2, connect, sign in, EXAMINE (read-only), log out. Invariant: nothing in the mailbox
//! changes and no cursor is written; a rotated refresh token is still kept (`TokenStore`).

use std::time::Duration;

use serde::Serialize;

use super::transport::{self, SignIn};
use crate::config::EmailSourceConfig;
use crate::error::SessionError;
use crate::oauth::{Credentials, Tokens};
use crate::sink::TokenStore;

/// What one sign-in found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MailboxProbe {
    /// `password`, or the SASL mechanism the token went through.
    pub signed_in_with: String,
    /// Messages in the mailbox: what `start_from = "beginning"` would take.
    pub messages: u32,
    pub uidvalidity: Option<u32>,
    pub uid_next: Option<u32>,
}

/// Which step failed, and why (the error carries no secret).
#[derive(Debug, thiserror::Error)]
#[error("{step} failed: {}", .error.chain())]
pub struct ProbeError {
    /// `token`, `connect`, `sign-in` or `select`.
    pub step: &'static str,
    pub error: SessionError,
}

/// Signs in once as `config` says and examines its mailbox.
pub async fn probe<T: TokenStore>(
    config: &EmailSourceConfig,
    credentials: &Credentials,
    token_store: &T,
    timeout: Duration,
) -> Result<MailboxProbe, ProbeError> {
    let fail = |step: &'static str| move |error: SessionError| ProbeError { step, error };
    let token;
    let (sign_in, signed_in_with) = match (credentials, &config.oauth2) {
        (Credentials::Password(password), _) => (SignIn::Password(password), "password".into()),
        (Credentials::OAuth2(secrets), Some(oauth2)) => {
            let mut tokens = Tokens::new(
                (**oauth2).clone(),
                (**secrets).clone(),
                config.username.clone(),
            );
            token = tokens
                .fetch(token_store, &config.name)
                .await
                .map_err(|e| fail("token")(e.into()))?;
            (
                SignIn::Bearer(&token),
                format!("{:?}", oauth2.mechanism).to_ascii_uppercase(),
            )
        }
        (Credentials::OAuth2(_), None) => return Err(fail("token")(SessionError::NoOAuth2Table)),
    };
    let mut session = transport::connect(config, sign_in, timeout)
        .await
        .map_err(|error| {
            let step = match &error {
                SessionError::Login { .. } | SessionError::TokenRefused { .. } => "sign-in",
                SessionError::Timeout(what, _) if *what == "LOGIN" || *what == "AUTHENTICATE" => {
                    "sign-in"
                }
                _ => "connect",
            };
            fail(step)(error)
        })?;
    let examined = transport::bounded(timeout, "EXAMINE", session.examine(&config.mailbox))
        .await
        .map_err(fail("select"))?
        .map_err(|source| {
            fail("select")(SessionError::Imap {
                command: "EXAMINE",
                source,
            })
        })?;
    let _ = transport::bounded(Duration::from_secs(5), "LOGOUT", session.logout()).await;
    Ok(MailboxProbe {
        signed_in_with,
        messages: examined.exists,
        uidvalidity: examined.uid_validity,
        uid_next: examined.uid_next,
    })
}
