//! The spans of a delivery's trace and the context each hands on.
//!
//! `intake.delivery` wraps an intake endpoint from receive to answer (a middleware, so every
//! endpoint, present or future, gets it by being measured); the context it stores travels to
//! the handler's `intake::Delivery` through a task-local. `intake.batch_commit` is a
//! writer's transaction; `dispatch.attempt` one delivery of a run to its target.

use std::cell::RefCell;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use switchyard_core::Outcome;
use switchyard_store::entities::run;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{TARGET, TraceContext, TraceParent, enabled, parse_traceparent};

tokio::task_local! {
    /// The trace context of the delivery being received on this task.
    static INCOMING: RefCell<Incoming>;
}

/// What the intake middleware knows about the delivery's trace.
#[derive(Debug, Default)]
struct Incoming {
    /// Its `intake.delivery` span (tracing on).
    span: Option<tracing::Span>,
    /// The context it arrived with (headers, or a CloudEvent's attributes through [`adopt`]).
    given: Option<(TraceContext, TraceParent)>,
    /// What it is stored with, once [`incoming`] was asked.
    stored: Option<Option<TraceContext>>,
}

impl Incoming {
    fn stored(&mut self) -> Option<TraceContext> {
        if let Some(stored) = &self.stored {
            return stored.clone();
        }
        let stored = match &self.span {
            None => self.given.as_ref().map(|(context, _)| context.clone()),
            // Starts the span: its parent can no longer change.
            Some(span) => context_of(
                span,
                self.given
                    .as_ref()
                    .and_then(|(context, _)| context.tracestate.clone()),
            ),
        };
        self.stored = Some(stored.clone());
        stored
    }
}

/// The trace context of the delivery this task is receiving, for [`Delivery::new`]: the
/// incoming one (tracing off) or the `intake.delivery` span's (tracing on); `None` outside an
/// intake endpoint or when there is none.
pub fn incoming() -> Option<TraceContext> {
    INCOMING
        .try_with(|incoming| incoming.borrow_mut().stored())
        .ok()
        .flatten()
}

/// The hook for a structured-mode CloudEvent, whose `traceparent`/`tracestate` extension
/// attributes are in its body: makes them the delivery's incoming context (the parent of its
/// span, with tracing on) unless its headers already carried one. Call it before
/// [`Delivery::new`]; an invalid `traceparent` is ignored. Whether it was adopted.
pub fn adopt(traceparent: &str, tracestate: Option<&str>) -> bool {
    INCOMING
        .try_with(|incoming| {
            let mut incoming = incoming.borrow_mut();
            if incoming.given.is_some() || incoming.stored.is_some() {
                return false;
            }
            let Some((context, parent)) = TraceContext::parse(traceparent, tracestate) else {
                return false;
            };
            if let Some(span) = &incoming.span {
                let _ = span.set_parent(remote(&parent, context.tracestate.as_deref()));
            }
            incoming.given = Some((context, parent));
            true
        })
        .unwrap_or(false)
}

/// What an answer tells the delivery span, put on the response by the intake answer.
#[derive(Debug, Clone)]
pub struct AnswerIds {
    pub intake_id: Option<String>,
    pub run_id: Option<String>,
}

/// The trace context headers of W3C Trace Context itself: `traceparent`, `tracestate`.
pub const PLAIN_TRACE_HEADERS: &[&str] = &[""];

