//! Verification presets of `json_webhook` sources, over the raw body as received, before it is
//! parsed: `github`, `stripe`, `shopify`, `standard_webhooks`, `intercom`, the generic
//! `hmac_sha256` / `hmac_sha1` (header, prefix and encoding named in config), and `bearer` /
//! `basic` for senders that can do nothing else. Several secrets may be in force at once
//! (rotation): a request is accepted when any one of them verifies it.
//!
//! Invariant: fail closed and constant-time. Every comparison of a secret or a MAC is
//! `subtle::ConstantTimeEq` over equal-length byte strings; a missing header, an undecodable
//! signature, a stale timestamp or no matching secret is a [`VerifyError`], never a pass.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;
use switchyard_core::standard_webhooks::{self, SigningKey};

mod sign;

/// A verification preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Preset {
    /// `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>`.
    Github,
    /// `Stripe-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>[,v1=...]`.
    Stripe,
    /// `X-Shopify-Hmac-Sha256: <base64 HMAC-SHA256(secret, body)>`.
    Shopify,
    /// Standard Webhooks v1 (`webhook-id`, `webhook-timestamp`, `webhook-signature`).
    StandardWebhooks,
    /// `X-Hub-Signature: sha1=<hex HMAC-SHA1(client_secret, body)>`.
    Intercom,
    /// HMAC-SHA256 of the body in a named header, with an optional prefix.
    HmacSha256,
    /// HMAC-SHA1 of the body in a named header, with an optional prefix.
    HmacSha1,
    /// `Authorization: Bearer <secret>`.
    Bearer,
    /// `Authorization: Basic base64(<username>:<secret>)`.
    Basic,
}

/// How a MAC is written in its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    Hex,
    Base64,
}

/// `verify = { preset = ..., secret_env = ... }` as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyConfig {
    /// Which provider's scheme.
    pub preset: Preset,
    /// The environment variable holding the secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_env: Option<String>,
    /// Several environment variables, each holding a secret in force (rotation).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_envs: Vec<String>,
    /// `hmac_sha256` / `hmac_sha1`: the header carrying the MAC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// `hmac_sha256` / `hmac_sha1`: text before the MAC in the header (e.g. `sha256=`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// `hmac_sha256` / `hmac_sha1`: how the MAC is written (default `hex`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<Encoding>,
    /// `stripe` / `standard_webhooks`: how far the signed timestamp may be from now
    /// (default 5 minutes, as both providers say).
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub tolerance: Option<Duration>,
    /// `basic`: the user name the sender presents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
}

/// A `verify` table that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyConfigError {
    #[error(
        "`verify` needs `secret_env` or `secret_envs` (a secret, named by environment variable)"
    )]
    NoSecret,
    #[error("`verify`: `{0}` must name an environment variable")]
    MalformedEnv(String),
    #[error("`verify`: preset `{preset}` needs `{key}`")]
    Needs {
        preset: &'static str,
        key: &'static str,
    },
    #[error("`verify`: `{key}` does not apply to preset `{preset}`")]
    DoesNotApply {
        preset: &'static str,
        key: &'static str,
    },
    #[error("`verify`: `tolerance` must be greater than zero")]
    ZeroTolerance,
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the request has no `{0}` header")]
    MissingHeader(String),
    #[error("the `{header}` header is malformed: {why}")]
    Malformed { header: String, why: String },
    #[error(
        "the signed timestamp is {age_secs} s from now, more than the {tolerance_secs} s tolerated"
    )]
    Stale { age_secs: i64, tolerance_secs: i64 },
    #[error("no secret in force verifies the `{0}` header")]
    Mismatch(String),
    #[error("the secret is unusable: {0}")]
    BadSecret(String),
}

impl VerifyError {
    /// A stable word for logs and answers.
    pub fn detail(&self) -> &'static str {
        match self {
            VerifyError::MissingHeader(_) => "missing_signature",
            VerifyError::Malformed { .. } => "malformed_signature",
            VerifyError::Stale { .. } => "stale_timestamp",
            VerifyError::Mismatch(_) => "bad_signature",
            VerifyError::BadSecret(_) => "bad_secret",
        }
    }
}

