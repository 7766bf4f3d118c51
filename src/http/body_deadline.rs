//! A deadline over the whole request body, on every route: `server.body_read_timeout` bounds
//! the total time a client takes to send a body, counted from the end of its headers, not the
//! idle time between its bytes (one byte every few seconds would reset an idle timeout for
//! ever). A body still arriving at the deadline ends in an error; the request is answered 408
//! and its connection closed, freeing the connection and whatever the request had reserved.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::response::{IntoResponse, Response};
use hyper::body::{Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::ApiError;

/// The deadline of one request's body, in its extensions, so a handler reading the body can
/// tell a missed deadline from a broken connection.
#[derive(Debug, Clone)]
pub struct BodyDeadline {
    timeout: Duration,
    at: Instant,
    missed: Arc<AtomicBool>,
}

impl BodyDeadline {
    /// Whether the body was cut off at the deadline.
    pub fn missed(&self) -> bool {
        self.missed.load(Ordering::Relaxed)
    }

    /// The 408 for a body cut off at this deadline.
    pub fn refusal(&self) -> ApiError {
        ApiError::body_timeout(self.timeout)
    }
}

/// What a body yields once its deadline has passed.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {}", humantime::format_duration(*.0))]
pub struct BodyTimedOut(Duration);

/// Wraps each request's body in its deadline, and answers 408 (with `Connection: close`) when
/// the handler ran into it, whatever the handler made of the error (an extractor says 400).
/// A body already complete (a GET, `Content-Length: 0`) costs nothing.
pub(super) async fn bound<Fut: Future<Output = Response>>(
    request: axum::extract::Request,
    timeout: Duration,
    next: impl FnOnce(axum::extract::Request) -> Fut,
) -> Response {
    if request.body().is_end_stream() {
        return next(request).await;
    }
    let deadline = BodyDeadline {
        timeout,
        at: Instant::now() + timeout,
        missed: Arc::default(),
    };
    let (mut parts, body) = request.into_parts();
    parts.extensions.insert(deadline.clone());
    let body = Body::new(DeadlineBody {
        inner: body,
        sleep: None,
        deadline: deadline.clone(),
    });
    let response = next(axum::extract::Request::from_parts(parts, body)).await;
    if deadline.missed() {
        tracing::info!(
            timeout = %humantime::format_duration(timeout),
            "a request body did not arrive in time; answering 408 and closing the connection"
        );
        return deadline.refusal().into_response();
    }
    response
}

/// A body that fails once its deadline passes.
///
/// The timer is armed only when the body first has to wait for bytes: a body that came with its
/// headers (most do) is read whole without registering one, and a frame read after the
/// deadline is refused by the clock alone (BENCHMARKS.md round 23).
struct DeadlineBody {
    inner: Body,
    /// Armed at the first wait for bytes.
    sleep: Option<Pin<Box<Sleep>>>,
    deadline: BodyDeadline,
}

impl DeadlineBody {
    /// Whether the deadline has passed: by the armed timer (which then wakes this task at the
    /// deadline), or by the clock while none is armed.
    fn passed(&mut self, cx: &mut Context<'_>) -> bool {
        match &mut self.sleep {
            Some(sleep) => sleep.as_mut().poll(cx).is_ready(),
            None => Instant::now() >= self.deadline.at,
        }
    }

    /// Marks the deadline missed and yields the error that ends the body.
    fn cut_off(&self) -> Poll<Option<Result<Frame<Bytes>, axum::BoxError>>> {
        self.deadline.missed.store(true, Ordering::Relaxed);
        Poll::Ready(Some(Err(Box::new(BodyTimedOut(self.deadline.timeout)))))
    }
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if this.passed(cx) {
            return this.cut_off();
        }
        let frame = Pin::new(&mut this.inner)
            .poll_frame(cx)
            .map_err(axum::BoxError::from);
        if frame.is_pending() && this.sleep.is_none() {
            // The first wait for bytes: arm the timer, so this task wakes at the deadline.
            let sleep = this
                .sleep
                .insert(Box::pin(tokio::time::sleep_until(this.deadline.at)));
            if sleep.as_mut().poll(cx).is_ready() {
                return this.cut_off();
            }
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A body that sends one byte, then another every `gap`, for ever.
    fn trickle(gap: Duration) -> Body {
        let stream = futures::stream::unfold((), move |()| async move {
            tokio::time::sleep(gap).await;
            Some((Ok::<_, std::io::Error>(Bytes::from_static(b"x")), ()))
        });
        Body::from_stream(stream)
    }

    fn deadline_in(timeout: Duration) -> BodyDeadline {
        BodyDeadline {
            timeout,
            at: Instant::now() + timeout,
            missed: Arc::default(),
        }
    }

    fn bounded(inner: Body, deadline: &BodyDeadline) -> DeadlineBody {
        DeadlineBody {
            inner,
            sleep: None,
            deadline: deadline.clone(),
        }
    }

    #[tokio::test]
    async fn a_trickle_is_cut_off_at_the_deadline_not_reset_by_each_byte() {
        // Each byte comes well within the timeout; the body never ends.
        let deadline = deadline_in(Duration::from_millis(300));
        let started = Instant::now();
        let body = bounded(trickle(Duration::from_millis(50)), &deadline);
        let error = body.collect().await.expect_err("cut off");
        assert!(error.is::<BodyTimedOut>(), "{error}");
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert!(deadline.missed());
    }

    #[tokio::test]
    async fn a_body_in_time_is_untouched() {
        let deadline = deadline_in(Duration::from_secs(10));
        let bytes = bounded(Body::from("whole"), &deadline)
            .collect()
            .await
            .expect("read")
            .to_bytes();
        assert_eq!(&bytes[..], b"whole");
        assert!(!deadline.missed());
    }

    #[tokio::test]
    async fn a_body_that_came_whole_arms_no_timer() {
        let deadline = deadline_in(Duration::from_secs(10));
        let mut body = std::pin::pin!(bounded(Body::from("whole"), &deadline));
        let frame = body.as_mut().frame().await.expect("a frame").expect("data");
        assert_eq!(
            frame.into_data().expect("data"),
            Bytes::from_static(b"whole")
        );
        assert!(body.as_mut().frame().await.is_none());
        assert!(body.sleep.is_none(), "no wait for bytes, no timer");
    }

    #[tokio::test]
    async fn bytes_read_after_the_deadline_are_refused_without_a_timer() {
        let deadline = deadline_in(Duration::from_millis(20));
        tokio::time::sleep(Duration::from_millis(40)).await;
        let error = bounded(Body::from("late"), &deadline)
            .collect()
            .await
            .expect_err("past the deadline");
        assert!(error.is::<BodyTimedOut>(), "{error}");
        assert!(deadline.missed());
    }
}
