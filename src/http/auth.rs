//! Who is calling: the bearer token that guards `/v1/events` and the admin API becomes a
//! [`Principal`] with scopes and an optional tenant limit, which every handler checks.
//!
//! Invariant: a handler reaches tenant rows only through [`Principal::tenant_filter`] or after
//! [`Principal::sees`]; a row of another tenant is answered 404, as if it did not exist. A
//! tenant-limited caller never reads another tenant's name ([`Principal::visible_tenants`]).
//! Failed tokens are counted per client address in [`throttle`].

pub mod sessions;
mod throttle;

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::StatusCode;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

use super::{ApiError, AppState};
use crate::config::{API_TOKEN_NAME, Scope};
use crate::live::Live;

pub use throttle::{FailureThrottle, guard as throttle_failures};

/// An authenticated caller.
#[derive(Debug, Clone)]
pub struct Principal {
    /// The token's name (`api_token` for `server.api_token_env`).
    pub name: String,
    scopes: Arc<BTreeSet<Scope>>,
    /// `None`: every tenant.
    tenants: Option<Arc<BTreeSet<String>>>,
}

impl Principal {
    /// The token whose secret is `presented`, if any. Every configured secret is compared, in
    /// constant time, so the answer's timing says nothing about which one nearly matched.
    pub fn authenticate(live: &Live, presented: &str) -> Option<Principal> {
        let presented = presented.as_bytes();
        let mut found = None;
        if bool::from(presented.ct_eq(live.settings.api_token.as_bytes())) {
            found = Some(Principal {
                name: API_TOKEN_NAME.to_owned(),
                scopes: Arc::new(BTreeSet::from([Scope::Admin])),
                tenants: None,
            });
        }
        for token in &live.settings.tokens {
            if bool::from(presented.ct_eq(token.secret.as_bytes())) && found.is_none() {
                found = Some(Principal {
                    name: token.name.clone(),
                    scopes: Arc::new(token.scopes.clone()),
                    tenants: token.tenants.clone().map(Arc::new),
                });
            }
        }
        found
    }

    /// Whether the token carries `scope` (or `admin`).
    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.contains(&Scope::Admin) || self.scopes.contains(&scope)
    }

    /// 403 naming the scope when the token lacks it.
    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        if self.has(scope) {
            Ok(())
        } else {
            Err(ApiError::Refused {
                status: StatusCode::FORBIDDEN,
                error: "missing_scope",
                detail: format!("token `{}` lacks the `{scope}` scope this needs", self.name),
            })
        }
    }

    /// 403 unless the token may see every tenant (for what spans all of them, like metrics).
    pub fn require_every_tenant(&self, what: &str) -> Result<(), ApiError> {
        if self.tenants.is_none() {
            Ok(())
        } else {
            Err(ApiError::Refused {
                status: StatusCode::FORBIDDEN,
                error: "tenant_limited",
                detail: format!(
                    "token `{}` is limited to some tenants; {what} covers every tenant",
                    self.name
                ),
            })
        }
    }

    /// Whether the caller is limited to no tenants.
    pub fn sees_every_tenant(&self) -> bool {
        self.tenants.is_none()
    }

    /// Whether a row of `tenant` is visible to this caller.
    pub fn sees(&self, tenant: &str) -> bool {
        self.tenants.as_ref().is_none_or(|t| t.contains(tenant))
    }

    /// Of `tenants` (a shared source's, say), the ones this caller may see: the others' names
    /// are not shown to a tenant-limited caller.
    pub fn visible_tenants<'a>(&self, tenants: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
        tenants.into_iter().filter(|t| self.sees(t)).collect()
    }

    /// The tenants a listing may show: `None` for every tenant, else the list (empty when the
    /// caller asked for a tenant it may not see, so the answer is an empty page, not a 403
    /// that would confirm the tenant exists).
    pub fn tenant_filter(&self, requested: Option<&str>) -> Option<Vec<String>> {
        match (requested, &self.tenants) {
            (None, None) => None,
            (Some(tenant), None) => Some(vec![tenant.to_owned()]),
            (None, Some(allowed)) => Some(allowed.iter().cloned().collect()),
            (Some(tenant), Some(allowed)) => Some(
                allowed
                    .contains(tenant)
                    .then(|| tenant.to_owned())
                    .into_iter()
                    .collect(),
            ),
        }
    }

    /// The tenant limit, if any.
    pub fn tenants(&self) -> Option<&BTreeSet<String>> {
        self.tenants.as_deref()
    }

    /// The token's scopes as written (for the console's header).
    pub fn scopes(&self) -> impl Iterator<Item = Scope> + '_ {
        self.scopes.iter().copied()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Principal>()
            .cloned()
            .ok_or(ApiError::Unauthorized("missing bearer token"))
    }
}

/// Refuses requests without `Authorization: Bearer <token>` naming a configured token (401),
/// and hands the handlers the [`Principal`] it names. Tokens are read from the revision in
/// force, so a reload adds, changes or revokes them at once.
pub async fn require_api_token(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let presented = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(bearer_token)
        .ok_or(ApiError::Unauthorized("missing bearer token"))?;
    let principal = Principal::authenticate(&state.live.current(), presented)
        .ok_or(ApiError::Unauthorized("wrong bearer token"))?;
    request.extensions_mut().insert(principal);
    Ok(next.run(request).await)
}

/// The caller of a request that may also prove itself another way (a CloudEvents source's
/// signature): `None` without a bearer token, `Some(None)` for a token that is not configured.
pub(crate) fn bearer_principal(
    headers: &axum::http::HeaderMap,
    live: &crate::live::Live,
) -> Option<Option<Principal>> {
    let presented = headers
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(bearer_token)?;
    Some(Principal::authenticate(live, presented))
}

/// The token of an `Authorization: Bearer <token>` value; the scheme is case-insensitive
/// (RFC 9110 section 11.1).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start())
        .filter(|token| !token.is_empty())
}

#[cfg(test)]
mod tests {
    use super::bearer_token;

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for (value, expected) in [
            ("Bearer abc", Some("abc")),
            ("bearer abc", Some("abc")),
            ("BEARER  abc", Some("abc")),
            ("Basic abc", None),
            ("Bearer ", None),
            ("Bearerabc", None),
        ] {
            assert_eq!(bearer_token(value), expected, "{value:?}");
        }
    }
}
