//! The SASL exchanges that carry an access token to IMAP: `XOAUTH2` (Google, Microsoft) and
//! `OAUTHBEARER` (RFC 7628). Invariant: the token is sent once, in the initial response; a
//! server's error challenge is kept (for the error) and acknowledged as each mechanism says
//! (empty for XOAUTH2, `%x01` for OAUTHBEARER) so that the server ends with NO, not a hang.

use std::sync::{Arc, Mutex};

use async_imap::Authenticator;

use super::SaslMechanism;

/// One AUTHENTICATE exchange; `server_error` receives the server's error challenge, if any.
pub(crate) struct BearerAuthenticator {
    pub mechanism: SaslMechanism,
    pub user: String,
    pub token: String,
    pub host: String,
    pub port: u16,
    pub sent: bool,
    pub server_error: Arc<Mutex<Option<String>>>,
}

impl BearerAuthenticator {
    /// The IMAP name of the mechanism.
    pub fn name(&self) -> &'static str {
        match self.mechanism {
            SaslMechanism::Xoauth2 => "XOAUTH2",
            SaslMechanism::Oauthbearer => "OAUTHBEARER",
        }
    }

    /// The client's initial response, before base64.
    pub fn initial_response(&self) -> Vec<u8> {
        let (user, token) = (&self.user, &self.token);
        match self.mechanism {
            SaslMechanism::Xoauth2 => format!("user={user}\x01auth=Bearer {token}\x01\x01"),
            SaslMechanism::Oauthbearer => format!(
                "n,a={},\x01host={}\x01port={}\x01auth=Bearer {token}\x01\x01",
                gs2_escape(user),
                self.host,
                self.port
            ),
        }
        .into_bytes()
    }
}

impl Authenticator for BearerAuthenticator {
    type Response = Vec<u8>;

    fn process(&mut self, challenge: &[u8]) -> Vec<u8> {
        if !self.sent {
            self.sent = true;
            return self.initial_response();
        }
        let text = String::from_utf8_lossy(challenge)
            .chars()
            .take(500)
            .collect();
        *self.server_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(text);
        match self.mechanism {
            SaslMechanism::Xoauth2 => Vec::new(),
            SaslMechanism::Oauthbearer => vec![0x01],
        }
    }
}

/// RFC 5801's saslname escaping of the authzid: `,` and `=` are escaped.
fn gs2_escape(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn auth(mechanism: SaslMechanism) -> BearerAuthenticator {
        BearerAuthenticator {
            mechanism,
            user: "support@example.com".into(),
            token: "tok".into(),
            host: "imap.example.com".into(),
            port: 993,
            sent: false,
            server_error: Arc::default(),
        }
    }

    #[test]
    fn initial_responses_follow_the_specs() {
        let mut x = auth(SaslMechanism::Xoauth2);
        assert_eq!(
            x.process(b""),
            b"user=support@example.com\x01auth=Bearer tok\x01\x01"
        );
        assert_eq!(x.process(br#"{"status":"401"}"#), b"");
        assert_eq!(
            x.server_error.lock().unwrap().as_deref(),
            Some(r#"{"status":"401"}"#)
        );
        let mut o = auth(SaslMechanism::Oauthbearer);
        assert_eq!(
            o.process(b""),
            b"n,a=support@example.com,\x01host=imap.example.com\x01port=993\x01auth=Bearer tok\x01\x01"
        );
        assert_eq!(o.process(br#"{"status":"invalid_token"}"#), [1]);
        assert_eq!(gs2_escape("a,b=c"), "a=2Cb=3Dc");
    }
}
