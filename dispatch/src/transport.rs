//! The seam between the dispatcher and the ways a run can leave: one object-safe trait, one
//! attempt record.

use std::time::Duration;

use futures::future::BoxFuture;

use crate::schedule::RetryHint;

/// How much of a response body an [`Attempt`] keeps.
pub const EXCERPT_LIMIT: usize = 4096;

/// What one transport is handed for one attempt.
#[derive(Debug, Clone, Copy)]
pub struct Outbound<'a> {
    /// The dispatch id, stable across attempts (`webhook-id`, `Nats-Msg-Id`).
    pub id: &'a str,
    /// Tenant of the run.
    pub tenant_id: &'a str,
    /// Workflow of the run.
    pub workflow_id: &'a str,
    /// The serialised [`crate::RunMessage`].
    pub body: &'a [u8],
    /// W3C `traceparent`, sent as a header when present.
    pub traceparent: Option<&'a str>,
    /// W3C `tracestate`, sent as a header with the `traceparent` when present.
    pub tracestate: Option<&'a str>,
}

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptResult {
    /// The target has the message.
    Delivered,
    /// Try again later; the hint adjusts the schedule.
    Retry(RetryHint),
    /// Do not try again.
    Rejected(Rejection),
}

/// Why a target refused for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// A 4xx other than the retryable ones.
    Rejected4xx,
    /// 410 Gone: the endpoint no longer exists.
    TargetGone,
}

impl Rejection {
    /// The stable name stored in rows and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Rejection::Rejected4xx => "rejected_4xx",
            Rejection::TargetGone => "target_gone",
        }
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One attempt as it is recorded.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The classification the dispatcher acts on.
    pub result: AttemptResult,
    /// HTTP status, when there was a response.
    pub status: Option<u16>,
    /// First 4 KiB of the response body, lossy UTF-8.
    pub response_excerpt: Option<String>,
    /// Network error, timeout or NATS error, in words.
    pub error: Option<String>,
    /// Wall time of the attempt.
    pub duration: Duration,
}

impl Attempt {
    /// An attempt that failed before any response, to be retried.
    pub(crate) fn failed(hint: RetryHint, error: String, duration: Duration) -> Self {
        Attempt {
            result: AttemptResult::Retry(hint),
            status: None,
            response_excerpt: None,
            error: Some(error),
            duration,
        }
    }
}

/// A way to deliver a run message. Object-safe: the dispatcher holds `Arc<dyn Transport>`.
///
/// `deliver` never fails as a `Result`: every outcome, including network errors, is an
/// [`Attempt`] to record.
pub trait Transport: Send + Sync + std::fmt::Debug {
    /// Makes one attempt.
    fn deliver<'a>(&'a self, out: Outbound<'a>) -> BoxFuture<'a, Attempt>;
}

/// An error and its sources in one line ("a: b: c"), for [`Attempt::error`].
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        // reqwest and hyper repeat their inner error in their own message sometimes.
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
