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
        .and_then(|value| value.strip_prefix("Bearer "))
        .ok_or(ApiError::Unauthorized("missing bearer token"))?;
    let live = state.live.current();
    let expected = live.settings.api_token.as_bytes();
    if !bool::from(presented.as_bytes().ct_eq(expected)) {
        return Err(ApiError::Unauthorized("wrong bearer token"));
    }
    Ok(next.run(request).await)
}
