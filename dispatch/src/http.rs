//! The `http` transport: a signed CloudEvents POST (Standard Webhooks headers), redirects not
//! followed, concurrency capped per target. Requests go through hyper's pooled client
//! (keep-alive HTTP/1.1, TLS by rustls with the webpki roots); the whole attempt, from connect
//! to the kept part of the body, is bounded by the target's timeout.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER, USER_AGENT};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::sync::Semaphore;
use url::Url;

use crate::DispatchError;
use crate::message;
use crate::schedule::RetryHint;
use crate::signature::{self, SigningKey};
use crate::transport::{
    Attempt, AttemptResult, EXCERPT_LIMIT, Outbound, Rejection, Transport, error_chain,
};

/// Floor for the next delay after a 429 or a timeout: the receiver is struggling.
const SLOW_DOWN: Duration = Duration::from_secs(60);
/// Sent as `user-agent`.
const AGENT: &str = concat!("switchyard/", env!("CARGO_PKG_VERSION"));
/// How long an idle pooled connection is kept.
const IDLE: Duration = Duration::from_secs(90);
const WEBHOOK_ID: HeaderName = HeaderName::from_static("webhook-id");
const WEBHOOK_TIMESTAMP: HeaderName = HeaderName::from_static("webhook-timestamp");
const WEBHOOK_SIGNATURE: HeaderName = HeaderName::from_static("webhook-signature");
const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// An HTTP endpoint runs are POSTed to.
#[derive(Debug, Clone)]
pub struct HttpTarget {
    /// `http://` or `https://` URL.
    pub url: String,
    /// Keys to sign with, one signature each; empty = unsigned (insecure_skip_signature).
    pub signing_keys: Vec<SigningKey>,
    /// Whole-request timeout (connect, send, response and the kept part of the body).
    pub timeout: Duration,
    /// Most requests in flight to this target at once.
    pub max_in_flight: usize,
    /// Treat 4xx other than 410 as retryable instead of a rejection.
    pub retry_on_4xx: bool,
}

type HttpsClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Delivers to one [`HttpTarget`].
#[derive(Debug)]
pub struct HttpTransport {
    uri: Uri,
    signing_keys: Vec<SigningKey>,
    timeout: Duration,
    retry_on_4xx: bool,
    client: HttpsClient,
    in_flight: Semaphore,
}

