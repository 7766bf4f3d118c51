//! The server's limits on every request, as one middleware: the failure throttle
//! (`auth::throttle`), then the refusal of a declared oversize body (`oversize`), then the
//! deadline over the body (`body_deadline`), each a step that hands the request on to the next.
//!
//! One layer, not three: axum gives each layer a boxed future and a copy of the service under
//! it for every request, about 3,700 instructions per layer per answer (BENCHMARKS.md round 23).
//!
//! Invariant: every request passes the three steps in this order, and a step that refuses the
//! request ends it there.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::auth::FailureThrottle;
use super::{body_deadline, oversize};

/// What the steps need: the throttle's table, the body limit and the body read timeout. Shared
/// (`Arc`), as axum copies a middleware's state for every request.
#[derive(Debug)]
pub(super) struct Limits {
    pub throttle: FailureThrottle,
    pub body_limit: usize,
    pub body_read_timeout: Duration,
}

/// The middleware (`axum::middleware::from_fn_with_state`).
pub(super) async fn enforce(
    State(limits): State<Arc<Limits>>,
    request: Request,
    next: Next,
) -> Response {
    let (throttle, body_limit, body_read_timeout) = (
        &limits.throttle,
        limits.body_limit,
        limits.body_read_timeout,
    );
    super::auth::throttle_failures(throttle, request, |request| {
        oversize::refuse_declared_oversize(request, body_limit, body_read_timeout, |request| {
            body_deadline::bound(request, body_read_timeout, |request| next.run(request))
        })
    })
    .await
}
