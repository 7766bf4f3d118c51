//! `[[target]]` entries: where routed runs are delivered (`kind = "http" | "nats" | "pull"`).
//! Workflows name one by `target`; without it they use the built-in pull target
//! [`BUILTIN_PULL`], so configs written before dispatch keep working.

use std::net::IpAddr;
use std::time::Duration;

use serde::Deserialize;

use super::EnvLookup;

/// The target of workflows that name none: runs wait for a worker to claim them.
pub const BUILTIN_PULL: &str = "pull";

/// The default retry schedule after the first attempt (Svix's, without its first step).
pub const DEFAULT_RETRY: [&str; 7] = ["5s", "5m", "30m", "2h", "5h", "10h", "10h"];

/// One target as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TargetConfig {
    /// POST each run to a worker's URL, signed per Standard Webhooks.
    Http(HttpTargetConfig),
    /// Publish each run to a NATS JetStream subject.
    Nats(NatsTargetConfig),
    /// Workers claim runs with `POST /v1/claims`.
    Pull(PullTargetConfig),
}

/// `kind = "http"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpTargetConfig {
    /// Unique among targets; workflows name it.
    pub name: String,
    /// Where runs are POSTed. Plain `http://` only on loopback, unless `allow_plain_http`.
    pub url: String,
    /// Environment variable holding the signing secret (`whsec_...`); several variables may be
    /// listed during a key rotation (`signing_secret_envs`).
    #[serde(default)]
    pub signing_secret_env: Option<String>,
    /// More secrets to sign with at once while a worker rotates keys.
    #[serde(default)]
    pub signing_secret_envs: Vec<String>,
    /// Send unsigned requests (flagged by `check` and at start, like unsigned sources).
    #[serde(default)]
    pub insecure_skip_signature: bool,
    /// Allow a plain-http URL outside loopback.
    #[serde(default)]
    pub allow_plain_http: bool,
    /// Request timeout (default 15s).
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// Delays before each retry; the run is dead-lettered after the last (default
    /// 5s, 5m, 30m, 2h, 5h, 10h, 10h, each with +-20% jitter).
    #[serde(default = "default_retry")]
    pub retry: Vec<String>,
    /// Concurrent requests to this target (default 64).
    #[serde(default = "default_in_flight")]
    pub max_in_flight: usize,
    /// Retry 4xx answers other than 408, 425, 429 and 410 instead of dead-lettering at once.
    #[serde(default)]
    pub retry_on_4xx: bool,
}

/// `kind = "nats"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsTargetConfig {
    /// Unique among targets; workflows name it.
    pub name: String,
    /// `nats://host:port`.
    pub url: String,
    /// Subject per run; `{tenant}` and `{workflow}` are replaced.
    pub subject: String,
    /// The JetStream stream that captures the subject.
    pub stream: String,
    /// Create the stream at first contact when it does not exist.
    #[serde(default)]
    pub create_stream: bool,
    /// Delays before each retry while NATS is unreachable (default as for http).
    #[serde(default = "default_retry")]
    pub retry: Vec<String>,
}

/// `kind = "pull"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PullTargetConfig {
    /// Unique among targets; workflows name it.
    pub name: String,
    /// How long a claim lasts without `extend` before the run goes back to pending (default 60s).
    #[serde(default = "default_claim_ttl", with = "humantime_serde")]
    pub claim_ttl: Duration,
    /// Claims a run may go through (released or expired) before it is dead-lettered
    /// (default 20).
    #[serde(default = "default_max_claims")]
    pub max_claims: u32,
}

fn default_timeout() -> Duration {
    Duration::from_secs(15)
}
fn default_retry() -> Vec<String> {
    DEFAULT_RETRY.iter().map(|s| (*s).to_owned()).collect()
}
fn default_in_flight() -> usize {
    64
}
fn default_claim_ttl() -> Duration {
    Duration::from_secs(60)
}
fn default_max_claims() -> u32 {
    20
}

impl PullTargetConfig {
    /// The target workflows get when they name none.
    pub fn builtin() -> Self {
        Self {
            name: BUILTIN_PULL.to_owned(),
            claim_ttl: default_claim_ttl(),
            max_claims: default_max_claims(),
        }
    }
}