impl HttpTransport {
    /// Checks the target and builds its client (rustls, no redirects, TCP_NODELAY).
    pub fn new(target: HttpTarget) -> Result<Self, DispatchError> {
        let url = Url::parse(&target.url).map_err(|source| DispatchError::InvalidUrl {
            url: target.url.clone(),
            source,
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(DispatchError::UnsupportedScheme {
                scheme: url.scheme().to_owned(),
                url: target.url,
            });
        }
        if target.max_in_flight == 0 {
            return Err(DispatchError::ZeroInFlight);
        }
        let uri: Uri = url
            .as_str()
            .parse()
            .map_err(|error: hyper::http::uri::InvalidUri| {
                DispatchError::HttpClient(error.to_string())
            })?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(std::sync::Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .map_err(|error| DispatchError::HttpClient(error.to_string()))?
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(IDLE)
            .pool_timer(TokioTimer::new())
            .build(https);
        Ok(HttpTransport {
            uri,
            signing_keys: target.signing_keys,
            timeout: target.timeout,
            retry_on_4xx: target.retry_on_4xx,
            client,
            in_flight: Semaphore::new(target.max_in_flight),
        })
    }

    async fn attempt(&self, out: Outbound<'_>) -> Attempt {
        let Ok(_permit) = self.in_flight.acquire().await else {
            // The semaphore is never closed; answer rather than panic if that changes.
            return Attempt::failed(
                RetryHint::default(),
                "transport is shutting down".to_owned(),
                Duration::ZERO,
            );
        };
        let started = Instant::now();
        let request = match self.request(&out) {
            Ok(request) => request,
            Err(words) => return Attempt::failed(RetryHint::default(), words, started.elapsed()),
        };
        // One deadline for the whole attempt: the answer's head, then the kept part of its body.
        let deadline = tokio::time::Instant::now() + self.timeout;
        let response = match tokio::time::timeout_at(deadline, self.client.request(request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => {
                return Attempt::failed(
                    RetryHint::default(),
                    error_chain(&error),
                    started.elapsed(),
                );
            }
            Err(_) => {
                let hint = RetryHint {
                    at_least: Some(SLOW_DOWN),
                    ..RetryHint::default()
                };
                return Attempt::failed(hint, timed_out(self.timeout), started.elapsed());
            }
        };
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| parse_retry_after(value, SystemTime::now()));
        // A body that stops short keeps the status: the receiver has answered.
        let (excerpt, body_error) =
            read_excerpt(response.into_body(), deadline, self.timeout).await;
        Attempt {
            result: classify(status, retry_after, self.retry_on_4xx),
            status: Some(status.as_u16()),
            response_excerpt: Some(excerpt),
            error: body_error,
            duration: started.elapsed(),
        }
    }

    /// The signed POST of one attempt, or why it cannot be sent.
    fn request(&self, out: &Outbound<'_>) -> Result<Request<Full<Bytes>>, String> {
        let timestamp = unix_secs(SystemTime::now());
        let mut request = Request::new(Full::new(Bytes::copy_from_slice(out.body)));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.uri.clone();
        let headers = request.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static(message::CONTENT_TYPE),
        );
        headers.insert(USER_AGENT, HeaderValue::from_static(AGENT));
        headers.insert(WEBHOOK_TIMESTAMP, HeaderValue::from(timestamp));
        let invalid = |name: &HeaderName, error| format!("cannot send `{name}`: {error}");
        headers.insert(
            WEBHOOK_ID,
            HeaderValue::from_str(out.id).map_err(|e| invalid(&WEBHOOK_ID, e))?,
        );
        if !self.signing_keys.is_empty() {
            let signature = signature::sign(&self.signing_keys, out.id, timestamp, out.body);
            headers.insert(
                WEBHOOK_SIGNATURE,
                HeaderValue::try_from(signature).map_err(|e| invalid(&WEBHOOK_SIGNATURE, e))?,
            );
        }
        for (name, value) in [(TRACEPARENT, out.traceparent), (TRACESTATE, out.tracestate)] {
            let Some(value) = value else { continue };
            // A malformed trace header must not cost the delivery.
            match HeaderValue::from_str(value) {
                Ok(value) => {
                    headers.insert(name, value);
                }
                Err(error) => {
                    tracing::warn!(%error, id = out.id, header = %name, "A trace header is not a valid header value; sending without it.")
                }
            }
        }
        Ok(request)
    }
}

impl Transport for HttpTransport {
    fn deliver<'a>(&'a self, out: Outbound<'a>) -> BoxFuture<'a, Attempt> {
        Box::pin(self.attempt(out))
    }
}

/// Status -> what the dispatcher does next.
fn classify(
    status: StatusCode,
    retry_after: Option<Duration>,
    retry_on_4xx: bool,
) -> AttemptResult {
    let slow_down = |at_least| {
        AttemptResult::Retry(RetryHint {
            retry_after,
            at_least,
        })
    };
    match status.as_u16() {
        200..=299 => AttemptResult::Delivered,
        410 => AttemptResult::Rejected(Rejection::TargetGone),
        429 => slow_down(Some(SLOW_DOWN)),
        408 | 425 | 500..=599 => slow_down(None),
        400..=499 if retry_on_4xx => slow_down(None),
        400..=499 => AttemptResult::Rejected(Rejection::Rejected4xx),
        // 1xx that reached us as final, and 3xx: redirects are not followed.
        _ => AttemptResult::Retry(RetryHint::default()),
    }
}

/// `Retry-After` as delta seconds or an HTTP-date; a date in the past means "now" (zero).
fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    // IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") is a subset of what RFC 2822 parsing takes.
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let delta = at.timestamp().saturating_sub(unix_secs(now));
    Some(Duration::from_secs(u64::try_from(delta).unwrap_or(0)))
}

/// At most [`EXCERPT_LIMIT`] bytes of the body, read until `deadline` (the rest is never read;
/// the connection is then not reused), and why it stopped short, if it did.
async fn read_excerpt(
    mut body: hyper::body::Incoming,
    deadline: tokio::time::Instant,
    timeout: Duration,
) -> (String, Option<String>) {
    let mut kept: Vec<u8> = Vec::new();
    let mut error = None;
    while kept.len() < EXCERPT_LIMIT {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(frame))) => frame,
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                error = Some(format!("reading the response body: {}", error_chain(&e)));
                break;
            }
            Err(_) => {
                error = Some(format!("reading the response body: {}", timed_out(timeout)));
                break;
            }
        };
        if let Some(chunk) = frame.data_ref() {
            let room = EXCERPT_LIMIT - kept.len();
            kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
        }
    }
    (String::from_utf8_lossy(&kept).into_owned(), error)
}

fn timed_out(after: Duration) -> String {
    format!("timed out after {}", humantime::format_duration(after))
}

fn unix_secs(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_forms() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
    }

    #[test]
    fn classification() {
        let s = |code| StatusCode::from_u16(code).unwrap();
        let ra = Some(Duration::from_secs(3));
        assert_eq!(classify(s(201), None, false), AttemptResult::Delivered);
        assert_eq!(
            classify(s(301), ra, false),
            AttemptResult::Retry(RetryHint::default())
        );
        assert_eq!(
            classify(s(408), ra, false),
            AttemptResult::Retry(RetryHint {
                retry_after: ra,
                at_least: None
            })
        );
        assert_eq!(
            classify(s(425), None, false),
            AttemptResult::Retry(RetryHint::default())
        );
        assert_eq!(
            classify(s(410), None, true),
            AttemptResult::Rejected(Rejection::TargetGone)
        );
        assert_eq!(
            classify(s(404), None, false),
            AttemptResult::Rejected(Rejection::Rejected4xx)
        );
        assert_eq!(
            classify(s(502), ra, false),
            AttemptResult::Retry(RetryHint {
                retry_after: ra,
                at_least: None
            })
        );
    }
}
