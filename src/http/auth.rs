//! The bearer token that guards `/v1/events` and the admin API.

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

use super::{ApiError, AppState};

/// Refuses requests without `Authorization: Bearer <token>` matching the configured token.
pub async fn require_api_token(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let presented = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(bearer_token)
        .ok_or(ApiError::Unauthorized("missing bearer token"))?;
    let live = state.live.current();
    let expected = live.settings.api_token.as_bytes();
    if !bool::from(presented.as_bytes().ct_eq(expected)) {
        return Err(ApiError::Unauthorized("wrong bearer token"));
    }
    Ok(next.run(request).await)
}

/// Whether the request presents the daemon's API token: `None` when it presents no bearer
/// token at all, so a caller can fall back to another proof (a signature).
pub(super) fn presents_api_token(
    headers: &axum::http::HeaderMap,
    live: &crate::live::Live,
) -> Option<bool> {
    let presented = headers
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(bearer_token)?;
    Some(bool::from(
        presented
            .as_bytes()
            .ct_eq(live.settings.api_token.as_bytes()),
    ))
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