impl TargetConfig {
    pub fn kind(&self) -> &'static str {
        match self {
            TargetConfig::Http(_) => "http",
            TargetConfig::Nats(_) => "nats",
            TargetConfig::Pull(_) => "pull",
        }
    }

    pub fn name(&self) -> &str {
        match self {
            TargetConfig::Http(c) => &c.name,
            TargetConfig::Nats(c) => &c.name,
            TargetConfig::Pull(c) => &c.name,
        }
    }

    /// Whether runs are pushed by the dispatcher (http, nats) rather than claimed.
    pub fn is_push(&self) -> bool {
        !matches!(self, TargetConfig::Pull(_))
    }

    /// The retry steps of a push target (none for pull, whose claims count instead).
    pub fn retry(&self) -> &[String] {
        match self {
            TargetConfig::Http(c) => &c.retry,
            TargetConfig::Nats(c) => &c.retry,
            TargetConfig::Pull(_) => &[],
        }
    }

    /// Everything wrong with this target, each naming it.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let name = self.name();
        let kind = self.kind();
        if name.trim().is_empty() || name.len() > crate::store::MAX_KEY_LEN {
            problems.push(format!(
                "{kind} target `{name}`: `name` must be 1 to {} bytes",
                crate::store::MAX_KEY_LEN
            ));
        }
        for (index, step) in self.retry().iter().enumerate() {
            match humantime::parse_duration(step) {
                Ok(delay) if delay.is_zero() => problems.push(format!(
                    "{kind} target `{name}`: retry step {} (`{step}`) must be longer than 0s",
                    index + 1
                )),
                Ok(_) => {}
                Err(error) => problems.push(format!(
                    "{kind} target `{name}`: retry step {} (`{step}`) is not a duration: {error}",
                    index + 1
                )),
            }
        }
        match self {
            TargetConfig::Http(http) => problems.extend(http.problems()),
            TargetConfig::Nats(nats) => {
                if !nats.url.starts_with("nats://") && !nats.url.starts_with("tls://") {
                    problems.push(format!(
                        "nats target `{name}`: `url` must start with nats:// or tls://"
                    ));
                }
                if nats.subject.trim().is_empty() || nats.subject.contains(char::is_whitespace) {
                    problems.push(format!(
                        "nats target `{name}`: `subject` must be a NATS subject without spaces"
                    ));
                }
                if nats.stream.trim().is_empty()
                    || nats.stream.contains(['.', '*', '>', ' ', '/', '\\'])
                {
                    problems.push(format!(
                        "nats target `{name}`: `stream` must be a stream name (no '.', '*', '>', \
                         spaces or slashes)"
                    ));
                }
            }
            TargetConfig::Pull(pull) => {
                if pull.claim_ttl.is_zero() {
                    problems.push(format!(
                        "pull target `{name}`: `claim_ttl` must be longer than 0s"
                    ));
                }
                if pull.max_claims == 0 {
                    problems.push(format!(
                        "pull target `{name}`: `max_claims` must be at least 1"
                    ));
                }
            }
        }
        problems
    }

    /// Looks up the target's secrets; a missing variable fails closed.
    pub fn resolve(&self, env: EnvLookup<'_>) -> Result<ResolvedTarget, String> {
        Ok(match self {
            TargetConfig::Http(config) => {
                let mut secrets = Vec::new();
                for var in config.secret_envs() {
                    let secret = env(var).ok_or_else(|| {
                        format!(
                            "http target `{}`: environment variable `{var}` is not set",
                            config.name
                        )
                    })?;
                    if let Err(error) = switchyard_dispatch::SigningKey::parse(&secret) {
                        return Err(format!(
                            "http target `{}`: `{var}` is not a Standard Webhooks secret \
                             (whsec_ followed by base64 of 24 to 64 bytes): {error}",
                            config.name
                        ));
                    }
                    secrets.push(secret);
                }
                ResolvedTarget::Http {
                    config: config.clone(),
                    secrets,
                }
            }
            TargetConfig::Nats(config) => ResolvedTarget::Nats(config.clone()),
            TargetConfig::Pull(config) => ResolvedTarget::Pull(config.clone()),
        })
    }
}

