//! Signing a poller's session in: LOGIN with the password, or an OAuth2 access token over SASL.
//! Invariant: a token refused by the server gets exactly one fresh token and one retry (never a
//! loop); a token is fetched only here, by the lease holder, so replicas do not all ask.

use tracing::info;

use super::transport::{self, ImapSession, SignIn};
use super::{Poller, guarded};
use crate::error::SessionError;
use crate::oauth::Credentials;
use crate::sink::MailboxSink;

impl<S: MailboxSink> Poller<S> {
    /// A logged-in session; with OAuth2 also sets `token_renew_at`.
    pub(super) async fn sign_in(&mut self) -> Result<ImapSession, SessionError> {
        let timeout = self.options.io_timeout;
        if let Credentials::Password(password) = &self.credentials {
            let connect = transport::connect(&self.config, SignIn::Password(password), timeout);
            return guarded(&mut self.shutdown, timeout * 2, "login", connect).await?;
        }
        let (token, fresh) = self.token(false).await?;
        let connect = transport::connect(&self.config, SignIn::Bearer(&token), timeout);
        let session = match guarded(&mut self.shutdown, timeout * 2, "login", connect).await? {
            Err(SessionError::TokenRefused { .. }) if !fresh => {
                // Probably expired or revoked since it was fetched: one new token, one retry.
                info!(source = %self.config.name,
                    "the IMAP server refused the cached access token; fetching a new one");
                let (token, _) = self.token(true).await?;
                let connect = transport::connect(&self.config, SignIn::Bearer(&token), timeout);
                guarded(&mut self.shutdown, timeout * 2, "login", connect).await?
            }
            other => other,
        };
        if matches!(session, Err(SessionError::TokenRefused { .. }))
            && let Some(tokens) = &mut self.tokens
        {
            // The next attempt (after the backoff) starts from a new token.
            tokens.discard();
        }
        let session = session?;
        if self.status.auth_failure.take().is_some() {
            info!(source = %self.config.name, "signed in with OAuth2 again");
        }
        self.token_renew_at = self.tokens.as_ref().and_then(|t| t.renew_at());
        Ok(session)
    }

    /// The access token to sign in with (a new one when `renew`), and whether it is new.
    async fn token(&mut self, renew: bool) -> Result<(String, bool), SessionError> {
        let Some(tokens) = self.tokens.as_mut() else {
            return Err(SessionError::NoOAuth2Table);
        };
        // The request bounds itself (`token_timeout`); this only stops it on shutdown.
        let limit = tokens.config().token_timeout + std::time::Duration::from_secs(5);
        let (sink, source) = (self.sink.clone(), self.config.name.clone());
        let fetched = if renew {
            guarded(&mut self.shutdown, limit, "the token endpoint", async {
                tokens.fetch(&*sink, &source).await.map(|t| (t, true))
            })
            .await?
        } else {
            guarded(
                &mut self.shutdown,
                limit,
                "the token endpoint",
                tokens.token(&*sink, &source),
            )
            .await?
        };
        Ok(fetched?)
    }
}
