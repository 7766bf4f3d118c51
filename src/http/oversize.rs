//! Refuses a body whose declared `Content-Length` is over the limit before it reaches a handler,
//! and makes sure the client can read that refusal. Invariant: nothing of an oversize body is
//! kept; at most `DRAIN_FACTOR` limits of it are read and discarded, within the body read timeout.

use axum::body::Body;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;

use super::ApiError;

/// Oversize bodies up to this many limits long are read and thrown away before the 413 is sent;
/// longer ones are refused at once.
const DRAIN_FACTOR: u64 = 16;

/// Answers 413 for a declared body over `limit` (the body limit alone would read up to the
/// limit first). A client that sent its body without waiting for `100 Continue` is still
/// writing it: closing the socket under unread bytes resets the connection, and the client sees
/// a broken pipe instead of the answer. So a body within `DRAIN_FACTOR` limits is read to its end
/// and discarded first, the way a lingering close does, bounded by `read_timeout`.
pub(super) async fn refuse_declared_oversize<Fut: Future<Output = Response>>(
    request: axum::extract::Request,
    limit: usize,
    read_timeout: std::time::Duration,
    next: impl FnOnce(axum::extract::Request) -> Fut,
) -> Response {
    let declared = match declared_length(request.headers()) {
        Some(declared) if declared > limit as u64 => declared,
        _ => return next(request).await,
    };
    if !waits_for_continue(request.headers()) && declared <= limit as u64 * DRAIN_FACTOR {
        let drained = tokio::time::timeout(read_timeout, discard(request.into_body())).await;
        if drained.is_err() {
            tracing::debug!(
                declared,
                "an oversize body did not arrive in time to be discarded"
            );
        }
    }
    ApiError::TooLarge { limit }.into_response()
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// A client sending `Expect: 100-continue` waits for the answer before it sends the body.
fn waits_for_continue(headers: &HeaderMap) -> bool {
    headers
        .get(header::EXPECT)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.eq_ignore_ascii_case("100-continue"))
}

/// Reads a body frame by frame and keeps none of it.
async fn discard(mut body: Body) {
    while let Some(frame) = body.frame().await {
        if frame.is_err() {
            return;
        }
    }
}