/// Wraps one intake request of `source_kind`: reads its trace context from the first of the
/// header prefixes its channel names (`trace_headers`; [`PLAIN_TRACE_HEADERS`] for most), and
/// with tracing on runs it inside an `intake.delivery` span whose parent is that context (or,
/// without one, the root of a new trace).
pub async fn traced_intake(
    source_kind: &'static str,
    trace_headers: &'static [&'static str],
    request: Request,
    next: Next,
) -> Response {
    let given = trace_headers
        .iter()
        .find_map(|prefix| TraceContext::from_headers(request.headers(), prefix));
    if !enabled() {
        let incoming = Incoming {
            given,
            ..Incoming::default()
        };
        return INCOMING
            .scope(RefCell::new(incoming), next.run(request))
            .await;
    }
    let source = source_name(request.uri().path());
    let span = tracing::info_span!(
        target: TARGET,
        "intake.delivery",
        otel.kind = "server",
        source.kind = source_kind,
        source.name = source,
        outcome = Empty,
        intake.id = Empty,
        run.id = Empty,
        http.response.status_code = Empty,
    );
    if let Some((context, parent)) = &given {
        let _ = span.set_parent(remote(parent, context.tracestate.as_deref()));
    }
    let incoming = Incoming {
        span: Some(span.clone()),
        given,
        stored: None,
    };
    let response = INCOMING
        .scope(RefCell::new(incoming), next.run(request))
        .await;
    if let Some(outcome) = response.extensions().get::<Outcome>() {
        span.record("outcome", outcome.as_str());
    }
    if let Some(ids) = response.extensions().get::<AnswerIds>() {
        if let Some(id) = &ids.intake_id {
            span.record("intake.id", id.as_str());
        }
        if let Some(id) = &ids.run_id {
            span.record("run.id", id.as_str());
        }
    }
    span.record("http.response.status_code", response.status().as_u16());
    if response.status().is_server_error() {
        span.set_status(opentelemetry::trace::Status::error(
            "the delivery was not accepted",
        ));
    }
    response
}

/// The source name in an intake path (`/v1/ingest/<kind>/<name>`), `api` for `/v1/events`.
fn source_name(path: &str) -> &str {
    match path.strip_prefix("/v1/ingest/") {
        Some(rest) => rest.split_once('/').map_or(rest, |(_, name)| name),
        None => "api",
    }
}

/// The `intake.batch_commit` span of a writer's transaction over `size` deliveries with these
/// trace contexts, while tracing is on and one of them is in a recorded trace: a child of the
/// first recorded delivery span (so the commit shows in that trace), linking to every
/// delivery span of the batch.
pub fn batch_commit<'a>(
    size: usize,
    traces: impl IntoIterator<Item = &'a TraceContext>,
) -> Option<tracing::Span> {
    if !enabled() {
        return None;
    }
    let parents: Vec<TraceParent> = traces
        .into_iter()
        .filter_map(TraceContext::parent)
        .collect();
    let first = parents.iter().find(|parent| parent.sampled())?;
    let span = tracing::info_span!(
        target: TARGET,
        "intake.batch_commit",
        batch.size = size,
        batch.traced = parents.len(),
    );
    let _ = span.set_parent(remote(first, None));
    for parent in &parents {
        span.add_link(span_context(parent, None));
    }
    Some(span)
}

/// The context a dispatch sends, and the `dispatch.attempt` span it names while tracing is on.
#[derive(Debug)]
pub struct DispatchSpan {
    span: Option<tracing::Span>,
    /// `traceparent` to send: the attempt span's (tracing on) or the run's stored one.
    pub traceparent: Option<String>,
    /// `tracestate` to send: the run's, unchanged.
    pub tracestate: Option<String>,
}

impl DispatchSpan {
    /// Starts attempt `attempt` of `run` to `target`, in the run's trace.
    pub fn start(run: &run::Model, target: &str, attempt: i32) -> Self {
        if !enabled() {
            return Self {
                span: None,
                traceparent: run.traceparent.clone(),
                tracestate: run.tracestate.clone(),
            };
        }
        let span = tracing::info_span!(
            target: TARGET,
            "dispatch.attempt",
            otel.kind = "producer",
            dispatch.target = target,
            dispatch.attempt = attempt,
            run.id = run.id.as_str(),
            workflow.id = run.workflow_id.as_str(),
            result = Empty,
            http.response.status_code = Empty,
        );
        let stored = run
            .traceparent
            .as_deref()
            .and_then(|text| parse_traceparent(text).ok());
        if let Some(parent) = &stored {
            let _ = span.set_parent(remote(parent, run.tracestate.as_deref()));
        }
        let sent = context_of(&span, run.tracestate.clone());
        Self {
            traceparent: sent.as_ref().map(|c| c.traceparent.clone()),
            tracestate: run.tracestate.clone(),
            span: Some(span),
        }
    }

