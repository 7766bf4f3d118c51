//! Signing as each preset's sender does ([`Verifier::sign`]): the inverse of verification, for
//! the console's test events and for tests.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use switchyard_core::standard_webhooks;

use super::{Algo, Encoding, Preset, Verifier};

impl Verifier {
    /// The headers a sender of this preset would put on `body` (message `id`, at `now_secs`),
    /// signed with the first secret in force: what [`Verifier::verify`] accepts. For the
    /// console's test events and for tests; empty when no secret is in force.
    pub fn sign(&self, body: &[u8], id: &str, now_secs: i64) -> Vec<(String, String)> {
        let Some(secret) = self.secrets.first() else {
            return Vec::new();
        };
        let mac = |algo: Algo, parts: &[&[u8]], encoding: Encoding| {
            let mac = algo.mac(secret.as_bytes(), parts);
            match encoding {
                Encoding::Hex => hex::encode(mac),
                Encoding::Base64 => STANDARD.encode(mac),
            }
        };
        let one = |name: &str, value: String| vec![(name.to_owned(), value)];
        match self.config.preset {
            Preset::Github => one(
                "X-Hub-Signature-256",
                format!("sha256={}", mac(Algo::Sha256, &[body], Encoding::Hex)),
            ),
            Preset::Intercom => one(
                "X-Hub-Signature",
                format!("sha1={}", mac(Algo::Sha1, &[body], Encoding::Hex)),
            ),
            Preset::Shopify => one(
                "X-Shopify-Hmac-Sha256",
                mac(Algo::Sha256, &[body], Encoding::Base64),
            ),
            Preset::HmacSha256 | Preset::HmacSha1 => {
                let algo = match self.config.preset {
                    Preset::HmacSha1 => Algo::Sha1,
                    _ => Algo::Sha256,
                };
                let encoding = self.config.encoding.unwrap_or(Encoding::Hex);
                one(
                    self.config.header.as_deref().unwrap_or_default(),
                    format!(
                        "{}{}",
                        self.config.prefix.as_deref().unwrap_or_default(),
                        mac(algo, &[body], encoding)
                    ),
                )
            }
            Preset::Stripe => {
                let t = now_secs.to_string();
                one(
                    "Stripe-Signature",
                    format!(
                        "t={t},v1={}",
                        mac(Algo::Sha256, &[t.as_bytes(), b".", body], Encoding::Hex)
                    ),
                )
            }
            Preset::StandardWebhooks => {
                let Some(key) = self.keys.first() else {
                    return Vec::new();
                };
                vec![
                    ("webhook-id".into(), id.to_owned()),
                    ("webhook-timestamp".into(), now_secs.to_string()),
                    (
                        "webhook-signature".into(),
                        standard_webhooks::sign(std::slice::from_ref(key), id, now_secs, body),
                    ),
                ]
            }
            Preset::Bearer => one("Authorization", format!("Bearer {secret}")),
            Preset::Basic => one(
                "Authorization",
                format!(
                    "Basic {}",
                    STANDARD.encode(format!(
                        "{}:{secret}",
                        self.config.username.as_deref().unwrap_or_default()
                    ))
                ),
            ),
        }
    }
}