impl Preset {
    pub fn as_str(self) -> &'static str {
        match self {
            Preset::Github => "github",
            Preset::Stripe => "stripe",
            Preset::Shopify => "shopify",
            Preset::StandardWebhooks => "standard_webhooks",
            Preset::Intercom => "intercom",
            Preset::HmacSha256 => "hmac_sha256",
            Preset::HmacSha1 => "hmac_sha1",
            Preset::Bearer => "bearer",
            Preset::Basic => "basic",
        }
    }

    /// Whether it signs the body, so an unsigned header naming the delivery can be changed by
    /// whoever captured a request.
    pub fn signs_body_only(self) -> bool {
        !matches!(
            self,
            Preset::StandardWebhooks | Preset::Bearer | Preset::Basic
        )
    }
}

const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

impl VerifyConfig {
    /// Every environment variable named, in order.
    pub fn secret_vars(&self) -> Vec<&str> {
        self.secret_env
            .iter()
            .chain(&self.secret_envs)
            .map(String::as_str)
            .collect()
    }

    /// Checks what serde cannot: a secret, and exactly the keys the preset reads.
    pub fn validate(&self) -> Result<(), VerifyConfigError> {
        let vars = self.secret_vars();
        if vars.is_empty() {
            return Err(VerifyConfigError::NoSecret);
        }
        for var in vars {
            if var.is_empty() || var.contains(['=', '\0']) || var.chars().any(char::is_whitespace) {
                return Err(VerifyConfigError::MalformedEnv(var.to_owned()));
            }
        }
        let preset = self.preset.as_str();
        let generic = matches!(self.preset, Preset::HmacSha256 | Preset::HmacSha1);
        if generic && self.header.as_deref().is_none_or(|h| h.trim().is_empty()) {
            return Err(VerifyConfigError::Needs {
                preset,
                key: "header",
            });
        }
        for (key, set, applies) in [
            ("header", self.header.is_some(), generic),
            ("prefix", self.prefix.is_some(), generic),
            ("encoding", self.encoding.is_some(), generic),
            (
                "tolerance",
                self.tolerance.is_some(),
                matches!(self.preset, Preset::Stripe | Preset::StandardWebhooks),
            ),
            (
                "username",
                self.username.is_some(),
                self.preset == Preset::Basic,
            ),
        ] {
            if set && !applies {
                return Err(VerifyConfigError::DoesNotApply { preset, key });
            }
        }
        if self.preset == Preset::Basic && self.username.is_none() {
            return Err(VerifyConfigError::Needs {
                preset,
                key: "username",
            });
        }
        if self.tolerance.is_some_and(|t| t.is_zero()) {
            return Err(VerifyConfigError::ZeroTolerance);
        }
        Ok(())
    }

    /// The verifier with its secrets (each variable's value, in order).
    pub fn verifier(&self, secrets: Vec<String>) -> Result<Verifier, VerifyError> {
        let keys = match self.preset {
            Preset::StandardWebhooks => secrets
                .iter()
                .map(|s| SigningKey::parse(s).map_err(|e| VerifyError::BadSecret(e.to_string())))
                .collect::<Result<Vec<_>, _>>()?,
            _ => Vec::new(),
        };
        Ok(Verifier {
            config: self.clone(),
            secrets,
            keys,
        })
    }
}

/// A source's verification with its secrets in hand. `Debug` never prints a secret.
#[derive(Clone)]
pub struct Verifier {
    config: VerifyConfig,
    secrets: Vec<String>,
    keys: Vec<SigningKey>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("preset", &self.config.preset)
            .field("secrets", &self.secrets.len())
            .finish_non_exhaustive()
    }
}

/// What verification established.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verified {
    /// An id the signature covers (Standard Webhooks' `webhook-id`), when the scheme has one.
    pub signed_id: Option<String>,
}

type Header<'a> = &'a crate::template::HeaderFn<'a>;

impl Verifier {
    pub fn preset(&self) -> Preset {
        self.config.preset
    }

