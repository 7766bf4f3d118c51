//! `[[token]]` entries: named bearer tokens, each with scopes and an optional tenant limit.
//! `server.api_token_env` stays as one more token with every scope and no limit.
//!
//! Invariant: a token's secret is only ever held resolved in memory and compared in constant
//! time; names, scopes and tenants are what logs, revisions and the console show.

use std::collections::{BTreeSet, HashSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::EnvLookup;

/// What a token may do. `admin` includes every other scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Scope {
    /// `POST /v1/events`.
    #[serde(rename = "events:write")]
    EventsWrite,
    /// Every listing and read of the admin API and the console; `/metrics`.
    #[serde(rename = "read")]
    Read,
    /// `GET /metrics` and nothing else: what a Prometheus scraper's token needs.
    #[serde(rename = "metrics")]
    Metrics,
    /// The original bytes of deliveries (`GET /v1/raw/{id}`, the console's reveal).
    #[serde(rename = "raw:read")]
    RawRead,
    /// Heartbeat, finish, redispatch and pull claims.
    #[serde(rename = "runs:write")]
    RunsWrite,
    /// Everything the other scopes allow.
    #[serde(rename = "admin")]
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 6] = [
        Scope::EventsWrite,
        Scope::Read,
        Scope::Metrics,
        Scope::RawRead,
        Scope::RunsWrite,
        Scope::Admin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::EventsWrite => "events:write",
            Scope::Read => "read",
            Scope::Metrics => "metrics",
            Scope::RawRead => "raw:read",
            Scope::RunsWrite => "runs:write",
            Scope::Admin => "admin",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `[[token]]` as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// Unique among tokens; what logs and the console call the caller.
    pub name: String,
    /// Environment variable holding the token's secret.
    pub secret_env: String,
    /// Any of `events:write`, `read`, `metrics`, `raw:read`, `runs:write`, `admin`.
    pub scopes: Vec<Scope>,
    /// Only these tenants' rows (ledger, runs, locks, raw bytes, claims); absent: every tenant.
    #[serde(default)]
    pub tenants: Option<Vec<String>>,
}

/// A token with its secret looked up.
#[derive(Clone)]
pub struct ResolvedToken {
    pub name: String,
    pub secret: String,
    pub scopes: BTreeSet<Scope>,
    /// `None`: every tenant.
    pub tenants: Option<BTreeSet<String>>,
}

impl fmt::Debug for ResolvedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolvedToken")
            .field("name", &self.name)
            .field("secret", &"***")
            .field("scopes", &self.scopes)
            .field("tenants", &self.tenants)
            .finish()
    }
}

/// The name of the all-scopes token of `server.api_token_env`.
pub const API_TOKEN_NAME: &str = "api_token";

/// The shortest secret a token may have, in bytes: shorter ones can be guessed (`openssl rand
/// -hex 32` makes a good one).
pub const MIN_SECRET_BYTES: usize = 16;

/// The refusal of a secret shorter than [`MIN_SECRET_BYTES`], naming the token, never the
/// secret or its length.
fn too_short(token: &str, secret: &str) -> Option<String> {
    (secret.len() < MIN_SECRET_BYTES).then(|| {
        format!(
            "{token} is shorter than {MIN_SECRET_BYTES} bytes: a token must be at least \
             {MIN_SECRET_BYTES} bytes to be secret (make one with `openssl rand -hex 32`)"
        )
    })
}

/// Problems with the tokens' shape (no secrets needed): duplicate names, empty scopes or
/// tenant lists.
pub fn problems(tokens: &[TokenConfig]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut names = HashSet::new();
    for token in tokens {
        if token.name.trim().is_empty() {
            problems.push("a [[token]] has an empty `name`".into());
        } else if token.name == API_TOKEN_NAME {
            problems.push(format!(
                "token name `{API_TOKEN_NAME}` is reserved for server.api_token_env"
            ));
        }
        if !names.insert(token.name.as_str()) {
            problems.push(format!("token `{}` is defined more than once", token.name));
        }
        if token.scopes.is_empty() {
            problems.push(format!(
                "token `{}` has no `scopes` (any of {})",
                token.name,
                Scope::ALL.map(Scope::as_str).join(", ")
            ));
        }
        match &token.tenants {
            Some(tenants) if tenants.is_empty() => problems.push(format!(
                "token `{}` has an empty `tenants` list (leave it out for every tenant)",
                token.name
            )),
            Some(tenants) if tenants.iter().any(|t| t.trim().is_empty()) => problems.push(format!(
                "token `{}` lists a blank tenant in `tenants`",
                token.name
            )),
            _ => {}
        }
    }
    problems
}