    /// Ends the attempt's span with its result (`delivered`, `retry`, a rejection, `claimed`)
    /// and the target's HTTP status, if it answered one.
    pub fn finish(self, result: &str, status: Option<u16>) {
        let Some(span) = self.span else {
            return;
        };
        span.record("result", result);
        if let Some(status) = status {
            span.record("http.response.status_code", status);
        }
        if !matches!(result, "delivered" | "claimed") {
            span.set_status(opentelemetry::trace::Status::error(result.to_owned()));
        }
    }
}

/// The W3C context naming `span`, with the `tracestate` to carry along.
fn context_of(span: &tracing::Span, tracestate: Option<String>) -> Option<TraceContext> {
    let context = span.context();
    let span_context = context.span().span_context().clone();
    if !span_context.is_valid() {
        return None;
    }
    Some(TraceContext {
        traceparent: format!(
            "00-{}-{}-{:02x}",
            span_context.trace_id(),
            span_context.span_id(),
            span_context.trace_flags().to_u8()
        ),
        tracestate,
    })
}

fn span_context(parent: &TraceParent, tracestate: Option<&str>) -> SpanContext {
    SpanContext::new(
        TraceId::from_bytes(parent.trace_id),
        SpanId::from_bytes(parent.parent_id),
        TraceFlags::new(parent.flags),
        true,
        tracestate
            .and_then(|state| state.parse::<TraceState>().ok())
            .unwrap_or_default(),
    )
}

/// A context whose current span is the remote one `parent` names.
fn remote(parent: &TraceParent, tracestate: Option<&str>) -> opentelemetry::Context {
    opentelemetry::Context::new().with_remote_span_context(span_context(parent, tracestate))
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::{INCOMING, Incoming, adopt, incoming, source_name};
    use crate::telemetry::TraceContext;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const OTHER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

    #[tokio::test]
    async fn a_cloudevents_body_context_is_adopted_unless_the_headers_gave_one() {
        let from_body = INCOMING
            .scope(RefCell::new(Incoming::default()), async {
                let adopted = adopt(VALID, Some("congo=1"));
                (adopted, incoming())
            })
            .await;
        assert!(from_body.0);
        let stored = from_body.1.expect("adopted");
        assert_eq!(stored.traceparent, VALID);
        assert_eq!(stored.tracestate.as_deref(), Some("congo=1"));

        let headers = Incoming {
            given: TraceContext::parse(OTHER, None),
            ..Incoming::default()
        };
        let from_headers = INCOMING
            .scope(RefCell::new(headers), async {
                (adopt(VALID, None), incoming())
            })
            .await;
        assert!(!from_headers.0, "the headers' context wins");
        assert_eq!(from_headers.1.expect("kept").traceparent, OTHER);

        let invalid = INCOMING
            .scope(RefCell::new(Incoming::default()), async {
                (adopt("00-zz", None), incoming())
            })
            .await;
        assert_eq!(invalid, (false, None));
        assert!(
            !adopt(VALID, None),
            "outside an intake request there is nothing to adopt"
        );
        assert_eq!(incoming(), None);
    }

    #[test]
    fn source_names_come_from_the_path() {
        assert_eq!(source_name("/v1/events"), "api");
        assert_eq!(source_name("/v1/ingest/webhook/zendesk"), "zendesk");
        assert_eq!(source_name("/v1/ingest/slack/acme"), "acme");
        assert_eq!(source_name("/v1/ingest/cloudevents/ce"), "ce");
    }
}