    /// Verifies the request (headers by case-insensitive name, the raw body) at `now_secs`.
    pub fn verify(
        &self,
        header: Header<'_>,
        body: &[u8],
        now_secs: i64,
    ) -> Result<Verified, VerifyError> {
        let tolerance = i64::try_from(self.config.tolerance.unwrap_or(DEFAULT_TOLERANCE).as_secs())
            .unwrap_or(i64::MAX);
        match self.config.preset {
            Preset::Github => self.body_mac(
                Algo::Sha256,
                header,
                body,
                "X-Hub-Signature-256",
                "sha256=",
                Encoding::Hex,
            ),
            Preset::Intercom => self.body_mac(
                Algo::Sha1,
                header,
                body,
                "X-Hub-Signature",
                "sha1=",
                Encoding::Hex,
            ),
            Preset::Shopify => self.body_mac(
                Algo::Sha256,
                header,
                body,
                "X-Shopify-Hmac-Sha256",
                "",
                Encoding::Base64,
            ),
            Preset::HmacSha256 | Preset::HmacSha1 => {
                let name = self.config.header.as_deref().unwrap_or_default();
                let prefix = self.config.prefix.as_deref().unwrap_or_default();
                let encoding = self.config.encoding.unwrap_or(Encoding::Hex);
                let algo = match self.config.preset {
                    Preset::HmacSha1 => Algo::Sha1,
                    _ => Algo::Sha256,
                };
                self.body_mac(algo, header, body, name, prefix, encoding)
            }
            Preset::Stripe => self.stripe(header, body, now_secs, tolerance),
            Preset::StandardWebhooks => {
                let id = required(header, "webhook-id")?;
                let timestamp = required(header, "webhook-timestamp")?;
                let signature = required(header, "webhook-signature")?;
                let mut last = VerifyError::Mismatch("webhook-signature".into());
                for key in &self.keys {
                    match standard_webhooks::verify(
                        key, id, timestamp, signature, body, now_secs, tolerance,
                    ) {
                        Ok(()) => {
                            return Ok(Verified {
                                signed_id: Some(id.to_owned()),
                            });
                        }
                        Err(error) => last = standard_error(error),
                    }
                }
                Err(last)
            }
            Preset::Bearer => {
                let given = required(header, "Authorization")?;
                let token =
                    strip_scheme(given, "Bearer").ok_or_else(|| VerifyError::Malformed {
                        header: "Authorization".into(),
                        why: "not `Bearer <token>`".into(),
                    })?;
                self.any_secret("Authorization", |secret| {
                    ct_eq(token.as_bytes(), secret.as_bytes())
                })
            }
            Preset::Basic => {
                let given = required(header, "Authorization")?;
                let encoded =
                    strip_scheme(given, "Basic").ok_or_else(|| VerifyError::Malformed {
                        header: "Authorization".into(),
                        why: "not `Basic <base64>`".into(),
                    })?;
                let decoded =
                    STANDARD
                        .decode(encoded.trim())
                        .map_err(|e| VerifyError::Malformed {
                            header: "Authorization".into(),
                            why: format!("not base64: {e}"),
                        })?;
                let username = self.config.username.as_deref().unwrap_or_default();
                self.any_secret("Authorization", |secret| {
                    let expected = format!("{username}:{secret}");
                    ct_eq(&decoded, expected.as_bytes())
                })
            }
        }
    }

    /// Accepted when `matches` holds for one secret; every secret is tried, so the time taken
    /// does not tell which one matched.
    fn any_secret(
        &self,
        header: &str,
        matches: impl Fn(&str) -> bool,
    ) -> Result<Verified, VerifyError> {
        let mut matched = false;
        for secret in &self.secrets {
            matched |= matches(secret);
        }
        if matched {
            Ok(Verified::default())
        } else {
            Err(VerifyError::Mismatch(header.to_owned()))
        }
    }

    /// A MAC of the body alone, in header `name` after `prefix`.
    fn body_mac(
        &self,
        algo: Algo,
        header: Header<'_>,
        body: &[u8],
        name: &str,
        prefix: &str,
        encoding: Encoding,
    ) -> Result<Verified, VerifyError> {
        let given = required(header, name)?.trim();
        let encoded = given
            .strip_prefix(prefix)
            .ok_or_else(|| VerifyError::Malformed {
                header: name.to_owned(),
                why: format!("it does not start with `{prefix}`"),
            })?;
        let given = decode(encoded, encoding)
            .and_then(|bytes| match bytes.is_empty() {
                true => Err("the signature is empty".to_owned()),
                false => Ok(bytes),
            })
            .map_err(|why| VerifyError::Malformed {
                header: name.to_owned(),
                why,
            })?;
        self.any_secret(name, |secret| {
            ct_eq(&given, &algo.mac(secret.as_bytes(), &[body]))
        })
    }