/// Looks up every token's secret; an unset variable, a secret shorter than
/// [`MIN_SECRET_BYTES`] (also the API token's) or a secret used twice (also with the API token)
/// is an error naming the tokens, never the secret.
pub fn resolve(
    tokens: &[TokenConfig],
    api_token: &str,
    env: EnvLookup<'_>,
) -> Result<Vec<ResolvedToken>, Vec<String>> {
    let mut problems = Vec::new();
    problems.extend(too_short(
        &format!("the admin token (server.api_token_env, `{API_TOKEN_NAME}`)"),
        api_token,
    ));
    let mut resolved: Vec<ResolvedToken> = Vec::new();
    for token in tokens {
        let Some(secret) = env(&token.secret_env) else {
            problems.push(format!(
                "token `{}`: secret_env names `{}`, which is not set",
                token.name, token.secret_env
            ));
            continue;
        };
        problems.extend(too_short(
            &format!("token `{}` (secret_env `{}`)", token.name, token.secret_env),
            &secret,
        ));
        if secret == api_token {
            problems.push(format!(
                "token `{}` has the same secret as server.api_token_env: every token needs its own",
                token.name
            ));
        }
        if let Some(other) = resolved.iter().find(|t| t.secret == secret) {
            problems.push(format!(
                "tokens `{}` and `{}` have the same secret: every token needs its own",
                other.name, token.name
            ));
        }
        resolved.push(ResolvedToken {
            name: token.name.clone(),
            secret,
            scopes: token.scopes.iter().copied().collect(),
            tenants: token.tenants.as_ref().map(|t| t.iter().cloned().collect()),
        });
    }
    if problems.is_empty() {
        Ok(resolved)
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(name: &str, env: &str, scopes: &[Scope]) -> TokenConfig {
        TokenConfig {
            name: name.into(),
            secret_env: env.into(),
            scopes: scopes.to_vec(),
            tenants: None,
        }
    }

    #[test]
    fn duplicate_names_empty_scopes_and_empty_tenant_lists_are_problems() {
        let mut empty_tenants = token("c", "C", &[Scope::Read]);
        empty_tenants.tenants = Some(vec![]);
        let found = problems(&[
            token("a", "A", &[Scope::Read]),
            token("a", "B", &[Scope::Read]),
            token("b", "B", &[]),
            empty_tenants,
            token(API_TOKEN_NAME, "D", &[Scope::Read]),
        ]);
        let text = found.join("\n");
        assert!(
            text.contains("token `a` is defined more than once"),
            "{text}"
        );
        assert!(text.contains("token `b` has no `scopes`"), "{text}");
        assert!(
            text.contains("token `c` has an empty `tenants` list"),
            "{text}"
        );
        assert!(text.contains("`api_token` is reserved"), "{text}");
    }

    #[test]
    fn unset_and_shared_secrets_are_refused_without_naming_the_secret() {
        let env = |name: &str| match name {
            "A" | "B" => Some("same-secret".to_owned()),
            "API" => Some("api-secret".to_owned()),
            "C" => Some("api-secret".to_owned()),
            _ => None,
        };
        let errors = resolve(
            &[
                token("a", "A", &[Scope::Read]),
                token("b", "B", &[Scope::Read]),
                token("c", "C", &[Scope::Read]),
                token("d", "D", &[Scope::Read]),
            ],
            "api-secret",
            &env,
        )
        .expect_err("refused");
        let text = errors.join("\n");
        assert!(
            text.contains("tokens `a` and `b` have the same secret"),
            "{text}"
        );
        assert!(
            text.contains("token `c` has the same secret as server.api_token_env"),
            "{text}"
        );
        assert!(
            text.contains("secret_env names `D`, which is not set"),
            "{text}"
        );
        assert!(
            !text.contains("same-secret") && !text.contains("api-secret"),
            "{text}"
        );
    }

    #[test]
    fn secrets_shorter_than_the_minimum_are_refused_naming_the_token() {
        let env = |name: &str| match name {
            "SHORT" => Some("x".to_owned()),
            "LONG" => Some("a-long-enough-secret".to_owned()),
            _ => None,
        };
        let tokens = [
            token("short", "SHORT", &[Scope::Read]),
            token("long", "LONG", &[Scope::Read]),
        ];
        let text = resolve(&tokens, "t", &env).expect_err("refused").join("\n");
        assert!(
            text.contains("token `short` (secret_env `SHORT`) is shorter than 16 bytes"),
            "{text}"
        );
        assert!(
            text.contains("the admin token (server.api_token_env, `api_token`) is shorter"),
            "{text}"
        );
        assert!(!text.contains("`long`"), "{text}");
        let resolved = resolve(&tokens[1..], "0123456789abcdef", &env).expect("16 bytes will do");
        assert_eq!(resolved.len(), 1);
    }
}