impl HttpTargetConfig {
    /// The variables holding signing secrets, first the primary one.
    pub fn secret_envs(&self) -> impl Iterator<Item = &String> {
        self.signing_secret_env
            .iter()
            .chain(&self.signing_secret_envs)
    }

    fn problems(&self) -> Vec<String> {
        let name = &self.name;
        let mut problems = Vec::new();
        let signed = self.secret_envs().next().is_some();
        if !signed && !self.insecure_skip_signature {
            problems.push(format!(
                "http target `{name}` has no `signing_secret_env`: workers could not tell its \
                 requests from forgeries (set `insecure_skip_signature = true` to send unsigned \
                 requests anyway)"
            ));
        }
        if signed && self.insecure_skip_signature {
            problems.push(format!(
                "http target `{name}`: `insecure_skip_signature` contradicts `signing_secret_env`"
            ));
        }
        match url_host(&self.url) {
            None => problems.push(format!(
                "http target `{name}`: `url` `{}` must be an http:// or https:// URL with a host",
                self.url
            )),
            Some((false, host)) if !self.allow_plain_http && !is_loopback(&host) => {
                problems.push(format!(
                    "http target `{name}`: `url` `{}` is plain http outside loopback: runs would \
                     cross the network unencrypted (use https, or `allow_plain_http = true`)",
                    self.url
                ))
            }
            Some(_) => {}
        }
        if self.timeout.is_zero() {
            problems.push(format!(
                "http target `{name}`: `timeout` must be longer than 0s"
            ));
        }
        if self.max_in_flight == 0 {
            problems.push(format!(
                "http target `{name}`: `max_in_flight` must be at least 1"
            ));
        }
        problems
    }
}

/// `(is_https, host)` of an http(s) URL.
pub(super) fn url_host(url: &str) -> Option<(bool, String)> {
    let (https, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else {
        (false, url.strip_prefix("http://")?)
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit('@').next()?;
    let host = if let Some(bracketed) = host_port.strip_prefix('[') {
        bracketed.split(']').next()?.to_owned()
    } else {
        host_port.split(':').next()?.to_owned()
    };
    (!host.is_empty()).then_some((https, host))
}

pub(super) fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// A target with its secrets in hand.
#[derive(Clone)]
pub enum ResolvedTarget {
    Http {
        config: HttpTargetConfig,
        /// Empty only with `insecure_skip_signature = true`.
        secrets: Vec<String>,
    },
    Nats(NatsTargetConfig),
    Pull(PullTargetConfig),
}

impl ResolvedTarget {
    pub fn kind(&self) -> &'static str {
        match self {
            ResolvedTarget::Http { .. } => "http",
            ResolvedTarget::Nats(_) => "nats",
            ResolvedTarget::Pull(_) => "pull",
        }
    }

    pub fn name(&self) -> &str {
        match self {
            ResolvedTarget::Http { config, .. } => &config.name,
            ResolvedTarget::Nats(config) => &config.name,
            ResolvedTarget::Pull(config) => &config.name,
        }
    }
}

impl std::fmt::Debug for ResolvedTarget {
    // Secrets never reach logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResolvedTarget::Http { config, .. } => f.debug_tuple("Http").field(config).finish(),
            ResolvedTarget::Nats(config) => f.debug_tuple("Nats").field(config).finish(),
            ResolvedTarget::Pull(config) => f.debug_tuple("Pull").field(config).finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_is_refused_outside_loopback() {
        for (url, plain_outside) in [
            ("http://127.0.0.1:9000/x", false),
            ("http://localhost/x", false),
            ("http://[::1]:80/", false),
            ("https://workers.example/x", false),
            ("http://workers.example/x", true),
            ("http://10.0.0.1/x", true),
        ] {
            let host = url_host(url);
            let refused = matches!(&host, Some((false, h)) if !is_loopback(h));
            assert_eq!(refused, plain_outside, "{url}: {host:?}");
        }
        assert_eq!(url_host("ftp://x"), None);
        assert_eq!(url_host("http:///nohost"), None);
    }
}