    fn stripe(
        &self,
        header: Header<'_>,
        body: &[u8],
        now_secs: i64,
        tolerance: i64,
    ) -> Result<Verified, VerifyError> {
        const NAME: &str = "Stripe-Signature";
        let value = required(header, NAME)?;
        let mut timestamp = None;
        let mut signatures = Vec::new();
        for item in value.split(',') {
            match item.trim().split_once('=') {
                Some(("t", t)) => timestamp = Some(t.trim()),
                Some(("v1", sig)) => {
                    // An undecodable entry cannot match; others may.
                    if let Ok(bytes) = hex::decode(sig.trim())
                        && !bytes.is_empty()
                    {
                        signatures.push(bytes);
                    }
                }
                _ => {}
            }
        }
        let malformed = |why: &str| VerifyError::Malformed {
            header: NAME.into(),
            why: why.into(),
        };
        let timestamp = timestamp.ok_or_else(|| malformed("no `t=` timestamp"))?;
        let seconds: i64 = timestamp
            .parse()
            .map_err(|_| malformed("`t=` is not an integer"))?;
        if signatures.is_empty() {
            return Err(malformed("no `v1=` signature"));
        }
        let age = now_secs.saturating_sub(seconds);
        if age.abs() > tolerance {
            return Err(VerifyError::Stale {
                age_secs: age,
                tolerance_secs: tolerance,
            });
        }
        self.any_secret(NAME, |secret| {
            let expected = Algo::Sha256.mac(secret.as_bytes(), &[timestamp.as_bytes(), b".", body]);
            let mut any = false;
            for given in &signatures {
                any |= ct_eq(given, &expected);
            }
            any
        })
    }
}

/// The hash an HMAC preset uses.
#[derive(Debug, Clone, Copy)]
enum Algo {
    Sha256,
    Sha1,
}

impl Algo {
    /// The MAC of `parts`, concatenated, under `key` (HMAC takes keys of any length).
    fn mac(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
            let Ok(mut mac) = <M as hmac::digest::KeyInit>::new_from_slice(key) else {
                return Vec::new();
            };
            for part in parts {
                mac.update(part);
            }
            mac.finalize().into_bytes().to_vec()
        }
        match self {
            Algo::Sha256 => run::<Hmac<sha2::Sha256>>(key, parts),
            Algo::Sha1 => run::<Hmac<sha1::Sha1>>(key, parts),
        }
    }
}

fn required<'h>(header: Header<'h>, name: &str) -> Result<&'h str, VerifyError> {
    header(name).ok_or_else(|| VerifyError::MissingHeader(name.to_owned()))
}

fn strip_scheme<'v>(value: &'v str, scheme: &str) -> Option<&'v str> {
    let (given, rest) = value.trim().split_once(' ')?;
    given.eq_ignore_ascii_case(scheme).then_some(rest.trim())
}

fn decode(encoded: &str, encoding: Encoding) -> Result<Vec<u8>, String> {
    match encoding {
        Encoding::Hex => hex::decode(encoded.trim()).map_err(|e| format!("not hex: {e}")),
        Encoding::Base64 => STANDARD
            .decode(encoded.trim())
            .map_err(|e| format!("not base64: {e}")),
    }
}

/// Equal lengths compared in constant time; unequal lengths are unequal (the length of a MAC
/// or a token is no secret).
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

fn standard_error(error: standard_webhooks::SignatureError) -> VerifyError {
    use standard_webhooks::SignatureError as E;
    match error {
        E::TimestampTooOld {
            age_secs,
            tolerance_secs,
        } => VerifyError::Stale {
            age_secs,
            tolerance_secs,
        },
        E::TimestampInFuture {
            ahead_secs,
            tolerance_secs,
        } => VerifyError::Stale {
            age_secs: -ahead_secs,
            tolerance_secs,
        },
        E::InvalidTimestamp { value, .. } => VerifyError::Malformed {
            header: "webhook-timestamp".into(),
            why: format!("`{value}` is not an integer"),
        },
        E::NoV1Signature => VerifyError::Malformed {
            header: "webhook-signature".into(),
            why: "no `v1,` signature".into(),
        },
        other => VerifyError::Mismatch(format!("webhook-signature ({other})")),
    }
}
